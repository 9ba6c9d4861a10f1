"""Prometheus metrics (prometheus-client).

The three per-request series (``twistgw_requests_total`` and the two
duration histograms) cost a dict lookup and a few integer additions per
request: they are plain counts in this process, handed to prometheus-client
by a custom collector (its documented ``collect()`` API) when ``/metrics``
is scraped. A prometheus-client ``Counter``/``Histogram`` child takes a lock
per increment and scans its buckets in Python, which was about 4 µs of every
request (docs/performance.md). With ``--workers`` (prometheus-client's
multiprocess mode, where the supervisor reads every worker's values from
shared files) they are ordinary ``Counter``/``Histogram`` children, with the
children cached so the per-request cost is a dict lookup and an increment.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from twistgw.api.counters import multiprocess

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_LE = [floatToGoString(b) for b in _BUCKETS] + ["+Inf"]

_REQUESTS = ("twistgw_requests", "Requests answered, by virtual service, route, status and decision",
             ["virtual_service", "route", "status", "decision"])
_REQUEST_DURATION = ("twistgw_request_duration_seconds", "Time from request head to the end of the response",
                     ["virtual_service", "route"])
_UPSTREAM_DURATION = ("twistgw_upstream_duration_seconds",
                      "Time from forwarding to the upstream's response head", ["virtual_service", "route"])
_BY_PROTOCOL = ("twistgw_requests_by_protocol", "Requests answered, by the protocol the client spoke"
                " (HTTP/1.0, HTTP/1.1, HTTP/2)", ["protocol"])


class _Histogram:
    """One label set's observations: a count per bucket (not cumulative;
    the last is above every bound) and their sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: the first bound >= value, as Prometheus's le ("less or equal")
        self.counts[bisect_left(_BUCKETS, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for le, n in zip(_LE, self.counts, strict=True):
            running += n
            out.append((le, running))
        return out


class _Children:
    """The per-request series as plain Python numbers; a prometheus-client
    collector reading them at scrape time."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, int, str], int] = {}
        self.by_protocol: dict[bytes, int] = {}
        self.request_duration: dict[tuple[str, str], _Histogram] = {}
        self.upstream_duration: dict[tuple[str, str], _Histogram] = {}


class _Collector(Collector):
    def __init__(self, children: _Children) -> None:
        self.children = children

    def describe(self) -> Iterator[Metric]:
        # the names, for the registry's duplicate check (no samples)
        yield CounterMetricFamily(*_REQUESTS[:2], labels=_REQUESTS[2])
        yield CounterMetricFamily(*_BY_PROTOCOL[:2], labels=_BY_PROTOCOL[2])
        yield HistogramMetricFamily(*_REQUEST_DURATION[:2], labels=_REQUEST_DURATION[2])
        yield HistogramMetricFamily(*_UPSTREAM_DURATION[:2], labels=_UPSTREAM_DURATION[2])

    def collect(self) -> Iterator[Metric]:
        c = self.children
        requests = CounterMetricFamily(*_REQUESTS[:2], labels=_REQUESTS[2])
        for (vs, route, status, decision), n in list(c.requests.items()):
            requests.add_metric([vs, route, str(status), decision], n)
        yield requests
        protocols = CounterMetricFamily(*_BY_PROTOCOL[:2], labels=_BY_PROTOCOL[2])
        for protocol, n in list(c.by_protocol.items()):
            protocols.add_metric([protocol.decode("latin-1")], n)
        yield protocols
        for spec, series in ((_REQUEST_DURATION, c.request_duration), (_UPSTREAM_DURATION, c.upstream_duration)):
            family = HistogramMetricFamily(*spec[:2], labels=spec[2])
            for key, h in list(series.items()):
                family.add_metric(list(key), h.buckets(), h.total)
            yield family


class Metrics:
    """The core's metrics. ``fast`` (the default outside ``--workers``):
    the per-request series are plain counts read by a collector at scrape
    time; otherwise prometheus-client children (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY, fast: bool | None = None) -> None:
        self.registry = registry
        self.fast = not multiprocess() if fast is None else fast
        if self.fast:
            self._children = _Children()
            registry.register(_Collector(self._children))
        else:
            self.requests_total = Counter(*_REQUESTS, registry=registry)
            self.by_protocol = Counter(*_BY_PROTOCOL, registry=registry)
            self.request_duration = Histogram(*_REQUEST_DURATION, buckets=_BUCKETS, registry=registry)
            self.upstream_duration = Histogram(*_UPSTREAM_DURATION, buckets=_BUCKETS, registry=registry)
        self.reloads_total = Counter(
            "twistgw_config_reloads", "Configuration loads, by result", ["result"], registry=registry)
        self.config_generation = Gauge(
            "twistgw_config_generation", "Generation of the configuration now serving", registry=registry)
        self.http2_connections = Counter(
            "twistgw_http2_connections", "Client connections that spoke HTTP/2 (ALPN h2, or h2c prior knowledge)",
            registry=registry)
        self.http2_refusals = Counter(
            "twistgw_http2_refusals", "HTTP/2 connections ended with an error GOAWAY, and streams reset, by the"
            " gateway, by reason (flood, rapid_reset, control_flood, protocol_error, head_timeout, stream_stalled)",
            ["reason"], registry=registry)
        self.config_loaded_at = Gauge(
            "twistgw_config_last_success_timestamp_seconds", "When the serving configuration was loaded",
            registry=registry)
        self._req_children: dict[tuple[str, str, int, str], Any] = {}
        self._dur_children: dict[tuple[str, str], Any] = {}
        self._up_children: dict[tuple[str, str], Any] = {}
        self._protocol_children: dict[bytes, Any] = {}
        if self.fast:
            self._protocol_children = self._children.by_protocol
            self._req_children = self._children.requests
            self._dur_children = self._children.request_duration
            self._up_children = self._children.upstream_duration

    def request(self, ctx: Any, status: int, duration: float, protocol: bytes = b"HTTP/1.1") -> None:
        vs = ctx.virtual_service if ctx is not None else ""
        route = ctx.route if ctx is not None else ""
        if ctx is not None and ctx.decided_by:
            decision = "denied" if status < 500 else "error"
        elif ctx is None or not route:
            decision = "rejected"  # bad request, no virtual service or route
        else:
            decision = "allowed"
        key = (vs, route, status, decision)
        dkey = (vs, route)
        if self.fast:
            counts = self._req_children
            counts[key] = counts.get(key, 0) + 1
            by = self._protocol_children
            by[protocol] = by.get(protocol, 0) + 1
            dchild = self._dur_children.get(dkey)
            if dchild is None:
                dchild = self._dur_children[dkey] = _Histogram()
            dchild.observe(duration)
            return
        child = self._req_children.get(key)
        if child is None:
            child = self._req_children[key] = self.requests_total.labels(vs, route, str(status), decision)
        child.inc()
        pchild = self._protocol_children.get(protocol)
        if pchild is None:
            pchild = self._protocol_children[protocol] = self.by_protocol.labels(protocol.decode("latin-1"))
        pchild.inc()
        dchild = self._dur_children.get(dkey)
        if dchild is None:
            dchild = self._dur_children[dkey] = self.request_duration.labels(vs, route)
        dchild.observe(duration)

    def upstream_latency(self, request: Any, seconds: float) -> None:
        ctx = request.ctx
        key = (ctx.virtual_service, ctx.route) if ctx is not None else ("", "")
        child = self._up_children.get(key)
        if child is None:
            child = self._up_children[key] = (
                _Histogram() if self.fast else self.upstream_duration.labels(*key))
        child.observe(seconds)

    def http2_connection(self) -> None:
        """A client connection became HTTP/2."""
        self.http2_connections.inc()

    def http2_refused(self, reason: str) -> None:
        """An HTTP/2 connection or stream the gateway ended for ``reason``."""
        self.http2_refusals.labels(reason).inc()

    def reload(self, ok: bool, generation: int | None = None, at: float | None = None) -> None:
        self.reloads_total.labels("success" if ok else "failure").inc()
        if ok and generation is not None:
            self.config_generation.set(generation)
            if at is not None:
                self.config_loaded_at.set(at)
