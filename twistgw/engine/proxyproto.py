"""The PROXY protocol (HAProxy's, v1 and v2) in front of a client
connection, for a Gloo Gateway with ``useProxyProto: true``.

Twisted reads the header (``twisted.protocols.haproxy``: its wrapping
factory and protocol wrapper, whose ``getPeer`` answers the address the
header names). The wrapper connects the gateway's protocol before the
header has arrived, so :class:`ProxiedGatewayProtocol` reads its peer again
when the first bytes after the header reach it. A connection whose first
bytes are not a PROXY header, or a malformed one, is closed by Twisted's
wrapper before the gateway sees a byte; one that sends nothing is closed by
the idle timeout.
"""

from __future__ import annotations

from typing import Any

# Twisted's package exports only proxyEndpoint, which wraps a whole
# endpoint; the factory is wrapped per connection here so that a reload can
# switch useProxyProto on a listening socket without closing it.
from twisted.protocols.haproxy._wrapper import HAProxyWrappingFactory

from twistgw.engine.connection import GatewayProtocol

__all__ = ["ProxiedGatewayProtocol", "wrapping_factory"]


class ProxiedGatewayProtocol(GatewayProtocol):
    """A client connection behind a PROXY header: the client address is the
    header's source (the proxy's own for a v2 ``LOCAL`` header)."""

    _peer_read = False

    def dataReceived(self, data: bytes) -> None:
        if not self._peer_read:
            self._peer_read = True
            self.peer_host = getattr(self.transport.getPeer(), "host", "") or ""
        super().dataReceived(data)


def wrapping_factory(factory: Any) -> Any:
    """The factory whose protocol wrappers read the header for ``factory``'s
    connections (``wrapping.protocol(wrapping, inner)`` wraps one)."""
    return HAProxyWrappingFactory(factory)
