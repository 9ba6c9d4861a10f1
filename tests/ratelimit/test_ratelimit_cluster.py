"""Rate limits counted on a real Redis Cluster (the session's
``redis_cluster``: 3 primaries, 3 replicas) by two real gateway processes
(``twist twistgw``) with ``ratelimitServer.redis.clustered: true``:

* exact counts while a bucket's slot is resharded under traffic, by hand
  (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE: the gateways follow
  ASK with ASKING, then MOVED) and with ``redis-cli --cluster reshard``;
* exact counts while a primary fails over under traffic: ``CLUSTER
  FAILOVER`` on its replica, and SIGKILL of the primary by pid (denyOnFail:
  true refuses while nobody serves the slot; the other slots count on);
* ``denyOnFail`` false and true while a slot has no node at all (its
  primary and its replica killed): admitted, or refused with 500, at once;
* a counter key of every bucket on the primary of its bucket's slot.

Blocking helpers (processes, threads): plain synchronous tests.
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import pytest_twisted
import yaml
from rl_helpers import WITH_AUTH, config, per, route
from twisted.internet import defer

from twistgw.config.errors import ConfigError
from twistgw.rediscluster import key_slot
from twistgw.testing import ChainTester

from support.process import TwistGateway
from support.rediscluster import RedisClusterServers

N = 20
HEADER = "x-bucket"


def settings(seed: str, deny: bool) -> dict[str, Any]:
    return {"ratelimitServer": {"denyOnFail": deny, "requestTimeout": "1s",
                                "redis": {"address": seed, "clustered": True}},
            "ratelimit": {"descriptors": [{"key": "bucket", "rateLimit": per(N, "HOUR")}]}}


def write_config(directory: Path, seed: str, deny: bool) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    options = {"ratelimit": {"rateLimits": [{"actions": [{"requestHeaders": {"headerName": HEADER,
                                                                             "descriptorKey": "bucket"}}]}]}}
    (directory / "gateway.yaml").write_text(config(options, routes=[route()], settings=settings(seed, deny),
                                                   redis=None))
    return str(directory)


def tag(bucket: str, key: str = "bucket") -> str:
    """The hash tag of a bucket's counters (twistgw:rl:{settings|d|bucket=NAME}|window)."""
    return f"settings|d|{key}={bucket}"


def bucket_in(slots: Callable[[int], bool], prefix: str) -> str:
    """A bucket name (``prefix`` and a number) whose slot satisfies ``slots``."""
    for i in range(200_000):
        name = f"{prefix}{i}"
        if slots(key_slot(tag(name))):
            return name
    raise AssertionError("no such bucket")


def ask(port: int, bucket: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/", headers={"Host": "a.example", HEADER: bucket})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


class Traffic:
    """Requests from 8 threads, over both gateways in turn; every answer
    recorded with its time, per bucket."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.answers: dict[str, list[tuple[float, int]]] = defaultdict(list)
        self._lock = threading.Lock()
        self._n = 0

    def one(self, bucket: str) -> int:
        with self._lock:
            self._n += 1
            port = self.ports[self._n % len(self.ports)]
        status = ask(port, bucket)
        with self._lock:
            self.answers[bucket].append((time.monotonic(), status))
        return status

    def send(self, buckets: list[str], each: int, pause: float = 0.0) -> None:
        """``each`` requests per bucket, interleaved."""
        def go(bucket: str) -> None:
            self.one(bucket)
            if pause:
                time.sleep(pause)
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(go, [b for _ in range(each) for b in buckets]))

    def until_counted(self, buckets: list[str], total: int, within: float = 30.0) -> None:
        """Until every bucket has ``total`` answers other than 500 (refusals while Redis failed)."""
        deadline = time.monotonic() + within
        while True:
            short = [b for b in buckets if self.counted(b) < total]
            if not short:
                return
            assert time.monotonic() < deadline, {b: self.statuses(b) for b in short}
            self.send(short, 1)

    def statuses(self, bucket: str) -> Counter[int]:
        return Counter(status for _, status in self.answers[bucket])

    def counted(self, bucket: str) -> int:
        found = self.statuses(bucket)
        return found[200] + found[429]

    def between(self, bucket: str, start: float, end: float) -> int:
        return sum(1 for t, _ in self.answers[bucket] if start <= t <= end)


def fresh_hour() -> None:
    left = 3600 - time.time() % 3600
    if left < 90:
        time.sleep(left + 0.1)


def counter_value(cluster: RedisClusterServers, bucket: str, key: str = "bucket") -> int:
    """The bucket's count in this hour's window, read on the primary of its slot."""
    owner = cluster.owner(key_slot(tag(bucket, key)))
    keys = cluster.run(owner, "KEYS", f"twistgw:rl:{{{tag(bucket, key)}}}|*").split()
    assert len(keys) == 1, (bucket, keys)
    return int(cluster.run(owner, "GET", keys[0]))


def assert_exact(traffic: Traffic, cluster: RedisClusterServers, buckets: list[str]) -> None:
    for bucket in buckets:
        found = traffic.statuses(bucket)
        assert found[200] == N and found[429] == 2 * N, (bucket, found)
        assert counter_value(cluster, bucket) == found[200] + found[429], bucket


@pytest.fixture(scope="module")
def gateways(redis_cluster_servers: RedisClusterServers, tmp_path_factory: Any) -> Iterator[list[TwistGateway]]:
    """Two gateway processes, one configuration: denyOnFail true (nothing admitted uncounted)."""
    tmp = tmp_path_factory.mktemp("rl-cluster")
    directory = write_config(tmp / "config", redis_cluster_servers.seed, deny=True)
    with TwistGateway(tmp, directory) as one, TwistGateway(tmp, directory) as two:
        yield [one, two]


def stats(cluster: RedisClusterServers, node: Any) -> str:
    return cluster.run(node, "INFO", "all")


def test_counters_live_on_their_slots_primary(redis_cluster: RedisClusterServers,
                                             gateways: list[TwistGateway]) -> None:
    """Buckets spread over every primary: each bucket's counter is one key,
    tagged by the bucket, on the primary of that slot; exact counts."""
    fresh_hour()
    primaries = [n for n in redis_cluster.live() if redis_cluster.role(n) == "master"]
    owners = redis_cluster.owners()
    buckets = [bucket_in(lambda s, p=p: owners[s] is p, f"spread{i}-") for p in primaries for i in (0, 1)]
    traffic = Traffic([g.port for g in gateways])
    traffic.send(buckets, 3 * N)
    assert_exact(traffic, redis_cluster, buckets)
    for primary in primaries:
        assert int(redis_cluster.run(primary, "DBSIZE")) == 2


def test_exact_while_a_slot_is_resharded_by_hand(redis_cluster: RedisClusterServers,
                                                 gateways: list[TwistGateway]) -> None:
    """A bucket's slot moves to another primary while both gateways count it
    (and three other buckets): ASK + ASKING while it migrates, MOVED after."""
    fresh_hour()
    for node in redis_cluster.live():
        redis_cluster.run(node, "CONFIG", "RESETSTAT")
    moving = bucket_in(lambda s: True, "moving")
    slot = key_slot(tag(moving))
    source = redis_cluster.owner(slot)
    target = redis_cluster.other_primary(source)
    others = [bucket_in(lambda s: s != slot, f"steady{i}-") for i in range(3)]
    traffic = Traffic([g.port for g in gateways])
    phases: dict[str, float] = {}

    def reshard() -> None:
        time.sleep(0.2)  # traffic first: the counter exists on the source when the migration starts

        def during() -> None:
            phases["migrating"] = time.monotonic()
            time.sleep(0.3)  # requests now: the key is on the source (served there), then ASK once moved
        redis_cluster.migrate_slot(slot, source, target, during=during)
        phases["moved"] = time.monotonic()

    mover = threading.Thread(target=reshard)
    mover.start()
    traffic.send([moving] + others, 3 * N, pause=0.04)
    mover.join()
    assert_exact(traffic, redis_cluster, [moving] + others)
    assert redis_cluster.owner(slot) is target
    assert traffic.between(moving, phases["migrating"], phases["moved"]) > 0  # counted while it moved
    assert sum(1 for t, _ in traffic.answers[moving] if t > phases["moved"]) > 0  # and after
    assert "errorstat_MOVED" in stats(redis_cluster, source)  # the gateways were told, and followed


def test_ask_path_while_new_counters_land_on_the_importing_node(redis_cluster: RedisClusterServers,
                                                                 gateways: list[TwistGateway]) -> None:
    """A slot half-migrated before its bucket's first request: the counter is
    created on the importing node (ASK, ASKING) and counted there exactly."""
    fresh_hour()
    for node in redis_cluster.live():
        redis_cluster.run(node, "CONFIG", "RESETSTAT")
    bucket = bucket_in(lambda s: True, "asked")
    slot = key_slot(tag(bucket))
    source = redis_cluster.owner(slot)
    target = redis_cluster.other_primary(source)
    traffic = Traffic([g.port for g in gateways])

    def during() -> None:
        traffic.send([bucket], 3 * N)
    redis_cluster.migrate_slot(slot, source, target, during=during)
    assert_exact(traffic, redis_cluster, [bucket])
    assert "cmdstat_asking:calls=" in stats(redis_cluster, target)
    assert "errorstat_ASK" in stats(redis_cluster, source)


def test_exact_across_redis_cli_reshard(redis_cluster: RedisClusterServers, gateways: list[TwistGateway]) -> None:
    """``redis-cli --cluster reshard`` of one slot (the source's first, which
    the bucket is picked to live in) while both gateways count."""
    fresh_hour()
    source = redis_cluster.other_primary(redis_cluster.live()[0])
    first = redis_cluster.first_slot(source)
    bucket = bucket_in(lambda s: s == first, "cli")
    target = redis_cluster.other_primary(source)
    traffic = Traffic([g.port for g in gateways])
    mover = threading.Thread(target=lambda: (time.sleep(0.3), redis_cluster.reshard(first, source, target)))
    mover.start()
    traffic.send([bucket], 3 * N, pause=0.02)
    mover.join()
    assert redis_cluster.owner(first) is target
    assert_exact(traffic, redis_cluster, [bucket])


def test_exact_across_cluster_failover(redis_cluster: RedisClusterServers, gateways: list[TwistGateway]) -> None:
    """CLUSTER FAILOVER on the replica of a bucket's primary while both
    gateways count: no increment lost, none twice."""
    fresh_hour()
    bucket = bucket_in(lambda s: True, "fo")
    primary = redis_cluster.owner(key_slot(tag(bucket)))
    replica = redis_cluster.replica_of(primary)
    owners = redis_cluster.owners()
    others = [bucket_in(lambda s: owners[s] is not primary, "fo-other")]
    traffic = Traffic([g.port for g in gateways])
    mover = threading.Thread(target=lambda: (time.sleep(0.3), redis_cluster.failover(replica)))
    mover.start()
    traffic.send([bucket] + others, 3 * N, pause=0.01)
    mover.join()
    assert redis_cluster.owner(key_slot(tag(bucket))) is replica
    assert_exact(traffic, redis_cluster, [bucket] + others)


def test_exact_across_a_killed_primary(redis_cluster: RedisClusterServers, gateways: list[TwistGateway]) -> None:
    """SIGKILL of a bucket's primary (by pid) between two requests, its counts
    replicated: with denyOnFail true the requests while nobody serves the slot
    are refused (500) and not counted; the replica takes over with the count;
    the other buckets count on throughout. Exactly N admitted everywhere."""
    fresh_hour()
    bucket = bucket_in(lambda s: True, "kill")
    primary = redis_cluster.owner(key_slot(tag(bucket)))
    replica = redis_cluster.replica_of(primary)
    owners = redis_cluster.owners()
    other = bucket_in(lambda s: owners[s] is not primary, "kill-other")
    traffic = Traffic([g.port for g in gateways])
    traffic.send([bucket, other], N // 2)
    assert redis_cluster.run(primary, "WAIT", "1", "2000") == "1"  # the replica has every increment
    redis_cluster.kill(primary)
    killed = time.monotonic()
    traffic.until_counted([bucket, other], 3 * N)
    assert traffic.statuses(bucket)[500] > 0  # the outage was seen...
    assert traffic.statuses(other)[500] == 0  # ...by that slot only
    assert redis_cluster.owner(key_slot(tag(bucket))) is replica
    assert traffic.between(other, killed, killed + 1.0) > 0
    assert_exact(traffic, redis_cluster, [bucket, other])


def test_deny_on_fail_while_a_slot_has_no_node(redis_cluster: RedisClusterServers, gateways: list[TwistGateway],
                                               tmp_path: Path) -> None:
    """A slot's primary and its replica both killed: nobody can serve it.
    denyOnFail true answers 500, denyOnFail false admits (and logs), both at
    once; buckets on other slots are counted exactly meanwhile."""
    fresh_hour()
    bucket = bucket_in(lambda s: True, "dead")
    primary = redis_cluster.owner(key_slot(tag(bucket)))
    replica = redis_cluster.replica_of(primary)
    owners = redis_cluster.owners()
    other = bucket_in(lambda s: owners[s] is not primary, "alive")
    open_directory = write_config(tmp_path / "open", redis_cluster.seed, deny=False)
    with TwistGateway(tmp_path, open_directory) as lenient:
        assert ask(lenient.port, other) == 200  # connected, the map read
        redis_cluster.kill(replica)
        redis_cluster.kill(primary)
        time.sleep(0.2)
        closed = Traffic([g.port for g in gateways])
        opened = Traffic([lenient.port])
        start = time.monotonic()
        closed.send([bucket], 10)
        opened.send([bucket], 10)
        assert time.monotonic() - start < 5.0  # at once, not a timeout per request (requestTimeout 1s)
        assert closed.statuses(bucket) == Counter({500: 10})
        assert opened.statuses(bucket) == Counter({200: 10})
        lenient.wait_log("admitting")
        closed.send([other], 3 * N)
        found = closed.statuses(other)
        assert found[200] == N - 1 and found[429] == 2 * N + 1, found  # one admitted by the lenient gateway
        assert counter_value(redis_cluster, other) == 3 * N + 1


@pytest.mark.parametrize("redis, where", [
    ({"address": "127.0.0.1:7000", "clustered": True, "db": 3},
     r"line \d+: Settings: spec\.ratelimitServer\.redis\.db: must be 0 with clustered: true \(a Redis Cluster"
     r" has only database 0 and refuses SELECT\), got 3"),
    ({"address": "127.0.0.1:7000", "clustered": "yes"},
     r"line \d+: Settings: spec\.ratelimitServer\.redis\.clustered: must be true or false, got a string"),
    ({"address": "127.0.0.1:7000", "cluster": True},
     r"line \d+: Settings: spec\.ratelimitServer\.redis\.cluster: unknown field 'cluster'"),
])
def test_clustered_needs_database_0(redis: dict[str, Any], where: str) -> None:
    """A cluster's settings are refused with the file, line, field and reason."""
    text = config({"ratelimitBasic": {"anonymousLimits": per(1, "HOUR")}}, redis=None, settings={
        "ratelimitServer": {"redis": redis}})
    with pytest.raises(ConfigError, match=r"^<string>: document \d+, " + where):
        ChainTester.from_yaml(text, WITH_AUTH)


def test_a_plain_client_on_a_cluster_says_to_set_clustered(redis_cluster: RedisClusterServers,
                                                           tmp_path: Path) -> None:
    """clustered left out, address a cluster node: a counter in a slot that
    node does not serve fails (denyOnFail decides) with Redis' MOVED and the
    hint, in the log. (Without clustered the keys carry no hash tag: which
    buckets fail depends on the window, so twelve are asked.)"""
    node = redis_cluster.owner(0)
    directory = tmp_path / "plain"
    directory.mkdir()
    options = {"ratelimit": {"rateLimits": [{"actions": [{"requestHeaders": {"headerName": HEADER,
                                                                             "descriptorKey": "bucket"}}]}]}}
    server = settings(node.address, deny=True)
    server["ratelimitServer"]["redis"] = {"address": node.address}
    (directory / "gateway.yaml").write_text(config(options, settings=server, redis=None))
    with TwistGateway(tmp_path, str(directory)) as gw:
        found = Counter(ask(gw.port, f"plain{i}") for i in range(12))
        assert found[500] > 0 and found[500] + found[200] == 12, found
        gw.wait_log("set ratelimitServer.redis.clustered: true")



EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster" / "gateway.yaml"


@pytest_twisted.ensureDeferred
async def test_the_operations_example(redis_cluster: RedisClusterServers) -> None:
    """docs/operations.md's examples/cluster/gateway.yaml loads as it is
    (twistgw check), and its Settings count exactly on the real cluster (the
    Service's address replaced by a node's; the test cluster has no password)."""
    out = subprocess.run([sys.executable, "-m", "twistgw", "check", str(EXAMPLE.parent)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    (settings_doc,) = [d for d in docs if d["kind"] == "Settings"]
    redis = settings_doc["spec"]["ratelimitServer"]["redis"]
    assert redis["clustered"] is True
    redis["address"] = redis_cluster.seed
    del redis["authSecretRef"]
    text = config({"ratelimitBasic": {"anonymousLimits": per(5, "HOUR")}}, redis=None,
                  settings=settings_doc["spec"])
    fresh_hour()
    tester = ChainTester.from_yaml(text, WITH_AUTH)
    try:
        found = await defer.gatherResults([defer.Deferred.fromCoroutine(tester.request("GET", "http://a.example/"))
                                           for _ in range(12)])
        assert [r.status for r in found] == [200] * 5 + [429] * 7
    finally:
        await tester.host.unconfigure()


def two_rules(seed: str, deny: bool) -> str:
    """Each request counts twice: by its x-bucket header, and in one shared bucket (generic_key=all)."""
    options = {"ratelimit": {"rateLimits": [
        {"actions": [{"requestHeaders": {"headerName": HEADER, "descriptorKey": "bucket"}}]},
        {"actions": [{"genericKey": {"descriptorValue": "all"}}]}]}}
    server = settings(seed, deny)
    server["ratelimit"]["descriptors"].append({"key": "generic_key", "value": "all",
                                               "rateLimit": per(1000, "HOUR")})
    return config(options, settings=server, redis=None)


async def statuses(tester: ChainTester, buckets: list[str]) -> list[int]:
    """One request per bucket, all in one reactor turn (one batch)."""
    found = await defer.gatherResults([defer.Deferred.fromCoroutine(
        tester.request("GET", "http://a.example/", headers={HEADER: b})) for b in buckets])
    return [r.status for r in found]


@pytest_twisted.ensureDeferred
async def test_one_turn_over_many_slots_and_noscript(redis_cluster: RedisClusterServers) -> None:
    """A turn's requests over twelve buckets (twelve slots, three primaries):
    one script call per slot, exact counts; after SCRIPT FLUSH on every
    primary each slot's call is sent again with EVAL, still exact."""
    fresh_hour()
    buckets = [f"turn{i}" for i in range(12)]
    tester = ChainTester.from_yaml(two_rules(redis_cluster.seed, True), WITH_AUTH)
    try:
        assert await statuses(tester, buckets * 2) == [200] * 24
        for node in redis_cluster.live():
            if redis_cluster.role(node) == "master":
                redis_cluster.run(node, "SCRIPT", "FLUSH")
        found = await statuses(tester, buckets * (N - 1))
        assert found == [200] * (12 * (N - 2)) + [429] * 12  # N per bucket, in arrival order
        assert [counter_value(redis_cluster, b) for b in buckets] == [N + 1] * 12
        assert counter_value(redis_cluster, "all", "generic_key") == 12 * (N + 1)
        evals = sum(int(line.split("calls=")[1].split(",")[0]) for node in redis_cluster.live()
                    for line in redis_cluster.run(node, "INFO", "commandstats").splitlines()
                    if line.startswith("cmdstat_eval:"))
        assert evals >= 3  # the script loaded again on each primary
    finally:
        await tester.host.unconfigure()


@pytest_twisted.ensureDeferred
async def test_a_request_over_a_dead_slot_and_a_live_one(redis_cluster: RedisClusterServers) -> None:
    """A request counted in two slots, one of them without a node: denyOnFail
    decides for it (500, or admitted), and its count in the live slot stands."""
    fresh_hour()
    shared_slot = key_slot(tag("all", "generic_key"))
    owners = redis_cluster.owners()
    dead = bucket_in(lambda s: owners[s] is not owners[shared_slot], "deadslot")
    primary = owners[key_slot(tag(dead))]
    assert primary is not None
    replica = redis_cluster.replica_of(primary)
    closed = ChainTester.from_yaml(two_rules(redis_cluster.seed, True), WITH_AUTH)
    opened = ChainTester.from_yaml(two_rules(redis_cluster.seed, False), WITH_AUTH)
    try:
        assert await statuses(closed, ["alive"]) == [200] and await statuses(opened, ["alive"]) == [200]
        redis_cluster.kill(replica)
        redis_cluster.kill(primary)
        assert await statuses(closed, [dead, "alive"]) == [500, 200]
        assert await statuses(opened, [dead, "alive"]) == [200, 200]
        assert counter_value(redis_cluster, "all", "generic_key") == 6  # every request counted there
    finally:
        await closed.host.unconfigure()
        await opened.host.unconfigure()
