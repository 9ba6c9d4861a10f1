"""``retries`` end to end through ``twist twistgw``, in the shape of Gloo's
retry guide: a backend that fails its first requests (it counts the attempts
it saw), a POST body replayed only when it fits Envoy's buffer limit, a
reset connection, retriable status codes, and the route timeout bounding
every try."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import reactor
from twisted.web import resource, server

from support.http import http_request
from test_core_twist import start_twist, stop_process


class Flaky(resource.Resource):
    """``/<name>/...``: the first ``fail[name]`` requests get ``status[name]``
    (or, for ``reset``, a closed connection; for ``hang``, no answer);
    later ones 200 with the attempt number. Every attempt is recorded."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.fail: dict[str, int] = {}
        self.status: dict[str, int] = {}
        self.seen: dict[str, list[tuple[bytes, bytes]]] = {}

    def render(self, request: Any) -> Any:
        name = request.path.decode().split("/")[1]
        attempts = self.seen.setdefault(name, [])
        attempts.append((request.method, request.content.read()))
        if len(attempts) <= self.fail.get(name, 0):
            status = self.status.get(name, 503)
            if name.startswith("reset"):
                request.transport.abortConnection()
                return server.NOT_DONE_YET
            if name.startswith("hang"):
                return server.NOT_DONE_YET
            request.setResponseCode(status)
            return b"failed"
        return b"ok %d" % len(attempts)


def _config(port: int) -> str:
    def route(prefix: str, retries: str, extra: str = "") -> str:
        opts = f"retries: {retries}" if retries else ""
        return (f"    - matchers: [{{prefix: /{prefix}}}]\n"
                f"      options: {{{opts}{extra}}}\n"
                f"      routeAction: {{single: {{upstream: {{name: flaky}}}}}}\n")
    fast = "retryBackOff: {baseInterval: 5ms, maxInterval: 20ms}"
    return (f"""\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: flaky, namespace: default}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: {port}}}]}}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: app, namespace: default}}
spec:
  virtualHost:
    domains: ["*"]
    routes:
""" + route("recovers", f"{{retryOn: 5xx, numRetries: 3, {fast}}}")
        + route("exhausts", f"{{retryOn: gateway-error, numRetries: 2, {fast}}}")
        + route("post", f"{{retryOn: 5xx, numRetries: 1, {fast}}}")
        + route("bigpost", f"{{retryOn: 5xx, numRetries: 1, {fast}}}")
        + route("teapot", f"{{retryOn: retriable-status-codes, retriableStatusCodes: [418], {fast}}}")
        + route("conflict", f"{{retryOn: retriable-4xx, {fast}}}")
        + route("notretried", f"{{retryOn: connect-failure, {fast}}}")
        + route("reset", f"{{retryOn: reset, numRetries: 2, {fast}}}")
        + route("hang", f"{{retryOn: 5xx, numRetries: 20, perTryTimeout: 200ms, {fast}}}", ", timeout: 1s")
        + route("plain", "")
        + """---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: inherits, namespace: default}
spec:
  virtualHost:
    domains: ["vhost.test"]
    options:
      retries: {retryOn: 5xx, numRetries: 1, perTryTimeout: 5s, retryBackOff: {baseInterval: 5ms}}
    routes:
    - matchers: [{prefix: /vhost}]
      routeAction: {single: {upstream: {name: flaky}}}
""")


@pytest_twisted.ensureDeferred
async def test_retries_through_twist(tmp_path: Path, config_dir: Any) -> None:
    flaky = Flaky()
    listening = reactor.listenTCP(0, server.Site(flaky), interface="127.0.0.1")
    proc, port, log_path, log = await start_twist(tmp_path, config_dir(_config(listening.getHost().port)))
    try:
        async def call(method: str, path: str, body: bytes | None = None) -> Any:
            return await http_request(method, f"http://127.0.0.1:{port}{path}", body=body, timeout=20)

        flaky.fail.update(recovers=2, exhausts=5, post=1, bigpost=1, teapot=1, conflict=1, notretried=1, reset=1,
                          hang=100, plain=1, vhost=1)
        flaky.status.update(teapot=418, conflict=409, notretried=503)

        ok = await call("GET", "/recovers/x")
        assert (ok.status, ok.body) == (200, b"ok 3")  # two 503s, then the third try
        assert len(flaky.seen["recovers"]) == 3

        last = await call("GET", "/exhausts/x")
        assert (last.status, last.body) == (503, b"failed")  # the last try's answer, relayed
        assert len(flaky.seen["exhausts"]) == 3  # numRetries 2: three tries

        posted = await call("POST", "/post/x", body=b"hello")
        assert (posted.status, posted.body) == (200, b"ok 2")
        assert flaky.seen["post"] == [(b"POST", b"hello"), (b"POST", b"hello")]  # the body, replayed whole

        big = b"x" * (1024 * 1024 + 1)  # past Envoy's buffer limit: never replayed
        refused = await call("POST", "/bigpost/x", body=big)
        assert refused.status == 503
        assert len(flaky.seen["bigpost"]) == 1 and len(flaky.seen["bigpost"][0][1]) == len(big)

        teapot = await call("GET", "/teapot/x")
        assert (teapot.status, len(flaky.seen["teapot"])) == (200, 2)
        conflict = await call("GET", "/conflict/x")
        assert (conflict.status, len(flaky.seen["conflict"])) == (200, 2)
        not_retried = await call("GET", "/notretried/x")  # connect-failure does not retry a 503 answer
        assert (not_retried.status, len(flaky.seen["notretried"])) == (503, 1)

        reset = await call("GET", "/reset/x")
        assert (reset.status, reset.body) == (200, b"ok 2")  # the connection closed before a head, then ok

        started = time.monotonic()
        hung = await call("GET", "/hang/x")
        took = time.monotonic() - started
        assert hung.status == 504  # the route's timeout (1s) bounds every try
        assert 0.9 <= took < 2.5, took
        assert 3 <= len(flaky.seen["hang"]) <= 6  # 200 ms per try, within 1 s

        inherited = await http_request("GET", f"http://127.0.0.1:{port}/vhost/x", {"host": "vhost.test"})
        assert (inherited.status, inherited.body) == (200, b"ok 2")  # the virtual host's retries

        plain = await call("GET", "/plain/x")
        assert (plain.status, len(flaky.seen["plain"])) == (503, 1)  # no retries configured: one try
    finally:
        await stop_process(proc)
        log.close()
        await listening.stopListening()
