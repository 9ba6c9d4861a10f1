"""OIDC sessions on a real Redis Cluster (the session's ``redis_cluster``:
3 primaries, 3 replicas), ``session.redis.options.clustered: true``: real
logins (the scripted browser against the real oidc-provider, through a
real gateway process; no Chromium: the browser tests cover its side), each
session its own key on the primary of its slot, logins and sessions that
survive ``CLUSTER FAILOVER`` and a primary killed by pid (503 while nobody
serves the slot, never a new login), and logout deleting the key.

Blocking helpers: plain synchronous tests.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from oidc_support import Browser, Idp, client, login, seen
from stack import EchoBackend, _auth_config, _oidc, _route, app_head, b64

from twistgw.rediscluster import key_slot

from support.process import TwistGateway
from support.rediscluster import RedisClusterServers

PREFIX = "twistgw-cluster:"
COOKIE = "k_session"


class ClusterStack:
    """The provider (issuer a, client app), an echo backend, and a gateway
    whose /redis/ route keeps its sessions in the cluster."""

    def __init__(self, tmp: Path, seed: str) -> None:
        self.backend = EchoBackend()
        directory = tmp / "config"
        directory.mkdir()
        self.gateway = TwistGateway(tmp, str(directory))
        self.gw = f"http://localhost:{self.gateway.port}"
        self.host = f"localhost:{self.gateway.port}"
        self.idp = Idp(tmp, [("a", [client("app", "app-secret-1", [f"{self.gw}/redis/callback"],
                                           [f"{self.gw}/bye"])])]).start()
        session = (f"          redis: {{options: {{host: '{seed}', clustered: true}}, cookieName: {COOKIE},"
                   f" keyPrefix: '{PREFIX}'}}\n")
        (directory / "config.yaml").write_text(app_head(self.backend.port) + _route("redis", "oidc-cluster") + _auth_config("oidc-cluster", _oidc(
            self.idp.issuers["a"], "app", "redis", self.gw, session)) + f"""---
apiVersion: v1
kind: Secret
metadata: {{name: app-secret, namespace: default}}
type: extauth.solo.io/oauth
data: {{client-secret: {b64(b"app-secret-1")}}}
""")
        self.gateway.__enter__()

    def url(self, path: str) -> str:
        return self.gw + path

    def close(self) -> None:
        for step in (lambda: self.gateway.__exit__(None, None, None), self.idp.stop, self.backend.close):
            try:
                step()
            except Exception:  # noqa: BLE001 (teardown goes on)
                pass


@pytest.fixture(scope="module")
def stack(redis_cluster_servers: RedisClusterServers, tmp_path_factory: Any) -> Iterator[ClusterStack]:
    s = ClusterStack(tmp_path_factory.mktemp("oidc-cluster"), redis_cluster_servers.seed)
    yield s
    s.close()


def session_key(browser: Browser, stack: ClusterStack) -> str:
    session_id = browser.cookies("localhost")[COOKIE]
    return f"{PREFIX}session:{hashlib.sha256(session_id.encode()).hexdigest()}"


def logged_in(stack: ClusterStack) -> Browser:
    b = Browser()
    _, final = login(b, stack.url("/redis/start"), stack.host)
    assert seen(final)["x-user-email"] == ["alice@example.org"]
    return b


def test_sessions_are_keys_on_their_slots_primaries(redis_cluster: RedisClusterServers,
                                                    stack: ClusterStack) -> None:
    """Six logins: six session keys, each on the primary of its slot (the
    login in progress was a key too, redeemed once: GETDEL), each served."""
    browsers = [logged_in(stack) for _ in range(6)]
    owners = redis_cluster.owners()
    for b in browsers:
        key = session_key(b, stack)
        assert redis_cluster.run(owners[key_slot(key)], "EXISTS", key) == "1"
        assert seen(b.get(stack.url("/redis/again")))["x-user-email"] == ["alice@example.org"]
    assert len({owners[key_slot(session_key(b, stack))].port for b in browsers}) >= 2
    total = sum(int(redis_cluster.run(n, "DBSIZE")) for n in redis_cluster.live()
                if redis_cluster.role(n) == "master")
    assert total == 6 + 6  # a session and its sid index per login; no login left behind


def test_a_session_survives_cluster_failover(redis_cluster: RedisClusterServers, stack: ClusterStack) -> None:
    """CLUSTER FAILOVER of the primary holding a session, while the browser
    keeps using it: every request admitted, the same session after."""
    b = logged_in(stack)
    key = session_key(b, stack)
    primary = redis_cluster.owner(key_slot(key))
    replica = redis_cluster.replica_of(primary)
    assert redis_cluster.run(replica, "CLUSTER", "FAILOVER") == "OK"
    deadline = time.monotonic() + 20
    while redis_cluster.role(replica) != "master":
        assert seen(b.get(stack.url("/redis/during")))["x-user-email"] == ["alice@example.org"]
        assert time.monotonic() < deadline
    for i in range(5):
        assert seen(b.get(stack.url(f"/redis/after{i}")))["x-user-email"] == ["alice@example.org"]
    redis_cluster.wait_ok()
    assert redis_cluster.owner(key_slot(key)) is replica
    assert session_key(b, stack) == key  # the same session, not a new login
    new = logged_in(stack)  # and logins go on
    assert session_key(new, stack) != key


def test_a_session_survives_a_killed_primary(redis_cluster: RedisClusterServers, stack: ClusterStack) -> None:
    """SIGKILL of the primary holding a session (replicated): 503 while
    nobody serves its slot (the store fails closed), then the replica serves
    the same session; no login is asked for."""
    b = logged_in(stack)
    key = session_key(b, stack)
    primary = redis_cluster.owner(key_slot(key))
    replica = redis_cluster.replica_of(primary)
    assert redis_cluster.run(primary, "WAIT", "1", "2000") == "1"
    redis_cluster.kill(primary)
    statuses = []
    deadline = time.monotonic() + 30
    while True:
        r = b.get(stack.url("/redis/while"))
        statuses.append(r.status)
        if r.status == 200:
            break
        assert r.status == 503, (r, r.body[:200])
        assert time.monotonic() < deadline, statuses
        time.sleep(0.1)
    assert 503 in statuses
    assert seen(b.get(stack.url("/redis/after")))["x-user-email"] == ["alice@example.org"]
    assert redis_cluster.owner(key_slot(key)) is replica
    assert session_key(b, stack) == key


def test_logout_deletes_the_key(redis_cluster: RedisClusterServers, stack: ClusterStack) -> None:
    b = logged_in(stack)
    key = session_key(b, stack)
    cookie = b.cookies("localhost")[COOKIE]
    assert b.get(stack.url("/redis/logout")).status == 302
    assert redis_cluster.run(redis_cluster.owner(key_slot(key)), "EXISTS", key) == "0"
    thief = Browser()
    thief.cookies("localhost")[COOKIE] = cookie
    assert thief.get(stack.url("/redis/x")).status == 302  # a new login, not the old session

