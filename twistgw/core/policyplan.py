"""The plan of a route with traffic options (a :class:`RoutePolicy`): where
the request goes, its header edits, the gateway's forwarding headers and
the response edit it carries. :class:`twistgw.core.pipeline.Pipeline` calls
these once the chain admitted a request.

:func:`plan_quick` is the shortest path, for the routes most traffic
options leave simple (``RouteRuntime.quick``: header edits, CORS, retries,
nothing before the chain): everything per route was compiled into the
policy, so a request costs a few dict operations and the plan object.
:func:`plan_policy` is the general one (redirects, weighted destinations,
hash balancing, rewrites, shadowing, a Gateway's forwarding rules).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twistgw.api.headers import Headers
from twistgw.api.types import RequestContext
from twistgw.core.balancers import hash_of
from twistgw.core.plan import Forward, LocalResponse, Plan, RetryingForward
from twistgw.core.routeruntime import RouteRuntime
from twistgw.core.traffic import PREFLIGHT, RoutePolicy

__all__ = ["OWN_RULE", "forwarding", "no_endpoint", "plan_policy", "plan_quick", "with_cors"]

_log = Logger(namespace="twistgw.gateway")

#: :attr:`RequestHead.forwarded_for` when twistgw's own rule applies
OWN_RULE = object()

NO_UPSTREAM = LocalResponse(503, b"no healthy upstream", reason="the upstream has no endpoints")


def subset_text(subset: tuple[tuple[str, str], ...]) -> str:
    """A route's subset as written: ``{stage: canary}``."""
    return "{" + ", ".join(f"{k}: {v}" for k, v in subset) + "}"


def no_endpoint(ctx: RequestContext, balancer: Any) -> LocalResponse:
    """503: the balancer has no endpoint to pick (a subset without one is logged)."""
    ups = balancer.upstream
    if not ups.subset:
        return NO_UPSTREAM
    reason = f"subset {subset_text(ups.subset)} of upstream {ups.namespace}/{ups.name} has no endpoints"
    _log.warn("No healthy upstream for {method} {path}: {reason}", method=ctx.method, path=ctx.path, reason=reason)
    return LocalResponse(503, NO_UPSTREAM.body, reason=reason)


def plan_quick(ctx: RequestContext, runtime: RouteRuntime, policy: RoutePolicy, default_timeout: float) -> Plan:
    """:func:`plan_policy` for a ``RouteRuntime.quick`` route (no direct
    answer, redirect, weighted destination, hash policy, rewrite of path or
    host, shadowing), under twistgw's own forwarding rule; the same steps in
    the same order, without the tests of what such a route cannot have."""
    balancer = runtime.balancer
    endpoint = balancer.pick()
    if endpoint is None:
        return no_endpoint(ctx, balancer)
    route = runtime.route
    path = ctx.path if route.prefix_rewrite is None else route.rewrite(ctx.path)
    target = path.encode("ascii")
    if ctx.query:
        target += b"?" + ctx.query
    headers = ctx.headers
    raw = headers.raw
    for name, value, append in policy.request_ops:  # headerManipulation (HeaderLevel.apply)
        if value is None:
            raw.pop(name, None)
        elif append and name in raw:
            raw[name].append(value)
        else:
            raw[name] = [value]
    client = ctx.client_address.encode("ascii")
    raw[b"X-Forwarded-For"] = [client]
    raw[b"X-Forwarded-Proto"] = [ctx.scheme.encode("ascii")]
    raw[b"X-Real-Ip"] = [client]
    retries = policy.retries
    if retries is None:
        forward = Forward(endpoint, ctx.method.encode("latin-1"), target, headers, route.timeout or default_timeout,
                          balancer.upstream)
    else:
        forward = RetryingForward(endpoint, ctx.method.encode("latin-1"), target, headers,
                                  route.timeout or default_timeout, balancer.upstream, retries, None, balancer)
    edit = policy.response
    if policy.cors is not None:
        origins = raw.get(b"Origin")
        if origins:  # an allowed origin's edit is made once (RoutePolicy.edit_for)
            found = policy.by_origin.get(origins[0])
            edit = found if found is not None else policy.edit_for(origins, edit)
    forward.response_edit = edit
    forward.watch = balancer.watch
    return forward


def plan_policy(ctx: RequestContext, runtime: RouteRuntime, policy: RoutePolicy, forwarded_for: object,
                default_timeout: float) -> Plan:
    """``Pipeline.plan`` for a route with traffic options (everything per
    route compiled in its policy; the request's headers changed in their
    live dict)."""
    route_response = policy.response
    if runtime.answer is not None or policy.redirect is not None:
        answer = runtime.answer if runtime.answer is not None else policy.redirect_answer(ctx)
        return route_response.apply_to_local(answer) if route_response is not None else answer
    request_level = None
    if policy.weighted is not None:
        balancer, request_level, dest_response = policy.weighted.pick(policy.random())
        if dest_response is not None:
            route_response = dest_response.then(route_response) if route_response is not None else dest_response
    else:
        balancer = runtime.balancer
    h = hash_of(policy.lb_hash, ctx) if policy.lb_hash is not None else None
    endpoint = balancer.pick() if h is None else balancer.pick_hash(h)
    if endpoint is None:
        return no_endpoint(ctx, balancer)
    route = runtime.route
    path = ctx.path if route.prefix_rewrite is None else route.rewrite(ctx.path)
    if policy.regex_rewrite is not None:
        path = policy.regex_rewrite.apply(path)
    target = path.encode("ascii")
    if ctx.query:
        target += b"?" + ctx.query
    headers = ctx.headers
    raw = headers.raw
    policy.on_request(raw, endpoint.host, request_level)
    forwarding(headers, ctx, forwarded_for)
    timeout = route.timeout or default_timeout
    if policy.retries is None and policy.shadow is None:
        forward = Forward(endpoint, ctx.method.encode("latin-1"), target, headers, timeout, balancer.upstream)
    else:
        forward = RetryingForward(endpoint, ctx.method.encode("latin-1"), target, headers, timeout,
                                  balancer.upstream, policy.retries, None, balancer, h)
        forward.auto_host = policy.auto_host and policy.host_rewrite is None
        if policy.shadow is not None:
            forward.mirror = policy.shadow.mirror(forward)
    forward.response_edit = route_response if policy.cors is None else \
        policy.edit_for(raw.get(b"Origin"), route_response)
    forward.watch = balancer.watch
    return forward


def forwarding(headers: Headers, ctx: RequestContext, forwarded_for: object) -> None:
    """The forwarding headers the gateway owns: X-Forwarded-For (the client
    address, or what a Gateway's Envoy rules computed), X-Forwarded-Proto
    and X-Real-Ip (the client address)."""
    client = ctx.client_address.encode("ascii")
    if forwarded_for is OWN_RULE:
        headers.set_canonical(b"X-Forwarded-For", client)
    elif isinstance(forwarded_for, bytes):
        headers.set_canonical(b"X-Forwarded-For", forwarded_for)
    headers.set_canonical(b"X-Forwarded-Proto", ctx.scheme.encode("ascii"))
    headers.set_canonical(b"X-Real-Ip", client)


def with_cors(plan: Plan, policy: RoutePolicy, ctx: RequestContext) -> Plan:
    """The CORS headers of an allowed origin on the gateway's own answers
    (a refusal by a plugin, a direct response...); a Forward carries them
    in its response_edit already."""
    if isinstance(plan, LocalResponse) and plan.reason != PREFLIGHT:
        edit = policy.response_for(ctx, None)
        if edit is not None:
            return edit.apply_to_local(plan)
    return plan


def cors_on(result: Plan | Deferred[Plan], policy: RoutePolicy, ctx: RequestContext) -> Plan | Deferred[Plan]:
    """:func:`with_cors` on a plan, or on the plan a Deferred fires with;
    a route without ``cors``: ``result`` as it is."""
    if policy.cors is None:
        return result
    if isinstance(result, Deferred):
        return result.addCallback(with_cors, policy, ctx)
    return with_cors(result, policy, ctx)
