"""One client connection: :class:`GatewayProtocol` parses requests
(httptools, llhttp strict), answers them one at a time and in order, with
back-pressure both ways, and splices after an upgrade.

Its life is :class:`ConnState`; every change of it is in this module (the
parser's callbacks drive it, in the order llhttp calls them). Why reading
from the client is paused is a separate set of reasons (``_P_*`` bits):
reading resumes once none is left.

How a request flows, the limits and the edge cases: ``docs/engine.md``.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import httptools
from twisted.internet.interfaces import IPushProducer, ISSLTransport
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from twistgw.config.defaults import HEAD_TIMEOUT, IDLE_TIMEOUT
from twistgw.engine import framing, wire
from twistgw.engine.exchange import Exchange
from twistgw.engine.request import Reject, RequestReader, Stop
from twistgw.engine.seams import Splice
from twistgw.engine.states import ConnState
from twistgw.engine.timers import LazyTimer

if TYPE_CHECKING:
    from twistgw.engine.gateway import Gateway

__all__ = ["ConnState", "GatewayProtocol"]


_IDLE, _HEAD, _BODY, _UPGRADING, _TUNNEL, _DRAINING, _CLOSING, _CLOSED = ConnState

# Why reading from the client is paused (a bit each; read while none is set).
_P_PIPELINE = 1   # a request waits behind the one being answered
_P_BODY = 2       # its body is not being drained (buffer full, upstream slow)
_P_WRITE = 4      # the client does not read what we write
_P_TUNNEL = 8     # an upgrade waits for the upstream's 101


@implementer(IPushProducer)
class GatewayProtocol(Protocol, RequestReader):
    """One client connection (also the :class:`~twistgw.engine.seams.TunnelEnd`
    of a tunnel)."""

    #: Any: Twisted's transports (TCP, TLS) provide more than the ITransport
    #: that Protocol declares (producers, abortConnection, getPeer)
    transport: Any
    head_timeout = HEAD_TIMEOUT
    idle_timeout: float | None = IDLE_TIMEOUT
    peer_host = ""
    scheme = "http"
    #: on a TLS listener that picks certificates by SNI, what this
    #: connection was given (set before connectionMade): an
    #: ``engine.sni.TlsChoice``; Any, as engine/sni.py imports this module's
    #: neighbours and naming its type here would make an import cycle
    tls: Any = None
    #: the Gloo Gateway whose listener accepted it (None: a --listen one)
    gateway_key: str | None = None

    def __init__(self, gateway: "Gateway") -> None:
        self.gateway = gateway
        self.clock = gateway.reactor.seconds
        self.callLater = gateway.reactor.callLater
        self.state = _IDLE
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Exchange] = deque()
        self.current: Exchange | None = None
        self.parsing: Exchange | None = None
        self._paused = 0
        #: a reentrancy guard of :meth:`_advance` (not a state: the loop is running)
        self._advancing = False
        self._deadline = LazyTimer(self.clock, self.callLater)
        self._idle = LazyTimer(self.clock, self.callLater)
        self.tunnel: Splice | None = None
        self._tunnel_buffer: list[bytes] = []
        #: an answer to input that could not be parsed, sent once the
        #: requests before it are answered
        self._last_words: bytes | None = None
        #: the abort that ends a TLS close the client does not answer
        self._grace: Any = None
        RequestReader.__init__(self)

    # -- connection ------------------------------------------------------------

    def connectionMade(self) -> None:
        transport = self.transport
        peer = transport.getPeer()
        self.peer_host = getattr(peer, "host", "") or ""
        self.scheme = "https" if ISSLTransport.providedBy(transport) else "http"
        transport.registerProducer(self, True)
        # A response relayed from an HTTP/2 upstream goes out in more than one
        # write (the head with the first DATA, then the last chunk with its
        # trailers): Nagle would hold the later ones behind the client's
        # delayed ACK, 40 ms a response. nginx and Envoy set it too.
        tcp = transport if hasattr(transport, "setTcpNoDelay") else getattr(transport, "transport", None)
        if tcp is not None and hasattr(tcp, "setTcpNoDelay"):
            tcp.setTcpNoDelay(True)
        self._arm_idle()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.state = _CLOSED
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        self._deadline.stop()
        self._idle.stop()
        if self.tunnel is not None:
            tunnel, self.tunnel = self.tunnel, None
            tunnel.client_lost()
        for ex in [self.current, self.parsing, *self.queue]:
            if ex is not None:
                ex.client_lost()
        self.queue.clear()
        self.current = self.parsing = None
        closed = getattr(self.factory, "connection_closed", None)
        if closed is not None:
            closed(self)

    def close(self) -> None:
        """→ CLOSING: close after what was written went out."""
        if self.state >= _CLOSING:
            return
        self.state = _CLOSING
        transport = self.transport
        if transport is not None:
            # A TLS transport shuts down only once no producer is registered.
            transport.unregisterProducer()
            transport.loseConnection()
            if self.scheme == "https":
                # TLS waits for the client's close_notify, which a client
                # may never send: give it a grace period (Envoy's
                # delayed_close_timeout), longer while our bytes still drain.
                self._grace = self.callLater(framing.CLOSE_GRACE, self._grace_over, -1)

    def _grace_over(self, before: int) -> None:
        self._grace = None
        if self.state is _CLOSED or self.transport is None:
            return
        unsent = wire.unsent(self.transport)
        if unsent and unsent != before:
            self._grace = self.callLater(framing.CLOSE_GRACE, self._grace_over, unsent)
            return
        self.transport.abortConnection()

    def close_with(self, answer: bytes) -> None:
        """Write ``answer`` (a complete response) and close."""
        if self.state < _CLOSING and self.transport is not None:
            self.transport.write(answer)
        self.close()

    def abort(self) -> bool:
        """Drop the connection now (the gateway stops); False if it was gone."""
        self._deadline.stop()
        self._idle.stop()
        if self.transport is None or self.state is _CLOSED:
            return False
        self.state = _CLOSING
        self.transport.abortConnection()
        return True

    def finish_and_close(self) -> None:
        """Close now if no request is under way, else after the requests
        already read are answered (its listener is going away)."""
        if self.state is _IDLE and self.current is None and not self.queue:
            self.close()
        else:
            self.stop_reading()

    def stop_reading(self) -> None:
        """→ DRAINING: read nothing more; the connection closes after the
        requests already read are answered."""
        if self.state < _DRAINING:
            self.state = _DRAINING

    def reject(self, answer: bytes) -> None:
        """Input that cannot be parsed: answer it (after the requests
        before it) and close; nothing after it is read."""
        self.stop_reading()
        self._deadline.stop()
        broken = self.parsing
        if broken is not None and not broken.body_complete:
            # The body of a request already under way is malformed: that
            # request fails, whatever the chain or the upstream make of it.
            self.parsing = None
            if broken is self.current:
                if broken.status:
                    broken.abort()
                else:
                    broken.reject(answer, 400)
                return
            self.queue.remove(broken)
            broken.client_lost()
        last = self.queue[-1] if self.queue else self.current
        if last is None:
            self.close_with(answer)
        else:
            last.keep_alive = False
            self._last_words = answer

    # -- flow control ------------------------------------------------------------

    def pause_reading(self, why: int) -> None:
        if not self._paused and self.transport is not None:
            self.transport.pauseProducing()
        self._paused |= why

    def resume_reading(self, why: int) -> None:
        if self._paused & why:
            self._paused &= ~why
            if not self._paused and self.transport is not None and self.state < _CLOSING:
                self.transport.resumeProducing()

    def pause_body(self) -> None:
        self.pause_reading(_P_BODY)

    def resume_body(self) -> None:
        self.resume_reading(_P_BODY)

    # IPushProducer, registered on the client transport: the client stopped
    # reading what we write.
    def pauseProducing(self) -> None:
        self.pause_reading(_P_WRITE)
        ex = self.current
        if ex is not None and ex.upstream is not None:
            ex.upstream.pause()
        if self.tunnel is not None:
            self.tunnel.pause()

    def resumeProducing(self) -> None:
        self.resume_reading(_P_WRITE)
        ex = self.current
        if ex is not None and ex.upstream is not None:
            ex.upstream.resume()
        if self.tunnel is not None:
            self.tunnel.resume()
        self._advance()

    def stopProducing(self) -> None:
        pass  # connectionLost follows

    # -- bytes in ------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        state = self.state
        if state >= _UPGRADING:
            if state is _TUNNEL:
                self.tunnel.from_client(data)  # type: ignore[union-attr]  # set with TUNNEL
            elif state is _UPGRADING:
                self._hold_for_tunnel(data)
            return  # DRAINING, CLOSING: read nothing more
        if state is _HEAD and self.head_too_large(len(data)):
            return
        self._data = data
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            self.upgrade_requested(data[exc.args[0]:])
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, Reject):
                self.reject(cause.response)
            elif not isinstance(cause, Stop):
                raise
        except httptools.HttpParserError:
            self.reject(framing.BAD_REQUEST)

    def _hold_for_tunnel(self, data: bytes) -> None:
        """Bytes after an upgrade request, before the upstream said 101."""
        if data:
            self._tunnel_buffer.append(data)
            if sum(map(len, self._tunnel_buffer)) > framing.BODY_BUFFER_LIMIT:
                self.pause_reading(_P_TUNNEL)

    def upgrade_requested(self, rest: bytes) -> None:
        """llhttp stopped at the end of an upgrade request (RequestReader)."""
        ex = self.parsing
        if ex is None or ex.upgrade is None or self.state is not _UPGRADING:
            if self.state < _DRAINING:
                self.reject(framing.BAD_REQUEST)
            return
        self._hold_for_tunnel(rest)

    # -- the parser's callbacks that move the state (the others: RequestReader) -------

    def on_message_begin(self) -> None:
        """IDLE → HEAD."""
        if self.state >= _DRAINING:
            raise Stop()
        self.state = _HEAD
        self.start_head()
        self._idle.clear()
        if self.current is None and self.head_timeout and not self._deadline.armed:
            # The head deadline runs from the first byte of a request.
            self._deadline.set(self.head_timeout, self._head_timed_out)

    def on_headers_complete(self) -> None:
        """HEAD → BODY (for a request without a body, the end follows at once)."""
        ex = self.read_head()
        if self.state is _HEAD:
            self.state = _BODY
        self.parsing = ex
        self._deadline.clear()
        self.gateway.inflight += 1
        if self.current is None and not self._paused & _P_WRITE:
            self.current = ex
            self.gateway.handle(ex)
        else:
            ex.wait()
            self.queue.append(ex)
            self.pause_reading(_P_PIPELINE)
            if len(self.queue) >= framing.MAX_PIPELINE:
                # Deeper than this in one read: answer these, then close.
                ex.keep_alive = False
                self.stop_reading()
                raise Stop()

    def on_body(self, data: bytes) -> None:
        ex = self.parsing
        if ex is not None and ex.body is not None:
            ex.body.write(data)

    def on_message_complete(self) -> None:
        """BODY → IDLE, or → UPGRADING after an upgrade request."""
        ex = self.parsing
        if ex is None:
            return
        ex.body_complete = True
        if ex.upgrade is None:
            self.parsing = None
            if self.state is _BODY:
                self.state = _IDLE
        elif self.state is _BODY:
            self.state = _UPGRADING
        if ex.body is not None:
            ex.body.finish()
            if ex.upstream is not None:
                ex.upstream.client_body_done()
        if not ex.keep_alive and ex.upgrade is None:
            # Connection: close (or HTTP/1.0): whatever follows is not read.
            self.stop_reading()
            raise Stop()

    # -- the tunnel (seams.TunnelEnd) ----------------------------------------------

    def tunnel_started(self, ex: Exchange, tunnel: Splice) -> list[bytes]:
        """UPGRADING → TUNNEL: the upstream switched protocols; returns the
        bytes the client sent after its request."""
        self._deadline.stop()
        self._idle.stop()
        self.parsing = None
        if self.current is ex:
            self.current = None
        self.tunnel = tunnel
        if self.state < _DRAINING:
            self.state = _TUNNEL
        held, self._tunnel_buffer = self._tunnel_buffer, []
        self.resume_reading(_P_TUNNEL)
        return held

    def tunnel_write(self, data: bytes) -> None:
        wire.write(self.transport, data)

    # -- answering in order -------------------------------------------------------

    def exchange_done(self, ex: Exchange) -> None:
        """An exchange ended (accounted already): answer the next one."""
        if ex is not self.current:
            return
        self.current = None
        if self.parsing is ex and ex.upgrade is None:
            self.parsing = None
        if not ex.keep_alive or self.state >= _CLOSING:
            if self._last_words is not None and not self.queue:
                self.close_with(self._last_words)
            self.close()
            return
        if ex.upgrade is not None:
            self.close()  # an upgrade that was refused: the connection is done
            return
        self._advance()

    def _advance(self) -> None:
        """Start queued requests, one at a time, while the client reads."""
        if self._advancing:
            return
        self._advancing = True
        try:
            while self.current is None and self.state < _CLOSING:
                if not self.queue:
                    self.resume_reading(_P_PIPELINE)
                    if self.state is _HEAD and self.head_timeout:
                        self._deadline.set(self.head_timeout, self._head_timed_out)
                    elif self.parsing is None:
                        self._arm_idle()
                    return
                if self._paused & _P_WRITE:
                    return  # resumeProducing continues
                ex = self.current = self.queue.popleft()
                if not self.queue:
                    # The last one waiting: read on (the rest of its body,
                    # or the next request, which will wait in turn).
                    self.resume_reading(_P_PIPELINE)
                ex.start()
        finally:
            self._advancing = False

    # -- timers ---------------------------------------------------------------------

    def _arm_idle(self) -> None:
        if self.idle_timeout:
            self._idle.set(self.idle_timeout, self._idle_timed_out)

    def _idle_timed_out(self) -> None:
        if self.current is None and self.state is not _HEAD and self.transport is not None:
            self.close()

    def _head_timed_out(self) -> None:
        if self.transport is not None and self.current is None:
            self.reject(framing.REQUEST_TIMEOUT)

    def stop_timers(self) -> None:
        self._deadline.stop()
        self._idle.stop()

