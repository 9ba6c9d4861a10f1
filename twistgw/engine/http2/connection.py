"""One HTTP/2 client connection: :class:`H2ServerConnection` drives ``h2``'s
sans-I/O ``H2Connection`` (bytes in, events out, bytes to write) and hands
each request to the gateway as an :class:`~twistgw.engine.http2.stream.H2Stream`.

Its life is :class:`~twistgw.engine.states.H2State`; every change of it is
in this module. It starts when the HTTP/1.1 protocol of a new connection
sees the client preface (h2c, prior knowledge) or ALPN ``h2``
(:meth:`GatewayProtocol.become_http2
<twistgw.engine.connection.GatewayProtocol.become_http2>`).

Flow control, both ways:

* out: a stream's response is queued on it and handed to ``h2`` only as
  the client's windows allow (:meth:`H2ServerConnection.pump`); past 64 KiB
  queued the upstream is paused. When the client does not read at all
  (the socket's buffer is full: Twisted pauses this producer) nothing more
  is handed to ``h2`` and nothing more is read from the client.
* in: DATA is acknowledged (the window handed back) once the upstream side
  took it (:meth:`H2ServerConnection.acknowledge`); a stream whose upstream
  does not read has its window withheld.

Bounds (``config/http2.Http2Options``, Envoy's): concurrent streams (``h2``
refuses more with a GOAWAY), frame size, header-block size, empty,
PRIORITY and WINDOW_UPDATE floods (:mod:`.frames`), acknowledgements a
client does not read (ping and settings floods), and early resets (rapid
reset, CVE-2023-44487: :class:`ResetCount`). Timers: the head timer while
a header block is incomplete, the idle timer while no stream is open, a
stall timer per stream whose output the client's window holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (ConnectionTerminated, DataReceived, RemoteSettingsChanged, RequestReceived, StreamEnded,
                       StreamReset, TrailersReceived, WindowUpdated)
from h2.exceptions import ProtocolError
from h2.settings import SettingCodes
from hyperframe.frame import GoAwayFrame
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from twistgw.api.headers import Headers
from twistgw.config.http2 import MIN_WINDOW, Http2Options
from twistgw.engine import framing, wire
from twistgw.engine.body import RequestBody
from twistgw.engine.http2.codec import Configuration, Connection, Settings, equip
from twistgw.engine.http2.flow import Flow
from twistgw.engine.http2.frames import Flood, FrameWatch
from twistgw.core.headers import trailer_pairs
from twistgw.engine.http2.headers import Malformed, TooLarge, request_fields, trailer_fields
from twistgw.engine.http2.stream import H2Stream
from twistgw.engine.states import H2State, Phase
from twistgw.engine.timers import LazyTimer

if TYPE_CHECKING:
    from twistgw.engine.gateway import Gateway

__all__ = ["H2ServerConnection", "ResetCount"]

_OPEN, _DRAINING, _CLOSING, _CLOSED = H2State
_ABORTED = Phase.ABORTED
_log = Logger(namespace="twistgw.http2")
_CONFIG = Configuration(client_side=False)


class ResetCount:
    """Envoy's premature-reset rule (CVE-2023-44487, rapid reset): a stream
    the client resets before its response head and within
    ``premature_reset_seconds`` of opening is premature. Once
    ``premature_reset_count`` streams closed, the connection ends when half
    of them were premature; before that, once half of that count were."""

    __slots__ = ("limit", "seconds", "closed", "premature")

    def __init__(self, options: Http2Options) -> None:
        self.limit = options.premature_reset_count
        self.seconds = options.premature_reset_seconds
        self.closed = 0
        self.premature = 0

    def closed_one(self, premature: bool) -> bool:
        """Count a closed stream; True: the connection must end."""
        self.closed += 1
        if not premature:
            return False
        self.premature += 1
        if self.closed < self.limit:
            return self.premature * 2 >= self.limit
        return self.premature * 2 >= self.closed


@implementer(IPushProducer)
class H2ServerConnection(Protocol):
    """An HTTP/2 client connection (see the module)."""

    #: Any: Twisted's transports provide more than Protocol's ITransport
    transport: Any

    def __init__(self, gateway: "Gateway", options: Http2Options, *, peer_host: str, scheme: str, tls: Any,
                 gateway_key: str | None, factory: Any, idle_timeout: float | None, head_timeout: float) -> None:
        self.gateway = gateway
        self.options = options
        self.peer_host = peer_host
        self.scheme = scheme
        #: as GatewayProtocol.tls: the certificate a TLS listener chose (engine.sni.TlsChoice)
        self.tls = tls
        self.gateway_key = gateway_key
        self.factory = factory
        self.idle_timeout = idle_timeout
        self.head_timeout = head_timeout
        reactor = gateway.reactor
        self.clock = reactor.seconds
        self.callLater = reactor.callLater
        self.state = _OPEN
        self.h2 = self._codec(options)
        self.watch = FrameWatch(options)
        self.resets = ResetCount(options)
        self.streams: dict[int, H2Stream] = {}
        self.flow = Flow(self.h2, self.watch, idle_timeout, self.clock, self.callLater, self._ended_ours)
        #: the highest stream a GOAWAY of ours covers (DRAINING)
        self.last_stream = 0
        #: acknowledgements and resets queued in the socket's buffer, unread
        self._control = 0
        self._idle = LazyTimer(self.clock, self.callLater)
        self._head = LazyTimer(self.clock, self.callLater)
        self._grace: Any = None
        #: the last request header list that passed request_fields, and a pristine copy of
        #: what it gave: the same list again (h2load, a gRPC client) is not checked again
        self._last_head: tuple[list[Any], Any] | None = None

    @staticmethod
    def _codec(options: Http2Options) -> H2Connection:
        # inbound header lists are validated by headers.request_fields (h2's
        # rules in one pass); outbound ones are made valid by headers.response_fields;
        # HPACK remembers what it repeats (codec)
        h2 = equip(Connection(cast(H2Configuration, _CONFIG)), huffman=True)
        # before initiate_connection: the first SETTINGS frame carries these
        h2.local_settings = Settings(client=False, initial_values={  # codec.Settings: small
            SettingCodes.MAX_CONCURRENT_STREAMS: options.max_concurrent_streams,
            SettingCodes.INITIAL_WINDOW_SIZE: options.initial_stream_window,
            SettingCodes.MAX_FRAME_SIZE: options.max_frame_size,
            SettingCodes.MAX_HEADER_LIST_SIZE: options.max_header_list,
        })
        h2.max_inbound_frame_size = options.max_frame_size
        h2.decoder.max_header_list_size = options.max_header_list
        return h2

    # -- connection ------------------------------------------------------------------

    def connectionMade(self) -> None:
        h2 = self.h2
        h2.initiate_connection()
        extra = self.options.initial_connection_window - MIN_WINDOW
        if extra > 0:
            h2.increment_flow_control_window(extra)
        self.transport.registerProducer(self, True)
        metrics = self.gateway.metrics
        if metrics is not None:
            metrics.http2_connection()
        self.flush()
        self._arm_idle()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.state = _CLOSED
        self._stop_timers()
        streams, self.streams = self.streams, {}
        self.flow.waiting = {}
        for st in streams.values():
            st.client_lost()
        closed = getattr(self.factory, "connection_closed", None)
        if closed is not None:
            closed(self)

    def _stop_timers(self) -> None:
        self._idle.stop()
        self._head.stop()
        if self._grace is not None:
            if self._grace.active():
                self._grace.cancel()
            self._grace = None
        for st in self.streams.values():
            if st.stall is not None:
                st.stall.stop()

    def flush(self) -> None:
        """Write what ``h2`` has to send."""
        data = self.h2.data_to_send()
        if data and self.transport is not None and self.state < _CLOSED:
            wire.write(self.transport, data)

    def close(self) -> None:
        """→ CLOSING: what was written goes out, then the transport closes
        (a TLS client that does not answer close_notify is aborted after
        :data:`~twistgw.engine.framing.CLOSE_GRACE`)."""
        if self.state >= _CLOSING:
            return
        self.state = _CLOSING
        self._idle.stop()
        self._head.stop()
        transport = self.transport
        if transport is None:
            return
        transport.unregisterProducer()
        transport.loseConnection()
        if self.scheme == "https":
            self._grace = self.callLater(framing.CLOSE_GRACE, self._grace_over, -1)

    def _grace_over(self, before: int) -> None:
        self._grace = None
        if self.state is _CLOSED or self.transport is None:
            return
        unsent = wire.unsent(self.transport)
        if unsent and unsent != before:
            self._grace = self.callLater(framing.CLOSE_GRACE, self._grace_over, unsent)
            return
        self.transport.abortConnection()

    def abort(self) -> bool:
        """Drop the connection now (the gateway stops); False if it was gone."""
        self._idle.stop()
        self._head.stop()
        if self.transport is None or self.state is _CLOSED:
            return False
        self.state = _CLOSING
        self.transport.abortConnection()
        return True

    def finish_and_close(self) -> None:
        """OPEN → DRAINING: GOAWAY (NO_ERROR) naming the last stream read;
        those are answered, later ones refused; closes after the last."""
        if self.state is not _OPEN:
            return
        self.state = _DRAINING
        self.last_stream = self.h2.highest_inbound_stream_id
        self.flush()
        # h2's close_connection would refuse to send anything after it:
        # the frame is hyperframe's, written after what h2 queued
        goaway = GoAwayFrame(0, last_stream_id=self.last_stream, error_code=ErrorCodes.NO_ERROR)
        if self.transport is not None:
            wire.write(self.transport, goaway.serialize())
        if not self.streams:
            self.close()

    def _refuse_connection(self, code: ErrorCodes | None, reason: str, counted: str,
                           sent: ErrorCodes | None = None) -> None:
        """A connection error: GOAWAY with ``code`` (``None``: h2 queued its
        own, with ``sent``), every stream ended, the transport closed."""
        if self.state >= _CLOSING:
            return
        shown = code if code is not None else sent
        _log.info("HTTP/2 client {peer}: {reason}; GOAWAY {code}, connection closed", peer=self.peer_host,
                  reason=reason, code=getattr(shown, "name", shown))
        metrics = self.gateway.metrics
        if metrics is not None:
            metrics.http2_refused(counted)
        if code is not None:
            self.h2.close_connection(code, additional_data=reason.encode("ascii", "replace")[:200])
        self.flush()
        streams, self.streams = self.streams, {}
        self.flow.waiting = {}
        for st in streams.values():
            st.client_lost()
        self.close()
        if self._grace is None and self.transport is not None:
            # a client that does not read (a flood) would keep the socket
            # and its buffer forever: aborted once nothing moves for the grace
            self._grace = self.callLater(framing.CLOSE_GRACE, self._grace_over, -1)

    # -- flow control (IPushProducer: the client does not read what we write) ------------

    def pauseProducing(self) -> None:
        self.flow.paused = True
        if self.transport is not None:
            self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        self.flow.paused = False
        if self.transport is not None and self.state < _CLOSING:
            self.transport.resumeProducing()
            self.flow.pump_waiting()
            self.flush()

    def stopProducing(self) -> None:
        pass  # connectionLost follows

    def acknowledge(self, st: H2Stream, size: int) -> None:
        """``size`` bytes of ``st``'s body were taken: the client may send more."""
        if self.state < _CLOSING:
            self.flow.acknowledge(st.stream_id, size)

    def pump(self, st: H2Stream) -> None:
        """Hand what ``st`` queued to h2 (:meth:`Flow.pump`); the caller flushes."""
        if self.state < _CLOSING:
            self.flow.pump(st)

    def reset(self, st: H2Stream, stalled: bool = False) -> None:
        """Reset ``st`` (a response that broke off: INTERNAL_ERROR; a
        zero-window stall: CANCEL)."""
        if st.stream_id not in self.streams or self.state >= _CLOSING:
            return
        self.flow.reset(st, ErrorCodes.CANCEL if stalled else ErrorCodes.INTERNAL_ERROR)
        if stalled:
            metrics = self.gateway.metrics
            if metrics is not None:
                metrics.http2_refused("stream_stalled")
        self._forget(st, False)
        self.flush()

    def informational(self, st: H2Stream, status: int) -> None:
        if self.state < _CLOSING:
            self.flow.informational(st, status)
            self.flush()

    def _ended_ours(self, st: H2Stream) -> None:
        """``st``'s END_STREAM went out (:meth:`Flow.end`)."""
        self._forget(st, False)

    def _forget(self, st: H2Stream, premature: bool) -> None:
        if self.streams.pop(st.stream_id, None) is None:
            return
        if self.resets.closed_one(premature):
            self._refuse_connection(ErrorCodes.ENHANCE_YOUR_CALM, "too many streams reset by the client before"
                                    " their answer (rapid reset)", "rapid_reset")
            return
        if not self.streams:
            if self.state is _DRAINING:
                self.close()
            else:
                self._arm_idle()

    # -- bytes in --------------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self.state >= _CLOSING:
            return
        watch = self.watch
        try:
            watch.feed(data)
            events = self.h2.receive_data(data)
        except Flood as flood:
            self._refuse_connection(flood.code, flood.reason, "flood")
            return
        except ProtocolError as exc:
            # h2 queued its GOAWAY (PROTOCOL_ERROR, FLOW_CONTROL_ERROR, ...)
            self._refuse_connection(None, str(exc) or type(exc).__name__, "protocol_error",
                                    getattr(exc, "error_code", None))
            return
        starting: list[H2Stream] = []
        dispatch = self._dispatch
        for event in events:
            handler = dispatch.get(event.__class__)
            if handler is not None:
                handler(self, event, starting)
            if self.state >= _CLOSING:
                return
        for st in starting:
            if st.stream_id in self.streams and st.phase is Phase.HANDLING and not st.status:
                st.start()
        if watch.heading:
            if not self._head.armed and self.head_timeout:
                self._head.set(self.head_timeout, self._head_timed_out)
        else:
            self._head.clear()
        self._count_control()
        self.flush()

    def _count_control(self) -> None:
        """Envoy's ``max_outbound_control_frames``: acknowledgements and
        resets a client keeps unread in the socket's buffer."""
        sent = self.watch.take_acks() + self.flow.resets
        self.flow.resets = 0
        if wire.unsent(self.transport):
            self._control += sent
            if self._control > self.options.max_control_frames:
                self._refuse_connection(ErrorCodes.ENHANCE_YOUR_CALM, "control frames (PING, SETTINGS, RST_STREAM"
                                        " answers) the client does not read", "control_flood")
        else:
            self._control = 0

    def _request(self, ev: RequestReceived, starting: list[H2Stream]) -> None:
        sid = ev.stream_id
        if self.state is not _OPEN and sid > self.last_stream:
            self.h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)  # after our GOAWAY (RFC 9113 §6.8)
            self.flow.resets += 1
            return
        self._idle.clear()
        fields_in = ev.headers or []
        last = self._last_head
        try:
            if last is not None and last[0] == fields_in:
                fields = last[1].copy()
            else:
                fields = request_fields(fields_in)
                self._last_head = (fields_in, fields.copy())
        except Malformed as exc:
            self._malformed(sid, str(exc))
            return
        except TooLarge as exc:
            st = self.streams[sid] = H2Stream(self, sid, b"", b"", Headers(), self.clock())
            st.remote_ended = ev.stream_ended is not None
            st.refuse(exc.status)
            return
        st = self.streams[sid] = H2Stream(self, sid, fields.method, fields.target, fields.headers, self.clock())
        st.content_type = fields.content_type
        st.content_length = fields.content_length
        if ev.stream_ended is not None:
            st.remote_ended = True
        elif fields.content_length != b"0":
            cl = fields.content_length
            st.body = RequestBody(int(cl) if cl is not None else None, st)
            st.body_complete = False
            st.expect_continue = fields.expect_continue
        if fields.method == b"CONNECT":
            st.refuse(501)  # a reverse proxy has no tunnel target (as over HTTP/1.1)
            return
        starting.append(st)

    def _data(self, ev: DataReceived, starting: list[H2Stream]) -> None:
        st = self.streams.get(ev.stream_id)
        if st is None:
            self.flow.acknowledge(ev.stream_id, ev.flow_controlled_length)
            return
        st.received(ev.data, ev.flow_controlled_length)

    def _trailers(self, ev: TrailersReceived, starting: list[H2Stream]) -> None:
        try:
            trailers = trailer_pairs(trailer_fields(ev.headers or ()))  # what passes the gateway
        except Malformed as exc:
            self._malformed(ev.stream_id, str(exc))
            return
        st = self.streams.get(ev.stream_id)
        if st is not None and not st.remote_ended:
            st.ended(trailers)

    def _malformed(self, sid: int, why: str) -> None:
        """A malformed request (RFC 9113 §8.1.1): the connection ends
        (GOAWAY PROTOCOL_ERROR, Envoy's default), or with
        ``overrideStreamErrorOnInvalidHttpMessage`` only the stream."""
        if not self.options.stream_error_on_invalid:
            self._refuse_connection(ErrorCodes.PROTOCOL_ERROR, f"malformed request: {why}", "protocol_error")
            return
        _log.info("HTTP/2 client {peer}: stream {sid} refused: {why}", peer=self.peer_host, sid=sid, why=why)
        st = self.streams.get(sid)
        if st is not None:
            self.flow.reset(st, ErrorCodes.PROTOCOL_ERROR)
            st.client_lost()
            self._forget(st, False)
        else:
            self.h2.reset_stream(sid, ErrorCodes.PROTOCOL_ERROR)
            self.flow.resets += 1

    def _ended(self, ev: StreamEnded, starting: list[H2Stream]) -> None:
        st = self.streams.get(ev.stream_id)
        if st is not None and not st.remote_ended:
            st.ended()

    def _reset(self, ev: StreamReset, starting: list[H2Stream]) -> None:
        st = self.streams.get(ev.stream_id)
        if st is None:
            return
        self.flow.waiting.pop(st.stream_id, None)
        premature = not st.responded and self.clock() - st.started < self.resets.seconds
        st.sent_end = True
        started = st.phase is not Phase.HANDLING or st.status or st not in starting
        if started:
            st.client_lost()
        else:  # opened and reset in one read: never reached the pipeline
            st.phase = _ABORTED
        self._forget(st, premature)

    def _window(self, ev: WindowUpdated, starting: list[H2Stream]) -> None:
        if ev.stream_id:
            st = self.flow.waiting.get(ev.stream_id)
            if st is not None:
                self.flow.pump(st)
        else:
            self.flow.pump_waiting()

    def _settings(self, ev: RemoteSettingsChanged, starting: list[H2Stream]) -> None:
        if SettingCodes.INITIAL_WINDOW_SIZE in ev.changed_settings:
            self.flow.pump_waiting()

    def _terminated(self, ev: ConnectionTerminated, starting: list[H2Stream]) -> None:
        """The client's GOAWAY: h2 sends nothing more, so the connection ends."""
        streams, self.streams = self.streams, {}
        self.flow.waiting = {}
        for st in streams.values():
            if st not in starting:
                st.client_lost()
        self.close()

    _dispatch: dict[type, Any] = {
        RequestReceived: _request,
        DataReceived: _data,
        TrailersReceived: _trailers,
        StreamEnded: _ended,
        StreamReset: _reset,
        WindowUpdated: _window,
        RemoteSettingsChanged: _settings,
        ConnectionTerminated: _terminated,
    }

    # -- timers -----------------------------------------------------------------------------

    def _arm_idle(self) -> None:
        if self.idle_timeout and self.state is _OPEN:
            self._idle.set(self.idle_timeout, self._idle_timed_out)

    def _idle_timed_out(self) -> None:
        if not self.streams and self.state is _OPEN:
            self.finish_and_close()

    def _head_timed_out(self) -> None:
        if self.watch.heading and self.state < _CLOSING:
            self._refuse_connection(ErrorCodes.ENHANCE_YOUR_CALM, "no complete request head in time"
                                    " (--head-timeout)", "head_timeout")

