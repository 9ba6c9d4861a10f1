"""The OIDC RedisStore on twistgw.redis against a real ``redis-server``:
sessions saved and read back, the reads of one reactor turn answered in
order, a Redis over TLS (``socketType: TLS``), and a Redis that is gone
(StoreDown, which the flow answers with 503)."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from twistgw_oidc._cookies import CookieOptions
from twistgw_oidc._options import RedisSpec, SessionSpec
from twistgw_oidc._session import RedisPools, RedisStore, Session, StoreDown

from support.pki import TestCA
from support.redis import RedisServer


def id_token(sub: str) -> str:
    payload = base64.urlsafe_b64encode(json.dumps({"sub": sub, "sid": f"sid-{sub}"}).encode()).rstrip(b"=")
    return f"e30.{payload.decode()}.sig"


def store(redis: RedisSpec, pools: RedisPools) -> RedisStore:
    spec = SessionSpec(CookieOptions(3600, True, True, "/", None, "Lax"), "redis", "sid", None, redis, "t:", True,
                       0.0)
    return RedisStore(spec, pools, lambda: reactor)


def session(sub: str) -> Session:
    now = time.time()
    return Session("binding", id_token(sub), f"at-{sub}", None, now + 300, now, {"sub": sub, "sid": f"sid-{sub}"})


@pytest.fixture
def redis(tmp_path: Path) -> Any:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest_twisted.ensureDeferred
async def test_sessions_saved_and_read_in_one_turn(redis: RedisServer) -> None:
    pools = RedisPools()
    s = store(RedisSpec("127.0.0.1", redis.port, 1, 2), pools)
    try:
        for i in range(20):
            await s.save(f"id{i}", session(f"user{i}"))
        # 40 reads in one reactor turn (20 known, 20 unknown), answered in order
        found = await defer.gatherResults([s.load(f"id{i % 20}" if i < 20 else f"unknown{i}") for i in range(40)])
        assert [x.claims["sub"] if x else None for x in found] == [f"user{i}" for i in range(20)] + [None] * 20
        assert redis.command("-n", "1", "TTL", redis.command("-n", "1", "KEYS", "t:session:*").split()[0]) != "-1"
        assert len(await s.delete_sid("sid-user3")) == 1
        assert await s.load("id3") is None
        await s.put_login("L", {"state": "x"})
        assert await s.take_login("L") == {"state": "x"}
        assert await s.take_login("L") is None  # used once
    finally:
        await defer.gatherResults(pools.close())


@pytest_twisted.ensureDeferred
async def test_tls_socket_type(tmp_path: Path) -> None:
    ca = TestCA()
    directory = tmp_path / "tls"
    directory.mkdir()
    cert, key = ca.issue("localhost", dns=["localhost"]).write(directory, "server")
    (directory / "ca.crt").write_bytes(ca.pem)
    server = RedisServer(tmp_path / "r", tls=(cert, key, directory / "ca.crt")).start()
    pools = RedisPools()
    try:
        assert server.tls_port is not None
        good = store(RedisSpec("localhost", server.tls_port, 0, 1, True, ca.pem), pools)
        await good.save("abc", session("tls-user"))
        loaded = await good.load("abc")
        assert loaded is not None and loaded.claims["sub"] == "tls-user"
        wrong = store(RedisSpec("localhost", server.tls_port, 0, 1, True, TestCA("other").pem), pools)
        with pytest.raises(StoreDown, match="TLS"):
            await wrong.load("abc")
    finally:
        await defer.gatherResults(pools.close())
        server.stop()


@pytest_twisted.ensureDeferred
async def test_redis_gone_is_store_down(redis: RedisServer) -> None:
    pools = RedisPools()
    s = store(RedisSpec("127.0.0.1", redis.port, 0, 1), pools)
    try:
        await s.save("x", session("u"))
        redis.stop()
        await defer.Deferred.fromCoroutine(_sleep(0.1))
        start = time.monotonic()
        with pytest.raises(StoreDown, match=f"Redis 127.0.0.1:{redis.port}"):
            await s.load("x")
        assert time.monotonic() - start < 2.5
    finally:
        await defer.gatherResults(pools.close())


async def _sleep(seconds: float) -> None:
    from twisted.internet import task

    await task.deferLater(reactor, seconds, lambda: None)
