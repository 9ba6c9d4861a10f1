"""TLS to upstreams on the standard library's ``ssl.SSLObject`` over memory
BIOs: the record layer in C, a few Python calls per record.

Twisted's ``TLSMemoryBIOProtocol`` over pyOpenSSL (cffi) makes about fifty
Python calls per request and response on a keep-alive connection
(``bio_write``, ``recv`` until ``WantReadError``, ``bio_read``, 32 KiB
buffers allocated and zeroed for each); this layer makes a handful. It is
used for the engine's upstream connections only (the ``sslConfig`` of an
Upstream); every other TLS client (LDAP, Redis, key sets, OIDC) keeps
:func:`twistgw.tls.client_tls`.

What it keeps of :func:`twistgw.tls.client_tls`, the rules of every TLS
client of the gateway:

* the chain is verified by OpenSSL during the handshake, against the
  Upstream's CA (or the system's store); a refusal fails the connection with
  :class:`~twistgw.tls.PeerRefused` (``the peer's certificate chain is not
  trusted: ...``);
* the name is checked as soon as the handshake is done, **before any
  application byte is sent** (requests written meanwhile wait), by the same
  function and with the same words as ``client_tls``'s (service-identity;
  subjectAltName only, never the common name; ``verifySubjectAltName``
  names instead of the server name when given). The standard library has
  no verify callback, so unlike ``client_tls`` the handshake itself has
  completed when a wrong name is refused; with a client certificate (and no
  ``verifySubjectAltName``) OpenSSL checks the name during the handshake as
  well, so the certificate is never sent to a server of the wrong name (see
  docs/decisions.md);
* SNI, ALPN ``http/1.1``, versions and cipher suites as configured
  (:func:`twistgw.tls.client_context`);
* the engine's write-at-once (:func:`twistgw.engine.wire.write` on the TCP
  transport underneath) and back-pressure: the application's producer is
  registered on the TCP transport itself, and paused while writes wait for
  the handshake;
* how a connection ends, as Twisted's TLS layer reports it: the peer's
  ``close_notify`` is answered and the connection closed (``ConnectionDone``,
  whatever TCP reports after it); the connection closed without one is
  ``ConnectionLost`` ("the TLS connection was closed without close_notify"),
  which the engine treats as a truncation of a body delimited by the close
  (RFC 8446 §6.1).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.interfaces import IConsumer, IPushProducer, IStreamClientEndpoint, ITransport
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from twistgw.engine import wire
from twistgw.stdtls import peer_problem, untrusted
from twistgw.tls import PeerRefused

__all__ = ["TLSClientEndpoint", "TLSConnection"]

_WantRead = ssl.SSLWantReadError
_SSLError = ssl.SSLError
#: plaintext bytes asked of OpenSSL per read (a record holds at most 16 KiB)
_READ = 32768


@implementer(ITransport, IConsumer, IPushProducer)
class TLSConnection(Protocol):
    """The TCP transport's protocol and the application's transport: TLS in
    between, on a :class:`ssl.SSLObject`. The application is connected
    (``makeConnection``) when TCP is, as Twisted's TLS layer does: what it
    writes before the handshake completes and the name is verified waits."""

    transport: Any  # the TCP transport

    def __init__(self, context: ssl.SSLContext, sni: str, names: tuple[str, ...], app: Any) -> None:
        self.app = app
        self._context = context
        self._sni = sni
        self._names = names
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._tls: ssl.SSLObject | None = None
        #: the handshake is done and the peer's name verified
        self.ready = False
        self._waiting: list[bytes] = []
        self._producer: Any = None
        self._paused_producer = False
        #: why the connection failed (a refused peer, a TLS error), for connectionLost
        self._reason: Failure | None = None
        #: close_notify was received, or sent by loseConnection: TCP's close is a clean end
        self._clean_end = False
        self._dead = False  # failed or aborted: nothing more is read nor written
        self.connected = False
        self.disconnecting = False

    # -- the TCP side ---------------------------------------------------------

    def connectionMade(self) -> None:
        self._tls = self._context.wrap_bio(self._in, self._out, server_hostname=self._sni)
        if self.transport.__class__ in wire.PLAIN_TCP:
            # The endpoint put a _WrappingProtocol between TCP and us (for its
            # Deferred, fired once we return): a Python call per read for nothing.
            self.transport.protocol = self
        self.app.makeConnection(self)
        if not self._dead:
            self._handshake()

    def dataReceived(self, data: bytes) -> None:
        if self._dead:
            return
        self._in.write(data)
        if not self.ready:
            self._handshake()
            if not self.ready:
                return
        self._read()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.connected = False
        self._dead = True
        if self._reason is not None:
            reason = self._reason
        elif self._clean_end:
            # close_notify came (or we sent ours): a clean end, even when TCP
            # then says otherwise (our answer to a peer that closed at once
            # meets a reset)
            reason = Failure(ConnectionDone())
        else:
            # closed without close_notify: Twisted's TLS layer reports it so;
            # a body delimited by the close is then truncated (RFC 8446 §6.1)
            reason = Failure(ConnectionLost("the TLS connection was closed without close_notify"))
        self._reason = None
        self._tls = None
        self.app.connectionLost(reason)

    def _handshake(self) -> None:
        tls = self._tls
        assert tls is not None
        try:
            tls.do_handshake()
        except _WantRead:
            self._flush()
            return
        except ssl.SSLCertVerificationError as exc:
            self._fail(untrusted(exc, self._names))
            return
        except _SSLError as exc:
            self._fail(exc)
            return
        problem = peer_problem(tls.getpeercert(True), self._names)
        if problem is not None:
            self._fail(PeerRefused(problem))
            return
        self.ready = True
        self._flush()  # the handshake's last flight
        waiting, self._waiting = self._waiting, []
        for data in waiting:
            if not self._send(data):
                return
        if self._paused_producer:
            self._paused_producer = False
            if self._producer is not None:
                self._producer.resumeProducing()
        if self.disconnecting and not self._dead:
            self._shutdown()

    def _read(self) -> None:
        tls = self._tls
        incoming = self._in
        app = self.app
        while True:
            try:
                data = tls.read(_READ)  # type: ignore[union-attr]
            except _WantRead:
                break
            except ssl.SSLZeroReturnError:
                self._closed_by_peer()
                return
            except _SSLError as exc:
                self._fail(exc)
                return
            if not data:  # the peer's close_notify
                self._closed_by_peer()
                return
            app.dataReceived(data)
            if self._dead or (not incoming.pending and not tls.pending()):  # type: ignore[union-attr]
                break
        if self._out.pending:  # a key update's answer, a renegotiation
            self._flush()

    def _flush(self) -> None:
        data = self._out.read()
        if data:
            wire.write(self.transport, data)

    def _fail(self, exc: BaseException) -> None:
        """The connection cannot go on: its alert (if any) goes out, TCP closes,
        the application's ``connectionLost`` gets ``exc``."""
        if self._reason is None:
            self._reason = Failure(exc)
        self._dead = True
        self.disconnecting = True
        self._flush()
        self.transport.loseConnection()

    def _closed_by_peer(self) -> None:
        self._dead = True
        self._shutdown()

    def _shutdown(self) -> None:
        """Send close_notify and close TCP (the peer's answer is not waited
        for: RFC 8446 §6.1 lets the closing side go)."""
        self._clean_end = True
        tls = self._tls
        if tls is not None:
            try:
                tls.unwrap()
            except _SSLError:  # _WantRead: the peer's close_notify is not waited for
                pass
            self._flush()
        self.transport.loseConnection()

    # -- the application's transport ------------------------------------------

    def write(self, data: bytes) -> None:
        if self._dead or (self.disconnecting and self._producer is None) or not data:
            return
        if not self.ready:
            self._waiting.append(data)
            if self._producer is not None and not self._paused_producer:
                self._paused_producer = True
                self._producer.pauseProducing()
            return
        self._send(data)

    def _send(self, data: bytes) -> bool:
        try:
            self._tls.write(data)  # type: ignore[union-attr]
        except _SSLError as exc:
            self._fail(exc)
            return False
        wire.write(self.transport, self._out.read())
        return True

    def writeSequence(self, data: Iterable[bytes]) -> None:
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        if self.disconnecting or not self.connected:
            return
        self.disconnecting = True
        if self.ready:
            self._shutdown()
        elif not self._waiting:
            self.abortConnection()  # nothing to send: no handshake to finish first
        # else: the waiting writes go out once the peer is verified, then close_notify

    def abortConnection(self) -> None:
        self._dead = True
        self.disconnecting = True
        self.transport.abortConnection()

    def getPeer(self) -> Any:
        return self.transport.getPeer()

    def getHost(self) -> Any:
        return self.transport.getHost()

    @property
    def negotiatedProtocol(self) -> bytes | None:
        """The ALPN protocol agreed (``b"http/1.1"``), None before or without."""
        chosen = self._tls.selected_alpn_protocol() if self._tls is not None and self.ready else None
        return chosen.encode("ascii") if chosen else None

    # IConsumer: the application's producer (its request body) is paused by
    # the TCP transport when the socket's buffer is full.
    def registerProducer(self, producer: Any, streaming: bool) -> None:
        if self._dead:
            producer.stopProducing()
            return
        self._producer = producer
        self.transport.registerProducer(producer, streaming)

    def unregisterProducer(self) -> None:
        if self._producer is None:
            return
        self._producer = None
        self._paused_producer = False
        self.transport.unregisterProducer()

    # IPushProducer: the application stops reading the upstream (its client is slow).
    def pauseProducing(self) -> None:
        self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        self.transport.resumeProducing()

    def stopProducing(self) -> None:
        self.transport.stopProducing()


class _TLSFactory(Factory):
    noisy = False

    def __init__(self, endpoint: "TLSClientEndpoint", factory: Any) -> None:
        self.endpoint = endpoint
        self.factory = factory

    def buildProtocol(self, addr: Any) -> TLSConnection | None:
        app = self.factory.buildProtocol(addr)
        if app is None:
            return None
        e = self.endpoint
        return TLSConnection(e.context, e.sni, e.names, app)


@implementer(IStreamClientEndpoint)
class TLSClientEndpoint:
    """``wrapClientTLS`` for :class:`TLSConnection`: TLS over ``plain`` (a TCP
    client endpoint); ``connect`` fires with the application's protocol."""

    def __init__(self, plain: Any, context: ssl.SSLContext, sni: str, names: tuple[str, ...]) -> None:
        self.plain = plain
        self.context = context
        self.sni = sni
        self.names = names

    def connect(self, factory: Any) -> Deferred[Any]:
        d: Deferred[Any] = self.plain.connect(_TLSFactory(self, factory))
        d.addCallback(lambda tls: tls.app)
        return d
