"""The HTTP/2 connections of the gateway's upstreams (``useHttp2``), per
endpoint: a request takes a place on a connection that has one (below the
peer's ``SETTINGS_MAX_CONCURRENT_STREAMS`` and the Upstream's
``maxConcurrentStreams``), else a new connection is made.

To the forwarded requests (:class:`~.request.UpstreamRequest` and its
retrying and limited kinds) an :class:`H2Pool` is what the HTTP/1.1
:class:`~.pool.UpstreamPool` is: ``new_connection`` makes an
:class:`~.h2stream.H2Stream`, ``connect`` fires with it once it has its
place on a connection that is up. So the route timeout, retries, circuit
breakers and outlier detection run per request as over HTTP/1.1. Circuit
breakers count streams as requests (``maxRequests``) and HTTP/2
connections as connections (``maxConnections``); a request that finds
every connection full and may open no other waits (``maxPendingRequests``)
for a place to free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.internet.protocol import Factory

from twistgw.core.plan import Forward
from twistgw.engine.seams import Downstream
from twistgw.engine.upstream import breakers, policy
from twistgw.engine.upstream.breakers import Breaker, LimitedRequest, LimitedRetryingRequest
from twistgw.engine.upstream.h2connection import H2Connection
from twistgw.engine.upstream.h2stream import H2Stream
from twistgw.engine.upstream.request import UpstreamRequest
from twistgw.engine.upstream.retrying import RetryingRequest

if TYPE_CHECKING:
    from twistgw.engine.upstream.pool import UpstreamPool

__all__ = ["H2Pool", "NO_H2_UPGRADE"]

#: a WebSocket upgrade routed to an HTTP/2 upstream (RFC 8441's extended
#: CONNECT is not spoken): refused rather than sent as a plain request
NO_H2_UPGRADE: policy.Answer = (502, b"upstream speaks HTTP/2: WebSocket upgrades are not forwarded to it",
                                "upgrade to an HTTP/2 upstream")


class _Once(Factory):
    noisy = False

    def __init__(self, conn: H2Connection) -> None:
        self.conn = conn

    def buildProtocol(self, addr: Any) -> H2Connection:
        return self.conn


class H2Pool:
    """HTTP/2 connections per endpoint (see the module)."""

    #: no idle connections to hand out whole (breakers.start asks)
    idle: dict[Any, list[Any]] = {}

    def __init__(self, pool: "UpstreamPool") -> None:
        self.pool = pool
        self.reactor = pool.reactor
        self.conns: dict[Any, list[H2Connection]] = {}
        #: the breaker of each connection a limited request opened
        self._limited: dict[H2Connection, Breaker] = {}

    @property
    def idle_timeout(self) -> float:
        return self.pool.idle_timeout

    def label(self, key: Any) -> str:
        return self.pool.label(key)

    @staticmethod
    def key_of(endpoint: Any, upstream: Any) -> Any:
        """The key of ``endpoint``'s HTTP/2 connections (a retry that moves to another endpoint asks)."""
        return (endpoint.host, endpoint.port, upstream.tls, upstream.http2)

    # -- forwarding -------------------------------------------------------------------

    def forward(self, ex: Downstream, plan: Forward) -> UpstreamRequest:
        endpoint = plan.endpoint
        upstream = plan.upstream
        key = self.key_of(endpoint, upstream)
        label = self.pool.label(key)
        limits = upstream.breakers
        retries = plan.retry
        req: UpstreamRequest
        pool: Any = self  # to the requests, this is their pool (see the module)
        if limits is None:
            req = UpstreamRequest(pool, ex, plan, key, label) if retries is None else \
                RetryingRequest(pool, ex, plan, key, label, retries)
        else:
            req = LimitedRequest(pool, ex, plan, key, label) if retries is None else \
                LimitedRetryingRequest(pool, ex, plan, key, label, retries)
            req.breaker = b = self.pool.breaker(upstream)
            if not b.admit(req):
                req.fail(policy.OVERFLOW, "circuit breaker: maxRequests", policy.OVERLOADED)
                return req
            if not any(c.has_room for c in self.conns.get(key, ())) and not b.may_connect():
                if not b.may_wait():
                    req.fail(policy.OVERFLOW, "circuit breaker: maxPendingRequests", policy.OVERLOADED)
                    return req
                b.pending.append(req)
                if ex.body_complete:
                    req.client_body_done()
                return req
        if ex.upgrade is not None:
            req.fail(NO_H2_UPGRADE, "WebSocket over HTTP/2 (RFC 8441) is not supported")
            return req
        req.connect()
        if ex.body_complete:
            req.client_body_done()
        return req

    # -- what a request asks (as of an UpstreamPool) --------------------------------------

    def new_connection(self, key: Any, breaker: Breaker | None = None) -> H2Stream:
        return H2Stream(self, key, breaker)

    def connect(self, stream: H2Stream) -> Deferred[H2Stream]:
        """A place for ``stream`` on a connection with room, or on a new one."""
        key = stream.key
        for conn in self.conns.get(key, ()):
            if conn.has_room:
                return conn.reserve(stream)
        conn = H2Connection(self, key, key[3], key[2] is not None)
        self.conns.setdefault(key, []).append(conn)
        if stream.breaker is not None:
            stream.breaker.connections.add(conn)
            self._limited[conn] = stream.breaker
        d = conn.reserve(stream)
        endpoint = self.pool.endpoint_for(key, ("h2",))
        endpoint.connect(_Once(conn)).addErrback(conn.connect_failed)
        return d

    def release(self, stream: Any) -> None:
        """A stream made for a request given up meanwhile."""
        stream.abandon()

    # -- what connections report ----------------------------------------------------------

    def forget(self, conn: H2Connection) -> None:
        """``conn`` takes no new stream (draining or closed)."""
        conns = self.conns.get(conn.key)
        if conns and conn in conns:
            conns.remove(conn)
            if not conns:
                del self.conns[conn.key]
        b = self._limited.pop(conn, None)
        if b is not None:
            b.connections.discard(conn)  # HTTP/2 connections counted beside HTTP/1.1 ones
            self._start_pending(b)

    def room_freed(self, conn: H2Connection) -> None:
        """A stream of ``conn`` ended, or the peer allowed more."""
        b = self._limited.get(conn)
        if b is not None:
            self._start_pending(b)

    def _start_pending(self, b: Breaker) -> None:
        while b.pending:
            req = b.pending[0]
            if req.finished:
                b.pending.popleft()
                continue
            if not any(c.has_room for c in self.conns.get(req.key, ())) and not b.may_connect():
                return
            b.pending.popleft()
            breakers.start(req, self)

    def close(self) -> None:
        for conns in list(self.conns.values()):
            for conn in list(conns):
                conn.close()
