"""The client side: an HTTPChannel that starts processing as soon as the
request head is complete (so bodies stream), and the per-request flow.
"""

from __future__ import annotations

import io
import time
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http

from twistgw.api.types import RequestContext
from twistgw.config.defaults import HEAD_TIMEOUT, IDLE_TIMEOUT, UPSTREAM_TIMEOUT
from twistgw.core.accesslog import AccessLog
from twistgw.core.pipeline import INTERNAL_ERROR, Forward, LocalResponse, Pipeline, Plan, RequestHead
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import Snapshot
from twistgw.engine.upstream import (Forwarder, RequestBody, ResponseRelay, classify_failure, copy_response_headers,
                                     twisted_headers)


class GatewayRequest(http.Request):
    """A request whose body is streamed, not buffered into ``content``."""

    gateway: "Gateway"
    body: RequestBody | None = None
    body_complete = False
    dispatched = False
    head: RequestHead | None = None
    upstream_label = ""
    started = 0.0
    _recorded = False
    _upstream_d: Deferred | None = None
    _relay: ResponseRelay | None = None
    on_body_complete: Any = None

    def __init__(self, channel: Any, queued: Any = http._QUEUED_SENTINEL) -> None:
        super().__init__(channel, queued)
        self.gateway = channel.factory.gateway
        self.started = self.gateway.reactor.seconds()
        self.gateway.inflight += 1

    @property
    def ctx(self) -> RequestContext | None:
        """The plugins' view of this request, once it was routed."""
        head = self.head
        return head.ctx if head is not None else None

    # -- called by GatewayChannel -----------------------------------------

    def gotLength(self, length: int | None) -> None:
        self.content = io.BytesIO()  # stays empty; bodies stream
        if length != 0:
            channel = self.channel
            self.body = RequestBody(length, channel.pauseClient, channel.resumeClient)

    def headersComplete(self, command: bytes, path: bytes, version: bytes) -> None:
        self.method, self.uri, self.clientproto = command, path, version
        self.path = path.split(b"?", 1)[0]
        if self.body is not None:
            # A body is coming: start now so it can stream to the upstream.
            self.dispatched = True
            self.gateway.handle(self)

    def handleContentChunk(self, data: bytes) -> None:
        if self.body is not None:
            self.body.write(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        self.body_complete = True
        if self.body is not None:
            self.body.finish()
        if self.on_body_complete is not None:
            callback, self.on_body_complete = self.on_body_complete, None
            callback()
        if not self.dispatched:
            self.dispatched = True
            self.gateway.handle(self)

    # -- responding --------------------------------------------------------

    def beforeResponse(self) -> None:
        """Called before the status line goes out: if the request body has
        not been read to its end, the connection cannot be reused."""
        if not self.body_complete and self.channel is not None:
            self.channel.abandonInput()
            self.responseHeaders.setRawHeaders(b"connection", [b"close"])

    def finish(self) -> None:
        super().finish()
        self.gateway.record(self)

    def connectionLost(self, reason: Failure) -> None:
        super().connectionLost(reason)
        if self._upstream_d is not None:
            d, self._upstream_d = self._upstream_d, None
            d.cancel()
        if self._relay is not None and self._relay.transport is not None:
            self._relay.transport.stopProducing()
        if self.body is not None:
            self.body.stopProducing()
        self.gateway.record(self)


class GatewayChannel(http.HTTPChannel):
    """HTTPChannel with streaming request bodies, a deadline for the request
    head (slowloris), no obs-fold, and no automatic ``100 Continue``."""

    headTimeout = HEAD_TIMEOUT
    _abandoned = False
    _peer: Any = None
    _host: Any = None
    _secure: bool | None = None
    #: the clock of the reactor behind ``callLater`` (GatewayFactory sets it)
    _clock: Any = staticmethod(time.monotonic)

    def __init__(self) -> None:
        super().__init__()
        # One deadline at a time: the request head's (slowloris), then the
        # upstream's answer. And Twisted's idle timeout, which HTTPChannel
        # cancels and re-creates around every request. Both are lazy timers,
        # not a reactor.callLater per request.
        self._deadline = _LazyTimer(self)
        self._idle = _LazyTimer(self)

    # A connection's addresses and security never change: look them up once
    # per connection, not per request (Twisted's Request.__init__ asks for
    # both, and getHost() is a getsockname() system call).

    def getPeer(self) -> Any:
        if self._peer is None:
            self._peer = super().getPeer()
        return self._peer

    def getHost(self) -> Any:
        if self._host is None:
            self._host = super().getHost()
        return self._host

    def isSecure(self) -> bool:
        if self._secure is None:
            self._secure = super().isSecure()
        return self._secure

    def lineReceived(self, line: bytes) -> None:
        if not self._HTTPChannel__first_line and line[:1] in (b" ", b"\t"):
            # obs-fold (RFC 9112 §5.2): reject rather than guess.
            self._respondToBadRequestAndDisconnect()
            return
        super().lineReceived(line)

    # -- deadlines -----------------------------------------------------------

    def set_deadline(self, seconds: float, action: Any) -> None:
        """Call ``action`` unless :meth:`clear_deadline` (or another
        ``set_deadline``) comes within ``seconds``."""
        self._deadline.set(seconds, action)

    def clear_deadline(self) -> None:
        self._deadline.clear()

    def setTimeout(self, period: float | None) -> float | None:
        """TimeoutMixin's idle timeout, on a lazy timer."""
        previous, self.timeOut = self.timeOut, period
        if period is None:
            self._idle.clear()
        else:
            self._idle.set(period, self.timeoutConnection)
        return previous

    def resetTimeout(self) -> None:
        if self.timeOut is not None and self._idle.armed:
            self._idle.set(self.timeOut, self.timeoutConnection)

    def _stop_timers(self) -> None:
        self._deadline.stop()
        self._idle.stop()

    def _headTimedOut(self) -> None:
        if self.transport is not None:
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
            self.transport.loseConnection()

    def checkPersistence(self, request: Any, version: bytes) -> bool:
        """Like Twisted's, but reads every ``Connection`` line and splits on
        commas (Twisted reads only the first line, split on spaces, so
        ``Connection: a,close`` or a second ``Connection: close`` line kept
        the connection open)."""
        tokens = {
            token.strip().lower()
            for value in request.requestHeaders.getRawHeaders(b"connection", ())
            for token in value.split(b",")
        }
        if version == b"HTTP/1.1" and b"close" not in tokens:
            return True
        request.responseHeaders.setRawHeaders(b"connection", [b"close"])
        return False

    def allHeadersReceived(self) -> None:
        self.clear_deadline()
        req = self.requests[-1]
        self.persistent = self.checkPersistence(req, self._version)
        req.gotLength(self.length)
        req.headersComplete(self._command, self._path, self._version)

    def allContentReceived(self) -> None:
        if self._abandoned:
            return
        super().allContentReceived()

    def dataReceived(self, data: bytes) -> None:
        if self._abandoned:
            return
        if (not self._deadline.armed and self.headTimeout and data and self.line_mode
                and not self._handlingRequest):
            # The head deadline runs from the first byte of a request, not
            # from its first complete line: a request line dribbled one byte
            # at a time (never a CRLF) must not hold the connection.
            self.set_deadline(self.headTimeout, self._headTimedOut)
        super().dataReceived(data)

    def abandonInput(self) -> None:
        """The response went out before the request body was read: close
        after it, and read nothing more (no smuggling of the rest)."""
        self._abandoned = True
        self.persistent = False

    def pauseClient(self) -> None:
        if self.transport is not None:
            self.transport.pauseProducing()

    def resumeClient(self) -> None:
        if self.transport is not None and not self._abandoned:
            self.transport.resumeProducing()

    def connectionLost(self, reason: Failure) -> None:
        super().connectionLost(reason)
        self._stop_timers()

    def _respondToBadRequestAndDisconnect(self) -> None:
        self._deadline.stop()
        self._abandoned = True
        self.transport.write(
            b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
        )
        self.loseConnection()

    def lineLengthExceeded(self, line: bytes) -> None:
        self._deadline.stop()
        self._abandoned = True
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
        )
        self.loseConnection()


class _LazyTimer:
    """A deadline that moves without touching the reactor.

    ``set`` records when the deadline falls; a reactor call is made only
    when none is pending, or when the new deadline is earlier than the
    pending call. A call that finds the deadline moved later sets itself
    again for it; one that finds it cleared does nothing. So a deadline
    re-set on every request of a keep-alive connection costs two attribute
    writes, and the reactor sees about one call per timeout period.
    """

    __slots__ = ("_owner", "_due", "_action", "_call", "_call_at")

    def __init__(self, owner: Any) -> None:
        self._owner = owner  # has callLater and _clock
        self._due = 0.0
        self._action: Any = None
        self._call: Any = None
        self._call_at = 0.0

    @property
    def armed(self) -> bool:
        return self._action is not None

    def set(self, seconds: float, action: Any) -> None:
        due = self._owner._clock() + seconds
        self._due, self._action = due, action
        call = self._call
        if call is None or not call.active():
            self._call = self._owner.callLater(seconds, self._fire)
            self._call_at = due
        elif due < self._call_at:
            call.reset(seconds)
            self._call_at = due

    def clear(self) -> None:
        self._action = None  # a pending call will find nothing to do

    def stop(self) -> None:
        self._action = None
        if self._call is not None:
            if self._call.active():
                self._call.cancel()
            self._call = None

    def _fire(self) -> None:
        self._call = None
        action = self._action
        if action is None:
            return
        remaining = self._due - self._owner._clock()
        if remaining > 0:  # moved later since the call was made
            self._call = self._owner.callLater(remaining, self._fire)
            self._call_at = self._due
            return
        self._action = None
        action()


class GatewayFactory(http.HTTPFactory):
    protocol = GatewayChannel
    noisy = False

    def __init__(self, gateway: "Gateway", timeout: float = IDLE_TIMEOUT, head_timeout: float = HEAD_TIMEOUT) -> None:
        # The gateway's reactor keeps the connections' time too.
        super().__init__(timeout=timeout, reactor=gateway.reactor)
        self.gateway = gateway
        self.head_timeout = head_timeout

    def buildProtocol(self, addr: Any) -> Any:
        p = super().buildProtocol(addr)
        p.requestFactory = GatewayRequest
        p.headTimeout = self.head_timeout
        p._clock = self.reactor.seconds
        return p

    def log(self, request: Any) -> None:
        pass  # the gateway writes its own structured access log


class Gateway:
    """Holds the serving snapshot and carries out the pipeline's plan for
    every request: answer locally, or forward and relay the response."""

    _log = Logger(namespace="twistgw.gateway")

    def __init__(self, reactor: Any, plugins: PluginHost, forwarder: Forwarder | None = None,
                 metrics: Any = None, access_log: bool | AccessLog = True,
                 upstream_timeout: float = UPSTREAM_TIMEOUT) -> None:
        self.reactor = reactor
        self.plugins = plugins
        self.pipeline = Pipeline(plugins, reactor, upstream_timeout)
        self.forwarder = forwarder or Forwarder(reactor)
        self.metrics = metrics
        #: where access lines go (True: a twisted.logger event per request)
        self.access_log: AccessLog | None = (
            AccessLog(fmt="events") if access_log is True else access_log or None)
        self.snapshot: Snapshot | None = None
        self.draining = False
        self.inflight = 0
        #: (host, port) -> (b"http://host:port", "host:port")
        self._targets: dict[tuple[str, int], tuple[bytes, str]] = {}
        self._finished_hook = (
            plugins.pm.hook.twistgw_request_finished
            if plugins.pm.hook.twistgw_request_finished.get_hookimpls() else None
        )

    # -- dispatch ------------------------------------------------------------

    def handle(self, request: GatewayRequest) -> None:
        try:
            peer = request.client
            head = request.head = RequestHead(
                request.method, request.uri, request.requestHeaders, getattr(peer, "host", "") or "",
                "https" if request.isSecure() else "http", request.clientproto)
            plan = self.pipeline.handle(head, self.snapshot)
        except Exception:
            # e.g. a twistgw_route_match plugin that raised: fail closed with
            # a 500 rather than dropping the connection without an answer.
            self._internal_error(Failure(), request)
            return
        if isinstance(plan, Deferred):
            plan.addCallback(self._carry_out, request)
            plan.addErrback(self._internal_error, request)
        else:
            self._carry_out(plan, request)

    def _carry_out(self, plan: Plan, request: GatewayRequest) -> None:
        if request._disconnected or request.finished:
            return
        if type(plan) is Forward:
            self._forward(request, plan)
        else:
            self.respond(request, plan)

    def _internal_error(self, failure: Failure, request: GatewayRequest) -> None:
        self._log.failure("Unexpected error handling {method} {uri}", failure,
                          method=request.method, uri=request.uri)
        if not request._disconnected and not request.finished:
            self.respond(request, INTERNAL_ERROR)

    # -- forwarding ----------------------------------------------------------

    def _forward(self, request: GatewayRequest, plan: Forward) -> None:
        endpoint = plan.endpoint
        key = (endpoint.host, endpoint.port)
        target = self._targets.get(key)
        if target is None:
            host = endpoint.host
            if ":" in host and not host.startswith("["):
                host = f"[{host}]"
            target = (f"http://{host}:{endpoint.port}".encode("ascii"), f"{endpoint.host}:{endpoint.port}")
            if len(self._targets) < 4096:
                self._targets[key] = target
        url = target[0] + plan.target
        request.upstream_label = target[1]
        body = request.body
        if body is None and request.requestHeaders.hasHeader(b"content-length"):
            body = RequestBody(0, lambda: None, lambda: None)
            body.finish()
        if (body is not None and not request.body_complete and request.clientproto == b"HTTP/1.1"
                and (request.requestHeaders.getRawHeaders(b"expect") or [b""])[0].lower() == b"100-continue"):
            # Only now, after authentication, invite the client to send its body.
            request.channel.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        d = self.forwarder.agent.request(plan.method, url, twisted_headers(plan.headers), body)
        request._upstream_d = d
        request.upstream_started = self.reactor.seconds()
        d.addCallbacks(self._got_response, self._upstream_failed, callbackArgs=(request,), errbackArgs=(request,))
        # Like Envoy, the route timeout runs once the client has sent the
        # whole request: a slow upload is not the upstream's fault.
        timeout = plan.timeout
        if body is None or request.body_complete:
            self._arm_timeout(request, d, timeout)
        else:
            request.on_body_complete = lambda: self._arm_timeout(request, d, timeout)

    def _arm_timeout(self, request: GatewayRequest, d: Deferred, timeout: float) -> None:
        # Not ``d.called``: on a pooled connection the Agent's Deferred has
        # fired already and waits, paused, on the response.
        if request._upstream_d is not d or request.channel is None:
            return  # the response (or a failure) arrived already
        request.channel.set_deadline(timeout, d.cancel)  # cleared in _upstream_done

    @staticmethod
    def _upstream_done(request: GatewayRequest) -> None:
        request._upstream_d = None
        if request.channel is not None:
            request.channel.clear_deadline()

    def _got_response(self, response: Any, request: GatewayRequest) -> None:
        self._upstream_done(request)
        if self.metrics is not None:
            self.metrics.upstream_latency(request, self.reactor.seconds() - request.upstream_started)
        if request._disconnected:
            response.deliverBody(_Discard())
            return
        request.setResponseCode(response.code, response.phrase)
        copy_response_headers(response, request)
        request.beforeResponse()

        def finished(reason: Failure | None) -> None:
            request._relay = None
            if request._disconnected or request.finished:
                return
            if reason is None:
                request.finish()
            else:
                self._log.warn("Upstream {upstream} broke off the response to {method} {path}: {reason}",
                               upstream=request.upstream_label, method=request.method,
                               path=request.ctx.path if request.ctx else request.uri,
                               reason=reason.getErrorMessage())
                request.channel.abandonInput()
                request.channel.loseConnection()

        request._relay = ResponseRelay(request, finished)
        response.deliverBody(request._relay)

    def _upstream_failed(self, failure: Failure, request: GatewayRequest) -> None:
        self._upstream_done(request)
        if request._disconnected or request.finished:
            return
        status, body, why = classify_failure(failure)
        self._log.info("Upstream {upstream} failed for {method} {path}: {why} ({error})",
                       upstream=request.upstream_label, method=request.method,
                       path=request.ctx.path if request.ctx else request.uri, why=why,
                       error=failure.getErrorMessage())
        self.respond(request, LocalResponse(status, body, reason=why))

    # -- local responses and accounting ----------------------------------

    def respond(self, request: GatewayRequest, answer: LocalResponse) -> None:
        if request._disconnected or request.finished:
            return
        request.setResponseCode(answer.status)
        rh = request.responseHeaders
        if answer.body and answer.content_type:
            rh.setRawHeaders(b"content-type", [answer.content_type])
        if answer.status not in (204, 304):  # RFC 9110 §8.6: no Content-Length on 204
            rh.setRawHeaders(b"content-length", [b"%d" % len(answer.body)])
        for name, value in answer.headers:
            rh.addRawHeader(name, value)
        request.beforeResponse()
        if answer.body:
            request.write(answer.body)
        request.finish()

    def record(self, request: GatewayRequest) -> None:
        if request._recorded:
            return
        request._recorded = True
        self.inflight -= 1
        ctx = request.ctx
        status = request.code if request.startedWriting else 0
        duration = self.reactor.seconds() - request.started
        if self.metrics is not None:
            self.metrics.request(ctx, status, duration)
        access = self.access_log
        if access is not None:
            if ctx is not None:
                principal = ctx.principal
                if principal.__class__ is not str:  # None, or a plugin's non-str
                    principal = "-" if principal is None else str(principal)
                access.request(ctx.client_address, ctx.method, ctx.path, status, ctx.virtual_service,
                               ctx.route or "-", request.upstream_label or "-", ctx.decided_by or "-",
                               principal or "-", duration)
            else:
                access.request(getattr(request.client, "host", "") or "-",
                               request.method.decode("latin-1") if request.method else "-",
                               (request.uri or b"").decode("latin-1")[:200], status, "-", "-",
                               request.upstream_label or "-", "-", "-", duration)
        if self._finished_hook is not None and ctx is not None:
            try:
                self._finished_hook(ctx=ctx, status=status)
            except Exception:
                self._log.failure("A twistgw_request_finished hook failed")


class _Discard(Protocol):
    """Drops a response nobody is waiting for, closing its connection."""

    def connectionMade(self) -> None:
        self.transport.stopProducing()
