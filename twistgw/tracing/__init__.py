"""Tracing: the spans the gateway records for the requests it samples, and
their export to an OpenTelemetry collector.

- :mod:`twistgw.tracing.span`: :class:`~twistgw.tracing.span.Span`, one
  finished span (made per sampled request: a slotted record, no behaviour);
- :mod:`twistgw.tracing.otlp`: the OTLP protobuf encoding of a batch of spans
  (``ExportTraceServiceRequest``), hand-written (docs/decisions.md);
- :mod:`twistgw.tracing.export`: :class:`~twistgw.tracing.export.SpanExporter`,
  a bounded queue drained by a daemon thread that sends batches to a collector
  over OTLP/HTTP or OTLP/gRPC (:mod:`twistgw.tracing.transport`: one attempt
  of each, on that thread).

Nothing here imports Twisted: the core may import :class:`Span`, and the
exporter's thread does its I/O with the standard library and grpcio, off the
reactor (docs/architecture.md).
"""
