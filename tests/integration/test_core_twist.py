"""``twist twistgw --config DIR`` as a real subprocess from the installed package."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from support.http import http_request, raw_connect, reactor, sleep, static_upstream_yaml, vs_yaml
from support.process import free_port, twist_command

_free_port = free_port  # the name tests/integration/test_workers.py imports


async def stop_process(proc: subprocess.Popen, seconds: float = 10.0) -> None:
    """SIGTERM, wait (without blocking the reactor), then SIGKILL."""
    proc.send_signal(signal.SIGTERM)
    for _ in range(int(seconds / 0.05)):
        if proc.poll() is not None:
            return
        await sleep(0.05)
    proc.kill()
    proc.wait()


@pytest_twisted.ensureDeferred
async def test_twist_twistgw_serves_and_proxies(tmp_path: Path, backend: Any, config_dir: Any) -> None:
    d = config_dir(static_upstream_yaml("backend", [backend.port]) + "---\n" + vs_yaml(domains=["*"]))
    port, admin = _free_port(), _free_port()
    cmd, cwd = twist_command(tmp_path)
    log = open(tmp_path / "twist.log", "w")
    proc = subprocess.Popen(cmd + ["--config", d, "--listen", f"tcp:{port}:interface=127.0.0.1",
                                   "--admin", f"tcp:{admin}:interface=127.0.0.1"],
                            cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = reactor.seconds() + 20
        while True:
            assert proc.poll() is None, (tmp_path / "twist.log").read_text()
            try:
                c = await raw_connect(port)
                c.transport.abortConnection()
                break
            except Exception:
                if reactor.seconds() > deadline:
                    raise AssertionError("twist never listened:\n" + (tmp_path / "twist.log").read_text())
                await sleep(0.1)
        r = await http_request("GET", f"http://127.0.0.1:{port}/through/the/gateway?x=1")
        assert r.status == 200
        assert r.json()["uri"] == "/through/the/gateway?x=1"
        assert backend.requests[-1].header(b"x-forwarded-for") == [b"127.0.0.1"]
        ready = await http_request("GET", f"http://127.0.0.1:{admin}/readyz")
        assert ready.status == 200
    finally:
        await stop_process(proc)
        log.close()
    # twist re-raises the signal it stopped on, so a clean stop is -SIGTERM
    assert proc.returncode in (0, -signal.SIGTERM), (tmp_path / "twist.log").read_text()
    assert "Main loop terminated." in (tmp_path / "twist.log").read_text()


def test_twist_twistgw_refuses_an_invalid_config(tmp_path: Path, config_dir: Any) -> None:
    d = config_dir(vs_yaml(upstream="missing"))
    cmd, cwd = twist_command(tmp_path)
    out = subprocess.run(cmd + ["--config", d, "--listen", f"tcp:{_free_port()}:interface=127.0.0.1",
                                "--admin", "none"], cwd=cwd, capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "is invalid; refusing to start. 1 problem(s):" in out.stderr
    assert os.path.join(d, "config.yaml") in out.stderr
    assert "spec.virtualHost.routes[0].routeAction.single.upstream: dangling reference: no Upstream default/missing" \
        in out.stderr


def test_twist_available() -> None:
    # the CI venv has a real install: the script is there
    assert shutil.which("twist", path=str(Path(sys.executable).parent)) is not None
