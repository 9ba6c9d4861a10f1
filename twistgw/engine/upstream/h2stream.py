"""One request on an HTTP/2 upstream connection: an :class:`H2Stream`.

To the :class:`~twistgw.engine.upstream.request.UpstreamRequest` it serves
it is what an HTTP/1.1 :class:`~.connection.UpstreamConnection` is (``send``,
``abandon``, ``timer``, ``state``, ``pause_relay``), so retries, circuit
breakers, timeouts and outlier detection run unchanged; to the request body
it is the :class:`~twistgw.engine.body.BodyConsumer`. Its life is the same
:class:`~.connection.State`: CONNECTING (waiting for its connection) →
SENT (HEADERS out, no answer) → BODY (the response head was relayed) →
CLOSED. Every change of it is in this module.

Flow control, both ways:

* the response: DATA the client has not taken is not acknowledged while
  the client is paused (:meth:`pause_relay`), so the upstream may send at
  most the stream's window (``initialStreamWindowSize``) ahead of a slow
  client, and the connection's window over all its streams;
* the request body: sent as the upstream's window allows; what waits is
  bounded (:data:`~twistgw.engine.framing.BODY_BUFFER_LIMIT`), past it the
  client is paused until the window opens.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Sequence

from h2.errors import ErrorCodes
from h2.exceptions import H2Error

from twistgw.core.headers import end_to_end_lines, trailer_pairs
from twistgw.engine.framing import BODY_BUFFER_LIMIT
from twistgw.engine.timers import LazyTimer
from twistgw.engine.upstream import policy
from twistgw.engine.upstream.connection import State

if TYPE_CHECKING:
    from twistgw.engine.upstream.h2connection import H2Connection
    from twistgw.engine.upstream.h2pool import H2Pool
    from twistgw.engine.upstream.request import UpstreamRequest

__all__ = ["H2Stream", "request_headers"]

_CONNECTING, _READY, _SENT, _HEAD, _BODY, _TUNNEL, _CLOSED = State

#: request fields never sent on an HTTP/2 stream (RFC 9113 §8.2.2), beside
#: the hop-by-hop ones the core dropped already; ``host`` becomes ``:authority``
_NOT_SENT = frozenset({b"host", b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                       b"upgrade", b"content-length"})


#: lower-case token characters (RFC 9110 §5.6.2) a field name from an HTTP/2 peer may have
_NAME_CHARS = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
#: fields an HTTP/2 message never carries (RFC 9113 §8.2.2)
_CONNECTION_SPECIFIC = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                                  b"upgrade"})


def field_problem(headers: list[tuple[bytes, bytes]], head: bool) -> str | None:
    """What is wrong with a response's header (``head``) or trailer block
    from the upstream (RFC 9113 §8.2, §8.3), or None. The gateway checks
    this itself rather than through h2's generators (a third of h2's cost
    per response): names lower-case tokens, no connection-specific field,
    only ``:status`` and only first in a head, no CR, LF or NUL in a value
    (the client side writes values into HTTP/1.1 lines)."""
    for i, (name, value) in enumerate(headers):
        if name[:1] == b":":
            if not head or i or name != b":status":
                return f"pseudo-header {name!r} out of place"
        elif not name or name.translate(None, _NAME_CHARS) or name in _CONNECTION_SPECIFIC:
            return f"field name {name!r} not allowed"
        if b"\r" in value or b"\n" in value or b"\0" in value:
            return f"field {name!r} has a CR, LF or NUL"
    if head and (not headers or headers[0][0] != b":status"):
        return "no :status"
    return None


def request_headers(method: bytes, scheme: bytes, target: bytes, raw: dict[bytes, list[bytes]],
                    default_authority: bytes, length: int | None) -> list[tuple[bytes, bytes]]:
    """The HEADERS of a forwarded request: the pseudo-headers, then the
    planned headers with lower-case names (``te`` only as ``trailers``)."""
    host = raw.get(b"Host")
    out = [(b":method", method), (b":scheme", scheme), (b":authority", host[0] if host else default_authority),
           (b":path", target)]
    for name, values in raw.items():
        lname = name.lower()
        if lname in _NOT_SENT:
            continue
        if lname == b"te":
            out.append((b"te", b"trailers"))  # the core put it there for a client that said so
            continue
        for value in values:
            out.append((lname, value))
    if length is not None:
        out.append((b"content-length", b"%d" % length))
    return out


class H2Stream:
    """One request and its response on an HTTP/2 upstream connection."""

    __slots__ = ("pool", "key", "breaker", "state", "timer", "req", "conn", "sid", "reused", "head_only",
                 "pending", "pending_bytes", "ending", "end_trailers", "ended_local", "body_paused", "paused",
                 "unacked", "trailers", "in_send")

    #: an HTTP/2 stream is never handed out again (the pool asks this of connections)
    usable = False
    #: how long an idle connection waits (the HTTP/1.1 connection's attribute; unused here)
    idle_timeout: float | None = None
    transport: Any = None

    def __init__(self, pool: "H2Pool", key: Any, breaker: Any = None) -> None:
        self.pool = pool
        self.key = key
        self.breaker = breaker
        self.state = _CONNECTING
        self.timer = LazyTimer(pool.reactor.seconds, pool.reactor.callLater)
        self.req: UpstreamRequest | None = None
        self.conn: H2Connection | None = None
        self.sid = 0
        self.reused = False
        self.head_only = False
        #: request body bytes the upstream's window does not take yet
        self.pending: deque[bytes] = deque()
        self.pending_bytes = 0
        self.ending = False
        self.end_trailers: Sequence[tuple[bytes, bytes]] = ()
        self.ended_local = False
        self.body_paused = False
        #: the client does not read: DATA is not acknowledged
        self.paused = False
        self.unacked = 0
        self.trailers: tuple[tuple[bytes, bytes], ...] = ()
        self.in_send = False

    # -- what the request asks (as of an UpstreamConnection) -----------------------

    def send(self, req: "UpstreamRequest", reused: bool) -> None:
        """HEADERS out (→ SENT), then the body as it comes."""
        conn = self.conn
        assert conn is not None
        self.req = req
        req.conn = self  # type: ignore[assignment]  # the request's connection is this stream
        self.state = _SENT
        ex = req.ex
        plan = req.plan
        self.head_only = ex.method == b"HEAD"
        body = ex.body
        length = None if body is None else body.length
        ep = plan.endpoint
        headers = request_headers(plan.method, conn.scheme, plan.target, plan.headers.raw,
                                  b"%s:%d" % (ep.host.encode("ascii"), ep.port), length)
        if ex.content_length is not None and body is None:
            headers.append((b"content-length", b"0"))
        if not conn.start(self, headers, body is None):
            return
        if body is not None:
            self.in_send = True  # what attach sends goes out with the HEADERS, in one write
            body.attach(self)
            self.in_send = False
            conn.flush()

    def abandon(self) -> None:
        """The request was given up (client gone, deadline, a retried status):
        the stream is reset (CANCEL)."""
        self.req = None
        state, self.state = self.state, _CLOSED
        self.pending.clear()
        conn = self.conn
        if conn is not None and self.sid and state is not _CLOSED:
            conn.reset(self, ErrorCodes.CANCEL)

    def pause_relay(self) -> None:
        self.paused = True

    def resume_relay(self) -> None:
        self.paused = False
        if self.unacked and self.conn is not None and self.state is not _CLOSED:
            n, self.unacked = self.unacked, 0
            self.conn.acknowledge(self, n)
            self.conn.flush()

    # -- the request body (BodyConsumer) ----------------------------------------------

    def send_body(self, data: bytes) -> None:
        if self.state is _CLOSED or self.ended_local or not data:
            return
        self.pending.append(data)
        self.pending_bytes += len(data)
        self.push()
        if self.pending_bytes > BODY_BUFFER_LIMIT and not self.body_paused and self.req is not None:
            self.body_paused = True
            self.req.ex.pause_body()

    def end_body(self, trailers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        if self.state is _CLOSED or self.ended_local:
            return
        self.ending = True
        self.end_trailers = trailers
        self.push()

    def push(self) -> None:
        """Send what the window allows; end the stream once all is sent."""
        conn = self.conn
        if conn is None or self.state is _CLOSED or self.ended_local:
            return
        pending = self.pending
        while pending:
            room = conn.room(self)
            if room <= 0:
                break
            chunk = pending[0]
            if len(chunk) <= room:
                pending.popleft()
            else:
                pending[0] = chunk[room:]
                chunk = chunk[:room]
            self.pending_bytes -= len(chunk)
            conn.data(self, chunk)
        if not pending and self.ending:
            self.ended_local = True
            conn.end(self, self.end_trailers)
        if not self.in_send:
            conn.flush()
        if self.body_paused and self.pending_bytes <= BODY_BUFFER_LIMIT // 2 and self.req is not None:
            self.body_paused = False
            self.req.ex.resume_body()

    # -- the response (the connection's events) -----------------------------------------

    def on_head(self, headers: list[tuple[bytes, bytes]]) -> None:
        problem = field_problem(headers, True)
        if problem is not None and self.conn is not None:
            self.conn.malformed(f"malformed response head: {problem}")
            return
        req = self.req
        status = 0
        pairs = []
        for name, value in headers:
            if name == b":status":
                status = int(value)
            elif not name.startswith(b":"):
                pairs.append((name, value))
        if req is None or req.finished:
            return
        if req.watch is not None:
            req.watch.answered(req.plan.endpoint, status)
        if req.retrying and status in req.retry_statuses and req.again_on_status(status):
            return  # reset with this stream (abandon); the request is tried again
        self.state = _BODY
        self.timer.clear()
        hop: dict[bytes, bytes] = {}
        edit = req.plan.response_edit
        if edit is None:
            lines = end_to_end_lines(pairs, hop)
        else:
            lines = end_to_end_lines(pairs, hop, edit.skip)
            lines += edit.lines
        length = hop.get(b"content-length")
        if status == 204:
            length = None
        req.ex.send_head(status, b"", lines, length, True)

    def on_data(self, data: bytes, flow: int) -> None:
        req = self.req
        if req is None or self.state is not _BODY:
            if self.conn is not None:
                self.conn.acknowledge(self, flow)  # nobody takes it: the window is not held for it
            return
        req.ex.write(data)
        if self.paused:
            self.unacked += flow
        elif self.conn is not None:
            self.conn.acknowledge(self, flow)

    def on_trailers(self, headers: list[tuple[bytes, bytes]]) -> None:
        problem = field_problem(headers, False)
        if problem is not None and self.conn is not None:
            self.conn.malformed(f"malformed trailers: {problem}")
            return
        self.trailers = trailer_pairs(headers)

    def on_end(self) -> None:
        """END_STREAM from the upstream: the response is complete."""
        req, self.req = self.req, None
        if self.state is not _BODY or req is None:
            self.state = _CLOSED
            if req is not None and not req.finished:
                req.fail(policy.MALFORMED, "the stream ended without a response head")
            return
        self.state = _CLOSED
        req.done()
        req.ex.finish(self.trailers)

    def on_reset(self, code: int, why: str) -> None:
        """RST_STREAM from the upstream (REFUSED_STREAM: never processed)."""
        req, self.req = self.req, None
        state, self.state = self.state, _CLOSED
        if req is None or req.finished:
            return
        if state is _BODY:
            req.broke(f"the upstream reset the stream ({why})")
        elif code == ErrorCodes.REFUSED_STREAM and req.retry_unprocessed():
            return
        elif req.retrying and req.again_on_reset():
            return
        else:
            req.fail(policy.RESET, f"the upstream reset the stream ({why})")

    def on_lost(self, error: str, unprocessed: bool = False, tls_failure: str | None = None,
                malformed: bool = False) -> None:
        """The connection is gone (or went away above this stream:
        ``unprocessed``, the upstream said it never saw it; ``malformed``:
        it broke HTTP/2, a 502)."""
        req, self.req = self.req, None
        state, self.state = self.state, _CLOSED
        if req is None or req.finished:
            return
        if state is _BODY:
            req.broke(error)
            return
        if tls_failure is not None:
            req.fail(policy.TLS_FAILURE, tls_failure)
            return
        if malformed:
            req.fail(policy.MALFORMED, error)
            return
        if unprocessed and req.retry_unprocessed():
            return
        if self.reused and state is _SENT and req.retry_after_stale():
            return
        if req.retrying and req.again_on_reset():
            return
        req.fail(policy.RESET, error)

    def pause_client(self) -> None:
        """The upstream's socket does not take more: pause the client's body."""
        req = self.req
        if req is not None and not self.ended_local and req.ex.body is not None:
            req.ex.pause_body()

    def resume_client(self) -> None:
        req = self.req
        if req is not None and not self.body_paused and not self.ended_local and req.ex.body is not None:
            req.ex.resume_body()


#: h2's errors while a stream sends (a window or stream state that changed under it)
SEND_ERRORS = (H2Error,)
