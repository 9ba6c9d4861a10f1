"""The PROXY protocol (HAProxy's, v1 and v2) in front of a client
connection, for a Gloo Gateway with ``useProxyProto: true``.

:class:`ProxyHeaderReader` sits between the TCP transport and the
connection's protocol (the gateway's, or on an ``ssl`` Gateway the
ClientHello reader that starts TLS). It reads the header with
:func:`twistgw.engine.proxyheader.parse` (strict: see there), from as many
reads as it arrives in, and only then connects the protocol behind it,
whose transport it is from then on: ``getPeer`` and ``getHost`` answer the
header's source and destination (the connection's own for a v2 ``LOCAL``
or a v1 ``UNKNOWN`` header), so the client address the gateway routes,
logs, forwards (``X-Forwarded-For``, ``X-Real-Ip``) and rate-limits by is
never anything but a valid one. As Envoy's ``proxy_protocol`` listener
filter, it closes the connection without a byte of answer when the header
is not valid, or is not complete within the listener's head timeout
(``--head-timeout``, a Gateway's ``requestHeadersTimeout``); refusals are
counted in ``twistgw_proxy_protocol_errors_total``.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.protocols.policies import ProtocolWrapper
from twisted.python.failure import Failure
from zope.interface import directlyProvides, providedBy

from twistgw.api.counters import counter
from twistgw.engine.proxyheader import ProxyHeader, ProxyHeaderError, parse

__all__ = ["ERRORS", "ProxyHeaderReader"]

#: Envoy's ``downstream_cx_proxy_proto_error``
ERRORS = counter("twistgw_proxy_protocol_errors", "Connections closed because their PROXY protocol header was"
                 " invalid or incomplete in time (Gateways with useProxyProto).", ["reason"])
_INVALID = ERRORS.labels("invalid")
_TIMEOUT = ERRORS.labels("timeout")


def _address(host_port: tuple[str, int]) -> IPv4Address | IPv6Address:
    host, port = host_port
    return IPv6Address("TCP", host, port) if ":" in host else IPv4Address("TCP", host, port)


class ProxyHeaderReader(ProtocolWrapper):
    """Reads the PROXY header of one connection, then connects ``wrapped``
    to it (``timeout``: seconds the header may take, from the accept)."""

    _log = Logger()
    #: Any: Twisted's TCP transport provides more than the ITransport that
    #: Protocol declares (producers, abortConnection)
    transport: Any

    def __init__(self, wrapped: Any, reactor: Any, timeout: float) -> None:
        # no WrappingFactory: this wrapper is made per connection by the
        # listener's own factory (a reload may switch useProxyProto on a socket)
        super().__init__(None, wrapped)  # type: ignore[arg-type]
        self._reactor = reactor
        self._timeout = timeout
        self._buffer = b""
        self._timer: Any = None
        self.header: ProxyHeader | None = None
        self._refused = False

    def makeConnection(self, transport: Any) -> None:
        # not ProtocolWrapper's: the wrapped protocol is connected once the header is read
        Protocol.makeConnection(self, transport)

    def connectionMade(self) -> None:
        self._timer = self._reactor.callLater(self._timeout, self._too_slow)

    def dataReceived(self, data: bytes) -> None:
        if self.header is not None:
            self.wrappedProtocol.dataReceived(data)
            return
        if self._refused:
            return
        buffer = self._buffer + data if self._buffer else data
        try:
            found = parse(buffer)
        except ProxyHeaderError as exc:
            _INVALID.inc()
            self._refuse(str(exc))
            return
        if found is None:
            self._buffer = buffer
            return
        self._stop_timer()
        self.header, used = found
        self._buffer = b""
        directlyProvides(self, providedBy(self.transport))
        self.wrappedProtocol.makeConnection(self)  # type: ignore[arg-type]  # the transport, as ProtocolWrapper is
        rest = buffer[used:]
        if rest and self.connected and not self.disconnecting:
            self.wrappedProtocol.dataReceived(rest)

    def _too_slow(self) -> None:
        self._timer = None
        _TIMEOUT.inc()
        self._refuse(f"no complete PROXY protocol header within {self._timeout:g} s")

    def _refuse(self, why: str) -> None:
        self._refused = True
        self._buffer = b""
        self._stop_timer()
        self._log.debug("Closing a connection from {peer}: {why}", peer=self.transport.getPeer(), why=why)
        self.transport.loseConnection()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            if self._timer.active():
                self._timer.cancel()
            self._timer = None

    def connectionLost(self, reason: Failure) -> None:  # type: ignore[override]
        self._stop_timer()
        self.connected = 0
        # Also when the header never came: the protocol behind was built for
        # this connection, and its factory counts it until it is told.
        self.wrappedProtocol.connectionLost(reason)

    def getPeer(self) -> Any:
        header = self.header
        if header is not None and header.source is not None:
            return _address(header.source)
        return self.transport.getPeer()

    def getHost(self) -> Any:
        header = self.header
        if header is not None and header.destination is not None:
            return _address(header.destination)
        return self.transport.getHost()
