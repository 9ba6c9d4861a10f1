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

The client is txredisapi (its hiredis reply parser, reconnecting with a
short back-off). A batch that gets no answer within ``requestTimeout``
fails; txredisapi then drops that connection (a Redis that hangs) and
connects again, so a Redis that returns is used again without a restart.
"""

from __future__ import annotations

from typing import Any, Callable

import txredisapi
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import HostnameEndpoint
from twisted.logger import Logger
from twisted.python.failure import Failure

import twistgw

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

#: ``deliver(counts, None)`` or ``deliver(None, why Redis failed)``
Deliver = Callable[["list[int] | None", "str | None"], None]

#: every counter's name starts with this (one Redis may serve other tools)
KEY_PREFIX = "twistgw:rl:"

COMMANDS = twistgw.counter(
    "twistgw_ratelimit_redis_commands", "Redis commands sent by the rate-limit plugins (one per batch),"
    " by server and outcome (ok, failed).", ["server", "outcome"])
INCREMENTS = twistgw.counter(
    "twistgw_ratelimit_redis_increments", "Counters incremented in Redis (several per command under load),"
    " by server.", ["server"])


class _Factory(txredisapi.RedisFactory):  # txredisapi has no type hints: a subclass of Any
    """txredisapi's factory with a short reconnect back-off: a Redis that
    returns is used again within a second."""

    initialDelay = 0.1
    maxDelay = 1.0


class RedisCounters:
    """Fixed-window counters in one Redis server.

    :param address: ``host:port``.
    :param timeout: seconds a batch may wait for its answer (``requestTimeout``).
    """

    _log = Logger(namespace="twistgw_ratelimit")

    def __init__(self, reactor: Any, address: str, db: int, timeout: float) -> None:
        host, _, port = address.rpartition(":")
        self.reactor = reactor
        self.address = address
        self.timeout = timeout
        self._factory = _Factory(address, db, 1, True, txredisapi.ConnectionHandler, "utf-8", None,
                                 timeout, False)
        self._factory.startConnecting(HostnameEndpoint(reactor, host.strip("[]"), int(port), timeout=timeout))
        self._client = self._factory.handler
        self._sent_ok = COMMANDS.labels(address, "ok")
        self._sent_failed = COMMANDS.labels(address, "failed")
        self._increments = INCREMENTS.labels(address)
        #: this reactor turn's batch: every counter's ttl and hits (in first-seen order)...
        self._counters: dict[str, list[int]] = {}
        #: ...and each request's keys and whom to tell, in arrival order
        self._requests: list[tuple[list[str], Deliver]] = []

    def increment(self, items: list[tuple[str, int]], deliver: Deliver) -> None:
        """Add one hit to each ``(key, ttl)``; later (after this reactor
        turn) call ``deliver(counts, None)`` with each key's count after this
        hit, in order, or ``deliver(None, reason)`` when Redis failed."""
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
        self._requests.append((keys, deliver))

    def _flush(self) -> None:
        counters, requests = self._counters, self._requests
        self._counters, self._requests = {}, []
        args: list[int] = []
        for ttl, hits in counters.values():
            args += (hits, ttl)
        self._increments.inc(len(counters))
        try:
            d = self._client.eval(SCRIPT, [KEY_PREFIX + key for key in counters], args)
        except Exception as exc:  # "Not connected" when reconnecting is off
            d = defer.fail(exc)
        d.addTimeout(self.timeout, self.reactor)
        d.addCallbacks(self._answered, self._failed, callbackArgs=(counters, requests),
                       errbackArgs=(requests,))

    def _answered(self, totals: Any, counters: dict[str, list[int]],
                  requests: list[tuple[list[str], Deliver]]) -> None:
        if not isinstance(totals, list) or len(totals) != len(counters):
            self._fail(f"unexpected answer from Redis at {self.address}: {totals!r}", requests)
            return
        self._sent_ok.inc()
        # each key's count before this batch; hits are handed out in arrival order
        seen = {key: int(total) - entry[1] for (key, entry), total in zip(counters.items(), totals, strict=True)}
        for keys, deliver in requests:
            counts = []
            for key in keys:
                seen[key] += 1
                counts.append(seen[key])
            deliver(counts, None)

    def _failed(self, failure: Failure, requests: list[tuple[list[str], Deliver]]) -> None:
        if isinstance(failure.value, (defer.TimeoutError, defer.CancelledError)):
            reason = f"no answer from Redis at {self.address} within {self.timeout:g}s"
        else:
            reason = f"Redis at {self.address}: {failure.getErrorMessage() or type(failure.value).__name__}"
        self._fail(reason, requests)

    def _fail(self, reason: str, requests: list[tuple[list[str], Deliver]]) -> None:
        self._sent_failed.inc()
        for _, deliver in requests:
            deliver(None, reason)

    def close(self) -> Deferred[None]:
        """Stop reconnecting and close the connection."""
        d: Deferred[None] = self._factory.disconnect()
        return d

