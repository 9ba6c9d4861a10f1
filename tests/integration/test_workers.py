"""``twist twistgw --workers 2``: both workers serve one socket, every worker
enforces the same configuration, a reload reaches all of them, metrics
aggregate, and a killed worker is replaced."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest_twisted

from support.http import http_request, raw_connect, reactor, sleep, static_upstream_yaml, vs_yaml
from test_core_twist import _free_port, stop_process, twist_command


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


async def _wait_listening(proc: Any, port: int, log: Path) -> None:
    deadline = reactor.seconds() + 30
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            c = await raw_connect(port)
            c.transport.abortConnection()
            return
        except Exception:
            assert reactor.seconds() < deadline, "never listened:\n" + log.read_text()
            await sleep(0.1)


def _vs(prefix: str) -> str:
    return vs_yaml(domains=["*"], routes=(
        f"    - matchers: [{{prefix: {prefix}}}]\n"
        "      routeAction: {single: {upstream: {name: backend}}}\n"))


@pytest_twisted.ensureDeferred
async def test_two_workers_share_the_socket_reload_and_metrics(tmp_path: Path, backend: Any, config_dir: Any) -> None:
    d = config_dir(static_upstream_yaml("backend", [backend.port]) + "---\n" + _vs("/v1"))
    port, admin = _free_port(), _free_port()
    cmd, cwd = twist_command(tmp_path)
    logpath = tmp_path / "twist.log"
    log = open(logpath, "w")
    proc = subprocess.Popen(cmd + ["--config", d, "--listen", f"tcp:{port}:interface=127.0.0.1",
                                   "--admin", f"tcp:{admin}:interface=127.0.0.1", "--workers", "2",
                                   "--poll-interval", "0.2"],
                            cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    try:
        await _wait_listening(proc, port, logpath)
        workers = _children(proc.pid)
        assert len(workers) == 2, workers
        for _ in range(30):
            r = await http_request("GET", f"http://127.0.0.1:{port}/v1/x")
            assert r.status == 200
            assert (await http_request("GET", f"http://127.0.0.1:{port}/v2/x")).status == 404
        # metrics of every worker, aggregated by the supervisor
        m = await http_request("GET", f"http://127.0.0.1:{admin}/metrics")
        total = sum(float(line.rsplit(" ", 1)[1]) for line in m.body.decode().splitlines()
                    if line.startswith("twistgw_requests_total{"))
        assert total == 60, m.body.decode()[:2000]
        assert (await http_request("GET", f"http://127.0.0.1:{admin}/readyz")).status == 200

        # a reload reaches every worker: /v2 now proxies, /v1 is gone, on every connection
        tmp = Path(d) / ".next"
        tmp.write_text(static_upstream_yaml("backend", [backend.port]) + "---\n" + _vs("/v2"))
        for name in os.listdir(d):
            if name.endswith(".yaml"):
                os.replace(tmp, Path(d) / name)
                break
        await sleep(1.5)
        statuses = set()
        for _ in range(40):
            statuses.add((await http_request("GET", f"http://127.0.0.1:{port}/v2/x")).status)
            statuses.add((await http_request("GET", f"http://127.0.0.1:{port}/v1/x")).status + 1000)
        assert statuses == {200, 1404}, statuses

        # a killed worker is replaced, and service goes on meanwhile
        os.kill(workers[0], signal.SIGKILL)
        for _ in range(20):
            assert (await http_request("GET", f"http://127.0.0.1:{port}/v2/x")).status == 200
        deadline = reactor.seconds() + 10
        while len([p for p in _children(proc.pid) if p not in workers]) < 1:
            assert reactor.seconds() < deadline, logpath.read_text()
            await sleep(0.2)
    finally:
        await stop_process(proc)
        log.close()
    assert _children(proc.pid) == []
    assert "Traceback" not in logpath.read_text(), logpath.read_text()[-3000:]
