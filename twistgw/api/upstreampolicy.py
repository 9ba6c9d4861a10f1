"""What an Upstream's traffic policy needs at run time, resolved: TLS to its
endpoints (``sslConfig``) and circuit breakers (``circuitBreakers``). Carried
by :class:`twistgw.api.types.UpstreamInfo`; the engine acts on them.
"""

from __future__ import annotations

import attrs

__all__ = ["CircuitBreakers", "UpstreamTls"]


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
