"""The HTTP/2 rows of bench/run (issue 33): clients speaking HTTP/2 with
prior knowledge (h2c) to twistgw and to nginx's own HTTP/2 proxy, the load
from ``h2load -c32 -m10`` (nghttp2-client) instead of wrk; and the memory
an idle HTTP/2 connection costs the gateway.

* ``h2-plain``: twistgw, the ``plain`` route, HTTP/2 clients (goal: CPU per
  request ≤ 1.2× ``plain``, the same route over HTTP/1.1 in the same run);
* ``h2-jwt-rbac``: the ``jwt-rbac`` route over HTTP/2 (goal: what JWT +
  RBAC adds over HTTP/2 is what it adds over HTTP/1.1, ± 5 µs);
* ``nginx-h2``: nginx ``listen ... http2`` with ``proxy_pass`` to the same
  backend (HTTP/1.1 upstream keepalive), 1 worker.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from typing import Any

SCENARIOS = ["h2-plain", "h2-jwt-rbac"]
REFERENCES = ["nginx-h2"]
DESCRIPTIONS = {
    "h2-plain": "twistgw, the plain route, HTTP/2 clients (h2c, h2load -c32 -m10)",
    "h2-jwt-rbac": "twistgw, JWT RS256 + RBAC, the same token, HTTP/2 clients (h2load -c32 -m10)",
    "nginx-h2": "nginx listen ... http2 (h2c) with proxy_pass and upstream keepalive, 1 worker, h2load -c32 -m10",
}
#: streams in flight per connection
STREAMS = 10
#: idle connections opened to price one
IDLE = 400


def nginx_block(port: int, backend_port: int, prefix: str) -> str:
    return f"""
    upstream backend_h2 {{ server 127.0.0.1:{backend_port}; keepalive 64; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port} http2;
        http2_max_concurrent_streams 128;
        access_log {prefix}/nginx-h2.access.log;
        location / {{
            proxy_pass http://backend_h2;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}"""


def h2_status(port: int, headers: dict[str, str] | None = None) -> int:
    """One HTTP/2 GET /bench with prior knowledge: its status."""
    from h2.config import H2Configuration
    from h2.connection import H2Connection
    from h2.events import ResponseReceived, StreamEnded, StreamReset

    conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        conn.initiate_connection()
        fields = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"bench.example"),
                  (b":path", b"/bench"), *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items())]
        conn.send_headers(1, fields, end_stream=True)
        sock.sendall(conn.data_to_send())
        status = 0
        while True:
            data = sock.recv(65536)
            if not data:
                return status
            for event in conn.receive_data(data):
                if isinstance(event, ResponseReceived):
                    status = int(dict(event.headers)[b":status"])
                elif isinstance(event, (StreamEnded, StreamReset)):
                    return status
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()


def check_h2(port: int, expectations: list[tuple[str, dict[str, str], int]], skip: Any) -> None:
    """As the harness's ``check``, over HTTP/2."""
    for label, headers, want in expectations:
        try:
            got = h2_status(port, headers)
        except OSError as exc:
            raise skip(f"functional check '{label}' over HTTP/2 failed: {exc}") from None
        if got != want:
            raise skip(f"functional check '{label}' over HTTP/2 answered {got}, expected {want}")


def h2load(target: Any, seconds: float, connections: int, load_cpu: str) -> dict[str, Any]:
    """``h2load`` for ``seconds`` against ``target``; its numbers as the harness reads wrk's."""
    exe = shutil.which("h2load")
    if exe is None:
        raise RuntimeError("h2load is not installed (apt-get install nghttp2-client)")
    argv = ["taskset", "-c", load_cpu, exe, f"-c{connections}", f"-m{STREAMS}", "-t1", f"-D{max(1, round(seconds))}"]
    for h in target.headers:
        argv += ["-H", h]
    argv.append(f"http://127.0.0.1:{target.port}/bench")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise RuntimeError(f"h2load failed: {(out.stderr or out.stdout).strip()[:300]}")
    return parse_h2load(out.stdout)


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)$", text)
    if not m:
        raise ValueError(f"unparsed duration {text!r}")
    return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]


def parse_h2load(out: str) -> dict[str, Any]:
    """h2load's summary: requests done, seconds, req/s; ``time for request``
    gives a mean and a maximum (it has no percentiles): reported in the
    p50 and p99 columns, with a note saying so."""
    finished = re.search(r"finished in ([\d.]+)(us|ms|s), ([\d.]+) req/s", out)
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored",
                     out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    timing = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)", out)
    if not (finished and done and codes and timing):
        raise RuntimeError(f"cannot parse h2load output:\n{out}")
    return {
        "requests": int(done.group(1)),
        "seconds": _ms(finished.group(1) + finished.group(2)) / 1000,
        "rps": float(finished.group(3)),
        "p50_ms": _ms(timing.group(3)),  # the mean
        "p99_ms": _ms(timing.group(2)),  # the maximum
        "non2xx": int(codes.group(2)) + int(codes.group(3)) + int(codes.group(4)) + int(done.group(3)),
        "socket_errors": int(done.group(4)),
    }


def _open_idle(port: int, http2: bool) -> socket.socket:
    """A connection that has made one request and then stays idle."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if not http2:
        sock.sendall(b"GET /bench HTTP/1.1\r\nHost: bench.example\r\n\r\n")
        sock.recv(65536)
        return sock
    from h2.config import H2Configuration
    from h2.connection import H2Connection
    from h2.events import StreamEnded

    conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    conn.send_headers(1, [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"bench.example"),
                          (b":path", b"/bench")], end_stream=True)
    sock.sendall(conn.data_to_send())
    done = False
    while not done:
        data = sock.recv(65536)
        if not data:
            break
        done = any(isinstance(e, StreamEnded) for e in conn.receive_data(data))
        sock.sendall(conn.data_to_send())
    return sock


def idle_memory(port: int, pid: int, http2: bool, rss_kib: Any) -> float:
    """KiB of the gateway's RSS per idle connection (``IDLE`` of them)."""
    time.sleep(0.5)
    before = rss_kib(pid)[0]
    socks = [_open_idle(port, http2) for _ in range(IDLE)]
    time.sleep(1.0)
    after = rss_kib(pid)[0]
    for s in socks:
        s.close()
    return (after - before) / IDLE


def report_lines(res: dict[str, Any], ceiling: Any, cpu_times: Any, cpu_extra: Any, fmt: Any,
                 idle: dict[str, float]) -> list[str]:
    """The issue 33 targets, in the harness's table form."""
    h2, plain = res.get("h2-plain"), res.get("plain")
    if not (h2 and h2.runs):
        return []
    lines = ["", "| target (issue 33), CPU per request | measured | goal | |", "|---|---:|---:|---|",
             ceiling("HTTP/2 plain route / HTTP/1.1 plain route", cpu_times(h2, plain), 1.2)]
    h2jr, jr = res.get("h2-jwt-rbac"), res.get("jwt-rbac")
    extra_h2, extra_h1 = cpu_extra(h2jr, h2), cpu_extra(jr, plain)
    if extra_h2 is not None and extra_h1 is not None:
        diff = extra_h2 - extra_h1
        lines.append(f"| JWT + RBAC − plain: over HTTP/2 {extra_h2:.0f} µs, over HTTP/1.1 {extra_h1:.0f} µs |"
                     f" {diff:+.0f} µs | ± 5 µs | {'met' if abs(diff) <= 5 else 'NOT met'} |")
    ng = res.get("nginx-h2")
    if ng and ng.runs:
        lines.append(f"| HTTP/2 plain route / nginx's HTTP/2 proxy (reported) | {fmt(cpu_times(h2, ng), '.2f')} | | |")
    if idle:
        lines += ["", "| memory per idle connection (one request made, then idle; "
                  f"{IDLE} connections, RSS delta) | KiB |", "|---|---:|"]
        lines += [f"| {label} | {value:.1f} |" for label, value in idle.items()]
    return lines
