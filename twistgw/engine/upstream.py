"""The upstream side of the engine: an HTTP/1.1 client protocol (httptools
parses the responses), a pool of idle keep-alive connections per endpoint,
and the splice of an upgraded (``101``) connection.

Request bodies flow from the client connection into the upstream transport
as they arrive; response bodies flow from the upstream transport to the
client's. Each side pauses the other's reading when its write buffer is full.
See ``docs/engine.md``.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import httptools
from twisted.internet import error as ierror
from twisted.internet.defer import succeed
from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from twistgw.config.defaults import CONNECT_TIMEOUT, IDLE_TIMEOUT
from twistgw.core.headers import end_to_end_lines
from twistgw.engine import wire
from twistgw.engine.timers import LazyTimer

__all__ = ["BODY_BUFFER_LIMIT", "RequestBody", "UpstreamConnection", "UpstreamPool", "classify_connect_failure",
           "status_line"]

#: How much of a request body is buffered (before the upstream connection
#: takes it) before the client is paused.
BODY_BUFFER_LIMIT = 64 * 1024

#: An upstream response head larger than this is a 502 (Envoy: 60 KiB).
MAX_RESPONSE_HEAD = 64 * 1024

#: RFC 9110 §9.2.2: requests that may be sent again after a failure.
IDEMPOTENT = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE", b"PUT", b"DELETE"})

_RESET = (503, b"upstream connect error or disconnect/reset before headers. reset reason: connection termination",
          "reset")
_REFUSED = (503, b"upstream connect error or disconnect/reset before headers. reset reason: connection failure",
            "refused")
_CONNECT_TIMEOUT = (503, b"upstream connect error or disconnect/reset before headers. reset reason: connection timeout",
                    "connect timeout")
_TIMEOUT = (504, b"upstream request timeout", "timeout")
_MALFORMED = (502, b"upstream sent a malformed response", "malformed response")

_status_lines: dict[int, bytes] = {}

_log = Logger(namespace="twistgw.upstream")


class _Overrun(Exception):
    """Raised by a callback to stop the response parser at bytes that
    follow a complete response in the same read."""


def status_line(status: int, reason: bytes = b"") -> bytes:
    """``b"HTTP/1.1 200 OK\\r\\n"``; the standard phrase when ``reason`` is empty."""
    if reason:
        return b"HTTP/1.1 %d %s\r\n" % (status, reason)
    line = _status_lines.get(status)
    if line is None:
        try:
            phrase = HTTPStatus(status).phrase.encode("ascii")
        except ValueError:
            phrase = b"Unknown"
        line = _status_lines[status] = b"HTTP/1.1 %d %s\r\n" % (status, phrase)
    return line


def classify_connect_failure(failure: Failure) -> tuple[int, bytes, str]:
    """Map a failure to connect to (status, body, short reason), like Envoy."""
    if failure.check(ierror.TimeoutError):
        return _CONNECT_TIMEOUT
    if failure.check(ierror.ConnectError, ierror.ConnectionLost, ierror.ConnectionClosed, ierror.DNSLookupError):
        return _REFUSED
    return 502, b"upstream error", f"unexpected: {failure.type.__name__}"


class RequestBody:
    """A client's request body on its way upstream.

    Until an upstream connection takes it (while plugins decide, while
    connecting), up to BODY_BUFFER_LIMIT bytes are kept; past that the
    client is paused.
    """

    __slots__ = ("length", "proto", "_buffer", "_buffered", "consumer", "complete", "stopped")

    def __init__(self, length: int | None, proto: Any) -> None:
        self.length = length
        self.proto = proto
        self._buffer: list[bytes] = []
        self._buffered = 0
        self.consumer: Any = None
        self.complete = False
        self.stopped = False

    def write(self, data: bytes) -> None:
        if self.stopped:
            return
        consumer = self.consumer
        if consumer is not None:
            consumer.send_body(data)
            return
        self._buffer.append(data)
        self._buffered += len(data)
        if self._buffered > BODY_BUFFER_LIMIT:
            self.proto.pause_body()

    def finish(self) -> None:
        self.complete = True
        if self.consumer is not None and not self.stopped:
            self.consumer.end_body()

    def attach(self, consumer: Any) -> None:
        """Send what was buffered to ``consumer``, and the rest as it comes."""
        self.consumer = consumer
        buffered, self._buffer, self._buffered = self._buffer, [], 0
        for chunk in buffered:
            consumer.send_body(chunk)
        self.proto.resume_body()
        if self.complete:
            consumer.end_body()

    def stop(self) -> None:
        self.stopped = True
        self.consumer = None
        self._buffer = []


class UpstreamRequest:
    """One forwarded request: connecting (or a pooled connection), sending,
    relaying the response, the deadline and one retry."""

    __slots__ = ("pool", "ex", "plan", "key", "conn", "connecting", "retried", "finished")

    def __init__(self, pool: "UpstreamPool", ex: Any, plan: Any, key: tuple[str, int]) -> None:
        self.pool = pool
        self.ex = ex
        self.plan = plan
        self.key = key
        self.conn: UpstreamConnection | None = None
        self.connecting: Any = None
        self.retried = False
        self.finished = False

    # -- connection -----------------------------------------------------------

    def connect(self) -> None:
        d = self.connecting = self.pool.connect(self.key)
        d.addCallbacks(self._connected, self._connect_failed)

    def _connected(self, conn: "UpstreamConnection") -> None:
        self.connecting = None
        if self.finished:
            self.pool.release(conn)
            return
        conn.send(self, reused=False)

    def _connect_failed(self, failure: Failure) -> None:
        self.connecting = None
        if self.finished:
            return
        self.fail(*classify_connect_failure(failure), failure.getErrorMessage())

    def retry_after_stale(self) -> bool:
        """A pooled connection died before any answer: send again once, on
        a new connection, if that cannot repeat a side effect."""
        ex = self.ex
        if self.retried or self.finished or ex.method not in IDEMPOTENT or ex.body is not None:
            return False
        self.retried = True
        self.conn = None
        self.connect()
        return True

    # -- outcomes ----------------------------------------------------------------

    def _end(self) -> None:
        self.finished = True
        ex = self.ex
        if ex.upstream is self:
            ex.upstream = None
        ex.proto.clear_deadline()

    def fail(self, status: int, body: bytes, why: str, error: str) -> None:
        if self.finished:
            return
        self._end()
        self.pool.gateway.upstream_failed(self.ex, status, body, why, error)

    def _abandon(self) -> None:
        """Abort the upstream connection, or the attempt to make one. The caller
        sets ``finished`` first, so the CancelledError that follows is ignored."""
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.req = None
            conn.transport.abortConnection()
        if self.connecting is not None:
            d, self.connecting = self.connecting, None
            d.cancel()

    def timed_out(self) -> None:
        if self.finished:
            return
        self.finished = True  # the CancelledError is ours
        self._abandon()
        self.finished = False
        self.fail(*_TIMEOUT, "no response head in time")

    def client_gone(self, ex: Any) -> None:
        """The client went away: abort the upstream request."""
        if self.finished:
            return
        self.finished = True
        self._abandon()

    def arm_timeout(self) -> None:
        if not self.finished and (self.conn is None or not self.conn.head_done):
            self.ex.proto.set_deadline(self.plan.timeout, self.timed_out)

    # -- the client stops / resumes reading ----------------------------------

    def pause(self) -> None:
        conn = self.conn
        if conn is not None and conn.transport is not None:
            conn.transport.pauseProducing()

    def resume(self) -> None:
        conn = self.conn
        if conn is not None and conn.transport is not None:
            conn.transport.resumeProducing()


_CRLF = b"\r\n"
_LAST_CHUNK = b"0\r\n\r\n"


@implementer(IPushProducer)
class UpstreamConnection(Protocol):
    """An HTTP/1.1 client connection to one upstream endpoint, one request
    at a time; back in the pool after a complete, keep-alive exchange."""

    def __init__(self, pool: "UpstreamPool", key: tuple[str, int]) -> None:
        self.pool = pool
        self.key = key
        self.callLater = pool.reactor.callLater
        self._clock = pool.reactor.seconds
        self.req: UpstreamRequest | None = None
        self.parser: Any = None
        self.connected_ = False
        self.reused = False
        self.got_bytes = False
        self.head_done = False
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunked_up = False
        self.body_sent = True
        self.close_delimited = False
        self.head_only = False
        self.head_bytes = 0
        #: a response ended during the current read: any byte after it
        #: answers nothing that was asked (see on_message_begin)
        self.done_in_read = False
        self.tunnel_client: Any = None
        self._idle = LazyTimer(self)

    # -- connection -----------------------------------------------------------

    def connectionMade(self) -> None:
        self.connected_ = True
        transport = self.transport
        transport.registerProducer(self, True)
        if transport.__class__ in wire.PLAIN_TCP:
            # The endpoint put a _WrappingProtocol between the transport and
            # us, a Python call per read for nothing once connected.
            transport.protocol = self

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.connected_ = False
        self._idle.stop()
        self.pool.forget(self)
        client = self.tunnel_client
        if client is not None:
            self.tunnel_client = None
            client.tunnel = None
            client.close()
            return
        req, self.req = self.req, None
        if req is None or req.finished:
            return
        ex = req.ex
        if not self.head_done:
            if self.reused and not self.got_bytes and req.retry_after_stale():
                return
            req.fail(*(_MALFORMED if self.got_bytes else _RESET), reason.getErrorMessage() if reason else "closed")
        elif self.close_delimited:
            req._end()  # the body ends with the connection (RFC 9112 §6.3)
            ex.finish()
        else:
            req._end()
            self.pool.gateway.upstream_broke(ex, reason.getErrorMessage() if reason else "closed")

    # IPushProducer, on our own transport: the upstream does not read the
    # request body as fast as the client sends it.
    def _body_source(self) -> Any:
        """The client connection whose reading follows this upstream's pace, if any."""
        if self.tunnel_client is not None:
            return self.tunnel_client
        return self.req.ex.proto if self.req is not None else None

    def pauseProducing(self) -> None:
        source = self._body_source()
        if source is not None:
            source.pause_body()

    def resumeProducing(self) -> None:
        source = self._body_source()
        if source is not None:
            source.resume_body()

    def stopProducing(self) -> None:
        pass

    def idle_expired(self) -> None:
        if self.req is None and self.transport is not None:
            self.transport.loseConnection()

    # -- the request ----------------------------------------------------------

    def send(self, req: UpstreamRequest, reused: bool) -> None:
        self.req = req
        req.conn = self
        self.reused = reused
        self._idle.clear()
        if self.parser is None:  # kept from one response to the next when it ended clean
            self.parser = httptools.HttpResponseParser(self)
        self.got_bytes = self.head_done = self.close_delimited = False
        self.head_bytes = 0
        self.status = 0
        self.reason = b""
        self.headers = []
        ex = req.ex
        plan = req.plan
        self.head_only = ex.method == b"HEAD"
        # Lines without their CRLF, joined once (fewer formatting operations
        # than b"%s: %s\r\n" per header).
        lines = [plan.method + b" " + plan.target + b" HTTP/1.1"]
        add = lines.append
        for name, values in plan.headers._raw.items():
            if len(values) == 1:
                add(name + b": " + values[0])
            else:
                for value in values:
                    add(name + b": " + value)
        body = ex.body
        self.chunked_up = False
        if body is not None:
            if body.length is None:
                self.chunked_up = True
                add(b"Transfer-Encoding: chunked")
            else:
                add(b"Content-Length: %d" % body.length)
            self.body_sent = False
        else:
            self.body_sent = True
            if ex.content_length is not None:
                add(b"Content-Length: 0")
        if ex.upgrade is not None:
            add(b"Connection: Upgrade\r\nUpgrade: " + ex.upgrade)
        add(_CRLF)  # the empty line ending the head
        wire.write(self.transport, b"\r\n".join(lines))
        if body is not None:
            body.attach(self)

    def send_body(self, data: bytes) -> None:
        if self.req is None or not data:
            return
        if self.chunked_up:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        wire.write(self.transport, data)

    def end_body(self) -> None:
        if self.req is None:
            return
        if self.chunked_up:
            wire.write(self.transport, _LAST_CHUNK)
        self.body_sent = True

    # -- the response -----------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        client = self.tunnel_client
        if client is not None:
            wire.write(client.transport, data)
            return
        req = self.req
        if req is None:
            # Bytes nobody asked for (or after a finished HEAD answer): this
            # connection's framing can no longer be trusted.
            self.transport.loseConnection()
            return
        self.got_bytes = True
        if not self.head_done:
            self.head_bytes += len(data)
            if self.head_bytes > MAX_RESPONSE_HEAD:
                self._malformed("response head too large")
                return
        ex = req.ex
        self.done_in_read = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            self._switch(data[exc.args[0]:])
        except httptools.HttpParserError as exc:
            if self.done_in_read:
                self._overran()
            else:
                self._malformed(str(exc))
        if ex.held is not None:
            ex.flush()  # the head came without (all of) its body

    def _malformed(self, error: str) -> None:
        req, self.req = self.req, None
        self.transport.abortConnection()
        if req is None or req.finished:
            return
        if self.head_done:
            req._end()
            self.pool.gateway.upstream_broke(req.ex, f"malformed response body: {error}")
        else:
            req.fail(*_MALFORMED, error)

    def _overran(self) -> None:
        """The upstream wrote past the end of its response, in the same read:
        a forged second response, the start of one, or garbage. Like nginx,
        the connection is closed and never reused; the bytes answer nothing
        (not the next request of a pipelining client, which may already have
        been sent on this connection: it finds the connection dead before its
        answer, as a stale pooled one, and is retried once if idempotent)."""
        self.connected_ = False  # no longer handed out by the pool
        self.parser = None
        self.transport.abortConnection()
        _log.warn("Upstream {upstream} sent bytes after the end of a response; connection closed",
                  upstream=self.pool.label(self.key))

    def on_message_begin(self) -> None:
        if self.done_in_read:
            raise _Overrun()  # feed_data stops here and raises (dataReceived)

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.head_done:
            self.headers.append((name, value))

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
        self.head_done = True
        self.status = status
        ex = req.ex
        ex.proto.clear_deadline()
        gateway = self.pool.gateway
        if gateway.metrics is not None:
            gateway.metrics.upstream_latency(ex, gateway.reactor.seconds() - ex.upstream_started)
        hop: dict[bytes, bytes] = {}
        lines = end_to_end_lines(self.headers, hop)
        length = hop.get(b"content-length")
        if status == 101:
            if ex.upgrade is None:
                raise httptools.HttpParserError("101 to a request that asked for no upgrade")
            lines.append(b"Connection: Upgrade\r\nUpgrade: %s\r\n" % hop.get(b"upgrade", ex.upgrade))
            ex.send_head(101, self.reason, lines, None)
            return
        if b"transfer-encoding" in hop:
            length = None
        elif length is None and status not in (204, 304) and not self.head_only:
            self.close_delimited = True
        if status == 204:
            length = None
        ex.send_head(status, self.reason, lines, length, hold=True)
        if self.head_only:
            keep = self.parser.should_keep_alive() and not self.close_delimited
            # the parser expects the body a HEAD answer announces but never
            # has: the next request gets a new one
            self.parser = None
            self._complete(keep)

    def on_body(self, data: bytes) -> None:
        req = self.req
        if req is not None and not self.done_in_read:
            req.ex.write(data)

    def on_message_complete(self) -> None:
        if not self.head_done or self.req is None or self.status == 101:
            return
        self._complete(self.parser.should_keep_alive())

    def _complete(self, keep_alive: bool) -> None:
        self.done_in_read = True
        req, self.req = self.req, None
        assert req is not None
        req._end()
        if keep_alive and self.body_sent and not req.ex.client_gone:
            self.pool.release(self)
        else:
            self.transport.loseConnection()
        req.ex.finish()

    # -- upgraded: a byte-for-byte splice ---------------------------------------

    def _switch(self, rest: bytes) -> None:
        req, self.req = self.req, None
        if req is None or req.finished or self.status != 101:
            self.transport.abortConnection()
            return
        req._end()
        ex = req.ex
        client = ex.proto
        self.tunnel_client = client
        client.tunnel = self
        ex.tunnel = self
        for chunk in client.take_tunnel_buffer():
            self.transport.write(chunk)
        if rest:
            client.transport.write(rest)
        client.tunnel_started(ex)

    def write(self, data: bytes) -> None:
        """Bytes from the client, once upgraded."""
        wire.write(self.transport, data)

    def pause(self) -> None:
        self.transport.pauseProducing()

    def resume(self) -> None:
        self.transport.resumeProducing()

    def peer_lost(self) -> None:
        """The client closed its side of the tunnel."""
        self.tunnel_client = None
        if self.transport is not None:
            self.transport.loseConnection()


class _Once(Factory):
    """Builds the one connection it was made for (no log line per connect,
    unlike ``connectProtocol``)."""

    noisy = False

    def __init__(self, conn: UpstreamConnection) -> None:
        self.conn = conn

    def buildProtocol(self, addr: Any) -> UpstreamConnection:
        return self.conn


class UpstreamPool:
    """Idle keep-alive connections per endpoint, and the forwarding of
    requests through them. One per gateway process."""

    def __init__(self, reactor: Any, connect_timeout: float = CONNECT_TIMEOUT, max_per_host: int = 64,
                 idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.reactor = reactor
        self.connect_timeout = connect_timeout
        self.max_per_host = max_per_host
        self.idle_timeout = idle_timeout
        self.gateway: Any = None
        self.idle: dict[tuple[str, int], list[UpstreamConnection]] = {}
        self._endpoints: dict[tuple[str, int], Any] = {}
        self._labels: dict[tuple[str, int], str] = {}
        self._all: set[UpstreamConnection] = set()

    def forward(self, ex: Any, plan: Any) -> None:
        endpoint = plan.endpoint
        key = (endpoint.host, endpoint.port)
        label = self._labels.get(key)
        if label is None:
            label = self.label(key)
        ex.upstream_label = label
        ex.upstream_started = self.reactor.seconds()
        req = ex.upstream = UpstreamRequest(self, ex, plan, key)
        # Like Envoy, the route timeout runs once the client has sent the
        # whole request: a slow upload is not the upstream's fault.
        if ex.body_complete:
            req.arm_timeout()
        else:
            ex.on_body_complete = req.arm_timeout
        idle = self.idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.connected_:
                conn.send(req, reused=True)
                return
        req.connect()

    def label(self, key: tuple[str, int]) -> str:
        """``host:port`` of an endpoint (the access log's ``upstream``, logs),
        remembered for at most 4,096 endpoints."""
        label = self._labels.get(key)
        if label is None:
            label = f"{key[0]}:{key[1]}"
            if len(self._labels) < 4096:
                self._labels[key] = label
        return label

    def connect(self, key: tuple[str, int]) -> Any:
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            endpoint = self._endpoints[key] = self._endpoint(*key)
        conn = UpstreamConnection(self, key)
        self._all.add(conn)
        return endpoint.connect(_Once(conn))

    def _endpoint(self, host: str, port: int) -> Any:
        if ":" in host:
            return TCP6ClientEndpoint(self.reactor, host.strip("[]"), port, timeout=self.connect_timeout)
        if host.replace(".", "").isdigit():
            return TCP4ClientEndpoint(self.reactor, host, port, timeout=self.connect_timeout)
        return HostnameEndpoint(self.reactor, host, port, timeout=self.connect_timeout)

    def release(self, conn: UpstreamConnection) -> None:
        """A connection that finished a keep-alive exchange."""
        idle = self.idle.setdefault(conn.key, [])
        if not conn.connected_ or len(idle) >= self.max_per_host:
            if conn.transport is not None:
                conn.transport.loseConnection()
            return
        conn.req = None
        idle.append(conn)
        if self.idle_timeout:
            conn._idle.set(self.idle_timeout, conn.idle_expired)

    def forget(self, conn: UpstreamConnection) -> None:
        self._all.discard(conn)
        idle = self.idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    def close(self) -> Any:
        """Close every idle connection (on shutdown)."""
        for idle in self.idle.values():
            for conn in list(idle):
                if conn.transport is not None:
                    conn.transport.loseConnection()
        self.idle.clear()
        return succeed(None)

