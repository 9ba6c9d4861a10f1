"""``ratelimitServer.redis`` with a password (and an ACL user) from a
Secret, TLS verified against a CA from a Secret, and Redis Cluster refused
by name, against a real ``redis-server`` on loopback."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from rl_helpers import WITH_AUTH, config, fresh_window, per
from twisted.internet import defer

from twistgw.config.errors import ConfigError
from twistgw.sdk.testing import ChainTester

from support.pki import TestCA
from support.redis import RedisServer

LIMIT = {"ratelimitBasic": {"anonymousLimits": per(2, "HOUR")}}


def secret(name: str, **data: bytes) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "gloo-system"},
            "data": {k.replace("_", "."): base64.b64encode(v).decode() for k, v in data.items()}}


async def statuses(tester: ChainTester, n: int) -> list[int]:
    found = await defer.gatherResults([defer.Deferred.fromCoroutine(tester.request("GET", "http://a.example/"))
                                       for _ in range(n)])
    return [r.status for r in found]


def with_redis(redis: dict[str, Any], *extra: dict[str, Any]) -> str:
    settings = {"ratelimitServer": {"denyOnFail": True, "requestTimeout": "1s", "redis": redis}}
    return config(LIMIT, settings=settings, redis=None, extra=list(extra))


@pytest_twisted.ensureDeferred
async def test_password_and_acl_user_from_a_secret(tmp_path: Path) -> None:
    fresh_window(3600, 30)
    server = RedisServer(tmp_path / "r", args=["--requirepass", "s3cret", "--user", "gw", "on", ">gwpw",
                                               "~twistgw:*", "+@all"]).start()
    testers = []
    try:
        for name, data in (("by-password", {"password": b"s3cret"}),
                           ("by-user", {"username": b"gw", "password": b"gwpw"}),
                           ("wrong", {"password": b"nope"})):
            testers.append(ChainTester.from_yaml(with_redis(
                {"address": server.address, "authSecretRef": {"name": name, "namespace": "gloo-system"}},
                secret(name, **data)), WITH_AUTH))
        password, user, wrong = testers
        assert await statuses(password, 3) == [200, 200, 429]
        # the ACL user counts in the same keys (allowed by ~twistgw:*): already over
        assert await statuses(user, 1) == [429]
        assert await statuses(wrong, 1) == [500]  # denyOnFail: AUTH refused → fail closed
        assert server.command("--user", "gw", "--pass", "gwpw", "--no-auth-warning", "DBSIZE") == "1"
    finally:
        for tester in testers:
            await tester.host.unconfigure()
        server.stop()


@pytest_twisted.ensureDeferred
async def test_tls_with_a_ca_from_a_secret(tmp_path: Path) -> None:
    fresh_window(3600, 30)
    ca, other = TestCA(), TestCA("another CA")
    directory = tmp_path / "tls"
    directory.mkdir()
    cert, key = ca.issue("localhost", dns=["localhost"]).write(directory, "server")
    (directory / "ca.crt").write_bytes(ca.pem)
    server = RedisServer(tmp_path / "r", tls=(cert, key, directory / "ca.crt")).start()
    testers = []
    try:
        for name, pem in (("good-ca", ca.pem), ("other-ca", other.pem)):
            testers.append(ChainTester.from_yaml(with_redis(
                {"address": f"localhost:{server.tls_port}", "tls": {"caSecretRef": {"name": name}}},
                secret(name, ca_crt=pem)), WITH_AUTH))
        # the same CA from a file (tls.caFile)
        testers.append(ChainTester.from_yaml(with_redis(
            {"address": f"localhost:{server.tls_port}", "tls": {"caFile": str(directory / "ca.crt")}}), WITH_AUTH))
        good, wrong, from_file = testers
        assert await statuses(good, 3) == [200, 200, 429]
        assert await statuses(wrong, 1) == [500]  # the server's certificate is not from that CA
        assert await statuses(from_file, 1) == [429]  # the same Redis, the same counters: verified, counted
    finally:
        for tester in testers:
            await tester.host.unconfigure()
        server.stop()


@pytest_twisted.ensureDeferred
async def test_a_flushed_script_is_loaded_again(tmp_path: Path) -> None:
    """EVALSHA first; after SCRIPT FLUSH (or a Redis restart) Redis answers
    NOSCRIPT and the batch is sent again with EVAL: nothing is lost."""
    fresh_window(3600, 30)
    server = RedisServer(tmp_path / "r").start()
    tester = ChainTester.from_yaml(with_redis({"address": server.address}), WITH_AUTH)
    try:
        assert await statuses(tester, 1) == [200]
        assert "cmdstat_evalsha:calls=1," in server.command("INFO", "commandstats")
        server.command("SCRIPT", "FLUSH")
        assert await statuses(tester, 2) == [200, 429]  # counted in order across the retry
        stats = server.command("INFO", "commandstats")
        assert "cmdstat_evalsha:calls=2," in stats and "cmdstat_eval:calls=2," in stats, stats
        assert await statuses(tester, 1) == [429]  # EVALSHA works again
        assert "cmdstat_evalsha:calls=3," in server.command("INFO", "commandstats")
    finally:
        await tester.host.unconfigure()
        server.stop()


@pytest.mark.parametrize(("redis", "expected"), [
    ({"address": "127.0.0.1:6379", "clustered": "yes"}, "clustered: must be true or false"),
    ({"address": "127.0.0.1:6379", "authSecretRef": {"name": "absent"}}, "no Secret gloo-system/absent"),
    ({"address": "127.0.0.1:6379", "authSecretRef": "pw"}, "must be a Secret reference"),
    ({"address": "127.0.0.1:6379", "tls": {"caFile": "missing.pem"}}, "cannot read missing.pem"),
    ({"address": "127.0.0.1:6379", "tls": {"verify": False}}, "tls.verify"),
])
def test_refused_redis_settings(redis: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        ChainTester.from_yaml(with_redis(redis), WITH_AUTH)


def test_a_secret_without_password_is_refused() -> None:
    text = with_redis({"address": "127.0.0.1:6379", "authSecretRef": {"name": "empty"}}, secret("empty", other=b"x"))
    with pytest.raises(ConfigError, match="no non-empty data.password"):
        ChainTester.from_yaml(text, WITH_AUTH)
