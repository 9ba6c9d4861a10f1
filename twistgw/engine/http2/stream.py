"""One HTTP/2 stream: a request and its response, as the rest of the engine
sees an HTTP/1.1 :class:`~twistgw.engine.exchange.Exchange`.

:class:`H2Stream` is a :class:`~twistgw.engine.seams.Downstream` handed to
the same :meth:`Gateway.handle <twistgw.engine.gateway.Gateway.handle>`:
the pipeline, every plugin and the upstream side cannot tell the protocol
apart. Its :class:`~twistgw.engine.states.Phase` changes here only, as an
exchange's do in ``exchange.py`` (HANDLING → RESPONDING → DONE or
ABORTED; an HTTP/2 stream never queues and never upgrades); accounting
(access line, metrics) happens once, on the way into a final phase.

What goes out is queued on the stream (:attr:`H2Stream.out`) and handed
to ``h2`` by the connection as the client's flow-control windows allow
(:meth:`H2ServerConnection.pump
<twistgw.engine.http2.connection.H2ServerConnection.pump>`); past
:data:`~twistgw.engine.framing.BODY_BUFFER_LIMIT` queued bytes the upstream
is paused. What comes in (the request body) is acknowledged to the client
(its window handed back) only once the upstream side took it: a client
that sends faster than the upstream reads has its window withheld.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred, succeed

from twistgw.api.headers import Headers
from twistgw.api.types import BodyPrefix, RequestContext
from twistgw.core.grpc import local_reply
from twistgw.core.pipeline import RequestHead
from twistgw.core.plan import LocalResponse
from twistgw.engine import framing
from twistgw.engine.body import RequestBody
from twistgw.engine.http2.headers import response_fields
from twistgw.engine.seams import Forwarding, Splice, TunnelEnd
from twistgw.engine.states import Phase
from twistgw.engine.timers import LazyTimer

if TYPE_CHECKING:
    from twistgw.engine.http2.connection import H2ServerConnection

__all__ = ["H2Stream"]

_QUEUED, _HANDLING, _RESPONDING, _DONE, _UPGRADED, _ABORTED = Phase
_NO_BODY_STATUS = framing.NO_BODY_STATUS
_LIMIT = framing.BODY_BUFFER_LIMIT
HTTP2 = b"HTTP/2"


class H2Stream:
    """One request on an HTTP/2 connection and its response (a
    :class:`~twistgw.engine.seams.Downstream`; ``proto`` is the connection).

    Output: ``head`` (a response header list not yet handed to ``h2``),
    ``out`` (body bytes the window did not let out yet, ``queued`` of
    them), ``ending`` (None until the response ended; then its trailers,
    ``()`` without). ``sent_end``: END_STREAM went to ``h2``.
    Input: ``withheld`` (the upstream side asked to pause: received bytes
    are not acknowledged), ``unacked`` (bytes whose window is withheld),
    ``remote_ended`` (the client's END_STREAM).
    """

    __slots__ = ("proto", "stream_id", "method", "target", "headers", "keep_alive", "body", "body_complete",
                 "expect_continue", "head", "status", "started", "upstream_label", "upstream", "phase",
                 "upstream_started", "content_length", "held", "no_body", "fields", "out", "queued", "ending",
                 "sent_end", "withheld", "unacked", "remote_ended", "upstream_paused", "stall", "content_type",
                 "responded", "truncated")

    version = HTTP2
    protocol = HTTP2
    #: an HTTP/2 stream never upgrades (RFC 9113 §8.6; no extended CONNECT)
    upgrade: bytes | None = None

    def __init__(self, proto: "H2ServerConnection", stream_id: int, method: bytes, target: bytes,
                 headers: Headers, started: float) -> None:
        self.proto = proto
        self.stream_id = stream_id
        self.method = method
        self.target = target
        self.headers = headers
        #: False: the connection drains after this stream (a 421 answer)
        self.keep_alive = True
        self.phase = _HANDLING
        self.body: RequestBody | None = None
        self.body_complete = True
        self.expect_continue = False
        self.head: RequestHead | None = None
        self.status = 0
        self.started = started
        self.upstream_label = ""
        self.upstream: Forwarding | None = None
        self.upstream_started: float | None = None
        self.content_length: bytes | None = None
        self.content_type: bytes | None = None
        self.held: bytes | None = None
        self.no_body = False
        self.fields: list[tuple[bytes, bytes]] | None = None
        self.out: deque[bytes] = deque()
        self.queued = 0
        self.ending: Sequence[tuple[bytes, bytes]] | None = None
        self.sent_end = False
        self.withheld = False
        self.unacked = 0
        self.remote_ended = False
        self.upstream_paused = False
        #: the response head went to h2 (a reset after it is not premature)
        self.responded = False
        #: runs while the client's window keeps output queued (zero-window stall)
        self.stall: LazyTimer | None = None
        #: who cut the response short after its head ("upstream": the stream
        #: was reset), "" if nobody did (the access line's ``truncated``)
        self.truncated = ""

    @property
    def ctx(self) -> RequestContext | None:
        head = self.head
        return head.ctx if head is not None else None

    @property
    def finished(self) -> bool:
        return self.phase >= _DONE

    def start(self) -> None:
        """To the pipeline (its HEADERS, and a reset not in the same read)."""
        gateway = self.proto.gateway
        gateway.inflight += 1
        gateway.handle(self)

    def drop_upgrade(self) -> None:
        """Never asked: an HTTP/2 request has no upgrade."""

    # -- the request body ------------------------------------------------------------

    def received(self, data: bytes, flow: int) -> None:
        """DATA from the client (``flow``: its flow-controlled length)."""
        body = self.body
        if body is not None and not body.stopped and not body.complete:
            body.write(data)
            if self.withheld:
                self.unacked += flow
                return
        self.proto.acknowledge(self, flow)

    def ended(self, trailers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """The client's END_STREAM (after its trailers, if any)."""
        self.remote_ended = True
        self.body_complete = True
        body = self.body
        if body is not None and not body.stopped:
            body.finish(trailers)
            if self.upstream is not None:
                self.upstream.client_body_done()

    def pause_body(self) -> None:
        """The upstream side does not take the body: withhold the window."""
        self.withheld = True

    def resume_body(self) -> None:
        self.withheld = False
        unacked, self.unacked = self.unacked, 0
        if unacked:
            self.proto.acknowledge(self, unacked)
            self.proto.flush()

    def send_continue(self) -> None:
        """``100`` (an informational HEADERS frame): the body may come."""
        self.expect_continue = False
        self.proto.informational(self, 100)

    def read_prefix(self, max_bytes: int, partial: bool) -> Deferred[BodyPrefix]:
        """:meth:`RequestContext.read_body <twistgw.RequestContext.read_body>`."""
        body = self.body
        if body is None:
            return succeed(BodyPrefix(b"", True))
        if self.expect_continue and not self.body_complete and not (
                not partial and body.length is not None and body.length > max_bytes):
            self.send_continue()
        return body.read_prefix(max_bytes, partial)

    # -- the response (seams.Downstream) ------------------------------------------------

    def send_head(self, status: int, reason: bytes, lines: list[bytes], length: bytes | None,
                  hold: bool = False) -> None:
        """HANDLING → RESPONDING: the head is queued (``reason`` has no
        place in HTTP/2); it goes out with the first body bytes, or at
        :meth:`flush`."""
        self.phase = _RESPONDING
        self.status = status
        if self.upstream_started is not None:
            gateway = self.proto.gateway
            if gateway.metrics is not None:
                gateway.metrics.upstream_latency(self, gateway.reactor.seconds() - self.upstream_started)
        self.no_body = status in _NO_BODY_STATUS or self.method == b"HEAD"
        self.fields = response_fields(status, lines, None if status == 204 else length)
        self.held = b""
        if not hold:
            self.flush()

    def write(self, data: bytes) -> None:
        if self.no_body or not data or self.phase is not _RESPONDING:
            return
        self.out.append(data)
        self.queued += len(data)
        self.held = b""  # written at the end of the upstream's read (flush)
        if self.queued > _LIMIT and not self.upstream_paused and self.upstream is not None:
            self.upstream_paused = True
            self.upstream.pause()

    def flush(self) -> None:
        """Hand what is queued to h2 (as the windows allow) and write it."""
        if self.held is not None:
            self.held = None
            self.proto.pump(self)
            self.proto.flush()

    def finish(self, trailers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """RESPONDING → DONE; the END_STREAM (with ``trailers``, a last
        HEADERS frame) follows what is queued."""
        if self.phase >= _DONE:
            return
        self.upstream = None
        self.ending = tuple(trailers)
        self.phase = _DONE
        self.held = None
        self.proto.pump(self)
        self.proto.flush()
        self.proto.gateway.record(self)
        if not self.keep_alive:
            self.proto.finish_and_close()

    def respond(self, answer: LocalResponse) -> None:
        """The gateway's own answer (gRPC's trailers-only form to a gRPC
        request, :func:`twistgw.core.grpc.local_reply`)."""
        if self.phase is not _HANDLING:
            return
        trailers_only = False
        if self.content_type is not None:
            reply = local_reply(answer, self.content_type)
            trailers_only = reply is not answer
            answer = reply
        lines = []
        body = answer.body
        if body and answer.content_type:
            lines.append(b"content-type: %s\r\n" % answer.content_type)
        for name, value in answer.headers:
            lines.append(b"%s: %s\r\n" % (name, value))
        status = answer.status
        # content-length as over HTTP/1.1 (0 for an empty body), but for
        # gRPC's trailers-only answer: one HEADERS frame, as Envoy sends it
        self.send_head(status, b"", lines, None if status == 304 or trailers_only else b"%d" % len(body), hold=True)
        if body:
            self.write(body)
        self.finish()

    def fail(self, answer: LocalResponse) -> None:
        if self.phase is _HANDLING:
            self.respond(answer)
        elif self.phase is _RESPONDING:
            self.abort()

    def abort(self) -> None:
        """→ ABORTED: the response broke off; the stream is reset
        (INTERNAL_ERROR), the connection and its other streams go on."""
        if self.phase >= _DONE:
            return
        self._end_aborted()
        self.proto.reset(self)

    def refuse(self, status: int) -> None:
        """A request the engine answers before the pipeline (414, 431, 501)."""
        self.proto.gateway.inflight += 1
        self.respond(LocalResponse(status, reason="the HTTP/2 request head is refused"))

    def client_lost(self) -> None:
        """→ ABORTED: the client reset the stream, or the connection is gone."""
        if self.stall is not None:
            self.stall.stop()
        if self.phase < _DONE:
            self._end_aborted()

    def _end_aborted(self) -> None:
        self.phase = _ABORTED
        self.held = None
        self.out.clear()
        self.queued = 0
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.client_gone()
        if self.body is not None:
            self.body.stop()
        self.proto.gateway.record(self)

    # -- what the upstream side reports (seams.Downstream) ------------------------------

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
        """A retry went to another endpoint: the access line names the last one."""
        self.upstream_label = label

    def upgraded(self, tunnel: Splice) -> list[bytes]:
        raise AssertionError("an HTTP/2 stream never asks for an upgrade")  # upgrade is None: a 101 is a 502

    def tunnel_end(self) -> TunnelEnd:
        raise AssertionError("an HTTP/2 stream never asks for an upgrade")

    # -- what the connection reports ----------------------------------------------------

    def drained(self) -> None:
        """The queue went below the bound: the upstream reads again."""
        if self.upstream_paused and self.queued <= _LIMIT:
            self.upstream_paused = False
            if self.upstream is not None:
                self.upstream.resume()

    def stalled(self) -> None:
        """The client's window kept the response queued for the idle
        timeout (a zero-window stall): the stream is reset (CANCEL)."""
        self.stall = None
        if self.sent_end or self.phase is _ABORTED:
            return
        if self.phase < _DONE:
            self._end_aborted()
        else:
            self.out.clear()
            self.queued = 0
        self.proto.reset(self, stalled=True)
