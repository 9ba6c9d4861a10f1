"""The gateway glue, apart from the protocol: :class:`Gateway` hands each
request head to the pipeline and carries out its plan (answer locally, or
forward), turns failures into answers, and accounts for every request
(access log, metrics, the ``twistgw_request_finished`` hook).
:class:`GatewayFactory` builds a client connection per accepted socket.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IProtocolNegotiationFactory
from twisted.internet.protocol import Factory
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from twistgw.config.defaults import HEAD_TIMEOUT, IDLE_TIMEOUT, UPSTREAM_TIMEOUT
from twistgw.config.http2 import DEFAULT as HTTP2_DEFAULT, Http2Options
from twistgw.config.compression import Compression
from twistgw.core.accesslog import AccessLog
from twistgw.core.compression import choose, compress_local
from twistgw.core.grpc import prepare_http2
from twistgw.core.pipeline import INTERNAL_ERROR, NOT_FOUND, Pipeline, RequestHead
from twistgw.core.plan import Forward, LocalResponse, Plan
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import Snapshot
from twistgw.engine.compress import CompressingDownstream
from twistgw.engine.connection import GatewayProtocol
from twistgw.engine.exchange import Exchange
from twistgw.engine.grpcweb import GrpcWebDownstream
from twistgw.engine.http2 import H2ServerConnection, H2Stream
from twistgw.engine.proxyproto import ProxyHeaderReader
from twistgw.engine.tracing import Exporters, finish as finish_trace, upstream_started
from twistgw.engine.upstream import UpstreamPool
from twistgw.engine.upstream.shadow import Shadows
from twistgw.servertls import H2, HTTP11

__all__ = ["Gateway", "GatewayFactory"]

#: a client's request, whatever it speaks: an HTTP/1.1 exchange or an HTTP/2 stream
ClientRequest = Exchange | H2Stream

#: what Pipeline.handle returns but a Deferred (RetryingForward is a Forward)
_PLANS = (Forward, LocalResponse)
#: a Gateway's ``healthCheck`` path (Envoy's health-check filter): 200, or
#: 503 once the process drains
HEALTHY = LocalResponse(200, reason="the Gateway's healthCheck path", answer=True)
DRAINING = LocalResponse(503, reason="the Gateway's healthCheck path, while draining", answer=True)

#: a TLS connection whose certificate a reload replaced (RFC 9110 §15.5.20:
#: the client retries on a new connection, which gets the new certificate)
MISDIRECTED = LocalResponse(421, b"Misdirected Request: the certificate for this server name changed;"
                            b" reconnect\n", reason="the TLS connection's certificate was replaced by a reload")


#: the protocols as the access log writes them
_PROTOCOLS = {b"HTTP/1.1": "HTTP/1.1", b"HTTP/1.0": "HTTP/1.0", b"HTTP/2": "HTTP/2"}


def _text(protocol: bytes) -> str:
    return protocol.decode("latin-1")


def _rid(ex: ClientRequest) -> str:
    """`` request_id=...`` at the end of a log line about ``ex``, when it
    has one (the event's ``request_id`` field holds the id alone)."""
    head = ex.head
    rid = head.request_id if head is not None else None
    return f" request_id={rid}" if rid is not None else ""


def _head_rid(ex: ClientRequest) -> str:
    head = ex.head
    rid = head.request_id if head is not None else None
    return rid if rid is not None else ""


def _is_grpc(ex: ClientRequest) -> bool:
    """A gRPC request: the gateway's answer takes gRPC's form (core/grpc.py), never compressed."""
    values = ex.headers.get_canonical(b"Content-Type")
    return values is not None and values[0][:16].lower() == b"application/grpc"


class Gateway:
    """Holds the serving snapshot and carries out the pipeline's plan for
    every request: answer locally, or forward and relay the response."""

    _log = Logger(namespace="twistgw.gateway")

    def __init__(self, reactor: Any, plugins: PluginHost, forwarder: UpstreamPool | None = None,
                 metrics: Any = None, access_log: bool | AccessLog = True,
                 upstream_timeout: float = UPSTREAM_TIMEOUT, exporters: Exporters | None = None) -> None:
        # reactor, metrics: Any, Twisted's reactor interfaces and the
        # runtime's Metrics (runtime imports the engine, not the reverse)
        self.reactor = reactor
        self.plugins = plugins
        self.pipeline = Pipeline(plugins, reactor, upstream_timeout)
        self.forwarder = forwarder or UpstreamPool(reactor)
        #: the routes' shadow requests (``shadowing``), sent through the same pool
        self.shadows = Shadows(self.forwarder, reactor)
        self.metrics = metrics
        #: where access lines go (True: a twisted.logger event per request)
        self.access_log: AccessLog | None = (
            AccessLog(fmt="events") if access_log is True else access_log or None)
        #: the Gateways' access-log files (``runtime.accessfiles.AccessFiles``)
        #: while some Gateway of the serving snapshot logs, else None: see
        #: :meth:`log_gateways_to`
        self.gateway_logs: Any = None
        self.snapshot: Snapshot | None = None
        #: the span exporters of the Gateways that trace (:meth:`sync_tracing`)
        self.exporters = exporters if exporters is not None else Exporters(reactor=reactor)
        self.draining = False
        self.inflight = 0
        self._finished_hook = (
            plugins.pm.hook.twistgw_request_finished
            if plugins.pm.hook.twistgw_request_finished.get_hookimpls() else None
        )

    # -- dispatch ------------------------------------------------------------

    def handle(self, ex: ClientRequest) -> None:
        proto = ex.proto
        compression: Compression | None = None
        try:
            head = ex.head = RequestHead(ex.method, ex.target, ex.headers, proto.peer_host, proto.scheme,
                                         ex.version, None if ex.body is None else ex)
            if proto.tls is not None and self.snapshot is not None:
                head.hosts = proto.tls.hosts(self.snapshot)
                if head.hosts is None:  # a reload changed this connection's certificate
                    ex.keep_alive = False
                    ex.respond(MISDIRECTED)
                    return
            snapshot = self.snapshot
            key = proto.gateway_key
            if key is None:
                plan = self.pipeline.handle(head, snapshot)
            elif snapshot is not None and key in snapshot.gateways:
                view = head.gateway = snapshot.gateways[key]
                if view.health_path is not None and ex.target == view.health_path:
                    plan = DRAINING if self.draining else HEALTHY
                else:
                    plan = self.pipeline.handle(head, snapshot)
                    compression = view.compression
            else:  # a Gateway removed while its listener drains
                plan = NOT_FOUND
        except Exception:
            # e.g. a twistgw_route_match plugin that raised: fail closed with
            # a 500 rather than dropping the connection without an answer.
            self._internal_error(Failure(), ex)
            return
        if isinstance(plan, _PLANS):  # plain classes: an exact type is one pointer test
            self._carry_out(plan, ex, compression)
        elif isinstance(plan, Deferred):
            plan.addCallback(self._carry_out, ex, compression)
            plan.addErrback(self._internal_error, ex)
        else:
            self._carry_out(plan, ex, compression)

    def _carry_out_traced(self, plan: Plan, ex: ClientRequest, compression: Compression | None = None) -> None:
        """:meth:`_carry_out` while some Gateway traces: the trace headers
        written for the upstream, and its client span opened."""
        started = getattr(ex.head, "trace", None)
        if started is not None:
            trace = started.trace  # None: unsampled, its headers written already
            if trace is not None and isinstance(plan, Forward) and not ex.finished:
                upstream_started(started, plan, None)
                started.inject(plan.headers)
                Gateway._carry_out(self, plan, ex, compression)
                trace.request = ex.upstream
                return
        Gateway._carry_out(self, plan, ex, compression)

    def _carry_out(self, plan: Plan, ex: ClientRequest, compression: Compression | None = None) -> None:
        """Answer, or forward; ``compression``: the Gateway's ``gzip`` /
        ``brotli`` (None: the response goes out as it comes)."""
        if ex.finished:
            return
        if isinstance(plan, Forward):  # a RetryingForward too (a route with retries or shadowing)
            if ex.expect_continue and not ex.body_complete:
                # Only now, after the chain admitted it, invite the body.
                ex.send_continue()
            if ex.upgrade is not None:
                runtime = ex.head.runtime if ex.head is not None else None
                if runtime is None or not runtime.route.websocket:
                    ex.drop_upgrade()  # the route's upgrades: [{websocket: {enabled: false}}]
            ex.upstream_started = self.reactor.seconds()
            # a route's shadowing: the body tapped before the primary takes
            # it, the copy sent after the primary is on its way
            pending = self.shadows.prepare(ex, plan.mirror) if plan.mirror is not None else None
            down: Any = ex
            if plan.upstream.http2 is not None:  # te: trailers, grpc-web, grpc-timeout (core/grpc.py)
                gateway = ex.head.gateway if ex.head is not None else None
                web = prepare_http2(plan, ex.headers.getRawHeaders(b"te"),
                                    gateway is None or not gateway.gateway.grpc_web_disabled)
                if web is not None:
                    down = GrpcWebDownstream(ex, *web)
            if compression is not None:
                accept = ex.headers.getRawHeaders(b"accept-encoding")
                if compression.remove_accept_encoding:
                    plan.headers.raw.pop(b"Accept-Encoding", None)
                down = CompressingDownstream(down, compression, choose(compression, accept))
            req = ex.upstream = self.forwarder.forward(down, plan)
            ex.upstream_label = req.label
            if pending is not None:
                pending.go()
        else:
            if compression is not None and plan.body and not _is_grpc(ex):
                plan = compress_local(compression, plan, ex.method, ex.headers.getRawHeaders(b"accept-encoding"))
            ex.respond(plan)

    def _internal_error(self, failure: Failure, ex: ClientRequest) -> None:
        self._log.failure("Unexpected error handling {method} {uri}{with_id}", failure, method=ex.method,
                          uri=ex.target, with_id=_rid(ex), request_id=_head_rid(ex) or None)
        ex.fail(INTERNAL_ERROR)

    def upstream_failed(self, ex: ClientRequest, status: int, body: bytes, why: str, error: str,
                        headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        started = getattr(ex.head, "trace", None) if ex.head is not None else None
        if started is not None and started.trace is not None and started.trace.upstream is not None:
            span = started.trace.upstream
            span.set("http.response.status_code", status)
            span.end(error=f"{why} ({error})")
        self._log.info("Upstream {upstream} failed for {method} {path}: {why} ({error}){with_id}",
                       upstream=ex.upstream_label, method=ex.method,
                       path=ex.ctx.path if ex.ctx else ex.target, why=why, error=error, with_id=_rid(ex),
                       request_id=_head_rid(ex) or None)
        ex.fail(LocalResponse(status, body, headers, reason=why))

    def upstream_broke(self, ex: ClientRequest, reason: str) -> None:
        self._log.warn("Upstream {upstream} broke off the response to {method} {path}: {reason}{with_id}",
                       upstream=ex.upstream_label, method=ex.method,
                       path=ex.ctx.path if ex.ctx else ex.target, reason=reason, with_id=_rid(ex),
                       request_id=_head_rid(ex) or None)
        ex.truncated = "upstream"
        ex.abort()

    # -- accounting ------------------------------------------------------------

    def log_gateways_to(self, files: Any) -> None:
        """Write the Gateways' access lines to ``files`` (an
        ``AccessFiles``), or stop (None). While none is set, :meth:`record`
        is the class's own: a request pays nothing for Gateway access logs."""
        self.gateway_logs = files
        self._pick_record()

    def sync_tracing(self, snapshot: Snapshot | None) -> None:
        """Make the span exporters the snapshot's Gateways need (and stop
        the others). While no Gateway traces, :meth:`record` and
        :meth:`_carry_out` are the class's own: nothing is paid for tracing."""
        self.exporters.sync(snapshot.gateways if snapshot is not None else {})
        if self.exporters.sinks:
            self._carry_out = self._carry_out_traced  # type: ignore[method-assign]
        else:
            self.__dict__.pop("_carry_out", None)
        self._pick_record()

    def _pick_record(self) -> None:
        self.__dict__.pop("record", None)
        logs, traced = self.gateway_logs is not None, bool(self.exporters.sinks)
        if logs and traced:
            self.record = self._record_log_trace  # type: ignore[method-assign]
        elif logs:
            self.record = self._record_and_log  # type: ignore[method-assign]
        elif traced:
            self.record = self._record_and_trace  # type: ignore[method-assign]

    def _record_and_log(self, ex: ClientRequest) -> None:
        Gateway.record(self, ex)
        head = ex.head
        if head is not None and head.gateway is not None and head.gateway.access_logs:
            self.gateway_logs.log(ex, head, self.reactor.seconds() - ex.started)

    def _record_and_trace(self, ex: ClientRequest) -> None:
        Gateway.record(self, ex)
        head = ex.head
        if head is not None and head.gateway is not None:
            started = getattr(head, "trace", None)
            if started is None or started.trace is not None:  # an unsampled request: nothing more
                self._trace(ex)

    def _record_log_trace(self, ex: ClientRequest) -> None:
        self._record_and_log(ex)
        self._trace(ex)

    def _trace(self, ex: ClientRequest) -> None:
        head = ex.head
        view = head.gateway if head is not None else None
        if view is None or view.tracing is None:
            return
        sink = self.exporters.sinks.get(view.key)
        if sink is None:
            return
        try:
            finish_trace(ex, view.tracing, sink)
        except Exception:
            self._log.failure("Recording the spans of {method} {uri} failed", method=ex.method, uri=ex.target)

    def record(self, ex: ClientRequest) -> None:
        """Once per exchange, as it enters a final phase."""
        self.inflight -= 1
        ctx = ex.ctx
        status = ex.status
        duration = self.reactor.seconds() - ex.started
        if self.metrics is not None:
            self.metrics.request(ctx, status, duration, ex.protocol)
        access = self.access_log
        if access is not None:
            if ctx is not None:
                principal = ctx.principal
                if principal.__class__ is not str:  # None, or a plugin's non-str
                    principal = "-" if principal is None else str(principal)
                access.request(ctx.client_address, ctx.method, ctx.path, status, ctx.virtual_service,
                               ctx.route or "-", ex.upstream_label or "-", ctx.decided_by or "-",
                               principal or "-", duration, _PROTOCOLS.get(ex.protocol) or _text(ex.protocol),
                               ex.truncated, ctx.request_id or "")
            else:
                access.request(ex.proto.peer_host or "-",
                               ex.method.decode("latin-1") if ex.method else "-",
                               (ex.target or b"").decode("latin-1")[:200], status, "-", "-",
                               ex.upstream_label or "-", "-", "-", duration,
                               _PROTOCOLS.get(ex.protocol) or _text(ex.protocol), ex.truncated, _head_rid(ex))
        if self._finished_hook is not None and ctx is not None:
            try:
                self._finished_hook(ctx=ctx, status=status)
            except Exception:
                self._log.failure("A twistgw_request_finished hook failed")


@implementer(IProtocolNegotiationFactory)
class GatewayFactory(Factory):
    """Builds a :class:`GatewayProtocol` per client connection, which
    becomes an HTTP/2 connection when the client speaks HTTP/2 (ALPN ``h2``
    on TLS, the preface on a plain connection) and ``http2`` allows it;
    offers ``h2`` and ``http/1.1`` by ALPN on TLS listeners (``http/1.1``
    only without ``http2``)."""

    noisy = False

    def __init__(self, gateway: Gateway, timeout: float | None = IDLE_TIMEOUT,
                 head_timeout: float = HEAD_TIMEOUT, gateway_key: str | None = None,
                 http2: Http2Options | None = HTTP2_DEFAULT) -> None:
        self.gateway = gateway
        #: HTTP/2's limits on this listener; None: HTTP/1.1 only (``--no-http2``,
        #: a Gateway's ``codecType: HTTP1``)
        self.http2 = http2
        #: ``namespace/name`` of the Gloo Gateway this listener serves (None:
        #: a ``--listen`` endpoint, serving every virtual service)
        self.gateway_key = gateway_key
        self.timeOut = timeout
        self.head_timeout = head_timeout
        #: open client connections, so that stopping can close them (an
        #: HTTP/2 one takes the place of the protocol that read its preface)
        self.connections: set[GatewayProtocol | H2ServerConnection] = set()
        self._all_closed: list[Deferred[None]] = []

    #: read a PROXY protocol header first (a plain Gateway's
    #: ``useProxyProto``; on a TLS listener the header comes before the
    #: handshake, and the TLS endpoint reads it: ``SniServerEndpoint.proxy_protocol``)
    proxy_protocol = False

    def buildProtocol(self, addr: Any) -> Any:
        p = GatewayProtocol(self.gateway)
        p.factory = self
        p.head_timeout = self.head_timeout
        p.gateway_key = self.gateway_key
        p.idle_timeout = self.timeOut
        p.http2 = self.http2
        self.connections.add(p)
        if not self.proxy_protocol:
            return p
        # connected once its header is read, within the head timeout
        return ProxyHeaderReader(p, self.gateway.reactor, self.head_timeout)

    def drain(self, timeout: float) -> Deferred[None]:
        """Close idle connections now and the others once the requests they
        sent are answered; after ``timeout`` seconds, drop what is left
        (a Gateway's listener that a reload removed). Fires once every
        connection is gone."""
        d = self._all_gone()
        if d.called:
            return d
        for proto in list(self.connections):
            proto.finish_and_close()
        late = self.gateway.reactor.callLater(timeout, self.close_connections)

        def done(result: None) -> None:
            if late.active():
                late.cancel()
            return result
        return d.addCallback(done)

    def goaway(self) -> None:
        """Tell every HTTP/2 client that no new stream is taken (GOAWAY,
        NO_ERROR): the gateway stops. Their open streams are answered
        meanwhile; HTTP/1.1 connections are closed as before, once the
        drain is over."""
        for proto in list(self.connections):
            if isinstance(proto, H2ServerConnection):
                proto.finish_and_close()

    def _all_gone(self) -> Deferred[None]:
        """Fires once every client connection is gone (at once if none is left)."""
        d: Deferred[None] = Deferred()
        if self.connections:
            self._all_closed.append(d)
        else:
            d.callback(None)
        return d

    def connection_closed(self, proto: GatewayProtocol | H2ServerConnection) -> None:
        self.connections.discard(proto)
        if not self.connections:
            waiting, self._all_closed = self._all_closed, []
            for d in waiting:
                d.callback(None)

    def close_connections(self) -> Deferred[None]:
        """Close every client connection now (idle keep-alive ones and any
        still in flight) and stop their timers. The Deferred fires once
        every connection is gone."""
        d = self._all_gone()
        if d.called:
            return d
        for proto in list(self.connections):
            if not proto.abort():
                self.connection_closed(proto)
        return d

    def acceptableProtocols(self) -> list[bytes]:
        return [H2, HTTP11] if self.http2 is not None else [HTTP11]
