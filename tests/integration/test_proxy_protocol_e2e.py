"""The PROXY protocol over real sockets (issue 32, item 3): a ``twist
twistgw`` with a Gloo Gateway listener that has ``useProxyProto: true``, a
real backend, and rate limits by address counted in a real Redis.

Every bad header of the unit table (tests/unit/test_proxy_header.py), and
the issue's own (``PROXY TCP4 999.1.1.1 ...``, a 200-digit address), is
closed without a byte of answer and reaches nothing: not the backend, not
``X-Forwarded-For``, not the access log, not a rate-limit key. Good headers,
v1 and v2, whole or one byte per TCP segment, make their source the client
address. A header that never completes is cut off at the listener's head
timeout (the Gateway's ``requestHeadersTimeout``: 1 s here).

Blocking helpers (processes, sockets): plain synchronous tests.
"""

from __future__ import annotations

import http.server
import ipaddress
import json
import socket
import threading
import time
from typing import Any, Iterator

import pytest
import yaml

from support.process import TwistGateway, free_port
from support.proxyheaders import BAD, GOOD, v2
from support.redis import RedisServer
from test_gateway_kind_e2e import NS, _Echo, gateway, upstream, vs

GET = b"GET /seen HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n"
HEAD_TIMEOUT = 1.0


class _Counting(_Echo):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        _Counting.seen.append({k.lower(): v for k, v in self.headers.items()})
        super().do_GET()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("proxyproto")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    with RedisServer(tmp / "redis") as redis:
        settings = {"apiVersion": "gateway.vendor.io/v1", "kind": "Settings",
                    "metadata": {"name": "default", "namespace": NS},
                    "spec": {"ratelimitServer": {"redis": {"address": redis.address}}}}
        limit = {"ratelimitBasic": {"anonymousLimits": {"requestsPerUnit": 100000, "unit": "HOUR"}}}
        docs = [settings, upstream(server.server_address[1]), vs("a", ["*"], options=limit),
                gateway("behind-lb", port, {"options": {"httpConnectionManagerSettings": {
                    "requestHeadersTimeout": f"{HEAD_TIMEOUT:g}s"}}}, useProxyProto=True)]
        d = tmp / "config"
        d.mkdir()
        (d / "gw.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
        with TwistGateway(tmp, str(d)) as gw:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            gw.proxied_port = port
            gw.redis = redis
            yield gw
    server.shutdown()
    server.server_close()


def _exchange(port: int, pieces: list[bytes], gap: float = 0.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for piece in pieces:
                s.sendall(piece)
                if gap:
                    time.sleep(gap)
        except OSError:
            pass  # closed while we wrote: what a refused header gets
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def _seen(answer: bytes) -> dict[str, str]:
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    result: dict[str, str] = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    return result


@pytest.mark.parametrize("header, words", BAD, ids=[str(i) for i in range(len(BAD))])
def test_a_bad_header_is_closed_unanswered(env: Any, header: bytes, words: str) -> None:
    before = len(_Counting.seen)
    assert _exchange(env.proxied_port, [header + GET]) == b""
    assert len(_Counting.seen) == before


@pytest.mark.parametrize("header, expected", GOOD, ids=[str(i) for i in range(len(GOOD))])
def test_a_good_header_names_the_client(env: Any, header: bytes, expected: Any) -> None:
    seen = _seen(_exchange(env.proxied_port, [header + GET]))
    client = expected[0][0] if expected is not None else "127.0.0.1"  # LOCAL / UNKNOWN: the proxy's own
    assert seen["x-forwarded-for"] == client and seen["x-real-ip"] == client


@pytest.mark.parametrize("header", [b"PROXY TCP4 203.0.113.77 127.0.0.1 56324 8080\r\n", v2()], ids=["v1", "v2"])
def test_a_header_in_one_byte_segments(env: Any, header: bytes) -> None:
    pieces = [header[i:i + 1] for i in range(len(header))] + [GET]
    seen = _seen(_exchange(env.proxied_port, pieces, gap=0.002))
    assert seen["x-forwarded-for"] in ("203.0.113.77", "198.51.100.9")


def test_a_slow_header_is_cut_off_at_the_head_timeout(env: Any) -> None:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", env.proxied_port), timeout=10) as s:
        s.sendall(b"PROXY TCP4 203.0.113.")
        assert s.recv(1) == b""  # closed, unanswered
    assert HEAD_TIMEOUT * 0.8 < time.monotonic() - started < HEAD_TIMEOUT + 2


def test_no_bad_address_reaches_a_rate_limit_key_or_the_log(env: Any) -> None:
    for header, _ in BAD:
        _exchange(env.proxied_port, [header + GET])
    _seen(_exchange(env.proxied_port, [b"PROXY TCP4 203.0.113.99 127.0.0.1 1 8080\r\n" + GET]))
    env.wait_log('"client": "203.0.113.99"')
    keys = env.redis.command("KEYS", "twistgw:rl:*")
    assert "ip=203.0.113.99|" in keys
    addresses = {k.split("ip=", 1)[1].split("|", 1)[0] for k in keys.split() if "ip=" in k}
    for address in addresses:
        assert str(ipaddress.ip_address(address)) == address, address
    log = env.log_text()
    for bad in ("999.1.1.1", "1" * 60, "0x7f", "fe80::1%eth0", "01.2.3.4"):
        assert bad not in keys and f'"client": "{bad}' not in log
    assert all(_is_address(s["x-forwarded-for"]) for s in _Counting.seen)


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False
