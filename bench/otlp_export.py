"""What exporting spans costs, per span (docs/performance.md, "Span export"):

  submit   SpanExporter.submit on the caller's thread (the reactor's side)
  thread   the export thread's CPU (encode + send), read from
           /proc/self/task/<tid>/schedstat
  other    the rest of the process's CPU while it ran: grpcio's own threads
           for OTLP/gRPC (its I/O is done there, not in the export thread)

against the test receiver (tests/support/otlp.py) in another process, so
that its decoding is not counted. Run:

  .venv/bin/python bench/otlp_export.py [--spans 50000] [--protocol http|grpc|both]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from prometheus_client import REGISTRY

from twistgw.tracing.export import CollectorTarget, SpanExporter
from twistgw.tracing.span import Span

ROOT = Path(__file__).resolve().parents[1]
ATTRS = {
    "http.request.method": "GET", "url.path": "/api/pets/123", "url.scheme": "http",
    "http.route": "/api/pets", "server.address": "api.example.com", "client.address": "127.0.0.1",
    "network.protocol.version": "1.1", "http.response.status_code": 200,
    "user_agent.original": "curl/8.5.0", "twistgw.virtual_service": "default/pets",
}
RECEIVER = """
import sys, time
sys.path.insert(0, sys.argv[2])
from support.otlp import OtlpReceiver
rx = OtlpReceiver(protocol=sys.argv[1]).start()
print(rx.port, flush=True)
sys.stdin.read()
print(len(rx.spans()), flush=True)
"""


def thread_cpu_ns(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def run(protocol: str, n: int) -> None:
    rx = subprocess.Popen([sys.executable, "-c", RECEIVER, protocol, str(ROOT / "tests")],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert rx.stdout is not None and rx.stdin is not None
    port = int(rx.stdout.readline())
    exporter = SpanExporter(CollectorTarget(protocol, "127.0.0.1", port), resource={"service.name": "bench"},
                            max_queue=n + 1, delay_s=0.05)
    now = time.time_ns()
    spans = [Span(os.urandom(16), os.urandom(8), b"", "GET /api/pets", 2, now, now + 1500000, {**ATTRS, "url.path": f"/api/pets/{i}"})
             for i in range(n)]
    exporter.submit(spans[0])  # starts the thread
    time.sleep(0.3)
    thread = next(t for t in threading.enumerate() if t.name.startswith("twistgw-otlp"))
    assert thread.native_id is not None
    cpu0, proc0 = thread_cpu_ns(thread.native_id), time.process_time_ns()
    t0 = time.perf_counter_ns()
    for span in spans[1:]:
        exporter.submit(span)
    submit_ns = time.perf_counter_ns() - t0
    target = exporter.target
    deadline = time.monotonic() + 120
    while REGISTRY.get_sample_value("twistgw_spans_exported_total", {"collector": target.label}) != n:
        assert time.monotonic() < deadline, "the spans were not all exported"
        time.sleep(0.01)
    cpu = thread_cpu_ns(thread.native_id) - cpu0
    proc = time.process_time_ns() - proc0
    exporter.stop(timeout_s=5)
    rx.stdin.close()
    received = int(rx.stdout.readline())
    rx.wait()
    per = n - 1
    print(f"{protocol:5} spans {per} received {received - 1}: submit {submit_ns / per / 1000:.2f} µs,"
          f" export thread {cpu / per / 1000:.2f} µs, whole process besides submit and the waiting loop"
          f" {(proc - submit_ns) / per / 1000:.2f} µs CPU per span")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spans", type=int, default=50000)
    parser.add_argument("--protocol", default="both", choices=("http", "grpc", "both"))
    args = parser.parse_args()
    for protocol in ("http", "grpc") if args.protocol == "both" else (args.protocol,):
        run(protocol, args.spans)


if __name__ == "__main__":
    main()
