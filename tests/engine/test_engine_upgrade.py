"""Upgrade and WebSocket through the gateway (issue 13, point 3), with a real
WebSocket client and server (the ``websockets`` package, its threaded API,
so the Twisted reactor of the test keeps running the gateway).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from engine_helpers import engine_config
from support.http import raw_exchange, wait_for
from support.plugins import DenyAll

websockets = pytest.importorskip("websockets")
from websockets.sync.client import connect  # noqa: E402
from websockets.sync.server import serve  # noqa: E402


WS_CONFIG = """\
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: echo}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {port}}}]}}}}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {{name: ws}}
spec:
  virtualHost:
    domains: ["*"]
    routes:
    - matchers: [{{prefix: /protected}}]
      routeAction: {{single: {{upstream: {{name: echo}}}}}}
      options: {{denyall: {{}}}}
    - matchers: [{{prefix: /}}]
      routeAction: {{single: {{upstream: {{name: echo}}}}}}
"""


class EchoServer:
    """A WebSocket echo server in a thread; counts open connections."""

    def __init__(self) -> None:
        self.open = 0
        self.closed = 0
        self.server = serve(self._handler, "127.0.0.1", 0)
        self.port = self.server.socket.getsockname()[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _handler(self, ws: Any) -> None:
        self.open += 1
        try:
            for message in ws:
                ws.send(message)
        except Exception:
            pass
        finally:
            self.closed += 1

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(5)


@pytest.fixture
def ws_gateway(config_dir: Any, gateway: Any) -> Any:
    echo = EchoServer()
    gw = gateway(config_dir(WS_CONFIG.format(port=echo.port)), plugins=[("denyall", DenyAll())],
                 head_timeout=0.5, idle_timeout=1.0)
    yield gw, echo
    echo.stop()


def _talk(port: int, path: str, messages: list[Any]) -> list[Any]:
    with connect(f"ws://127.0.0.1:{port}{path}", open_timeout=5, close_timeout=2) as ws:
        out = []
        for m in messages:
            ws.send(m)
            out.append(ws.recv(timeout=5))
        return out


@pytest_twisted.ensureDeferred
async def test_websocket_echo_through_the_gateway(ws_gateway: Any) -> None:
    gw, echo = ws_gateway
    big = b"\x00\xff" * 400_000  # 800 kB: more than any socket buffer, both ways
    messages = ["hello", "wörld", b"\x00\x01binary", big]
    got = await threads.deferToThread(_talk, gw.port, "/chat", messages)
    assert got == messages
    assert echo.open == 1
    await wait_for(lambda: echo.closed == 1, timeout=3)
    await wait_for(lambda: gw.service.gateway.inflight == 0, timeout=3)


@pytest_twisted.ensureDeferred
async def test_denied_upgrade_gets_the_plugins_answer(ws_gateway: Any) -> None:
    gw, echo = ws_gateway
    req = (b"GET /protected/chat HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
           b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
           b"\x81\x85bytes-that-must-not-pass")
    res = await raw_exchange(gw.port, req, timeout=3)
    assert res.status == 401 and res.closed, res.data
    assert res.data.endswith(b"go away")
    assert echo.open == 0


@pytest_twisted.ensureDeferred
async def test_upgrade_refused_by_the_upstream_is_relayed_and_closed(recorders: Any, config_dir: Any,
                                                                      gateway: Any, unused_port: int) -> None:
    rec = recorders(lambda r: b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 4\r\n\r\nnope")
    gw = gateway(config_dir(engine_config(rec.port, unused_port)),
                 plugins=[("denyall", DenyAll())])
    req = b"GET /chat HTTP/1.1\r\nHost: gw.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    res = await raw_exchange(gw.port, req, timeout=3)
    assert res.status == 426 and res.closed and res.data.endswith(b"nope"), res.data
    (seen,) = rec.requests
    assert seen.headers(b"upgrade") == [b"websocket"]
    assert [v.lower() for v in seen.headers(b"connection")] == [b"upgrade"]


def _vanish(port: int) -> None:
    with connect(f"ws://127.0.0.1:{port}/chat", open_timeout=5, close_timeout=0.1) as ws:
        ws.send("one")
        assert ws.recv(timeout=5) == "one"
        ws.socket.close()  # no close frame: the client vanishes mid-stream
        time.sleep(0.05)


@pytest_twisted.ensureDeferred
async def test_client_vanishing_mid_stream_closes_the_upstream(ws_gateway: Any) -> None:
    gw, echo = ws_gateway
    await threads.deferToThread(_vanish, gw.port)
    await wait_for(lambda: echo.closed == 1, timeout=5)
    await wait_for(lambda: gw.service.gateway.inflight == 0, timeout=3)
