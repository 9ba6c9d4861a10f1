"""``circuitBreakers`` end to end through ``twist twistgw`` under concurrent
load: a slow backend (it holds each answer) behind Upstreams with small
thresholds; the overflow is answered 503 with ``x-envoy-overloaded: true``
and never reaches the backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import defer, reactor
from twisted.web import resource, server

from support.http import http_request
from test_core_twist import start_twist, stop_process


class Slow(resource.Resource):
    """Answers each request after ``delay`` seconds (503 for the first
    ``fail`` requests of ``/retry``); counts requests and the most at once."""

    isLeaf = True

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.seen: dict[str, int] = {}
        self.now = 0
        self.most = 0
        self.fail = 0

    def render(self, request: Any) -> Any:
        name = request.path.decode().split("/")[1]
        self.seen[name] = self.seen.get(name, 0) + 1
        self.now += 1
        self.most = max(self.most, self.now)
        failing = name == "retry" and self.seen[name] <= self.fail

        def answer() -> None:
            self.now -= 1
            if failing:
                request.setResponseCode(503)
            request.write(b"failed" if failing else b"ok")
            request.finish()

        reactor.callLater(self.delay, answer)
        return server.NOT_DONE_YET


def _upstream(name: str, port: int, breakers: str) -> str:
    return (f"apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {{name: {name}, namespace: default}}\n"
            f"spec:\n  static: {{hosts: [{{addr: 127.0.0.1, port: {port}}}]}}\n  circuitBreakers: {breakers}\n---\n")


def _config(port: int) -> str:
    routes = "".join(f"    - matchers: [{{prefix: /{n}}}]\n      routeAction: {{single: {{upstream: {{name: {n}}}}}}}\n"
                     for n in ("requests", "connections"))
    return (_upstream("requests", port, "{maxRequests: 2}")
            + _upstream("connections", port, "{maxConnections: 1, maxPendingRequests: 1}")
            + _upstream("retry", port, "{maxRetries: 1}")
            + "apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: app, namespace: default}\n"
              "spec:\n  virtualHost:\n    domains: ['*']\n    routes:\n" + routes
            + "    - matchers: [{prefix: /retry}]\n"
              "      options: {retries: {retryOn: 5xx, numRetries: 1, retryBackOff: {baseInterval: 5ms}}}\n"
              "      routeAction: {single: {upstream: {name: retry}}}\n")


@pytest_twisted.ensureDeferred
async def test_circuit_breakers_under_concurrent_load(tmp_path: Path, config_dir: Any) -> None:
    slow = Slow(0.4)
    listening = reactor.listenTCP(0, server.Site(slow), interface="127.0.0.1")
    proc, port, log_path, log = await start_twist(tmp_path, config_dir(_config(listening.getHost().port)))
    try:
        async def burst(path: str, n: int) -> list[Any]:
            return list(await defer.gatherResults([
                defer.ensureDeferred(http_request("GET", f"http://127.0.0.1:{port}{path}", timeout=20))
                for _ in range(n)]))

        # maxRequests: 2 under way at most; the rest overflow at once
        answers = await burst("/requests/x", 6)
        ok = [a for a in answers if a.status == 200]
        over = [a for a in answers if a.status == 503]
        assert (len(ok), len(over)) == (2, 4)
        assert all(a.header("x-envoy-overloaded") == "true" for a in over)
        assert all(a.body.endswith(b"reset reason: overflow") for a in over)
        assert slow.seen["requests"] == 2  # the overflow never reached the backend
        assert all(a.header("x-envoy-overloaded") is None for a in ok)

        # maxConnections 1 + maxPendingRequests 1: one served, one waits for the
        # connection, the third overflows
        slow.most = 0
        answers = await burst("/connections/x", 3)
        assert sorted(a.status for a in answers) == [200, 200, 503]
        assert [a.header("x-envoy-overloaded") for a in answers if a.status == 503] == ["true"]
        assert slow.seen["connections"] == 2
        assert slow.most == 1  # one connection: never two at once at the backend

        # maxRetries 1: of three failing requests at once, one is retried
        slow.fail = 3
        answers = await burst("/retry/x", 3)
        assert sorted(a.status for a in answers) == [200, 503, 503], (slow.seen, [a.body for a in answers])
        assert slow.seen["retry"] == 4
        assert all(a.header("x-envoy-overloaded") is None for a in answers)  # the backend's own 503s

        # under the thresholds, nothing is refused
        answers = await burst("/requests/x", 2)
        assert [a.status for a in answers] == [200, 200]
    finally:
        await stop_process(proc)
        log.close()
        await listening.stopListening()
