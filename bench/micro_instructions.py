"""Machine instructions per request of a bench/micro.py scenario, counted by
callgrind (valgrind): exact and independent of the neighbours' load, C work
included (hashing, allocation, dict and string work), which ``--opcodes``
leaves out. ``h2-plain`` and ``h2-jwt-rbac`` count the gateway's part of
bench/h2_micro.py's HTTP/2 requests (batches of 10 streams, the client's own
work left out); ``jwt-rbac`` is bench/micro.py's, over HTTP/1.1.

    python bench/micro_instructions.py SCENARIO [SCENARIO...] [--requests N]

Each scenario runs in its own ``valgrind --tool=callgrind`` process (about
1-3 minutes each on a loaded 2-core machine), ``PYTHONHASHSEED=0`` so that
two runs of one build count the same. Only the timed loop is counted: it
runs inside ``sys.call_tracing`` and callgrind collects only there
(``--toggle-collect=sys_call_tracing``), so imports, the configuration and
the warm-up requests are left out. Scenarios: ``plain``, ``plain-key``
(``plain`` with the ``apikey`` scenario's header on every request: what one
more header costs), ``gateway-plain`` and ``request-id`` (plain on a Gloo
Gateway's listener, without and with its ``x-request-id``) and the extauth ones (``apikey``, ``basic-cache``,
``oauth2-introspect``, ``oidc-cookie``) and issue 35's: ``gateway`` (a
Gloo Gateway's listener, no tracing, request ids on: Envoy's default), ``tracing-unsampled`` (tracing
configured, no request sampled), ``tracing-sampled`` (every request
sampled: its spans made and handed to a sink as cheap as the exporter's
``submit``; the export thread's CPU is bench/otlp_export.py's).

regopy is replaced by an empty module in the counted process: its allocator
(snmalloc) cannot start under valgrind, and no scenario here evaluates Rego.
Needs ``valgrind`` and ``callgrind_annotate`` (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = ("plain", "plain-key", "apikey", "basic-cache", "oauth2-introspect", "oidc-cookie", "gateway-plain",
             "request-id", "jwt-rbac", "h2-plain", "h2-jwt-rbac", "gateway", "tracing-unsampled", "tracing-sampled")
#: the HTTP/2 scenarios: bench/h2_micro.py's connection, batches of this many streams (h2load's -m)
H2_STREAMS = 10


def _counted(name: str, requests: int) -> None:
    """In the process valgrind runs: build the scenario and run the timed loop
    inside sys.call_tracing."""
    stub = types.ModuleType("regopy")  # see the module docstring
    stub.Input = stub.Interpreter = object  # type: ignore[attr-defined]
    sys.modules["regopy"] = stub
    sys.path.insert(0, HERE)
    import gc

    import micro

    if name.startswith("h2-"):
        _counted_h2(name[3:], requests)
        return
    if name == "plain":
        spec = ("", "", b"")
    elif name == "jwt-rbac":
        spec = micro.scenarios(fresh_needed=False)["jwt-rbac"]
    elif name in ("gateway", "tracing-unsampled", "tracing-sampled"):
        spec = ("", micro.tracing_gateway({"gateway": None, "tracing-unsampled": 0, "tracing-sampled": 100}[name]),
                b"")
    elif name == "plain-key":
        spec = ("", "", micro.extauth_scenario("apikey")[2])
    elif name in micro.ON_GATEWAY:
        spec = micro.gateway_scenario(name)
    else:
        spec = micro.extauth_scenario(name)
    conn, request = micro.build(name, spec)
    # the first read goes through the connection's one-time look at its first
    # bytes (HTTP/2 or not), which then removes itself: run reads dataReceived once
    micro.run(conn, request, 1)
    micro.run(conn, request, 50)  # warm: caches, memos, the first-request paths
    gc.collect()
    sys.call_tracing(micro.run, (conn, request, requests))


def _counted_h2(name: str, requests: int) -> None:
    """bench/h2_micro.py's HTTP/2 client and gateway: only the gateway's calls
    (its reads of the client and of the upstreams) are counted, each inside
    sys.call_tracing; the client sends ``authorization`` never indexed, as
    nghttp2 (h2load) does."""
    import gc

    import h2_micro
    import micro

    h2_micro.NORMALIZE[0] = True
    bench = h2_micro.H2Bench(micro.scenarios(fresh_needed=False)[name])
    for _ in range(20):
        bench.batch(H2_STREAMS)
    gc.collect()
    bench.server = lambda f, *args: sys.call_tracing(f, args)  # type: ignore[method-assign]
    for _ in range(requests // H2_STREAMS):
        bench.batch(H2_STREAMS)


def instructions(name: str, requests: int) -> float:
    with tempfile.TemporaryDirectory(prefix="twistgw-callgrind-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = dict(os.environ, PYTHONHASHSEED="0")
        run = subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=sys_call_tracing",
                              f"--callgrind-out-file={out}", sys.executable, os.path.abspath(__file__),
                              "--counted", name, "--requests", str(requests)],
                             env=env, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"{name}: valgrind failed:\n{run.stderr[-2000:]}")
        text = subprocess.run(["callgrind_annotate", out], capture_output=True, text=True, check=True).stdout
    found = re.search(r"([\d,]+)\s+(?:\([\d.% ]+\)\s+)?PROGRAM TOTALS", text)
    if found is None:
        sys.exit(f"{name}: no PROGRAM TOTALS in callgrind_annotate's output")
    return int(found.group(1).replace(",", "")) / requests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="+", choices=SCENARIOS, metavar="SCENARIO")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--counted", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.counted:
        _counted(args.scenarios[0], args.requests)
        return
    for name in args.scenarios:
        print(f"{name:18} {instructions(name, args.requests):10,.0f} instructions per request", flush=True)


if __name__ == "__main__":
    main()
