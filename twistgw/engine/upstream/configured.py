"""The connections of an Upstream with ``connectionConfig``: pooled apart
(the pool key's fifth part is the :class:`ConnectionConfig`), each a
:class:`ConfiguredConnection`, so a plain upstream's connection runs none
of this.

* ``maxRequestsPerConnection``: the connection is closed after that many
  requests instead of going back to the pool;
* ``connectTimeout``: the pool's endpoint for the key uses it (see
  :meth:`UpstreamPool._endpoint`);
* ``tcpKeepalive``: ``SO_KEEPALIVE`` with ``TCP_KEEPCNT`` / ``TCP_KEEPIDLE``
  / ``TCP_KEEPINTVL`` on the socket once connected;
* ``commonHttpProtocolOptions.idleTimeout``: how long it waits idle in the
  pool (0: no idle expiry); ``maxHeadersCount``: a response head with more
  header lines is malformed (502).
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

import httptools

from twistgw.api.upstreampolicy import ConnectionConfig, TcpKeepalive
from twistgw.engine.upstream.connection import State, UpstreamConnection

if TYPE_CHECKING:
    from twistgw.engine.upstream.pool import UpstreamPool
    from twistgw.engine.upstream.request import UpstreamRequest

__all__ = ["ConfiguredConnection", "set_keepalive", "socket_of"]

_HEAD = State.HEAD


def socket_of(transport: Any) -> socket.socket | None:
    """The socket under ``transport`` (a TCP transport, or TLS over one)."""
    for _ in range(4):
        get = getattr(transport, "getHandle", None)
        if get is not None:
            handle = get()
            if isinstance(handle, socket.socket):
                return handle
        transport = getattr(transport, "transport", None)
        if transport is None:
            return None
    return None


def set_keepalive(sock: socket.socket, keepalive: TcpKeepalive) -> None:
    """Envoy's ``tcp_keepalive`` socket options (what is unset stays the kernel's)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in ((socket.TCP_KEEPCNT, keepalive.probes), (socket.TCP_KEEPIDLE, keepalive.time),
                          (socket.TCP_KEEPINTVL, keepalive.interval)):
        if value is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


class ConfiguredConnection(UpstreamConnection):
    """An upstream connection under a ``connectionConfig``."""

    def __init__(self, pool: "UpstreamPool", key: Any) -> None:
        super().__init__(pool, key)
        config: ConnectionConfig = key[4]
        self.config = config
        #: requests sent on this connection
        self.requests = 0
        self.header_lines = 0
        if config.idle_timeout is not None:
            self.idle_timeout = config.idle_timeout

    def connectionMade(self) -> None:
        super().connectionMade()
        keepalive = self.config.tcp_keepalive
        if keepalive is not None:
            sock = socket_of(self.transport)
            if sock is not None:
                set_keepalive(sock, keepalive)

    def send(self, req: "UpstreamRequest", reused: bool) -> None:
        self.requests += 1
        self.header_lines = 0
        super().send(req, reused)

    def on_header(self, name: bytes, value: bytes) -> None:
        limit = self.config.max_headers
        if limit and self.state is _HEAD:
            self.header_lines += 1
            if self.header_lines > limit:
                # the parser stops and raises: a malformed response (502)
                raise httptools.HttpParserError(f"more than maxHeadersCount ({limit}) response headers")
        super().on_header(name, value)

    def _complete(self, keep_alive: bool) -> None:
        limit = self.config.max_requests
        super()._complete(keep_alive and not (limit and self.requests >= limit))
