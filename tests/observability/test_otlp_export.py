"""The span exporter (``twistgw.tracing.export``) against a real OTLP receiver
(``support.otlp``: opentelemetry-proto's messages behind an http.server and a
grpcio server on loopback), over OTLP/HTTP and OTLP/gRPC, plain and TLS; and
against collectors that are down, slow, erroring or blackholed, where
``submit`` (the reactor's side) must stay O(1) and memory bounded."""

from __future__ import annotations

import os
import threading
import time
import tracemalloc

import pytest
from attrs import evolve as attrs_evolve
from prometheus_client import REGISTRY

from support.otlp import OtlpReceiver, blackhole
from support.pki import TestCA
from support.ports import free_port
from twistgw.tls import TLSSettingsError
from twistgw.tracing.export import CollectorTarget, SpanExporter
from twistgw.tracing.span import KIND_SERVER, Span

PROTOCOLS = ["http", "grpc"]
RESOURCE = {"service.name": "gateway", "service.instance.id": "gw-1"}


def make_span(i: int = 0, **kw) -> Span:
    now = time.time_ns()
    fields = dict(trace_id=os.urandom(16), span_id=os.urandom(8), parent_span_id=b"", name=f"GET /r/{i}",
                  kind=KIND_SERVER, start_ns=now, end_ns=now + 1000, attributes={"i": i, "route": "r"})
    fields.update(kw)
    return Span(**fields)


class Log:
    """The exporter's ``log``: what it said, from its thread."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.cond = threading.Condition()

    def __call__(self, line: str) -> None:
        with self.cond:
            self.lines.append(line)
            self.cond.notify_all()

    def wait(self, n: int, timeout: float = 10.0) -> list[str]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.lines) >= n, timeout), self.lines
            return list(self.lines)


def metric(name: str, target: CollectorTarget, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, {"collector": target.label, **labels})
    return value or 0.0


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.01)


@pytest.fixture(params=PROTOCOLS)
def receiver(request):
    with OtlpReceiver(protocol=request.param) as rx:
        yield rx


def exporter_for(target: CollectorTarget, **kw) -> SpanExporter:
    kw.setdefault("delay_s", 0.05)
    kw.setdefault("log", Log())
    return SpanExporter(target, resource=RESOURCE, **kw)


def test_spans_reach_the_collector_whole(receiver: OtlpReceiver) -> None:
    target = receiver.target(headers=(("X-Tenant", "t1"),))
    exporter = exporter_for(target)
    sent = [make_span(i, parent_span_id=b"p" * 8, trace_state="k=v", status_code=2, status_message="é")
            for i in range(5)]
    before = metric("twistgw_spans_exported_total", target)
    for span in sent:
        exporter.submit(span)
    got = receiver.wait_spans(5)
    exporter.stop()
    assert [(s.trace_id, s.span_id, s.name, s.parent_span_id, s.trace_state, s.status.message)
            for s in got] == [(s.trace_id, s.span_id, s.name, b"p" * 8, "k=v", "é") for s in sent]
    request, headers, path = receiver.requests[0]
    resource = {kv.key: kv.value.string_value for kv in request.resource_spans[0].resource.attributes}
    assert resource == RESOURCE
    assert request.resource_spans[0].scope_spans[0].scope.name == "twistgw"
    assert headers["x-tenant"] == "t1"
    if receiver.protocol == "http":
        assert path == "/v1/traces"
        assert headers["content-type"] == "application/x-protobuf"
    assert metric("twistgw_spans_exported_total", target) - before == 5


def test_batches_hold_at_most_max_batch(receiver: OtlpReceiver) -> None:
    exporter = exporter_for(receiver.target(), max_batch=10, delay_s=30.0)
    for i in range(35):
        exporter.submit(make_span(i))
    # max_batch reached wakes the thread: the first three batches go without waiting delay_s
    receiver.wait_spans(30, timeout=5)
    exporter.stop()  # and the rest is flushed
    sizes = [len(r.resource_spans[0].scope_spans[0].spans) for r, _, _ in receiver.requests]
    assert sizes == [10, 10, 10, 5]
    assert [s.attributes[0].value.int_value for s in receiver.spans()] == list(range(35))


def test_a_partial_batch_waits_delay_s(receiver: OtlpReceiver) -> None:
    exporter = exporter_for(receiver.target(), delay_s=0.3)
    t0 = time.monotonic()
    exporter.submit(make_span())
    receiver.wait_spans(1, timeout=5)
    assert time.monotonic() - t0 >= 0.2  # not before the delay: spans are batched
    exporter.stop()


def test_stop_flushes_what_is_queued(receiver: OtlpReceiver) -> None:
    exporter = exporter_for(receiver.target(), delay_s=3600)
    for i in range(7):
        exporter.submit(make_span(i))
    t0 = time.monotonic()
    exporter.stop(timeout_s=5)
    assert time.monotonic() - t0 < 3
    assert len(receiver.spans()) == 7
    target = receiver.target()
    before = metric("twistgw_spans_dropped_total", target, reason="stopped")
    exporter.submit(make_span())  # after stop: dropped, counted, never raised
    assert metric("twistgw_spans_dropped_total", target, reason="stopped") - before == 1


def test_a_full_queue_drops_and_counts(receiver: OtlpReceiver) -> None:
    receiver.mode = "slow"
    receiver.delay = 1.0
    target = receiver.target()
    exporter = exporter_for(target, max_queue=20, max_batch=5, delay_s=0.01)
    before = metric("twistgw_spans_dropped_total", target, reason="queue_full")
    exporter.submit(make_span())
    receiver.wait_attempts(1)  # the thread is held by the slow collector now
    for i in range(100):
        exporter.submit(make_span(i))
    assert exporter.queued == 20
    assert metric("twistgw_spans_dropped_total", target, reason="queue_full") - before == 80
    receiver.mode = "normal"
    exporter.stop(timeout_s=10)
    assert len(receiver.spans()) == 21


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tls_verified_by_name(protocol: str) -> None:
    ca = TestCA()
    with OtlpReceiver(protocol=protocol, tls=ca.issue("collector.test", dns=["collector.test"])) as rx:
        exporter = exporter_for(rx.target(server_name="collector.test", ca_pem=ca.pem))
        exporter.submit(make_span())
        assert len(rx.wait_spans(1)) == 1
        exporter.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tls_name_mismatch_refused(protocol: str) -> None:
    ca = TestCA()
    with OtlpReceiver(protocol=protocol, tls=ca.issue("other.test", dns=["other.test"])) as rx:
        target = rx.target(server_name="collector.test", ca_pem=ca.pem, timeout_s=1.0)
        log = Log()
        exporter = exporter_for(target, log=log)
        before = metric("twistgw_spans_dropped_total", target, reason="export_failed")
        exporter.submit(make_span())
        line = log.wait(1)[0]
        exporter.stop()
        assert rx.attempts == 0  # nothing was sent to a server of the wrong name
        assert metric("twistgw_spans_dropped_total", target, reason="export_failed") - before == 1
        assert "fails" in line
        if protocol == "http":
            assert "names other.test, not collector.test" in line


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tls_untrusted_ca_refused(protocol: str) -> None:
    ca, other = TestCA(), TestCA("another CA")
    with OtlpReceiver(protocol=protocol, tls=ca.issue("collector.test", dns=["collector.test"])) as rx:
        log = Log()
        exporter = exporter_for(rx.target(server_name="collector.test", ca_pem=other.pem, timeout_s=1.0), log=log)
        exporter.submit(make_span())
        log.wait(1)
        exporter.stop()
        assert rx.attempts == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("how", ["field", "header"])
def test_the_authority_is_sent_and_verified(protocol: str, how: str) -> None:
    """Gloo's ``grpcService.authority``: the ``:authority`` (HTTP: ``Host``) of
    every export, and without a ``server_name`` the name the certificate must
    carry; a ``:authority`` header is the same, and is not sent as metadata."""
    ca = TestCA()
    with OtlpReceiver(protocol=protocol, tls=ca.issue("collector.test", dns=["collector.test"])) as rx:
        kw = {"authority": "collector.test"} if how == "field" else \
            {"headers": ((":authority", "collector.test"), ("x-tenant", "t"))}
        exporter = exporter_for(rx.target(ca_pem=ca.pem, **kw))
        exporter.submit(make_span())
        rx.wait_spans(1)
        exporter.stop()
        headers = rx.requests[0][1]
        assert not any(k.startswith(":") for k in headers)
        if protocol == "http":
            assert headers["host"] == "collector.test"
        else:
            assert rx.authorities == ["collector.test"]
        if how == "header":
            assert headers["x-tenant"] == "t"


@pytest.mark.parametrize("how", ["field", "header"])
def test_the_grpc_authority_reaches_the_collector_without_tls(how: str) -> None:
    """Without TLS nothing checks a name: the collector sees the configured
    ``:authority`` (Gloo's ``grpcService.authority``) and not the address
    dialled; without one, grpcio's default (the target ``host:port``)."""
    with OtlpReceiver(protocol="grpc") as rx:
        kw = {"authority": "otel.example:4317"} if how == "field" else \
            {"headers": ((":authority", "otel.example:4317"),)}
        exporter = exporter_for(rx.target(**kw))
        exporter.submit(make_span())
        rx.wait_spans(1)
        exporter.stop()
        plain = exporter_for(rx.target())
        plain.submit(make_span())
        rx.wait_spans(2)
        plain.stop()
    assert rx.authorities == ["otel.example:4317", f"127.0.0.1:{rx.port}"]


def test_the_verified_name() -> None:
    t = CollectorTarget("grpc", "10.0.0.1", 4317)
    assert t.verified_name() == "10.0.0.1"
    assert attrs_evolve(t, authority="c.example:4317").verified_name() == "c.example"
    assert attrs_evolve(t, authority="[::1]:4317").verified_name() == "::1"
    assert attrs_evolve(t, headers=((":authority", "h.example"),)).verified_name() == "h.example"
    assert attrs_evolve(t, authority="c.example", server_name="s.example").verified_name() == "s.example"


def test_unusable_settings_refused_when_made() -> None:
    with pytest.raises(ValueError, match="unknown OTLP protocol"):
        SpanExporter(CollectorTarget("zipkin", "127.0.0.1", 1), resource={})
    with pytest.raises(TLSSettingsError):
        SpanExporter(CollectorTarget("http", "127.0.0.1", 1, tls=True, ca_pem=b"not a certificate"), resource={})


def test_errors_are_retried_then_dropped_and_logged_once(receiver: OtlpReceiver) -> None:
    receiver.mode = "error"
    target = receiver.target()
    log = Log()
    exporter = exporter_for(target, log=log)
    failures = metric("twistgw_span_export_failures_total", target)
    exporter.submit(make_span())
    lines = log.wait(1)
    assert receiver.attempts == 4  # ATTEMPTS: a retryable 503 / UNAVAILABLE is tried again
    assert "fails" in lines[0] and ("503" in lines[0] or "UNAVAILABLE" in lines[0])
    for k in range(1, 6):  # while it fails: one attempt per batch, and not a word more
        exporter.submit(make_span())
        receiver.wait_attempts(4 + k)
    assert receiver.attempts == 9
    assert len(log.lines) == 1
    assert metric("twistgw_span_export_failures_total", target) - failures >= 5
    receiver.mode = "normal"
    exporter.submit(make_span(42))
    lines = log.wait(2)
    assert "works again" in lines[1]
    assert receiver.spans()[-1].attributes[0].value.int_value == 42
    exporter.stop()
    assert len(log.lines) == 2


def test_a_partial_success_counts_the_rejected_spans_and_says_so_once(receiver: OtlpReceiver) -> None:
    receiver.mode, receiver.rejected = "partial", 2
    target = receiver.target()
    log = Log()
    exporter = exporter_for(target, log=log, delay_s=3600, max_batch=5)
    exported = metric("twistgw_spans_exported_total", target)
    rejected = metric("twistgw_spans_dropped_total", target, reason="rejected")
    for i in range(10):  # two batches of five, each with two rejected
        exporter.submit(make_span(i))
    receiver.wait_attempts(2)
    exporter.stop()
    assert receiver.attempts == 2  # a partial success is not retried
    assert metric("twistgw_spans_exported_total", target) - exported == 6
    assert metric("twistgw_spans_dropped_total", target, reason="rejected") - rejected == 4
    assert len(log.lines) == 1 and "rejected 2 of 5 spans (span too old)" in log.lines[0]


def test_a_client_error_is_not_retried() -> None:
    with OtlpReceiver(protocol="http") as rx:
        rx.mode, rx.error_status = "error", 400
        log = Log()
        exporter = exporter_for(rx.target(), log=log)
        exporter.submit(make_span())
        assert "HTTP 400" in log.wait(1)[0]
        exporter.stop()
        assert rx.attempts == 1


def test_down_then_back_logged_once_each(receiver: OtlpReceiver) -> None:
    receiver.stop()
    target = receiver.target(timeout_s=1.0)
    log = Log()
    exporter = exporter_for(target, log=log)
    failed = metric("twistgw_spans_dropped_total", target, reason="export_failed")
    exporter.submit(make_span(0))
    log.wait(1)
    for i in (1, 2):  # two more batches, failing: not a word more
        exporter.submit(make_span(i))
        wait_for(lambda n=i + 1: metric("twistgw_spans_dropped_total", target, reason="export_failed") - failed == n)
    assert len(log.lines) == 1, log.lines
    receiver.start()
    deadline = time.monotonic() + 15
    while not receiver.spans() and time.monotonic() < deadline:  # gRPC reconnects with its own backoff
        exporter.submit(make_span(99))
        time.sleep(0.2)
    assert receiver.spans()
    lines = log.wait(2)
    exporter.stop()
    assert "works again" in lines[1] and len(log.lines) == 2


def test_a_slow_collector_times_out(receiver: OtlpReceiver) -> None:
    receiver.mode, receiver.delay = "slow", 3.0
    log = Log()
    exporter = exporter_for(receiver.target(timeout_s=0.3), log=log)
    t0 = time.monotonic()
    exporter.submit(make_span())
    line = log.wait(1, timeout=15)[0]
    # four attempts of 0.3 s and their backoff: well under the collector's 4 × 3 s
    assert time.monotonic() - t0 < 6
    assert "timed out" in line.lower() or "DEADLINE_EXCEEDED" in line
    exporter.stop(timeout_s=1)


def test_huge_answers_are_not_read_whole(receiver: OtlpReceiver) -> None:
    receiver.mode = "huge"
    target = receiver.target()
    exporter = exporter_for(target)
    exporter.submit(make_span())
    receiver.wait_attempts(1)
    exporter.stop()
    if receiver.protocol == "http":  # a 10 MiB body: 64 KiB read, the connection closed, the spans accepted
        assert metric("twistgw_spans_exported_total", target) >= 1
    # gRPC: a 1 MiB message is refused by grpc.max_receive_message_length (RESOURCE_EXHAUSTED, not retried)
    else:
        assert receiver.attempts == 1


@pytest.mark.slow
def test_submit_stays_o1_against_a_blackholed_collector() -> None:
    """100,000 spans at a collector that accepts the connection and never
    answers: submit returns at once for each, and memory stays bounded by
    the queue, while the thread waits on its timeout."""
    with blackhole() as port:
        target = CollectorTarget("http", "127.0.0.1", port, timeout_s=5.0)
        exporter = exporter_for(target, max_queue=2048, delay_s=0.01)
        spans = [make_span(i) for i in range(1000)]
        tracemalloc.start()
        try:
            exporter.submit(spans[0])
            wait_for(lambda: exporter.queued == 0)  # the thread took it: it is in its first, blackholed, attempt
            start = tracemalloc.get_traced_memory()[0]
            t0 = time.thread_time()
            worst = 0.0
            for i in range(100_000):
                s0 = time.perf_counter()
                exporter.submit(spans[i % 1000])
                worst = max(worst, time.perf_counter() - s0)
            cpu = time.thread_time() - t0  # this thread's CPU: a loaded machine does not inflate it
            grown = tracemalloc.get_traced_memory()[0] - start
        finally:
            tracemalloc.stop()
        assert exporter.queued <= 2048
        assert cpu < 2.0, cpu  # ~1 µs each with tracemalloc on: a submit that did work per queued span costs more
        assert worst < 0.5, worst  # a preempted submit, at worst; a blocking one would wait the 5 s timeout
        assert grown < 1 << 20, grown  # the queue of references, not 100k spans
        assert metric("twistgw_spans_dropped_total", target, reason="queue_full") >= 100_000 - 2048
        t0 = time.monotonic()
        exporter.stop(timeout_s=1.0)
        assert time.monotonic() - t0 < 2.5  # stop is bounded even when the collector never answers


def test_a_span_that_cannot_be_encoded_is_dropped_alone(receiver: OtlpReceiver) -> None:
    target = receiver.target()
    exporter = exporter_for(target, delay_s=3600)
    before = metric("twistgw_spans_dropped_total", target, reason="invalid")
    exporter.submit(make_span(1))
    exporter.submit(make_span(2, trace_id=None))  # not what Span says: a bug of its maker
    exporter.submit(make_span(3))
    exporter.stop()
    assert [s.attributes[0].value.int_value for s in receiver.spans()] == [1, 3]
    assert metric("twistgw_spans_dropped_total", target, reason="invalid") - before == 1


def test_down_collector_port_never_listened() -> None:
    """A port with no listener at all (connection refused): dropped, counted, said once."""
    target = CollectorTarget("http", "127.0.0.1", free_port(), timeout_s=1.0)
    log = Log()
    exporter = exporter_for(target, log=log)
    before = metric("twistgw_spans_dropped_total", target, reason="export_failed")
    for i in range(3):
        exporter.submit(make_span(i))
    log.wait(1)
    exporter.stop(timeout_s=1)
    assert metric("twistgw_spans_dropped_total", target, reason="export_failed") - before == 3
    assert "ConnectionRefusedError" in log.lines[0]
