"""Graceful operations: stopping drains in-flight requests (bounded) while
/readyz answers 503, SIGTERM does the same for a real `twist` process, and a
reload under load loses no request."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import pytest_twisted
import treq
from support.http import http_request, raw_connect, sleep, wait_for
from rel_helpers import (LoadResult, bearer, config_yaml, jwt_local, route, run_load, summary, token, warm,
                         write_atomic)
from slapd import free_port
from twisted.internet import defer, error
from twisted.web import client as webclient

ROOT = Path(__file__).resolve().parents[2]


def drain_config(backend_port: int, **kw: Any) -> str:
    """``/r/...`` reaches the echo backend's special paths (``/r/_sleep``)."""
    return config_yaml(backend_port, extra_routes=[route("/r/", prefixRewrite="/")], **kw)


@pytest.fixture
def keep_sighup() -> Iterator[None]:
    """GatewayService.startService installs a SIGHUP handler; put ours back."""
    old = signal.getsignal(signal.SIGHUP)
    yield
    signal.signal(signal.SIGHUP, old)


def make_service(config_dir: str, drain_timeout: float) -> tuple[Any, int, int]:
    from twistgw.core.plugins import PluginHost
    from twistgw.runtime.service import GatewayService

    port, admin = free_port(), free_port()
    svc = GatewayService(config_dir, listen=[f"tcp:{port}:interface=127.0.0.1"],
                         admin=f"tcp:{admin}:interface=127.0.0.1", poll_interval=0,
                         access_log=False, drain_timeout=drain_timeout,
                         plugins=PluginHost.create(load_entry_points=False))
    return svc, port, admin


@pytest_twisted.ensureDeferred
async def test_stop_drains_in_flight_requests_and_readyz_turns_503(
        backend: Any, config_dir: Any, keep_sighup: None) -> None:
    svc, port, admin = make_service(config_dir(drain_config(backend.port)), drain_timeout=5.0)
    svc.startService()
    url = f"http://127.0.0.1:{port}"
    ready = f"http://127.0.0.1:{admin}/readyz"
    assert (await http_request("GET", url + "/open/x")).status == 200
    assert (await http_request("GET", ready)).status == 200

    inflight = [defer.ensureDeferred(http_request("GET", url + f"/r/_sleep?ms=800&n={i}"))
                for i in range(6)]
    await wait_for(lambda: svc.gateway.inflight == 6)
    t0 = time.monotonic()
    stopping = defer.maybeDeferred(svc.stopService)
    await sleep(0.1)
    r = await http_request("GET", ready)
    assert (r.status, r.body) == (503, b"draining\n")
    with pytest.raises(error.ConnectionRefusedError):
        await http_request("GET", url + "/open/late")  # no longer accepting
    assert not stopping.called
    results = await defer.gatherResults(inflight)
    assert [r.status for r in results] == [200] * 6
    await stopping
    took = time.monotonic() - t0
    assert 0.5 < took < 2.0, took
    assert svc.gateway.inflight == 0


@pytest_twisted.ensureDeferred
async def test_stop_is_bounded_by_the_drain_timeout(backend: Any, config_dir: Any, keep_sighup: None) -> None:
    svc, port, admin = make_service(config_dir(drain_config(backend.port)), drain_timeout=0.5)
    svc.startService()
    await wait_for_port(port)
    clients = []
    for _ in range(3):
        c = await raw_connect(port)
        c.transport.write(b"GET /r/_hang HTTP/1.1\r\nHost: x\r\n\r\n")
        clients.append(c)
    await wait_for(lambda: svc.gateway.inflight == 3)
    t0 = time.monotonic()
    await svc.stopService()
    took = time.monotonic() - t0
    assert 0.45 < took < 1.5, took
    for c in clients:
        c.transport.abortConnection()


async def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing listens on {port} after {timeout}s")
        await sleep(0.05)


@pytest_twisted.ensureDeferred
async def test_sigterm_drains_a_real_twist_process(backend: Any, config_dir: Any, tmp_path: Path) -> None:
    d = config_dir(drain_config(backend.port))
    port, admin = free_port(), free_port()
    log = open(tmp_path / "gateway.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "twisted", "--log-format=text", "twistgw", "--config", d,
         "--listen", f"tcp:{port}:interface=127.0.0.1", "--admin", f"tcp:{admin}:interface=127.0.0.1",
         "--drain-timeout", "5", "--no-access-log"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        await wait_for_port(port, timeout=20)
        url = f"http://127.0.0.1:{port}"
        assert (await http_request("GET", url + "/open/x")).status == 200
        inflight = [defer.ensureDeferred(http_request("GET", url + f"/r/_sleep?ms=1000&n={i}"))
                    for i in range(4)]
        await wait_for(lambda: sum(1 for r in backend.requests if r.path == b"/_sleep") == 4)
        proc.send_signal(signal.SIGTERM)
        await sleep(0.2)
        r = await http_request("GET", f"http://127.0.0.1:{admin}/readyz")
        assert (r.status, r.body) == (503, b"draining\n")
        results = await defer.gatherResults(inflight)
        assert [r.status for r in results] == [200] * 4
        await wait_for(lambda: proc.poll() is not None, timeout=5)
        # `twist` re-raises the signal once the reactor has stopped cleanly
        # (Twisted's runner exits "by" SIGTERM after a graceful shutdown).
        text = (tmp_path / "gateway.log").read_text()
        assert proc.returncode in (0, -signal.SIGTERM), text[-2000:]
        assert "Main loop terminated" in text and "Traceback" not in text, text[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        log.close()


@pytest_twisted.ensureDeferred
async def test_reload_under_load_loses_no_request(backend: Any, config_dir: Any, gateway: Any) -> None:
    d = config_dir(config_yaml(backend.port, jwt=jwt_local()))
    gw = gateway(d, load_entry_points=True)
    good = bearer(token())
    requests = [("open", "/open/x", None), ("jwt", "/jwt/x", good), ("nojwt", "/jwt/x", None)]
    await warm(gw.url, requests, workers=4, seconds=0.2)

    # Keep-alive clients too: reloads must not disturb open connections.
    pool = webclient.HTTPConnectionPool(gw.service.reactor, persistent=True)
    keepalive: list[int] = []
    done = [False]

    async def keepalive_client() -> None:
        while not done[0]:
            response = await treq.get(gw.url("/open/ka"), pool=pool)
            await treq.content(response)
            keepalive.append(response.code)

    kas = [defer.ensureDeferred(keepalive_client()) for _ in range(2)]
    answers = LoadResult()
    running = run_load(gw.url, requests, workers=6, stop=lambda: done[0], max_requests=5000, result=answers)
    generation = gw.service.generation
    for i in range(12):
        extra = [route(f"/v{i}")]
        write_atomic(d, "config.yaml", config_yaml(backend.port, jwt=jwt_local(), extra_routes=extra))
        assert gw.reload()
        # answers from the new configuration, on new and on kept-alive connections,
        # before the next reload (waited for, not a fixed time: 12 x 9 > 100, 12 x 2 > 20)
        seen, seen_ka = len(answers.outcomes), len(keepalive)
        await wait_for(lambda seen=seen, seen_ka=seen_ka: len(answers.outcomes) >= seen + 9
                       and len(keepalive) >= seen_ka + 2, timeout=30)
    done[0] = True
    result = await running
    await defer.gatherResults(kas)
    await pool.closeCachedConnections()
    info = summary(result.outcomes)
    assert gw.service.generation == generation + 12
    assert len(result.outcomes) > 100, info
    want = {"open": 200, "jwt": 200, "nojwt": 401}
    assert all(o.status == want[o.kind] for o in result.outcomes), info
    assert len(keepalive) > 20 and set(keepalive) == {200}
