"""Real gateway processes (``twist twistgw``) sharing one real
``redis-server``: a limit of N admits exactly N of 3N concurrent requests
whether they are spread over two gateways or over ``--workers 2``; a client
cannot choose its bucket with forwarding headers; ``localRatelimit`` needs
no Redis at all.

Blocking helpers (processes, threads): plain synchronous tests.
"""

from __future__ import annotations

import http.client
import http.server
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import pytest
from rl_helpers import config, per, route, upstream

from support.process import TwistGateway
from support.redis import RedisServer

N = 12


def get(port: int, headers: dict[str, str] | None = None, path: str = "/") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=dict({"Host": "a.example"}, **(headers or {})))
        response = conn.getresponse()
        response.read()
        if response.status == 429:
            assert response.getheader("x-envoy-ratelimited") == "true"
        return response.status
    finally:
        conn.close()


def burst(ports: list[int], count: int) -> list[int]:
    """``count`` requests at once, spread round robin over ``ports``."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(lambda i: get(ports[i % len(ports)]), range(count)))


def fresh_hour() -> None:
    left = 3600 - time.time() % 3600
    if left < 60:
        time.sleep(left + 0.1)


def write_config(tmp_path: Path, text: str) -> str:
    directory = tmp_path / "config"
    directory.mkdir(exist_ok=True)
    (directory / "gateway.yaml").write_text(text)
    return str(directory)


BASIC = {"ratelimitBasic": {"anonymousLimits": per(N, "HOUR")}}


def test_two_gateways_one_redis_admit_exactly_n(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as redis:
        directory = write_config(tmp_path, config(BASIC, redis=redis.address))
        with TwistGateway(tmp_path, directory) as one, TwistGateway(tmp_path, directory) as two:
            fresh_hour()
            found = burst([one.port, two.port], 3 * N)
            assert found.count(200) == N and found.count(429) == 2 * N, found
            (key,) = redis.command("KEYS", "twistgw:rl:*").split()
            assert redis.command("GET", key) == str(3 * N)
            assert get(one.port) == 429 and get(two.port) == 429


def test_two_workers_one_redis_admit_exactly_n(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as redis:
        directory = write_config(tmp_path, config(BASIC, redis=redis.address))
        with TwistGateway(tmp_path, directory, args=("--workers", "2")) as gw:
            fresh_hour()
            found = burst([gw.port], 3 * N)
            assert found.count(200) == N and found.count(429) == 2 * N, found


def test_forwarding_headers_cannot_pick_the_bucket(tmp_path: Path) -> None:
    """By address means the TCP peer: X-Forwarded-For, X-Real-IP and
    Forwarded from the client are removed before any plugin runs."""
    with RedisServer(tmp_path / "redis") as redis:
        directory = write_config(tmp_path, config({"ratelimitBasic": {"anonymousLimits": per(2, "HOUR")}},
                                                  redis=redis.address))
        with TwistGateway(tmp_path, directory) as gw:
            fresh_hour()
            spoofed = [get(gw.port, {"X-Forwarded-For": f"203.0.113.{i}", "X-Real-IP": f"203.0.113.{i}",
                                     "Forwarded": f"for=203.0.113.{i}"}) for i in range(4)]
            assert spoofed == [200, 200, 429, 429]
            (key,) = redis.command("KEYS", "twistgw:rl:*").split()
            assert "ip=127.0.0.1|" in key and "203.0.113" not in key


def test_local_ratelimit_without_redis(tmp_path: Path) -> None:
    directory = write_config(tmp_path, config({"localRatelimit": {"maxTokens": 5, "tokensPerFill": 5,
                                                                  "fillInterval": "1h"}}, redis=None))
    with TwistGateway(tmp_path, directory) as gw:
        found = burst([gw.port], 15)
        assert found.count(200) == 5 and found.count(429) == 10, found


def test_redis_killed_under_a_gateway(tmp_path: Path) -> None:
    """denyOnFail false (Gloo's default): a gateway whose Redis died admits
    (within requestTimeout), logs it, and counts again once Redis is back."""
    redis = RedisServer(tmp_path / "redis").start()
    try:
        text = config({"ratelimitBasic": {"anonymousLimits": per(2, "HOUR")}},
                      settings={"ratelimitServer": {"requestTimeout": "200ms"}}, redis=redis.address)
        with TwistGateway(tmp_path, write_config(tmp_path, text)) as gw:
            fresh_hour()
            assert [get(gw.port) for _ in range(3)] == [200, 200, 429]
            redis.stop()
            start = time.monotonic()
            assert [get(gw.port) for _ in range(3)] == [200, 200, 200]
            assert time.monotonic() - start < 2.0
            gw.wait_log("\"what\": \"admitting\"")  # logged (a JSON log line)
            redis.start()
            time.sleep(2.0)
            assert [get(gw.port) for _ in range(3)] == [200, 200, 429]  # a fresh Redis, counting again
    finally:
        redis.stop()


class _Backend(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.send_header("X-Ratelimit-Remaining", "from-the-backend")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def backend() -> Iterator[int]:
    """A real HTTP backend on loopback (the standard library's server, in a thread)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Backend)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def head(port: int) -> tuple[int, dict[str, list[str]]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/", headers={"Host": "a.example"})
        response = conn.getresponse()
        response.read()
        found: dict[str, list[str]] = {}
        for name, value in response.getheaders():
            found.setdefault(name.lower(), []).append(value)
        return response.status, found
    finally:
        conn.close()


def _forwarded(options: dict[str, Any], port: int, **kw: Any) -> str:
    backend = upstream("backend")
    backend["spec"]["static"]["hosts"][0]["port"] = port
    return config(routes=[route(options=options, upstream="gloo-system/backend")], extra=[backend], **kw)


def test_draft_headers_on_admitted_and_refused_responses(tmp_path: Path, backend: int) -> None:
    """enableXRatelimitHeaders: every response carries x-ratelimit-*, the
    forwarded ones (after the backend's own headers) as well as the 429."""
    with RedisServer(tmp_path / "redis") as redis:
        text = _forwarded({"ratelimitBasic": {"anonymousLimits": per(2, "HOUR")}}, backend,
                          settings={"ratelimitServer": {"enableXRatelimitHeaders": True}}, redis=redis.address)
        with TwistGateway(tmp_path, write_config(tmp_path, text)) as gw:
            fresh_hour()
            answers = [head(gw.port) for _ in range(3)]
    assert [status for status, _ in answers] == [200, 200, 429]
    for (_, headers), left in zip(answers, (["from-the-backend", "1"], ["from-the-backend", "0"], ["0"]), strict=True):
        assert headers["x-ratelimit-limit"] == ["2, 2;w=3600"]
        assert headers["x-ratelimit-remaining"] == left
        assert 0 < int(headers["x-ratelimit-reset"][0]) <= 3600
    assert "x-envoy-ratelimited" not in answers[0][1]


def test_local_draft_headers_and_none_unless_enabled(tmp_path: Path, backend: int) -> None:
    local = {"localRatelimit": {"maxTokens": 2, "tokensPerFill": 2, "fillInterval": "1h"}}
    text = _forwarded(local, backend, settings={"ratelimitServer": {"enableXRatelimitHeaders": True}}, redis=None)
    with TwistGateway(tmp_path, write_config(tmp_path, text)) as gw:
        answers = [head(gw.port) for _ in range(3)]
    assert [(s, h["x-ratelimit-limit"], h["x-ratelimit-remaining"][-1]) for s, h in answers] == [
        (200, ["2"], "1"), (200, ["2"], "0"), (429, ["2"], "0")]
    plain = tmp_path / "plain"
    plain.mkdir()
    with TwistGateway(plain, write_config(plain, _forwarded(local, backend, redis=None))) as gw:
        status, headers = head(gw.port)
    assert status == 200 and "x-ratelimit-limit" not in headers
    assert headers["x-ratelimit-remaining"] == ["from-the-backend"]
