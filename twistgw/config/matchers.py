"""Route matchers as Gloo Edge defines them (pure: no I/O, no reactor).

A route lists ``matchers``; the route matches when **any** of them does
(OR). One matcher matches when **every** condition it sets holds (AND):

* a path condition, one of ``prefix`` (string prefix), ``exact`` or
  ``regex`` (RE2; the whole path must match; linear time, see
  :mod:`twistgw.regex`); none means ``prefix: /``;
* ``caseSensitive`` (default true) for ``prefix`` and ``exact``; like Envoy
  it does not apply to ``regex``;
* ``headers``: ``{name, value, regex, invertMatch}`` each — no ``value``
  means "present"; ``invertMatch`` negates the result (so ``name`` alone
  with ``invertMatch: true`` means "absent"). Repeated headers are joined
  with ``,`` as Envoy does. ``:authority``, ``:method``, ``:path`` and
  ``:scheme`` read the host, method, path and scheme;
* ``queryParameters``: ``{name, value, regex}`` each — no ``value`` means
  "present"; the first occurrence of the parameter is compared;
* ``methods``: the request method must be one of them.
"""

from __future__ import annotations

from typing import Any, Iterable
from urllib.parse import parse_qsl

import attrs

from twistgw.api.fields import FieldReader, Path
from twistgw.api.headers import canonical_name
from twistgw.api.types import RequestContext
from twistgw.config.names import FORWARDING, METHOD_OVERRIDE
from twistgw.regex import SafeRegex, UnsafePattern

__all__ = ["HeaderMatch", "Matcher", "QueryMatch", "RequestView", "parse_matcher"]

MATCHER_FIELDS = frozenset({"prefix", "exact", "regex", "caseSensitive", "headers", "queryParameters", "methods"})
_PSEUDO = frozenset({":authority", ":method", ":path", ":scheme"})


@attrs.frozen
class RequestView:
    """What a matcher may read of a request: kept small so routing stays pure."""

    method: str
    path: str
    # Any object with ``getRawHeaders`` (twistgw's or Twisted's Headers: the
    # engine's type is not the config layer's to name), or None.
    headers: Any = None
    query: bytes = b""
    host: str = ""
    scheme: str = "http"
    #: the headers as the client sent them (see RequestContext.received_headers)
    received_headers: Any = None
    owned_headers: tuple[bytes, ...] = ()


@attrs.frozen
class HeaderMatch:
    """One header condition. The header is read from the request as it
    will be forwarded (plugins may have set it), else as the client sent it:
    a header the gateway strips before routing (``Upgrade``, ``Connection``,
    ``Content-Length``, one ``Connection`` names...) still matches, so a
    route guarded by it is never skipped. Plugin-owned headers are read only
    as the plugin set them."""

    name: str
    value: str | None = None
    regex: SafeRegex | None = attrs.field(default=None, eq=False)
    invert: bool = False
    #: the name in canonical case (compared with the owned headers)
    canonical: bytes = attrs.field(init=False, eq=False)

    @canonical.default
    def _canonical(self) -> bytes:
        return canonical_name(self.name) if not self.name.startswith(":") else b""

    def _actual(self, req: RequestView | RequestContext) -> str | None:
        if self.name in _PSEUDO:
            return {":authority": req.host, ":method": req.method, ":path": req.path,
                    ":scheme": req.scheme}[self.name]
        values = req.headers.getRawHeaders(self.name) if req.headers is not None else None
        if not values and req.received_headers is not None and self.canonical not in req.owned_headers:
            values = req.received_headers.getRawHeaders(self.name)
        if not values:
            return None
        return ",".join(v.decode("latin-1") if isinstance(v, bytes) else v for v in values)

    def matches(self, req: RequestView | RequestContext) -> bool:
        actual = self._actual(req)
        if actual is None:
            found = False
        elif self.regex is not None:
            found = self.regex.fullmatch(actual)
        elif self.value is not None:
            found = actual == self.value
        else:
            found = True
        return found != self.invert


@attrs.frozen
class QueryMatch:
    name: str
    value: str | None = None
    regex: SafeRegex | None = attrs.field(default=None, eq=False)

    def matches(self, params: dict[str, str]) -> bool:
        actual = params.get(self.name)
        if actual is None:
            return False
        if self.regex is not None:
            return self.regex.fullmatch(actual)
        return self.value is None or actual == self.value


@attrs.frozen
class Matcher:
    """One entry of a route's ``matchers``."""

    prefix: str | None = None
    exact: str | None = None
    regex: SafeRegex | None = attrs.field(default=None, eq=False)
    regex_source: str | None = None
    case_sensitive: bool = True
    methods: tuple[str, ...] = ()
    headers: tuple[HeaderMatch, ...] = ()
    query: tuple[QueryMatch, ...] = ()

    @property
    def path_text(self) -> str:
        """The path condition as written (``/api``), for messages and prefix checks."""
        if self.exact is not None:
            return self.exact
        if self.regex_source is not None:
            return self.regex_source
        return self.prefix if self.prefix is not None else "/"

    @property
    def kind(self) -> str:
        return "exact" if self.exact is not None else "regex" if self.regex is not None else "prefix"

    def matches_path(self, path: str) -> bool:
        if self.regex is not None:
            return self.regex.fullmatch(path)
        if not self.case_sensitive:
            path = path.lower()
        if self.exact is not None:
            return path == self.exact
        return path.startswith(self.prefix or "/")

    def matches(self, req: RequestView, params: dict[str, str] | None = None) -> bool:
        if self.methods and req.method not in self.methods:
            return False
        if not self.matches_path(req.path):
            return False
        for h in self.headers:
            if not h.matches(req):
                return False
        if self.query:
            if params is None:
                params = query_params(req.query)
            for q in self.query:
                if not q.matches(params):
                    return False
        return True

    def describe(self) -> str:
        out = f"{self.kind} {self.path_text}"
        if not self.case_sensitive:
            out += " (case-insensitive)"
        if self.methods:
            out += f" methods {','.join(self.methods)}"
        for h in self.headers:
            cond = "present" if h.value is None else (f"~ {h.value}" if h.regex else f"= {h.value}")
            out += f" header {h.name} {'not ' if h.invert else ''}{cond}"
        for q in self.query:
            cond = "present" if q.value is None else (f"~ {q.value}" if q.regex else f"= {q.value}")
            out += f" query {q.name} {cond}"
        return out


def query_params(query: bytes) -> dict[str, str]:
    """The first value of each query parameter, decoded."""
    out: dict[str, str] = {}
    for k, v in parse_qsl(query.decode("latin-1"), keep_blank_values=True, encoding="latin-1"):
        out.setdefault(k, v)
    return out


def any_matches(matchers: Iterable[Matcher], req: RequestView) -> bool:
    params = None
    for m in matchers:
        if m.query and params is None:
            params = query_params(req.query)
        if m.matches(req, params):
            return True
    return False


# ---------------------------------------------------------------------------
# Reading matchers from YAML (``r``: the located field reader)
# ---------------------------------------------------------------------------


def _safe_regex(r: FieldReader, pattern: str, path: Path) -> SafeRegex:
    # The program size is checked against Settings once every document is
    # read (config.resolution.check_regex_sizes).
    try:
        return SafeRegex(pattern, max_program_size=None)
    except UnsafePattern as exc:
        raise r.fail(path, f"{exc} (RE2 syntax, as in Gloo and Envoy)") from None


def parse_matcher(r: FieldReader, raw: Any, mp: Path) -> Matcher:
    """One matcher; every problem in it is recorded before giving up."""
    mm = dict(r.mapping(raw, mp))
    if mm.pop("connectMatcher", None) is not None:
        r.issue(mp + ("connectMatcher",), "is not supported by twistgw: CONNECT requests are not proxied (a reverse"
                " proxy has no tunnel target)")
    mm = r.mapping(mm, mp, set(MATCHER_FIELDS))
    bad = r.count()
    kinds = [k for k in ("prefix", "exact", "regex") if k in mm]
    if len(kinds) > 1:
        r.issue(mp, f"set at most one of prefix, exact or regex, got {' and '.join(kinds)}")
    case = True
    with r.part():
        if "caseSensitive" in mm:
            case = r.boolean(mm["caseSensitive"], mp + ("caseSensitive",))
    prefix = exact = source = None
    regex = None
    with r.part():
        if "exact" in mm:
            exact = r.string(mm["exact"], mp + ("exact",))
            if not exact.startswith("/"):
                r.issue(mp + ("exact",), "must start with '/'")
        elif "regex" in mm:
            source = r.string(mm["regex"], mp + ("regex",))
            regex = _safe_regex(r, source, mp + ("regex",))
        else:
            prefix = r.string(mm.get("prefix", "/"), mp + ("prefix",))
            if not prefix.startswith("/"):
                r.issue(mp + ("prefix",), "must start with '/'")
    methods: list[str] = []
    with r.part():
        for k, x in enumerate(r.sequence(mm.get("methods", []), mp + ("methods",))):
            with r.part():
                m = r.string(x, mp + ("methods", k))
                if m != m.upper() or not m.isalpha():
                    r.issue(mp + ("methods", k), f"must be an HTTP method in capitals such as GET, got {m!r}")
                methods.append(m)
    headers: list[HeaderMatch] = []
    with r.part():
        for k, h in enumerate(r.sequence(mm.get("headers", []), mp + ("headers",))):
            with r.part():
                headers.append(_header(r, h, mp + ("headers", k)))
    query: list[QueryMatch] = []
    with r.part():
        for k, q in enumerate(r.sequence(mm.get("queryParameters", []), mp + ("queryParameters",))):
            with r.part():
                query.append(_query(r, q, mp + ("queryParameters", k)))
    if r.count() > bad:
        raise r.invalid()
    if not case:
        prefix = prefix.lower() if prefix is not None else None
        exact = exact.lower() if exact is not None else None
    return Matcher(prefix, exact, regex, source, case, tuple(methods), tuple(headers), tuple(query))


def _value_and_regex(r: FieldReader, m: dict[str, Any], p: Path) -> tuple[str | None, SafeRegex | None]:
    value = None
    if "value" in m:
        value = r.string(m["value"], p + ("value",), nonempty=False)
    is_regex = r.boolean(m.get("regex", False), p + ("regex",))
    if is_regex:
        if value is None:
            raise r.fail(p + ("regex",), "regex: true needs a value (the pattern)")
        return value, _safe_regex(r, value, p + ("value",))
    return (value if value != "" else None), None


def _header(r: FieldReader, raw: Any, p: Path) -> HeaderMatch:
    h = r.mapping(raw, p, {"name", "value", "regex", "invertMatch"}, required=("name",))
    name = r.string(h["name"], p + ("name",)).lower()
    if not name.startswith(":") and not all(c.isascii() and (c.isalnum() or c in "-_.!#$%&'*+^`|~") for c in name):
        raise r.fail(p + ("name",), f"{name!r} is not a valid header name")
    if name.startswith(":") and name not in _PSEUDO:
        raise r.fail(p + ("name",), f"unknown pseudo-header {name!r} (known: {', '.join(sorted(_PSEUDO))})")
    if name.encode("ascii") in FORWARDING or name.encode("ascii") in METHOD_OVERRIDE:
        raise r.fail(p + ("name",), f"{name!r} is a header the gateway never takes from a client (it"
                     " states forwarding facts itself, and judges the request's real method): a route"
                     " cannot match on it; match on :authority, the method, or a header a plugin sets")
    value, regex = _value_and_regex(r, h, p)
    invert = r.boolean(h.get("invertMatch", False), p + ("invertMatch",))
    return HeaderMatch(name, value, regex, invert)


def _query(r: FieldReader, raw: Any, p: Path) -> QueryMatch:
    q = r.mapping(raw, p, {"name", "value", "regex"}, required=("name",))
    name = r.string(q["name"], p + ("name",))
    value, regex = _value_and_regex(r, q, p)
    return QueryMatch(name, value, regex)
