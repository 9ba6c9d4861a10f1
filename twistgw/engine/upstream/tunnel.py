"""The splice of an upgraded (``101``) connection: bytes copied both ways
as they come, each side pausing the other when its write buffer is full,
until either side closes or nothing moved for ``idle_timeout`` seconds
(like Envoy's stream idle timeout and nginx's ``proxy_read_timeout`` on a
WebSocket); then both are closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.logger import Logger

from twistgw.engine import wire
from twistgw.config.defaults import TUNNEL_IDLE_TIMEOUT
from twistgw.engine.seams import TunnelEnd
from twistgw.engine.timers import LazyTimer

if TYPE_CHECKING:
    from twistgw.engine.upstream.connection import UpstreamConnection

__all__ = ["TUNNEL_IDLE_TIMEOUT", "Tunnel"]

#: Seconds a spliced connection may carry no byte either way before both
#: sides are closed (``--tunnel-idle-timeout``; the default is Envoy's stream
#: idle timeout, 5 minutes; nginx closes a WebSocket after its 60 s
#: ``proxy_read_timeout``). 0: never.

_log = Logger(namespace="twistgw.upstream")


class Tunnel:
    """One spliced connection (a :class:`~twistgw.engine.seams.Splice` for the client side)."""

    __slots__ = ("upstream", "client", "idle_timeout", "timer", "closed")

    def __init__(self, upstream: "UpstreamConnection", client: TunnelEnd, idle_timeout: float) -> None:
        self.upstream = upstream
        self.client = client
        self.idle_timeout = idle_timeout
        reactor = upstream.pool.reactor
        self.timer = LazyTimer(reactor.seconds, reactor.callLater)
        self.closed = False

    def start(self, held: list[bytes], rest: bytes) -> None:
        """``held``: what the client sent after its request; ``rest``: what
        the upstream sent after its ``101``."""
        for chunk in held:
            self.upstream.transport.write(chunk)
        if rest:
            self.client.tunnel_write(rest)
        self._moved()

    def _moved(self) -> None:
        if self.idle_timeout:
            self.timer.set(self.idle_timeout, self._idle)

    def _idle(self) -> None:
        _log.info("Tunnel to {upstream} idle for {seconds} s: closed",
                  upstream=self.upstream.pool.label(self.upstream.key), seconds=self.idle_timeout)
        self.client_lost()
        self.client.close()

    def from_upstream(self, data: bytes) -> None:
        if self.closed:
            return
        self.client.tunnel_write(data)
        self._moved()

    def from_client(self, data: bytes) -> None:
        if self.closed:
            return
        wire.write(self.upstream.transport, data)
        self._moved()

    def pause(self) -> None:
        """The client does not read: stop reading from the upstream."""
        if self.upstream.transport is not None:
            self.upstream.transport.pauseProducing()

    def resume(self) -> None:
        if self.upstream.transport is not None:
            self.upstream.transport.resumeProducing()

    def client_lost(self) -> None:
        """The client's side closed: close the upstream's."""
        if self.closed:
            return
        self.closed = True
        self.timer.stop()
        transport = self.upstream.transport
        if transport is not None:
            transport.loseConnection()

    def upstream_lost(self) -> None:
        """The upstream's side closed: close the client's."""
        if self.closed:
            return
        self.closed = True
        self.timer.stop()
        self.client.close()
