"""What AUTH and TLS mean on a Redis Cluster, against a real one (3
primaries of Debian's redis-server, TLS only for clients, the cluster bus in
TLS, a password, and an ACL user ``gw`` that may not run ``CLUSTER SHARDS``):

* every node's connection logs in (``AUTH gw ...``) and is TLS, each node
  verified by the name it is reached by (the address the slot map gives:
  here 127.0.0.1, in the certificates' subjectAltName); the seed reached by
  a name its certificate does not hold, or a CA that did not sign it, is
  refused;
* a user refused ``CLUSTER SHARDS`` gets the map from ``CLUSTER SLOTS``
  (what a Redis before 7 answers), whose ports are the TLS ones;
* a wrong password fails at once with Redis' reason; the rate limits count
  exactly over all of it (``authSecretRef``, ``tls.caSecretRef``, ``clustered``).
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import pytest_twisted
from rl_helpers import WITH_AUTH, config, fresh_window, per
from twisted.internet import defer, reactor

from twistgw.redis import RedisConfig, RedisUnavailable
from twistgw.rediscluster import RedisCluster, key_slot
from twistgw.sdk.testing import ChainTester

from support.pki import TestCA
from support.rediscluster import RedisClusterServers, result

PASSWORD = "cluster-secret"
USER, USER_PASSWORD = "gw", "gw-secret"


class TlsCluster:
    def __init__(self, tmp: Path) -> None:
        self.ca = TestCA()
        tmp.mkdir(parents=True, exist_ok=True)
        cert, key = self.ca.issue("127.0.0.1", ips=["127.0.0.1"]).write(tmp, "node")
        bus = self.ca.issue("redis-node", client=True).write(tmp, "bus")
        ca = tmp / "ca.crt"
        ca.write_bytes(self.ca.pem)
        self.servers = RedisClusterServers(tmp / "cluster", primaries=3, replicas=0, password=PASSWORD, args=(
            "--requirepass", PASSWORD, "--masterauth", PASSWORD,
            "--user", USER, "on", f">{USER_PASSWORD}", "~*", "+@all", "-cluster|shards"), tls=(cert, key, ca), tls_client=bus).start()

    def seed(self, host: str = "127.0.0.1") -> tuple[str, int]:
        node = self.servers.nodes[0]
        assert node.tls_port is not None
        return host, node.tls_port


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: Any) -> Iterator[TlsCluster]:
    cluster = TlsCluster(tmp_path_factory.mktemp("tls-cluster"))
    try:
        yield cluster
    finally:
        cluster.servers.stop()


def cluster_client(tls: TlsCluster, user: str | None = USER, password: str = USER_PASSWORD,
                   ca: bytes | None = None, host: str = "127.0.0.1") -> RedisCluster:
    seed_host, port = tls.seed(host)
    return RedisCluster(reactor, RedisConfig(seed_host, port, username=user, password=password, tls=True,
                                             ca_pem=ca or tls.ca.pem, clustered=True), timeout=2.0)


@pytest_twisted.ensureDeferred
async def test_acl_user_over_tls_reads_cluster_slots(tls_cluster: TlsCluster) -> None:
    c = cluster_client(tls_cluster)
    try:
        keys = [f"tls:{i}" for i in range(60)]
        assert await defer.gatherResults([c.execute("SET", k, k) for k in keys]) == [b"OK"] * 60
        assert await defer.gatherResults([c.execute("GET", k) for k in keys]) == [k.encode() for k in keys]
        assert await c.execute("ACL", "WHOAMI", slot=0) == USER.encode()
        tls_ports = {n.tls_port for n in tls_cluster.servers.nodes}
        assert {int(c.primary(key_slot(k)).rpartition(":")[2]) for k in keys} <= tls_ports  # type: ignore[union-attr]
        assert len({c.primary(key_slot(k)) for k in keys}) == 3
        assert c.redirects == {"MOVED": 0, "ASK": 0, "TRYAGAIN": 0}
        stats = tls_cluster.servers.run(tls_cluster.servers.nodes[0], "INFO", "commandstats")
        assert "cmdstat_cluster|slots:" in stats and "errorstat_NOPERM" in tls_cluster.servers.run(
            tls_cluster.servers.nodes[0], "INFO", "errorstats")  # SHARDS refused, SLOTS asked
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_the_default_user_reads_cluster_shards(tls_cluster: TlsCluster) -> None:
    c = cluster_client(tls_cluster, user=None, password=PASSWORD)
    try:
        assert await c.execute("INCR", "{shards}n") >= 1
        assert await c.execute("ACL", "WHOAMI", slot=0) == b"default"
        primary = c.primary(key_slot("{shards}n"))
        assert primary is not None and int(primary.rpartition(":")[2]) in {n.tls_port for n in
                                                                          tls_cluster.servers.nodes}
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_a_wrong_password_fails_at_once(tls_cluster: TlsCluster) -> None:
    c = cluster_client(tls_cluster, password="wrong")
    try:
        found = await result(c, "GET", "k")
        assert isinstance(found, RedisUnavailable) and "WRONGPASS" in str(found), found
        assert "wrong" not in str(found).replace("WRONGPASS", "")  # never the password
        start = time.monotonic()
        again = await result(c, "GET", "k")
        assert isinstance(again, RedisUnavailable) and time.monotonic() - start < 0.1
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_each_node_is_verified_by_the_name_it_is_reached_by(tls_cluster: TlsCluster, tmp_path: Path) -> None:
    """The seed reached as "localhost", its certificate naming only
    127.0.0.1: refused (no map is read); a CA that did not sign the nodes'
    certificates: refused."""
    wrong = cluster_client(tls_cluster, ca=TestCA().pem)
    by_name = cluster_client(tls_cluster, host="localhost")
    try:
        found = await result(wrong, "GET", "k")
        assert isinstance(found, RedisUnavailable) and "certificate" in str(found).lower(), found
        found = await result(by_name, "GET", "k")
        assert isinstance(found, RedisUnavailable) and "localhost" in str(found), found
    finally:
        await wrong.close()
        await by_name.close()


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


@pytest_twisted.ensureDeferred
async def test_rate_limits_count_exactly_over_tls_and_acl(tls_cluster: TlsCluster) -> None:
    host, port = tls_cluster.seed()
    secrets = [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "redis-auth", "namespace": "gloo-system"},
                "data": {"username": b64(USER), "password": b64(USER_PASSWORD)}},
               {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "redis-ca", "namespace": "gloo-system"},
                "data": {"ca.crt": b64(tls_cluster.ca.pem)}}]
    redis = {"address": f"{host}:{port}", "clustered": True, "authSecretRef": {"name": "redis-auth"},
             "tls": {"caSecretRef": {"name": "redis-ca"}}}
    text = config({"ratelimitBasic": {"anonymousLimits": per(7, "HOUR")}}, redis=None, extra=secrets,
                  settings={"ratelimitServer": {"redis": redis, "requestTimeout": "2s", "denyOnFail": True}})
    fresh_window(3600, 30)
    tester = ChainTester.from_yaml(text, WITH_AUTH)
    try:
        found = await defer.gatherResults([defer.Deferred.fromCoroutine(tester.request("GET", "http://a.example/"))
                                           for _ in range(20)])
        assert [r.status for r in found] == [200] * 7 + [429] * 13
    finally:
        await tester.host.unconfigure()
