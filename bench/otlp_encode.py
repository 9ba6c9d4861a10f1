"""Per-span cost of turning a finished span into OTLP bytes, four ways
(docs/decisions.md, "Span export: a hand-written OTLP encoder"):

  hand      twistgw.tracing.otlp (encode_span, then encode_request per batch)
  proto     opentelemetry-proto's messages (upb) filled from twistgw's Span
  sdk-enc   the SDK's own encoder (opentelemetry-exporter-otlp-proto-common's
            encode_spans) on SDK ReadableSpans, serialized
  sdk-all   the SDK path a request would take: tracer.start_span, attributes,
            end (the reactor's side) plus sdk-enc (the export thread's side)

Also the reactor side of twistgw's exporter: SpanExporter.submit.

Run: .venv/bin/python bench/otlp_encode.py  (needs opentelemetry-sdk and
opentelemetry-exporter-otlp-proto-common, which the test extra does not install).
"""

from __future__ import annotations

import os
import time

from twistgw.tracing import otlp
from twistgw.tracing.span import Span

BATCH = 512
ROUNDS = 20

ATTRS = {
    "http.request.method": "GET", "url.path": "/api/pets/123", "url.scheme": "http",
    "http.route": "/api/pets", "server.address": "api.example.com", "client.address": "127.0.0.1",
    "network.protocol.version": "1.1", "http.response.status_code": 200,
    "user_agent.original": "curl/8.5.0", "twistgw.virtual_service": "default/pets",
}


def spans(n: int) -> list[Span]:
    now = time.time_ns()
    return [Span(os.urandom(16), os.urandom(8), b"", "GET /api/pets", 2, now, now + 1500000, {**ATTRS, "url.path": f"/api/pets/{i}"})
            for i in range(n)]


def per_span(fn, n: int = BATCH) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        data = fn.prepare(n) if hasattr(fn, "prepare") else None
        t0 = time.perf_counter()
        fn(data)
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def hand(batch: list[Span]) -> bytes:
    resource = otlp.encode_resource({"service.name": "gateway"})
    return otlp.encode_request(resource, [otlp.encode_span(s) for s in batch])


hand.prepare = spans  # type: ignore[attr-defined]


def proto(batch: list[Span]) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Status
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as PSpan

    def value(v):
        if isinstance(v, bool):
            return AnyValue(bool_value=v)
        if isinstance(v, int):
            return AnyValue(int_value=v)
        if isinstance(v, float):
            return AnyValue(double_value=v)
        return AnyValue(string_value=v)

    out = []
    for s in batch:
        out.append(PSpan(trace_id=s.trace_id, span_id=s.span_id, parent_span_id=s.parent_span_id, name=s.name,
                         kind=s.kind, start_time_unix_nano=s.start_ns, end_time_unix_nano=s.end_ns,
                         attributes=[KeyValue(key=k, value=value(v)) for k, v in s.attributes.items()],
                         status=Status(code=s.status_code, message=s.status_message), flags=s.flags))
    req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=Resource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value="gateway"))]),
        scope_spans=[ScopeSpans(scope=InstrumentationScope(name="twistgw"), spans=out)])])
    return req.SerializeToString()


proto.prepare = spans  # type: ignore[attr-defined]


def _sdk():
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Keep(SpanExporter):
        def __init__(self):
            self.spans = []

        def export(self, spans):
            self.spans.extend(spans)
            return SpanExportResult.SUCCESS

    keep = Keep()
    provider = TracerProvider(resource=Resource.create({"service.name": "gateway"}))
    provider.add_span_processor(SimpleSpanProcessor(keep))
    return provider.get_tracer("twistgw"), keep


def sdk_make(n: int):
    from opentelemetry.trace import SpanKind
    tracer, keep = _sdk()
    keep.spans.clear()
    for _ in range(n):
        span = tracer.start_span("GET /api/pets", kind=SpanKind.SERVER, attributes=ATTRS)
        span.end()
    return list(keep.spans)


def sdk_enc(batch) -> bytes:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    return encode_spans(batch).SerializeToString()


sdk_enc.prepare = sdk_make  # type: ignore[attr-defined]


def sdk_all(n: int) -> bytes:
    return sdk_enc(sdk_make(n))


sdk_all.prepare = lambda n: n  # type: ignore[attr-defined]


def submit(batch: list[Span]) -> None:
    exporter = submit.exporter  # type: ignore[attr-defined]
    for s in batch:
        exporter.submit(s)


def main() -> None:
    print(f"per span, best of {ROUNDS} batches of {BATCH} ({len(ATTRS)} attributes), µs")
    for name, fn in (("hand", hand), ("proto", proto), ("sdk-enc", sdk_enc), ("sdk-all", sdk_all)):
        try:
            print(f"  {name:8} {per_span(fn):7.2f}")
        except ImportError as exc:
            print(f"  {name:8} skipped ({exc})")
    from twistgw.tracing.export import CollectorTarget, SpanExporter
    # a collector that is never reached: the queue fills and then drops, as submit must stay O(1) either way
    exporter = SpanExporter(CollectorTarget("http", "127.0.0.1", 9), resource={"service.name": "gateway"},
                            max_queue=1 << 30, delay_s=3600)
    submit.exporter = exporter  # type: ignore[attr-defined]
    submit.prepare = spans  # type: ignore[attr-defined]
    print(f"  {'submit':8} {per_span(submit):7.2f}   (SpanExporter.submit, the reactor's side)")
    exporter.stop(0)


if __name__ == "__main__":
    main()
