"""Gloo's traffic options the core reads itself (``headerManipulation``,
``cors``, ``csrf``, ``faults``, ``hostRewrite``, ``autoHostRewrite``,
``regexRewrite``, ``bufferPerRoute``) and the ``redirectAction``: each read
with the located field reader into an immutable model. The core
(:mod:`twistgw.core.traffic`) turns the models of a route and its virtual
host into what a request runs.

Field names and meanings are Gloo's (``projects/gloo/api/v1/options/...``)
and, behind them, Envoy's.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import attrs

from twistgw.api.fields import FieldReader, Path
from twistgw.config.csrf import CsrfPolicy, OriginMatcher, read_csrf
from twistgw.config.retries import read_retries
from twistgw.config.shadowing import read_shadowing
from twistgw.api.headers import InvalidHeaderName, canonical_name
from twistgw.api.durations import parse_duration
from twistgw.regex import RewriteRegex, SafeRegex, UnsafePattern

__all__ = [
    "CORE_ROUTE_ONLY", "CORE_TRAFFIC_KEYS", "CorsPolicy", "CsrfPolicy", "Faults", "HeaderAdd",
    "HashPolicy", "HeaderManipulation", "LbHash", "OriginMatcher", "Redirect", "RegexRewrite", "RequestBuffer",
    "SecretHeaders",
    "read_header_manipulation", "read_redirect", "read_traffic_option",
]


@attrs.frozen
class HeaderAdd:
    """One header to add: ``append`` adds a value, otherwise it replaces."""

    name: bytes
    value: bytes
    append: bool = True


@attrs.frozen
class SecretHeaders:
    """``headerSecretRef``: every key of the Secret's data is a header name,
    its value the header's value (Gloo's ``gloo.solo.io/header`` Secret)."""

    namespace: str
    name: str
    append: bool = True


@attrs.frozen
class HeaderManipulation:
    request_add: tuple[HeaderAdd | SecretHeaders, ...] = ()
    #: canonical names
    request_remove: tuple[bytes, ...] = ()
    response_add: tuple[HeaderAdd, ...] = ()
    response_remove: tuple[bytes, ...] = ()


@attrs.frozen
class CorsPolicy:
    """Gloo's ``CorsPolicy`` (Envoy's CORS filter)."""

    origins: tuple[str, ...] = ()
    origin_regexes: tuple[SafeRegex, ...] = ()
    methods: str = ""
    headers: str = ""
    expose: str = ""
    max_age: str = ""
    credentials: bool = False
    disable_for_route: bool = False

    def allows(self, origin: str) -> bool:
        """Envoy's rule: an exact origin, ``*``, or a full regex match."""
        return (origin in self.origins or "*" in self.origins
                or any(rx.fullmatch(origin) for rx in self.origin_regexes))


@attrs.frozen
class Faults:
    """``faults``: abort (a status) and delay, each on a percentage of requests."""

    abort_percent: float = 0.0
    abort_status: int = 0
    delay_percent: float = 0.0
    delay: float = 0.0


@attrs.frozen
class RegexRewrite:
    regex: RewriteRegex
    substitution: str

    def apply(self, path: str) -> str:
        return self.regex.sub(self.substitution, path)


@attrs.frozen
class RequestBuffer:
    """``bufferPerRoute``: the largest request body (``None``: disabled)."""

    max_bytes: int | None


@attrs.frozen
class HashPolicy:
    """One of ``lbHash.hashPolicies``: what the request's hash is made of."""

    kind: str  # "header", "cookie" or "sourceIp"
    name: str = ""
    terminal: bool = False


@attrs.frozen
class LbHash:
    """``lbHash``: the hash policies of a route (for ringHash/maglev upstreams)."""

    policies: tuple[HashPolicy, ...]


def read_lb_hash(r: FieldReader, value: Any, path: Path, ns: str) -> LbHash:
    m = r.mapping(value, path, {"hashPolicies"}, required=("hashPolicies",))
    out = []
    for i, raw in enumerate(r.sequence(m["hashPolicies"], path + ("hashPolicies",), nonempty=True)):
        p = path + ("hashPolicies", i)
        with r.part():
            h = r.mapping(raw, p, {"header", "cookie", "sourceIp", "terminal"})
            kinds = [k for k in ("header", "cookie", "sourceIp") if k in h]
            if len(kinds) != 1:
                raise r.fail(p, "set exactly one of header, cookie or sourceIp")
            terminal = r.boolean(h["terminal"], p + ("terminal",)) if h.get("terminal") is not None else False
            if kinds[0] == "header":
                text = r.string(h["header"], p + ("header",))
                try:
                    name = canonical_name(text)
                except InvalidHeaderName:
                    raise r.fail(p + ("header",), f"{text!r} is not an HTTP header name") from None
                out.append(HashPolicy("header", name.decode("ascii"), terminal))
            elif kinds[0] == "cookie":
                c = dict(r.mapping(h["cookie"], p + ("cookie",)))
                for key in ("ttl", "path"):
                    if c.pop(key, None) is not None:
                        r.issue(p + ("cookie", key), "is not supported by twistgw: the gateway does not generate"
                                " hash cookies; hash on a cookie the client already sends")
                c = r.mapping(c, p + ("cookie",), {"name"}, required=("name",))
                out.append(HashPolicy("cookie", r.string(c["name"], p + ("cookie", "name")), terminal))
            else:
                if r.boolean(h["sourceIp"], p + ("sourceIp",)):
                    out.append(HashPolicy("sourceIp", "", terminal))
    return LbHash(tuple(out))


#: Gloo's RedirectResponseCode names → status (MOVED_PERMANENTLY is the default).
REDIRECT_CODES = {"MOVED_PERMANENTLY": 301, "FOUND": 302, "SEE_OTHER": 303, "TEMPORARY_REDIRECT": 307,
                  "PERMANENT_REDIRECT": 308}


@attrs.frozen
class Redirect:
    """A route's ``redirectAction`` (Envoy's RedirectAction)."""

    host: str = ""
    port: int = 0
    path: str | None = None
    prefix: str | None = None
    https: bool = False
    code: int = 301
    strip_query: bool = False


#: Headers the gateway itself sets or frames: headerManipulation may not name them.
GATEWAY_HEADERS = frozenset({
    b"host", b"x-forwarded-for", b"x-forwarded-proto", b"x-real-ip", b"content-length", b"transfer-encoding",
    b"connection", b"keep-alive", b"upgrade", b"te", b"trailer", b"proxy-connection",
})
_FORMATTER = re.compile(r"%[A-Z_]+(\(.*?\))?%")


def _header_name(r: FieldReader, value: Any, path: Path, what: str) -> bytes:
    text = r.string(value, path)
    if text.startswith(":"):
        raise r.fail(path, f"{text!r} is a pseudo-header; Envoy and twistgw do not let {what} set it")
    try:
        name = canonical_name(text)
    except InvalidHeaderName:
        raise r.fail(path, f"{text!r} is not an HTTP header name") from None
    if name.lower() in GATEWAY_HEADERS:
        hint = " (use hostRewrite or autoHostRewrite)" if name.lower() == b"host" else ""
        raise r.fail(path, f"{text!r} is set by the gateway itself; {what} cannot change it{hint}")
    return name


def _header_value(r: FieldReader, value: Any, path: Path) -> bytes:
    text = r.string(value, path, nonempty=False)
    if _FORMATTER.search(text.replace("%%", "")):
        raise r.fail(path, "Envoy's %VARIABLE% header formatters are not supported: write a literal"
                     " value (%% for a percent sign)")
    raw = text.replace("%%", "%").encode("utf-8")
    if any(c in raw for c in b"\r\n\x00"):
        raise r.fail(path, "must not contain CR, LF or NUL")
    return raw


def _adds(r: FieldReader, value: Any, path: Path, ns: str, secrets: bool) -> list[HeaderAdd | SecretHeaders]:
    out: list[HeaderAdd | SecretHeaders] = []
    allowed = {"header", "append"} | ({"headerSecretRef"} if secrets else set())
    for i, raw in enumerate(r.sequence(value, path)):
        p = path + (i,)
        with r.part():
            m = r.mapping(raw, p, allowed)
            append = r.boolean(m["append"], p + ("append",)) if m.get("append") is not None else True
            if ("header" in m) == ("headerSecretRef" in m):
                raise r.fail(p, "set exactly one of header or headerSecretRef" if secrets else "header is required")
            if "headerSecretRef" in m:
                ref = r.mapping(m["headerSecretRef"], p + ("headerSecretRef",), {"name", "namespace"},
                                required=("name",))
                name = r.string(ref["name"], p + ("headerSecretRef", "name"))
                ref_ns = r.string(ref.get("namespace", ns), p + ("headerSecretRef", "namespace"))
                out.append(SecretHeaders(ref_ns, name, append))
                continue
            h = r.mapping(m["header"], p + ("header",), {"key", "value"}, required=("key",))
            out.append(HeaderAdd(_header_name(r, h["key"], p + ("header", "key"), "headerManipulation"),
                                 _header_value(r, h.get("value", ""), p + ("header", "value")), append))
    return out


def read_header_manipulation(r: FieldReader, value: Any, path: Path, ns: str) -> HeaderManipulation:
    m = r.mapping(value, path, {"requestHeadersToAdd", "requestHeadersToRemove", "responseHeadersToAdd",
                                "responseHeadersToRemove"})
    bad = r.count()
    req_add: list[HeaderAdd | SecretHeaders] = []
    resp_add: list[HeaderAdd] = []
    removes: dict[str, tuple[bytes, ...]] = {}
    with r.part():
        req_add = _adds(r, m.get("requestHeadersToAdd") or [], path + ("requestHeadersToAdd",), ns, True)
    with r.part():
        resp_add = [a for a in _adds(r, m.get("responseHeadersToAdd") or [], path + ("responseHeadersToAdd",),
                                     ns, False) if isinstance(a, HeaderAdd)]
    for key in ("requestHeadersToRemove", "responseHeadersToRemove"):
        names = []
        with r.part():
            for i, n in enumerate(r.sequence(m.get(key) or [], path + (key,))):
                with r.part():
                    names.append(_header_name(r, n, path + (key, i), "headerManipulation"))
        removes[key] = tuple(names)
    if r.count() > bad:
        raise r.invalid()
    return HeaderManipulation(tuple(req_add), removes["requestHeadersToRemove"], tuple(resp_add),
                              removes["responseHeadersToRemove"])


def _strings(r: FieldReader, m: dict[str, Any], key: str, path: Path) -> list[str]:
    """A list of strings that go into a header value: printable ASCII."""
    out = []
    for i, v in enumerate(r.sequence(m.get(key) or [], path + (key,))):
        text = r.string(v, path + (key, i))
        if not all(" " <= c <= "~" for c in text):
            raise r.fail(path + (key, i), "must be printable ASCII (it is sent in a header)")
        out.append(text)
    return out


def _regex(r: FieldReader, value: Any, path: Path) -> SafeRegex:
    try:
        return SafeRegex(r.string(value, path), max_program_size=None)
    except UnsafePattern as exc:
        raise r.fail(path, str(exc)) from None


def read_cors(r: FieldReader, value: Any, path: Path, ns: str) -> CorsPolicy:
    m = r.mapping(value, path, {"allowOrigin", "allowOriginRegex", "allowMethods", "allowHeaders",
                                "exposeHeaders", "maxAge", "allowCredentials", "disableForRoute"})
    origins = _strings(r, m, "allowOrigin", path)
    regexes = tuple(_regex(r, v, path + ("allowOriginRegex", i))
                    for i, v in enumerate(r.sequence(m.get("allowOriginRegex") or [], path + ("allowOriginRegex",))))
    lists = {k: ",".join(_strings(r, m, k, path)) for k in ("allowMethods", "allowHeaders", "exposeHeaders")}
    max_age = ""
    if m.get("maxAge") not in (None, ""):
        max_age = _max_age(r, m["maxAge"], path + ("maxAge",))
    flags = {k: r.boolean(m[k], path + (k,)) if m.get(k) is not None else False
             for k in ("allowCredentials", "disableForRoute")}
    return CorsPolicy(tuple(origins), regexes, lists["allowMethods"], lists["allowHeaders"], lists["exposeHeaders"],
                      max_age, flags["allowCredentials"], flags["disableForRoute"])


#: units for cors.maxAge: Gloo's guides write ``1d`` and ``2s`` as well as ``86400``
_MAX_AGE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _max_age(r: FieldReader, value: Any, path: Path) -> str:
    """``cors.maxAge`` → the whole seconds sent in ``Access-Control-Max-Age``.
    Gloo copies the string into the header as written, so its guides' ``1d``
    reaches browsers as an invalid value they ignore (falling back to 5 s);
    twistgw reads it as the duration its author meant (docs/decisions.md)."""
    text = value if isinstance(value, str) else str(value) if isinstance(value, int) and value >= 0 else None
    seconds = parse_duration(text, _MAX_AGE_UNITS) if text is not None else None
    if seconds is None or seconds != int(seconds):
        raise r.fail(path, f"must be whole seconds such as '86400' or a duration such as '1d', '10m', got {value!r}")
    return str(int(seconds))


def _percent(r: FieldReader, value: Any, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise r.fail(path, f"must be a percentage from 0 to 100, got {value!r}")
    return float(value)


def read_faults(r: FieldReader, value: Any, path: Path, ns: str) -> Faults:
    m = r.mapping(value, path, {"abort", "delay"})
    abort_pct = delay_pct = delay = 0.0
    status = 0
    if m.get("abort") is not None:
        ap = path + ("abort",)
        a = r.mapping(m["abort"], ap, {"percentage", "httpStatus"}, required=("httpStatus",))
        abort_pct = _percent(r, a.get("percentage", 0), ap + ("percentage",))
        status = r.integer(a["httpStatus"], ap + ("httpStatus",), 200, 599)
    if m.get("delay") is not None:
        dp = path + ("delay",)
        d = r.mapping(m["delay"], dp, {"percentage", "fixedDelay"}, required=("fixedDelay",))
        delay_pct = _percent(r, d.get("percentage", 0), dp + ("percentage",))
        delay = r.duration(d["fixedDelay"], dp + ("fixedDelay",))
    return Faults(abort_pct, status, delay_pct, delay)


def _rewrite_path(r: FieldReader, value: Any, path: Path) -> str:
    text = r.string(value, path)
    if not text.startswith("/"):
        raise r.fail(path, "must start with '/'")
    return text


def read_regex_rewrite(r: FieldReader, value: Any, path: Path, ns: str) -> RegexRewrite:
    m = r.mapping(value, path, {"pattern", "substitution"}, required=("pattern", "substitution"))
    pp = path + ("pattern",)
    pat = r.mapping(m["pattern"], pp, {"regex"}, required=("regex",))
    try:
        rx = RewriteRegex(r.string(pat["regex"], pp + ("regex",)), max_program_size=None)
    except UnsafePattern as exc:
        raise r.fail(pp + ("regex",), str(exc)) from None
    return RegexRewrite(rx, r.string(m["substitution"], path + ("substitution",), nonempty=False))


def read_buffer(r: FieldReader, value: Any, path: Path, ns: str) -> RequestBuffer:
    m = r.mapping(value, path, {"disabled", "buffer"})
    if m.get("disabled") is not None and r.boolean(m["disabled"], path + ("disabled",)):
        if "buffer" in m:
            raise r.fail(path, "set disabled or buffer, not both")
        return RequestBuffer(None)
    if "buffer" not in m:
        raise r.fail(path, "set buffer.maxRequestBytes (or disabled: true)")
    b = r.mapping(m["buffer"], path + ("buffer",), {"maxRequestBytes"}, required=("maxRequestBytes",))
    return RequestBuffer(r.integer(b["maxRequestBytes"], path + ("buffer", "maxRequestBytes"), 1, 1 << 32))


def _host_rewrite(r: FieldReader, value: Any, path: Path, ns: str) -> str:
    text = r.string(value, path).strip()
    if any(c in text for c in "/ \t\r\n@") or not text.isascii() or not text.isprintable():
        raise r.fail(path, f"must be a host[:port], got {text!r}")
    return text


def _auto_host(r: FieldReader, value: Any, path: Path, ns: str) -> bool:
    return r.boolean(value, path)


Reader = Callable[[FieldReader, Any, Path, str], Any]

#: The traffic options the core reads, key → reader (the model replaces the raw value).
READERS: dict[str, Reader] = {
    "headerManipulation": read_header_manipulation, "cors": read_cors, "csrf": read_csrf, "faults": read_faults,
    "hostRewrite": _host_rewrite, "autoHostRewrite": _auto_host, "regexRewrite": read_regex_rewrite,
    "bufferPerRoute": read_buffer, "lbHash": read_lb_hash, "retries": read_retries, "shadowing": read_shadowing,
}
CORE_TRAFFIC_KEYS = frozenset(READERS)
#: Of those, the ones Gloo has on routes only (a virtual host refuses them).
CORE_ROUTE_ONLY = frozenset({"faults", "hostRewrite", "autoHostRewrite", "regexRewrite", "lbHash", "shadowing"})


def read_traffic_option(r: FieldReader, key: str, value: Any, path: Path, ns: str) -> Any:
    """The model of traffic option ``key`` (one of :data:`READERS`)."""
    return READERS[key](r, value, path, ns)


def read_redirect(r: FieldReader, value: Any, path: Path) -> Redirect:
    m = dict(r.mapping(value, path))
    if m.pop("regexRewrite", None) is not None:
        r.issue(path + ("regexRewrite",), "is not supported by twistgw: redirect with pathRedirect or"
                " prefixRewrite")
    m = r.mapping(m, path, {"hostRedirect", "portRedirect", "pathRedirect", "prefixRewrite", "httpsRedirect",
                            "responseCode", "stripQuery"})
    if "pathRedirect" in m and "prefixRewrite" in m:
        raise r.fail(path, "set pathRedirect or prefixRewrite, not both (as in Gloo)")
    host = _host_rewrite(r, m["hostRedirect"], path + ("hostRedirect",), "") if "hostRedirect" in m else ""
    port = r.port(m["portRedirect"], path + ("portRedirect",)) if m.get("portRedirect") else 0
    rpath = _rewrite_path(r, m["pathRedirect"], path + ("pathRedirect",)) if "pathRedirect" in m else None
    prefix = None
    if "prefixRewrite" in m:
        prefix = r.string(m["prefixRewrite"], path + ("prefixRewrite",), nonempty=False)
        if prefix and not prefix.startswith("/"):
            raise r.fail(path + ("prefixRewrite",), "must start with '/'")
    flags = {k: r.boolean(m[k], path + (k,)) if m.get(k) is not None else False
             for k in ("httpsRedirect", "stripQuery")}
    code = REDIRECT_CODES[r.choice(m.get("responseCode", "MOVED_PERMANENTLY"), path + ("responseCode",),
                                   REDIRECT_CODES, "response code")]
    return Redirect(host, port, rpath, prefix, flags["httpsRedirect"], code, flags["stripQuery"])
