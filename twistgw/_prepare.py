"""From a raw request head to a route and a RequestContext (pure, shared by
the proxy, ``twistgw explain`` and :mod:`twistgw.testing`)."""

from __future__ import annotations

from typing import Any, Iterable

import attrs
from twisted.web.http_headers import Headers

from twistgw._api import Deny, RequestContext
from twistgw._paths import BadPath, normalise_path
from twistgw._model import Route, VirtualService
from twistgw._routing import first_route, request_view
from twistgw._snapshot import RouteRuntime, Snapshot

#: Hop-by-hop headers (RFC 9110 §7.6.1) plus framing headers the proxy sets itself.
HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer",
    b"transfer-encoding", b"upgrade", b"proxy-authorization", b"proxy-authenticate",
    b"content-length", b"expect",
})

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


def _can_copy_raw() -> bool:
    """Whether Headers keeps canonical names in ``_rawHeaders``, as Twisted
    22+ does: then end-to-end headers can be copied as they are instead of
    being encoded and sanitised again value by value (they already were,
    when Twisted parsed or stored them)."""
    probe = Headers()
    probe.addRawHeader(b"x-probe-name", b"v")
    raw = getattr(probe, "_rawHeaders", None)
    return isinstance(raw, dict) and list(raw.items()) == list(probe.getAllRawHeaders())


_COPY_RAW = _can_copy_raw()


def set_header(headers: Headers, canonical_name: bytes, value: bytes) -> None:
    """``headers.setRawHeaders(name, [value])`` for a name already in
    Twisted's canonical form (``X-Forwarded-For``) and a value the gateway
    made itself (no line breaks)."""
    if _COPY_RAW:
        headers._rawHeaders[canonical_name] = [value]
    else:
        headers.setRawHeaders(canonical_name, [value])


def forward_headers(incoming: Headers, connection: Iterable[bytes] | None = None,
                    into: Headers | None = None) -> Headers:
    """The end-to-end headers of a request or response, hop-by-hop removed
    (including every header the ``Connection`` header names).

    :param connection: ``Connection`` header values kept apart from
        ``incoming`` (Twisted's HTTP client files them separately).
    :param into: write them into these headers (replacing same-named ones)
        instead of a new ``Headers``.
    """
    out = Headers() if into is None else into
    listed: set[bytes] | None = None
    named = incoming.getRawHeaders(b"connection")
    if named or connection:
        listed = set()
        for value in list(named or ()) + list(connection or ()):
            for token in value.split(b","):
                listed.add(token.strip().lower())
    raw = out._rawHeaders if _COPY_RAW else None
    for name, values in incoming.getAllRawHeaders():
        lname = name.lower()
        if lname in HOP_BY_HOP or (listed is not None and lname in listed):
            continue
        if raw is not None:
            raw[name] = list(values)
        else:
            out.setRawHeaders(name, list(values))
    return out


def prepare(snapshot: Snapshot, plugins: Any, method: bytes, target: bytes, headers: Headers,
            client_address: str = "", reactor: Any = None, route_hook: Any = None,
            scheme: str = "http") -> Prepared | Deny:
    """Normalise, find the virtual service and route, and build the context."""
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
    upstream_headers = forward_headers(headers)
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
