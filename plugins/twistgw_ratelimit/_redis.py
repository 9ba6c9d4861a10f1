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
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from twisted.internet.defer import Deferred

from twistgw import sdk
from twistgw.sdk import RedisClient, RedisConfig, ReplyError

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

    __slots__ = ("store", "counters", "requests", "command", "retried")

    def __init__(self, store: "RedisCounters", counters: dict[str, list[int]], requests: list[_Request],
                 command: list[Any]) -> None:
        self.store = store
        self.counters = counters
        self.requests = requests
        self.command = command
        self.retried = False

    def __call__(self, totals: Any) -> None:
        store = self.store
        if isinstance(totals, ReplyError) and str(totals).startswith("NOSCRIPT") and not self.retried:
            self.retried = True  # once, with the script itself (EVAL loads it for the next EVALSHA)
            self.command[0:2] = ["EVAL", SCRIPT]
            store.client.send(tuple(self.command), self, flush=True)
            return
        if isinstance(totals, Exception):
            reason = f"Redis at {store.address}: {totals}" if isinstance(totals, ReplyError) else str(totals)
            store.fail(reason, self.requests)
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


class RedisCounters:
    """Fixed-window counters in one Redis server.

    :param config: where the server is and how to log in.
    :param timeout: seconds a batch may wait for its answer (``requestTimeout``).
    """

    def __init__(self, reactor: Any, config: RedisConfig, timeout: float) -> None:
        self.reactor = reactor
        self.address = config.address
        self.timeout = timeout
        self.client = RedisClient(reactor, config, timeout)
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
        command: list[Any] = ["EVALSHA", SCRIPT_SHA, len(counters)]
        command += [KEY_PREFIX + key for key in counters]
        for ttl, hits in counters.values():
            command += (hits, ttl)
        self._increments.inc(len(counters))
        self.client.send(tuple(command), _Batch(self, counters, requests, command), flush=True)

    def fail(self, reason: str, requests: list[_Request]) -> None:
        self._sent_failed.inc()
        for _, deliver, token in requests:
            deliver(token, None, reason)

    def close(self) -> Deferred[None]:
        """Stop reconnecting and close the connection."""
        return self.client.close()
