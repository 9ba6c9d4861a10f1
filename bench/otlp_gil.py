"""How long the reactor's side waits while the export thread encodes
(docs/decisions.md, "The GIL"): times 50 ``submit`` calls at a time on the
main thread for 4 s while the exporter sends to the test receiver
(tests/support/otlp.py) in another process, the thread offering the GIL
every N spans it encodes (the argument; a huge N: never). Run:

  .venv/bin/python bench/otlp_gil.py 32
  .venv/bin/python bench/otlp_gil.py 1000000000
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from twistgw.tracing import export
from twistgw.tracing.export import CollectorTarget, SpanExporter
from twistgw.tracing.span import Span

RECEIVER = """
import sys
sys.path.insert(0, sys.argv[1])
from support.otlp import OtlpReceiver
rx = OtlpReceiver(protocol='http').start()
print(rx.port, flush=True)
sys.stdin.read()
"""
ATTRS = {f"k{i}": f"v{i}" for i in range(9)}


def main() -> None:
    every = int(sys.argv[1]) if len(sys.argv) > 1 else 32
    export._YIELD_EVERY = every  # the setting measured
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    rx = subprocess.Popen([sys.executable, "-c", RECEIVER, tests], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True)
    assert rx.stdout is not None and rx.stdin is not None
    port = int(rx.stdout.readline())
    exporter = SpanExporter(CollectorTarget("http", "127.0.0.1", port), resource={}, delay_s=0.02,
                            max_queue=100000)
    now = time.time_ns()
    spans = [Span(os.urandom(16), os.urandom(8), b"", "x", 2, now, now, {**ATTRS, "p": f"/{i}"})
             for i in range(20000)]
    gaps = []
    i = 0
    end = time.perf_counter() + 4
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        for _ in range(50):
            exporter.submit(spans[i % 20000])
            i += 1
        gaps.append(time.perf_counter() - t0)
        time.sleep(0.0005)
    exporter.stop()
    rx.stdin.close()
    rx.wait()
    gaps.sort()
    n = len(gaps)
    print(f"GIL offered every {every} spans: {i} spans; 50 submits take p50 {gaps[n // 2] * 1e6:.0f} µs,"
          f" p99 {gaps[int(n * .99)] * 1e6:.0f}, p99.9 {gaps[int(n * .999)] * 1e6:.0f}, max {gaps[-1] * 1e6:.0f};"
          f" over 1 ms: {sum(g > 1e-3 for g in gaps)}")


if __name__ == "__main__":
    main()
