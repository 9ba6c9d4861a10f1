"""Counters in Redis, shared by every gateway process and replica that
points at the same server.

One Lua script increments a batch of counters atomically and sets the
expiry of those it created (``INCRBY`` + ``EXPIRE`` in one round trip, the
same two commands envoyproxy/ratelimit pipelines). The hits of every request
that arrives in one reactor turn go in one batch, with identical counters
summed, so under load a gateway sends far fewer than one command per
request. The counts come back in order, so each request learns its own
position in its window: exactly ``requestsPerUnit`` requests are admitted
however many gateways race.

The script is sent by its SHA-1 (``EVALSHA``); a Redis that does not know it
yet (new, restarted, ``SCRIPT FLUSH``) answers ``NOSCRIPT`` and that batch is
sent again once with ``EVAL``, which also loads it. The client is
:mod:`twistgw.redis` (hiredis' parser under a Twisted protocol): a batch
that gets no answer within ``requestTimeout`` fails, the hung connection is
dropped and made again, so a Redis that returns is used again without a
restart.

On a Redis Cluster (``clustered: true``) a script may touch only keys of one
hash slot, so each counter's key carries its bucket as a hash tag
(``twistgw:rl:{<bucket>}|<window>``: every window of a bucket in one slot,
chosen by the gateway, never by a value a client sends) and a turn's batch
is one script call per slot, pipelined per primary; the requests of the
turn learn their counts once every slot answered (:class:`_Turn`). The
routing, redirections and failovers are :mod:`twistgw.rediscluster`'s.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from twisted.internet.defer import Deferred

from twistgw import sdk
from twistgw.sdk import RedisClient, RedisCluster, RedisConfig, ReplyError, key_slot

#: INCRBY each key by its hits; EXPIRE it when this batch created it. KEYS:
#: counters; ARGV: hits1, ttl1, hits2, ttl2, ... Returns the new counts.
SCRIPT = """\
local out = {}
for i = 1, #KEYS do
  local hits = tonumber(ARGV[2 * i - 1])
  local n = redis.call('INCRBY', KEYS[i], hits)
  if n == hits then redis.call('EXPIRE', KEYS[i], ARGV[2 * i]) end
  out[i] = n
end
return out
"""
SCRIPT_SHA = hashlib.sha1(SCRIPT.encode("utf-8")).hexdigest()  # noqa: S324 (Redis names scripts so)

#: ``deliver(token, counts, None)`` or ``deliver(token, None, why Redis failed)``
Deliver = Callable[[Any, "list[int] | None", "str | None"], None]

#: every counter's name starts with this (one Redis may serve other tools)
KEY_PREFIX = "twistgw:rl:"

COMMANDS = sdk.counter(
    "twistgw_ratelimit_redis_commands", "Redis commands sent by the rate-limit plugins (one per batch),"
    " by server and outcome (ok, failed).", ["server", "outcome"])
INCREMENTS = sdk.counter(
    "twistgw_ratelimit_redis_increments", "Counters incremented in Redis (several per command under load),"
    " by server.", ["server"])

#: one request of a batch: its counters' keys, whom to tell, and the token to tell it with
_Request = tuple[list[str], Deliver, Any]


class _Batch:
    """One reactor turn's command: receives its reply (the client calls it)."""

    __slots__ = ("store", "counters", "requests", "command", "retried", "slot")

    def __init__(self, store: "RedisCounters", counters: dict[str, list[int]], requests: list[_Request],
                 command: list[Any], slot: int | None = None) -> None:
        self.store = store
        self.counters = counters
        self.requests = requests
        self.command = command
        self.retried = False
        self.slot = slot  # on a cluster: the one hash slot of every counter of the turn

    def __call__(self, totals: Any) -> None:
        store = self.store
        if isinstance(totals, ReplyError) and str(totals).startswith("NOSCRIPT") and not self.retried:
            self.retried = True  # once, with the script itself (EVAL loads it for the next EVALSHA)
            self.command[0:2] = ["EVAL", SCRIPT]
            store.resend(self.command, self, self.slot)
            return
        if isinstance(totals, Exception):
            store.fail(store.reason(totals), self.requests)
            return
        counters = self.counters
        if not isinstance(totals, list) or len(totals) != len(counters):
            store.fail(f"unexpected answer from Redis at {store.address}: {totals!r}", self.requests)
            return
        store.sent_ok.inc()
        # each key's count before this batch; hits are handed out in arrival order
        seen = {key: total - entry[1] for (key, entry), total in zip(counters.items(), totals, strict=True)}
        for keys, deliver, token in self.requests:
            counts = []
            for key in keys:
                n = seen[key] = seen[key] + 1
                counts.append(n)
            deliver(token, counts, None)


def _command(counters: dict[str, list[int]], keys: list[str], names: dict[str, str]) -> list[Any]:
    """The script call of ``keys`` (one hash slot's): their names on the cluster, hits and ttls."""
    command: list[Any] = ["EVALSHA", SCRIPT_SHA, len(keys)]
    command += [names[key] for key in keys]
    for key in keys:
        ttl, hits = counters[key]
        command += (hits, ttl)
    return command


class _Turn:
    """One reactor turn's counts on a cluster: several script calls (one per
    hash slot); the turn's requests are told once all of them answered. A
    request with a counter in a slot that failed gets the failure; its
    other counters keep their places in their counts."""

    __slots__ = ("store", "counters", "requests", "waiting", "totals", "failed")

    def __init__(self, store: "RedisCounters", counters: dict[str, list[int]], requests: list[_Request],
                 waiting: int) -> None:
        self.store = store
        self.counters = counters
        self.requests = requests
        self.waiting = waiting
        self.totals: dict[str, int] = {}
        self.failed: dict[str, str] = {}

    def answered(self, keys: list[str], totals: list[int] | None, reason: str | None) -> None:
        if totals is None:
            self.failed.update((key, reason or "failed") for key in keys)
        else:
            self.totals.update(zip(keys, totals, strict=True))
        self.waiting -= 1
        if self.waiting:
            return
        counters, failed = self.counters, self.failed
        # each key's count before this turn; hits are handed out in arrival order
        seen = {key: total - counters[key][1] for key, total in self.totals.items()}
        for keys, deliver, token in self.requests:
            counts = []
            why = None
            for key in keys:
                if key in seen:
                    n = seen[key] = seen[key] + 1
                    counts.append(n)
                else:
                    why = failed[key]
            if why is None:
                deliver(token, counts, None)
            else:
                deliver(token, None, why)


class _SlotBatch:
    """One hash slot's script call of a turn on a cluster."""

    __slots__ = ("turn", "keys", "command", "slot", "retried")

    def __init__(self, turn: _Turn, keys: list[str], command: list[Any], slot: int) -> None:
        self.turn = turn
        self.keys = keys
        self.command = command
        self.slot = slot
        self.retried = False

    def __call__(self, totals: Any) -> None:
        store = self.turn.store
        if isinstance(totals, ReplyError) and str(totals).startswith("NOSCRIPT") and not self.retried:
            self.retried = True  # this node does not know the script yet: EVAL loads it there
            self.command[0:2] = ["EVAL", SCRIPT]
            store.resend(self.command, self, self.slot)
            return
        if isinstance(totals, Exception):
            store.sent_failed()
            self.turn.answered(self.keys, None, store.reason(totals))
        elif not isinstance(totals, list) or len(totals) != len(self.keys):
            store.sent_failed()
            self.turn.answered(self.keys, None, f"unexpected answer from Redis at {store.address}: {totals!r}")
        else:
            store.sent_ok.inc()
            self.turn.answered(self.keys, totals, None)


class RedisCounters:
    """Fixed-window counters in one Redis server.

    :param config: where the server is and how to log in.
    :param timeout: seconds a batch may wait for its answer (``requestTimeout``).
    """

    def __init__(self, reactor: Any, config: RedisConfig, timeout: float) -> None:
        self.reactor = reactor
        self.address = config.address
        self.timeout = timeout
        self.clustered = config.clustered
        self.client: RedisClient | RedisCluster = (RedisCluster(reactor, config, timeout) if config.clustered
                                                   else RedisClient(reactor, config, timeout))
        self.sent_ok = COMMANDS.labels(self.address, "ok")
        self._sent_failed = COMMANDS.labels(self.address, "failed")
        self._increments = INCREMENTS.labels(self.address)
        #: this reactor turn's batch: every counter's ttl and hits (in first-seen order)...
        self._counters: dict[str, list[int]] = {}
        #: ...and each request's keys and whom to tell, in arrival order
        self._requests: list[_Request] = []

    def increment(self, items: list[tuple[str, int]], deliver: Deliver, token: Any) -> None:
        """Add one hit to each ``(key, ttl)``; later (after this reactor
        turn) call ``deliver(token, counts, None)`` with each key's count
        after this hit, in order, or ``deliver(token, None, reason)`` when
        Redis failed."""
        counters = self._counters
        keys = []
        for key, ttl in items:
            entry = counters.get(key)
            if entry is None:
                counters[key] = [ttl, 1]
            else:
                entry[1] += 1
            keys.append(key)
        if not self._requests:
            self.reactor.callLater(0, self._flush)
        self._requests.append((keys, deliver, token))

    def _flush(self) -> None:
        counters, requests = self._counters, self._requests
        self._counters, self._requests = {}, []
        if self.clustered:
            self._flush_slots(counters, requests)
            return
        command: list[Any] = ["EVALSHA", SCRIPT_SHA, len(counters)]
        command += [KEY_PREFIX + key for key in counters]
        for ttl, hits in counters.values():
            command += (hits, ttl)
        self._increments.inc(len(counters))
        self.client.send(tuple(command), _Batch(self, counters, requests, command), flush=True)

    def _flush_slots(self, counters: dict[str, list[int]], requests: list[_Request]) -> None:
        """A cluster: one script call per hash slot (one write per primary).
        A turn whose counters share one slot (the usual case: few buckets
        per turn) is one call, delivered as on one server."""
        groups: dict[int, list[str]] = {}
        names: dict[str, str] = {}
        for key in counters:
            bucket, _, window = key.rpartition("|")
            name = names[key] = f"{KEY_PREFIX}{{{bucket}}}|{window}"
            slot = key_slot(name)
            group = groups.get(slot)
            if group is None:
                groups[slot] = [key]
            else:
                group.append(key)
        self._increments.inc(len(counters))
        cluster = self.client
        assert isinstance(cluster, RedisCluster)
        if len(groups) == 1:
            ((slot, keys),) = groups.items()
            command = _command(counters, keys, names)
            cluster.send(tuple(command), _Batch(self, counters, requests, command, slot), slot, flush=True)
            return
        turn = _Turn(self, counters, requests, len(groups))
        for slot, keys in groups.items():
            command = _command(counters, keys, names)
            cluster.send(tuple(command), _SlotBatch(turn, keys, command, slot), slot)
        cluster.flush()

    def resend(self, command: list[Any], receiver: Any, slot: int | None) -> None:
        """A batch once more (NOSCRIPT: now with EVAL), at once."""
        client = self.client
        if isinstance(client, RedisCluster):
            client.send(tuple(command), receiver, slot, flush=True)
        else:
            client.send(tuple(command), receiver, flush=True)

    def reason(self, error: Exception) -> str:
        """Why a batch failed, in one line (a Redis Cluster node answering a
        client that does not know it is one: say so)."""
        if not isinstance(error, ReplyError):
            return str(error)
        text = f"Redis at {self.address}: {error}"
        if not self.clustered and str(error).startswith(("MOVED ", "ASK ", "CLUSTERDOWN")):
            text += " (a Redis Cluster node: set ratelimitServer.redis.clustered: true)"
        return text

    def sent_failed(self) -> None:
        self._sent_failed.inc()

    def fail(self, reason: str, requests: list[_Request]) -> None:
        self._sent_failed.inc()
        for _, deliver, token in requests:
            deliver(token, None, reason)

    def close(self) -> Deferred[None]:
        """Stop reconnecting and close the connection."""
        return self.client.close()
