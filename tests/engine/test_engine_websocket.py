"""WebSocket end to end through the gateway (issue #13, point 3): a real
client and a real server of the ``websockets`` package (its threaded,
synchronous API, so the reactor of the in-process gateway keeps running) on
loopback.

Covered: messages echoed both ways (text, binary, 1 MB, server-initiated);
bytes a client sends right behind its upgrade request reach the backend as
tunnel data after the 101; an upgrade the backend refuses (426) is no
tunnel (the next bytes are a request, checked by the chain); a denied
upgrade with frames behind it sends nothing upstream;
an upgrade the chain denies gets the plugin's answer (401 ``Jwt is
missing``), never a 101, and the backend never sees it; a client vanishing
mid-stream closes the backend connection and leaks no file descriptor.
"""

from __future__ import annotations

import base64
import os
import struct
import threading
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from engine_helpers import jwt_route_options, open_fds, route
from support.http import raw_connect, sleep, static_upstream_yaml, vs_yaml, wait_for

websockets = pytest.importorskip("websockets")
from websockets.exceptions import InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402
from websockets.sync.server import serve  # noqa: E402


class WSBackend:
    """A websockets echo server in a thread; ``live`` counts its open
    connections, ``opened`` every connection it accepted. It greets each
    client first (``hello <path>``), then echoes every message."""

    def __init__(self) -> None:
        self.live = 0
        self.opened = 0
        self.lock = threading.Lock()
        self.server = serve(self.handler, "127.0.0.1", 0, compression=None, max_size=4 * 2**20)
        self.port = self.server.socket.getsockname()[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def handler(self, ws: Any) -> None:
        with self.lock:
            self.live += 1
            self.opened += 1
        try:
            ws.send(f"hello {ws.request.path}")
            for message in ws:
                ws.send(message)
        except Exception:
            pass
        finally:
            with self.lock:
                self.live -= 1

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(5)


@pytest.fixture
def ws_gateway(config_dir: Any, gateway: Any, jwt_key: Any) -> Any:
    backend = WSBackend()
    pem, token = jwt_key
    routes = route("/jwt", "ws", jwt_route_options(pem)) + route("/", "ws")
    gw = gateway(config_dir(static_upstream_yaml("ws", [backend.port]) + "---\n" + vs_yaml(upstream="ws", routes=routes)),
                 load_entry_points=True)
    gw.backend, gw.token = backend, token
    yield gw
    backend.close()


def _echo_session(port: int, path: str, headers: dict[str, str]) -> list[Any]:
    got: list[Any] = []
    with connect(f"ws://127.0.0.1:{port}{path}", additional_headers=headers, proxy=None, compression=None,
                 open_timeout=5, close_timeout=2, max_size=4 * 2**20) as ws:
        got.append(ws.recv(timeout=5))
        for message in ("text é", b"\x00\x01binary\xff", b"x" * 2**20):
            ws.send(message)
            got.append(ws.recv(timeout=5))
    return got


@pytest_twisted.ensureDeferred
async def test_websocket_messages_cross_the_gateway_both_ways(ws_gateway: Any) -> None:
    token = ws_gateway.token()
    got = await threads.deferToThread(_echo_session, ws_gateway.port, "/jwt/chat",
                                      {"Authorization": f"Bearer {token}"})
    assert got == ["hello /jwt/chat", "text é", b"\x00\x01binary\xff", b"x" * 2**20]
    await wait_for(lambda: ws_gateway.backend.live == 0, timeout=3)


def _denied(port: int) -> Any:
    try:
        with connect(f"ws://127.0.0.1:{port}/jwt/chat", proxy=None, open_timeout=5):
            return None
    except InvalidStatus as e:
        return e.response


@pytest_twisted.ensureDeferred
async def test_denied_upgrade_gets_the_plugins_answer_and_no_101(ws_gateway: Any) -> None:
    response = await threads.deferToThread(_denied, ws_gateway.port)
    assert response is not None, "the upgrade was accepted without a token"
    assert (response.status_code, response.body) == (401, b"Jwt is missing")
    await sleep(0.1)
    assert ws_gateway.backend.opened == 0


def _frame(payload: bytes, opcode: int = 1) -> bytes:
    """A masked client frame."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


@pytest_twisted.ensureDeferred
async def test_client_vanishing_mid_stream_closes_the_backend_connection(ws_gateway: Any) -> None:
    await sleep(0.1)
    baseline = open_fds()
    key = base64.b64encode(os.urandom(16)).decode()
    client = await raw_connect(ws_gateway.port)
    client.transport.write((f"GET /live HTTP/1.1\r\nHost: gw.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    await wait_for(lambda: b"hello /live" in client.buf, timeout=3)
    assert client.buf.startswith(b"HTTP/1.1 101 ")
    client.transport.write(_frame(b"are you there"))
    await wait_for(lambda: client.buf.count(b"are you there") == 1, timeout=3)
    assert ws_gateway.backend.live == 1
    client.transport.abortConnection()  # gone, no close frame
    await wait_for(lambda: ws_gateway.backend.live == 0, timeout=3)
    await sleep(0.2)
    assert open_fds() <= baseline + 1, (baseline, open_fds())


UPGRADE = ("GET {path} HTTP/1.1\r\nHost: gw.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: {version}\r\n\r\n")
SWITCHED = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")


@pytest_twisted.ensureDeferred
async def test_upgrade_refused_by_the_backend_is_not_a_tunnel(eng: Any) -> None:
    # The backend answers 426 (a version it does not speak), not 101. A
    # gateway that tunnelled anyway would pass the next bytes to the backend
    # unchecked: a request to a protected route, smuggled past the chain.
    eng.rec.respond = lambda rec: (b"HTTP/1.1 426 Upgrade Required\r\nSec-WebSocket-Version: 13\r\n"
                                   b"Content-Length: 0\r\n\r\n")
    res = await eng.send([UPGRADE.format(path="/ws", version="99").encode(),
                          b"GET /protected/admin HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n"], delay=0.2)
    got = [r.status for r in res.responses()]
    assert got[0] == 426, res.data
    assert got[1:] in ([], [401]), res.data
    assert b"/protected" not in eng.rec.data
    assert [r.target for r in eng.rec.requests] == [b"/ws"]


@pytest_twisted.ensureDeferred
async def test_denied_upgrade_with_frames_behind_it_sends_nothing_upstream(eng: Any) -> None:
    res = await eng.send(UPGRADE.format(path="/protected/ws", version="13").encode() + _frame(b"GET / HTTP/1.1")
                         + b"GET /protected/x HTTP/1.1\r\nHost: gw.test\r\n\r\n")
    assert [r.status for r in res.responses()][:1] == [401], res.data
    assert b"101" not in res.data.split(b"\r\n", 1)[0]
    assert eng.rec.data == b""


@pytest_twisted.ensureDeferred
async def test_bytes_sent_early_behind_an_admitted_upgrade_reach_the_backend_after_101(eng: Any) -> None:
    # a client may send its first frames right behind the upgrade request,
    # before the 101: they belong to the tunnel, not to a next request
    eng.rec.respond = lambda rec: SWITCHED
    early = _frame(b"early bird")
    client = await raw_connect(eng.port)
    client.transport.write(UPGRADE.format(path="/ws", version="13").encode() + early)
    await wait_for(lambda: b"\r\n\r\n" in client.buf, timeout=3)
    assert client.buf.startswith(b"HTTP/1.1 101 ")
    await wait_for(lambda: eng.rec.data.endswith(early), timeout=3)
    eng.rec.live.copy().pop().transport.write(b"\x81\x05hello")  # an unmasked server frame
    await wait_for(lambda: client.buf.endswith(b"\x81\x05hello"), timeout=3)
    client.transport.abortConnection()
    await wait_for(lambda: eng.rec.open == 0, timeout=3)
