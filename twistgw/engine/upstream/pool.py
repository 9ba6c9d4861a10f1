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

from twistgw.config.defaults import CONNECT_TIMEOUT, IDLE_TIMEOUT
from twistgw.core.plan import Forward
from twistgw.engine.seams import Downstream
from twistgw.engine.upstream.connection import State, UpstreamConnection
from twistgw.engine.upstream.request import UpstreamRequest
from twistgw.engine.upstream.tunnel import TUNNEL_IDLE_TIMEOUT

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
        self.idle: dict[tuple[str, int], list[UpstreamConnection]] = {}
        self._endpoints: dict[tuple[str, int], Any] = {}
        self._labels: dict[tuple[str, int], str] = {}
        self._all: set[UpstreamConnection] = set()

    def forward(self, ex: Downstream, plan: Forward) -> UpstreamRequest:
        """Send ``plan`` on an idle connection to its endpoint, or a new
        one; the outcome is reported to ``ex``."""
        endpoint = plan.endpoint
        key = (endpoint.host, endpoint.port)
        label = self._labels.get(key)
        if label is None:
            label = self.label(key)
        req = UpstreamRequest(self, ex, plan, key, label)
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

    def label(self, key: tuple[str, int]) -> str:
        """``host:port`` of an endpoint (the access log's ``upstream``, logs),
        remembered for at most 4,096 endpoints."""
        label = self._labels.get(key)
        if label is None:
            label = f"{key[0]}:{key[1]}"
            if len(self._labels) < 4096:
                self._labels[key] = label
        return label

    def new_connection(self, key: tuple[str, int]) -> UpstreamConnection:
        conn = UpstreamConnection(self, key)
        self._all.add(conn)
        return conn

    def connect(self, conn: UpstreamConnection) -> Deferred[UpstreamConnection]:
        """Connect ``conn``; the Deferred fires with it."""
        key = conn.key
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            endpoint = self._endpoints[key] = self._endpoint(*key)
        d: Deferred[UpstreamConnection] = endpoint.connect(_Once(conn))
        return d

    def _endpoint(self, host: str, port: int) -> Any:
        if ":" in host:
            return TCP6ClientEndpoint(self.reactor, host.strip("[]"), port, timeout=self.connect_timeout)
        if host.replace(".", "").isdigit():
            return TCP4ClientEndpoint(self.reactor, host, port, timeout=self.connect_timeout)
        return HostnameEndpoint(self.reactor, host, port, timeout=self.connect_timeout)

    def release(self, conn: UpstreamConnection) -> None:
        """A connection that finished a keep-alive exchange (or was made for
        a request given up meanwhile)."""
        idle = self.idle.setdefault(conn.key, [])
        if conn.state is not _READY or len(idle) >= self.max_per_host:
            if conn.transport is not None:
                conn.transport.loseConnection()
            return
        idle.append(conn)
        if self.idle_timeout:
            conn.timer.set(self.idle_timeout, conn.idle_expired)

    def forget(self, conn: UpstreamConnection) -> None:
        self._all.discard(conn)
        idle = self.idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    def close(self) -> Deferred[None]:
        """Close every idle connection (on shutdown)."""
        for idle in self.idle.values():
            for conn in list(idle):
                if conn.transport is not None:
                    conn.transport.loseConnection()
        self.idle.clear()
        return succeed(None)
