"""The gateway's Redis client on a Redis Cluster: one
:class:`twistgw.redis.RedisPool` per primary, commands routed by hash slot.

::

    from twistgw.redis import RedisConfig
    from twistgw.rediscluster import RedisCluster, key_slot

    cluster = RedisCluster(reactor, RedisConfig("10.0.0.1", 6379, clustered=True), timeout=0.1)
    cluster.send(("INCRBY", "k", 1), on_reply)                 # routed by the slot of "k" (command[1])
    cluster.send(("EVALSHA", sha, 2, "{a}x", "{a}y"), on_reply, slot=key_slot("{a}x"), flush=True)
    value = await cluster.execute("GET", "k")
    await cluster.close()

* **The slot map.** The configured address is a seed (one node, or a name
  that resolves to several): the cluster is asked ``CLUSTER SHARDS`` (Redis
  7+; ``CLUSTER SLOTS`` when a node does not know it, or the ACL user may not
  run it) and each of the 16384
  slots gets its primary. Commands sent before the first map wait for it
  (at most ``timeout``). Only primaries are used: counters and sessions are
  read back at once, and a replica may lag.
* **Connections.** One :class:`~twistgw.redis.RedisPool` of ``size``
  connections per primary, each with the client's pipelining, timeouts,
  reconnection, AUTH and TLS (every node is verified by the name it is
  reached by: its announced hostname, or its address). Redis Cluster has
  only database 0, so a ``db`` other than 0 is refused.
* **Redirections.** ``MOVED`` (the slot lives elsewhere now: resharding, a
  failover) updates that slot at once, re-sends the command there and
  refreshes the whole map; ``ASK`` (the slot is being migrated and this key
  is already on the target) re-sends it to the target after ``ASKING``, in
  the same write, without changing the map; ``TRYAGAIN`` (a multi-key
  command while its keys are split by a migration) re-sends it after 20 ms.
  At most ``max_redirects`` (5) per command: then it fails with
  :class:`~twistgw.redis.RedisUnavailable`. None of these ran the
  command, so re-sending never counts twice; a command whose connection
  was lost is never re-sent (it may have run).
* **Refreshing.** The map is asked again (one request at a time, at most
  every 100 ms) after a ``MOVED``, when a node's connection is lost or
  cannot be made (so a primary replaced by its replica is found within
  about a second of the promotion), on ``CLUSTERDOWN``, and while a slot
  has no primary. A slot nobody serves, or whose primary is unreachable,
  fails its commands at once with :class:`~twistgw.redis.RedisUnavailable`
  (the caller's fail-open or fail-closed answer is immediate).
"""

from __future__ import annotations

from typing import Any

import attrs
from twisted.internet.defer import Deferred, gatherResults, succeed
from twisted.logger import Logger

from twistgw.redis import INITIAL_DELAY, MAX_DELAY, RedisConfig, RedisPool, RedisUnavailable, Reply, ReplyError
from twistgw.redisslots import SLOTS, Redirect, SlotRange, key_slot, parse_redirect, parse_shards, parse_slots

__all__ = ["MAX_REDIRECTS", "RedisCluster", "connect", "key_slot"]

MAX_REDIRECTS = 5
TRYAGAIN_DELAY = 0.02
#: the least time between two requests for the slot map
REFRESH_INTERVAL = 0.1


def _ignore(value: Any) -> None:
    """The reply of an ``ASKING`` (``+OK``; a failure shows on the command after it)."""


class _Routed:
    """One command on its way through the cluster: its reply goes to the
    sender unless it is a redirection, which sends the command again."""

    __slots__ = ("cluster", "command", "reply", "slot", "hops", "node")

    def __init__(self, cluster: "RedisCluster", command: tuple[Any, ...], reply: Reply, slot: int,
                 node: RedisPool) -> None:
        self.cluster = cluster
        self.command = command
        self.reply = reply
        self.slot = slot
        self.hops = 0
        self.node = node

    def __call__(self, value: Any) -> None:
        if isinstance(value, ReplyError) and self.cluster._redirected(self, str(value)):
            return
        self.reply(value)


class RedisCluster:
    """A Redis Cluster reached through the seed ``config`` (``clustered=True``, ``db`` 0).

    :param timeout: as :class:`~twistgw.redis.RedisClient`'s, for every
        node's connections and for the wait for the first slot map.
    :param size: connections per primary (:class:`~twistgw.redis.RedisPool`).
    """

    _log = Logger(namespace="twistgw.redis")

    def __init__(self, reactor: Any, config: RedisConfig, timeout: float = 2.0, size: int = 1,
                 max_redirects: int = MAX_REDIRECTS) -> None:
        if config.db:
            raise ValueError("Redis Cluster has only database 0")
        self.reactor = reactor
        self.config = config
        self.address = config.address
        self.timeout = timeout
        self.size = size
        self.max_redirects = max_redirects
        #: every node's pool by (host, port): the primaries of the map (and the seed, while asked)
        self._nodes: dict[tuple[str, int], RedisPool] = {}
        #: each slot's primary; None until the first map
        self._slots: list[RedisPool | None] | None = None
        self._primaries: dict[tuple[str, int], RedisPool] = {}
        #: commands sent before the first map: (command, reply, slot, flush)
        self._pending: list[tuple[tuple[Any, ...], Reply, int]] = []
        self._pending_timer: Any = None
        self._refreshing = False
        self._refresh_call: Any = None
        self._refreshed_at = -REFRESH_INTERVAL
        self._down: str | None = None  # why there is no map (the last attempt failed)
        self._delay = INITIAL_DELAY
        self._use_slots = False  # a node did not know CLUSTER SHARDS: ask CLUSTER SLOTS
        self._asked = 0  # which node to ask next, round robin
        self._closed = False
        self._retired: list[tuple[RedisPool, Any]] = []  # pools no primary uses, and their closing call
        self._logged: str | None = None
        #: how many maps were read, and redirections followed (MOVED, ASK, TRYAGAIN), for tests and logs
        self.refreshes = 0
        self.redirects: dict[str, int] = {"MOVED": 0, "ASK": 0, "TRYAGAIN": 0}
        self._refresh()

    # -- sending ---------------------------------------------------------------------------------

    def send(self, command: tuple[Any, ...], reply: Reply, slot: int | None = None, flush: bool = False) -> None:
        """As :meth:`RedisClient.send`, to the primary of ``slot`` (default:
        the slot of ``command[1]``, the key of most commands)."""
        if slot is None:
            slot = key_slot(command[1])
        slots = self._slots
        if slots is None:
            if self._down is not None or self._closed:
                reply(RedisUnavailable(self._down or f"the client of the Redis Cluster at {self.address} was closed"))
                return
            self._pending.append((command, reply, slot))
            if self._pending_timer is None:
                self._pending_timer = self.reactor.callLater(self.timeout, self._pending_expired)
            return
        node = slots[slot]
        if node is None:
            self._refresh_soon()
            reply(RedisUnavailable(f"no primary of the Redis Cluster at {self.address} serves hash slot {slot} now"))
            return
        node.send(command, _Routed(self, command, reply, slot, node), flush)

    def execute(self, *command: Any, slot: int | None = None) -> Deferred[Any]:
        """``command``'s reply as a Deferred (an error reply or no answer fails it)."""
        d: Deferred[Any] = Deferred()

        def reply(value: Any) -> None:
            if isinstance(value, Exception):
                d.errback(value)
            else:
                d.callback(value)
        self.send(command, reply, slot)
        return d

    def flush(self) -> None:
        """Write every node's queued commands now."""
        for pool in self._primaries.values():
            pool.flush()

    # -- redirections ----------------------------------------------------------------------------

    def _redirected(self, routed: _Routed, text: str) -> bool:
        """Follow a redirection (True), or leave the error to the sender (False)."""
        if text.startswith(("MOVED ", "ASK ")):
            redirect = parse_redirect(text)
            if redirect is None:
                return False
            return self._follow(routed, redirect, text)
        if text.startswith("TRYAGAIN"):
            if self._over(routed, text):
                return True
            self.redirects["TRYAGAIN"] += 1
            self.reactor.callLater(TRYAGAIN_DELAY, self._again, routed)
            return True
        if text.startswith("CLUSTERDOWN"):
            self._refresh_soon()
            routed.reply(RedisUnavailable(f"the Redis Cluster at {self.address}: {text.splitlines()[0][:200]}"))
            return True
        return False

    def _over(self, routed: _Routed, text: str) -> bool:
        routed.hops += 1
        if routed.hops <= self.max_redirects:
            return False
        routed.reply(RedisUnavailable(f"the Redis Cluster at {self.address}: more than {self.max_redirects}"
                                      f" redirections for hash slot {routed.slot} (the last: {text[:200]})"))
        return True

    def _follow(self, routed: _Routed, redirect: Redirect, text: str) -> bool:
        if self._over(routed, text):
            return True
        self.redirects[redirect.kind] += 1
        if redirect.host is None:  # the node's address is not known: ask for the map, fail this one
            self._refresh_soon()
            routed.reply(RedisUnavailable(f"the Redis Cluster at {self.address}: {text[:200]} (no address)"))
            return True
        host = redirect.host or routed.node.clients[0].config.host
        node = self._node(host, redirect.port)
        routed.node = node
        if redirect.kind == "MOVED":
            if self._slots is not None:
                self._slots[redirect.slot] = node
                self._primaries.setdefault((host, redirect.port), node)
            self._refresh_soon()
            node.send(routed.command, routed)
        else:  # ASK: this command only, after ASKING, on the same connection
            client = node.client()
            client.send(("ASKING",), _ignore)
            client.send(routed.command, routed)
        return True

    def _again(self, routed: _Routed) -> None:
        """A command answered TRYAGAIN, sent again to its slot's primary."""
        slots = self._slots
        node = slots[routed.slot] if slots is not None and not self._closed else None
        if node is None:
            routed.reply(RedisUnavailable(f"no primary of the Redis Cluster at {self.address} serves hash slot"
                                          f" {routed.slot} now"))
            return
        routed.node = node
        node.send(routed.command, routed, flush=True)

    # -- the slot map ----------------------------------------------------------------------------

    def _node(self, host: str, port: int) -> RedisPool:
        """The pool of the node at (host, port), made on first use."""
        key = (host, port)
        pool = self._nodes.get(key)
        if pool is None or pool.closed:
            config = attrs.evolve(self.config, host=host, port=port, clustered=False)
            pool = self._nodes[key] = RedisPool(self.reactor, config, self.size, self.timeout, self._node_down)
        return pool

    def _node_down(self, why: str) -> None:
        if not self._closed:
            self._refresh_soon()

    def _refresh_soon(self) -> None:
        """Ask for the map again, once, at most every REFRESH_INTERVAL."""
        if self._refreshing or self._refresh_call is not None or self._closed:
            return
        wait = max(0.0, self._refreshed_at + REFRESH_INTERVAL - self.reactor.seconds())
        self._refresh_call = self.reactor.callLater(wait, self._refresh)

    def _ask(self) -> RedisPool:
        """The node to ask for the map: a connected primary (in turn), else any known node, else the seed."""
        connected = [p for p in self._primaries.values() if p.connected]
        if connected:
            self._asked += 1
            return connected[self._asked % len(connected)]
        others = [p for p in self._nodes.values() if p.connected]
        if others:
            return others[0]
        known = list(self._primaries.values())
        self._asked += 1
        if known and self._asked % 2:  # every other time: a known node, else the seed (maybe a new address)
            return known[(self._asked // 2) % len(known)]
        return self._node(self.config.host, self.config.port)

    def _refresh(self) -> None:
        self._refresh_call = None
        if self._closed or self._refreshing:
            return
        self._refreshing = True
        self._refreshed_at = self.reactor.seconds()
        asked = self._ask()
        command = ("CLUSTER", "SLOTS") if self._use_slots else ("CLUSTER", "SHARDS")
        asked.send(command, lambda value: self._answered(asked, command, value), flush=True)

    def _answered(self, asked: RedisPool, command: tuple[str, str], value: Any) -> None:
        self._refreshing = False
        if self._closed:
            return
        where = asked.address
        if isinstance(value, ReplyError):
            text = str(value).splitlines()[0][:200]
            if command[1] == "SHARDS" and ("unknown subcommand" in text.lower() or text.startswith("NOPERM")):
                self._use_slots = True
                self._refresh()
                return
            if "cluster support disabled" in text.lower():
                text += "; it is not a Redis Cluster node: set clustered: false, or give a cluster node's address"
            self._failed(f"the Redis Cluster at {self.address}: {where} refused {' '.join(command)}: {text}")
            return
        if isinstance(value, Exception):
            self._failed(f"the Redis Cluster at {self.address}: no slot map from {where}: {value}")
            return
        host = asked.clients[0].config.host
        try:
            ranges = parse_slots(value, host) if self._use_slots else parse_shards(value, host, self.config.tls)
        except ValueError as exc:
            self._failed(f"the Redis Cluster at {self.address}: {where} answered a slot map twistgw cannot read: {exc}")
            return
        self._apply(ranges)

    def _failed(self, why: str) -> None:
        """No map this time: fail the commands waiting for a first one, try again after a back-off."""
        if self._slots is None:
            self._down = why
            self._fail_pending(why)
        if why != self._logged:  # once per distinct reason, not once per attempt
            self._logged = why
            self._log.warn("{reason}; asking again in {delay:g}s", reason=why, delay=self._delay)
        self._refresh_call = self.reactor.callLater(self._delay, self._refresh)
        self._delay = min(self._delay * 2, MAX_DELAY)

    def _apply(self, ranges: list[SlotRange]) -> None:
        table: list[RedisPool | None] = [None] * SLOTS
        primaries: dict[tuple[str, int], RedisPool] = {}
        for r in ranges:
            if r.node is not None:
                pool = primaries.get(r.node) or self._node(*r.node)
                primaries[r.node] = pool
                table[r.low:r.high + 1] = [pool] * (r.high - r.low + 1)
        unserved = table.count(None)
        self.refreshes += 1
        if set(primaries) != set(self._primaries) or self._slots is None:
            self._log.info("Redis Cluster at {address}: primaries {nodes}{missing}", address=self.address,
                           nodes=", ".join(sorted(p.address for p in primaries.values())) or "none",
                           missing=f"; {unserved} hash slots without one" if unserved else "")
        self._slots, self._primaries, self._down, self._logged = table, primaries, None, None
        self._retire()
        if unserved:  # a primary failed and no replica took over yet: look again soon
            self._refresh_call = self.reactor.callLater(self._delay, self._refresh)
            self._delay = min(self._delay * 2, MAX_DELAY)
        else:
            self._delay = INITIAL_DELAY
        self._dispatch()

    def _retire(self) -> None:
        """Close (after ``timeout``, so answers on the way still arrive) the pools no primary uses."""
        used = {id(p) for p in self._primaries.values()}
        for key, pool in list(self._nodes.items()):
            if id(pool) not in used:
                del self._nodes[key]
                self._retired.append((pool, self.reactor.callLater(self.timeout + 0.05, self._close_retired, pool)))

    def _close_retired(self, pool: RedisPool) -> None:
        self._retired = [(p, call) for p, call in self._retired if p is not pool]
        pool.close()

    def _dispatch(self) -> None:
        pending, self._pending = self._pending, []
        if self._pending_timer is not None and self._pending_timer.active():
            self._pending_timer.cancel()
        self._pending_timer = None
        for command, reply, slot in pending:
            self.send(command, reply, slot)

    def _pending_expired(self) -> None:
        self._pending_timer = None
        self._fail_pending(f"no slot map from the Redis Cluster at {self.address} within {self.timeout:g}s")

    def _fail_pending(self, why: str) -> None:
        pending, self._pending = self._pending, []
        error = RedisUnavailable(why)
        for _, reply, _ in pending:
            try:
                reply(error)
            except Exception:
                self._log.failure("a Redis reply's receiver failed")

    # -- state -----------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True once a slot map is known and every primary in it has a connection."""
        return self._slots is not None and all(p.connected for p in self._primaries.values())

    def primary(self, slot: int) -> str | None:
        """The address (``host:port``) of the primary serving ``slot``, as this client knows it."""
        node = self._slots[slot] if self._slots is not None else None
        return node.address if node is not None else None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> Deferred[Any]:
        """Stop refreshing, close every connection; a Deferred that fires when they are closed."""
        self._closed = True
        for call in (self._refresh_call, self._pending_timer):
            if call is not None and call.active():
                call.cancel()
        self._refresh_call = self._pending_timer = None
        self._fail_pending(f"the client of the Redis Cluster at {self.address} was closed")
        for _, call in self._retired:
            if call.active():
                call.cancel()
        pools = list(self._nodes.values()) + [p for p, _ in self._retired]
        self._nodes, self._retired, self._primaries = {}, [], {}
        if not pools:
            return succeed(None)
        return gatherResults([p.close() for p in pools])


def connect(reactor: Any, config: RedisConfig, timeout: float = 2.0,
            size: int = 1) -> "RedisPool | RedisCluster":
    """A :class:`RedisCluster` for a clustered ``config``, else a :class:`~twistgw.redis.RedisPool`
    (both have ``send``, ``execute``, ``flush``, ``close`` and ``closed``)."""
    if config.clustered:
        return RedisCluster(reactor, config, timeout, size)
    return RedisPool(reactor, config, size, timeout)

