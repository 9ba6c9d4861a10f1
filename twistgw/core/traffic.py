"""A route's traffic policy, compiled once per snapshot and run per request
without I/O: what Gloo's ``faults``, ``cors``, ``csrf``, ``redirectAction``,
``hostRewrite``/``autoHostRewrite``, ``regexRewrite``, ``headerManipulation``,
``bufferPerRoute`` and weighted destinations do.

A route with none of them has no :class:`RoutePolicy` (``RouteRuntime.policy``
is None): the plain route pays one attribute test.

Where each runs in a request (Gloo's filter stages, Envoy's filters):

1. before the plugin chain: ``faults`` (delay, then abort), a CORS
   **preflight** answered (a browser sends no credentials on one, so it
   must not meet authentication), ``csrf`` (a mutating request from another
   origin refused 403), ``bufferPerRoute`` (a declared body over the bound:
   413);
2. the chain (authentication, authorization);
3. the plan: ``redirectAction`` answered; the weighted destination picked;
   the path rewritten (``regexRewrite``); ``Host`` rewritten; request
   headers changed (weighted destination, then route, then virtual host, as
   Envoy applies them: for a header set on two levels, the virtual host's
   value wins; ``append`` adds); then the gateway's own ``X-Forwarded-*``;
4. the response: the route's response headers and, for an allowed CORS
   origin, ``Access-Control-Allow-Origin`` and friends
   (:class:`ResponseEdit`, applied to the gateway's own answers here and to
   an upstream's response head by the engine).
"""

from __future__ import annotations

import bisect
import random
from typing import Any, Iterable, Mapping

from twisted.internet.defer import Deferred

from twistgw.api.headers import Headers
from twistgw.api.types import RequestContext
from twistgw.config.traffic import (
    CorsPolicy,
    CsrfPolicy,
    Faults,
    HeaderAdd,
    HeaderManipulation,
    Redirect,
    RegexRewrite,
    RequestBuffer,
)
from twistgw.core.plan import LocalResponse

__all__ = ["HeaderLevel", "ResponseEdit", "RoutePolicy", "Weighted"]

#: (canonical name, value, append)
Add = tuple[bytes, bytes, bool]


class HeaderLevel:
    """One level of headerManipulation (virtual host, route or weighted
    destination), Secrets resolved: removals first, then additions (Envoy)."""

    __slots__ = ("remove", "add", "_remove_lower")

    def __init__(self, remove: tuple[bytes, ...], add: tuple[Add, ...]) -> None:
        self.remove = remove
        self.add = add
        self._remove_lower = frozenset(n.lower() for n in remove) | frozenset(
            n.lower() for n, _, append in add if not append)

    def on_request(self, headers: Headers) -> None:
        for name in self.remove:
            headers.removeHeader(name)
        for name, value, append in self.add:
            if append:
                headers.addRawHeader(name, value)
            else:
                headers.setRawHeaders(name, [value])

    def on_lines(self, lines: list[bytes]) -> list[bytes]:
        """A response head's ``b"Name: value\\r\\n"`` lines changed."""
        if self._remove_lower:
            drop = self._remove_lower
            lines = [line for line in lines if line.split(b":", 1)[0].strip().lower() not in drop]
        return lines + [b"%s: %s\r\n" % (name, value) for name, value, _ in self.add]

    def on_pairs(self, pairs: tuple[tuple[bytes, bytes], ...]) -> tuple[tuple[bytes, bytes], ...]:
        drop = self._remove_lower
        kept = tuple(p for p in pairs if p[0].lower() not in drop)
        return kept + tuple((name, value) for name, value, _ in self.add)


class ResponseEdit:
    """What the gateway changes in a response head, level by level.

    The engine calls :meth:`apply_to_lines` on an upstream's response head
    (its end-to-end header lines); the pipeline applies it to the gateway's
    own answers (:meth:`apply_to_local`)."""

    __slots__ = ("levels",)

    def __init__(self, levels: tuple[HeaderLevel, ...]) -> None:
        self.levels = levels

    def apply_to_lines(self, lines: list[bytes]) -> list[bytes]:
        for level in self.levels:
            lines = level.on_lines(lines)
        return lines

    def apply_to_local(self, answer: LocalResponse) -> LocalResponse:
        headers = answer.headers
        for level in self.levels:
            headers = level.on_pairs(headers)
        return LocalResponse(answer.status, answer.body, headers, answer.content_type, answer.reason)

    def plus(self, level: HeaderLevel) -> "ResponseEdit":
        return ResponseEdit(self.levels + (level,))


def level_of(hm: HeaderManipulation, secrets: Mapping[tuple[str, str], Any], response: bool) -> HeaderLevel:
    """A HeaderManipulation's request (or response) side as a level;
    ``headerSecretRef`` resolved from ``secrets`` (the caller checked they exist)."""
    if response:
        return HeaderLevel(hm.response_remove, tuple((a.name, a.value, a.append) for a in hm.response_add))
    adds: list[Add] = []
    for a in hm.request_add:
        if isinstance(a, HeaderAdd):
            adds.append((a.name, a.value, a.append))
            continue
        secret = secrets[(a.namespace, a.name)]
        for key, value in sorted(secret.data.items()):
            adds.append((key.encode("ascii").title(), value, a.append))
    return HeaderLevel(hm.request_remove, tuple(adds))


class Weighted:
    """Weighted destinations: one picked at random in proportion to its weight."""

    __slots__ = ("cumulative", "total", "choices")

    def __init__(self, choices: Iterable[tuple[int, Any, HeaderLevel | None, ResponseEdit | None]]) -> None:
        self.cumulative: list[int] = []
        #: (balancer, request level, response edit) per destination with a weight
        self.choices: list[tuple[Any, HeaderLevel | None, ResponseEdit | None]] = []
        total = 0
        for weight, balancer, request, response in choices:
            if weight <= 0:
                continue
            total += weight
            self.cumulative.append(total)
            self.choices.append((balancer, request, response))
        self.total = total

    def pick(self, rand: float) -> tuple[Any, HeaderLevel | None, ResponseEdit | None]:
        return self.choices[bisect.bisect_right(self.cumulative, int(rand * self.total))]


class RoutePolicy:
    """The traffic options of one route (its own over its virtual host's),
    compiled; see the module's docstring for where each runs."""

    __slots__ = ("cors", "csrf", "faults", "buffer", "redirect", "regex_rewrite", "host_rewrite", "auto_host",
                 "request_levels", "response", "weighted", "early", "random", "redirect_rewrite")

    def __init__(self, *, cors: CorsPolicy | None = None, csrf: CsrfPolicy | None = None,
                 faults: Faults | None = None, buffer: RequestBuffer | None = None, redirect: Redirect | None = None,
                 regex_rewrite: RegexRewrite | None = None, host_rewrite: str | None = None, auto_host: bool = False,
                 request_levels: tuple[HeaderLevel, ...] = (), response: ResponseEdit | None = None,
                 weighted: Weighted | None = None, rand: Any = random.random,
                 redirect_rewrite: Any = None) -> None:
        self.cors = cors
        self.csrf = csrf
        self.faults = faults
        self.buffer = buffer
        self.redirect = redirect
        self.regex_rewrite = regex_rewrite
        self.host_rewrite = host_rewrite
        self.auto_host = auto_host
        self.request_levels = request_levels
        self.response = response
        self.weighted = weighted
        #: something runs before the chain
        self.early = bool(cors or csrf or faults or (buffer and buffer.max_bytes is not None))
        self.random = rand
        #: the redirect's prefixRewrite as the route's matchers apply it (path → path)
        self.redirect_rewrite = redirect_rewrite

    # -- before the chain ---------------------------------------------------

    def before_chain(self, ctx: RequestContext, received: Any) -> LocalResponse | Deferred[LocalResponse | None] | None:
        """An answer that ends the request before the chain, a Deferred of
        one (a fault delay), or None to go on.

        :param received: the request headers as received (framing headers
            such as Content-Length included)."""
        faults = self.faults
        if faults is not None:
            if faults.delay_percent and ctx.reactor is not None and not ctx.dry_run and \
                    self.random() * 100 < faults.delay_percent:
                d: Deferred[LocalResponse | None] = Deferred()
                ctx.reactor.callLater(faults.delay, d.callback, None)
                return d.addCallback(lambda _: self._after_delay(ctx, received))
            if faults.abort_percent and self.random() * 100 < faults.abort_percent:
                return _abort(faults.abort_status)
        return self._after_faults(ctx, received)

    def _after_delay(self, ctx: RequestContext, received: Any) -> LocalResponse | None:
        faults = self.faults
        if faults is not None and faults.abort_percent and self.random() * 100 < faults.abort_percent:
            return _abort(faults.abort_status)
        return self._after_faults(ctx, received)

    def _after_faults(self, ctx: RequestContext, received: Any) -> LocalResponse | None:
        if self.cors is not None and ctx.method == "OPTIONS":
            answer = preflight(self.cors, ctx.headers)
            if answer is not None:
                return answer
        if self.csrf is not None:
            answer = check_csrf(self.csrf, ctx, self.random)
            if answer is not None:
                return answer
        buffer = self.buffer
        if buffer is not None and buffer.max_bytes is not None:
            length = received.getRawHeaders(b"content-length")
            if length and length[0].isdigit() and int(length[0]) > buffer.max_bytes:
                return LocalResponse(413, b"Payload Too Large", reason=f"the request body is over bufferPerRoute's"
                                     f" maxRequestBytes ({buffer.max_bytes})")
        return None

    # -- the plan -----------------------------------------------------------

    def redirect_answer(self, ctx: RequestContext) -> LocalResponse:
        assert self.redirect is not None
        return redirect_response(self.redirect, ctx, self.redirect_rewrite)

    def rewrite_path(self, path: str) -> str:
        rw = self.regex_rewrite
        return rw.apply(path) if rw is not None else path

    def on_request(self, headers: Headers, endpoint_host: str, extra: HeaderLevel | None) -> None:
        """Host rewrite and headerManipulation on the request headers
        (before the gateway sets its own X-Forwarded-* headers)."""
        if self.host_rewrite is not None:
            headers.setRawHeaders(b"Host", [self.host_rewrite.encode("ascii")])
        elif self.auto_host:
            headers.setRawHeaders(b"Host", [endpoint_host.encode("ascii")])
        if extra is not None:
            extra.on_request(headers)
        for level in self.request_levels:
            level.on_request(headers)

    def response_for(self, ctx: RequestContext, base: ResponseEdit | None) -> ResponseEdit | None:
        """The response edit of this request: the route's levels, plus the
        CORS headers for an allowed origin."""
        cors = self.cors
        if cors is None:
            return base
        origins = ctx.headers.getRawHeaders(b"origin")
        if not origins:
            return base
        origin = origins[0].decode("latin-1")
        if not cors.allows(origin):
            return base  # a disallowed origin gets no CORS headers
        adds: list[Add] = [(b"Access-Control-Allow-Origin", origins[0], False)]
        if cors.credentials:
            adds.append((b"Access-Control-Allow-Credentials", b"true", False))
        if cors.expose:
            adds.append((b"Access-Control-Expose-Headers", cors.expose.encode("latin-1"), False))
        level = HeaderLevel((), tuple(adds))
        return base.plus(level) if base is not None else ResponseEdit((level,))


def _abort(status: int) -> LocalResponse:
    return LocalResponse(status, b"fault filter abort", reason="fault injection (faults.abort)")


def preflight(cors: CorsPolicy, headers: Headers) -> LocalResponse | None:
    """Envoy's CORS filter on an OPTIONS request: a preflight (Origin and
    Access-Control-Request-Method present) from an allowed origin is
    answered 200 here; anything else goes on (a disallowed origin gets no
    CORS headers)."""
    origins = headers.getRawHeaders(b"origin")
    method = headers.getRawHeaders(b"access-control-request-method")
    if not origins or not method or not origins[0] or not method[0]:
        return None
    if not cors.allows(origins[0].decode("latin-1")):
        return None
    out = [(b"Access-Control-Allow-Origin", origins[0])]
    if cors.credentials:
        out.append((b"Access-Control-Allow-Credentials", b"true"))
    if cors.methods:
        out.append((b"Access-Control-Allow-Methods", cors.methods.encode("latin-1")))
    if cors.headers:
        out.append((b"Access-Control-Allow-Headers", cors.headers.encode("latin-1")))
    if cors.max_age:
        out.append((b"Access-Control-Max-Age", cors.max_age.encode("ascii")))
    return LocalResponse(200, b"", tuple(out), reason=PREFLIGHT)


#: the reason of a preflight the gateway answered
PREFLIGHT = "CORS preflight (cors)"
_MODIFYING = frozenset({"POST", "PUT", "DELETE", "PATCH"})


def _host_and_port(url: bytes) -> str:
    """The authority of an Origin or Referer value (``https://a.example:8443/x`` → ``a.example:8443``)."""
    text = url.decode("latin-1")
    if "://" in text:
        text = text.split("://", 1)[1]
    return text.split("/", 1)[0].lower()


def check_csrf(csrf: CsrfPolicy, ctx: RequestContext, rand: Any) -> LocalResponse | None:
    """Envoy's CSRF filter: a POST, PUT, DELETE or PATCH whose Origin (else
    Referer) is neither the request's own host nor one of
    ``additionalOrigins`` is refused 403 on the enforced share of requests
    (``filterEnabled``); ``shadowEnabled`` alone only evaluates."""
    if ctx.method not in _MODIFYING:
        return None
    enforced = csrf.enabled > 0 and (csrf.enabled >= 100 or rand() * 100 < csrf.enabled)
    if not enforced:
        return None
    source = ctx.headers.getRawHeaders(b"origin") or ctx.headers.getRawHeaders(b"referer")
    valid = False
    if source and source[0] and source[0] != b"null":
        origin = _host_and_port(source[0])
        valid = origin == ctx.host.lower() or any(m.matches(source[0].decode("latin-1")) for m in csrf.origins)
    if valid:
        return None
    return LocalResponse(403, b"Invalid origin", reason="csrf: the request's origin is not allowed")


def redirect_response(rd: Redirect, ctx: RequestContext, prefix_rewrite: Any) -> LocalResponse:
    """Envoy's RedirectAction: the request's URL with the parts it names swapped."""
    scheme = "https" if rd.https else ctx.scheme
    host = rd.host or ctx.host
    hosts = ctx.headers.getRawHeaders(b"host")
    port = ""
    if not rd.host and hosts:
        raw = hosts[0].decode("latin-1")
        if raw.rsplit(":", 1)[-1].isdigit() and not raw.endswith("]"):
            port = raw.rsplit(":", 1)[1]
    if rd.port:
        port = str(rd.port)
    elif rd.https and port in ("80", "443"):
        port = ""  # the old scheme's default port does not follow to https
    authority = host + (":" + port if port else "")
    if rd.path is not None:
        path = rd.path
    elif rd.prefix is not None:
        path = prefix_rewrite(ctx.path)
    else:
        path = ctx.path
    query = b"" if rd.strip_query or "?" in path else ctx.query
    location = f"{scheme}://{authority}{path}".encode("latin-1") + (b"?" + query if query else b"")
    return LocalResponse(rd.code, b"", ((b"Location", location),), reason=f"redirect ({rd.code})")
