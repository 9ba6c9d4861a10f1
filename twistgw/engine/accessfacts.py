"""What an access-log operator reads of one finished exchange
(:class:`~twistgw.config.envoyformat.AccessFacts`), read only when a
Gateway's ``accessLoggingService`` asks: nothing here runs for a listener
without access logs."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["ExchangeFacts"]


class ExchangeFacts:
    """One exchange as the Envoy format operators see it."""

    __slots__ = ("_ex", "_head", "method", "target", "protocol", "status", "duration", "start", "client",
                 "upstream_host", "upstream", "route", "server_name", "health_check")

    def __init__(self, ex: Any, head: Any, duration: float, now: float) -> None:
        self._ex = ex
        self._head = head
        self.method = ex.method.decode("latin-1")
        self.target = ex.target.decode("latin-1")
        self.protocol = ex.version.decode("latin-1")
        self.status = ex.status
        self.duration = duration
        #: the wall-clock time the request started
        self.start = time.time() - duration
        ctx = head.ctx
        self.client = ctx.client_address if ctx is not None else head.client_address
        label = ex.upstream_label
        self.upstream_host = label.removeprefix("https://") if label else None
        self.upstream = ctx.upstream or None if ctx is not None else None
        self.route = ctx.route if ctx is not None else None
        health = head.gateway.health_path
        self.health_check = health is not None and ex.target == health
        tls = ex.proto.tls
        self.server_name = tls.server_name if tls is not None else None

    def header(self, canonical: bytes) -> str | None:
        if canonical == b":scheme":
            return str(self._head.scheme)
        if canonical == b"X-Request-Id" and self._head.request_id is not None:
            return str(self._head.request_id)  # the id sent upstream, as Envoy logs it
        values = self._ex.headers.get_canonical(canonical)
        return values[0].decode("latin-1") if values else None

    def peer(self) -> tuple[str, int]:
        address = self._ex.proto.transport.getPeer()
        return str(getattr(address, "host", "") or self._ex.proto.peer_host), int(getattr(address, "port", 0))

    def local(self) -> tuple[str, int]:
        address = self._ex.proto.transport.getHost()
        return str(getattr(address, "host", "")), int(getattr(address, "port", 0))
