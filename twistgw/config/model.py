"""Immutable configuration resources, as read from YAML (no I/O here)."""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from twistgw.api.fields import written_field, written_path
from twistgw.api.types import AuthConfigInfo, Endpoint, SecretInfo, UpstreamInfo
from twistgw.config.matchers import Matcher, RequestView, any_matches
from twistgw.config.traffic import Redirect
from twistgw.api.upstreampolicy import CircuitBreakers, ConnectionConfig, Http2Settings, OutlierDetection
from twistgw.config.upstreamtls import SslSpec
from twistgw.config.servertls import ServerSslSpec, ServerTls

__all__ = [
    "OPERATORS",
    "AuthConfigInfo",
    "Delegate",
    "Destination",
    "DirectResponse",
    "GroupRef",
    "Multi",
    "OptionsResource",
    "Redirect",
    "UpstreamGroup",
    "WeightedDestination",
    "Endpoint",
    "EndpointsResource",
    "HealthCheck",
    "KubeRef",
    "LoadBalancer",
    "Pod",
    "Matcher",
    "RequestView",
    "Route",
    "RouteTable",
    "Selector",
    "SecretInfo",
    "Service",
    "ServicePort",
    "Source",
    "SubsetSpec",
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
        """The line of the deepest known part of ``path`` (a field may be
        written with its proto name: :func:`~twistgw.api.fields.written_path`)."""
        path = written_path(self.lines.keys(), path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.line

    def field_of(self, path: tuple[str | int, ...]) -> str:
        """``path`` as a problem names it (the camelCase field, and the
        spelling written where it differs: :func:`~twistgw.api.fields.written_field`)."""
        return written_field(self.lines.keys(), path)

    def __str__(self) -> str:
        where = f"{self.file}: document {self.document + 1}"
        if self.line is not None:
            where += f" (line {self.line})"
        return where


@attrs.frozen
class KubeRef:
    """A Kubernetes Service port (``routeAction.single.kube``)."""

    name: str
    namespace: str
    port: int
    #: ``single.subset.values`` as sorted (key, value) pairs; () for none
    subset: tuple[tuple[str, str], ...] = ()

    def upstream_key(self) -> tuple[str, str]:
        """The (namespace, name) of the Upstream the Service port resolves
        to (named ``namespace-name-port``, as Gloo's discovery names them)."""
        return (self.namespace, f"{self.namespace}-{self.name}-{self.port}")


@attrs.frozen
class UpstreamRef:
    """An Upstream (``routeAction.single.upstream``)."""

    name: str
    namespace: str
    #: ``single.subset.values`` as sorted (key, value) pairs; () for none
    subset: tuple[tuple[str, str], ...] = ()

    def upstream_key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@attrs.frozen
class WeightedDestination:
    """One of ``routeAction.multi.destinations`` (or an UpstreamGroup's)."""

    destination: KubeRef | UpstreamRef
    weight: int
    #: WeightedDestinationOptions as read (``headerManipulation``)
    options: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Multi:
    """``routeAction.multi``: a destination picked at random by weight."""

    destinations: tuple[WeightedDestination, ...]


@attrs.frozen
class GroupRef:
    """``routeAction.upstreamGroup``: the destinations of an UpstreamGroup."""

    name: str
    namespace: str


@attrs.frozen
class UpstreamGroup:
    """An ``UpstreamGroup`` (gloo.solo.io/v1): weighted destinations shared by routes."""

    namespace: str
    name: str
    destinations: tuple[WeightedDestination, ...]


#: What a route does besides delegating: forward (one, weighted, a group),
#: answer directly, or redirect.
Destination = KubeRef | UpstreamRef | Multi | GroupRef


@attrs.frozen
class DirectResponse:
    status: int
    body: bytes = b""


#: Operators of ``selector.expressions`` (Kubernetes label selector semantics).
OPERATORS = ("Equals", "DoubleEquals", "NotEquals", "In", "NotIn", "Exists", "DoesNotExist",
             "GreaterThan", "LessThan")


@attrs.frozen
class Selector:
    """``delegateAction.selector``: route tables by labels (or label
    expressions) in some namespaces (``*`` for all)."""

    labels: Mapping[str, str] = attrs.field(factory=dict)
    #: (key, operator, values)
    expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    namespaces: tuple[str, ...] = ()


@attrs.frozen
class Delegate:
    """``delegateAction``: by ``ref`` (namespace, name) or by ``selector``."""

    ref: tuple[str, str] | None = None
    selector: Selector | None = None


@attrs.frozen
class Route:
    """One route of a virtual host.

    :ivar name: ``routes[i].name``, or where it was written (``routes[i]``,
        ``RouteTable ns/rt routes[i]``).
    :ivar index: its position in the virtual service's flattened route list
        (route tables resolved).
    :ivar options: the raw per-route options mapping (a delegating parent's
        options merged under the route's own).
    :ivar path: the route's field path in the document that declares it.
    :ivar source: that document, when it is not the virtual service's (a RouteTable).
    :ivar owner: ``RouteTable ns/name`` for a route written in a route table, else "".
    """

    name: str
    index: int
    matchers: tuple[Matcher, ...]
    action: KubeRef | UpstreamRef | Multi | GroupRef | DirectResponse | Redirect | Delegate
    options: Mapping[str, Any] = attrs.field(factory=dict)
    prefix_rewrite: str | None = None
    timeout: float | None = None
    path: tuple[str | int, ...] = ()
    #: WebSocket upgrades forwarded (Gloo's ``upgrades: [{websocket: {enabled}}]``; default true)
    websocket: bool = True
    source: Source | None = None
    owner: str = ""
    #: ``inheritableMatchers`` / ``inheritablePathMatchers`` (None: as the parent)
    inherit_matchers: bool | None = None
    inherit_path_matchers: bool | None = None
    #: ``optionsConfigRefs.delegateOptions``: RouteOption (namespace, name) in order
    options_refs: tuple[tuple[str, str], ...] = ()
    #: the delegating routes' matchers a route written in a RouteTable must
    #: also match (its own path condition does not imply them: a regex, or
    #: a case-insensitive child of a case-sensitive prefix), so a child never
    #: escapes the prefix delegated to its table
    guard: tuple[Matcher, ...] = ()
    #: whether any matcher reads headers or query parameters (not just method and path)
    reads_request: bool = attrs.field(init=False, eq=False)
    #: (exact, prefix, methods) per matcher when every matcher reads only the
    #: method and path, case-sensitively: the request path's fast lane
    plain: tuple[tuple[str | None, str, tuple[str, ...]], ...] | None = attrs.field(init=False, eq=False)

    @reads_request.default
    def _reads(self) -> bool:
        return any(m.headers or m.query for m in self.matchers)

    @plain.default
    def _plain(self) -> tuple[tuple[str | None, str, tuple[str, ...]], ...] | None:
        if self.guard or any(m.headers or m.query or m.regex is not None or not m.case_sensitive
                             for m in self.matchers):
            return None
        return tuple((m.exact, m.prefix or "/", m.methods) for m in self.matchers)

    def rewrite(self, path: str) -> str:
        """``prefixRewrite`` applied as Envoy does: the matched prefix (of the
        first matcher whose path condition matches) is swapped for it; an
        ``exact`` match swaps the whole path. (The loader refuses
        ``prefixRewrite`` on a route with a ``regex`` matcher.)"""
        rewrite = self.prefix_rewrite
        if rewrite is None:
            return path
        for m in self.matchers:
            if m.regex is not None or not m.matches_path(path):
                continue
            if m.exact is not None:
                return rewrite or "/"
            rest = path[len(m.prefix or "/"):]
            if rewrite.endswith("/") and rest.startswith("/"):
                rest = rest[1:]  # "/" for "/api" on "/api/x" is "/x", not "//x"
            out = rewrite + rest
            return out if out.startswith("/") else "/" + out
        return path

    def matches(self, method: str, path: str) -> bool:
        """Method and path only (header and query conditions fail)."""
        return self.matches_request(RequestView(method, path))

    def matches_request(self, req: RequestView) -> bool:
        if self.guard and not all(g.matches_path(req.path) for g in self.guard):
            return False
        return any_matches(self.matchers, req)


class _Named:
    """A namespaced resource: ``key`` is ``namespace/name``."""

    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@attrs.frozen
class RouteTable(_Named):
    """A ``RouteTable``: routes a virtual service (or another table) delegates to."""

    namespace: str
    name: str
    routes: tuple[Route, ...]
    labels: Mapping[str, str] = attrs.field(factory=dict)
    weight: int = 0
    source: Source | None = None


@attrs.frozen
class VirtualService(_Named):
    namespace: str
    name: str
    domains: tuple[str, ...]
    routes: tuple[Route, ...]
    options: Mapping[str, Any] = attrs.field(factory=dict)
    display_name: str = ""
    source: Source | None = None
    #: ``virtualHost.optionsConfigRefs.delegateOptions``: VirtualHostOption (namespace, name) in order
    options_refs: tuple[tuple[str, str], ...] = ()
    #: ``spec.sslConfig`` as written (None: served on plain listeners) and,
    #: once resolved, its certificate (served on TLS listeners, by SNI)
    ssl: ServerSslSpec | None = None
    tls: ServerTls | None = None
    #: ``metadata.labels`` (a Gateway's ``virtualServiceSelector`` reads them)
    labels: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class OptionsResource:
    """A ``VirtualHostOption`` or ``RouteOption``: options a virtual host or
    route takes by ``optionsConfigRefs.delegateOptions``."""

    kind: str
    namespace: str
    name: str
    options: Mapping[str, Any]
    source: Source | None = None


@attrs.frozen
class ServicePort:
    port: int
    target_port: int | str | None = None
    name: str = ""
    #: the port speaks HTTP/2, by Gloo discovery's rule (config/http2.py)
    http2: bool = False


@attrs.frozen
class Service(_Named):
    namespace: str
    name: str
    ports: tuple[ServicePort, ...]
    source: Source | None = None
    #: ``spec.selector`` (informational, but compared with an Upstream's selector)
    selector: Mapping[str, str] | None = None


@attrs.frozen
class EndpointSubset:
    addresses: tuple[str, ...]
    ports: tuple[tuple[str, int], ...]  # (name, port)
    #: per address, the (namespace, name) of its ``targetRef`` Pod, or None
    pods: tuple[tuple[str, str] | None, ...] = ()


@attrs.frozen
class Pod(_Named):
    """A ``v1 Pod``: only its labels and IP are read (to place endpoints in
    an Upstream's subsets); its ``spec`` is informational."""

    namespace: str
    name: str
    labels: Mapping[str, str] = attrs.field(factory=dict)
    ip: str = ""


@attrs.frozen
class SubsetSpec:
    """An Upstream's ``kube.subsetSpec``: the key sets routes may select
    endpoints by, and what a request gets when its subset has no endpoint
    (Envoy's ``lb_subset_config``, as Gloo writes it)."""

    selectors: tuple[frozenset[str], ...]
    #: ``ANY_ENDPOINT`` (Gloo's default), ``NO_FALLBACK`` or ``DEFAULT_SUBSET``
    fallback: str = "ANY_ENDPOINT"
    default: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class EndpointsResource(_Named):
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
    #: ``spec.kube.selector``: accepted only when it is the Service's own
    selector: Mapping[str, str] | None = None
    subset_spec: SubsetSpec | None = None
    #: ``spec.loadBalancerConfig``: None for round robin
    load_balancer: "LoadBalancer | None" = None
    #: ``spec.healthChecks``: active HTTP checks (at most one)
    health_check: "HealthCheck | None" = None
    #: ``spec.sslConfig`` / ``static.useTls``, unresolved: None for plain HTTP
    ssl: "SslSpec | None" = None
    #: ``spec.circuitBreakers``: None for no limits
    breakers: "CircuitBreakers | None" = None
    #: ``spec.outlierDetection``: None for no passive ejection
    outlier: "OutlierDetection | None" = None
    #: ``spec.connectionConfig``: None for the gateway's defaults
    connection: "ConnectionConfig | None" = None
    #: ``spec.useHttp2`` and the HTTP/2 fields: None for HTTP/1.1
    http2: "Http2Settings | None" = None


@attrs.frozen
class HealthCheck:
    """An Upstream's active HTTP health check (Envoy's HealthCheck)."""

    interval: float
    timeout: float
    unhealthy_threshold: int
    healthy_threshold: int
    path: str
    host: str = ""
    #: [start, end) status ranges that pass (default: 200 only, as Envoy)
    statuses: tuple[tuple[int, int], ...] = ((200, 201),)
    #: ``noTrafficInterval``: the interval while the upstream has had no
    #: traffic (Envoy's default, 60 s); ``interval`` once it has
    no_traffic_interval: float = 60.0

    def passes(self, status: int) -> bool:
        return any(lo <= status < hi for lo, hi in self.statuses)


@attrs.frozen
class LoadBalancer:
    """An Upstream's ``loadBalancerConfig``: ``roundRobin``, ``leastRequest``,
    ``random``, ``ringHash`` (ring sizes) or ``maglev``; ``healthyPanicThreshold``."""

    kind: str = "roundRobin"
    min_ring: int = 1024
    max_ring: int = 8 * 1024 * 1024
    #: hash endpoints by hostname (``useHostnameForHashing``) rather than address:port
    by_hostname: bool = False
    #: ``leastRequest.choiceCount``: endpoints compared per pick (power of N choices)
    choice_count: int = 2
    #: ``healthyPanicThreshold``, percent: below it every endpoint takes
    #: traffic (Envoy's panic mode); 0 disables panic
    panic_threshold: float = 50.0
