"""Read-only views of the routing model, for the hooks that see routes
(``twistgw_route_match``): what a plugin may know of a virtual service and
its routes, never the loader's own classes (re-exported by :mod:`twistgw.sdk`).

The core makes one view per virtual service and snapshot, the first time a
plugin asks, and maps a route view a plugin returns back to its route.
"""

from __future__ import annotations

import attrs

__all__ = ["RouteView", "VirtualServiceView"]


@attrs.frozen
class RouteView:
    """One route of a virtual service, as routing serves it (RouteTables
    flattened: a delegated route is one route here).

    :ivar name: the route's name (``routes[2]`` when unnamed; a delegated
        route's starts with its ``RouteTable ns/name``); ``ctx.route`` once
        chosen.
    :ivar index: its place in :attr:`VirtualServiceView.routes`.
    :ivar upstream: ``namespace/name`` of its upstream, ``""`` for a direct
        response, a redirect or weighted destinations.
    :ivar matchers: each matcher as ``twistgw check -v`` describes it
        (``prefix /api``, ``exact /healthz methods GET``...), in order.
    """

    name: str
    index: int
    upstream: str
    matchers: tuple[str, ...]


@attrs.frozen
class VirtualServiceView:
    """A virtual service: its name, domains and routes, in the order Gloo
    matches them.

    :ivar key: ``namespace/name`` (``ctx.virtual_service``).
    :ivar namespace: its namespace.
    :ivar name: its name.
    :ivar domains: ``virtualHost.domains`` as written.
    :ivar routes: every route (:class:`RouteView`); a route a
        ``twistgw_route_match`` implementation returns must be one of these.
    """

    key: str
    namespace: str
    name: str
    domains: tuple[str, ...]
    routes: tuple[RouteView, ...]
