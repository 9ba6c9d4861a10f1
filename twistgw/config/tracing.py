"""Gloo's tracing settings, read into models (no I/O): a Gateway's
``httpGateway.options.httpConnectionManagerSettings.tracing``
(``ListenerTracingSettings``) and a route's ``options.tracing``
(``RouteTracingSettings``), both in Gloo's ``tracing.proto``.

Served: the OpenTelemetry provider (``openTelemetryConfig`` with
``collectorUpstreamRef``: spans go over OTLP/gRPC, the only transport
Gloo's ``OpenTelemetryConfig`` has), ``serviceName``, ``grpcService.authority``,
``maxCacheSize``, ``requestHeadersForTags``, ``environmentVariablesForTags``,
``literalsForTags``, ``tracePercentages``, ``verbose: false``,
``spawnUpstreamSpan: true``; on a route ``routeDescriptor``,
``tracePercentages`` and ``propagate``. Everything else is refused by name,
with the reason (docs/gateways.md, "Tracing").
"""

from __future__ import annotations

from typing import Any

import attrs

from twistgw.api.fields import FieldReader, Path
from twistgw.api.headers import canonical_name

__all__ = ["ListenerTracing", "RouteTracing", "TracePercentages", "read_listener_tracing", "read_route_tracing"]

_LISTENER_FIELDS = ("requestHeadersForTags", "verbose", "tracePercentages", "openTelemetryConfig",
                    "environmentVariablesForTags", "literalsForTags", "spawnUpstreamSpan")
_PROVIDERS_REFUSED = {
    "zipkinConfig": "the Zipkin provider is not supported: twistgw exports spans over OTLP"
                    " (openTelemetryConfig); an OpenTelemetry collector can forward them to Zipkin",
    "datadogConfig": "the Datadog provider is not supported: twistgw exports spans over OTLP"
                     " (openTelemetryConfig); the Datadog agent takes OTLP",
    "openCensusConfig": "the OpenCensus provider is not supported (OpenCensus is retired): use"
                        " openTelemetryConfig",
    "metadataForTags": "tags from Envoy dynamic metadata are not supported (twistgw has no dynamic metadata)",
}
_OTEL_FIELDS = ("collectorUpstreamRef", "serviceName", "grpcService", "maxCacheSize")
_OTEL_REFUSED = {
    "clusterName": "names an Envoy cluster, and twistgw has none: use collectorUpstreamRef (an Upstream)",
}
#: headers whose values are credentials: never a tag
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
_ROUTE_FIELDS = ("routeDescriptor", "tracePercentages", "propagate")
_PERCENT_FIELDS = ("clientSamplePercentage", "randomSamplePercentage", "overallSamplePercentage")


@attrs.frozen
class TracePercentages:
    """``tracePercentages`` in 10000ths (Envoy rounds a ``Percent`` to a
    ``FractionalPercent`` of ``TEN_THOUSAND``): each 10000 by default."""

    client: int = 10000
    random: int = 10000
    overall: int = 10000


ALL = TracePercentages()


@attrs.frozen
class ListenerTracing:
    """A Gateway's tracing: where spans go and what they carry."""

    #: the collector's Upstream, (namespace, name)
    collector: tuple[str, str]
    #: the OTLP resource's ``service.name`` (None: the Gateway's name)
    service_name: str | None = None
    #: ``grpcService.authority``: the ``:authority`` of the export calls
    authority: str | None = None
    #: ``maxCacheSize``: spans held for export at most (Envoy's default 1024)
    max_cache_size: int = 1024
    #: ``requestHeadersForTags``: (header name as written, canonical bytes)
    request_headers: tuple[tuple[str, bytes], ...] = ()
    #: ``environmentVariablesForTags``: (tag, variable, default or None)
    environment_tags: tuple[tuple[str, str, str | None], ...] = ()
    #: ``literalsForTags``: (tag, value)
    literal_tags: tuple[tuple[str, str], ...] = ()
    percentages: TracePercentages = ALL


@attrs.frozen
class RouteTracing:
    """A route's ``options.tracing``."""

    #: ``routeDescriptor``: the server span's name on this route (None: the default)
    descriptor: str | None = None
    #: the route's own ``tracePercentages`` (None: the Gateway's)
    percentages: TracePercentages | None = None
    #: ``propagate: false``: no trace headers go to the upstream
    propagate: bool = True


def _percent(r: FieldReader, value: Any, path: Path) -> int:
    """A percentage 0 to 100, as Gloo's ``FloatValue`` (``{value: 50}``
    written as a wrapper is accepted too), in 10000ths."""
    if isinstance(value, dict):
        value = r.mapping(value, path, ("value",), required=("value",))["value"]
        path = path + ("value",)
    return round(r.number(value, path, 0.0, 100.0) * 100)


def read_percentages(r: FieldReader, value: Any, path: Path) -> TracePercentages:
    m = r.mapping(value, path, _PERCENT_FIELDS, optional=True)
    out: dict[str, int] = {}
    for field, attr in zip(_PERCENT_FIELDS, ("client", "random", "overall"), strict=True):
        with r.part():
            if m.get(field) is not None:
                out[attr] = _percent(r, m[field], path + (field,))
    return TracePercentages(**out)


def _tag_text(r: FieldReader, value: Any, path: Path) -> str:
    text = r.string(value, path)
    if not text.isprintable():
        raise r.fail(path, "must be printable text")
    return text


def _read_tags(r: FieldReader, m: dict[str, Any], path: Path, out: dict[str, Any]) -> None:
    """``requestHeadersForTags``, ``environmentVariablesForTags``, ``literalsForTags``."""
    with r.part():
        names = []
        for i, item in enumerate(r.sequence(m.get("requestHeadersForTags"), path + ("requestHeadersForTags",),
                                            optional=True)):
            with r.part():
                if isinstance(item, dict):  # a StringValue wrapper
                    item = r.mapping(item, path + ("requestHeadersForTags", i), ("value",), required=("value",))[
                        "value"]
                name = r.header_name(item, path + ("requestHeadersForTags", i))
                if name.lower() in _CREDENTIAL_HEADERS:
                    raise r.fail(path + ("requestHeadersForTags", i), f"{name} carries credentials, and spans"
                                 " leave the gateway: twistgw does not tag it")
                names.append((name, canonical_name(name.encode("ascii"))))
        out["request_headers"] = tuple(names)
    with r.part():
        tags = []
        at = path + ("environmentVariablesForTags",)
        for i, item in enumerate(r.sequence(m.get("environmentVariablesForTags"), at, optional=True)):
            with r.part():
                e = r.mapping(item, at + (i,), ("tag", "name", "defaultValue"), required=("tag", "name"))
                default = _tag_text(r, e["defaultValue"], at + (i, "defaultValue")) if e.get(
                    "defaultValue") is not None else None
                tags.append((_tag_text(r, e["tag"], at + (i, "tag")), _tag_text(r, e["name"], at + (i, "name")),
                             default))
        out["environment_tags"] = tuple(tags)
    with r.part():
        literals = []
        at = path + ("literalsForTags",)
        for i, item in enumerate(r.sequence(m.get("literalsForTags"), at, optional=True)):
            with r.part():
                e = r.mapping(item, at + (i,), ("tag", "value"), required=("tag", "value"))
                literals.append((_tag_text(r, e["tag"], at + (i, "tag")),
                                 r.string(e["value"], at + (i, "value"), nonempty=False)))
        out["literal_tags"] = tuple(literals)


def read_listener_tracing(r: FieldReader, value: Any, path: Path, namespace: str) -> ListenerTracing | None:
    """``tracing``; None when no provider is configured (Gloo: "if not
    specified, no tracing will be performed"): the other fields alone do
    nothing in Gloo, so they are refused without one."""
    bad = r.count()
    m = r.mapping(value, path, _LISTENER_FIELDS, optional=True, refused=_PROVIDERS_REFUSED)
    out: dict[str, Any] = {}
    with r.part():
        if m.get("verbose") is not None and r.boolean(m["verbose"], path + ("verbose",)):
            raise r.fail(path + ("verbose",), "is not supported by twistgw when true: spans carry no"
                         " streaming events (annotations)")
    with r.part():
        if m.get("spawnUpstreamSpan") is not None and not r.boolean(m["spawnUpstreamSpan"],
                                                                    path + ("spawnUpstreamSpan",)):
            raise r.fail(path + ("spawnUpstreamSpan",), "false is not supported by twistgw: the upstream request"
                         " is always its own client span, a child of the gateway's server span (Envoy's"
                         " spawnUpstreamSpan: true)")
    with r.part():
        if "tracePercentages" in m:
            out["percentages"] = read_percentages(r, m["tracePercentages"], path + ("tracePercentages",))
    _read_tags(r, m, path, out)
    if "openTelemetryConfig" not in m:
        if any(m.get(k) is not None for k in m):
            r.issue(path, "sets no provider: write openTelemetryConfig (with collectorUpstreamRef), the provider"
                    " twistgw serves; without one Gloo performs no tracing, so these settings would do nothing")
        return None
    at = path + ("openTelemetryConfig",)
    otel = r.mapping(m["openTelemetryConfig"], at, _OTEL_FIELDS, refused=_OTEL_REFUSED)
    if "collectorUpstreamRef" not in otel:
        raise r.fail(at + ("collectorUpstreamRef",), "is required: the Upstream of the OpenTelemetry collector"
                     " (OTLP/gRPC)")
    ref = r.reference(otel["collectorUpstreamRef"], at + ("collectorUpstreamRef",), namespace)
    with r.part():
        if otel.get("serviceName"):
            out["service_name"] = _tag_text(r, otel["serviceName"], at + ("serviceName",))
    with r.part():
        if otel.get("grpcService") is not None:
            g = r.mapping(otel["grpcService"], at + ("grpcService",), ("authority",))
            if g.get("authority"):
                authority = _tag_text(r, g["authority"], at + ("grpcService", "authority"))
                if " " in authority or not authority.isascii():
                    raise r.fail(at + ("grpcService", "authority"), "must be a host[:port] (ASCII, no spaces)")
                out["authority"] = authority
    with r.part():
        if otel.get("maxCacheSize") is not None:
            size = otel["maxCacheSize"]
            if isinstance(size, dict):
                size = r.mapping(size, at + ("maxCacheSize",), ("value",), required=("value",))["value"]
            out["max_cache_size"] = r.integer(size, at + ("maxCacheSize",), 1, 1 << 20)
    if r.count() > bad:
        raise r.invalid()
    return ListenerTracing((ref.namespace, ref.name), **out)


def read_route_tracing(r: FieldReader, value: Any, path: Path) -> RouteTracing:
    m = r.mapping(value, path, _ROUTE_FIELDS, optional=True)
    out: dict[str, Any] = {}
    with r.part():
        if m.get("routeDescriptor"):
            out["descriptor"] = _tag_text(r, m["routeDescriptor"], path + ("routeDescriptor",))
    with r.part():
        if m.get("tracePercentages") is not None:
            out["percentages"] = read_percentages(r, m["tracePercentages"], path + ("tracePercentages",))
    with r.part():
        propagate = m.get("propagate")
        if isinstance(propagate, dict):  # a BoolValue wrapper
            propagate = r.mapping(propagate, path + ("propagate",), ("value",), required=("value",))["value"]
        if propagate is not None:
            out["propagate"] = r.boolean(propagate, path + ("propagate",))
    return RouteTracing(**out)
