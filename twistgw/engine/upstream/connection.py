"""An HTTP/1.1 client connection to one upstream endpoint: one request at
a time, the response parsed by httptools and relayed to the
:class:`~twistgw.engine.seams.Downstream` of the request; back in the pool
after a complete keep-alive exchange; a splice after a ``101``.

Its life is :class:`State`; every change of it is in this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import httptools
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from twistgw.core.headers import end_to_end_lines, trailer_pairs
from twistgw.engine import framing, wire
from twistgw.engine.timers import LazyTimer
from twistgw.engine.upstream import policy
from twistgw.engine.upstream.tunnel import Tunnel
from twistgw.tls import describe_tls_failure

if TYPE_CHECKING:
    from twistgw.engine.upstream.pool import UpstreamPool
    from twistgw.engine.upstream.request import UpstreamRequest

__all__ = ["State", "UpstreamConnection"]

_log = Logger(namespace="twistgw.upstream")


class State(IntEnum):
    """Where an upstream connection is. Requests go out in READY only."""

    CONNECTING = 0
    #: connected, no request in flight (in the pool, or about to be)
    READY = 1
    #: a request went out, no byte of its answer yet (a stale pooled
    #: connection that closes now may be retried)
    SENT = 2
    #: bytes of the response head arrived
    HEAD = 3
    #: the head was relayed; the body follows
    BODY = 4
    #: a 101 went out: bytes are spliced (see :class:`Tunnel`)
    TUNNEL = 5
    CLOSED = 6


_CONNECTING, _READY, _SENT, _HEAD, _BODY, _TUNNEL, _CLOSED = State


class _Overrun(Exception):
    """Raised by a callback to stop the response parser at bytes that
    follow a complete response in the same read."""


@implementer(IPushProducer)
class UpstreamConnection(Protocol):
    """An HTTP/1.1 client connection to one upstream endpoint.

    Besides :class:`State`, two facts about the exchange in flight:
    ``body_sent`` (the request body went out whole: only then may the
    connection be reused) and ``close_delimited`` (the response body ends
    with the connection); and one about the current read: ``ended_in_read``
    (a response ended in it: any byte after it answers nothing that was
    asked, even when the pool already handed the connection out again).
    """

    #: Any: Twisted's transports provide more than the ITransport that
    #: Protocol declares (producers, abortConnection)
    transport: Any
    #: seconds it may wait idle in the pool; None: the pool's (a
    #: ConfiguredConnection's ``idleTimeout`` sets it)
    idle_timeout: float | None = None

    def __init__(self, pool: "UpstreamPool", key: Any) -> None:  # Any: the pool's key, (host, port[, UpstreamTls])
        self.pool = pool
        self.key = key
        self.state = _CONNECTING
        self.req: UpstreamRequest | None = None
        self.parser: Any = None
        self.reused = False
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        #: the response's chunked trailer fields, as received
        self.trailers: list[tuple[bytes, bytes]] = []
        self.chunked_up = False
        self.body_sent = True
        self.close_delimited = False
        self.head_only = False
        self.head_bytes = 0
        self.ended_in_read = False
        self.tunnel: Tunnel | None = None
        #: the client side stopped the reading of this connection (pause_relay)
        self.relay_paused = False
        #: the response deadline while a request is in flight, the idle
        #: expiry while pooled
        self.timer = LazyTimer(pool.reactor.seconds, pool.reactor.callLater)

    @property
    def usable(self) -> bool:
        """Connected, nothing in flight, its framing trusted."""
        return self.state is _READY

    # -- connection -----------------------------------------------------------

    def connectionMade(self) -> None:
        self.state = _READY
        transport = self.transport
        transport.registerProducer(self, True)
        if transport.__class__ in wire.PLAIN_TCP:
            # The endpoint put a _WrappingProtocol between the transport and
            # us, a Python call per read for nothing once connected.
            transport.protocol = self
        # over TLS (memtls.TLSConnection), that layer writes at once and skips it itself

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        state, self.state = self.state, _CLOSED
        self.timer.stop()
        self.pool.forget(self)
        if self.tunnel is not None:
            tunnel, self.tunnel = self.tunnel, None
            tunnel.upstream_lost()
            return
        req, self.req = self.req, None
        if req is None or req.finished:
            return
        error = reason.getErrorMessage() if reason else "closed"
        if state < _BODY:
            if state is _SENT:
                why = describe_tls_failure(reason.value) if reason is not None and len(self.key) > 2 \
                    and self.key[2] is not None else None
                if why is not None:  # the TLS handshake failed: never retried, logged with its reason
                    req.fail(policy.TLS_FAILURE, why)
                    return
                if self.reused and req.retry_after_stale():
                    return
            if req.retrying and req.again_on_reset():  # a route with retries (a class attribute otherwise)
                return
            req.fail(policy.MALFORMED if state is _HEAD else policy.RESET, error)
        elif self.close_delimited and reason is not None and reason.check(ConnectionDone):
            # the body ends with the connection (RFC 9112 §6.3), if it ended
            # cleanly: over TLS only a close_notify is (memtls reports a TCP
            # close without one as ConnectionLost: RFC 8446 §6.1), on TCP a
            # FIN, never a reset
            req.done()
            req.ex.finish()
        else:
            req.broke(error)

    def abandon(self) -> None:
        """The request was given up (client gone, deadline): never reused."""
        self.req = None
        self.state = _CLOSED
        if self.transport is not None:
            self.transport.abortConnection()

    # IPushProducer, on our own transport: the upstream does not read the
    # request body (or the tunnel's bytes) as fast as the client sends.
    def pauseProducing(self) -> None:
        if self.tunnel is not None:
            self.tunnel.client.pause_body()
        elif self.req is not None:
            self.req.ex.pause_body()

    def resumeProducing(self) -> None:
        if self.tunnel is not None:
            self.tunnel.client.resume_body()
        elif self.req is not None:
            self.req.ex.resume_body()

    def stopProducing(self) -> None:
        pass

    def idle_expired(self) -> None:
        if self.req is None and self.transport is not None:
            self.transport.loseConnection()

    # -- the request ----------------------------------------------------------

    def send(self, req: "UpstreamRequest", reused: bool) -> None:
        self.req = req
        req.conn = self
        self.reused = reused
        self.state = _SENT
        if reused:
            self.timer.clear()  # the idle expiry (a new one may carry the deadline already)
        if self.parser is None:  # kept from one response to the next when it ended clean
            self.parser = httptools.HttpResponseParser(self)
        self.close_delimited = False
        self.head_bytes = 0
        self.status = 0
        self.reason = b""
        self.headers = []
        self.trailers = []
        ex = req.ex
        plan = req.plan
        self.head_only = ex.method == b"HEAD"
        body = ex.body
        self.chunked_up = False
        if body is not None:
            if body.length is None:
                self.chunked_up = True
                framing_line: bytes | None = b"Transfer-Encoding: chunked"
            else:
                framing_line = b"Content-Length: %d" % body.length
            self.body_sent = False
        else:
            self.body_sent = True
            framing_line = b"Content-Length: 0" if ex.content_length is not None else None
        wire.write(self.transport, framing.request_head(plan.method, plan.target, plan.headers, framing_line,
                                                        ex.upgrade))
        if body is not None:
            body.attach(self)

    def send_body(self, data: bytes) -> None:
        if self.req is None or not data:
            return
        if self.chunked_up:
            data = framing.CHUNK % (len(data), data)
        wire.write(self.transport, data)

    def end_body(self, trailers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        if self.req is None:
            return
        if self.chunked_up:  # the client's trailers go on in the last chunk (dropped from a Content-Length body)
            wire.write(self.transport, framing.last_chunk(trailers) if trailers else framing.LAST_CHUNK)
        self.body_sent = True

    def pause_relay(self) -> None:
        """The client does not read the response: stop reading from the upstream."""
        if self.transport is not None:
            self.relay_paused = True
            self.transport.pauseProducing()

    def resume_relay(self) -> None:
        if self.transport is not None:
            self.relay_paused = False
            self.transport.resumeProducing()

    # -- the response -----------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        tunnel = self.tunnel
        if tunnel is not None:
            tunnel.from_upstream(data)
            return
        req = self.req
        if req is None:
            # Bytes nobody asked for (or after a finished HEAD answer): this
            # connection's framing can no longer be trusted.
            self.state = _CLOSED
            self.transport.loseConnection()
            return
        if self.state < _BODY:
            self.state = _HEAD
            self.head_bytes += len(data)
            if self.head_bytes > framing.MAX_RESPONSE_HEAD:
                self._malformed("response head too large")
                return
        ex = req.ex
        self.ended_in_read = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            self._switch(data[exc.args[0]:])
        except httptools.HttpParserError as exc:
            if self.ended_in_read:
                self._overran()
            else:
                self._malformed(str(exc))
        if ex.held is not None:
            ex.flush()  # the head came without (all of) its body

    def _malformed(self, error: str) -> None:
        req, self.req = self.req, None
        state, self.state = self.state, _CLOSED
        self.transport.abortConnection()
        if req is None or req.finished:
            return
        if state is _BODY:
            req.broke(f"malformed response body: {error}")
        else:
            req.fail(policy.MALFORMED, error)

    def _overran(self) -> None:
        """The upstream wrote past the end of its response, in the same read:
        a forged second response, the start of one, or garbage. Like nginx,
        the connection is closed and never reused; the bytes answer nothing
        (not the next request of a pipelining client, which may already have
        been sent on this connection: it finds the connection dead before its
        answer, as a stale pooled one, and is retried once if idempotent)."""
        if self.state is _READY:
            self.state = _CLOSED  # no longer handed out by the pool
        # else the pool handed it out again within this read: the request
        # sent on it finds it dead in SENT, as a stale one (connectionLost)
        self.parser = None
        self.transport.abortConnection()
        _log.warn("Upstream {upstream} sent bytes after the end of a response; connection closed",
                  upstream=self.pool.label(self.key))

    def on_message_begin(self) -> None:
        if self.ended_in_read:
            raise _Overrun()  # feed_data stops here and raises (dataReceived)

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.state is _HEAD:
            self.headers.append((name, value))
        elif self.state is _BODY and len(self.trailers) < framing.MAX_HEADERS:
            self.trailers.append((name, value))  # a chunked response's trailer fields

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200 and status != 101:
            # Interim answers (100, 103) are not passed on: the gateway
            # answers Expect itself.
            self.headers = []
            self.reason = b""
            return
        req = self.req
        if req is None or req.finished:
            return
        if req.watch is not None:  # leastRequest, outlierDetection: every try's status counts
            req.watch.answered(req.plan.endpoint, status)
        if req.retrying and status in req.retry_statuses and req.again_on_status(status):
            return  # dropped with this connection; the request is tried again
        ex = req.ex
        if status == 101 and ex.upgrade is None:
            # never spliced: a 502 (the state is still HEAD: _malformed answers)
            raise httptools.HttpParserError("101 to a request that asked for no upgrade")
        self.state = _BODY
        self.status = status
        self.timer.clear()
        hop: dict[bytes, bytes] = {}
        edit = req.plan.response_edit
        if edit is None:
            lines = end_to_end_lines(self.headers, hop)
        else:  # the route's response headers, CORS, headers plugins added: in the same pass
            lines = end_to_end_lines(self.headers, hop, edit.skip)  # ResponseEdit.head_lines, inlined
            lines += edit.lines
        length = hop.get(b"content-length")
        if status == 101:
            lines.append(b"Connection: Upgrade\r\nUpgrade: %s\r\n" % hop.get(b"upgrade", ex.upgrade))
            ex.send_head(101, self.reason, lines, None)
            return
        if b"transfer-encoding" in hop:
            length = None
        elif length is None and status not in framing.NO_BODY_STATUS and not self.head_only:
            self.close_delimited = True
        if status == 204:
            length = None
        ex.send_head(status, self.reason, lines, length, True)
        if self.head_only:
            keep = self.parser.should_keep_alive() and not self.close_delimited
            # the parser expects the body a HEAD answer announces but never
            # has: the next request gets a new one
            self.parser = None
            self._complete(keep)

    def on_body(self, data: bytes) -> None:
        req = self.req
        if req is not None and self.state is _BODY:
            req.ex.write(data)

    def on_message_complete(self) -> None:
        if self.state is not _BODY or self.req is None or self.status == 101:
            return
        self._complete(self.parser.should_keep_alive())

    def _complete(self, keep_alive: bool) -> None:
        self.ended_in_read = True
        req, self.req = self.req, None
        assert req is not None
        req.done()
        if keep_alive and self.body_sent:
            self.state = _READY
            if self.relay_paused:
                # The read that ended the response also filled the client's
                # queue past its bound: the client side paused us and, the
                # exchange being over, will never resume us. A pooled
                # connection must read its next response.
                self.resume_relay()
            self.pool.release(self)
        else:
            self.state = _CLOSED
            self.transport.loseConnection()
        trailers = self.trailers
        req.ex.finish(trailer_pairs(trailers) if trailers else ())

    # -- upgraded: a byte-for-byte splice ---------------------------------------

    def _switch(self, rest: bytes) -> None:
        req, self.req = self.req, None
        if req is None or req.finished or self.status != 101:
            self.state = _CLOSED
            self.transport.abortConnection()
            return
        req.done()
        self.state = _TUNNEL
        ex = req.ex
        tunnel = self.tunnel = Tunnel(self, ex.tunnel_end(), self.pool.tunnel_idle_timeout)
        tunnel.start(ex.upgraded(tunnel), rest)
