"""Prometheus metrics (prometheus-client), with label children cached so the
per-request cost is a dict lookup and an increment."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.requests_total = Counter(
            "twistgw_requests", "Requests answered, by virtual service, route, status and decision",
            ["virtual_service", "route", "status", "decision"], registry=registry)
        self.request_duration = Histogram(
            "twistgw_request_duration_seconds", "Time from request head to the end of the response",
            ["virtual_service", "route"], buckets=_BUCKETS, registry=registry)
        self.upstream_duration = Histogram(
            "twistgw_upstream_duration_seconds", "Time from forwarding to the upstream's response head",
            ["virtual_service", "route"], buckets=_BUCKETS, registry=registry)
        self.reloads_total = Counter(
            "twistgw_config_reloads", "Configuration loads, by result", ["result"], registry=registry)
        self.config_generation = Gauge(
            "twistgw_config_generation", "Generation of the configuration now serving", registry=registry)
        self.config_loaded_at = Gauge(
            "twistgw_config_last_success_timestamp_seconds", "When the serving configuration was loaded",
            registry=registry)
        self._req_children: dict[tuple[str, str, int, str], Any] = {}
        self._dur_children: dict[tuple[str, str], Any] = {}
        self._up_children: dict[tuple[str, str], Any] = {}

    def request(self, ctx: Any, status: int, duration: float) -> None:
        vs = ctx.virtual_service if ctx is not None else ""
        route = ctx.route if ctx is not None else ""
        if ctx is not None and ctx.decided_by:
            decision = "denied" if status < 500 else "error"
        elif ctx is None or not route:
            decision = "rejected"  # bad request, no virtual service or route
        else:
            decision = "allowed"
        key = (vs, route, status, decision)
        child = self._req_children.get(key)
        if child is None:
            child = self._req_children[key] = self.requests_total.labels(vs, route, str(status), decision)
        child.inc()
        dkey = (vs, route)
        dchild = self._dur_children.get(dkey)
        if dchild is None:
            dchild = self._dur_children[dkey] = self.request_duration.labels(vs, route)
        dchild.observe(duration)

    def upstream_latency(self, request: Any, seconds: float) -> None:
        ctx = request.ctx
        key = (ctx.virtual_service, ctx.route) if ctx is not None else ("", "")
        child = self._up_children.get(key)
        if child is None:
            child = self._up_children[key] = self.upstream_duration.labels(*key)
        child.observe(seconds)

    def reload(self, ok: bool, generation: int | None = None, at: float | None = None) -> None:
        self.reloads_total.labels("success" if ok else "failure").inc()
        if ok and generation is not None:
            self.config_generation.set(generation)
            if at is not None:
                self.config_loaded_at.set(at)
