"""A small OTLP/gRPC trace receiver that prints every span it gets, as the
OpenTelemetry collector's debug exporter does: enough to watch the demo's
traces without installing a collector (docs/observability.md, "A trace from
the demo").

    python examples/tracing/receiver.py [--port 4317] [--quiet]

``--quiet`` prints nothing but a count of spans every 10 s (bench/run's
``tracing-sampled`` row).

Needs grpcio (a dependency of twistgw) and opentelemetry-proto
(``pip install opentelemetry-proto``). Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTraceServiceRequest,
                                                                      ExportTraceServiceResponse)

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
KINDS = {1: "Internal", 2: "Server", 3: "Client"}
STATUS = {0: "Unset", 1: "Ok", 2: "Error"}
_lock = threading.Lock()


def _time(ns: int) -> str:
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


_TYPES = {"string_value": "Str", "int_value": "Int", "bool_value": "Bool", "double_value": "Double"}


def _value(v: object) -> str:
    kind = v.WhichOneof("value")  # type: ignore[attr-defined]
    return f"{_TYPES.get(kind, kind)}({getattr(v, kind)})"


def show(request: ExportTraceServiceRequest) -> None:
    lines = []
    for rs in request.resource_spans:
        lines.append("ResourceSpans")
        lines += [f"     -> {kv.key}: {_value(kv.value)}" for kv in rs.resource.attributes]
        for ss in rs.scope_spans:
            for span in ss.spans:
                lines += [
                    f"Span {span.name}",
                    f"    Trace ID       : {span.trace_id.hex()}",
                    f"    Parent ID      : {span.parent_span_id.hex()}",
                    f"    ID             : {span.span_id.hex()}",
                    f"    Kind           : {KINDS.get(span.kind, span.kind)}",
                    f"    Start time     : {_time(span.start_time_unix_nano)}",
                    f"    Duration       : {(span.end_time_unix_nano - span.start_time_unix_nano) / 1e6:.3f} ms",
                    f"    Status code    : {STATUS.get(span.status.code, span.status.code)}",
                    f"    Status message : {span.status.message}",
                    "Attributes:",
                ]
                lines += [f"     -> {kv.key}: {_value(kv.value)}" for kv in span.attributes]
    with _lock:
        print("\n".join(lines), flush=True)


QUIET = False
_count = [0]


def export(body: bytes, context: object) -> bytes:
    request = ExportTraceServiceRequest.FromString(body)
    if QUIET:
        with _lock:
            _count[0] += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    else:
        show(request)
    return ExportTraceServiceResponse().SerializeToString()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=4317)
    ap.add_argument("--quiet", action="store_true", help="count spans, print nothing else")
    args = ap.parse_args()
    global QUIET
    QUIET = args.quiet
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService",
        {"Export": grpc.unary_unary_rpc_method_handler(export)})
    server.add_generic_rpc_handlers((handler,))
    if server.add_insecure_port(f"127.0.0.1:{args.port}") == 0:
        sys.exit(f"cannot listen on 127.0.0.1:{args.port}")
    server.start()
    print(f"OTLP/gRPC receiver on 127.0.0.1:{args.port} ({METHOD})", flush=True)
    if not QUIET:
        server.wait_for_termination()
        return
    while server.wait_for_termination(10):  # True: timed out, still serving
        with _lock:
            print(f"{_count[0]} spans received", flush=True)


if __name__ == "__main__":
    main()
