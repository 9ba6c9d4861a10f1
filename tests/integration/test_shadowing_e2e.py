"""``shadowing`` end to end through ``twist twistgw``, in the shape of Gloo's
shadowing guide: two real recording backends (the primary and the shadow),
the copy seen by the shadow with the ``-shadow`` host, the primary untouched
when the shadow is down or hangs, the percentage honoured over many
requests, the body bound, and the in-flight bound."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import deferLater

from support.http import http_request, raw_connect, raw_exchange
from test_core_twist import _free_port, start_twist, stop_process
from twistgw.sdk.testing import BackendResponse, start_recording_backend


class _Silent(Protocol):
    """Accepts a request and never answers (a hanging shadow)."""

    def connectionMade(self) -> None:
        self.factory.accepted += 1  # type: ignore[attr-defined]


def _upstream(name: str, port: int) -> str:
    return (f"apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {{name: {name}, namespace: default}}\n"
            f"spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {port}}}]}}}}\n---\n")


def _config(primary: int, shadow: int, down: int, hang: int) -> str:
    def route(prefix: str, options: str) -> str:
        return (f"    - matchers: [{{prefix: /{prefix}}}]\n"
                f"      options: {{{options}}}\n"
                f"      routeAction: {{single: {{upstream: {{name: primary}}}}}}\n")
    return (_upstream("primary", primary) + _upstream("shadow", shadow) + _upstream("down", down)
            + _upstream("hang", hang) + """\
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: app, namespace: default}
spec:
  virtualHost:
    domains: ["*"]
    routes:
""" + route("all", "shadowing: {upstream: {name: shadow}, percentage: 100},"
                   " headerManipulation: {requestHeadersToAdd: [{header: {key: x-added, value: 'yes'}}]}")
        + route("half", "shadowing: {upstream: {name: shadow, namespace: default}, percentage: 50}")
        + route("down", "shadowing: {upstream: {name: down}, percentage: 100}")
        + route("hang", "shadowing: {upstream: {name: hang}, percentage: 100}, timeout: 20s")
        + route("none", "shadowing: {upstream: {name: shadow}, percentage: 0}"))


async def _metrics(admin: int) -> dict[str, float]:
    got = await http_request("GET", f"http://127.0.0.1:{admin}/metrics")
    out = {}
    for m in re.finditer(rb'^twistgw_shadow_requests_total\{outcome="(\w+)"\} ([0-9.e+]+)$', got.body, re.M):
        out[m.group(1).decode()] = float(m.group(2))
    return out


async def _sleep(seconds: float) -> None:
    await deferLater(reactor, seconds, lambda: None)


async def _until(check: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await _sleep(0.02)


@pytest_twisted.ensureDeferred
async def test_shadowing_through_twist(tmp_path: Path, config_dir: Any) -> None:
    primary = start_recording_backend(BackendResponse(200, b"primary"))
    shadow = start_recording_backend(BackendResponse(500, b"shadow answers are discarded"))
    down_port = _free_port()  # nothing listens there
    silent = Factory.forProtocol(_Silent)
    silent.accepted = 0  # type: ignore[attr-defined]
    hang = reactor.listenTCP(0, silent, interface="127.0.0.1")
    admin = _free_port()
    proc, port, log_path, log = await start_twist(
        tmp_path, config_dir(_config(primary.port, shadow.port, down_port, hang.getHost().port)),
        "--", "--admin", f"tcp:{admin}:interface=127.0.0.1")
    try:
        async def call(method: str, path: str, body: bytes | None = None, **headers: str) -> Any:
            return await http_request(method, f"http://127.0.0.1:{port}{path}", body=body, timeout=20,
                                      headers={k.replace("_", "-"): v for k, v in headers.items()})

        # The copy: method, target, headers (after headerManipulation), the
        # -shadow host (before the port, as Envoy does); the shadow's 500 is
        # never seen by the client.
        got = await call("GET", "/all/x?q=1", host="api.example.com:8080", x_test="one")
        assert (got.status, got.body) == (200, b"primary")
        await _until(lambda: len(shadow.requests) == 1)
        copy, first = shadow.last, primary.last
        assert (copy.method, copy.target) == ("GET", "/all/x?q=1")
        assert copy.header("host") == "api.example.com-shadow:8080"
        assert first.header("host") == "api.example.com:8080"
        assert copy.header("x-test") == "one" and copy.header("x-added") == "yes"
        assert copy.header("x-forwarded-for") == first.header("x-forwarded-for") == "127.0.0.1"

        # A body within the bound is copied whole; over it, not at all.
        got = await call("POST", "/all/post", body=b"hello shadow", content_type="text/plain")
        assert got.status == 200
        await _until(lambda: len(shadow.requests) == 2)
        assert (shadow.last.method, shadow.last.body, shadow.last.header("content-length")) == \
            ("POST", b"hello shadow", "12")
        big = b"x" * (200 * 1024)
        got = await call("PUT", "/all/big", body=big)
        assert got.status == 200 and primary.last.body == big
        assert len(shadow.requests) == 2

        # A chunked body: copied whole within the bound; one that grows past
        # it is not copied at all (the primary gets every byte either way).
        def chunked(path: str, chunks: list[bytes]) -> list[bytes]:
            head = (f"POST {path} HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n"
                    "Connection: close\r\n\r\n").encode()
            return [head] + [b"%x\r\n%s\r\n" % (len(c), c) for c in chunks] + [b"0\r\n\r\n"]
        got = await raw_exchange(port, chunked("/all/chunked", [b"hello", b" chunked"]), delay=0.05, timeout=10)
        assert got.data.startswith(b"HTTP/1.1 200"), got.data[:200]
        await _until(lambda: len(shadow.requests) == 3)
        assert (shadow.last.path, shadow.last.body) == ("/all/chunked", b"hello chunked")
        pieces = [bytes([65 + i]) * 30000 for i in range(3)]
        got = await raw_exchange(port, chunked("/all/grows", pieces), delay=0.05, timeout=10)
        assert got.data.startswith(b"HTTP/1.1 200") and primary.last.body == b"".join(pieces)

        # A client that goes away before its body is complete: no copy.
        conn = await raw_connect(port)
        conn.transport.write(b"POST /all/gone HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789")
        await _sleep(0.3)
        conn.transport.abortConnection()
        await _sleep(0.3)
        assert len(shadow.requests) == 3

        # percentage 0: nothing; 50: about half of 400 (binomial sd 10).
        for _ in range(3):
            assert (await call("GET", "/none/x")).status == 200
        for _ in range(400):
            assert (await call("GET", "/half/x")).status == 200
        await _sleep(0.5)  # the last copies land
        halves = sum(r.path == "/half/x" for r in shadow.requests)
        assert 140 <= halves <= 260, halves
        assert not any(r.path == "/none/x" for r in shadow.requests)

        # The shadow is down: the primary answers as fast as ever.
        start = time.monotonic()
        for _ in range(5):
            got = await call("GET", "/down/x")
            assert (got.status, got.body) == (200, b"primary")
        assert time.monotonic() - start < 5

        # The shadow hangs: every primary answers at once; past 100 shadows
        # in flight the rest are dropped and counted.
        start = time.monotonic()
        for _ in range(110):
            got = await call("GET", "/hang/x")
            assert (got.status, got.body) == (200, b"primary")
        assert time.monotonic() - start < 30
        await _until(lambda: silent.accepted >= 100)  # type: ignore[attr-defined]
        assert silent.accepted <= 100  # type: ignore[attr-defined]

        counts = await _metrics(admin)
        assert counts.get("overflow", 0) >= 10, counts
        assert counts.get("failed", 0) >= 5, counts  # the down shadow, each counted
        assert counts.get("body_too_large", 0) == 2, counts  # declared, then grown past the bound
        assert counts.get("incomplete_body", 0) == 1, counts
        assert counts.get("answered", 0) >= 2, counts
        records = [json.loads(x) for x in log_path.read_text().split("\x1e") if x.strip()]
        lines = [r for r in records if str(r.get("log_format", "")).startswith("Shadow request to")]
        down = [r for r in lines if r.get("upstream") == f"127.0.0.1:{down_port}"]
        assert len(down) == 1, lines  # five failures in a few seconds: one line (at most one per 10 s)
        assert "Connection refused" in down[0]["why"] or "refused" in down[0]["why"].lower(), down[0]
    finally:
        await stop_process(proc)
        log.close()
        await hang.stopListening()
        await primary.close()
        await shadow.close()
