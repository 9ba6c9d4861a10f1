"""The engine's part of tracing: the exporters of the serving snapshot's
Gateways (one per collector, kept across reloads while equal), the upstream
request's client span, and the finished request's spans, with their
attributes made only now, at the end (OpenTelemetry's HTTP semantic
conventions, Envoy's ``guid:x-request-id``). What is decided (sampling, ids,
headers) is the core's (``core/tracing.py``).
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.logger import Logger

from twistgw.core.tracing import GatewayTracing, Started, start_upstream
from twistgw.tracing.export import SpanExporter
from twistgw.tracing.span import KIND_SERVER, STATUS_ERROR, STATUS_UNSET

__all__ = ["Exporters", "finish", "upstream_started"]

_log = Logger(namespace="twistgw.tracing")

#: the protocol as ``network.protocol.version`` writes it
_VERSIONS = {b"HTTP/1.1": "1.1", b"HTTP/2": "2", b"HTTP/1.0": "1.0"}

ExporterFactory = Callable[..., Any]


class Exporters:
    """The exporters of the serving snapshot's Gateways, by Gateway key."""

    def __init__(self, factory: ExporterFactory | None = None, reactor: Any = None) -> None:
        #: makes an exporter: ``factory(target, resource=..., max_queue=...)``
        #: (:class:`~twistgw.tracing.export.SpanExporter`'s signature)
        self.factory = factory if factory is not None else self._exporter
        self.reactor = reactor
        #: exporter_key → exporter
        self._by_key: dict[Any, Any] = {}
        #: Gateway key → exporter
        self.sinks: dict[str, Any] = {}

    def _exporter(self, target: Any, **kw: Any) -> SpanExporter:
        """A :class:`SpanExporter` whose outage lines go to the gateway's log
        (from its thread, through the reactor)."""
        reactor = self.reactor
        if getattr(reactor, "callFromThread", None) is not None:
            kw["log"] = lambda line: reactor.callFromThread(_log.warn, "{line}", line=line)
        return SpanExporter(target, **kw)

    def sync(self, gateways: dict[str, Any]) -> None:
        """Make the exporters the views' tracing needs; stop the others."""
        wanted: dict[Any, GatewayTracing] = {}
        sinks: dict[str, Any] = {}
        for view in gateways.values():
            tracing = view.tracing
            if tracing is not None:
                wanted.setdefault(tracing.exporter_key, tracing)
        kept: dict[Any, Any] = {}
        for ekey, tracing in wanted.items():
            exporter = self._by_key.get(ekey)
            if exporter is None:
                exporter = self.factory(tracing.target, resource=tracing.resource, max_queue=tracing.max_queue)
            kept[ekey] = exporter
        for ekey, exporter in self._by_key.items():
            if ekey not in kept:  # a reload replaced it: what it holds is sent, off the reactor
                in_thread = getattr(self.reactor, "callInThread", None)
                if in_thread is not None:
                    in_thread(_stop, exporter, 2.0)
                else:
                    _stop(exporter)
        self._by_key = kept
        for key, view in gateways.items():
            if view.tracing is not None:
                sinks[key] = kept[view.tracing.exporter_key]
        self.sinks = sinks

    def stop(self, timeout_s: float = 2.0) -> None:
        for exporter in self._by_key.values():
            _stop(exporter, timeout_s)
        self._by_key = {}
        self.sinks = {}


def _stop(exporter: Any, timeout_s: float = 0.5) -> None:
    try:
        exporter.stop(timeout_s)
    except Exception:
        _log.failure("A span exporter failed to stop")


def upstream_started(started: Started, plan: Any, req: Any) -> None:
    """The client span of the upstream request of a sampled request."""
    trace = started.trace
    if trace is not None:
        up = plan.upstream
        span = start_upstream(trace, plan.endpoint, f"{up.namespace}/{up.name}" if up is not None else "")
        span.set("http.request.method", plan.method.decode("latin-1"))
        span.set("url.path", plan.target.split(b"?", 1)[0].decode("latin-1"))
        trace.request = req


def finish(ex: Any, tracing: GatewayTracing, sink: Any) -> None:
    """The spans of a finished request, to ``sink`` (its Gateway's exporter)."""
    head = ex.head
    started: Started | None = getattr(head, "trace", None)
    if started is None:  # not routed (400, 404): traced all the same
        started = head.trace = tracing.begin(head.headers, None)
    trace = started.trace
    if trace is None:
        return
    status = ex.status
    ctx = head.ctx
    upstream = trace.upstream
    if upstream is not None:
        req = trace.request
        tries = getattr(req, "tries", 0) if req is not None else 0
        upstream.set("twistgw.upstream.retries", tries)
        if upstream.status_code == STATUS_UNSET and not upstream.end_ns:
            upstream.set("http.response.status_code", status)
            if ex.truncated == "upstream":
                upstream.end(error="the upstream broke off the response")
            else:
                upstream.end(error=f"status {status}" if status >= 500 else None)
    attributes = _attributes(ex, head, ctx, tracing, status)
    code, message = STATUS_UNSET, ""
    if status >= 500 or status == 0 or ex.truncated:
        code = STATUS_ERROR
        message = f"status {status}" if status else "no response"
        if ex.truncated:
            message = f"response truncated ({ex.truncated})"
    route = started.route
    name = route.descriptor if route is not None and route.descriptor else "ingress"
    submit = sink.submit
    for span in trace.spans(name, KIND_SERVER, attributes, code, message):
        submit(span)


def _attributes(ex: Any, head: Any, ctx: Any, tracing: GatewayTracing, status: int) -> dict[str, Any]:
    """The server span's attributes (OpenTelemetry's HTTP server conventions,
    the route, the auth chain's decision: which plugin, never a credential)."""
    headers = head.headers
    attributes: dict[str, Any] = dict(tracing.fixed_tags)
    attributes["http.request.method"] = (ex.method or b"").decode("latin-1")
    attributes["url.scheme"] = head.scheme
    attributes["http.response.status_code"] = status
    attributes["network.protocol.version"] = _VERSIONS.get(ex.protocol) or ex.protocol.decode("latin-1")
    peer = ex.proto.peer_host or ""
    attributes["network.peer.address"] = peer
    agent = headers.getRawHeaders(b"user-agent")
    if agent:
        attributes["user_agent.original"] = agent[0].decode("latin-1")[:256]
    rid = headers.getRawHeaders(b"x-request-id")
    if ctx is not None:
        rid = ctx.headers.getRawHeaders(b"x-request-id") or rid  # the gateway's own, when it made one
        attributes["url.path"] = ctx.path
        attributes["client.address"] = ctx.client_address
        attributes["server.address"] = ctx.host
        attributes["http.route"] = ctx.route
        attributes["twistgw.virtual_service"] = ctx.virtual_service
        attributes["twistgw.route"] = ctx.route
        if ctx.upstream:
            attributes["upstream_cluster"] = ctx.upstream
        runtime = head.runtime
        chain = runtime.chain if runtime is not None else ()
        if chain:
            attributes["twistgw.auth.chain"] = ",".join(step.plugin for step in chain)
        if ctx.decided_by:
            attributes["twistgw.auth.decision"] = "deny"
            attributes["twistgw.auth.decided_by"] = ctx.decided_by
        elif chain and status and status != 500:
            attributes["twistgw.auth.decision"] = "allow"
    else:
        attributes["url.path"] = (head.target or b"").split(b"?", 1)[0].decode("latin-1")[:200]
        attributes["client.address"] = head.client_address
    if rid:
        attributes["guid:x-request-id"] = rid[0].decode("latin-1")
    # tags read what goes upstream when routed: a credential a plugin consumed is gone
    tagged = ctx.headers if ctx is not None else headers
    for name, canonical in tracing.header_tags:
        values = tagged.getRawHeaders(canonical)
        if values:
            attributes[name] = b",".join(values).decode("latin-1")
    return attributes
