"""The interfaces between the client side of the engine and the upstream
side. Each side is handed the other as one of these and calls nothing
else on it: no back-pointers, no attribute of the other side is set.

* :class:`Downstream` is what a forwarded request reports to (an
  ``Exchange`` implements it): the response head, body and end, a failure
  before the head (answered with Envoy's status) or after it (the client
  connection is cut), and an upgrade that became a tunnel.
* :class:`Forwarding` is what the client side holds of a forwarded request
  (an ``UpstreamRequest``): pause and resume the relay, the client's body
  is complete (the route timeout starts), the client went away.
* :class:`TunnelEnd` and :class:`Splice` are the two ends of a spliced
  (``101``) connection.
* :class:`PassingDownstream` is a :class:`Downstream` over another that
  passes every call on: the base of the wrappers that change a response on
  its way to the client (grpc-web, compression) and override only that.

The traffic policy (retries, upstream TLS, health checks) lives behind
:class:`Forwarding`, in :mod:`twistgw.engine.upstream`; the client side
does not change when it grows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from twistgw.engine.body import BodyFlow, RequestBody

__all__ = ["Downstream", "Forwarding", "Splice", "TunnelEnd"]


class Splice(Protocol):
    """A spliced connection, as the client side sees it."""

    def from_client(self, data: bytes) -> None: ...

    def pause(self) -> None:
        """The client does not read: stop reading from the upstream."""

    def resume(self) -> None: ...

    def client_lost(self) -> None: ...


class TunnelEnd(BodyFlow, Protocol):
    """The client connection, as a tunnel sees it (``pause_body`` /
    ``resume_body``: the upstream does not read as fast as the client sends)."""

    def tunnel_write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class Downstream(BodyFlow, Protocol):
    """One client request being forwarded, as the upstream side sees it.

    The attributes are read, never set, by the upstream side.
    """

    method: bytes
    #: the admitted upgrade (``websocket``), None when the request did not
    #: ask for one or it was not allowed
    upgrade: bytes | None
    body: RequestBody | None
    #: the request's Content-Length line (``0``: forwarded as such)
    content_length: bytes | None
    #: the client sent all of its request body
    body_complete: bool
    #: a response head kept to go out with the first body bytes; not None
    #: while response bytes wait to be written: the upstream side calls
    #: :meth:`flush` at the end of the read that brought them
    held: bytes | None

    @property
    def protocol(self) -> bytes:
        """What the client speaks: ``b"HTTP/1.0"``, ``b"HTTP/1.1"`` or ``b"HTTP/2"``."""

    def send_head(self, status: int, reason: bytes, lines: list[bytes], length: bytes | None,
                  hold: bool = False) -> None:
        """The upstream's response head (end-to-end ``lines``, its
        Content-Length or None); ``hold``: until the first body bytes or
        :meth:`flush`."""

    def write(self, data: bytes) -> None: ...

    def flush(self) -> None:
        """Write a held head (the read that brought it ended)."""

    def finish(self, trailers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """The response ended, with its ``trailers`` (lower-case names,
        already filtered by ``core.headers.trailer_pairs``): HTTP/2 HEADERS
        with END_STREAM, or an HTTP/1.1 upstream's chunked trailers."""

    def upstream_failed(self, status: int, body: bytes, why: str, error: str,
                        headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        """No response head: answer ``status`` (with ``headers``; or cut the
        client off if a head already went out)."""

    def upstream_broke(self, reason: str) -> None:
        """The response broke off after its head: cut the client off."""

    def upstream_moved(self, label: str) -> None:
        """A retry goes to another endpoint (``host:port``, or
        ``https://host:port``): the access log's upstream is the last try's."""

    def upgraded(self, tunnel: Splice) -> list[bytes]:
        """The ``101`` went out: from now on the connection is ``tunnel``.
        Returns the bytes the client sent after its request."""

    def tunnel_end(self) -> TunnelEnd: ...


class Forwarding(Protocol):
    """A forwarded request, as the client side sees it."""

    label: str

    def pause(self) -> None:
        """The client does not read the response: stop reading from the upstream."""

    def resume(self) -> None: ...

    def client_body_done(self) -> None:
        """The client sent its whole body: the response deadline starts."""

    def client_gone(self) -> None:
        """The client went away, or its request failed: abort."""


class PassingDownstream:
    """A :class:`Downstream` that passes everything on to ``ex``; a subclass
    overrides what it changes (``engine/grpcweb.py``, ``engine/compress.py``)."""

    def __init__(self, ex: Downstream) -> None:
        self.ex = ex
        self.method = ex.method
        self.upgrade = ex.upgrade
        self.body: Any = ex.body
        self.content_length = ex.content_length

    # what the upstream side reads, live
    @property
    def protocol(self) -> bytes:
        return self.ex.protocol

    @property
    def body_complete(self) -> bool:
        return self.ex.body_complete

    @property
    def held(self) -> bytes | None:
        return self.ex.held

    def send_head(self, status: int, reason: bytes, lines: list[bytes], length: bytes | None,
                  hold: bool = False) -> None:
        self.ex.send_head(status, reason, lines, length, hold)

    def write(self, data: bytes) -> None:
        self.ex.write(data)

    def flush(self) -> None:
        self.ex.flush()

    def finish(self, trailers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        self.ex.finish(trailers)

    def upstream_failed(self, status: int, body: bytes, why: str, error: str,
                        headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        self.ex.upstream_failed(status, body, why, error, headers)

    def upstream_broke(self, reason: str) -> None:
        self.ex.upstream_broke(reason)

    def upgraded(self, tunnel: Splice) -> list[bytes]:
        return self.ex.upgraded(tunnel)

    def tunnel_end(self) -> TunnelEnd:
        return self.ex.tunnel_end()

    def pause_body(self) -> None:
        self.ex.pause_body()

    def resume_body(self) -> None:
        self.ex.resume_body()

    def __getattr__(self, name: str) -> Any:
        # what the seam grows later (a retry's new endpoint...) reaches the exchange
        return getattr(self.ex, name)
