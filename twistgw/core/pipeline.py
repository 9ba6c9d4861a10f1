"""The request pipeline: what the gateway does with a request, decided
without I/O. The server, ``twistgw explain`` and :class:`twistgw.sdk.testing.ChainTester`
all call :meth:`Pipeline.handle`, so what they show is what is done.

``handle(head, snapshot)`` normalises the target, picks the virtual service
and route, runs the route's plugin chain and returns a *plan*:

* :class:`LocalResponse`: the gateway answers itself (a bad request, no
  route, a plugin's refusal, a direct response, no healthy upstream);
* :class:`Forward`: send ``method target`` with ``headers`` to ``endpoint``
  and wait at most ``timeout`` seconds for the answer.

(``Upgrade`` and ``Connection`` are hop-by-hop: the planned headers never
carry them. For a request that asked to upgrade, e.g. to WebSocket, the
engine adds them to the forwarded request once the chain admitted it, and
splices the connections on the upstream's ``101``; see ``docs/engine.md``.)
"""

from __future__ import annotations

from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twistgw.api.headers import Headers
from twistgw.api.types import Allow, Deny, RequestContext
from twistgw.api.views import RouteView
from twistgw.config.defaults import UPSTREAM_TIMEOUT
from twistgw.config.model import Route, VirtualService
from twistgw.core.chain import Call, Trace, start_calls
from twistgw.core.headers import copy_request_headers
from twistgw.core.paths import BadPath, normalise_path
from twistgw.core.requestid import request_id
from twistgw.core.plan import Forward, LocalResponse, Plan, RetryingForward
from twistgw.core.routing import HostTable, first_route
from twistgw.core.gateways import GatewayView, forwarded
from twistgw.core.routeruntime import RouteRuntime
from twistgw.core.snapshot import Snapshot
from twistgw.core.policyplan import OWN_RULE as _OWN_RULE, cors_on, forwarding, no_endpoint, plan_policy, plan_quick
from twistgw.core.tracing import Started
from twistgw.core.traffic import RoutePolicy, preflight, with_added_headers, with_edit

NOT_FOUND = LocalResponse(404, reason="no virtual service or route matches")
NOT_READY = LocalResponse(503, b"no configuration loaded", reason="no configuration loaded")
INTERNAL_ERROR = LocalResponse(500, b"Internal Server Error", reason="unexpected error")


def bad_request(reason: str) -> LocalResponse:
    return LocalResponse(400, f"Bad Request: {reason}\n".encode(), reason=reason)


class RequestHead:
    """A request as the pipeline needs it: no body, no connection.

    :ivar headers: the request headers as received (any object with
        ``getRawHeaders`` and ``getAllRawHeaders``, names in canonical case:
        Twisted's or twistgw's ``Headers``).
    :ivar ctx: set by :meth:`Pipeline.handle` once a route is found (so the
        access log has it even while plugins are still deciding).
    :ivar runtime: the matched route's compiled chain and target, likewise.
    :ivar version: the request line's HTTP version (``b"HTTP/1.0"`` may omit
        ``Host``; HTTP/1.1 may not).
    :ivar hosts: the ``Host`` table to route by: the virtual services of the
        certificate a TLS connection was given (see
        :mod:`twistgw.core.tlsroutes`); None: the snapshot's plain one.
    :ivar body: where plugins may read the request body before deciding
        (``ctx.body_source``, a :class:`twistgw.api.types.BodySource`), or
        None for a request without a body.
    :ivar gateway: the :class:`~twistgw.core.gateways.GatewayView` of the
        Gloo Gateway whose listener received the request, or None.
    :ivar request_id: the ``x-request-id`` the request goes upstream with
        (``str``), set by :func:`prepare` on a Gateway that generates them
        (``generateRequestId``, Envoy's default), before routing: a 404 has
        one too; None elsewhere.
    """

    __slots__ = ("method", "target", "headers", "client_address", "scheme", "ctx", "runtime", "version",
                 "hosts", "body", "gateway", "forwarded_for", "request_id", "trace")

    #: the request's :class:`~twistgw.core.tracing.Started` trace, set only
    #: on a Gateway that traces (unset otherwise: no store per request)
    trace: Started

    def __init__(self, method: bytes, target: bytes, headers: Any, client_address: str = "",
                 scheme: str = "http", version: bytes = b"HTTP/1.1", body: Any = None) -> None:
        self.body = body
        self.method = method
        self.target = target
        self.headers = headers
        self.client_address = client_address
        self.scheme = scheme
        self.version = version
        self.ctx: RequestContext | None = None
        self.runtime: RouteRuntime | None = None
        self.hosts: HostTable | None = None
        #: the Gloo Gateway whose listener received it (None: a --listen one)
        self.gateway: GatewayView | None = None
        #: X-Forwarded-For to send under the Gateway's Envoy rules (None:
        #: none; unset: twistgw's own rule, the client address)
        self.forwarded_for: bytes | None | object = _OWN_RULE
        self.request_id: str | None = None


@attrs.define
class Prepared:
    ctx: RequestContext
    runtime: RouteRuntime


def split_target(target: bytes) -> tuple[bytes | None, bytes, bytes]:
    """``(authority or None, path, query)`` of an origin- or absolute-form target."""
    authority = None
    lowered = target[:8].lower()
    if lowered.startswith(b"http://") or lowered.startswith(b"https://"):
        rest = target.split(b"://", 1)[1]
        slash = rest.find(b"/")
        q = rest.find(b"?")
        cut = min(x for x in (slash, q, len(rest)) if x != -1)
        authority, target = rest[:cut], rest[cut:]
        if not target.startswith(b"/"):
            target = b"/" + target
        if b"@" in authority:
            raise BadPath("userinfo is not allowed in the request target")
    path, _, query = target.partition(b"?")
    return authority, path, query


def prepare(snapshot: Snapshot, head: RequestHead, reactor: Any = None,
            route_hook: Any = None) -> Prepared | LocalResponse:
    """Normalise, find the virtual service and route, and build the context.

    An HTTP/1.0 request (``head.version``) without ``Host`` goes to the
    ``*`` virtual service (HTTP/1.1 needs ``Host``).

    :param reactor: handed to plugins as ``ctx.reactor`` (any reactor: the
        core does no I/O and names no reactor type).
    :param route_hook: the ``twistgw_route_match`` hook when a plugin
        implements it (a pluggy hook caller), else None.
    """
    target, headers = head.target, head.headers
    gateway = head.gateway
    table = head.hosts  # a TLS connection's certificate's virtual services
    if table is None:
        table = snapshot.hosts if gateway is None else gateway.hosts
    if gateway is not None and gateway.hcm.generate_request_id:
        head.request_id = request_id(gateway.hcm, headers)
    try:
        authority, raw_path, query = split_target(target)
        path = normalise_path(raw_path)
    except BadPath as exc:
        return bad_request(str(exc))
    host, vs, refusal = _virtual_service(table, authority, headers.getRawHeaders(b"host"), head.version)
    if refusal is not None:
        return refusal
    assert host is not None and vs is not None
    upstream_headers = Headers()
    copy_request_headers(headers, upstream_headers.raw)
    for name in snapshot.owned_headers:
        # Plugins own these (sdk.OwnsRequestHeaders): a client's copy never reaches a matcher, plugin or backend.
        upstream_headers.raw.pop(name, None)
    if authority is not None:
        # RFC 9112 §3.2.2: the target's authority replaces Host: the upstream sees the host routing used.
        upstream_headers.setRawHeaders(b"host", [authority])
    client = head.client_address
    if gateway is not None:
        client = _gateway_rules(gateway, head, headers, upstream_headers.raw, client)
    version = head.version
    ctx = RequestContext(
        head.method.decode("latin-1"), path, query, upstream_headers, host,
        client, vs.key, "", reactor, head.scheme, target,
        "HTTP/1.1" if version == b"HTTP/1.1" else version.decode("latin-1"),
    )
    # Route matchers read a header the copy above dropped as the client sent it.
    ctx.received_headers = headers
    ctx.owned_headers = snapshot.owned_headers
    if gateway is not None:
        ctx.request_id = head.request_id
    if head.body is not None:
        ctx.body_source = head.body
    route = select_route(ctx, vs, route_hook, snapshot)
    if route is None:
        return NOT_FOUND
    ctx.route = route.name
    runtime = snapshot.runtime(vs, route)
    ctx.upstream = runtime.upstream_name
    return Prepared(ctx, runtime)


def _gateway_rules(gateway: GatewayView, head: RequestHead, received: Any, upstream: dict[bytes, list[bytes]],
                   client: str) -> str:
    """A Gateway's rules on the headers going upstream (its ``x-request-id``,
    computed before routing; X-Forwarded-For under Envoy's rules); returns
    the client address."""
    if head.request_id is not None:
        upstream[b"X-Request-Id"] = [head.request_id.encode("ascii")]
    if gateway.hcm.gloo_xff:
        client, head.forwarded_for = forwarded(gateway.hcm, client, received.getRawHeaders(b"x-forwarded-for"))
    return client


def _virtual_service(table: HostTable, authority: bytes | None, hosts: list[bytes] | None, version: bytes
                     ) -> tuple[str | None, VirtualService | None, LocalResponse | None]:
    """``(host, its virtual service, None)`` from the target's authority or
    Host, or ``(..., the refusal)``."""
    if hosts is not None and len(hosts) > 1:
        return None, None, bad_request("more than one Host header")
    if authority is not None:
        host, vs = table.resolve(authority)
    elif hosts is not None:
        host, vs = table.resolve(hosts[0])
    elif version == b"HTTP/1.0":
        host, vs = "", table.default  # RFC 9112 §3.2: only HTTP/1.1 must send Host
    else:
        return None, None, bad_request("the Host header is required")
    if host is None:
        return None, None, bad_request("the Host header (or the target's authority) is not a valid host[:port]")
    return host, vs, None if vs is not None else NOT_FOUND


def select_route(ctx: RequestContext, vs: VirtualService, route_hook: Any = None,
                 snapshot: Snapshot | None = None) -> Route | None:
    """The route for the request as it is now: the ``twistgw_route_match``
    hook's choice when a plugin implements it and chooses (it sees the
    virtual service's read-only view and returns one of its route views),
    else the core's matcher."""
    if route_hook is None or snapshot is None:
        return first_route(vs.routes, ctx)
    view = snapshot.view(vs)
    chosen = route_hook(ctx=ctx, virtual_service=view)
    if chosen is None:
        return first_route(vs.routes, ctx)
    if not (isinstance(chosen, RouteView) and 0 <= chosen.index < len(view.routes)
            and view.routes[chosen.index] is chosen):
        raise TypeError(f"twistgw_route_match returned {chosen!r}, not one of the virtual service's routes")
    return vs.routes[chosen.index]


def reroute(snapshot: Snapshot, ctx: RequestContext, runtime: RouteRuntime,
            route_hook: Any = None) -> tuple[RouteRuntime, tuple[Call, ...]] | LocalResponse:
    """Select the route again after the chain admitted the request, as Envoy
    does when a filter clears the route cache (Gloo's claim-based routing:
    the JWT plugin copies claims into headers that routes match).

    Returns the route to serve and the chain steps of it that have not run
    yet (a step runs once: the same plugin with the same compiled options,
    such as the virtual host's, is not asked twice), or 404 when no route
    matches any more.
    """
    route = select_route(ctx, runtime.virtual_service, route_hook, snapshot)
    if route is None:
        return NOT_FOUND
    if route is runtime.route:
        return runtime, ()
    new = snapshot.runtime(runtime.virtual_service, route)
    done = {(step.plugin, id(step.options), phase) for step, phase, _ in runtime.calls}
    ctx.route = route.name
    ctx.upstream = new.upstream_name
    return new, tuple(c for c in new.calls if (c[0].plugin, id(c[0].options), c[1]) not in done)


class Pipeline:
    """Runs requests through a snapshot: routing, the plugin chain, the plan.

    :param plugins: the :class:`~twistgw.core.plugins.PluginHost`.
    :param reactor: handed to plugins as ``ctx.reactor``.
    :param upstream_timeout: the response timeout of routes without ``timeout``.
    :param dry_run: ``twistgw explain`` without ``--live``: every request's
        ``ctx.dry_run`` is true (plugins contact nothing; ``NotChecked``
        goes on).
    """

    _log = Logger(namespace="twistgw.gateway")

    def __init__(self, plugins: Any, reactor: Any = None, upstream_timeout: float = UPSTREAM_TIMEOUT,
                 dry_run: bool = False) -> None:
        self.plugins = plugins
        self.reactor = reactor
        self.upstream_timeout = upstream_timeout
        self.dry_run = dry_run
        hook = plugins.pm.hook.twistgw_route_match
        # No plugin chooses routes: the core's matcher, called directly.
        self.route_hook = hook if hook.get_hookimpls() else None

    def handle(self, head: RequestHead, snapshot: Snapshot | None,
               trace: Trace | None = None) -> Plan | Deferred[Plan]:
        """The plan for ``head``, or a Deferred firing with it once an
        asynchronous plugin has answered. ``trace(plugin, phase, decision)``
        sees every plugin's decision. Raises only for a broken
        ``twistgw_route_match`` plugin (the caller answers 500)."""
        if snapshot is None:
            return NOT_READY
        prepared = prepare(snapshot, head, self.reactor, self.route_hook)
        if prepared.__class__ is not Prepared:
            return prepared  # type: ignore[return-value]  # a LocalResponse: 400, 404
        ctx = head.ctx = prepared.ctx
        if self.dry_run:
            ctx.dry_run = True
        runtime = head.runtime = prepared.runtime
        if trace is None and head.gateway is None:
            if runtime.simple:
                # The shortest path (no traffic options, no routing again):
                # what _run and _chain_done do, inlined.
                calls = runtime.calls
                if calls:
                    outcome = start_calls(calls, ctx)
                    if outcome is not None:
                        return self._chain_outcome(outcome, head, ctx, runtime, None, None)
                plan = self._plan_plain(ctx, runtime)
                return plan if ctx.response_headers is None else with_added_headers(plan, ctx.response_headers)
            policy = runtime.quick
            if policy is not None and (policy.cors is None or ctx.method != "OPTIONS"):
                # A route whose traffic options are header edits, CORS and
                # retries (no preflight here): what _with_policy, _run,
                # _chain_done and plan do, inlined.
                calls = runtime.calls
                if calls:
                    outcome = start_calls(calls, ctx)
                    if outcome is not None:
                        return cors_on(self._chain_outcome(outcome, head, ctx, runtime, None, None), policy, ctx)
                plan = plan_quick(ctx, runtime, policy, self.upstream_timeout)
                if ctx.response_headers is not None:
                    plan = with_added_headers(plan, ctx.response_headers)
                # a Forward carries its CORS headers in its response_edit already
                return plan if isinstance(plan, Forward) else cors_on(plan, policy, ctx)
        reselect_in = snapshot if runtime.reselect else None
        gateway = head.gateway
        if gateway is not None and gateway.tracing is not None:
            started = head.trace = gateway.tracing.begin(head.headers, runtime.tracing, ctx.headers)
            if started.trace is not None:
                ctx.tracer = started.trace
        calls = runtime.calls if gateway is None else gateway.calls(runtime.calls)
        if runtime.policy is not None:
            result = self._with_policy(runtime.policy, head, ctx, runtime, calls, reselect_in, trace)
        else:
            result = self._run(calls, head, ctx, runtime, reselect_in, trace)
        if gateway is None or gateway.server_edit is None:
            return result
        if isinstance(result, Deferred):
            return result.addCallback(with_edit, gateway.server_edit)
        return with_edit(result, gateway.server_edit)

    def _with_policy(self, policy: RoutePolicy, head: RequestHead, ctx: RequestContext, runtime: RouteRuntime,
                     calls: tuple[Call, ...], reselect_in: Snapshot | None,
                     trace: Trace | None) -> Plan | Deferred[Plan]:
        """A route with traffic options: what runs before the chain (faults,
        a CORS preflight, csrf, the body bound), the chain, and CORS headers
        on the gateway's own answers."""
        early: LocalResponse | Deferred[LocalResponse | None] | None = None
        if policy.early:
            early = policy.before_chain(ctx, head.headers)
        elif policy.cors is not None and ctx.method == "OPTIONS":
            early = preflight(policy.cors, ctx.headers)
        result: Plan | Deferred[Plan]
        if early is None:
            result = self._run(calls, head, ctx, runtime, reselect_in, trace)
            if type(result) is RetryingForward or type(result) is Forward:
                return result  # its CORS headers are in its response_edit already
        elif isinstance(early, Deferred):
            def after(answer: LocalResponse | None) -> Plan | Deferred[Plan]:
                if answer is not None:
                    return answer
                return self._run(calls, head, ctx, runtime, reselect_in, trace)
            result = early.addCallback(after)
        else:
            result = early
        return cors_on(result, policy, ctx)

    def _run(self, calls: tuple[Call, ...], head: RequestHead, ctx: RequestContext, runtime: RouteRuntime,
             reselect_in: Snapshot | None, trace: Trace | None) -> Plan | Deferred[Plan]:
        """Run chain steps, then :meth:`_chain_done`."""
        if calls:
            outcome = start_calls(calls, ctx, trace)
            if outcome is not None:
                return self._chain_outcome(outcome, head, ctx, runtime, reselect_in, trace)
        return self._chain_done(None, head, ctx, runtime, reselect_in, trace)

    def _chain_outcome(self, outcome: Deny | Deferred[Deny | None], head: RequestHead, ctx: RequestContext,
                       runtime: RouteRuntime, reselect_in: Snapshot | None,
                       trace: Trace | None) -> Plan | Deferred[Plan]:
        """A chain that did not simply admit the request: its refusal, or
        :meth:`_chain_done` once an asynchronous plugin answered."""
        if isinstance(outcome, Deferred):
            return outcome.addCallback(self._chain_done, head, ctx, runtime, reselect_in, trace)
        refusal = LocalResponse.refusal(outcome)
        return refusal if ctx.response_headers is None else with_added_headers(refusal, ctx.response_headers)

    def _chain_done(self, deny: Deny | None, head: RequestHead, ctx: RequestContext, runtime: RouteRuntime,
                    reselect_in: Snapshot | None, trace: Trace | None) -> Plan | Deferred[Plan]:
        if deny is not None:
            refusal = LocalResponse.refusal(deny)
            return refusal if ctx.response_headers is None else with_added_headers(refusal, ctx.response_headers)
        if reselect_in is not None:
            # Plugins may have written headers routes match on (claim-based
            # routing): select again, and run what the new route adds.
            found = reroute(reselect_in, ctx, runtime, self.route_hook)
            if isinstance(found, LocalResponse):
                return found if ctx.response_headers is None else with_added_headers(found, ctx.response_headers)
            new, remaining = found
            if trace is not None and new is not runtime:
                trace("routing", "reselect", Allow(f"headers written by the chain now select route"
                                                   f" {new.route.name} (was {runtime.route.name})"))
            head.runtime = new
            return self._run(remaining, head, ctx, new, None, trace)
        plan = self.plan(ctx, runtime, head.forwarded_for)
        return plan if ctx.response_headers is None else with_added_headers(plan, ctx.response_headers)

    def plan(self, ctx: RequestContext, runtime: RouteRuntime, forwarded_for: object = _OWN_RULE) -> Plan:
        """What to do with a request the chain admitted. ``forwarded_for``:
        the X-Forwarded-For a Gateway's Envoy rules computed (bytes, or None
        for none); by default, twistgw's own rule (the client address)."""
        if runtime.policy is not None:
            return plan_policy(ctx, runtime, runtime.policy, forwarded_for, self.upstream_timeout)
        return self._plan_plain(ctx, runtime, forwarded_for)

    def _plan_plain(self, ctx: RequestContext, runtime: RouteRuntime, forwarded_for: object = _OWN_RULE) -> Plan:
        """:meth:`plan` for a route without traffic options."""
        if runtime.answer is not None:
            return runtime.answer
        balancer = runtime.balancer
        assert balancer is not None
        endpoint = balancer.pick()
        if endpoint is None:
            return no_endpoint(ctx, balancer)
        route = runtime.route
        path = ctx.path if route.prefix_rewrite is None else route.rewrite(ctx.path)
        target = path.encode("ascii")
        if ctx.query:
            target += b"?" + ctx.query
        headers = ctx.headers
        if forwarded_for is _OWN_RULE:  # inline: the plain route's path
            raw = headers.raw
            client = ctx.client_address.encode("ascii")
            raw[b"X-Forwarded-For"] = [client]
            raw[b"X-Forwarded-Proto"] = [ctx.scheme.encode("ascii")]
            raw[b"X-Real-Ip"] = [client]
        else:
            forwarding(headers, ctx, forwarded_for)
        forward = Forward(endpoint, ctx.method.encode("latin-1"), target, headers,
                          route.timeout or self.upstream_timeout, balancer.upstream)
        forward.watch = balancer.watch  # leastRequest, outlierDetection: else None
        return forward
