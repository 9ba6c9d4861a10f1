"""The core's per-request metrics: counted as plain numbers and read by a
collector at scrape time (the default), they expose exactly what
prometheus-client's own Counter and Histogram do (the ``--workers`` path),
``_created`` series aside."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import pytest

from twistgw.sdk import counter
from twistgw.runtime.metrics import _BUCKETS, Metrics, multiprocess

from support.trial import TestCase


class _Ctx:
    def __init__(self, vs: str, route: str, decided_by: str | None = None) -> None:
        self.virtual_service, self.route, self.decided_by = vs, route, decided_by


class _Request:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx


CONTEXTS = [_Ctx("default/v", "r1"), _Ctx("default/v", "r2", "jwt"), None, _Ctx('we"ird\\', "r\n")]


def exposition(fast: bool, calls: list[tuple[int, int, float]]) -> str:
    registry = CollectorRegistry()
    metrics = Metrics(registry, fast=fast)
    for which, status, seconds in calls:
        ctx = CONTEXTS[which]
        metrics.request(ctx, status, seconds)
        metrics.upstream_latency(_Request(ctx), seconds / 2)
    metrics.reload(True, 3, 1234.0)
    metrics.reload(False)
    text = generate_latest(registry).decode()
    return "\n".join(line for line in text.splitlines() if "_created" not in line)


_CALLS = st.lists(st.tuples(st.integers(0, len(CONTEXTS) - 1), st.sampled_from([200, 401, 403, 404, 503]),
                            st.one_of(st.sampled_from(_BUCKETS), st.floats(0, 20, allow_nan=False))),
                  max_size=60)


class MetricsTests(TestCase):
    @settings(max_examples=150, deadline=None)
    @given(_CALLS)
    def test_fast_path_exposes_what_prometheus_client_would(self, calls: list[tuple[int, int, float]]) -> None:
        assert exposition(True, calls) == exposition(False, calls)

    def test_counts_buckets_and_sums(self) -> None:
        rng = random.Random(7)
        calls = [(0, 200, rng.choice([0.0004, 0.0005, 0.003, 11.0])) for _ in range(200)]
        text = exposition(True, calls)
        families = {f.name: f for f in text_string_to_metric_families(text)}
        total = [s for s in families["twistgw_requests"].samples
                 if s.labels == {"virtual_service": "default/v", "route": "r1", "status": "200",
                                 "decision": "allowed"}]
        assert total and total[0].value == 200
        buckets = {s.labels["le"]: s.value for s in families["twistgw_request_duration_seconds"].samples
                   if s.name.endswith("_bucket") and s.labels["route"] == "r1"}
        at_most_half_ms = sum(1 for _, _, d in calls if d <= 0.0005)
        assert buckets["0.0005"] == at_most_half_ms  # le is "less than or equal"
        assert buckets["10.0"] == sum(1 for _, _, d in calls if d <= 10.0)
        assert buckets["+Inf"] == 200
        sums = [s.value for s in families["twistgw_request_duration_seconds"].samples
                if s.name.endswith("_sum") and s.labels["route"] == "r1"]
        assert abs(sums[0] - sum(d for _, _, d in calls)) < 1e-9

    def test_default_follows_the_multiprocess_setting(self, monkeypatch: Any) -> None:
        monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
        monkeypatch.delenv("prometheus_multiproc_dir", raising=False)
        assert not multiprocess() and Metrics(CollectorRegistry()).fast
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/nonexistent")
        assert multiprocess() and not Metrics(CollectorRegistry()).fast

    def test_one_name_cannot_be_registered_twice(self) -> None:
        registry = CollectorRegistry()
        Metrics(registry)
        try:
            Metrics(registry)
        except ValueError as exc:
            assert "twistgw_requests" in str(exc) or "Duplicated" in str(exc)
        else:
            raise AssertionError("a second Metrics on one registry was accepted")


def _plugin_exposition(fast: bool, bumps: list[tuple[str, str, int]]) -> str:
    from prometheus_client import Counter

    registry = CollectorRegistry()
    if fast:
        c = counter("twistgw_test_decisions_total", "Test decisions.", ["outcome", "why"], registry=registry)
    else:
        c = Counter("twistgw_test_decisions_total", "Test decisions.", ["outcome", "why"], registry=registry)
    for outcome, why, amount in bumps:
        c.labels(outcome, why).inc(amount)
    text = generate_latest(registry).decode()
    return "\n".join(line for line in text.splitlines() if "_created" not in line)


_LABEL = st.sampled_from(["allow", "deny", 'we"ird\\', "x\ny", ""])


class PluginCounterTests(TestCase):
    """``twistgw.counter``: what plugins bump per request."""

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.tuples(_LABEL, _LABEL, st.integers(0, 5)), max_size=30))
    def test_exposes_what_a_prometheus_client_counter_would(self, bumps: list[tuple[str, str, int]]) -> None:
        assert _plugin_exposition(True, bumps) == _plugin_exposition(False, bumps)

    def test_counts_per_label_set(self) -> None:
        registry = CollectorRegistry()
        c = counter("twistgw_test_total", "Test.", ["outcome"], registry=registry)
        allow = c.labels("allow")
        for _ in range(3):
            allow.inc()
        c.labels("deny").inc(2)
        assert c.labels("allow") is allow  # one child per label set
        assert registry.get_sample_value("twistgw_test_total", {"outcome": "allow"}) == 3
        assert registry.get_sample_value("twistgw_test_total", {"outcome": "deny"}) == 2

    def test_refuses_what_prometheus_client_refuses(self) -> None:
        c = counter("twistgw_test_total", "Test.", ["outcome"], registry=None)
        with pytest.raises(ValueError):
            c.labels("a", "b")
        with pytest.raises(ValueError):
            c.labels("a").inc(-1)
        registry = CollectorRegistry()
        counter("twistgw_test_total", "Test.", ["outcome"], registry=registry)
        with pytest.raises(ValueError):
            counter("twistgw_test_total", "Test.", ["outcome"], registry=registry)

    def test_with_workers_it_is_a_prometheus_client_counter(self, monkeypatch: Any) -> None:
        from prometheus_client import Counter

        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/nonexistent")
        assert isinstance(counter("twistgw_test_total", "Test.", ["outcome"], registry=None), Counter)
