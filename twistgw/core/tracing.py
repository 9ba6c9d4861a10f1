"""A Gateway's tracing, compiled with the snapshot, and what it decides per
request (no I/O): whether the request is sampled, the ids of its span, the
trace headers the upstream gets, and the attributes of the finished spans.

Decisions (docs/decisions.md, "Tracing"):

* an incoming W3C ``traceparent`` (else B3) that parses is continued: the
  same trace id, the gateway's span a child of the sender's, and its sampled
  flag followed, as Envoy's OpenTelemetry tracer does (no sampler: "respect
  the previous span's sampled flag"); B3 without a decision is decided here;
* otherwise Envoy's ``tracePercentages``: ``x-client-trace-id`` and
  ``clientSamplePercentage`` (a random roll), else ``randomSamplePercentage``,
  then ``overallSamplePercentage`` (both on the trace id, so one trace id
  always gets one answer), in 10000ths;
* the route's ``options.tracing.tracePercentages`` replace the Gateway's
  whole (Envoy's route tracing: an unset percentage there is 100);
* a request that is not sampled still gets a span id and sends
  ``traceparent`` with flags ``00`` (Envoy does), so the backend continues
  one trace either way.
"""

from __future__ import annotations

import os
import random
from typing import Any, Mapping

from twistgw.api.tracer import AttributeValue
from twistgw.config.tracing import ALL, ListenerTracing, RouteTracing, TracePercentages
from twistgw.tracing.export import CollectorTarget
from twistgw.tracing.propagation import (
    B3_MULTI,
    B3_SINGLE,
    LOWS,
    PARENTS,
    TRACE_HEADER_NAMES,
    format_b3,
    new_span_id,
    new_traces,
    read_incoming,
    sampling_value,
)
from twistgw.tracing.request import ChildSpan, RequestTrace
from twistgw.tracing.span import KIND_CLIENT

__all__ = ["GatewayTracing", "Started", "decide", "start_upstream"]

_roll = random.random
_bits = random.getrandbits


#: the trace headers' canonical names, as a set (``isdisjoint``: one C call per request)
_TRACE_SET = frozenset(TRACE_HEADER_NAMES)

#: the headers of trace context, removed from what goes upstream when the
#: route says ``propagate: false`` and replaced otherwise
TRACE_HEADERS = TRACE_HEADER_NAMES


def decide(p: TracePercentages, client_trace_id: bool, trace_id: int) -> bool:
    """Envoy's decision for a request without a sampled flag to follow
    (``ConnectionManagerUtility::mutateTracingRequestHeader``)."""
    value = sampling_value(trace_id)
    sampled = (client_trace_id and _roll() * 10000 < p.client) or value < p.random
    return sampled and value < p.overall


class Started:
    """A request's trace as decided: ``trace`` is the :class:`RequestTrace`
    of a sampled one (None otherwise); ``trace_id``, ``span_id`` what the
    upstream is told either way."""

    __slots__ = ("trace", "trace_id", "span_id", "parent_id", "sampled", "trace_state", "form", "route", "came")

    def __init__(self, trace_id: int, span_id: int, parent_id: int, sampled: bool, trace_state: str, form: int,
                 route: RouteTracing | None, came: bool = True) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.sampled = sampled
        self.trace_state = trace_state
        self.form = form
        self.route = route
        #: the request may carry trace headers of its own (removed before ours are written)
        self.came = came
        self.trace: RequestTrace | None = (RequestTrace(trace_id, span_id, parent_id, trace_state)
                                           if sampled else None)

    def inject(self, headers: Any) -> None:
        """Write the trace context the upstream continues (twistgw's
        ``Headers``) for a sampled request: the gateway's upstream (client)
        span as the parent (an unsampled request's were written by
        :meth:`GatewayTracing.begin`)."""
        trace = self.trace
        if trace is None:
            return
        upstream = trace.upstream
        write(headers.raw, self.trace_id, upstream.span_id if upstream is not None else self.span_id, self.sampled,
              self.trace_state, self.form, self.route, self.came)


def write(raw: dict[bytes, list[bytes]], trace_id: int, parent: int, sampled: bool, state: str, form: int,
          route: RouteTracing | None, came: bool) -> None:
    """The trace headers the upstream gets (``raw``: the headers going
    upstream): in W3C form always, in B3 too when the request came with B3
    (the same form); a client's own removed first. A route with
    ``propagate: false`` sends none (and none of the client's)."""
    if came:
        for name in TRACE_HEADERS:
            raw.pop(name, None)
    if route is not None and not route.propagate:
        return
    raw[b"Traceparent"] = [b"00-%032x-%016x-%s" % (trace_id, parent, b"01" if sampled else b"00")]
    if state:
        raw[b"Tracestate"] = [state.encode("ascii")]
    if form == B3_SINGLE:
        raw[b"B3"] = [format_b3(trace_id, parent, sampled)]
    elif form == B3_MULTI:
        raw[b"X-B3-Traceid"] = [b"%032x" % trace_id]
        raw[b"X-B3-Spanid"] = [b"%016x" % parent]
        raw[b"X-B3-Sampled"] = [b"1" if sampled else b"0"]


#: what an unsampled request keeps of its trace (its headers went upstream already)
UNSAMPLED = Started(0, 0, 0, False, "", 0, None, False)


class GatewayTracing:
    """One Gateway's tracing, compiled once per snapshot."""

    def __init__(self, settings: ListenerTracing, gateway_key: str, gateway_name: str, target: CollectorTarget,
                 environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.gateway_key = gateway_key
        self.target = target
        self.percentages = settings.percentages
        #: the OTLP resource (``service.name``: ``serviceName``, else the Gateway's name)
        self.resource = {"service.name": settings.service_name or gateway_name}
        self.max_queue = settings.max_cache_size
        env = os.environ if environ is None else environ
        fixed: dict[str, AttributeValue] = {}
        for tag, name, default in settings.environment_tags:
            value = env.get(name, default)
            if value is not None:
                fixed[tag] = value
        for tag, value in settings.literal_tags:
            fixed[tag] = value
        #: literal and environment tags, read once per load (Envoy reads the environment at start)
        self.fixed_tags = fixed
        self.header_tags = settings.request_headers

    @property
    def exporter_key(self) -> tuple[Any, ...]:
        """Equal for Gateways (and reloads) that can share one exporter."""
        return (self.target, tuple(sorted(self.resource.items())), self.max_queue)

    def begin(self, headers: Any, route: RouteTracing | None, upstream: Any = None) -> Started:
        """The trace of a request with ``headers`` (as received) on a route
        with ``route`` tracing options (None: none, or no route). When the
        request is not sampled, the trace headers are written now into
        ``upstream`` (the headers going upstream, when there are any) and
        :data:`UNSAMPLED` is returned: nothing more is done for it.

        A request without trace headers (the usual one) starts a new trace
        from :func:`~twistgw.tracing.propagation.new_traces`' block: its
        ``traceparent`` made already, its sampling value one modulo of an
        int; nothing is formatted unless it is sampled."""
        raw = getattr(headers, "raw", None)  # twistgw's Headers: canonical names
        if raw is not None and _TRACE_SET.isdisjoint(raw):  # one C call
            if not PARENTS:
                new_traces()
            parent_line = PARENTS.pop()
            value = LOWS.pop() % 10000  # sampling_value
            p = self.percentages if route is None or route.percentages is None else route.percentages
            if p is not ALL and not (value < p.overall and (value < p.random or (
                    p.client > 0 and raw.get(b"X-Client-Trace-Id") is not None and _roll() * 10000 < p.client))):
                if upstream is not None and (route is None or route.propagate):
                    upstream.raw[b"Traceparent"] = [parent_line]
                return UNSAMPLED
            return Started(int(parent_line[3:35], 16), int(parent_line[36:52], 16), 0, True, "", 0, route, False)
        incoming = read_incoming(headers)  # Twisted's Headers (explain, tests) or trace headers came
        if incoming is None:
            if not PARENTS:
                new_traces()
            parent_line = PARENTS.pop()
            LOWS.pop()
            trace_id, parent, state, form, sampled = int(parent_line[3:35], 16), 0, "", 0, None
        else:
            trace_id, parent, state, form = incoming.trace_id, incoming.span_id, incoming.trace_state, incoming.form
            sampled = incoming.sampled
        span_id = _bits(64) or new_span_id()
        if sampled is None:
            p = self.percentages if route is None or route.percentages is None else route.percentages
            if p is ALL:
                sampled = True
            else:
                value = sampling_value(trace_id)
                sampled = value < p.overall and (value < p.random or (
                    p.client > 0 and headers.getRawHeaders(b"x-client-trace-id") is not None
                    and _roll() * 10000 < p.client))
        if not sampled:
            if upstream is not None:
                write(upstream.raw, trace_id, span_id, False, state, form, route, True)
            return UNSAMPLED
        return Started(trace_id, span_id, parent, True, state, form, route, True)


def start_upstream(trace: RequestTrace, endpoint: Any, upstream: str) -> ChildSpan:
    """The client span of the upstream request, open from now."""
    span = ChildSpan(trace, f"router {upstream} egress", KIND_CLIENT,
                     {"server.address": endpoint.host, "server.port": endpoint.port,
                      "network.peer.address": endpoint.host, "network.peer.port": endpoint.port,
                      "upstream_cluster": upstream})
    trace.upstream = span
    return span
