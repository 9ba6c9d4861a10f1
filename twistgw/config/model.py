"""Immutable configuration resources, as read from YAML (no I/O here)."""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from twistgw.api.types import AuthConfigInfo, Endpoint, SecretInfo, UpstreamInfo

__all__ = [
    "AuthConfigInfo",
    "DirectResponse",
    "Endpoint",
    "EndpointsResource",
    "KubeRef",
    "Matcher",
    "Route",
    "SecretInfo",
    "Service",
    "ServicePort",
    "Source",
    "UpstreamInfo",
    "UpstreamRef",
    "UpstreamResource",
    "VirtualService",
]


@attrs.frozen
class Source:
    """Where a resource was read: file, 0-based document index, 1-based line."""

    file: str
    document: int
    line: int | None = None
    #: field path → line, for pointing at a field inside the document
    lines: Mapping[tuple[str | int, ...], int] = attrs.field(factory=dict, eq=False, hash=False, repr=False)

    def line_of(self, path: tuple[str | int, ...]) -> int | None:
        """The line of the deepest known part of ``path``."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.line

    def __str__(self) -> str:
        where = f"{self.file}: document {self.document + 1}"
        if self.line is not None:
            where += f" (line {self.line})"
        return where


@attrs.frozen
class Matcher:
    """``prefix`` (string prefix of the normalised path) or ``exact``."""

    prefix: str | None = None
    exact: str | None = None
    methods: tuple[str, ...] = ()

    def matches(self, method: str, path: str) -> bool:
        if self.methods and method not in self.methods:
            return False
        if self.exact is not None:
            return path == self.exact
        return path.startswith(self.prefix or "/")


@attrs.frozen
class KubeRef:
    """A Kubernetes Service port (``routeAction.single.kube``)."""

    name: str
    namespace: str
    port: int

    def upstream_key(self) -> tuple[str, str]:
        """The (namespace, name) of the Upstream the Service port resolves
        to (named ``namespace-name-port``, as Gloo's discovery names them)."""
        return (self.namespace, f"{self.namespace}-{self.name}-{self.port}")


@attrs.frozen
class UpstreamRef:
    """An Upstream (``routeAction.single.upstream``)."""

    name: str
    namespace: str

    def upstream_key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@attrs.frozen
class DirectResponse:
    status: int
    body: bytes = b""


@attrs.frozen
class Route:
    """One route of a virtual host.

    :ivar name: ``spec.virtualHost.routes[i].name`` or ``routes[i]``.
    :ivar options: the raw per-route options mapping.
    """

    name: str
    index: int
    matchers: tuple[Matcher, ...]
    action: KubeRef | UpstreamRef | DirectResponse
    options: Mapping[str, Any] = attrs.field(factory=dict)
    prefix_rewrite: str | None = None
    timeout: float | None = None

    def matches(self, method: str, path: str) -> bool:
        return any(m.matches(method, path) for m in self.matchers)


@attrs.frozen
class VirtualService:
    namespace: str
    name: str
    domains: tuple[str, ...]
    routes: tuple[Route, ...]
    options: Mapping[str, Any] = attrs.field(factory=dict)
    display_name: str = ""
    source: Source | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@attrs.frozen
class ServicePort:
    port: int
    target_port: int | str | None = None
    name: str = ""


@attrs.frozen
class Service:
    namespace: str
    name: str
    ports: tuple[ServicePort, ...]
    source: Source | None = None


@attrs.frozen
class EndpointSubset:
    addresses: tuple[str, ...]
    ports: tuple[tuple[str, int], ...]  # (name, port)


@attrs.frozen
class EndpointsResource:
    namespace: str
    name: str
    subsets: tuple[EndpointSubset, ...]
    source: Source | None = None


@attrs.frozen
class UpstreamResource:
    """A manual ``Upstream``: either ``kube`` (a service port) or ``static`` hosts."""

    namespace: str
    name: str
    kube: KubeRef | None = None
    static: tuple[Endpoint, ...] | None = None
    source: Source | None = None
