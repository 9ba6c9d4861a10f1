"""One request on a client connection and its response: the
:class:`Exchange` and its :class:`Phase`. Every change of an exchange's
phase is in this module; accounting (the access line, metrics) happens
exactly once, on the way into a final phase.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from twisted.internet.defer import Deferred, succeed

from twistgw.api.headers import Headers
from twistgw.api.types import BodyPrefix, RequestContext
from twistgw.core.headers import wants_trailers
from twistgw.core.pipeline import RequestHead
from twistgw.core.plan import LocalResponse
from twistgw.engine import framing, wire
from twistgw.engine.body import RequestBody
from twistgw.engine.seams import Forwarding, Splice, TunnelEnd
from twistgw.engine.states import Phase

if TYPE_CHECKING:
    from twistgw.engine.connection import GatewayProtocol

__all__ = ["Exchange", "Phase"]


_QUEUED, _HANDLING, _RESPONDING, _DONE, _UPGRADED, _ABORTED = Phase
_HTTP11 = framing.HTTP11
_NO_BODY_STATUS = framing.NO_BODY_STATUS
_CHUNK = framing.CHUNK


class Exchange:
    """One request on a client connection and its response (the
    :class:`~twistgw.engine.seams.Downstream` the upstream side reports to).

    ``body`` is the request body (None without one), ``body_complete``
    whether the client sent all of it; ``status`` is the response's (0
    until its head).
    """

    __slots__ = ("proto", "method", "target", "version", "headers", "keep_alive", "body", "body_complete",
                 "expect_continue", "upgrade", "head", "status", "started", "upstream_label", "upstream",
                 "chunked", "no_body", "phase", "upstream_started", "content_length", "held", "unframed",
                 "truncated")

    def __init__(self, proto: "GatewayProtocol", method: bytes, target: bytes, version: bytes,
                 headers: Headers, keep_alive: bool, started: float) -> None:
        self.proto = proto
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
        self.keep_alive = keep_alive
        self.phase = _HANDLING  # wait() if it queues
        self.body: RequestBody | None = None
        self.body_complete = False
        self.expect_continue = False
        self.upgrade: bytes | None = None
        self.head: RequestHead | None = None
        self.status = 0
        self.started = started
        self.upstream_label = ""
        self.upstream: Forwarding | None = None
        self.chunked = False
        self.no_body = False
        #: when the request went upstream (reactor seconds), None while it has not
        self.upstream_started: float | None = None
        self.content_length: bytes | None = None
        #: a response head waiting to go out with the first body bytes
        self.held: bytes | None = None
        #: the response's body ends with the connection (no length, not chunked)
        self.unframed = False
        #: who cut the response short after its head ("upstream"), "" if nobody did
        self.truncated = ""

    @property
    def ctx(self) -> RequestContext | None:
        head = self.head
        return head.ctx if head is not None else None

    @property
    def protocol(self) -> bytes:
        """What the client speaks (``seams.Downstream.protocol``)."""
        return b"HTTP/1.1" if self.version is _HTTP11 else b"HTTP/1.0"

    @property
    def finished(self) -> bool:
        return self.phase >= _DONE

    def wait(self) -> None:
        """→ QUEUED: read while another request is being answered."""
        self.phase = _QUEUED

    def start(self) -> None:
        """QUEUED → HANDLING: its turn came."""
        self.phase = _HANDLING
        self.proto.gateway.handle(self)

    def drop_upgrade(self) -> None:
        """The route does not allow the upgrade: forward the request as a
        plain one; the connection closes after the answer (what follows the
        request on it was sent for the other protocol)."""
        self.upgrade = None
        self.keep_alive = False

    # -- the response ----------------------------------------------------------

    def send_head(self, status: int, reason: bytes, lines: list[bytes], length: bytes | None,
                  hold: bool = False) -> None:
        """HANDLING → RESPONDING: the status line and ``lines`` (each
        ``b"Name: value\\r\\n"``) with the framing: ``length`` (the
        Content-Length value) or, when None and a body may follow, chunked
        (HTTP/1.1) or close-delimited.

        ``hold``: keep the head until the first body bytes (or
        :meth:`flush`, or :meth:`finish`) so both go out in one write."""
        self.phase = _RESPONDING
        self.status = status
        if self.upstream_started is not None:  # the upstream's head (seams.Downstream)
            gateway = self.proto.gateway
            if gateway.metrics is not None:
                gateway.metrics.upstream_latency(self, gateway.reactor.seconds() - self.upstream_started)
        no_body = self.no_body = status in _NO_BODY_STATUS or self.method == b"HEAD" or status < 200
        if not self.body_complete:
            # The response goes out before the request body was read: the
            # rest of it can never be taken for a next request.
            self.proto.stop_reading()
            self.keep_alive = False
        if length is not None:
            if status != 204:
                lines.append(b"Content-Length: %s\r\n" % length)
        elif not no_body:
            if self.version is _HTTP11:
                self.chunked = True
                lines.append(b"Transfer-Encoding: chunked\r\n")
            else:
                self.keep_alive = False
                self.unframed = True
        if not self.keep_alive:
            lines.append(framing.CLOSE_LINE)
        lines.append(b"\r\n")
        lines.insert(0, framing.status_line(status, reason))
        if hold:
            self.held = b"".join(lines)
        else:
            wire.write(self.proto.transport, b"".join(lines))

    def _out(self, data: bytes) -> None:
        held = self.held
        if held is not None:
            self.held = None
            data = held + data
        if data and self.phase is _RESPONDING:
            wire.write(self.proto.transport, data)

    def flush(self) -> None:
        """Write a held head."""
        if self.held is not None:
            self._out(b"")

    def write(self, data: bytes) -> None:
        if self.no_body or not data or self.phase is not _RESPONDING:
            return
        if self.chunked:
            data = _CHUNK % (len(data), data)
        self._out(data)

    def finish(self, trailers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """RESPONDING → DONE. ``trailers`` (lower-case names) go in the last
        chunk when the response is chunked and the client said ``TE:
        trailers``; otherwise they are dropped (RFC 9110 §6.5.1: a recipient
        may discard them)."""
        if self.phase >= _DONE:
            return
        self.upstream = None
        if self.chunked:
            if trailers and wants_trailers(self.headers.getRawHeaders(b"te")):
                self._out(framing.last_chunk(trailers))
            else:
                self._out(framing.LAST_CHUNK)
        elif self.held is not None:
            self._out(b"")
        self.phase = _DONE
        proto = self.proto
        proto.gateway.record(self)
        proto.exchange_done(self)

    def respond(self, answer: LocalResponse) -> None:
        """Send the gateway's own answer."""
        if self.phase is not _HANDLING:
            return
        lines = []
        body = answer.body
        if body and answer.content_type:
            lines.append(b"Content-Type: %s\r\n" % answer.content_type)
        for name, value in answer.headers:
            lines.append(b"%s: %s\r\n" % (name, value))
        status = answer.status
        self.send_head(status, b"", lines, None if status == 304 else b"%d" % len(body), hold=True)
        if body:
            self.write(body)
        self.finish()

    def fail(self, answer: LocalResponse) -> None:
        """The gateway could not produce a response (no head out yet:
        ``answer``; else the client is cut off)."""
        if self.phase is _HANDLING:
            self.respond(answer)
        elif self.phase is _RESPONDING:
            self.abort()

    def abort(self) -> None:
        """→ ABORTED: the response broke off. The client connection closes
        without the rest of the body (the client sees a truncated response:
        no terminating chunk, a body shorter than its Content-Length); a
        response delimited by the close is reset instead, since a clean
        close would end it as if it were complete."""
        if self.phase >= _DONE:
            return
        unframed = self.unframed and self.phase is _RESPONDING
        self._end_aborted()
        self.keep_alive = False
        proto = self.proto
        if unframed:
            proto.abort()
        proto.stop_reading()
        proto.exchange_done(self)
        proto.close()

    def reject(self, answer: bytes, status: int) -> None:
        """→ ABORTED: the request itself broke (a malformed body) before
        any response byte: ``answer`` goes out and the connection closes."""
        self._end_aborted(status)
        self.proto.close_with(answer)

    def client_lost(self) -> None:
        """→ ABORTED: the client connection is gone."""
        if self.phase < _DONE:
            self._end_aborted()

    def _end_aborted(self, status: int = 0) -> None:
        self.phase = _ABORTED
        self.held = None
        if status:
            self.status = status
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.client_gone()
        if self.body is not None:
            self.body.stop()
        self.proto.gateway.record(self)

    # -- what the upstream side reports (seams.Downstream) -------------------------

    def upstream_failed(self, status: int, body: bytes, why: str, error: str,
                        headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        self.upstream = None
        if self.phase < _DONE:
            self.proto.gateway.upstream_failed(self, status, body, why, error, headers)

    def upstream_broke(self, reason: str) -> None:
        self.upstream = None
        if self.phase < _DONE:
            self.proto.gateway.upstream_broke(self, reason)

    def upstream_moved(self, label: str) -> None:
        self.upstream_label = label

    def upgraded(self, tunnel: Splice) -> list[bytes]:
        """RESPONDING → UPGRADED (the 101 went out)."""
        self.upstream = None
        self.phase = _UPGRADED
        self.proto.gateway.record(self)
        return self.proto.tunnel_started(self, tunnel)

    def tunnel_end(self) -> TunnelEnd:
        return self.proto

    # -- the request body, read before the chain decides (api.BodySource) -------

    def read_prefix(self, max_bytes: int, partial: bool) -> Deferred[BodyPrefix]:
        """:meth:`RequestContext.read_body <twistgw.RequestContext.read_body>`
        (``ctx.body_source`` is this exchange when the request has a body)."""
        body = self.body
        if body is None:
            return succeed(BodyPrefix(b"", True))
        if self.expect_continue and not self.body_complete and not (
                not partial and body.length is not None and body.length > max_bytes):
            # The body is wanted before the chain decides: invite it now.
            self.expect_continue = False
            wire.write(self.proto.transport, framing.CONTINUE)
        return body.read_prefix(max_bytes, partial)

    def pause_body(self) -> None:
        self.proto.pause_body()

    def resume_body(self) -> None:
        self.proto.resume_body()
