"""The client side of the engine: an HTTP/1.1 server protocol on a Twisted
transport, parsing with httptools (llhttp, strict), and the :class:`Gateway`
that hands each request head to the pipeline and carries out its plan.

How a request flows, the limits and the edge cases: ``docs/engine.md``.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import httptools
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IProtocolNegotiationFactory, IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from twistgw.api.headers import Headers, InvalidHeaderName, canonical_name
from twistgw.api.types import RequestContext
from twistgw.config.defaults import HEAD_TIMEOUT, IDLE_TIMEOUT, UPSTREAM_TIMEOUT
from twistgw.core.accesslog import AccessLog
from twistgw.core.pipeline import INTERNAL_ERROR, Forward, LocalResponse, Pipeline, Plan, RequestHead
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import Snapshot
from twistgw.engine import wire
from twistgw.engine.timers import LazyTimer
from twistgw.engine.upstream import BODY_BUFFER_LIMIT, RequestBody, UpstreamPool, status_line

__all__ = ["Exchange", "Gateway", "GatewayFactory", "GatewayProtocol", "MAX_HEADERS", "MAX_HEAD_BYTES",
           "MAX_PIPELINE", "MAX_TARGET"]

#: The request target's limit (414 past it), as nginx's default buffer.
MAX_TARGET = 8192
#: The header block's limit in bytes, names and values (431 past it).
MAX_HEAD_BYTES = 16384
#: Header lines per request (431 past it; Envoy's default is 100 too).
MAX_HEADERS = 100
#: Requests parsed but not answered yet on one connection: reading stops at
#: the first queued one; this bounds what one read can queue.
MAX_PIPELINE = 100

# Why reading from the client is paused (a bit each; read while none is set).
_P_PIPELINE = 1   # a request waits behind the one being answered
_P_BODY = 2       # its body is not being drained (buffer full, upstream slow)
_P_WRITE = 4      # the client does not read what we write
_P_TUNNEL = 8     # an upgrade waits for the upstream's 101

_HTTP11 = b"HTTP/1.1"
_HTTP10 = b"HTTP/1.0"
_CLOSE = b"Connection: close\r\n"
_CHUNK_END = b"0\r\n\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_NO_BODY_STATUS = frozenset({204, 304})


def _simple(status: int, reason: bytes) -> bytes:
    return b"HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Length: 0\r\n\r\n" % (status, reason)


_BAD_REQUEST = _simple(400, b"Bad Request")
_TIMEOUT = _simple(408, b"Request Timeout")
_URI_TOO_LONG = _simple(414, b"URI Too Long")
_TOO_LARGE = _simple(431, b"Request Header Fields Too Large")
_NOT_IMPLEMENTED = _simple(501, b"Not Implemented")


class _Reject(Exception):
    """Raised from a parser callback: answer ``response`` and close."""

    def __init__(self, response: bytes) -> None:
        self.response = response


class _Stop(Exception):
    """Raised from a parser callback: the connection is closing, parse no more."""


def _tokens(values: list[bytes] | None) -> frozenset[bytes]:
    """Every comma-separated token of every ``Connection`` line, lower-cased."""
    if not values:
        return frozenset()
    return frozenset(t.strip().lower() for v in values for t in v.split(b","))


class Exchange:
    """One request on a client connection and its response.

    ``body`` is the request body (None without one); ``status`` is 0 until
    the response head went out.
    """

    __slots__ = ("proto", "method", "target", "version", "headers", "keep_alive", "body", "body_complete",
                 "expect_continue", "upgrade", "head", "status", "started", "upstream_label", "upstream",
                 "chunked", "no_body", "done", "recorded", "upstream_started", "on_body_complete", "tunnel",
                 "client_gone", "content_length", "held")

    def __init__(self, proto: "GatewayProtocol", method: bytes, target: bytes, version: bytes,
                 headers: Headers, keep_alive: bool, started: float) -> None:
        self.proto = proto
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
        self.keep_alive = keep_alive
        self.body: RequestBody | None = None
        self.body_complete = False
        self.expect_continue = False
        self.upgrade: bytes | None = None
        self.head: RequestHead | None = None
        self.status = 0
        self.started = started
        self.upstream_label = ""
        self.upstream: Any = None
        self.chunked = False
        self.no_body = False
        self.done = False
        self.recorded = False
        self.upstream_started = 0.0
        self.on_body_complete: Any = None
        self.tunnel: Any = None
        self.client_gone = False
        self.content_length: bytes | None = None
        #: a response head waiting to go out with the first body bytes
        self.held: bytes | None = None

    @property
    def ctx(self) -> RequestContext | None:
        head = self.head
        return head.ctx if head is not None else None

    @property
    def finished(self) -> bool:
        return self.done or self.client_gone

    # -- the response ----------------------------------------------------------

    def send_head(self, status: int, reason: bytes, lines: list[bytes], length: bytes | None,
                  hold: bool = False) -> None:
        """Write the status line and ``lines`` (each ``b"Name: value\\r\\n"``)
        with the framing: ``length`` (the Content-Length value) or, when
        None and a body may follow, chunked (HTTP/1.1) or close-delimited.

        ``hold``: keep the head until the first body bytes (or
        :meth:`flush`, or :meth:`finish`) so both go out in one write."""
        self.status = status
        no_body = self.no_body = status in _NO_BODY_STATUS or self.method == b"HEAD" or status < 200
        if not self.body_complete:
            # The response goes out before the request body was read: the
            # rest of it can never be taken for a next request.
            self.proto.abandon_input()
            self.keep_alive = False
        if length is not None:
            if status != 204:
                lines.append(b"Content-Length: %s\r\n" % length)
        elif not no_body:
            if self.version is _HTTP11:
                self.chunked = True
                lines.append(b"Transfer-Encoding: chunked\r\n")
            else:
                self.keep_alive = False
        if not self.keep_alive:
            lines.append(_CLOSE)
        lines.append(b"\r\n")
        lines.insert(0, status_line(status, reason))
        if hold:
            self.held = b"".join(lines)
        else:
            wire.write(self.proto.transport, b"".join(lines))

    def _out(self, data: bytes) -> None:
        held = self.held
        if held is not None:
            self.held = None
            data = held + data
        if data and not self.client_gone:
            wire.write(self.proto.transport, data)

    def flush(self) -> None:
        """Write a held head."""
        if self.held is not None:
            self._out(b"")

    def write(self, data: bytes) -> None:
        if self.no_body or not data or self.client_gone:
            return
        if self.chunked:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        self._out(data)

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        self._out(_CHUNK_END if self.chunked else b"")
        self.proto.exchange_done(self)

    def respond(self, answer: LocalResponse) -> None:
        """Send the gateway's own answer."""
        if self.status or self.finished:
            return
        lines = []
        body = answer.body
        if body and answer.content_type:
            lines.append(b"Content-Type: %s\r\n" % answer.content_type)
        for name, value in answer.headers:
            lines.append(b"%s: %s\r\n" % (name, value))
        status = answer.status
        self.send_head(status, b"", lines, None if status == 304 else b"%d" % len(body), hold=True)
        if body:
            self.write(body)
        self.finish()

    def abort(self) -> None:
        """The response broke off: close the client connection without
        finishing the body (the client sees a truncated response)."""
        if self.done:
            return
        self.done = True
        self.held = None
        self.keep_alive = False
        self.proto.abandon_input()
        self.proto.exchange_done(self)
        self.proto.close()


@implementer(IPushProducer)
class GatewayProtocol(Protocol):
    """One client connection: parses requests (httptools), answers them one
    at a time and in order, with back-pressure both ways."""

    head_timeout = HEAD_TIMEOUT
    idle_timeout: float | None = IDLE_TIMEOUT
    _peer_host = ""
    _scheme = "http"

    def __init__(self, gateway: "Gateway") -> None:
        self.gateway = gateway
        self.clock = gateway.reactor.seconds
        self.callLater = gateway.reactor.callLater
        self._clock = self.clock
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Exchange] = deque()
        self.current: Exchange | None = None
        self.parsing: Exchange | None = None
        self._paused = 0
        self._closing = False
        self._abandoned = False
        self._in_head = False
        self._advancing = False
        self._url = b""
        self._raw: dict[bytes, list[bytes]] = {}
        self._nheaders = 0
        self._head_bytes = 0
        self._deadline = LazyTimer(self)
        self._idle = LazyTimer(self)
        self.tunnel: Any = None
        self._tunnel_buffer: list[bytes] = []
        self._data = b""
        self.connected_ = False
        self._pending_reject: bytes | None = None

    # -- connection ------------------------------------------------------------

    def connectionMade(self) -> None:
        self.connected_ = True
        transport = self.transport
        peer = transport.getPeer()
        self._peer_host = getattr(peer, "host", "") or ""
        from twisted.internet.interfaces import ISSLTransport

        self._scheme = "https" if ISSLTransport.providedBy(transport) else "http"
        transport.registerProducer(self, True)
        self._arm_idle()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.connected_ = False
        self._closing = True
        self._deadline.stop()
        self._idle.stop()
        if self.tunnel is not None:
            self.tunnel.peer_lost()
            self.tunnel = None
        for ex in [self.current, self.parsing, *self.queue]:
            if ex is not None and not ex.client_gone:
                ex.client_gone = True
                self.gateway.client_gone(ex)
        self.queue.clear()
        self.current = self.parsing = None
        closed = getattr(self.factory, "connection_closed", None)
        if closed is not None:
            closed(self)

    def close(self) -> None:
        """Close after what was written went out."""
        self._closing = True
        transport = self.transport
        if transport is not None and self.connected_:
            # A TLS transport shuts down only once no producer is registered.
            transport.unregisterProducer()
            transport.loseConnection()

    def abandon_input(self) -> None:
        """Read nothing more: the connection closes after this response."""
        self._abandoned = True

    def _reject(self, response: bytes) -> None:
        """Input that cannot be parsed: answer it (after the requests
        before it) and close; nothing after it is read."""
        self._abandoned = True
        self._deadline.stop()
        broken = self.parsing
        if broken is not None and not broken.body_complete:
            # The body of a request already under way is malformed: that
            # request fails, whatever the chain or the upstream make of it.
            self.parsing = None
            if broken is self.current:
                if broken.upstream is not None:
                    broken.upstream.client_gone(broken)
                    broken.upstream = None
                if broken.body is not None:
                    broken.body.stop()
                if broken.status:
                    broken.abort()
                    return
                broken.status = 400
                broken.done = True
                self.gateway.record(broken)
                self.transport.write(response)
                self.close()
                return
            self.queue.remove(broken)
            broken.client_gone = True
            self.gateway.client_gone(broken)
        last = self.queue[-1] if self.queue else self.current
        if last is None:
            self.transport.write(response)
            self.close()
        else:
            last.keep_alive = False
            self._pending_reject = response

    # -- flow control ------------------------------------------------------------

    def pause_reading(self, why: int) -> None:
        if not self._paused and self.transport is not None:
            self.transport.pauseProducing()
        self._paused |= why

    def resume_reading(self, why: int) -> None:
        if self._paused & why:
            self._paused &= ~why
            if not self._paused and self.transport is not None and not self._closing:
                self.transport.resumeProducing()

    def pause_body(self) -> None:
        self.pause_reading(_P_BODY)

    def resume_body(self) -> None:
        self.resume_reading(_P_BODY)

    def tunnel_started(self, ex: Exchange) -> None:
        """The upstream switched protocols: from now on bytes are spliced."""
        self._deadline.stop()
        self._idle.stop()
        self.parsing = None
        if self.current is ex:
            self.current = None
        self.gateway.record(ex)

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
        if self._abandoned:
            return
        if self.tunnel is not None:
            self.tunnel.write(data)
            return
        if self.parsing is not None and self.parsing.upgrade is not None and self.parsing.body_complete:
            self._buffer_tunnel(data)
            return
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES + MAX_TARGET:
                self._reject(_TOO_LARGE)
                return
        self._data = data
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            self._upgraded(data, exc.args[0])
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, _Reject):
                self._reject(cause.response)
            elif not isinstance(cause, _Stop):
                raise
        except httptools.HttpParserError:
            self._reject(_BAD_REQUEST)

    def _upgraded(self, data: bytes, offset: int) -> None:
        ex = self.parsing
        if ex is None or ex.upgrade is None:
            if not self._abandoned:
                self._reject(_BAD_REQUEST)
            return
        self._buffer_tunnel(data[offset:])

    def _buffer_tunnel(self, data: bytes) -> None:
        """Bytes after an upgrade request, before the upstream said 101."""
        if data:
            self._tunnel_buffer.append(data)
            if sum(map(len, self._tunnel_buffer)) > BODY_BUFFER_LIMIT:
                self.pause_reading(_P_TUNNEL)

    def take_tunnel_buffer(self) -> list[bytes]:
        buffered, self._tunnel_buffer = self._tunnel_buffer, []
        self.resume_reading(_P_TUNNEL)
        return buffered

    # -- httptools callbacks ----------------------------------------------------

    def on_message_begin(self) -> None:
        if self._closing:
            raise _Stop()
        self._in_head = True
        self._url = b""
        self._raw = {}
        self._nheaders = 0
        self._head_bytes = 0
        self._idle.clear()
        if self.current is None and self.head_timeout and not self._deadline.armed:
            # The head deadline runs from the first byte of a request.
            self._deadline.set(self.head_timeout, self._head_timed_out)

    def on_url(self, url: bytes) -> None:
        if not self._url:
            # llhttp lets more than one space follow the method; RFC 9112
            # §3 says one (and so do nginx and Envoy).
            twice = self.parser.get_method() + b"  "
            at = self._data.find(twice)
            if at != -1 and (at == 0 or self._data[at - 1] == 10):
                raise _Reject(_BAD_REQUEST)
        url = self._url + url if self._url else url
        if len(url) > MAX_TARGET:
            raise _Reject(_URI_TOO_LONG)
        self._url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._in_head:
            return  # a trailer field: checked by llhttp, not forwarded
        self._nheaders += 1
        self._head_bytes += len(name) + len(value) + 4
        if self._nheaders > MAX_HEADERS or self._head_bytes > MAX_HEAD_BYTES:
            raise _Reject(_TOO_LARGE)
        try:
            cname = canonical_name(name)
        except InvalidHeaderName:
            raise _Reject(_BAD_REQUEST) from None
        value = value.rstrip(b" \t")
        values = self._raw.get(cname)
        if values is None:
            self._raw[cname] = [value]
        else:
            values.append(value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser = self.parser
        v = parser.get_http_version()
        if v == "1.1":
            version = _HTTP11
        elif v == "1.0":
            version = _HTTP10
        else:
            raise _Reject(_BAD_REQUEST)
        method = parser.get_method()
        if method == b"CONNECT":
            raise _Reject(_NOT_IMPLEMENTED)  # a reverse proxy has no tunnel target
        raw = self._raw
        headers = Headers()
        headers._raw = raw
        connection = _tokens(raw.get(b"Connection"))
        keep_alive = version is _HTTP11 and b"close" not in connection
        ex = Exchange(self, method, self._url, version, headers, keep_alive, self.clock())
        te = raw.get(b"Transfer-Encoding")
        cl = raw.get(b"Content-Length")
        if te is not None:
            if version is not _HTTP11:
                raise _Reject(_BAD_REQUEST)  # RFC 9112 §6.1: chunked needs HTTP/1.1
            ex.body = RequestBody(None, self)
        elif cl is not None:
            ex.content_length = cl[0]
            if cl[0] != b"0":
                ex.body = RequestBody(int(cl[0]), self)
        if ex.body is None:
            ex.body_complete = True
        elif version is _HTTP11:
            expect = raw.get(b"Expect")
            if expect is not None and expect[0].lower() == b"100-continue":
                ex.expect_continue = True
        upgrade = raw.get(b"Upgrade")
        if upgrade is not None and b"upgrade" in connection and ex.body is None:
            ex.upgrade = upgrade[0]
        self.parsing = ex
        self._deadline.clear()
        if self.current is None and not self._paused & _P_WRITE:
            self.current = ex
            self.gateway.inflight += 1
            self.gateway.handle(ex)
        else:
            self.queue.append(ex)
            self.gateway.inflight += 1
            self.pause_reading(_P_PIPELINE)
            if len(self.queue) >= MAX_PIPELINE:
                # Deeper than this in one read: answer these, then close.
                ex.keep_alive = False
                self._abandoned = True
                raise _Stop()

    def on_body(self, data: bytes) -> None:
        ex = self.parsing
        if ex is not None and ex.body is not None:
            ex.body.write(data)

    def on_message_complete(self) -> None:
        ex = self.parsing
        if ex is None:
            return
        ex.body_complete = True
        if ex.upgrade is None:
            self.parsing = None
        if ex.body is not None:
            ex.body.finish()
        if ex.on_body_complete is not None:
            callback, ex.on_body_complete = ex.on_body_complete, None
            callback()
        if not ex.keep_alive and ex.upgrade is None:
            # Connection: close (or HTTP/1.0): whatever follows is not read.
            self._abandoned = True
            raise _Stop()

    # -- answering in order -------------------------------------------------------

    def exchange_done(self, ex: Exchange) -> None:
        self.gateway.record(ex)
        if ex is not self.current:
            return
        self.current = None
        if self.parsing is ex and ex.upgrade is None:
            self.parsing = None
        if not ex.keep_alive or self._closing:
            if self._pending_reject is not None and not self.queue:
                self.transport.write(self._pending_reject)
            self.close()
            return
        if ex.upgrade is not None and self.tunnel is None:
            self.close()  # an upgrade that was refused: the connection is done
            return
        self._advance()

    def _advance(self) -> None:
        """Start queued requests, one at a time, while the client reads."""
        if self._advancing:
            return
        self._advancing = True
        try:
            while self.current is None and not self._closing:
                if not self.queue:
                    self.resume_reading(_P_PIPELINE)
                    if self._in_head and self.head_timeout:
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
                self.gateway.handle(ex)
        finally:
            self._advancing = False

    # -- timers ---------------------------------------------------------------------

    def _arm_idle(self) -> None:
        if self.idle_timeout:
            self._idle.set(self.idle_timeout, self._idle_timed_out)

    def _idle_timed_out(self) -> None:
        if self.current is None and not self._in_head and self.transport is not None:
            self.close()

    def _head_timed_out(self) -> None:
        if self.transport is not None and self.current is None:
            self._reject(_TIMEOUT)

    def set_deadline(self, seconds: float, action: Any) -> None:
        self._deadline.set(seconds, action)

    def clear_deadline(self) -> None:
        self._deadline.clear()


@implementer(IProtocolNegotiationFactory)
class GatewayFactory(Factory):
    """Builds a :class:`GatewayProtocol` per client connection; offers
    ``http/1.1`` by ALPN on TLS listeners."""

    noisy = False

    def __init__(self, gateway: "Gateway", timeout: float | None = IDLE_TIMEOUT,
                 head_timeout: float = HEAD_TIMEOUT) -> None:
        self.gateway = gateway
        self.timeOut = timeout
        self.head_timeout = head_timeout
        #: open client connections, so that stopping can close them
        self.connections: set[GatewayProtocol] = set()
        self._all_closed: list[Deferred] = []

    def buildProtocol(self, addr: Any) -> GatewayProtocol:
        p = GatewayProtocol(self.gateway)
        p.factory = self
        p.head_timeout = self.head_timeout
        p.idle_timeout = self.timeOut
        self.connections.add(p)
        return p

    def connection_closed(self, proto: GatewayProtocol) -> None:
        self.connections.discard(proto)
        if not self.connections:
            waiting, self._all_closed = self._all_closed, []
            for d in waiting:
                d.callback(None)

    def close_connections(self) -> Deferred:
        """Close every client connection now (idle keep-alive ones and any
        still in flight) and stop their timers. The Deferred fires once
        every connection is gone."""
        d: Deferred = Deferred()
        if not self.connections:
            d.callback(None)
            return d
        self._all_closed.append(d)
        for proto in list(self.connections):
            proto._deadline.stop()
            proto._idle.stop()
            if proto.transport is not None and proto.connected_:
                proto.transport.abortConnection()
            else:
                self.connection_closed(proto)
        return d

    def acceptableProtocols(self) -> list[bytes]:
        return [b"http/1.1"]


class Gateway:
    """Holds the serving snapshot and carries out the pipeline's plan for
    every request: answer locally, or forward and relay the response."""

    _log = Logger(namespace="twistgw.gateway")

    def __init__(self, reactor: Any, plugins: PluginHost, forwarder: UpstreamPool | None = None,
                 metrics: Any = None, access_log: bool | AccessLog = True,
                 upstream_timeout: float = UPSTREAM_TIMEOUT) -> None:
        self.reactor = reactor
        self.plugins = plugins
        self.pipeline = Pipeline(plugins, reactor, upstream_timeout)
        self.forwarder = forwarder or UpstreamPool(reactor)
        self.forwarder.gateway = self
        self.metrics = metrics
        #: where access lines go (True: a twisted.logger event per request)
        self.access_log: AccessLog | None = (
            AccessLog(fmt="events") if access_log is True else access_log or None)
        self.snapshot: Snapshot | None = None
        self.draining = False
        self.inflight = 0
        self._finished_hook = (
            plugins.pm.hook.twistgw_request_finished
            if plugins.pm.hook.twistgw_request_finished.get_hookimpls() else None
        )

    # -- dispatch ------------------------------------------------------------

    def handle(self, ex: Exchange) -> None:
        proto = ex.proto
        try:
            head = ex.head = RequestHead(ex.method, ex.target, ex.headers, proto._peer_host, proto._scheme,
                                         ex.version)
            plan = self.pipeline.handle(head, self.snapshot)
        except Exception:
            # e.g. a twistgw_route_match plugin that raised: fail closed with
            # a 500 rather than dropping the connection without an answer.
            self._internal_error(Failure(), ex)
            return
        if type(plan) is Forward or type(plan) is LocalResponse:  # before the (ABC) isinstance
            self._carry_out(plan, ex)
        elif isinstance(plan, Deferred):
            plan.addCallback(self._carry_out, ex)
            plan.addErrback(self._internal_error, ex)
        else:
            self._carry_out(plan, ex)

    def _carry_out(self, plan: Plan, ex: Exchange) -> None:
        if ex.finished:
            return
        if type(plan) is Forward:
            if ex.expect_continue and not ex.body_complete:
                # Only now, after the chain admitted it, invite the body.
                wire.write(ex.proto.transport, _CONTINUE)
            self.forwarder.forward(ex, plan)
        else:
            ex.respond(plan)

    def _internal_error(self, failure: Failure, ex: Exchange) -> None:
        self._log.failure("Unexpected error handling {method} {uri}", failure, method=ex.method, uri=ex.target)
        if not ex.finished:
            if ex.status:
                ex.abort()
            else:
                ex.respond(INTERNAL_ERROR)

    def client_gone(self, ex: Exchange) -> None:
        """The client connection closed: abort the upstream side, account."""
        if ex.upstream is not None:
            ex.upstream.client_gone(ex)
        if ex.body is not None:
            ex.body.stop()
        self.record(ex)

    def upstream_failed(self, ex: Exchange, status: int, body: bytes, why: str, error: str) -> None:
        if ex.finished:
            return
        self._log.info("Upstream {upstream} failed for {method} {path}: {why} ({error})",
                       upstream=ex.upstream_label, method=ex.method,
                       path=ex.ctx.path if ex.ctx else ex.target, why=why, error=error)
        if ex.status:
            ex.abort()
        else:
            ex.respond(LocalResponse(status, body, reason=why))

    def upstream_broke(self, ex: Exchange, reason: str) -> None:
        self._log.warn("Upstream {upstream} broke off the response to {method} {path}: {reason}",
                       upstream=ex.upstream_label, method=ex.method,
                       path=ex.ctx.path if ex.ctx else ex.target, reason=reason)
        ex.abort()

    # -- accounting ------------------------------------------------------------

    def record(self, ex: Exchange) -> None:
        if ex.recorded:
            return
        ex.recorded = True
        self.inflight -= 1
        ctx = ex.ctx
        status = ex.status
        duration = self.reactor.seconds() - ex.started
        if self.metrics is not None:
            self.metrics.request(ctx, status, duration)
        access = self.access_log
        if access is not None:
            if ctx is not None:
                principal = ctx.principal
                if principal.__class__ is not str:  # None, or a plugin's non-str
                    principal = "-" if principal is None else str(principal)
                access.request(ctx.client_address, ctx.method, ctx.path, status, ctx.virtual_service,
                               ctx.route or "-", ex.upstream_label or "-", ctx.decided_by or "-",
                               principal or "-", duration)
            else:
                access.request(ex.proto._peer_host or "-",
                               ex.method.decode("latin-1") if ex.method else "-",
                               (ex.target or b"").decode("latin-1")[:200], status, "-", "-",
                               ex.upstream_label or "-", "-", "-", duration)
        if self._finished_hook is not None and ctx is not None:
            try:
                self._finished_hook(ctx=ctx, status=status)
            except Exception:
                self._log.failure("A twistgw_request_finished hook failed")
