"""twistgw.redisslots, Redis Cluster's arithmetic without I/O: the CRC16 of
the cluster specification, hash tags, the slot maps of ``CLUSTER SHARDS``
and ``CLUSTER SLOTS`` (replies as hiredis parses them, recorded from Redis
7.0's redis-server), and ``MOVED``/``ASK`` parsing. That the slots agree
with a real server's ``CLUSTER KEYSLOT`` is checked against the real cluster
in tests/unit/test_redis_cluster.py.
"""

from __future__ import annotations

import pytest

from twistgw.redisslots import Redirect, SlotRange, key_slot, parse_redirect, parse_shards, parse_slots

from support.trial import TestCase


def crc16(data: bytes) -> int:
    """CRC16-CCITT (XMODEM: polynomial 0x1021, from 0), bit by bit as the cluster specification gives it."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def node(port: int, role: str, health: str = "online", tls_port: int | None = None, endpoint: str = "127.0.0.1",
         hostname: str | None = None) -> list[object]:
    out: list[object] = [b"id", b"%040d" % port, b"port", port]
    if tls_port is not None:
        out += [b"tls-port", tls_port]
    out += [b"ip", b"127.0.0.1", b"endpoint", endpoint.encode()]
    if hostname is not None:
        out += [b"hostname", hostname.encode()]
    return out + [b"role", role.encode(), b"replication-offset", 72156, b"health", health.encode()]


#: CLUSTER SHARDS of a 3 × 2 cluster, as redis-server 7.0.15 answers it (ids shortened)
SHARDS = [
    [b"slots", [10923, 16383], b"nodes", [node(7003, "master"), node(7006, "replica", "loading")]],
    [b"slots", [0, 5460], b"nodes", [node(7001, "master"), node(7004, "replica")]],
    [b"slots", [5461, 10922], b"nodes", [node(7002, "master"), node(7005, "replica")]],
]

#: CLUSTER SLOTS of the same cluster (Redis before 7 answers only this one)
SLOTS_REPLY = [
    [0, 5460, [b"127.0.0.1", 7001, b"a" * 40, []], [b"127.0.0.1", 7004, b"d" * 40, []]],
    [5461, 10922, [b"127.0.0.1", 7002, b"b" * 40, []]],
    [10923, 16383, [b"127.0.0.1", 7003, b"c" * 40, []]],
]


class TestKeySlot(TestCase):
    def test_the_specifications_check_value(self) -> None:
        """CRC16-CCITT (XMODEM) of "123456789" is 0x31C3 (the cluster specification's own check)."""
        assert key_slot("123456789") == 0x31C3 % 16384 == 12739

    @pytest.mark.parametrize(("key", "slot"), [
        ("foo", 12182), ("bar", 5061), ("", 0),
        ("user1000", 3443), ("élan", 7954), ("123456789", 12739), ("foo{}{bar}", 8363), ("foo{{bar}}zap", 4015),
    ])
    def test_known_slots(self, key: str, slot: int) -> None:
        """Values CLUSTER KEYSLOT answers (redis-cli against 7.0.15); str keys hash as UTF-8."""
        assert key_slot(key) == slot
        assert key_slot(key.encode("utf-8")) == slot

    @pytest.mark.parametrize(("key", "hashed"), [
        ("{user1000}.following", "user1000"),   # the specification's examples
        ("{user1000}.followers", "user1000"),
        ("foo{}{bar}", "foo{}{bar}"),           # an empty tag: the whole key
        ("foo{{bar}}zap", "{bar"),              # from the first { to the first } after it
        ("foo{bar}{zap}", "bar"),               # the first tag only
        ("{", "{"), ("}{", "}{"), ("a{b", "a{b"),
        ("twistgw:rl:{basic|vs|r|ip=1.2.3.4}|1700000000", "basic|vs|r|ip=1.2.3.4"),
    ])
    def test_hash_tags(self, key: str, hashed: str) -> None:
        assert key_slot(key) == crc16(hashed.encode()) % 16384

    def test_crc16_as_the_specification_writes_it(self) -> None:
        """binascii.crc_hqx is the specification's CRC16: a bitwise one agrees on many keys."""
        for i in range(2000):
            key = f"k{i}:{i * 7919}".encode()
            assert key_slot(key) == crc16(key) % 16384

    def test_a_tag_puts_keys_in_one_slot(self) -> None:
        slots = {key_slot(f"{{bucket}}|{window}") for window in range(1000)}
        assert slots == {key_slot("bucket")}
        assert len({key_slot(f"bucket|{window}") for window in range(1000)}) > 900  # without: spread


class TestMaps(TestCase):
    def test_shards(self) -> None:
        assert sorted(parse_shards(SHARDS, "127.0.0.1", tls=False), key=lambda r: r.low) == [
            SlotRange(0, 5460, ("127.0.0.1", 7001)), SlotRange(5461, 10922, ("127.0.0.1", 7002)),
            SlotRange(10923, 16383, ("127.0.0.1", 7003))]

    def test_shards_several_ranges_tls_and_hostnames(self) -> None:
        reply = [[b"slots", [0, 99, 200, 299], b"nodes", [
            node(7001, "replica"), node(7002, "master", tls_port=8002, endpoint="redis-0.redis.svc",
                                         hostname="redis-0.redis.svc")]]]
        assert parse_shards(reply, "seed", tls=True) == [SlotRange(0, 99, ("redis-0.redis.svc", 8002)),
                                                        SlotRange(200, 299, ("redis-0.redis.svc", 8002))]
        assert parse_shards(reply, "seed", tls=False)[0].node == ("redis-0.redis.svc", 7002)

    def test_a_failed_primary_serves_nothing(self) -> None:
        """Killed, marked failed, its replica not promoted yet: nobody serves its slots."""
        reply = [[b"slots", [0, 5460], b"nodes", [node(7001, "master", "failed"), node(7004, "replica")]]]
        assert parse_shards(reply, "127.0.0.1", tls=False) == [SlotRange(0, 5460, None)]

    def test_after_the_failover(self) -> None:
        reply = [[b"slots", [0, 5460], b"nodes", [node(7001, "replica", "failed"), node(7004, "master")]]]
        assert parse_shards(reply, "127.0.0.1", tls=False) == [SlotRange(0, 5460, ("127.0.0.1", 7004))]

    def test_unknown_endpoint(self) -> None:
        """"?": the node has no address of the preferred type; the ip is used; "" is the node asked."""
        reply = [[b"slots", [0, 1], b"nodes", [node(7001, "master", endpoint="?")]],
                 [b"slots", [2, 3], b"nodes", [node(7002, "master", endpoint="")]]]
        assert parse_shards(reply, "10.0.0.9", tls=False) == [SlotRange(0, 1, ("127.0.0.1", 7001)),
                                                             SlotRange(2, 3, ("10.0.0.9", 7002))]

    def test_slots(self) -> None:
        assert parse_slots(SLOTS_REPLY, "127.0.0.1") == [
            SlotRange(0, 5460, ("127.0.0.1", 7001)), SlotRange(5461, 10922, ("127.0.0.1", 7002)),
            SlotRange(10923, 16383, ("127.0.0.1", 7003))]
        assert parse_slots([[0, 9, [b"", 7001]], [10, 19, [b"?", 7002]], [20, 29, [None, 7003]]], "seed") == [
            SlotRange(0, 9, ("seed", 7001)), SlotRange(10, 19, None), SlotRange(20, 29, None)]

    @pytest.mark.parametrize("reply", [
        b"OK", [[b"slots"]], [[b"slots", [0], b"nodes", []]], [[b"slots", [5, 2], b"nodes", []]],
        [[b"slots", [0, 16384], b"nodes", []]], [[b"slots", [b"0", b"1"], b"nodes", []]],
    ])
    def test_bad_shards(self, reply: object) -> None:
        with pytest.raises(ValueError):
            parse_shards(reply, "h", tls=False)

    @pytest.mark.parametrize("reply", [b"OK", [[0, 1]], [[0, 1, b"x"]], [[2, 1, [b"h", 1]]]])
    def test_bad_slots(self, reply: object) -> None:
        with pytest.raises(ValueError):
            parse_slots(reply, "h")


class TestRedirects(TestCase):
    @pytest.mark.parametrize(("text", "expected"), [
        ("MOVED 3999 127.0.0.1:6381", Redirect("MOVED", 3999, "127.0.0.1", 6381)),
        ("ASK 3999 127.0.0.1:6381", Redirect("ASK", 3999, "127.0.0.1", 6381)),
        ("MOVED 0 redis-1.redis.svc:6379", Redirect("MOVED", 0, "redis-1.redis.svc", 6379)),
        ("MOVED 16383 ::1:7000", Redirect("MOVED", 16383, "::1", 7000)),
        ("MOVED 12 [fe80::1]:7000", Redirect("MOVED", 12, "fe80::1", 7000)),
        ("MOVED 12 :7000", Redirect("MOVED", 12, "", 7000)),      # the node that answered
        ("MOVED 12 ?:7000", Redirect("MOVED", 12, None, 7000)),   # unknown endpoint
    ])
    def test_redirects(self, text: str, expected: Redirect) -> None:
        assert parse_redirect(text) == expected

    @pytest.mark.parametrize("text", [
        "MOVED", "MOVED 12", "MOVED x 1.2.3.4:5", "MOVED 16384 1.2.3.4:5", "MOVED 1 1.2.3.4", "MOVED 1 1.2.3.4:0",
        "MOVED 1 1.2.3.4:65536", "ASK -1 h:1", "TRYAGAIN Multiple keys request during rehashing of slot",
        "ERR unknown command", "moved 1 h:1", "MOVED 1 h:1 extra",
    ])
    def test_not_redirects(self, text: str) -> None:
        assert parse_redirect(text) is None
