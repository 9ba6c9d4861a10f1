"""What each Gloo ``Gateway`` serves, compiled with the snapshot (no I/O).

A :class:`GatewayView` holds, for one Gateway this process serves: the host
table of the virtual services it selects, its X-Forwarded-For rules
(:func:`forwarded`), and the chain step of its ``httpLocalRatelimit``
default bucket (the ``localRatelimit`` plugin's, compiled through the
plugin API), which runs first on every route that has no
``localRatelimit`` of its own; and, for an ``ssl: true`` Gateway, the
certificates of its virtual services by server name (a
:class:`~twistgw.core.tlsroutes.TlsRoutes` of its own). The runtime opens
one listener per view (``runtime/gateways.py``); the engine hands the view
to the pipeline with each request. See docs/gateways.md.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Mapping

from twistgw.api.fields import proto_name
from twistgw.api.resources import OptionsScope, ResourceView
from twistgw.api.types import OptionsError
from twistgw.config.errors import ConfigIssue
from twistgw.config.gateways import DEFAULT_PROXY, GlooGateway, HcmSettings, selects
from twistgw.config.model import VirtualService
from twistgw.config.resolution import Config
from twistgw.core.chain import Call, ChainStep, flatten_chain
from twistgw.core.compiling import compile_plugin, resource_problems
from twistgw.core.plugins import PluginHost
from twistgw.core.routing import HostTable
from twistgw.core.tlsroutes import TlsRoutes
from twistgw.core.tracing import GatewayTracing
from twistgw.core.traffic import ResponseEdit
from twistgw.tracing.export import CollectorTarget

__all__ = ["GatewayView", "build_gateway_views", "forwarded", "gateway_notes", "has_ssl"]

#: the plugin that counts ``localRatelimit`` buckets
LOCAL_LIMIT = "localRatelimit"


def has_ssl(vs: VirtualService) -> bool:
    """Does the virtual service have ``sslConfig``? An ``ssl: true`` Gateway
    serves only those, a plain one only the others (a certificate's client
    verification is never side-stepped over plain HTTP)."""
    return vs.ssl is not None


def _trusted(entries: list[str], index: int) -> str | None:
    """The ``index``-th address from the right of X-Forwarded-For (0: the
    last), or None when there are fewer or it is not an IP address
    (Envoy's ``getLastAddressFromXFF``)."""
    if index >= len(entries):
        return None
    candidate = entries[len(entries) - 1 - index]
    try:
        ipaddress.ip_address(candidate)
    except ValueError:
        return None
    return candidate


def forwarded(hcm: HcmSettings, peer: str, received: list[bytes] | None) -> tuple[str, bytes | None]:
    """``(client address, X-Forwarded-For to send or None)`` under Envoy's
    rules (``useRemoteAddress``, ``xffNumTrustedHops``, ``skipXffAppend``):

    * ``useRemoteAddress: true`` (Gloo's default): the client is the
      ``xffNumTrustedHops``-th address from the right of the received
      X-Forwarded-For (with 0 hops: the peer, whatever the header says);
      the peer is appended to the header unless ``skipXffAppend``;
    * ``false``: the client is the (hops + 1)-th from the right; the header
      goes on unchanged.

    A missing or non-IP entry falls back to the peer."""
    joined = b",".join(received) if received else b""
    entries = [e.strip() for e in joined.decode("latin-1").split(",") if e.strip()] if joined else []
    if hcm.use_remote_address:
        client = _trusted(entries, hcm.xff_hops - 1) if hcm.xff_hops > 0 else None
        if hcm.skip_xff_append:
            xff = joined or None
        else:
            xff = (joined + b", " if joined else b"") + peer.encode("ascii")
    else:
        client = _trusted(entries, hcm.xff_hops)
        xff = joined or None
    return client or peer, xff


class GatewayView:
    """One Gateway as the pipeline serves it."""

    def __init__(self, gateway: GlooGateway, virtual_services: tuple[VirtualService, ...],
                 limit: ChainStep | None, tracing: GatewayTracing | None = None) -> None:
        self.gateway = gateway
        #: ``httpConnectionManagerSettings.tracing`` compiled (None: not traced)
        self.tracing = tracing
        self.key = gateway.key
        self.hcm = gateway.hcm
        self.virtual_services = virtual_services
        self.hosts = HostTable(virtual_services)
        #: ``ssl: true``: its virtual services' certificates by server name
        #: (requests are routed by the chosen certificate's virtual services,
        #: engine/sni.py); None: a plain Gateway
        self.tls = TlsRoutes(virtual_services) if gateway.ssl else None
        self.limit = limit
        #: ``healthCheck.path`` (bytes): answered by the engine before routing
        self.health_path = gateway.health_path
        #: ``options.accessLoggingService``'s file sinks (written by runtime/accessfiles.py)
        self.access_logs = gateway.access_logs
        #: ``gzip`` / ``brotli``: response compression (engine/compress.py), or None
        self.compression = gateway.compression
        name = gateway.hcm.server_name
        #: ``serverName``: the Server header of every response
        self.server_edit = (ResponseEdit(frozenset({b"server"}), ((b"Server", name.encode("ascii")),))
                            if name is not None else None)
        self._limit_calls = flatten_chain((limit,)) if limit is not None else ()
        self._calls: dict[int, tuple[Call, ...]] = {}

    def calls(self, route_calls: tuple[Call, ...]) -> tuple[Call, ...]:
        """A route's chain on this Gateway: the default bucket first, unless
        the route has a ``localRatelimit`` of its own (virtual host or route)."""
        if self.limit is None:
            return route_calls
        found = self._calls.get(id(route_calls))
        if found is None:
            own = any(step.plugin == LOCAL_LIMIT for step, _, _ in route_calls)
            found = route_calls if own else self._limit_calls + route_calls
            self._calls[id(route_calls)] = found
        return found


def gateway_notes(config: Config) -> list[str]:
    """A note for each Gateway this process does not serve (``proxyNames``
    names other proxies only), and each ``ssl: true`` one that selects no
    virtual service with ``sslConfig``, for ``twistgw check`` and the log."""
    notes = []
    for _key, gw in sorted(config.of_kind("Gateway").items()):
        if not isinstance(gw, GlooGateway):
            continue
        if not gw.served_here():
            notes.append(f"Gateway {gw.key} is for {', '.join(gw.proxy_names)}, not {DEFAULT_PROXY}: this"
                         f" gateway does not serve it (no listener)")
        elif gw.ssl and not any(selects(gw, vs, vs.labels, has_ssl(vs)) for vs in config.virtual_services):
            notes.append(f"Gateway {gw.key} has ssl: true and selects no VirtualService with sslConfig: its"
                         f" listener has no certificate, and closes every connection before the handshake")
    return notes


def build_gateway_views(config: Config, host: PluginHost, view: ResourceView, issues: list[ConfigIssue],
                        compiled_by_plugin: dict[str, list[Any]]) -> dict[str, GatewayView]:
    """A view per Gateway this process serves (``proxyNames``); problems
    (two Gateways on one address and port, a bucket the plugin refuses...)
    go to ``issues``; each compiled default bucket to ``compiled_by_plugin``
    (so the plugin keeps its tokens across reloads)."""
    views: dict[str, GatewayView] = {}
    binds: dict[tuple[str, int], str] = {}
    for _key, gw in sorted(config.of_kind("Gateway").items()):
        if not isinstance(gw, GlooGateway) or not gw.served_here():
            continue
        other = binds.setdefault(gw.bind, gw.key)
        if other != gw.key:
            _issue(config, issues, gw, ("spec", "bindPort"), f"{gw.bind_address}:{gw.bind_port} is also the"
                   f" address of Gateway {other} (bind ports must not conflict across gateways)")
            continue
        selected = tuple(vs for vs in config.virtual_services if selects(gw, vs, vs.labels, has_ssl(vs)))
        limit = _limit_step(config, host, view, gw, issues)
        if limit is not None:
            compiled_by_plugin.setdefault(LOCAL_LIMIT, []).append(limit.options)
        views[gw.key] = GatewayView(gw, selected, limit, _tracing(config, gw, issues))
    return views


def _tracing(config: Config, gw: GlooGateway, issues: list[ConfigIssue]) -> GatewayTracing | None:
    """The Gateway's tracing, its collector Upstream resolved to where spans
    go (OTLP/gRPC: Gloo's OpenTelemetryConfig has no other transport)."""
    settings = gw.hcm.tracing
    if settings is None:
        return None
    at = ("spec", "httpGateway", "options", "httpConnectionManagerSettings", "tracing", "openTelemetryConfig",
          "collectorUpstreamRef")
    ns, name = settings.collector
    if ("Upstream", ns, name) in config.invalid:
        return None  # its own problems are reported
    info = config.upstreams.get((ns, name))
    if info is None:
        _issue(config, issues, gw, at, f"dangling reference: no Upstream {ns}/{name} (the OpenTelemetry"
               f" collector)")
        return None
    if not info.endpoints:
        _issue(config, issues, gw, at, f"Upstream {ns}/{name} has no endpoint to send spans to")
        return None
    tls = info.tls
    if tls is not None and tls.cert_pem is not None:
        _issue(config, issues, gw, at, f"Upstream {ns}/{name} has a client certificate: mutual TLS to the"
               f" collector is not supported by twistgw")
        return None
    endpoint = info.endpoints[0]
    target = CollectorTarget("grpc", endpoint.host, endpoint.port, tls=tls is not None,
                             server_name=(tls.sni or None) if tls is not None else None,
                             ca_pem=tls.ca_pem if tls is not None else None, authority=settings.authority)
    return GatewayTracing(settings, gw.key, gw.name, target)


def _limit_step(config: Config, host: PluginHost, view: ResourceView, gw: GlooGateway,
                issues: list[ConfigIssue]) -> ChainStep | None:
    local = gw.local_limit
    if local is None or local.default_limit is None:
        return None
    at = ("spec", "httpGateway", "options", "httpLocalRatelimit", "defaultLimit")
    if LOCAL_LIMIT not in host.infos:
        _issue(config, issues, gw, at, f"needs the {LOCAL_LIMIT!r} plugin (twistgw_ratelimit), which is not"
               f" installed")
        return None
    settings: Mapping[str, Any] = config.settings
    if local.headers:
        server = dict(settings.get("ratelimitServer") or {})
        server.pop(proto_name("enableXRatelimitHeaders"), None)  # the one spelling, set
        server["enableXRatelimitHeaders"] = True
        settings = {**settings, "ratelimitServer": server}
    scoped = ResourceView(config.upstreams, config.secrets, config.auth_configs, config.resolve_kube,
                          settings, config.directory, config.invalid, config.resources)
    scope = OptionsScope(gw.namespace, f"Gateway {gw.key}", None, scoped, {})
    try:
        compiled = compile_plugin(host, LOCAL_LIMIT, dict(local.default_limit), scope)
    except OptionsError as exc:
        relocated = OptionsError.several([OptionsError(at + p.path, p.reason) for p in exc.problems])
        resource_problems(config, relocated, ("Gateway", gw.namespace, gw.name), issues)
        return None
    return ChainStep(LOCAL_LIMIT, compiled, host.impl(LOCAL_LIMIT, "twistgw_authenticate"),
                     host.impl(LOCAL_LIMIT, "twistgw_authorize"))


def _issue(config: Config, issues: list[ConfigIssue], gw: GlooGateway, path: tuple[str | int, ...],
           reason: str) -> None:
    problem = OptionsError(path, reason)
    resource_problems(config, problem, ("Gateway", gw.namespace, gw.name), issues)
