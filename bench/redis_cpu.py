#!/usr/bin/env python3
"""The gateway process's own CPU time per request against a real Redis.

    bench/redis_cpu.py [--scenarios plain,ratelimit-redis,ratelimit-cluster,oidc-redis] [--requests 20000]
                       [--repeat 3]
                       [--tree DIR --python PY]   # another checkout (e.g. main, to compare)

For each scenario it starts one gateway process (bench/harness.py's
configuration: ``ratelimitBasic`` by address never over its limit;
``oidc-redis`` a valid session in Redis; ``ratelimit-cluster`` the rate
limit on a Redis Cluster of three primaries), a private ``redis-server`` and an
nginx backend, sends a warm-up, then ``--requests`` requests with ``ab``
(keep-alive, ``--connections`` at once), and reads the gateway pid's
utime + stime from ``/proc`` before and after: CPU µs per request, and the
Redis commands per request (``INFO commandstats``, before and after). It
prints each repetition and the minimum and median of each scenario, and
the extra over ``plain`` measured in the same run.

Unlike ``bench/run`` it measures no throughput and needs no quiet machine
to be useful: CPU time of one pid is much less disturbed by other load
than requests per second (though caches and frequency still are).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402
import oidc_bench  # noqa: E402

SCENARIOS = ("plain", "ratelimit-redis", "ratelimit-cluster", "oidc-redis")


def redis_calls(port: int) -> int:
    """Every command Redis ran so far (INFO commandstats), the INFO calls excluded."""
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"], capture_output=True, text=True,
                         timeout=10).stdout
    return sum(int(calls) for name, calls in re.findall(r"cmdstat_(\w+):calls=(\d+)", out) if name != "info")


def ab(port: int, n: int, connections: int, headers: list[str]) -> None:
    argv = ["taskset", "-c", harness.LOAD_CPU, "ab", "-q", "-k", "-n", str(n), "-c", str(connections)]
    for h in headers:
        argv += ["-H", h]
    out = subprocess.run(argv + [f"http://127.0.0.1:{port}/bench"], capture_output=True, text=True,
                         timeout=600).stdout
    failed = re.search(r"Failed requests:\s+(\d+)", out)
    non2xx = re.search(r"Non-2xx responses:\s+(\d+)", out)
    done = re.search(r"Complete requests:\s+(\d+)", out)
    if not done or int(done.group(1)) != n or (failed and int(failed.group(1))) or non2xx:
        raise SystemExit(f"ab did not get {n} good answers:\n{out}")


def start(procs: harness.Processes, prefix: str, name: str, backend: int, redis: int, tree: str,
          python: str, cluster: list[int]) -> tuple[int, int, list[str]]:
    """The gateway of ``name``: (port, pid, request headers)."""
    directory = os.path.join(prefix, f"config-{name}")
    headers: list[str] = []
    if name == "plain":
        harness.gateway_config(directory, backend)
    elif name == "ratelimit-redis":
        harness.gateway_config(directory, backend, harness.RATELIMIT_OPTIONS[name], harness.ratelimit_settings(redis))
    elif name == "ratelimit-cluster":
        harness.gateway_config(directory, backend, harness.RATELIMIT_OPTIONS[name],
                               harness.ratelimit_settings(cluster[0], clustered=True))
    else:
        options, extra = oidc_bench.options(name, redis)
        harness.gateway_config(directory, backend, options, extra)
        headers = [oidc_bench.redis_session(redis)]
    port, admin = harness.free_port(), harness.free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, os.path.join(tree, "plugins")]))
    proc = procs.start(name, [python, "-m", "twisted", "twistgw", "--config", directory, "--listen",
                              f"tcp:{port}:interface=127.0.0.1", "--admin", f"tcp:{admin}:interface=127.0.0.1"],
                       harness.PROXY_CPU, cwd=tree, env=env)
    harness.wait_port(port, proc, procs, name, timeout=30)
    key, _, value = headers[0].partition(": ") if headers else ("", "", "")
    harness.check(port, [("a request", {key: value} if key else {}, 200)])
    return port, proc.pid, headers


def chosen(scenarios: str) -> list[str]:
    """The scenarios named in ``--scenarios`` (comma-separated), each known."""
    names = [s for s in scenarios.split(",") if s]
    for s in names:
        if s not in SCENARIOS:
            raise SystemExit(f"unknown scenario {s!r}; known: {', '.join(SCENARIOS)}")
    return names


def start_parts(procs: harness.Processes, prefix: str, names: list[str]) -> tuple[int, int, list[int]]:
    """What every scenario of these benches needs, on the load core: an
    nginx backend answering ``ok``, one Redis, and a Redis Cluster when
    ``ratelimit-cluster`` is among ``names``; their ports."""
    backend = harness.free_port()
    harness.start_nginx(procs, prefix, "backend", harness.nginx_conf(prefix, "backend", f"""
    server {{
        listen 127.0.0.1:{backend};
        location / {{ default_type text/plain; return 200 "ok\\n"; }}
    }}"""), backend, harness.LOAD_CPU)
    redis = harness.start_redis(procs, prefix)
    cluster = harness.start_redis_cluster(procs, prefix) if "ratelimit-cluster" in names else []
    return backend, redis, cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--connections", type=int, default=harness.CONNECTIONS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tree", default=harness.ROOT, help="the checkout whose twistgw and plugins run")
    parser.add_argument("--python", default=sys.executable, help="the interpreter (its site-packages) to run")
    args = parser.parse_args()
    names = chosen(args.scenarios)
    with tempfile.TemporaryDirectory(prefix="twistgw-redis-cpu-") as prefix:
        procs = harness.Processes(prefix)
        try:
            backend, redis, cluster = start_parts(procs, prefix, names)
            results: dict[str, list[tuple[float, float]]] = {}
            targets = {name: start(procs, prefix, name, backend, redis, args.tree, args.python, cluster)
                       for name in names}
            for port, _, headers in targets.values():
                ab(port, min(2000, args.requests), args.connections, headers)  # warm-up
            for i in range(args.repeat):
                for name, (port, pid, headers) in targets.items():
                    time.sleep(0.2)
                    servers = cluster if name == "ratelimit-cluster" else [redis]
                    cpu0, calls0 = harness.cpu_seconds(pid), sum(redis_calls(p) for p in servers)
                    ab(port, args.requests, args.connections, headers)
                    cpu1, calls1 = harness.cpu_seconds(pid), sum(redis_calls(p) for p in servers)
                    per = (cpu1 - cpu0) / args.requests * 1e6
                    cmds = (calls1 - calls0 - len(servers)) / args.requests  # each INFO before is counted once
                    results.setdefault(name, []).append((per, cmds))
                    print(f"  {i + 1}/{args.repeat} {name:16} {per:7.1f} µs CPU/request  {cmds:.3f} Redis"
                          " commands/request", flush=True)
        finally:
            procs.stop_all()
    print(f"\n{args.requests} requests x {args.repeat}, {args.connections} connections, tree {args.tree}")
    plain = [p for p, _ in results.get("plain", [])]
    for name, runs in results.items():
        cpu = [p for p, _ in runs]
        line = (f"{name:16} min {min(cpu):6.1f}  median {statistics.median(cpu):6.1f} µs/request;"
                f"  Redis commands/request {statistics.median(c for _, c in runs):.3f}")
        if plain and name != "plain":
            line += f";  + over plain: min {min(cpu) - min(plain):+.1f}, median" \
                    f" {statistics.median(cpu) - statistics.median(plain):+.1f}"
        print(line)


if __name__ == "__main__":
    main()
