"""What an Upstream's traffic policy needs at run time, resolved: TLS to its
endpoints (``sslConfig``), circuit breakers (``circuitBreakers``) and the
connection settings (``connectionConfig``) and HTTP/2 (``useHttp2``). Carried by
:class:`twistgw.api.types.UpstreamInfo`; the engine acts on them. Also
``outlierDetection`` as read (:class:`OutlierDetection`), which the core's
balancers act on.
"""

from __future__ import annotations

import attrs

__all__ = ["H2_DEFAULT_WINDOW", "CircuitBreakers", "ConnectionConfig", "Http2Settings", "OutlierDetection",
           "TcpKeepalive", "UpstreamTls"]


@attrs.frozen(cache_hash=True)
class UpstreamTls:
    """TLS to an upstream's endpoints (Gloo's ``sslConfig``, or
    ``static.useTls``), resolved: PEM bytes read from the Secret or files.
    The engine builds one :func:`twistgw.tls.client_tls` creator per
    endpoint from it; the peer is always verified by name.
    """

    #: the name sent as SNI and verified (``sslConfig.sni``); "" → the
    #: endpoint's ``sniAddr``, else its address
    sni: str = ""
    #: trusted CAs (PEM); None: the system's store
    ca_pem: bytes | None = None
    #: client certificate and key (PEM) for mutual TLS
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    #: ``verifySubjectAltName``: names one of which the certificate must carry
    verify_names: tuple[str, ...] = ()
    min_version: str | None = None
    max_version: str | None = None
    ciphers: tuple[str, ...] = ()
    #: per-host ``sniAddr`` of static hosts: (address, name) pairs
    host_sni: tuple[tuple[str, str], ...] = ()

    def server_name(self, host: str) -> str:
        """The name sent as SNI and verified for endpoint ``host``."""
        for addr, name in self.host_sni:
            if addr == host:
                return name
        return self.sni or host



@attrs.frozen
class CircuitBreakers:
    """An Upstream's ``circuitBreakers`` (Envoy's thresholds; each defaults to
    Envoy's 1024 when the block is written): past one, a request is answered
    503 with ``x-envoy-overloaded: true`` (or, for ``max_retries``, is not
    retried)."""

    max_connections: int = 1024
    max_pending: int = 1024
    max_requests: int = 1024
    max_retries: int = 3


@attrs.frozen
class TcpKeepalive:
    """``connectionConfig.tcpKeepalive``: ``SO_KEEPALIVE`` on every upstream
    socket, with the probe settings that are written (None: the kernel's)."""

    probes: int | None = None
    #: seconds idle before the first probe (``TCP_KEEPIDLE``), rounded up
    time: int | None = None
    #: seconds between probes (``TCP_KEEPINTVL``), rounded up
    interval: int | None = None


@attrs.frozen(cache_hash=True)
class ConnectionConfig:
    """An Upstream's ``connectionConfig`` (Envoy's cluster connection
    settings, as Gloo names them); None in a field: the gateway's default."""

    #: ``maxRequestsPerConnection``: a pooled connection is closed after this
    #: many requests (0: no limit)
    max_requests: int = 0
    #: ``connectTimeout``: seconds to establish a connection
    connect_timeout: float | None = None
    tcp_keepalive: TcpKeepalive | None = None
    #: ``commonHttpProtocolOptions.idleTimeout``: seconds an idle pooled
    #: connection is kept (0: never closed for idleness)
    idle_timeout: float | None = None
    #: ``commonHttpProtocolOptions.maxHeadersCount``: response headers
    #: accepted from the upstream (more → 502); 0: the engine's byte limit only
    max_headers: int = 0


@attrs.frozen
class OutlierDetection:
    """An Upstream's ``outlierDetection`` (Envoy's cluster.OutlierDetection,
    with Envoy's defaults). Times in seconds; percentages 0-100."""

    consecutive_5xx: int = 5
    enforcing_consecutive_5xx: int = 100
    consecutive_gateway_failure: int = 5
    enforcing_consecutive_gateway_failure: int = 0
    interval: float = 10.0
    base_ejection_time: float = 30.0
    max_ejection_time: float = 300.0
    max_ejection_percent: int = 10


#: RFC 9113 §6.5.2: the initial window size of every HTTP/2 stream and connection
H2_DEFAULT_WINDOW = 65_535


@attrs.frozen(cache_hash=True)
class Http2Settings:
    """HTTP/2 to an upstream's endpoints (Gloo's ``useHttp2: true`` with
    the Upstream's HTTP/2 fields, or a discovered Service port that speaks
    HTTP/2). h2c (prior knowledge) to plain endpoints, ALPN ``h2`` over TLS.

    The windows are what the gateway lets the upstream send ahead of what
    the client read: the bound on what one response (a stream) or one
    connection buffers for a slow client (see docs/http2.md).
    """

    #: ``initialStreamWindowSize`` (bytes, 65535 to 2^31-1); twistgw's default, 1 MiB, is below Envoy's 256 MiB
    stream_window: int = 1 << 20
    #: ``initialConnectionWindowSize`` (bytes, 65535 to 2^31-1); default 16 MiB
    connection_window: int = 16 << 20
    #: ``maxConcurrentStreams``: streams the gateway opens on one connection
    #: (and by the peer's SETTINGS_MAX_CONCURRENT_STREAMS); Envoy's default, no limit of its own
    max_streams: int = 2_147_483_647
    #: ``protocolSelection: USE_DOWNSTREAM_PROTOCOL``: HTTP/2 only for
    #: clients that speak HTTP/2, HTTP/1.1 for the others
    downstream_protocol: bool = False
