"""The gateway's one Redis client: hiredis' reply parser under a Twisted
protocol, pipelined, with timeouts, reconnection, AUTH, SELECT and TLS.

Every plugin that keeps state in Redis (the rate-limit counters, OIDC
sessions) uses it::

    from twistgw.redis import RedisClient, RedisConfig, RedisUnavailable

    client = RedisClient(reactor, RedisConfig("127.0.0.1", 6379, db=0, password="..."), timeout=0.1)
    client.send(("INCRBY", "k", 1), on_reply)      # on_reply(value) gets the reply, or an exception
    value = await client.execute("GET", "k")       # a Deferred; failures raise
    await client.close()

* **Pipelining.** Commands sent in one reactor turn are written with one
  ``transport.write`` at the end of the turn (``send(..., flush=True)``
  writes at once); replies come back in order and are matched to their
  senders in order. Nothing waits for one reply before sending the next
  command, so one connection carries any number of requests in flight.
* **Replies.** hiredis parses them in C: integers as ``int``, bulk strings
  as ``bytes``, arrays as ``list``, ``nil`` as ``None``; an error reply is
  delivered as a :class:`hiredis.ReplyError` value (it concerns that one
  command, the connection stays up).
* **Timeouts.** A batch that gets no complete answer within ``timeout``
  seconds drops the connection (a Redis that hangs, SIGSTOPped or behind a
  dead link): every command waiting on it fails with
  :class:`RedisUnavailable`, and the client connects again.
* **Reconnection.** A lost connection is made again after a back-off of 0.1 s
  doubling to 1 s: a Redis that returns is used again within a second.
  While there is no connection and a first attempt is under way, commands
  wait (at most ``timeout``); during the back-off after a failure they fail
  at once with the reason, so a caller's fail-open or fail-closed answer
  is immediate.
* **Handshake.** Each new connection first sends ``AUTH [username] password``
  when a password is set, ``SELECT db`` when ``db`` is not 0, else
  ``PING``, and carries no other command before they succeed. A refused
  ``AUTH`` fails the waiting commands with Redis' own message (never the
  password) and is retried with the back-off.
* **TLS.** ``RedisConfig(tls=True, ca_pem=...)`` connects through
  :func:`twistgw.tls.client_tls`: the server's certificate must lead to the
  CA (or the system's trust store when ``ca_pem`` is None) and name the host
  by subjectAltName.

:class:`RedisPool` spreads a plugin's commands over a few connections, one
connection per reactor turn. On a Redis Cluster (``RedisConfig(clustered=True)``)
:class:`twistgw.rediscluster.RedisCluster` routes each command to the
primary of its hash slot, over one :class:`RedisPool` per primary.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Iterable

import attrs
import hiredis
from twisted.internet.defer import Deferred, gatherResults, succeed
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from twistgw.tls import client_tls, describe_tls_failure

__all__ = ["RedisClient", "RedisConfig", "RedisError", "RedisPool", "RedisUnavailable", "Reply", "ReplyError"]

#: an error reply from Redis (delivered as a value to that command's sender)
ReplyError = hiredis.ReplyError

#: ``reply(value)``: the command's reply, or an exception (:class:`RedisUnavailable`, :data:`ReplyError`)
Reply = Callable[[Any], None]

_CLOSED = Failure(ConnectionError("closed"))
INITIAL_DELAY = 0.1
MAX_DELAY = 1.0


def _why(failure: Failure) -> str:
    """One line for a failed or lost connection (TLS failures described as such)."""
    exc = failure.value
    return describe_tls_failure(exc) or str(exc) or type(exc).__name__


class RedisError(Exception):
    """Base of the errors this client raises."""


class RedisUnavailable(RedisError):
    """No answer: not connected, connection lost, refused AUTH, or timeout."""


@attrs.frozen(cache_hash=True)  # a dictionary key looked up per request
class RedisConfig:
    """Where a Redis server is and how to log in; equal configs may share a client."""

    host: str
    port: int
    db: int = 0
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    tls: bool = False
    #: the CA certificates (PEM) that must have signed the server's (tls); None: the system's
    ca_pem: bytes | None = attrs.field(default=None, repr=False)
    #: ``host:port`` is one node (a seed) of a Redis Cluster: see :mod:`twistgw.rediscluster`
    clustered: bool = False

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def handshake(self) -> list[tuple[Any, ...]]:
        """The commands a new connection sends before any other."""
        out: list[tuple[Any, ...]] = []
        if self.password is not None:
            out.append(("AUTH", self.username, self.password) if self.username else ("AUTH", self.password))
        if self.db:
            out.append(("SELECT", self.db))
        return out or [("PING",)]


class _Protocol(Protocol):
    """One connection: bytes in go to hiredis; each complete reply to the client."""

    def __init__(self, client: "RedisClient") -> None:
        self.client = client
        self.reader = hiredis.Reader()

    def connectionMade(self) -> None:
        self.client._made(self)

    def dataReceived(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        reply = self.client._reply
        try:
            while (value := reader.gets()) is not False:
                reply(self, value)
        except hiredis.ProtocolError as exc:
            self.client._drop(self, f"bad reply from Redis at {self.client.address}: {exc}")

    def connectionLost(self, reason: Failure = _CLOSED) -> None:
        self.client._lost(self, reason)


class _Factory(Factory):
    def __init__(self, client: "RedisClient") -> None:
        self.client = client

    def buildProtocol(self, addr: Any) -> _Protocol:
        return _Protocol(self.client)


class RedisClient:
    """One pipelined connection to one Redis server, kept up.

    :param reactor: the gateway's reactor.
    :param timeout: seconds a command may wait for its reply (and a
        connection attempt for its answer) before the connection is dropped.
    """

    _log = Logger(namespace="twistgw.redis")

    def __init__(self, reactor: Any, config: RedisConfig, timeout: float = 2.0,
                 on_down: Callable[[str], None] | None = None) -> None:
        self.reactor = reactor
        self.config = config
        self.address = config.address
        self.timeout = timeout
        #: told why, each time a connection is lost or an attempt fails (a cluster refreshes its map)
        self.on_down = on_down
        self._endpoint: Any = HostnameEndpoint(reactor, config.host, config.port, timeout=max(timeout, 0.05))
        if config.tls:
            self._endpoint = wrapClientTLS(client_tls(config.host, ca_pem=config.ca_pem), self._endpoint)
        self._handshake = [hiredis.pack_command(c) for c in config.handshake()]
        #: the connection commands go to (None until its handshake succeeded)
        self._ready: _Protocol | None = None
        self._connection: _Protocol | None = None  # connected, maybe still in the handshake
        self._connecting: Any = None  # the attempt under way (a Deferred)
        self._retry: Any = None  # the back-off's DelayedCall
        self._delay = INITIAL_DELAY
        self._down: str | None = None  # why there is no connection (during the back-off)
        self._closed = False
        self._closing: Deferred[None] | None = None
        #: commands not written yet, and their senders
        self._queue: list[bytes] = []
        self._queued: list[Reply] = []
        self._queued_at = 0.0
        self._flush_call: Any = None
        #: senders of commands written, in order; batches: (deadline, replies counted when answered)
        self._waiting: collections.deque[Reply] = collections.deque()
        self._batches: collections.deque[tuple[float, int]] = collections.deque()
        self._written = self._answered = 0
        self._timer: Any = None
        self._drop_reason: str | None = None
        self._logged: str | None = None
        self._connect()

    # -- sending ---------------------------------------------------------------------------------

    def send(self, command: tuple[Any, ...], reply: Reply, flush: bool = False) -> None:
        """Queue ``command`` (str, bytes, int or float arguments); ``reply``
        is called once with its reply or an exception. Written at the end of
        this reactor turn with every other command queued in it, or now
        with ``flush``."""
        if self._ready is None and (self._down is not None or self._closed):
            reply(RedisUnavailable(self._down or f"the client of Redis at {self.address} was closed"))
            return
        if not self._queue:
            self._queued_at = self.reactor.seconds()
            if not flush and self._flush_call is None and self._ready is not None:
                self._flush_call = self.reactor.callLater(0, self._flush)
            elif self._ready is None:
                self._arm()
        self._queue.append(hiredis.pack_command(command))
        self._queued.append(reply)
        if flush:
            self._flush()

    def execute(self, *command: Any) -> Deferred[Any]:
        """``command``'s reply as a Deferred (an error reply or no answer fails it)."""
        d: Deferred[Any] = Deferred()

        def reply(value: Any) -> None:
            if isinstance(value, Exception):
                d.errback(value)
            else:
                d.callback(value)
        self.send(command, reply)
        return d

    def flush(self) -> None:
        """Write the commands queued in this reactor turn now (nothing when none is)."""
        call = self._flush_call
        if call is not None:
            call.cancel()
        self._flush()

    def _flush(self) -> None:
        self._flush_call = None
        proto = self._ready
        if proto is None or not self._queue:
            return
        queue, queued = self._queue, self._queued
        self._queue, self._queued = [], []
        self._write(proto, queue, queued)

    def _write(self, proto: _Protocol, commands: list[bytes], replies: list[Reply]) -> None:
        self._waiting.extend(replies)
        self._written += len(replies)
        if not self._batches:
            self._arm()
        self._batches.append((self.reactor.seconds() + self.timeout, self._written))
        assert proto.transport is not None
        proto.transport.write(b"".join(commands) if len(commands) > 1 else commands[0])

    def _reply(self, proto: _Protocol, value: Any) -> None:
        if proto is not self._connection or not self._waiting:
            return  # a late reply on a connection already given up
        self._answered += 1
        batches = self._batches
        while batches and batches[0][1] <= self._answered:
            batches.popleft()
        sender = self._waiting.popleft()
        try:
            sender(value)
        except Exception:
            self._log.failure("a Redis reply's receiver failed")

    # -- timeouts --------------------------------------------------------------------------------

    def _arm(self) -> None:
        if self._timer is None and not self._closed:
            self._timer = self.reactor.callLater(self.timeout, self._check)

    def _check(self) -> None:
        """The timer: drop a connection whose oldest batch is overdue, fail
        commands queued too long for a connection; else wait for the next deadline."""
        self._timer = None
        now = self.reactor.seconds()
        nxt: list[float] = []
        if self._batches:
            deadline = self._batches[0][0]
            if deadline <= now:
                if self._connection is not None:
                    self._drop(self._connection, f"no answer from Redis at {self.address} within {self.timeout:g}s")
                return
            nxt.append(deadline)
        if self._queue and self._ready is None:
            deadline = self._queued_at + self.timeout
            if deadline <= now:
                self._fail_queue(f"no connection to Redis at {self.address} within {self.timeout:g}s")
            else:
                nxt.append(deadline)
        if nxt:
            self._timer = self.reactor.callLater(max(0.0, min(nxt) - now), self._check)

    # -- connection ------------------------------------------------------------------------------

    def _connect(self) -> None:
        self._retry = None
        if self._closed:
            return
        d = self._connecting = self._endpoint.connect(_Factory(self))
        d.addErrback(self._connect_failed)

    def _connect_failed(self, failure: Failure) -> None:
        self._connecting = None
        self._went_down(f"cannot connect to Redis at {self.address}: {_why(failure)}")

    def _made(self, proto: _Protocol) -> None:
        self._connecting = None
        self._connection = proto
        self._drop_reason = None
        replies = [self._handshake_reply(proto, i == len(self._handshake) - 1) for i in range(len(self._handshake))]
        self._write(proto, self._handshake, replies)

    def _handshake_reply(self, proto: _Protocol, last: bool) -> Reply:
        def reply(value: Any) -> None:
            if isinstance(value, Exception):
                text = str(value).split("\n")[0][:200]
                self._drop(proto, f"Redis at {self.address} refused the connection's login: {text}")
            elif last and proto is self._connection:
                self._ready, self._down, self._delay, self._logged = proto, None, INITIAL_DELAY, None
                self._log.info("connected to Redis at {address}", address=self.address)
                self._flush()
        return reply

    def _drop(self, proto: _Protocol, reason: str) -> None:
        if proto is self._connection and self._drop_reason is None:
            self._drop_reason = reason
        if proto.transport is not None:
            proto.transport.abortConnection()  # type: ignore[attr-defined]  # ITCPTransport and TLS have it

    def _lost(self, proto: _Protocol, reason: Failure) -> None:
        if proto is not self._connection:
            return
        why = self._drop_reason or f"connection to Redis at {self.address} lost: {_why(reason)}"
        self._connection = self._ready = None
        waiting, self._waiting = self._waiting, collections.deque()
        self._batches.clear()
        self._written = self._answered = 0
        self._fail_all(waiting, why)
        self._went_down(why)

    def _went_down(self, why: str) -> None:
        if self._closed:
            self._fail_queue(why)
            closing, self._closing = self._closing, None
            if closing is not None:
                closing.callback(None)
            return
        self._down = why
        if self.on_down is not None:
            try:
                self.on_down(why)
            except Exception:
                self._log.failure("a Redis client's on_down failed")
        if why != self._logged:  # once per distinct reason, not once per attempt
            self._logged = why
            self._log.warn("{reason}; trying again in {delay:g}s", reason=why, delay=self._delay)
        self._fail_queue(why)
        self._retry = self.reactor.callLater(self._delay, self._connect)
        self._delay = min(self._delay * 2, MAX_DELAY)

    def _fail_queue(self, why: str) -> None:
        queued, self._queue, self._queued = self._queued, [], []
        self._fail_all(queued, why)

    def _fail_all(self, senders: Iterable[Reply], why: str) -> None:
        """Answer every one of ``senders`` with :class:`RedisUnavailable`."""
        error = RedisUnavailable(why)
        for sender in senders:
            try:
                sender(error)
            except Exception:
                self._log.failure("a Redis reply's receiver failed")

    @property
    def connected(self) -> bool:
        """True once a connection passed its handshake (and until it is lost)."""
        return self._ready is not None

    def close(self) -> Deferred[None]:
        """Stop reconnecting and close the connection; a Deferred that fires when it is closed."""
        self._closed = True
        for call in (self._retry, self._timer, self._flush_call):
            if call is not None and call.active():
                call.cancel()
        self._retry = self._timer = self._flush_call = None
        if self._connecting is not None:
            self._connecting.cancel()
        proto = self._connection
        if proto is None or proto.transport is None:
            self._fail_queue(f"the client of Redis at {self.address} was closed")
            return succeed(None)
        self._closing = Deferred()
        self._drop_reason = f"the client of Redis at {self.address} was closed"
        proto.transport.loseConnection()
        return self._closing


class RedisPool:
    """``size`` clients of one server; each reactor turn's commands go to
    one of them (round robin from turn to turn, skipping those without a
    connection while another has one), so a turn still costs one write and
    one round trip."""

    def __init__(self, reactor: Any, config: RedisConfig, size: int = 1, timeout: float = 2.0,
                 on_down: Callable[[str], None] | None = None) -> None:
        self.address = config.address
        self.clients = [RedisClient(reactor, config, timeout, on_down) for _ in range(max(1, size))]
        self._next = 0
        self._current = self.clients[0]
        self.closed = False

    def client(self) -> RedisClient:
        """The client for a command sent now (the same all this reactor turn)."""
        current = self._current
        clients = self.clients
        if current._queue or len(clients) == 1:
            return current
        for _ in clients:  # the next one with a connection (after a restart, some reconnect first)
            self._next = (self._next + 1) % len(clients)
            current = clients[self._next]
            if current._ready is not None:
                break
        self._current = current
        return current

    def send(self, command: tuple[Any, ...], reply: Reply, flush: bool = False) -> None:
        """:meth:`RedisClient.send` on this turn's client."""
        self.client().send(command, reply, flush)

    def execute(self, *command: Any) -> Deferred[Any]:
        return self.client().execute(*command)

    def flush(self) -> None:
        """Write every client's queued commands now."""
        for client in self.clients:
            client.flush()

    @property
    def connected(self) -> bool:
        """True while at least one of the clients has a connection."""
        return any(c._ready is not None for c in self.clients)

    def close(self) -> Deferred[Any]:
        self.closed = True
        return gatherResults([c.close() for c in self.clients])
