"""The gRPC rows of bench/run (issue 33): a gRPC unary call through twistgw
to an HTTP/2 upstream, beside nginx's ``grpc_pass`` in the same run.

* the gRPC upstream: nginx on core 0 speaking h2c, answering every call to
  ``/test.Echo/Unary`` with one framed message (``hello``), ``content-type:
  application/grpc`` and the trailers ``grpc-status: 0`` / ``grpc-message``
  — a fixed gRPC answer with no application behind it, so the rows price
  the proxies, not a Python servicer;
* ``nginx-grpc``: ``h2load -m 10`` → nginx (``listen ... http2``,
  ``grpc_pass`` with upstream keepalive) → the upstream;
* ``grpc-web``: wrk (HTTP/1.1, ``bench/grpc_web.lua``: a browser's grpc-web
  unary call) → twistgw (``useHttp2: true``: grpc-web translated, HTTP/2
  upstream, the trailers framed in the body) → the upstream;
* ``grpc-h2``: ``h2load -m 10`` → twistgw over h2c → the upstream: needs
  the downstream HTTP/2 of issue 33 (the ``h2down`` branch); until the
  gateway accepts h2c it is reported as skipped with that reason.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
from typing import Any

__all__ = ["DESCRIPTIONS", "GATEWAY", "REFERENCES", "backend_server_block", "grpc_pass_block", "h2load",
           "parse_h2load", "prepare", "upstream_yaml"]

REFERENCES = ["nginx-grpc"]
GATEWAY = ["grpc-web", "grpc-h2"]
DESCRIPTIONS = {
    "nginx-grpc": "h2load -m 10 -> nginx grpc_pass (keepalive) -> the h2c gRPC upstream: a unary call",
    "grpc-web": "wrk grpc-web (HTTP/1.1, a browser's unary call) -> twistgw useHttp2 -> the gRPC upstream"
                " (goal: CPU <= 1.5x plain)",
    "grpc-h2": "h2load -m 10 -> twistgw over h2c -> the gRPC upstream (needs downstream HTTP/2)",
}
HERE = os.path.dirname(os.path.abspath(__file__))
LUA = os.path.join(HERE, "grpc_web.lua")
PATH = "/test.Echo/Unary"
MESSAGE = struct.pack(">BI", 0, 5) + b"hello"


def prepare(prefix: str) -> str:
    """Files the upstream and h2load read; returns their directory."""
    d = os.path.join(prefix, "grpc")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "msg.bin"), "wb") as f:
        f.write(MESSAGE)
    with open(os.path.join(d, "request.bin"), "wb") as f:
        f.write(MESSAGE)
    return d


def backend_server_block(port: int, directory: str) -> str:
    """nginx's server block of the fixed gRPC upstream (h2c prior knowledge).
    A POST to a static file is a 405 in nginx; ``error_page 405 =200``
    answers it with the file, and ``add_trailer`` sends the gRPC status."""
    return f"""
    server {{
        listen 127.0.0.1:{port} http2;
        keepalive_requests 100000000;
        # a gRPC server's head is its content type (and grpc-accept-encoding), not a file's
        server_tokens off;
        etag off;
        max_ranges 0;
        location / {{
            root {directory};
            default_type application/grpc;
            add_trailer grpc-status 0 always;
            add_trailer grpc-message "" always;
            error_page 405 =200 /msg.bin;
            try_files /msg.bin =404;
        }}
        location = /msg.bin {{
            root {directory};
            default_type application/grpc;
            add_trailer grpc-status 0 always;
            add_trailer grpc-message "" always;
        }}
    }}"""


def grpc_pass_block(port: int, upstream_port: int, log: str) -> tuple[str, str]:
    """(extra http-level text, server block) of nginx's grpc_pass reference."""
    extra = f"upstream grpc_upstream {{ server 127.0.0.1:{upstream_port}; keepalive 64;" \
            " keepalive_requests 100000000; }"
    server = f"""
    server {{
        listen 127.0.0.1:{port} http2;
        keepalive_requests 100000000;
        access_log {log};
        location / {{ grpc_pass grpc://grpc_upstream; }}
    }}"""
    return extra, server


def upstream_yaml(upstream_port: int) -> str:
    """The gateway's Upstream fields: HTTP/2 to the fixed gRPC upstream."""
    return "  useHttp2: true\n"


def h2load(port: int, seconds: float, directory: str, cpu: str, connections: int = 32,
           streams: int = 10, count: int = 0) -> dict[str, Any]:
    """``h2load -m`` unary calls for ``seconds`` (or ``count`` calls); wrk's
    result shape (calls cut by the end of the duration count as failed)."""
    amount = f"-n{count}" if count else f"-D{seconds:g}"
    argv = ["taskset", "-c", cpu, "h2load", "-t1", f"-c{connections}", f"-m{streams}", amount,
            "-d", os.path.join(directory, "request.bin"), "-H", "content-type: application/grpc",
            "-H", "te: trailers", f"http://127.0.0.1:{port}{PATH}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise RuntimeError(f"h2load failed: {(out.stderr or out.stdout).strip()[:300]}")
    return parse_h2load(out.stdout, seconds)


def _ms(value: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", value)
    if not m:
        return 0.0
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1000.0}[m.group(2)]


def parse_h2load(out: str, seconds: float) -> dict[str, Any]:
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    lat = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)", out)
    if not (done and codes and rps):
        raise RuntimeError(f"cannot parse h2load output:\n{out}")
    mean = _ms(lat.group(3)) if lat else 0.0
    return {
        "requests": int(done.group(2)),
        "seconds": seconds,
        "rps": float(rps.group(1)),
        # h2load reports min/max/mean, not percentiles: the mean stands in for both
        "p50_ms": mean,
        "p99_ms": _ms(lat.group(2)) if lat else 0.0,
        "non2xx": int(codes.group(3)) + int(codes.group(4)) + int(codes.group(2)),
        "socket_errors": int(done.group(3)),
    }
