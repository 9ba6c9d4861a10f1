"""Idle keep-alive connections per endpoint, and the start of every
forwarded request. One pool per gateway process.

Extension points for the traffic policy: :meth:`UpstreamPool.forward`
(where a request meets an endpoint), :meth:`UpstreamPool._endpoint` (how
an endpoint is reached: upstream TLS wraps it here) and
:mod:`~twistgw.engine.upstream.policy` (retries, failure answers).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.protocol import Factory

from twistgw.api.types import Endpoint, UpstreamInfo
from twistgw.api.upstreampolicy import ConnectionConfig, UpstreamTls
from twistgw.config.defaults import CONNECT_TIMEOUT, IDLE_TIMEOUT
from twistgw.core.plan import Forward
from twistgw.engine.seams import Downstream
from twistgw.engine.upstream.configured import ConfiguredConnection
from twistgw.engine.upstream.connection import State, UpstreamConnection
from twistgw.engine.upstream.h2pool import H2Pool
from twistgw.engine.upstream.memtls import TLSClientEndpoint
from twistgw.engine.upstream import breakers, policy
from twistgw.engine.upstream.breakers import Breaker, LimitedRequest, LimitedRetryingRequest
from twistgw.engine.upstream.request import UpstreamRequest
from twistgw.engine.upstream.retrying import RetryingRequest
from twistgw.engine.upstream.tunnel import TUNNEL_IDLE_TIMEOUT
from twistgw.stdtls import server_names, upstream_context

__all__ = ["UpstreamPool"]

_READY = State.READY


class _Once(Factory):
    """Builds the one connection it was made for (no log line per connect,
    unlike ``connectProtocol``)."""

    noisy = False

    def __init__(self, conn: UpstreamConnection) -> None:
        self.conn = conn

    def buildProtocol(self, addr: Any) -> UpstreamConnection:
        return self.conn


class UpstreamPool:
    """Idle keep-alive connections per endpoint, and the forwarding of
    requests through them."""

    def __init__(self, reactor: Any, connect_timeout: float = CONNECT_TIMEOUT, max_per_host: int = 64,
                 idle_timeout: float = IDLE_TIMEOUT, tunnel_idle_timeout: float = TUNNEL_IDLE_TIMEOUT) -> None:
        self.reactor = reactor  # Any: Twisted's reactor interfaces are not typed
        self.connect_timeout = connect_timeout
        self.max_per_host = max_per_host
        self.idle_timeout = idle_timeout
        self.tunnel_idle_timeout = tunnel_idle_timeout
        self.idle: dict[Any, list[UpstreamConnection]] = {}  # Any: (host, port) or (host, port, UpstreamTls)
        self._endpoints: dict[Any, Any] = {}
        self._labels: dict[Any, str] = {}
        self._all: set[UpstreamConnection] = set()
        #: circuit breakers per upstream (namespace, name), and the breaker
        #: of each connection a limited request opened
        self._breakers: dict[tuple[str, str], Breaker] = {}
        self._limited: dict[UpstreamConnection, Breaker] = {}
        #: the HTTP/2 connections (Upstreams with ``useHttp2``)
        self.h2 = H2Pool(self)

    def forward(self, ex: Downstream, plan: Forward) -> UpstreamRequest:
        """Send ``plan`` on an idle connection to its endpoint, or a new
        one; the outcome is reported to ``ex``."""
        upstream = plan.upstream
        if upstream.http2 is not None and (not upstream.http2.downstream_protocol or ex.protocol == b"HTTP/2"):
            return self.h2.forward(ex, plan)  # useHttp2 (USE_DOWNSTREAM_PROTOCOL: for HTTP/2 clients only)
        if upstream.breakers is None and upstream.connection is None:
            # key_of's last line, inline: a plain route makes no call for its key
            endpoint = plan.endpoint
            tls = upstream.tls
            key: Any = (endpoint.host, endpoint.port) if tls is None else (endpoint.host, endpoint.port, tls)
            label = self._labels.get(key)
            if label is None:
                label = self.label(key)
        else:
            key = self.key_of(plan.endpoint, upstream)
            label = self.label(key)
            if upstream.breakers is not None:
                return self._forward_limited(ex, plan, key, label)
        retries = plan.retry
        req = UpstreamRequest(self, ex, plan, key, label) if retries is None else \
            RetryingRequest(self, ex, plan, key, label, retries)
        idle = self.idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.state is _READY:
                conn.send(req, reused=True)
                break
        else:
            req.connect()
        if ex.body_complete:
            req.client_body_done()
        return req

    @staticmethod
    def key_of(endpoint: Endpoint, upstream: UpstreamInfo) -> Any:
        """The pool key of ``endpoint``'s connections (a request's, or a
        retry's on another endpoint)."""
        tls = upstream.tls
        if upstream.breakers is not None:
            # its connections are its own (Envoy's pools are per cluster): counted, never shared
            key: Any = (endpoint.host, endpoint.port, tls, (upstream.namespace, upstream.name))
            return key if upstream.connection is None else key + (upstream.connection,)
        if upstream.connection is not None:
            # connectionConfig: pooled apart, ConfiguredConnections (configured.py)
            return (endpoint.host, endpoint.port, tls, None, upstream.connection)
        # A TLS upstream's connections are kept apart from plain ones to
        # the same address (and from other TLS settings): its key has a third
        # part. A plain route reads one attribute more, nothing else.
        return (endpoint.host, endpoint.port) if tls is None else (endpoint.host, endpoint.port, tls)

    def _forward_limited(self, ex: Downstream, plan: Forward, key: Any, label: str) -> UpstreamRequest:
        """:meth:`forward` to an upstream with circuit breakers."""
        upstream = plan.upstream
        limits = upstream.breakers
        assert limits is not None
        b = self.breaker(upstream)
        retries = plan.retry
        req: LimitedRequest | LimitedRetryingRequest
        if retries is None:
            req = LimitedRequest(self, ex, plan, key, label)
        else:
            req = LimitedRetryingRequest(self, ex, plan, key, label, retries)
        req.breaker = b
        if not b.admit(req):
            req.fail(policy.OVERFLOW, "circuit breaker: maxRequests", policy.OVERLOADED)
            return req
        idle = self.idle.get(key)
        if (not idle or not any(c.usable for c in idle)) and not b.may_connect():
            if not b.may_wait():
                req.fail(policy.OVERFLOW, "circuit breaker: maxPendingRequests", policy.OVERLOADED)
                return req
            b.pending.append(req)  # started when one of its connections frees
        else:
            breakers.start(req, self)
        if ex.body_complete:
            req.client_body_done()
        return req

    def breaker(self, upstream: Any) -> Breaker:
        """The circuit-breaker counters of ``upstream`` (an UpstreamInfo with ``breakers``)."""
        limits = upstream.breakers
        b = self._breakers.get((upstream.namespace, upstream.name))
        if b is None:
            b = self._breakers[(upstream.namespace, upstream.name)] = Breaker(limits)
        b.limits = limits  # a new configuration keeps the counts
        return b

    def _freed(self, conn: UpstreamConnection, b: Breaker, closed: bool) -> None:
        """A connection of a limited upstream finished an exchange (``closed``:
        or closed): start a waiting request."""
        req = b.next_pending()
        if req is None:
            return
        if not closed and conn.key != req.key and conn.transport is not None:
            b.pending.appendleft(req)
            conn.transport.loseConnection()  # its slot goes to the waiting request
            return
        breakers.start(req, self)

    def label(self, key: Any) -> str:
        """``host:port`` (``https://host:port`` over TLS) of an endpoint (the access log's ``upstream``, logs),
        remembered for at most 4,096 endpoints."""
        label = self._labels.get(key)
        if label is None:
            label = f"{key[0]}:{key[1]}" if len(key) == 2 or key[2] is None else f"https://{key[0]}:{key[1]}"
            if len(self._labels) < 4096:
                self._labels[key] = label
        return label

    def new_connection(self, key: Any, breaker: Breaker | None = None) -> UpstreamConnection:
        conn = UpstreamConnection(self, key) if len(key) < 5 else ConfiguredConnection(self, key)
        self._all.add(conn)
        if breaker is not None:
            breaker.connections.add(conn)
            self._limited[conn] = breaker
        return conn

    def connect(self, conn: UpstreamConnection) -> Deferred[UpstreamConnection]:
        """Connect ``conn``; the Deferred fires with it."""
        key = conn.key
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            endpoint = self._endpoints[key] = self._endpoint(*key)
            if len(self._endpoints) > 4096:  # addresses come and go with the config: bounded
                self._endpoints.clear()
                self._endpoints[key] = endpoint
        d: Deferred[UpstreamConnection] = endpoint.connect(_Once(conn))
        return d

    def endpoint_for(self, key: Any, alpn: tuple[str, ...]) -> Any:
        """The endpoint of an HTTP/2 pool key ``(host, port, tls, http2)``, offering ``alpn`` over TLS."""
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            endpoint = self._endpoints[key] = self._endpoint(key[0], key[1], key[2], alpn=alpn)
        return endpoint

    def _endpoint(self, host: str, port: int, tls: UpstreamTls | None = None, _upstream: Any = None,
                  config: ConnectionConfig | None = None, alpn: tuple[str, ...] = ("http/1.1",)) -> Any:
        timeout = self.connect_timeout
        if config is not None and config.connect_timeout is not None:
            timeout = config.connect_timeout  # connectionConfig.connectTimeout
        if ":" in host:
            plain: Any = TCP6ClientEndpoint(self.reactor, host.strip("[]"), port, timeout=timeout)
        elif host.replace(".", "").isdigit():
            plain = TCP4ClientEndpoint(self.reactor, host, port, timeout=timeout)
        else:
            plain = HostnameEndpoint(self.reactor, host, port, timeout=timeout)
        if tls is None:
            return plain
        # Settings were checked when the configuration loaded (the same
        # context, kept); the peer is verified by name (memtls), always.
        sni, names = server_names(tls.server_name(host.strip("[]")), tls.verify_names)
        return TLSClientEndpoint(plain, upstream_context(tls, alpn), sni, names)

    def release(self, conn: UpstreamConnection) -> None:
        """A connection that finished a keep-alive exchange (or was made for
        a request given up meanwhile)."""
        idle = self.idle.setdefault(conn.key, [])
        if conn.state is not _READY or len(idle) >= self.max_per_host:
            if conn.transport is not None:
                conn.transport.loseConnection()
            return
        idle.append(conn)
        timeout = self.idle_timeout if conn.idle_timeout is None else conn.idle_timeout
        if timeout:
            conn.timer.set(timeout, conn.idle_expired)
        if self._limited:
            b = self._limited.get(conn)
            if b is not None and b.pending:
                self._freed(conn, b, False)

    def forget(self, conn: UpstreamConnection) -> None:
        self._all.discard(conn)
        idle = self.idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)
        if self._limited:
            b = self._limited.pop(conn, None)
            if b is not None:
                b.connections.discard(conn)
                if b.pending:
                    self._freed(conn, b, True)

    def close(self) -> Deferred[None]:
        """Close every idle connection (on shutdown)."""
        for idle in self.idle.values():
            for conn in list(idle):
                if conn.transport is not None:
                    conn.transport.loseConnection()
        self.idle.clear()
        self.h2.close()
        return succeed(None)
