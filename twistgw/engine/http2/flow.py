"""Flow control of one HTTP/2 client connection, both ways, in one small
helper (as uvicorn keeps its flow control apart from the protocol).

Out: a stream's response is queued on the stream (``head``, ``out``,
``ending``) and :meth:`Flow.pump` hands it to ``h2`` only as the client's
windows (the stream's and the connection's) allow, in frames no larger
than the client's SETTINGS_MAX_FRAME_SIZE, the END_STREAM on the last DATA
frame or as a last HEADERS frame (trailers). A stream whose output the
windows hold waits in :attr:`Flow.waiting` until a WINDOW_UPDATE (or a
larger SETTINGS_INITIAL_WINDOW_SIZE), at most ``stall_after`` seconds (a
zero-window stall: then it is reset). While the client does not read at
all (``paused``: its socket's buffer is full) nothing is handed to ``h2``.

In: :meth:`Flow.acknowledge` hands the window back for bytes the upstream
side took (a stream whose upstream does not read keeps them unacknowledged,
:class:`~twistgw.engine.http2.stream.H2Stream`).
"""

from __future__ import annotations

from typing import Any, Callable

from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.exceptions import ProtocolError

from twistgw.engine.http2.frames import FrameWatch
from twistgw.engine.http2.headers import response_trailers
from twistgw.engine.http2.stream import H2Stream
from twistgw.engine.states import Phase
from twistgw.engine.timers import LazyTimer

__all__ = ["Flow"]

_ABORTED = Phase.ABORTED


class Flow:
    """The windows of one connection (see the module). ``done(st)`` is told
    when ``st``'s END_STREAM (or reset) went to ``h2``; ``resets`` counts
    the RST_STREAM frames it queued (the connection's control-frame bound)."""

    __slots__ = ("h2", "watch", "waiting", "paused", "stall_after", "clock", "call_later", "done", "resets")

    def __init__(self, h2: H2Connection, watch: FrameWatch, stall_after: float | None, clock: Callable[[], float],
                 call_later: Callable[..., Any], done: Callable[[H2Stream], None]) -> None:
        self.h2 = h2
        self.watch = watch
        #: streams with output the windows (or a client that does not read) hold back
        self.waiting: dict[int, H2Stream] = {}
        self.paused = False
        self.stall_after = stall_after
        self.clock = clock
        self.call_later = call_later
        self.done = done
        self.resets = 0

    # -- in ------------------------------------------------------------------------------

    def acknowledge(self, stream_id: int, size: int) -> None:
        """``size`` bytes of a stream's body were taken: the client may send more."""
        if size:
            try:
                self.h2.acknowledge_received_data(size, stream_id)
            except ProtocolError:
                pass  # the stream is gone: h2 counts the connection window on its own

    # -- out -----------------------------------------------------------------------------

    def pump(self, st: H2Stream) -> None:
        """Hand ``st``'s queued head, body and end to ``h2`` as far as the
        client's windows allow (the caller writes what h2 then has)."""
        if st.sent_end or st.phase is _ABORTED:
            return
        if self.paused:
            self.waiting[st.stream_id] = st
            return
        h2 = self.h2
        sid = st.stream_id
        fields = st.fields
        if fields is not None:
            st.fields = None
            st.responded = True
            end = not st.out and st.ending is not None and not st.ending
            h2.send_headers(sid, fields, end_stream=end)
            if end:
                self.end(st)
                return
        out = st.out
        while out:
            window = h2.local_flow_control_window(sid)
            if window <= 0:
                self._blocked(st)
                st.drained()
                return
            chunk = out[0]
            size = min(window, h2.max_outbound_frame_size)
            if len(chunk) <= size:
                out.popleft()
                last = not out and st.ending is not None and not st.ending
                h2.send_data(sid, chunk, end_stream=last)
                st.queued -= len(chunk)
                self.watch.data_sent += 1
                if last:
                    self.end(st)
                    return
            else:
                out[0] = chunk[size:]
                h2.send_data(sid, chunk[:size])
                st.queued -= size
                self.watch.data_sent += 1
        self.waiting.pop(sid, None)
        if st.stall is not None:
            st.stall.clear()
        ending = st.ending
        if ending is not None:
            if ending:
                h2.send_headers(sid, response_trailers(ending), end_stream=True)
            else:
                h2.end_stream(sid)
            self.end(st)
            return
        st.drained()

    def pump_waiting(self) -> None:
        for st in list(self.waiting.values()):
            self.pump(st)

    def _blocked(self, st: H2Stream) -> None:
        """The client's window holds ``st``'s output: wait for a WINDOW_UPDATE,
        at most ``stall_after`` (then the stream is reset)."""
        self.waiting[st.stream_id] = st
        if self.stall_after:
            if st.stall is None:
                st.stall = LazyTimer(self.clock, self.call_later)
            if not st.stall.armed:
                st.stall.set(self.stall_after, st.stalled)

    def end(self, st: H2Stream) -> None:
        """END_STREAM went to h2: the stream is done on our side."""
        st.sent_end = True
        self.waiting.pop(st.stream_id, None)
        if st.stall is not None:
            st.stall.stop()
            st.stall = None
        if not st.remote_ended:
            # RFC 9113 §8.1: the answer is complete; the rest of the request is not wanted
            self.h2.reset_stream(st.stream_id, ErrorCodes.NO_ERROR)
            self.resets += 1
            if st.body is not None:
                st.body.stop()
        self.done(st)

    def reset(self, st: H2Stream, code: ErrorCodes) -> None:
        """RST_STREAM for ``st`` (``done`` is the caller's)."""
        st.sent_end = True
        self.waiting.pop(st.stream_id, None)
        if st.stall is not None:
            st.stall.stop()
            st.stall = None
        try:
            self.h2.reset_stream(st.stream_id, code)
        except ProtocolError:
            pass  # already closed in h2
        self.resets += 1

    def informational(self, st: H2Stream, status: int) -> None:
        """A 1xx head for ``st`` (``100``), before its response head."""
        if st.fields is None and not st.responded:
            self.h2.send_headers(st.stream_id, [(b":status", b"%d" % status)])
