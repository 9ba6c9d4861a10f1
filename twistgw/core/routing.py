"""Host and route matching (pure). The core's route matcher is a hookimpl that
runs last, so a plugin's ``twistgw_route_match`` can take precedence."""

from __future__ import annotations

from typing import Iterable

from twistgw.api.plugin import hookimpl
from twistgw.api.types import RequestContext
from twistgw.config.model import RequestView, Route, VirtualService
from twistgw.config.names import host_without_port


@hookimpl(trylast=True)
def twistgw_route_match(ctx: RequestContext, virtual_service: VirtualService) -> Route | None:
    return first_route(virtual_service.routes, request_view(ctx))


def request_view(ctx: RequestContext) -> RequestView:
    """What route matchers read of a request: method, path, headers, query."""
    return RequestView(ctx.method, ctx.path, ctx.headers, ctx.query, ctx.host, ctx.scheme)


def first_route(routes: Iterable[Route], request: RequestView) -> Route | None:
    """The first route whose matchers admit the request (Gloo/Envoy: in order)."""
    for route in routes:
        if route.matches_request(request):
            return route
    return None


def rewrite_path(route: Route, path: str) -> str:
    """``path`` with the matched prefix replaced by the route's
    ``prefixRewrite`` (unchanged when the route has none, or matched exactly)."""
    if route.prefix_rewrite is None:
        return path
    for m in route.matchers:
        if m.prefix is not None and path.startswith(m.prefix):
            rest = path[len(m.prefix):]
            if route.prefix_rewrite.endswith("/") and rest.startswith("/"):
                rest = rest[1:]  # "/" for "/api" on "/api/x" is "/x", not "//x"
            path = route.prefix_rewrite + rest
            if not path.startswith("/"):
                path = "/" + path
            break
    return path


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
        self._by_header: dict[bytes, tuple[str, VirtualService | None]] = {}

    def resolve(self, header: bytes) -> tuple[str, VirtualService | None]:
        """(host without port, its virtual service) for a raw ``Host`` value;
        raises UnicodeDecodeError for a non-ASCII one. Remembered per value
        (bounded: clients choose them), as requests repeat a few hosts."""
        found = self._by_header.get(header)
        if found is None:
            host = host_without_port(header.decode("ascii"))
            found = (host, self.lookup(host))
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
