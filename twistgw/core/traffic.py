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

from twistgw.api.counters import counter
from twistgw.api.headers import Headers, canonical_name
from twistgw.api.types import RequestContext
from twistgw.config.traffic import (
    CorsPolicy,
    CsrfPolicy,
    Faults,
    HeaderAdd,
    HeaderManipulation,
    LbHash,
    Redirect,
    RegexRewrite,
    RequestBuffer,
)
from twistgw.core.headers import HOP_BY_HOP, end_to_end_lines
from twistgw.core.origins import source_origin, target_origin
from twistgw.core.plan import Forward, LocalResponse, Plan

__all__ = ["HeaderLevel", "ResponseEdit", "RoutePolicy", "Weighted", "request_level", "response_edit",
           "with_added_headers", "with_edit"]

#: (canonical name, value, append)
Add = tuple[bytes, bytes, bool]


class HeaderLevel:
    """headerManipulation's request side, every level (weighted destination,
    route, virtual host) composed into one list of operations at compile
    time, Secrets resolved: each level removes, then adds (Envoy's order)."""

    __slots__ = ("ops", "names")

    def __init__(self, remove: tuple[bytes, ...], add: tuple[Add, ...]) -> None:
        #: (canonical name, value or None to remove, append)
        self.ops: tuple[tuple[bytes, bytes | None, bool], ...] = tuple(
            [(n, None, False) for n in remove] + [(n, v, a) for n, v, a in add])
        self.names = frozenset(n for n, _, _ in self.ops)

    def then(self, other: "HeaderLevel") -> "HeaderLevel":
        out = HeaderLevel((), ())
        out.ops = self.ops + other.ops
        out.names = self.names | other.names
        return out

    def on_request(self, headers: Headers) -> None:
        self.apply(headers.raw)

    def apply(self, raw: dict[bytes, list[bytes]]) -> None:
        """The operations on a request's live header dict (canonical names)."""
        for name, value, append in self.ops:
            if value is None:
                raw.pop(name, None)
            elif append:
                found = raw.get(name)
                if found is None:
                    raw[name] = [value]
                else:
                    found.append(value)
            else:
                raw[name] = [value]


class ResponseEdit:
    """What the gateway changes in a response head: the response side of
    every level composed into one (the lines to drop, the lines to add),
    so a response is passed over once.

    The engine calls :meth:`apply_to_lines` on an upstream's response head
    (its end-to-end header lines); the pipeline applies it to the gateway's
    own answers (:meth:`apply_to_local`)."""

    __slots__ = ("drop", "adds", "lines", "skip")

    def __init__(self, drop: frozenset[bytes], adds: tuple[tuple[bytes, bytes], ...],
                 lines: list[bytes] | None = None) -> None:
        #: lower-case names whose received lines are dropped
        self.drop = drop
        #: (name, value) added, in order
        self.adds = adds
        #: ``adds`` as header lines
        self.lines = lines if lines is not None else [b"%s: %s\r\n" % (n, v) for n, v in adds]
        #: what a response head's pass skips: the hop-by-hop names and ``drop``
        self.skip = HOP_BY_HOP | drop

    @classmethod
    def of_level(cls, remove: tuple[bytes, ...], add: tuple[Add, ...]) -> "ResponseEdit":
        drop = frozenset(n.lower() for n in remove) | frozenset(n.lower() for n, _, a in add if not a)
        return cls(drop, tuple((n, v) for n, v, _ in add))

    def then(self, other: "ResponseEdit") -> "ResponseEdit":
        """This edit, then ``other`` (an add of this one that ``other``
        drops is gone)."""
        kept = tuple(p for p in self.adds if p[0].lower() not in other.drop)
        return ResponseEdit(self.drop | other.drop, kept + other.adds)

    def head_lines(self, pairs: Iterable[tuple[bytes, bytes]], hop: dict[bytes, bytes]) -> list[bytes]:
        """An upstream's response head (its header pairs as received) in
        one pass: the end-to-end lines but the dropped ones, then the added
        ones (``hop`` as for :func:`twistgw.core.headers.end_to_end_lines`)."""
        lines = end_to_end_lines(pairs, hop, self.skip)
        lines.extend(self.lines)
        return lines

    def apply_to_lines(self, lines: list[bytes]) -> list[bytes]:
        drop = self.drop
        if drop:
            lines = [line for line in lines if line[:line.find(b":")].strip().lower() not in drop]
        return lines + self.lines

    def apply_to_local(self, answer: LocalResponse) -> LocalResponse:
        drop = self.drop
        headers = tuple(p for p in answer.headers if p[0].lower() not in drop) + self.adds
        return LocalResponse(answer.status, answer.body, headers, answer.content_type, answer.reason, answer.answer)


def request_level(hm: HeaderManipulation, secrets: Mapping[tuple[str, str], Any]) -> HeaderLevel:
    """A HeaderManipulation's request side; ``headerSecretRef`` resolved
    from ``secrets`` (the caller checked they exist)."""
    adds: list[Add] = []
    for a in hm.request_add:
        if isinstance(a, HeaderAdd):
            adds.append((a.name, a.value, a.append))
            continue
        secret = secrets[(a.namespace, a.name)]
        for key, value in sorted(secret.data.items()):
            adds.append((canonical_name(key), value, a.append))
    return HeaderLevel(hm.request_remove, tuple(adds))


def response_edit(hm: HeaderManipulation) -> ResponseEdit:
    return ResponseEdit.of_level(hm.response_remove, tuple((a.name, a.value, a.append) for a in hm.response_add))


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
                 "request", "response", "weighted", "early", "random", "redirect_rewrite", "_cors_tail",
                 "by_origin", "lb_hash", "retries", "shadow", "_host", "request_ops", "quick")

    def __init__(self, *, cors: CorsPolicy | None = None, csrf: CsrfPolicy | None = None,
                 faults: Faults | None = None, buffer: RequestBuffer | None = None, redirect: Redirect | None = None,
                 regex_rewrite: RegexRewrite | None = None, host_rewrite: str | None = None, auto_host: bool = False,
                 request: HeaderLevel | None = None, response: ResponseEdit | None = None,
                 weighted: Weighted | None = None, rand: Any = random.random,
                 redirect_rewrite: Any = None, lb_hash: LbHash | None = None, retries: Any = None,
                 shadow: Any = None) -> None:
        self.cors = cors
        self.csrf = csrf
        self.faults = faults
        self.buffer = buffer
        self.redirect = redirect
        self.regex_rewrite = regex_rewrite
        self.host_rewrite = host_rewrite
        self._host = [host_rewrite.encode("ascii")] if host_rewrite is not None else None
        self.auto_host = auto_host
        self.request = request
        #: ``request.ops``, or () without request header edits
        self.request_ops = request.ops if request is not None else ()
        self.response = response
        self.weighted = weighted
        #: the route's hash policies (its upstreams balance by hash)
        self.lb_hash = lb_hash
        #: the route's ``retries`` (its own, else its virtual host's): a
        #: config.retries.Retries, carried by the plan to the engine
        self.retries = retries
        #: the route's ``shadowing`` (a core.shadowing.Shadow), or None
        self.shadow = shadow
        #: something runs before the chain
        self.early = bool(csrf or faults or (buffer and buffer.max_bytes is not None))
        #: nothing runs before the chain and the plan is header edits, CORS
        #: and retries at most: core.policyplan.plan_quick's routes
        self.quick = not self.early and redirect is None and weighted is None and lb_hash is None and \
            regex_rewrite is None and host_rewrite is None and not auto_host and shadow is None
        self.random = rand
        #: the redirect's prefixRewrite as the route's matchers apply it (path → path)
        self.redirect_rewrite = redirect_rewrite
        #: the route's response edit then the CORS headers every allowed
        #: origin gets (all but its own Allow-Origin), composed once
        tail: list[tuple[bytes, bytes]] = []
        if cors is not None and cors.credentials:
            tail.append((b"Access-Control-Allow-Credentials", b"true"))
        if cors is not None and cors.expose:
            tail.append((b"Access-Control-Expose-Headers", cors.expose.encode("latin-1")))
        self._cors_tail = self.cors_after(response, tail)
        #: origin → this route's response edit for it (allowed origins only; bounded)
        self.by_origin: dict[bytes, ResponseEdit] = {}

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

    def on_request(self, raw: dict[bytes, list[bytes]], endpoint_host: str, extra: HeaderLevel | None) -> None:
        """Host rewrite and headerManipulation on the request's live header
        dict (``Headers.raw``; before the gateway sets its own X-Forwarded-*
        headers)."""
        if self._host is not None:
            raw[b"Host"] = list(self._host)
        elif self.auto_host:
            raw[b"Host"] = [endpoint_host.encode("ascii")]
        if extra is not None:
            extra.apply(raw)
        if self.request is not None:
            self.request.apply(raw)

    @staticmethod
    def cors_after(base: ResponseEdit | None, tail: list[tuple[bytes, bytes]]) -> ResponseEdit:
        edit = ResponseEdit(_CORS_DROP, tuple(tail))
        return base.then(edit) if base is not None else edit

    def response_for(self, ctx: RequestContext, base: ResponseEdit | None) -> ResponseEdit | None:
        """The response edit of this request: ``base`` (the route's, or a
        weighted destination's then the route's), then the CORS headers for
        an allowed origin."""
        if self.cors is None:
            return base
        return self.edit_for(ctx.headers.get_canonical(b"Origin"), base)

    def edit_for(self, origins: list[bytes] | None, base: ResponseEdit | None) -> ResponseEdit | None:
        """:meth:`response_for` given the request's Origin values (a CORS
        route; a request without Origin: one test)."""
        if not origins:
            return base
        cors = self.cors
        assert cors is not None
        origin = origins[0]
        if base is self.response:
            found = self.by_origin.get(origin)
            if found is not None:
                return found
        if not cors.allows(origin.decode("latin-1")):
            return base  # a disallowed origin gets no CORS headers
        composed = self._cors_tail if base is self.response else self.cors_after(base, list(self._cors_tail.adds))
        edit = ResponseEdit(composed.drop, composed.adds + ((b"Access-Control-Allow-Origin", origin),),
                            composed.lines + [b"Access-Control-Allow-Origin: %s\r\n" % origin])
        if base is self.response and len(self.by_origin) < 256:
            self.by_origin[origin] = edit  # immutable, shared by the requests of one origin
        return edit


#: the CORS headers the gateway sets (replacing any the backend sent)
_CORS_DROP = frozenset({b"access-control-allow-origin", b"access-control-allow-credentials",
                        b"access-control-expose-headers"})


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
    return LocalResponse(200, b"", tuple(out), reason=PREFLIGHT, answer=True)


#: the reason of a preflight the gateway answered
PREFLIGHT = "CORS preflight (cors)"
_MODIFYING = frozenset({"POST", "PUT", "DELETE", "PATCH"})


#: Envoy's CSRF statistics (``request_valid``, ``request_invalid``,
#: ``missing_source_origin``: a request without one counts as invalid too),
#: by whether the request was ``enforced`` or only ``shadow``-evaluated
CSRF_REQUESTS = counter("twistgw_csrf_requests", "Mutating requests the csrf option evaluated, by mode (enforced,"
                        " shadow) and Envoy's result (request_valid, request_invalid, missing_source_origin).",
                        ["mode", "result"])


def check_csrf(csrf: CsrfPolicy, ctx: RequestContext, rand: Any) -> LocalResponse | None:
    """Envoy's CSRF filter: a POST, PUT, DELETE or PATCH whose source
    origin (``Origin``, else ``Referer``, as ``host[:port]``:
    :mod:`twistgw.core.origins`) is neither the request's own (``Host``)
    nor matched by ``additionalOrigins`` is refused 403 on the enforced
    share of requests (``filterEnabled``); on the ``shadowEnabled`` share
    of the others it is only evaluated and counted."""
    if ctx.method not in _MODIFYING:
        return None
    enforced = csrf.enabled > 0 and (csrf.enabled >= 100 or rand() * 100 < csrf.enabled)
    if not enforced and not (csrf.shadow > 0 and (csrf.shadow >= 100 or rand() * 100 < csrf.shadow)):
        return None
    headers = ctx.headers
    mode = "enforced" if enforced else "shadow"
    origins, referers = headers.getRawHeaders(b"origin"), headers.getRawHeaders(b"referer")
    source = source_origin(origins, referers)
    if source is not None and (source == target_origin(headers.getRawHeaders(b"host"), ctx.scheme)
                               or any(m.matches(source) for m in csrf.origins)):
        CSRF_REQUESTS.labels(mode, "request_valid").inc()
        return None
    if not any(origins or ()) and not any(referers or ()):
        CSRF_REQUESTS.labels(mode, "missing_source_origin").inc()
    CSRF_REQUESTS.labels(mode, "request_invalid").inc()
    if not enforced:
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
    return LocalResponse(rd.code, b"", ((b"Location", location),), reason=f"redirect ({rd.code})", answer=True)


def with_edit(plan: Plan, edit: ResponseEdit) -> Plan:
    """``plan`` with ``edit`` applied last (a Gateway's ``serverName``)."""
    if isinstance(plan, Forward):
        base = plan.response_edit
        plan.response_edit = edit if base is None else base.then(edit)
        return plan
    return edit.apply_to_local(plan)


def with_added_headers(plan: Plan, added: list[tuple[bytes, bytes]]) -> Plan:
    """``plan`` with the response headers plugins added
    (``ctx.add_response_header``): after the route's response edit on a
    Forward, after the answer's own headers on a LocalResponse (a new one:
    a route's answer is shared by its requests)."""
    edit = ResponseEdit(frozenset(), tuple(added))
    if isinstance(plan, Forward):
        base = plan.response_edit
        plan.response_edit = edit if base is None else base.then(edit)
        return plan
    return edit.apply_to_local(plan)
