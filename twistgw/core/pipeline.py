"""From a raw request head to a route and a RequestContext (pure, shared by
the proxy, ``twistgw explain`` and :mod:`twistgw.testing`)."""

from __future__ import annotations

from typing import Any

import attrs

from twistgw.api.headers import Headers
from twistgw.api.types import Deny, RequestContext
from twistgw.config.model import Route, VirtualService
from twistgw.core.headers import copy_end_to_end
from twistgw.core.paths import BadPath, normalise_path
from twistgw.core.routing import first_route, request_view
from twistgw.core.snapshot import RouteRuntime, Snapshot

NOT_FOUND = Deny(404, reason="no virtual service or route matches")


def bad_request(reason: str) -> Deny:
    return Deny(400, f"Bad Request: {reason}\n".encode(), reason=reason)


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


def prepare(snapshot: Snapshot, plugins: Any, method: bytes, target: bytes, headers: Any,
            client_address: str = "", reactor: Any = None, route_hook: Any = None,
            scheme: str = "http") -> Prepared | Deny:
    """Normalise, find the virtual service and route, and build the context.

    :param headers: the request headers as received (any object with
        ``getRawHeaders`` and ``getAllRawHeaders``, names in canonical case).
    """
    try:
        authority, raw_path, query = split_target(target)
        path = normalise_path(raw_path)
    except BadPath as exc:
        return bad_request(str(exc))
    hosts = headers.getRawHeaders(b"host")
    if authority is not None:
        host_value = authority
    elif hosts is None:
        return bad_request("the Host header is required")
    else:
        host_value = hosts[0]
    if hosts is not None and len(hosts) > 1:
        return bad_request("more than one Host header")
    try:
        host, vs = snapshot.hosts.resolve(host_value)
    except UnicodeDecodeError:
        return bad_request("the Host header must be ASCII")
    if vs is None:
        return NOT_FOUND
    upstream_headers = Headers()
    copy_end_to_end(headers, upstream_headers._raw)
    if authority is not None:
        # RFC 9112 §3.2.2: the target's authority replaces Host, so the
        # upstream sees the host that routing (and authorization) used.
        upstream_headers.setRawHeaders(b"host", [authority])
    ctx = RequestContext(
        method.decode("latin-1"), path, query, upstream_headers, host,
        client_address, vs.key, "", reactor, scheme,
    )
    route = select_route(ctx, vs, route_hook)
    if route is None:
        return NOT_FOUND
    ctx.route = route.name
    return Prepared(ctx, snapshot.runtime(vs, route))


def select_route(ctx: RequestContext, vs: VirtualService, route_hook: Any = None) -> Route | None:
    """The route for the request as it is now (the core's matcher, or the
    ``twistgw_route_match`` hook when a plugin implements it)."""
    if route_hook is None:
        return first_route(vs.routes, request_view(ctx))
    route = route_hook(ctx=ctx, virtual_service=vs)
    if route is not None and not (isinstance(route, Route) and 0 <= route.index < len(vs.routes)
                                  and vs.routes[route.index] == route):
        raise TypeError(f"twistgw_route_match returned {route!r}, not one of the virtual service's routes")
    return route


def reroute(snapshot: Snapshot, ctx: RequestContext, runtime: RouteRuntime,
            route_hook: Any = None) -> tuple[RouteRuntime, tuple[Any, ...]] | Deny:
    """Select the route again after the chain admitted the request, as Envoy
    does when a filter clears the route cache (Gloo's claim-based routing:
    the JWT plugin copies claims into headers that routes match).

    Returns the route to serve and the chain steps of it that have not run
    yet (a step runs once: the same plugin with the same compiled options,
    such as the virtual host's, is not asked twice), or 404 when no route
    matches any more.
    """
    route = select_route(ctx, runtime.virtual_service, route_hook)
    if route is None:
        return NOT_FOUND
    if route is runtime.route:
        return runtime, ()
    new = snapshot.runtime(runtime.virtual_service, route)
    done = {(step.plugin, id(step.options), phase) for step, phase, _ in runtime.calls}
    ctx.route = route.name
    return new, tuple(c for c in new.calls if (c[0].plugin, id(c[0].options), c[1]) not in done)
