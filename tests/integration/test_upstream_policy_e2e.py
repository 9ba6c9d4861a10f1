"""An Upstream's ``outlierDetection``, ``loadBalancerConfig.leastRequest`` /
``healthyPanicThreshold`` and ``connectionConfig`` end to end through
``twist twistgw``, with real backends on loopback: a backend that starts
failing is ejected and comes back, ``maxEjectionPercent`` holds, panic with
none healthy (ejected and failing active checks together), least request
prefers the idle endpoint, and the connection settings as the backend (and
the kernel) see them."""

from __future__ import annotations

import collections
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import defer, reactor
from twisted.web import resource, server

from support.http import http_request, sleep
from test_core_twist import start_twist, stop_process


class Backend(resource.Resource):
    """Answers its name (or 500 while ``failing``, or after ``hold`` seconds);
    records each request's client port (one per upstream connection) by the
    first path segment; ``/healthz`` answers 200 or 503 (``unhealthy``)."""

    isLeaf = True

    def __init__(self, name: str, hold: float = 0.0) -> None:
        super().__init__()
        self.name = name.encode()
        self.hold = hold
        self.failing = False
        self.unhealthy = False
        self.hits: collections.Counter[str] = collections.Counter()
        self.ports: dict[str, list[int]] = collections.defaultdict(list)

    def render_GET(self, request: Any) -> Any:
        if request.path == b"/healthz":
            request.setResponseCode(503 if self.unhealthy else 200)
            return b"checked"
        what = request.path.decode().split("/")[1]
        self.hits[what] += 1
        self.ports[what].append(request.getClientAddress().port)
        if what == "headers":
            for i in range(5):
                request.setHeader(f"x-extra-{i}", "1")
        if self.failing:
            request.setResponseCode(500)
            return b"failing"
        if not self.hold:
            return self.name

        def answer() -> None:
            request.write(self.name)
            request.finish()

        reactor.callLater(self.hold, answer)
        return server.NOT_DONE_YET


def _upstream(name: str, ports: list[int], spec: str) -> str:
    hosts = ", ".join(f"{{addr: 127.0.0.1, port: {p}}}" for p in ports)
    return (f"apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {{name: {name}, namespace: default}}\n"
            f"spec:\n  static: {{hosts: [{hosts}]}}\n{spec}---\n")


def _vs(*names: str) -> str:
    routes = "".join(f"    - matchers: [{{prefix: /{n}}}]\n      routeAction: {{single: {{upstream: {{name: {n}}}}}}}\n"
                     for n in names)
    return ("apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: app, namespace: default}\n"
            "spec:\n  virtualHost:\n    domains: ['*']\n    routes:\n" + routes)


def _serve(*backends: Backend) -> list[Any]:
    return [reactor.listenTCP(0, server.Site(b), interface="127.0.0.1") for b in backends]


async def _get(port: int, path: str, n: int) -> list[Any]:
    """``n`` requests one after the other."""
    return [await http_request("GET", f"http://127.0.0.1:{port}{path}", timeout=20) for _ in range(n)]


@pytest_twisted.ensureDeferred
async def test_a_failing_backend_is_ejected_and_comes_back(tmp_path: Path, config_dir: Any) -> None:
    backends = [Backend("a"), Backend("b"), Backend("c")]
    listening = _serve(*backends)
    ports = [p.getHost().port for p in listening]
    detection = ("  outlierDetection: {consecutive5xx: 3, interval: 0.2s, baseEjectionTime: 1s,"
                 " maxEjectionPercent: %d}\n")
    config = (_upstream("eject", ports, detection % 34) + _upstream("most", ports, detection % 34)
              + _vs("eject", "most"))
    proc, port, log_path, log = await start_twist(tmp_path, config_dir(config))
    a, b, c = backends
    try:
        # a fails: after three 500s in a row (round robin: every third request) it leaves the rotation
        a.failing = True
        answers = await _get(port, "/eject/x", 12)
        assert [r.status for r in answers[:9]].count(500) == 3
        assert a.hits["eject"] == 3
        assert [r.body for r in await _get(port, "/eject/x", 20)].count(b"a") == 0
        assert a.hits["eject"] == 3
        # it recovers; after its time (1 s, at the next sweep) it takes traffic again
        a.failing = False
        await sleep(1.5)
        assert collections.Counter(r.body for r in await _get(port, "/eject/x", 30)) == \
            {b"a": 10, b"b": 10, b"c": 10}
        text = log_path.read_text()
        assert "is ejected for {seconds}s" in text and "is back from outlier ejection" in text

        # maxEjectionPercent 34 of three endpoints: one at most, though all three fail
        a.failing = b.failing = c.failing = True
        await _get(port, "/most/x", 30)
        before = {n: x.hits["most"] for n, x in zip("abc", backends, strict=True)}
        await _get(port, "/most/x", 30)
        grew = sorted(n for n, x in zip("abc", backends, strict=True) if x.hits["most"] > before[n])
        assert len(grew) == 2, (before, grew)  # one ejected, the other two keep failing in the rotation
    finally:
        await stop_process(proc)
        log.close()
        for p in listening:
            await p.stopListening()


@pytest_twisted.ensureDeferred
async def test_panic_when_none_is_healthy(tmp_path: Path, config_dir: Any) -> None:
    a, b = backends = [Backend("a"), Backend("b")]
    listening = _serve(*backends)
    ports = [p.getHost().port for p in listening]
    spec = ("  outlierDetection: {consecutive5xx: 2, interval: 10s, baseEjectionTime: 60s, maxEjectionPercent: 100}\n"
            "  healthChecks:\n  - {timeout: 1s, interval: 0.1s, noTrafficInterval: 0.1s, unhealthyThreshold: 1,"
            " healthyThreshold: 1,"
            " httpHealthCheck: {path: /healthz}}\n")
    config = (_upstream("panic", ports, spec)
              + _upstream("nopanic", ports, spec + "  loadBalancerConfig: {healthyPanicThreshold: 0}\n")
              + _vs("panic", "nopanic"))
    proc, port, _, log = await start_twist(tmp_path, config_dir(config))
    try:
        # b fails its active checks; a answers 500 to traffic and is ejected: none is healthy
        b.unhealthy = True
        await sleep(0.5)
        assert {r.body for r in await _get(port, "/panic/x", 4)} == {b"a"}
        a.failing = True
        for path in ("/panic/x", "/nopanic/x"):
            assert [r.status for r in await _get(port, path, 2)] == [500, 500]
        a.failing = False
        # default threshold (50 %): panic, every endpoint takes traffic again
        assert {r.body for r in await _get(port, "/panic/x", 10)} == {b"a", b"b"}
        # healthyPanicThreshold 0: no panic, Envoy's "no healthy upstream"
        answers = await _get(port, "/nopanic/x", 3)
        assert {(r.status, r.body) for r in answers} == {(503, b"no healthy upstream")}
    finally:
        await stop_process(proc)
        log.close()
        for p in listening:
            await p.stopListening()


@pytest_twisted.ensureDeferred
async def test_least_request_prefers_the_idle_endpoint(tmp_path: Path, config_dir: Any) -> None:
    slow, fast = backends = [Backend("slow", hold=3.0), Backend("fast")]
    listening = _serve(*backends)
    ports = [p.getHost().port for p in listening]
    config = (_upstream("least", ports, "  loadBalancerConfig: {leastRequest: {choiceCount: 5}}\n")
              + _upstream("rr", ports, "") + _vs("least", "rr"))
    proc, port, _, log = await start_twist(tmp_path, config_dir(config))
    try:
        for path in ("/least/x", "/rr/x"):
            started = []
            for _ in range(30):  # concurrent: each starts 20 ms after the previous one
                started.append(defer.ensureDeferred(http_request("GET", f"http://127.0.0.1:{port}{path}",
                                                                 timeout=20)))
                await sleep(0.02)
            answers = await defer.gatherResults(started)
            assert all(r.status == 200 for r in answers)
        # round robin sends half to the slow endpoint; least request only while it is idle (and 1 in 32 draws)
        assert slow.hits["rr"] == 15 and fast.hits["rr"] == 15
        assert slow.hits["least"] <= 4, slow.hits
    finally:
        await stop_process(proc)
        log.close()
        for p in listening:
            await p.stopListening()


def _keepalive_timers(backend_port: int) -> list[float]:
    """The keepalive timers ``ss`` shows on connections to ``backend_port``."""
    out = subprocess.run(["ss", "-Htno", "state", "established", f"( dport = :{backend_port} )"],
                         capture_output=True, text=True, check=True).stdout
    return [float(m) for m in re.findall(r"timer:\(keepalive,([\d.]+)sec", out)]


@pytest_twisted.ensureDeferred
async def test_connection_config(tmp_path: Path, config_dir: Any) -> None:
    backend = Backend("one")
    other = Backend("two")
    listening = _serve(backend, other)
    bport, oport = (p.getHost().port for p in listening)
    # a listening socket that never accepts, its backlog full: connects to it hang
    blackhole = socket.socket()
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(0)
    hport = blackhole.getsockname()[1]
    fillers = []
    for _ in range(3):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", hport))
        fillers.append(s)
    config = (_upstream("limited", [bport], "  connectionConfig: {maxRequestsPerConnection: 3}\n")
              + _upstream("plain", [bport], "")
              + _upstream("headers", [bport], "  connectionConfig: {commonHttpProtocolOptions: {maxHeadersCount: 3}}\n")
              + _upstream("idle", [bport], "  connectionConfig: {commonHttpProtocolOptions: {idleTimeout: 0.3s}}\n")
              + _upstream("keepalive", [oport], "  connectionConfig: {tcpKeepalive: {keepaliveProbes: 3,"
                                                " keepaliveTime: 45s, keepaliveInterval: 5s}}\n")
              + _upstream("hole", [hport], "  connectionConfig: {connectTimeout: 0.5s}\n")
              + _vs("limited", "plain", "headers", "idle", "keepalive", "hole"))
    proc, port, _, log = await start_twist(tmp_path, config_dir(config))
    try:
        # maxRequestsPerConnection: 9 requests over 3 connections, as the backend counts them
        assert all(r.status == 200 for r in await _get(port, "/limited/x", 9))
        assert len(set(backend.ports["limited"])) == 3
        assert [len([p for p in backend.ports["limited"] if p == q]) for q in set(backend.ports["limited"])] == \
            [3, 3, 3]
        assert all(r.status == 200 for r in await _get(port, "/plain/x", 9))
        assert len(set(backend.ports["plain"])) == 1  # without it: one kept-alive connection

        # maxHeadersCount: more response headers than allowed is a malformed answer
        answers = await _get(port, "/headers/x", 1)
        assert answers[0].status == 502

        # idleTimeout: a pooled connection idle longer is closed; the next request opens another
        await _get(port, "/idle/x", 2)
        await sleep(0.8)
        await _get(port, "/idle/x", 1)
        assert len(set(backend.ports["idle"])) == 2 and backend.ports["idle"][0] == backend.ports["idle"][1]

        # tcpKeepalive: the kernel runs a keepalive timer on the gateway's upstream socket
        assert (await _get(port, "/keepalive/x", 1))[0].status == 200
        timers = _keepalive_timers(oport)
        assert len(timers) == 1 and 30 < timers[0] <= 45, timers
        assert _keepalive_timers(bport) == []  # not on the other upstreams' connections

        # connectTimeout: 0.5 s against an address that never answers (the default is 5 s)
        began = time.monotonic()
        answer = (await _get(port, "/hole/x", 1))[0]
        took = time.monotonic() - began
        assert (answer.status, answer.body) == (503, b"upstream connect error or disconnect/reset before headers."
                                                     b" reset reason: connection timeout")
        assert 0.4 < took < 3.0, took
    finally:
        await stop_process(proc)
        log.close()
        for s in fillers:
            s.close()
        blackhole.close()
        for p in listening:
            await p.stopListening()


@pytest_twisted.ensureDeferred
async def test_each_try_of_a_retried_request_counts(tmp_path: Path, config_dir: Any) -> None:
    alive = Backend("alive")
    listening = _serve(alive)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead = closed.getsockname()[1]
    closed.close()  # nothing listens there: every connect is refused
    config = (_upstream("retried", [dead, listening[0].getHost().port],
                        "  outlierDetection: {consecutive5xx: 3, interval: 10s, baseEjectionTime: 60s}\n")
              + "apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: app, namespace: default}\n"
                "spec:\n  virtualHost:\n    domains: ['*']\n    routes:\n    - matchers: [{prefix: /retried}]\n"
                "      options: {retries: {retryOn: connect-failure, numRetries: 2,"
                " retryBackOff: {baseInterval: 5ms}}}\n"
                "      routeAction: {single: {upstream: {name: retried}}}\n")
    proc, port, log_path, log = await start_twist(tmp_path, config_dir(config))
    try:
        # round robin starts every other request on the dead endpoint: its refused connect is
        # hidden by the retry (on the live endpoint) and still counts, so after six requests
        # (three refused connects in a row) it is ejected, with no client ever seeing a failure
        assert [r.status for r in await _get(port, "/retried/x", 6)] == [200] * 6
        assert alive.hits["retried"] == 6
        text = log_path.read_text()
        assert text.count("is ejected for {seconds}s") == 1, text
        assert [r.status for r in await _get(port, "/retried/x", 10)] == [200] * 10
        assert alive.hits["retried"] == 16
    finally:
        await stop_process(proc)
        log.close()
        for p in listening:
            await p.stopListening()
