"""Host and route matching (pure). The core's route matcher runs when no
plugin's ``twistgw_route_match`` chose a route (the pipeline asks the
plugins first); :func:`view_of` is the read-only view that hook gets."""

from __future__ import annotations

from typing import Iterable

from twistgw.api.types import RequestContext
from twistgw.api.views import RouteView, VirtualServiceView
from twistgw.config.model import RequestView, Route, VirtualService
from twistgw.config.names import parse_host


def view_of(vs: VirtualService, upstream_names: Iterable[str]) -> VirtualServiceView:
    """The read-only view of ``vs`` plugins see (``twistgw_route_match``);
    ``upstream_names``: each route's upstream, in order."""
    routes = tuple(RouteView(route.name, route.index, upstream, tuple(m.describe() for m in route.matchers))
                   for route, upstream in zip(vs.routes, upstream_names, strict=True))
    return VirtualServiceView(vs.key, vs.namespace, vs.name, tuple(vs.domains), routes)


def first_route(routes: Iterable[Route], request: RequestView | RequestContext) -> Route | None:
    """The first route whose matchers admit the request (Gloo/Envoy: in
    order). ``request`` is a RequestContext or anything with its ``method``,
    ``path``, ``headers``, ``query``, ``host`` and ``scheme``."""
    method, path = request.method, request.path
    for route in routes:
        plain = route.plain
        if plain is None:
            if route.matches_request(request):  # type: ignore[arg-type]
                return route
            continue
        for exact, prefix, methods in plain:
            if methods and method not in methods:
                continue
            if (path == exact) if exact is not None else path.startswith(prefix):
                return route
    return None


class HostTable:
    """Exact domains first, then ``*.suffix`` wildcards (longest first), then ``*``."""

    def __init__(self, virtual_services: Iterable[VirtualService]) -> None:
        self.exact: dict[str, VirtualService] = {}
        self.suffixes: list[tuple[str, VirtualService]] = []
        self.default: VirtualService | None = None
        for vs in virtual_services:
            for domain in vs.domains:
                if domain == "*":
                    self.default = self.default or vs
                elif domain.startswith("*"):
                    self.suffixes.append((domain[1:], vs))
                else:
                    self.exact.setdefault(domain, vs)
        self.suffixes.sort(key=lambda item: -len(item[0]))
        self._by_header: dict[bytes, tuple[str | None, VirtualService | None]] = {}

    def resolve(self, header: bytes) -> tuple[str | None, VirtualService | None]:
        """(host without port, its virtual service) for a raw ``Host`` value
        or target authority; ``(None, None)`` when it is not a valid
        ``uri-host[:port]`` (see :func:`~twistgw.config.names.parse_host`).
        Remembered per value (bounded: clients choose them), as requests
        repeat a few hosts."""
        found = self._by_header.get(header)
        if found is None:
            host = parse_host(header)
            found = (host, self.lookup(host) if host is not None else None)
            if len(self._by_header) < 1024:
                self._by_header[header] = found
        return found

    def lookup(self, host: str) -> VirtualService | None:
        vs = self.exact.get(host)
        if vs is not None:
            return vs
        for suffix, vs in self.suffixes:
            if host.endswith(suffix) and len(host) > len(suffix):
                return vs
        return self.default
