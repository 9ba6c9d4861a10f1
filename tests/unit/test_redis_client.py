"""twistgw.redis, the gateway's Redis client, against a real ``redis-server``
(Debian's, started per test on loopback): pipelining in order, a Redis
that hangs (SIGSTOP) and comes back (SIGCONT), one killed and restarted,
AUTH (password, ACL user) good and bad, SELECT, and TLS with a good CA, the
wrong CA and a certificate without subjectAltName.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task

from twistgw.redis import RedisClient, RedisConfig, RedisPool, RedisUnavailable, ReplyError

from support.pki import TestCA
from support.redis import RedisServer


async def sleep(seconds: float) -> None:
    await task.deferLater(reactor, seconds, lambda: None)


async def until_connected(client: RedisClient, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not client.connected:
        assert time.monotonic() < deadline, "never connected"
        await sleep(0.02)


@pytest.fixture
def redis(tmp_path: Path) -> Any:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


def local(server: RedisServer, **kw: Any) -> RedisConfig:
    return RedisConfig("127.0.0.1", server.port, **kw)


@pytest_twisted.ensureDeferred
async def test_pipelined_replies_come_back_in_order_in_one_write(redis: RedisServer) -> None:
    client = RedisClient(reactor, local(redis), timeout=2.0)
    try:
        await until_connected(client)
        got: list[Any] = []
        for i in range(200):  # one reactor turn: one write
            client.send(("INCRBY", "n", 1), got.append)
            client.send(("SET", f"k{i}", f"v{i}"), lambda _: None)
            client.send(("GET", f"k{i}"), got.append)
        client.send(("HGET", "n", "x"), got.append)  # an error reply: that command only
        final = await client.execute("GET", "n")
        counts, values = got[0:400:2], got[1:400:2]
        assert counts == list(range(1, 201))
        assert values == [f"v{i}".encode() for i in range(200)]
        assert isinstance(got[400], ReplyError) and "WRONGTYPE" in str(got[400])
        assert final == b"200" and client.connected
        with pytest.raises(ReplyError):
            await client.execute("INCR", "k1")
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_select_db(redis: RedisServer) -> None:
    client = RedisClient(reactor, local(redis, db=3), timeout=2.0)
    try:
        await client.execute("SET", "where", "db3")
    finally:
        await client.close()
    assert redis.command("-n", "3", "GET", "where") == "db3"
    assert redis.command("GET", "where") == ""


@pytest_twisted.ensureDeferred
async def test_frozen_redis_times_out_then_recovers(redis: RedisServer) -> None:
    client = RedisClient(reactor, local(redis), timeout=0.3)
    try:
        assert await client.execute("PING") == b"PONG"
        redis.freeze()
        try:
            start = time.monotonic()
            with pytest.raises(RedisUnavailable, match="no answer from Redis .* within 0.3s"):
                await client.execute("PING")
            assert 0.25 < time.monotonic() - start < 1.0
            assert not client.connected  # the hung connection was dropped
        finally:
            redis.thaw()
        await until_connected(client)
        assert await client.execute("PING") == b"PONG"
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_killed_redis_fails_fast_and_is_used_again_when_restarted(redis: RedisServer) -> None:
    client = RedisClient(reactor, local(redis), timeout=0.5)
    try:
        await client.execute("SET", "a", "1")
        redis.stop()
        await sleep(0.1)
        for _ in range(3):
            start = time.monotonic()
            with pytest.raises(RedisUnavailable):
                await client.execute("GET", "a")
            assert time.monotonic() - start < 0.6
        redis.start()  # same port, empty
        await until_connected(client, 3.0)
        assert await client.execute("GET", "a") is None
        assert await client.execute("INCR", "a") == 1
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_auth_password_and_acl_user(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "r", args=["--requirepass", "s3cret", "--user", "app", "on", ">apppw",
                                               "~app:*", "+@all"]).start()
    try:
        good = RedisClient(reactor, local(server, password="s3cret"))
        user = RedisClient(reactor, local(server, username="app", password="apppw"))
        bad = RedisClient(reactor, local(server, password="wrong"), timeout=0.5)
        none = RedisClient(reactor, local(server), timeout=0.5)
        try:
            assert await good.execute("SET", "x", "1") == b"OK"
            assert await user.execute("SET", "app:x", "2") == b"OK"
            with pytest.raises(ReplyError, match="NOPERM"):
                await user.execute("SET", "other", "2")  # the ACL applies: logged in as app
            with pytest.raises(RedisUnavailable, match="refused the connection's login: WRONGPASS") as caught:
                await bad.execute("GET", "x")
            assert "wrong" not in str(caught.value)  # never the password
            with pytest.raises(RedisUnavailable):
                await none.execute("GET", "x")  # no AUTH: the PING handshake gets NOAUTH
            assert not bad.connected and not none.connected
        finally:
            for c in (good, user, bad, none):
                await c.close()
        assert "password=" not in repr(local(server, password="s3cret"))
    finally:
        server.stop()


def tls_server(tmp_path: Path, ca: TestCA, dns: list[str]) -> RedisServer:
    directory = tmp_path / "tls"
    directory.mkdir(exist_ok=True)
    cert, key = ca.issue("localhost", dns=dns).write(directory, "server")
    (directory / "ca.crt").write_bytes(ca.pem)
    return RedisServer(tmp_path / "r", tls=(cert, key, directory / "ca.crt")).start()


@pytest_twisted.ensureDeferred
async def test_tls_verified_by_name(tmp_path: Path) -> None:
    ca, other = TestCA(), TestCA("another CA")
    server = tls_server(tmp_path, ca, ["localhost"])
    try:
        assert server.tls_port is not None
        config = RedisConfig("localhost", server.tls_port, tls=True, ca_pem=ca.pem)
        good = RedisClient(reactor, config, timeout=1.0)
        wrong_ca = RedisClient(reactor, RedisConfig("localhost", server.tls_port, tls=True, ca_pem=other.pem),
                               timeout=1.0)
        wrong_name = RedisClient(reactor, RedisConfig("127.0.0.1", server.tls_port, tls=True, ca_pem=ca.pem),
                                 timeout=1.0)
        try:
            assert await good.execute("SET", "t", "over tls") == b"OK"
            assert await good.execute("GET", "t") == b"over tls"
            for client in (wrong_ca, wrong_name):
                with pytest.raises(RedisUnavailable):
                    await client.execute("GET", "t")
                assert not client.connected
        finally:
            for c in (good, wrong_ca, wrong_name):
                await c.close()
    finally:
        server.stop()


@pytest_twisted.ensureDeferred
async def test_tls_certificate_without_subject_alt_name_is_refused(tmp_path: Path) -> None:
    ca = TestCA()
    server = tls_server(tmp_path, ca, [])  # CN=localhost only
    try:
        assert server.tls_port is not None
        client = RedisClient(reactor, RedisConfig("localhost", server.tls_port, tls=True, ca_pem=ca.pem),
                             timeout=1.0)
        try:
            with pytest.raises(RedisUnavailable, match="subjectAltName|name"):
                await client.execute("PING")
            assert not client.connected
        finally:
            await client.close()
    finally:
        server.stop()


@pytest_twisted.ensureDeferred
async def test_pool_uses_one_connection_per_turn_and_all_of_them(redis: RedisServer) -> None:
    pool = RedisPool(reactor, local(redis), size=3)
    try:
        for client in pool.clients:
            await until_connected(client)
        turns = []
        for _ in range(3):
            ds = [pool.execute("CLIENT", "ID") for _ in range(5)]
            turns.append(set(await defer.gatherResults(ds)))
        assert all(len(ids) == 1 for ids in turns), turns  # one connection per turn
        assert len(set().union(*turns)) == 3  # and each of the three in turn
    finally:
        await pool.close()


@pytest_twisted.ensureDeferred
async def test_pool_skips_connections_that_are_down(redis: RedisServer) -> None:
    """Connections come back one by one (each its own back-off): a turn
    goes to one that has a connection, never to one still waiting."""
    pool = RedisPool(reactor, local(redis), size=4, timeout=1.0)
    try:
        for client in pool.clients:
            await until_connected(client)
        ids = [await client.execute("CLIENT", "ID") for client in pool.clients]
        for killed in ids[1:]:
            redis.command("CLIENT", "KILL", "ID", str(killed))
        while any(c.connected for c in pool.clients[1:]):
            await sleep(0.005)
        # three of four in their back-off now: every turn must go to the fourth
        found = [await pool.execute("CLIENT", "ID") for _ in range(3)]
        assert found == [ids[0]] * 3
    finally:
        await pool.close()
