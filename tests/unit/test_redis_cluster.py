"""twistgw.rediscluster against a real Redis Cluster (the session's
``redis_cluster``: 3 primaries and 3 replicas of Debian's redis-server on
loopback): slots as CLUSTER KEYSLOT says, each command at its slot's
primary, MOVED after a slot moved, ASK and ASKING while it moves, TRYAGAIN,
a redirection loop cut short, a primary killed (its replica takes over) and
a manual failover, and what happens without a cluster or without a seed.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task, threads

from twistgw.redis import RedisConfig, RedisUnavailable, ReplyError
from twistgw.rediscluster import RedisCluster, connect, key_slot

from support.redis import RedisServer
from support.rediscluster import RedisClusterServers, result


async def sleep(seconds: float) -> None:
    await task.deferLater(reactor, seconds, lambda: None)


async def blocking(fn: Callable[..., Any], *args: Any) -> Any:
    """A blocking helper (redis-cli, processes) in a thread: the reactor keeps running."""
    return await threads.deferToThread(fn, *args)


def client(servers: RedisClusterServers, timeout: float = 1.0, **kw: Any) -> RedisCluster:
    host, port = servers.seed.split(":")
    return RedisCluster(reactor, RedisConfig(host, int(port), clustered=True), timeout, **kw)


async def until(check: Callable[[], Any], within: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + within
    while not await defer.maybeDeferred(check):
        assert time.monotonic() < deadline, f"not within {within}s: {what}"
        await sleep(0.05)


@pytest_twisted.ensureDeferred
async def test_slots_agree_with_cluster_keyslot(redis_cluster: RedisClusterServers) -> None:
    """key_slot against the cluster's own CLUSTER KEYSLOT for 300 keys, hash tags among them."""
    c = client(redis_cluster)
    try:
        rng = random.Random(36)
        keys = [f"k{rng.random()}" for _ in range(200)] + [f"{{tag{i % 7}}}:{i}" for i in range(50)]
        keys += ["", "{}", "{a}{b}", "a{b}c", "élan", "twistgw:rl:{basic|vs|r|ip=127.0.0.1}|1700000000"]
        keys += [bytes(rng.randrange(256) for _ in range(12)).decode("latin-1") for _ in range(44)]
        answers = await defer.gatherResults([c.execute("CLUSTER", "KEYSLOT", k, slot=0) for k in keys])
        assert answers == [key_slot(k) for k in keys]
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_each_command_goes_to_its_slots_primary(redis_cluster: RedisClusterServers) -> None:
    c = client(redis_cluster)
    try:
        keys = [f"key:{i}" for i in range(300)]
        assert await defer.gatherResults([c.execute("SET", k, k) for k in keys]) == [b"OK"] * 300
        assert c.redirects == {"MOVED": 0, "ASK": 0, "TRYAGAIN": 0}  # the map was right: no redirection
        assert await defer.gatherResults([c.execute("GET", k) for k in keys]) == [k.encode() for k in keys]
        # every primary holds its slots' keys, and only those
        for node in redis_cluster.live():
            if redis_cluster.role(node) == "master":
                held = int(redis_cluster.run(node, "DBSIZE"))
                assert held == sum(1 for k in keys if c.primary(key_slot(k)) == node.address), node.address
        assert c.connected and c.refreshes == 1
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_moved_after_the_slot_moved(redis_cluster: RedisClusterServers) -> None:
    """A slot migrated to another primary: the next command is answered MOVED,
    follows it at once (the right value), and the map is read again."""
    c = client(redis_cluster)
    try:
        await c.execute("SET", "moving", "v1")
        slot = key_slot("moving")
        source = redis_cluster.owner(slot)
        target = redis_cluster.other_primary(source)
        await blocking(redis_cluster.migrate_slot, slot, source, target)
        assert await c.execute("GET", "moving") == b"v1"
        assert c.redirects["MOVED"] == 1
        assert c.primary(slot) == target.address  # that slot at once
        await until(lambda: c.refreshes >= 2, what="the map read again")
        assert c.primary(slot) == target.address
        assert await c.execute("INCR", "{moving}n") == 1 and c.redirects["MOVED"] == 1  # straight there now
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_ask_while_the_slot_migrates(redis_cluster: RedisClusterServers) -> None:
    """MIGRATING on the source, IMPORTING on the target: a key still on the
    source is served there; a key that is not (new, or moved already) is
    answered ASK, and sent to the target after ASKING, in the same write."""
    c = client(redis_cluster)
    try:
        await c.execute("SET", "{mig}old", "here")
        slot = key_slot("{mig}old")
        source = redis_cluster.owner(slot)
        target = redis_cluster.other_primary(source)
        sid, tid = await blocking(redis_cluster.node_id, source), await blocking(redis_cluster.node_id, target)
        await blocking(redis_cluster.run, target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", sid)
        await blocking(redis_cluster.run, source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", tid)
        assert await c.execute("GET", "{mig}old") == b"here"  # still on the source
        assert c.redirects["ASK"] == 0
        assert await c.execute("INCRBY", "{mig}new", 5) == 5   # not on the source: ASK, then the target
        assert c.redirects["ASK"] == 1
        assert await c.execute("INCRBY", "{mig}new", 5) == 10  # the map is unchanged: ASK again
        assert c.redirects["ASK"] == 2 and c.primary(slot) == source.address
        assert (await blocking(redis_cluster.run, source, "EXISTS", "{mig}new")).startswith("ASK ")  # not there
        await blocking(redis_cluster.run, source, "MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000",
                       "KEYS", "{mig}old")
        assert await c.execute("GET", "{mig}old") == b"here"   # moved: ASK to the target
        for node in (target, source):
            await blocking(redis_cluster.run, node, "CLUSTER", "SETSLOT", str(slot), "NODE", tid)
        assert await c.execute("GET", "{mig}new") == b"10"     # MOVED now, and the map follows
        await until(lambda: c.primary(slot) == target.address, what="the target in the map")
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_tryagain_while_a_multi_key_commands_keys_are_split(redis_cluster: RedisClusterServers) -> None:
    """A script over two keys of a slot, one of them migrated already: TRYAGAIN
    (nothing ran); sent again 20 ms later, it runs once the migration is done."""
    c = client(redis_cluster)
    script = "return redis.call('INCR', KEYS[1]) + redis.call('INCR', KEYS[2])"
    try:
        await defer.gatherResults([c.execute("SET", "{try}a", 10), c.execute("SET", "{try}b", 20)])
        slot = key_slot("{try}a")
        source = redis_cluster.owner(slot)
        target = redis_cluster.other_primary(source)
        sid, tid = await blocking(redis_cluster.node_id, source), await blocking(redis_cluster.node_id, target)
        await blocking(redis_cluster.run, target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", sid)
        await blocking(redis_cluster.run, source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", tid)
        await blocking(redis_cluster.run, source, "MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000",
                       "KEYS", "{try}a")
        d = c.execute("EVAL", script, 2, "{try}a", "{try}b", slot=slot)
        await sleep(0.03)
        await blocking(redis_cluster.run, source, "MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000",
                       "KEYS", "{try}b")
        assert await d == 32  # once: 11 + 21
        assert c.redirects["TRYAGAIN"] >= 1
        for node in (target, source):
            await blocking(redis_cluster.run, node, "CLUSTER", "SETSLOT", str(slot), "NODE", tid)
        assert await c.execute("GET", "{try}a") == b"11"
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_a_redirection_loop_is_cut_short(redis_cluster: RedisClusterServers) -> None:
    """A half-made migration (MIGRATING on the source, the target never told
    to import): the source says ASK, the target MOVED back, forever. The
    command fails after 5 redirections (RedisUnavailable); other slots work."""
    c = client(redis_cluster)
    try:
        slot = key_slot("{loop}k")
        source = redis_cluster.owner(slot)
        target = redis_cluster.other_primary(source)
        await blocking(redis_cluster.run, source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING",
                       await blocking(redis_cluster.node_id, target))
        try:
            found = await result(c, "GET", "{loop}k")
            assert isinstance(found, RedisUnavailable), found
            assert "more than 5 redirections" in str(found)
            assert c.redirects["ASK"] + c.redirects["MOVED"] == 5
            assert await c.execute("SET", "{elsewhere}k", 1) == b"OK"
        finally:
            await blocking(redis_cluster.run, source, "CLUSTER", "SETSLOT", str(slot), "STABLE")
        assert await c.execute("GET", "{loop}k") is None
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_a_killed_primary_is_replaced_by_its_replica(redis_cluster: RedisClusterServers) -> None:
    """SIGKILL of the primary of a key's slot: its commands fail at once
    (RedisUnavailable, not after a timeout) while nobody serves the slot;
    other slots go on; within a second or so of the replica's promotion the
    client finds it, with the key replicated before the kill."""
    c = client(redis_cluster, timeout=0.5)
    try:
        await c.execute("SET", "{kill}k", "kept")
        slot = key_slot("{kill}k")
        primary = redis_cluster.owner(slot)
        replica = redis_cluster.replica_of(primary)
        assert await blocking(redis_cluster.run, primary, "WAIT", "1", "2000") == "1"  # on the replica too
        other = next(f"{{o{i}}}" for i in range(100) if c.primary(key_slot(f"{{o{i}}}")) != primary.address)
        await blocking(redis_cluster.kill, primary)
        start = time.monotonic()
        failed = 0
        while True:
            found = await result(c, "GET", "{kill}k")
            if found == b"kept":
                break
            assert isinstance(found, RedisUnavailable), found
            failed += 1
            assert await c.execute("INCR", other) >= 1  # the other slots are served all along
            assert time.monotonic() - start < 20, "never served again"
            await sleep(0.05)
        assert failed > 0
        assert c.primary(slot) == replica.address
        assert await c.execute("INCR", "{kill}n") == 1
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_manual_failover_loses_no_command(redis_cluster: RedisClusterServers) -> None:
    """CLUSTER FAILOVER on a replica while INCRs flow: every one succeeds
    once (the old primary answers MOVED once it is a replica)."""
    c = client(redis_cluster)
    try:
        slot = key_slot("{fo}n")
        primary = redis_cluster.owner(slot)
        replica = redis_cluster.replica_of(primary)
        done = threads.deferToThread(redis_cluster.failover, replica)
        sent = 0
        while not done.called or sent < 50:
            found = await defer.gatherResults([c.execute("INCR", "{fo}n") for _ in range(5)])
            assert all(isinstance(n, int) for n in found)
            sent += 5
            await sleep(0.01)
        await done
        assert await c.execute("GET", "{fo}n") == str(sent).encode()
        await until(lambda: c.primary(slot) == replica.address, what="the new primary in the map")
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_commands_sent_before_the_map_wait_for_it(redis_cluster: RedisClusterServers) -> None:
    c = client(redis_cluster)
    try:
        found = await defer.gatherResults([c.execute("INCR", f"early{i % 3}") for i in range(30)])
        assert sorted(found) == sorted(list(range(1, 11)) * 3)
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_no_seed_fails_at_once(unused_port: int) -> None:
    c = RedisCluster(reactor, RedisConfig("127.0.0.1", unused_port, clustered=True), timeout=1.0)
    try:
        first = await result(c, "GET", "k")
        assert isinstance(first, RedisUnavailable), first
        start = time.monotonic()
        again = await result(c, "GET", "k")
        assert isinstance(again, RedisUnavailable) and "no slot map" in str(again), again
        assert time.monotonic() - start < 0.1  # during the back-off: at once
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_a_server_that_is_not_a_cluster(tmp_path: Path) -> None:
    """clustered: true against a plain redis-server: refused with the reason."""
    with RedisServer(tmp_path / "plain") as plain:
        c = RedisCluster(reactor, RedisConfig("127.0.0.1", plain.port, clustered=True), timeout=1.0)
        try:
            found = await result(c, "GET", "k")
            assert isinstance(found, RedisUnavailable), found
            assert "cluster support disabled" in str(found) and "not a Redis Cluster node" in str(found)
        finally:
            await c.close()


@pytest_twisted.ensureDeferred
async def test_a_plain_client_on_a_cluster_node_sees_moved(redis_cluster: RedisClusterServers) -> None:
    """Without clustered the one node answers MOVED for the slots it does not
    serve: an error reply (the callers say to set clustered: true)."""
    pool = connect(reactor, RedisConfig("127.0.0.1", redis_cluster.nodes[0].port), 1.0)
    try:
        found = [await result(pool, "GET", f"k{i}") for i in range(20)]
        assert any(isinstance(f, ReplyError) and str(f).startswith("MOVED ") for f in found)
    finally:
        await pool.close()


def test_database_other_than_0_is_refused() -> None:
    with pytest.raises(ValueError, match="only database 0"):
        RedisCluster(reactor, RedisConfig("127.0.0.1", 1, db=2, clustered=True))
