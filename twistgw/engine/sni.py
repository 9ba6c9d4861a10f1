"""TLS listeners whose certificate is picked per connection by the server
name the client asks for (SNI), from the serving snapshot (Envoy's
``tls_inspector`` and filter-chain match).

:class:`SniServerEndpoint` wraps a plain stream endpoint (TCP). Each
accepted connection first goes to a small protocol that only reads the
ClientHello (:class:`twistgw.servertls.ClientHelloProbe`); once it knows the
name, it looks up the certificate in the snapshot serving at that moment
(:meth:`twistgw.core.tlsroutes.TlsRoutes.select`), starts the real TLS
connection with that certificate's context (its versions, ciphers and
client verification apply from the first byte), and passes it every byte
read so far. A name no certificate answers gets the listener's own
certificate (``--listen ssl:...``), or, with none (``--listen tls:...``),
the connection is closed without a handshake.

The wrapped protocol (the gateway's :class:`GatewayProtocol`) is told the
choice (:class:`TlsChoice`, its ``tls`` attribute): a request is routed
among that certificate's virtual services only, and a request that
arrives after a reload changed the certificate for the connection's name
is answered ``421 Misdirected Request`` and the connection closed (the
client reconnects and gets the new certificate). See docs/tls.md.

For other listeners (the Gloo ``Gateway`` kind's)::

    endpoint = SniServerEndpoint(reactor, TCP4ServerEndpoint(reactor, 8443),
                                 lambda: gateway.snapshot.tls if gateway.snapshot else None)
    endpoint.listen(GatewayFactory(gateway))

A listener serving another set of virtual services (a Gloo Gateway with
``ssl: true``) builds its own ``TlsRoutes(virtual_services)`` per snapshot and
passes ``routes`` (for handshakes) and ``routes_in`` (how a request finds
that listener's table in the snapshot it is handled with). With
``plain_without_routes`` the same socket serves plain HTTP while
``routes()`` is None (a Gateway switched between ``ssl: false`` and ``true``
by a reload keeps its socket; each connection is served as its Gateway
was when it was accepted). With :attr:`SniServerEndpoint.proxy_protocol`
each connection starts with a PROXY protocol header, read before the
ClientHello (Envoy's ``proxy_protocol`` listener filter runs before
``tls_inspector``).
"""

from __future__ import annotations

from typing import Any, Callable

from OpenSSL import SSL
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import (IListeningPort, IOpenSSLServerConnectionCreator, IProtocolFactory,
                                         IStreamServerEndpoint)
from twisted.internet.protocol import Factory, Protocol
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from zope.interface import implementer

from twistgw.config.defaults import HEAD_TIMEOUT
from twistgw.core.routing import HostTable
from twistgw.core.snapshot import Snapshot
from twistgw.core.tlsroutes import TlsChain, TlsRoutes
from twistgw.engine.proxyproto import ProxyHeaderReader
from twistgw.servertls import MAX_CLIENT_HELLO, ClientHelloProbe

__all__ = ["SniServerEndpoint", "TlsChoice"]

#: how many certificates' TLS factories a listener keeps
_KEEP = 256


class TlsChoice:
    """What a TLS connection was given: the server name it asked for, the
    certificate's chain (None: the listener's own certificate) and the
    snapshot's table it was picked from."""

    __slots__ = ("chain", "routes", "routes_in", "server_name")

    def __init__(self, server_name: str | None, chain: TlsChain | None, routes: TlsRoutes | None,
                 routes_in: Callable[[Snapshot], TlsRoutes] | None = None) -> None:
        self.server_name = server_name
        self.chain = chain
        self.routes = routes
        #: where a snapshot keeps this listener's certificates (None: ``snapshot.tls``)
        self.routes_in = routes_in

    def hosts(self, snapshot: Snapshot) -> HostTable | None:
        """The ``Host`` table to route this connection's requests by, in
        ``snapshot``; None when the certificate for its name changed since
        the handshake (answer 421)."""
        routes = snapshot.tls if self.routes_in is None else self.routes_in(snapshot)
        if routes is not self.routes:
            chain = routes.select(self.server_name)
            if (chain is None) != (self.chain is None) or (
                    chain is not None and self.chain is not None and chain.tls != self.chain.tls):
                return None
            self.routes, self.chain = routes, chain
        chain = self.chain
        return snapshot.hosts if chain is None else chain.hosts


@implementer(IOpenSSLServerConnectionCreator)
class _Creator:
    def __init__(self, context: SSL.Context) -> None:
        self._context = context

    def serverConnectionForTLS(self, tlsProtocol: TLSMemoryBIOProtocol) -> SSL.Connection:
        return SSL.Connection(self._context, None)


@implementer(IStreamServerEndpoint)
class SniServerEndpoint:
    """A TLS server endpoint over ``inner`` whose certificate is chosen per
    connection by SNI from ``routes()`` (the serving snapshot's
    :class:`~twistgw.core.tlsroutes.TlsRoutes`, or None before one is
    loaded). ``default``: the certificate for names no virtual service
    answers (an ``IOpenSSLServerConnectionCreator`` such as Twisted's
    ``CertificateOptions``); None: such connections are closed.
    ``plain_without_routes``: while ``routes()`` is None, accepted
    connections are plain HTTP (a Gloo Gateway's listener, whose ``ssl`` a
    reload may switch)."""

    #: each TLS connection starts with a PROXY protocol header (v1 or v2),
    #: read before the ClientHello; set per listener, applies to the
    #: connections accepted afterwards (a Gateway's ``useProxyProto``)
    proxy_protocol = False

    def __init__(self, reactor: Any, inner: IStreamServerEndpoint, routes: Callable[[], TlsRoutes | None],
                 default: IOpenSSLServerConnectionCreator | None = None,
                 routes_in: Callable[[Snapshot], TlsRoutes] | None = None,
                 plain_without_routes: bool = False) -> None:
        # reactor: Any, as everywhere in the engine (IReactorTime is all that is used)
        self.reactor = reactor
        self.inner = inner
        self.routes = routes
        self.default = default
        #: for a listener whose certificates are not ``snapshot.tls`` (a Gloo
        #: Gateway's own ``TlsRoutes``): how requests find them in a snapshot
        self.routes_in = routes_in
        self.plain_without_routes = plain_without_routes

    def listen(self, protocolFactory: IProtocolFactory) -> Deferred[IListeningPort]:
        listening: Deferred[IListeningPort] = self.inner.listen(_PeekFactory(self, protocolFactory))
        return listening


class _PeekFactory(Factory):
    """Builds the ClientHello readers of one listener; keeps a TLS factory
    per certificate."""

    noisy = False

    def __init__(self, endpoint: SniServerEndpoint, wrapped: Any) -> None:
        # wrapped: Any, any IProtocolFactory (the gateway's GatewayFactory)
        self.endpoint = endpoint
        self.wrapped = wrapped
        self._tls: dict[object, TLSMemoryBIOFactory] = {}

    @property
    def timeout(self) -> float:
        """How long a client has to send its ClientHello: the wrapped
        factory's head timeout, as it is now (a Gateway's may change)."""
        timeout: float = getattr(self.wrapped, "head_timeout", HEAD_TIMEOUT)
        return timeout

    def doStart(self) -> None:
        self.wrapped.doStart()
        super().doStart()

    def doStop(self) -> None:
        self.wrapped.doStop()
        super().doStop()

    def logPrefix(self) -> str:
        wrapped = self.wrapped
        return f"{getattr(wrapped, 'logPrefix', lambda: type(wrapped).__name__)()} (TLS by SNI)"

    def buildProtocol(self, addr: Any) -> Protocol:
        endpoint = self.endpoint
        if endpoint.plain_without_routes and endpoint.routes() is None:
            plain: Protocol = self.wrapped.buildProtocol(addr)
            return plain
        reader = _ClientHelloReader(self, addr)
        if not endpoint.proxy_protocol:
            return reader
        # the PROXY header comes first; the reader (and TLS, and the
        # gateway's protocol, which reads its peer from it) sit behind it
        return ProxyHeaderReader(reader, endpoint.reactor, self.timeout)

    def tls_factory(self, chain: TlsChain | None) -> TLSMemoryBIOFactory | None:
        """The TLS factory for ``chain``'s certificate (None: the
        listener's own, if it has one)."""
        key: object = chain.tls if chain is not None else None
        factory = self._tls.get(key)
        if factory is None:
            if chain is not None:
                creator: Any = _Creator(chain.tls.context())
            elif self.endpoint.default is not None:
                creator = self.endpoint.default
            else:
                return None
            if len(self._tls) >= _KEEP:
                self._tls.clear()
            factory = self._tls[key] = TLSMemoryBIOFactory(creator, False, self.wrapped)
        return factory


class _ClientHelloReader(Protocol):
    """Reads a connection's ClientHello, then hands the connection to the
    TLS protocol of the certificate its server name picks (and forwards
    every later byte to it)."""

    def __init__(self, factory: _PeekFactory, addr: Any) -> None:
        self.peek = factory
        self.addr = addr
        self.tls: TLSMemoryBIOProtocol | None = None
        self.probe: ClientHelloProbe | None = ClientHelloProbe()
        self.buffer: list[bytes] = []
        self.size = 0
        self.timer: Any = None

    def connectionMade(self) -> None:
        self.timer = self.peek.endpoint.reactor.callLater(self.peek.timeout, self._give_up)

    def dataReceived(self, data: bytes) -> None:
        tls = self.tls
        if tls is not None:
            tls.dataReceived(data)
            return
        probe = self.probe
        if probe is None:
            return
        self.buffer.append(data)
        self.size += len(data)
        if self.size > MAX_CLIENT_HELLO:
            self._give_up()
            return
        if probe.feed(data):
            self.probe = None
            self._start(probe.server_name)

    def _start(self, server_name: str | None) -> None:
        self._stop_timer()
        routes = self.peek.endpoint.routes()
        chain = routes.select(server_name) if routes is not None else None
        try:
            factory = self.peek.tls_factory(chain)
            tls = factory.buildProtocol(self.addr) if factory is not None else None
        except Exception:
            tls = None  # a certificate that cannot be used: no handshake
        if tls is None:
            self.transport.loseConnection()  # type: ignore[union-attr]
            return
        inner = tls.wrappedProtocol
        if hasattr(inner, "tls"):
            inner.tls = TlsChoice(server_name, chain, routes, self.peek.endpoint.routes_in)
        self.tls = tls
        data, self.buffer = b"".join(self.buffer), []
        tls.makeConnection(self.transport)
        tls.dataReceived(data)

    def _give_up(self) -> None:
        self.timer = None
        self.probe = None
        if self.tls is None and self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    def _stop_timer(self) -> None:
        if self.timer is not None:
            if self.timer.active():
                self.timer.cancel()
            self.timer = None

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self._stop_timer()
        tls, self.tls = self.tls, None
        if tls is not None:
            tls.connectionLost(reason)
