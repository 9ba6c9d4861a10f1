"""Gloo's ``Gateway`` kind (``gateway.solo.io/v1``): one listener, the
virtual services it serves, and the HTTP connection manager's settings.

What is read (everything else is refused by name, with the reason):

* ``bindAddress`` (default ``::``, every address), ``bindPort``;
* ``ssl``: an ``ssl: true`` Gateway serves the virtual services that have
  ``sslConfig``, a plain one those without (Gloo's rule);
* ``useProxyProto``: the listener reads a PROXY protocol header (v1 or v2)
  first, and the client address is the one it names;
* ``proxyNames``: which proxies the Gateway is for (Gloo's default,
  ``[gateway-proxy]``); twistgw is the proxy named ``gateway-proxy``, so a
  Gateway for other proxies only is not served (a note says so);
* ``httpGateway``: ``virtualServices`` (references), or
  ``virtualServiceSelector`` (labels), within ``virtualServiceNamespaces``
  (``*`` or absent: every namespace); and ``options``:
  ``httpConnectionManagerSettings`` (:class:`HcmSettings`),
  ``httpLocalRatelimit`` (:class:`LocalLimitSettings`) and ``healthCheck``
  (the path the listener answers itself: 200, or 503 while draining),
  ``gzip`` and twistgw's ``brotli`` (response compression,
  :mod:`twistgw.config.compression`);
* ``options.accessLoggingService``: access logs written to files
  (:mod:`twistgw.config.accesslogs`); the other listener options are refused.

See docs/gateways.md.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Mapping

import attrs

from twistgw.api.fields import FieldReader, Path
from twistgw.config.accesslogs import AccessLogSink, read_listener_options
from twistgw.config.compression import Compression, read_brotli, read_gzip
from twistgw.config.envelope import Envelope
from twistgw.config.http2 import DEFAULT as HTTP2_DEFAULT, Http2Options, read_codec_type, read_http2_options
from twistgw.config.model import Source, VirtualService
from twistgw.config.tracing import ListenerTracing, read_listener_tracing

__all__ = ["DEFAULT_PROXY", "GlooGateway", "HcmSettings", "LocalLimitSettings", "read_gateway", "selects"]

#: the proxy name a twistgw process answers to (Gloo's default Proxy)
DEFAULT_PROXY = "gateway-proxy"

_SPEC_FIELDS = ("bindAddress", "bindPort", "httpGateway", "options", "proxyNames", "ssl", "useProxyProto")
_SPEC_REFUSED = {
    "tcpGateway": "TCP proxying is out of twistgw's scope (an HTTP gateway); use httpGateway",
    "hybridGateway": "hybrid gateways (filter chains matched by SNI or source address, TCP and HTTP mixed) are"
                     " not supported; use one httpGateway per Gateway",
    "routeOptions": "route-configuration options (maxDirectResponseBodySizeBytes, mostSpecificHeaderMutationsWins)"
                    " are not supported",
}
_HTTP_FIELDS = ("options", "virtualServiceNamespaces", "virtualServiceSelector", "virtualServices")
_HTTP_REFUSED = {
    "virtualServiceExpressions": "set-based selectors are not supported; use virtualServiceSelector (labels)"
                                 " or virtualServices",
}
_OPTIONS_FIELDS = ("brotli", "grpcWeb", "gzip", "healthCheck", "httpConnectionManagerSettings", "httpLocalRatelimit")
_LOCAL_FIELDS = ("defaultLimit", "enableXRatelimitHeaders", "localRateLimitPerDownstreamConnection")

#: HttpConnectionManagerSettings fields twistgw applies
_HCM_FIELDS = ("codecType", "generateRequestId", "http2ProtocolOptions", "idleTimeout", "preserveExternalRequestId",
               "requestHeadersTimeout", "serverName", "skipXffAppend", "tracing", "useRemoteAddress",
               "xffNumTrustedHops")
#: the ones it does not, each with why
_HCM_REFUSED = {
    "maxRequestHeadersKb": "the request-head limit is fixed (16 KiB, answered 431, over HTTP/1.1 and HTTP/2),"
                           " not per listener",
    "requestTimeout": "twistgw bounds the request head (requestHeadersTimeout) and each upstream answer"
                      " (the route's timeout), not a whole-request timer",
    "streamIdleTimeout": "use idleTimeout (the connection's) or the route's timeout",
    "drainTimeout": "draining is --drain-timeout, for the whole process",
    "delayedCloseTimeout": "the TLS close grace period is fixed",
    "maxConnectionDuration": "connections are not closed by age",
    "maxStreamDuration": "use the route's timeout",
    "maxHeadersCount": "the header count limit is fixed (100, answered 431)",
    "maxRequestsPerConnection": "keep-alive connections are not closed after a number of requests",
    "via": "twistgw adds no Via header",
    "uuidRequestIdConfig": "x-request-id is a plain UUID4: no trace reason is packed into it, and it does not"
                           " decide trace sampling",
    "proxy100Continue": "twistgw answers 100-continue itself, after the chain admits the request",
    "acceptHttp10": "HTTP/1.0 is always accepted",
    "defaultHostForHttp10": "an HTTP/1.0 request without Host goes to the '*' virtual service",
    "forwardClientCertDetails": "client certificates are not forwarded",
    "setCurrentClientCertDetails": "client certificates are not forwarded",
    "serverHeaderTransformation": "the Server header is the upstream's, or serverName when set",
    "pathWithEscapedSlashesAction": "escaped slashes are normalised by twistgw's path rules (docs/security.md)",
    "mergeSlashes": "paths are normalised by twistgw's own rules",
    "normalizePath": "paths are always normalised",
    "headersWithUnderscoresAction": "header names with '_' are always dropped",
    "upgrades": "WebSocket upgrades are per route (options.upgrades)",
    "strictHeaderValidation": "header validation is always strict (llhttp)",
    "allowChunkedLength": "a request with both Content-Length and chunked framing is always refused",
    "enableTrailers": "trailers are not forwarded",
    "properCaseHeaderKeyFormat": "header names keep their case",
    "preserveCaseHeaderKeyFormat": "header names keep their case",
    "internalAddressConfig": "internal-address detection is not supported",
    "appendXForwardedPort": "X-Forwarded-Port is not set",
    "earlyHeaderManipulation": "use headerManipulation on virtual hosts and routes",
    "stripAnyHostPort": "the port in Host is always ignored for routing",
    "cors": "CORS is a virtual-host or route option (options.cors)",
}


@attrs.frozen
class HcmSettings:
    """``httpConnectionManagerSettings`` as twistgw applies them.

    :ivar gloo_xff: one of ``xffNumTrustedHops``, ``useRemoteAddress``,
        ``skipXffAppend`` is written: Envoy's X-Forwarded-For rules apply
        (otherwise twistgw's own: the header is replaced by the peer).
    """

    xff_hops: int = 0
    use_remote_address: bool = True
    skip_xff_append: bool = False
    gloo_xff: bool = False
    server_name: str | None = None
    idle_timeout: float | None = None
    head_timeout: float | None = None
    #: HTTP/2's limits (``http2ProtocolOptions``); None: ``codecType: HTTP1``,
    #: the listener serves HTTP/1.1 only
    http2: Http2Options | None = HTTP2_DEFAULT
    #: ``generateRequestId`` (Envoy's default: true): every request goes
    #: upstream with an ``x-request-id``
    generate_request_id: bool = True
    #: ``preserveExternalRequestId``: a client's sane ``x-request-id`` is
    #: kept even on an edge listener (``useRemoteAddress``)
    preserve_external_request_id: bool = False
    #: ``tracing`` with its provider (:mod:`twistgw.config.tracing`); None:
    #: requests on this listener are not traced
    tracing: ListenerTracing | None = None


@attrs.frozen
class LocalLimitSettings:
    """``httpLocalRatelimit``: ``default_limit`` is the raw ``TokenBucket``
    (compiled by the ``localRatelimit`` plugin)."""

    default_limit: Mapping[str, Any] | None = None
    headers: bool = False
    per_connection: bool = False


@attrs.frozen
class GlooGateway:
    """One Gateway: a listener and what it serves."""

    namespace: str
    name: str
    bind_address: str
    bind_port: int
    ssl: bool = False
    proxy_protocol: bool = False
    proxy_names: tuple[str, ...] = (DEFAULT_PROXY,)
    #: ``virtualServices`` as (namespace, name), or None
    refs: tuple[tuple[str, str], ...] | None = None
    #: ``virtualServiceSelector``, or None
    selector: Mapping[str, str] | None = None
    #: ``virtualServiceNamespaces``; None: every namespace
    namespaces: tuple[str, ...] | None = None
    hcm: HcmSettings = HcmSettings()
    local_limit: LocalLimitSettings | None = None
    #: ``httpGateway.options.healthCheck.path`` as bytes (the request target
    #: answered 200, or 503 while draining), or None
    health_path: bytes | None = None
    #: ``options.accessLoggingService``'s file sinks
    access_logs: tuple[AccessLogSink, ...] = ()
    #: ``httpGateway.options.grpcWeb.disable``: grpc-web requests are not
    #: translated to gRPC on this listener (on by default, as in Gloo)
    grpc_web_disabled: bool = False
    #: ``httpGateway.options.gzip`` and ``brotli``: response compression, or None
    compression: Compression | None = None
    source: Source | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bind(self) -> tuple[str, int]:
        return (self.bind_address, self.bind_port)

    def served_here(self) -> bool:
        """Is this Gateway for this process (``proxyNames``)?"""
        return DEFAULT_PROXY in self.proxy_names


def selects(gw: GlooGateway, vs: VirtualService, labels: Mapping[str, str], has_ssl: bool) -> bool:
    """Does ``gw`` serve ``vs`` (Gloo's rules: the ssl flag must match; then
    the references, or the selector's labels, or every virtual service, in
    the namespaces listed)?"""
    if has_ssl != gw.ssl:
        return False
    if gw.refs is not None:
        return (vs.namespace, vs.name) in gw.refs
    if gw.namespaces is not None and "*" not in gw.namespaces and vs.namespace not in gw.namespaces:
        return False
    if gw.selector is not None:
        return all(labels.get(k) == v for k, v in gw.selector.items())
    return True


def _refuse(r: FieldReader, m: Mapping[str, Any], path: Path, refused: Mapping[str, str]) -> dict[str, Any]:
    return dict(r.mapping(m, path, refused=refused))


def read_gateway(r: FieldReader, res: Envelope) -> GlooGateway:
    spec = _refuse(r, r.mapping(res.spec, ("spec",)), ("spec",), _SPEC_REFUSED)
    spec = r.mapping(spec, ("spec",), _SPEC_FIELDS, required=("bindPort",))
    if "httpGateway" not in spec and r.count() == 0:
        r.issue(("spec", "httpGateway"), "is required: a Gateway without httpGateway (or tcpGateway,"
                " hybridGateway) gets no listener in Gloo; write httpGateway: {} to serve every virtual service")
    out: dict[str, Any] = {}
    with r.part():
        address = r.string(spec.get("bindAddress", "::"), ("spec", "bindAddress"))
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise r.fail(("spec", "bindAddress"),
                         f"must be an IP address (e.g. '::' or 0.0.0.0), got {address!r}") from None
        out["bind_address"] = address
    with r.part():
        out["bind_port"] = r.port(spec["bindPort"], ("spec", "bindPort"))
    for field, attr in (("ssl", "ssl"), ("useProxyProto", "proxy_protocol")):
        with r.part():
            out[attr] = r.boolean(spec.get(field, False), ("spec", field))
    with r.part():
        names = r.sequence(spec.get("proxyNames") or [DEFAULT_PROXY], ("spec", "proxyNames"))
        out["proxy_names"] = tuple(r.string(n, ("spec", "proxyNames", i)) for i, n in enumerate(names))
    with r.part():
        out.update(_read_http(r, spec.get("httpGateway") or {}, ("spec", "httpGateway"), res.namespace))
    with r.part():
        if "options" in spec:
            out["access_logs"] = read_listener_options(r, spec["options"], ("spec", "options"))
    if "bind_address" not in out or "bind_port" not in out:
        raise r.invalid()
    return GlooGateway(res.namespace, res.name, source=res.source, **out)


def _read_http(r: FieldReader, value: Any, path: Path, ns: str) -> dict[str, Any]:
    http = _refuse(r, r.mapping(value, path), path, _HTTP_REFUSED)
    http = r.mapping(http, path, _HTTP_FIELDS)
    out: dict[str, Any] = {}
    given = [k for k in ("virtualServices", "virtualServiceSelector") if k in http]
    if len(given) > 1:
        r.issue(path, "set virtualServices or virtualServiceSelector, not both (Gloo would use only one)")
    with r.part():
        if "virtualServices" in http:
            refs = []
            for i, ref in enumerate(r.sequence(http["virtualServices"], path + ("virtualServices",))):
                with r.part():
                    m = r.mapping(ref, path + ("virtualServices", i), {"name", "namespace"}, required=("name",))
                    refs.append((r.string(m.get("namespace", ns), path + ("virtualServices", i, "namespace")),
                                 r.string(m["name"], path + ("virtualServices", i, "name"))))
            out["refs"] = tuple(refs)
    with r.part():
        if "virtualServiceSelector" in http:
            out["selector"] = r.labels(http["virtualServiceSelector"], path + ("virtualServiceSelector",))
    with r.part():
        if "virtualServiceNamespaces" in http:
            npath = path + ("virtualServiceNamespaces",)
            if "virtualServices" in http:
                r.issue(npath, "applies to virtualServiceSelector or to selecting every virtual service, not to"
                        " virtualServices (references name their namespace)")
            out["namespaces"] = tuple(r.string(n, npath + (i,))
                                      for i, n in enumerate(r.sequence(http["virtualServiceNamespaces"], npath)))
    with r.part():
        known = _OPTIONS_FIELDS
        opts = r.mapping(http.get("options"), path + ("options",), optional=True, names=known)
        for key in opts:
            if key not in known:
                r.issue(path + ("options", key), f"is not supported by twistgw on a Gateway (it applies"
                        f" {', '.join(known)}); virtual-host and route options go on the VirtualService")
        with r.part():
            if "httpConnectionManagerSettings" in opts:
                out["hcm"] = _read_hcm(r, opts["httpConnectionManagerSettings"],
                                       path + ("options", "httpConnectionManagerSettings"), ns)
        with r.part():
            if "grpcWeb" in opts:
                gp = path + ("options", "grpcWeb")
                g = r.mapping(opts["grpcWeb"] or {}, gp, {"disable"})
                if g.get("disable") is not None:
                    out["grpc_web_disabled"] = r.boolean(g["disable"], gp + ("disable",))
        encodings = []
        for key, read in (("brotli", read_brotli), ("gzip", read_gzip)):  # the order of preference
            with r.part():
                if key in opts:
                    encodings.append(read(r, opts[key], path + ("options", key)))
        if encodings:
            out["compression"] = Compression(tuple(encodings))
        with r.part():
            if "healthCheck" in opts:
                out["health_path"] = _read_health(r, opts["healthCheck"], path + ("options", "healthCheck"))
        with r.part():
            if "httpLocalRatelimit" in opts:
                out["local_limit"] = _read_local(r, opts["httpLocalRatelimit"],
                                                 path + ("options", "httpLocalRatelimit"))
    return out


def _read_hcm(r: FieldReader, value: Any, path: Path, ns: str = "default") -> HcmSettings:
    m = r.mapping(_refuse(r, r.mapping(value, path), path, _HCM_REFUSED), path, _HCM_FIELDS)
    out: dict[str, Any] = {}
    with r.part():
        if "xffNumTrustedHops" in m:
            out["xff_hops"] = r.integer(m["xffNumTrustedHops"], path + ("xffNumTrustedHops",), 0, 64)
    for field, attr in (("useRemoteAddress", "use_remote_address"), ("skipXffAppend", "skip_xff_append"),
                        ("generateRequestId", "generate_request_id"),
                        ("preserveExternalRequestId", "preserve_external_request_id")):
        with r.part():
            if field in m:
                out[attr] = r.boolean(m[field], path + (field,))
    out["gloo_xff"] = any(k in m for k in ("xffNumTrustedHops", "useRemoteAddress", "skipXffAppend"))
    with r.part():
        if "serverName" in m:
            out["server_name"] = _header_value(r, m["serverName"], path + ("serverName",))
    for field, attr in (("idleTimeout", "idle_timeout"), ("requestHeadersTimeout", "head_timeout")):
        with r.part():
            if field in m:
                out[attr] = r.duration(m[field], path + (field,))
    auto = True
    with r.part():
        if "codecType" in m:
            auto = read_codec_type(r, m["codecType"], path + ("codecType",))
    with r.part():
        if "http2ProtocolOptions" in m:
            out["http2"] = read_http2_options(r, m["http2ProtocolOptions"], path + ("http2ProtocolOptions",))
    with r.part():
        if m.get("tracing") is not None:
            out["tracing"] = read_listener_tracing(r, m["tracing"], path + ("tracing",), ns)
    if not auto:
        out["http2"] = None
    return HcmSettings(**out)


def _read_health(r: FieldReader, value: Any, path: Path) -> bytes:
    """``healthCheck: {path}``: Envoy's health-check filter, matched on the
    whole request target (``:path``, query included), exactly."""
    m = r.mapping(value, path, {"path"}, required=("path",))
    text = r.string(m["path"], path + ("path",))
    if not text.startswith("/") or not text.isascii() or not text.isprintable() or " " in text:
        raise r.fail(path + ("path",), f"must be a request path starting with '/' (printable ASCII), got {text!r}")
    return text.encode("ascii")


def _header_value(r: FieldReader, value: Any, path: Path) -> str:
    text = r.string(value, path)
    if not text.isprintable() or not text.isascii() or text != text.strip():
        raise r.fail(path, "must be printable ASCII without leading or trailing spaces (a header value)")
    return text


def _read_local(r: FieldReader, value: Any, path: Path) -> LocalLimitSettings:
    m = r.mapping(value, path, _LOCAL_FIELDS)
    out: dict[str, Any] = {}
    with r.part():
        if "defaultLimit" in m:
            out["default_limit"] = r.mapping(m["defaultLimit"], path + ("defaultLimit",))
    with r.part():
        out["headers"] = r.boolean(m.get("enableXRatelimitHeaders", False), path + ("enableXRatelimitHeaders",))
    with r.part():
        per = r.boolean(m.get("localRateLimitPerDownstreamConnection", False),
                        path + ("localRateLimitPerDownstreamConnection",))
        if per:
            raise r.fail(path + ("localRateLimitPerDownstreamConnection",),
                         "is not supported by twistgw: token buckets are per gateway process, not per connection")
    return LocalLimitSettings(**out)
