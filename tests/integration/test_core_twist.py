"""``twist twistgw --config DIR`` as a real subprocess from the installed package."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

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
                    raise AssertionError("twist never listened:\n" + (tmp_path / "twist.log").read_text()) from None
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
    text = (tmp_path / "twist.log").read_text()
    assert "Main loop terminated." in text
    # The startup log names the addresses it listens on, not endpoint
    # objects (twist logs JSON when its output is not a terminal).
    events = [json.loads(line.strip("\x1e")) for line in text.splitlines() if line.strip("\x1e")]
    said = [e["log_format"].format(**e) for e in events
            if e.get("log_namespace", "").startswith("twistgw") and "log_format" in e and "what" in e]
    assert f"Gateway listening on 127.0.0.1:{port} (tcp:{port}:interface=127.0.0.1)" in said, said
    assert f"Admin endpoint listening on 127.0.0.1:{admin} (tcp:{admin}:interface=127.0.0.1)" in said, said
    assert "EndpointObject" not in text and "ServerEndpoint object at" not in text


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


# ---------------------------------------------------------------------------
# The access log under twist (issue 13, point 4), and --backlog
# ---------------------------------------------------------------------------

async def start_twist(tmp_path: Path, config: str, *args: str) -> tuple[subprocess.Popen, int, Path, Any]:
    """``twist [args before twistgw] twistgw --config ... --listen ...`` with
    stdout to a file (so ``twist`` logs JSON unless told otherwise)."""
    port = _free_port()
    cmd, cwd = twist_command(tmp_path)
    before, _, after = " ".join(args).partition("-- ")
    cmd = cmd[:-1] + before.split() + cmd[-1:] if before else cmd
    path = tmp_path / "twist.log"
    log = open(path, "w")
    proc = subprocess.Popen(cmd + ["--config", config, "--listen", f"tcp:{port}:interface=127.0.0.1",
                                   "--admin", "none", *after.split()],
                            cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    deadline = reactor.seconds() + 20
    while True:
        assert proc.poll() is None, path.read_text()
        try:
            c = await raw_connect(port)
            c.transport.abortConnection()
            return proc, port, path, log
        except Exception:
            if reactor.seconds() > deadline:
                raise AssertionError("twist never listened:\n" + path.read_text()) from None
            await sleep(0.1)


ACCESS_FIELDS = ("client", "method", "path", "status", "virtual_service", "route", "upstream", "decided_by",
                 "principal", "duration_ms")


@pytest_twisted.ensureDeferred
async def test_twist_access_log_is_json_complete_ordered_and_flushed_on_shutdown(
        tmp_path: Path, backend: Any, config_dir: Any) -> None:
    import json

    from twisted.logger import LogLevel, eventsFromJSONLogFile

    from support.http import raw_exchange

    d = config_dir(static_upstream_yaml("backend", [backend.port]) + "---\n" + vs_yaml(domains=["*"]))
    proc, port, path, log = await start_twist(tmp_path, d)
    try:
        n = 40
        pipelined = b"".join(b"GET /r%d HTTP/1.1\r\nHost: gw.test\r\n\r\n" % i for i in range(n))
        res = await raw_exchange(port, pipelined + b"GET /last HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n")
        assert [r.status for r in res.responses()] == [200] * (n + 1)
        bad = await raw_exchange(port, b"GET /bad HTTP/1.1\r\nHost: u@gw.test\r\nConnection: close\r\n\r\n")
        assert bad.responses()[0].status == 400
        ten = await raw_exchange(port, b"GET /ten HTTP/1.0\r\n\r\n")
        assert ten.responses()[0].status == 200
    finally:
        await stop_process(proc)  # at once: the lines still buffered must be written on the way out
        log.close()
    with open(path) as f:
        events = [e for e in eventsFromJSONLogFile(f) if e.get("log_namespace") == "twistgw.access"]
    assert [e["path"] for e in events] == [f"/r{i}" for i in range(n)] + ["/last", "/bad", "/ten"]
    for e in events:
        assert all(k in e for k in ACCESS_FIELDS) and e["log_level"] is LogLevel.info
    assert events[0]["status"] == 200 and events[0]["upstream"] == f"127.0.0.1:{backend.port}"
    assert events[0]["virtual_service"] == "default/vs" and events[0]["client"] == "127.0.0.1"
    assert (events[-2]["status"], events[-2]["virtual_service"]) == (400, "-")
    # every record is whole JSON: nothing interleaved or cut
    records = path.read_text().split("\x1e")[1:]
    assert all(json.loads(r) for r in records)


@pytest_twisted.ensureDeferred
async def test_twist_access_log_text_and_backlog(tmp_path: Path, backend: Any, config_dir: Any) -> None:
    import re

    d = config_dir(static_upstream_yaml("backend", [backend.port]) + "---\n" + vs_yaml(domains=["*"]))
    proc, port, path, log = await start_twist(tmp_path, d, "--log-format text", "--", "--backlog 2048")
    try:
        r = await http_request("GET", f"http://127.0.0.1:{port}/text/line?q=1")
        assert r.status == 200
        if shutil.which("ss"):
            out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
            assert out.split()[2] == "2048", out  # Send-Q of a listening socket: its backlog
    finally:
        await stop_process(proc)
        log.close()
    text = path.read_text()
    assert "\x1e" not in text
    assert re.search(r'\n\S+ \[twistgw\.access#info\] 127\.0\.0\.1 "GET /text/line HTTP/1\.1" 200 vs=default/vs'
                     r" route=\S+ upstream=127\.0\.0\.1:\d+ decided_by=- principal=- \d+\.\dms\n", text), text


def test_twist_twistgw_freezes_its_startup_heap(tmp_path: Path, config_dir: Any) -> None:
    # what twist does with the plugin, in a process of its own: the modules,
    # plugins and first configuration go to the permanent generation, so a
    # full collection under load no longer walks them (a 25-36 ms pause, the
    # p99 of uncached LDAP requests); a test process never freezes its heap
    d = config_dir(vs_yaml(upstream="b") + "---\n" + static_upstream_yaml("b", [free_port()]))
    code = ("import gc, sys\n"
            "from twistgw.tap import Options, makeService\n"
            "o = Options(); o.parseOptions(sys.argv[1:])\n"
            "before = gc.get_freeze_count()\n"
            "makeService(o)\n"
            "print(before, gc.get_freeze_count(), len(gc.get_objects()))\n")
    out = subprocess.run([sys.executable, "-c", code, "--config", d, "--listen",
                          f"tcp:{free_port()}:interface=127.0.0.1", "--admin", "none"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, frozen, tracked = map(int, out.stdout.split())
    assert before == 0 and frozen > 50_000, out.stdout  # every module of the gateway and its plugins
    assert tracked < frozen // 10, out.stdout  # what a full collection still walks
