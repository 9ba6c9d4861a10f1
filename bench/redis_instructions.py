#!/usr/bin/env python3
"""Machine instructions per request of a real gateway process against a
real Redis (or Redis Cluster), counted by callgrind: independent of the
neighbours' load, where ``bench/run``'s times and ``bench/redis_cpu.py``'s
CPU seconds are not (a shared 2-core host).

    bench/redis_instructions.py [--scenarios plain,ratelimit-redis,ratelimit-cluster] [--requests 2000]
                                [--keep DIR]   # the dumps, for callgrind_annotate

Each scenario's gateway (``bench/harness.py``'s configuration, as
``bench/redis_cpu.py`` starts it) runs under ``valgrind --tool=callgrind
--instr-atstart=no``; after a warm-up, ``callgrind_control -z`` and ``-i on``,
``--requests`` requests with ``ab`` (keep-alive, 32 connections),
``callgrind_control -i off`` and a dump: the instructions of the gateway
process while it served exactly those requests (the kernel's work is not
counted: what the process itself executes, Python and C). regopy is
replaced by an empty module in the counted process (its allocator cannot
start under valgrind; no scenario here evaluates Rego). Needs valgrind
(``apt-get install valgrind``), redis-server, redis-cli, nginx and ab.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402
import redis_cpu  # noqa: E402

SCENARIOS = ("plain", "ratelimit-redis", "ratelimit-cluster")

#: runs twist in the counted process with regopy stubbed out
LAUNCH = ("import sys, types; m = types.ModuleType('regopy'); m.Input = m.Interpreter = object;"
          " sys.modules['regopy'] = m; from twisted.application.twist._twist import Twist;"
          " sys.argv[0] = 'twist'; Twist.main(sys.argv)")


def control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], capture_output=True, text=True, timeout=120, check=True)


def measure(procs: harness.Processes, prefix: str, name: str, backend: int, redis: int, cluster: list[int],
            requests: int, keep: str | None = None) -> float:
    directory = os.path.join(prefix, f"config-{name}")
    if name == "plain":
        harness.gateway_config(directory, backend)
    else:
        settings = harness.ratelimit_settings(cluster[0], clustered=True) if name == "ratelimit-cluster" \
            else harness.ratelimit_settings(redis)
        harness.gateway_config(directory, backend, harness.RATELIMIT_OPTIONS[name], settings)
    port, admin = harness.free_port(), harness.free_port()
    out = os.path.join(prefix, f"callgrind-{name}.out")
    env = dict(os.environ, PYTHONHASHSEED="0",
               PYTHONPATH=os.pathsep.join([harness.ROOT, os.path.join(harness.ROOT, "plugins")]))
    proc = procs.start(name, ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                              f"--callgrind-out-file={out}", sys.executable, "-c", LAUNCH, "twistgw",
                              "--config", directory, "--listen", f"tcp:{port}:interface=127.0.0.1",
                              "--admin", f"tcp:{admin}:interface=127.0.0.1"],
                       harness.PROXY_CPU, cwd=harness.ROOT, env=env)
    harness.wait_port(port, proc, procs, name, timeout=600)
    redis_cpu.ab(port, 500, harness.CONNECTIONS, [])  # warm: caches, the connection to Redis, the slot map
    time.sleep(0.5)
    control(proc.pid, "-z")
    control(proc.pid, "-i", "on")
    redis_cpu.ab(port, requests, harness.CONNECTIONS, [])
    control(proc.pid, "-i", "off")
    control(proc.pid, "-d")
    procs.stop(proc, timeout=60)
    dumps = sorted(glob.glob(out + "*"))
    if keep:
        os.makedirs(keep, exist_ok=True)
        for dump in dumps:
            shutil.copy(dump, os.path.join(keep, os.path.basename(dump)))
    total = 0
    for dump in dumps:
        text = subprocess.run(["callgrind_annotate", dump], capture_output=True, text=True, check=True).stdout
        found = re.search(r"([\d,]+)\s+(?:\([\d.% ]+\)\s+)?PROGRAM TOTALS", text)
        total += int(found.group(1).replace(",", "")) if found else 0
    return total / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--keep", help="copy the callgrind dumps here (for callgrind_annotate)")
    args = parser.parse_args()
    names = redis_cpu.chosen(args.scenarios)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="twistgw-redis-instructions-") as prefix:
        procs = harness.Processes(prefix)
        try:
            backend, redis, cluster = redis_cpu.start_parts(procs, prefix, names)
            for name in names:
                results[name] = measure(procs, prefix, name, backend, redis, cluster, args.requests, args.keep)
                print(f"{name:18} {results[name]:10,.0f} instructions per request", flush=True)
        finally:
            procs.stop_all()
    plain = results.get("plain")
    if plain:
        for name, n in results.items():
            if name != "plain":
                print(f"{name:18} {n - plain:+10,.0f} over plain ({n / plain:.2f}x)")


if __name__ == "__main__":
    main()
