"""An HTTP/2 client connection to one upstream endpoint: hyper-h2's
sans-I/O ``H2Connection`` driven by a Twisted protocol, its streams
(:class:`~.h2stream.H2Stream`) multiplexed up to the peer's
``SETTINGS_MAX_CONCURRENT_STREAMS`` (and the Upstream's
``maxConcurrentStreams``). h2c with prior knowledge to plain endpoints;
over TLS (``memtls``), ALPN ``h2``: a peer that picks another protocol is
refused.

Its life is :class:`H2State`; every change of it is in this module:
CONNECTING → READY (streams open) → DRAINING (GOAWAY received, or the
stream IDs ran out: no new stream; the open ones finish) → CLOSED.

hyper-h2 closes its whole state machine when a GOAWAY arrives (its issue
#1181), so streams at or below the GOAWAY's last stream ID could never
finish; a GOAWAY with NO_ERROR (a graceful shutdown, as grpcio's
``server.stop(grace)`` sends) leaves the machine open here
(``_ClientConnection``), and the gateway opens no stream on it again
(docs/decisions.md). Streams above the
last stream ID were not processed (RFC 9113 §6.8): their requests are sent
again on a new connection when that is safe.
"""

from __future__ import annotations

import socket
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Sequence, cast

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.connection import ConnectionInputs, ConnectionState
from h2.errors import ErrorCodes
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from twistgw.api.upstreampolicy import H2_DEFAULT_WINDOW, Http2Settings
from twistgw.engine import framing
from twistgw.engine.http2.codec import Configuration, Connection, equip
from twistgw.engine.timers import LazyTimer
from twistgw.engine.upstream.configured import socket_of
from twistgw.engine.upstream.h2stream import SEND_ERRORS, H2Stream
from twistgw.tls import describe_tls_failure

if TYPE_CHECKING:
    from twistgw.engine.upstream.h2pool import H2Pool

__all__ = ["H2Connection", "H2State"]

_log = Logger(namespace="twistgw.upstream")


class H2State(IntEnum):
    CONNECTING = 0
    READY = 1
    #: no new stream (GOAWAY, stream IDs exhausted, idle close); the open ones finish
    DRAINING = 2
    CLOSED = 3


_CONNECTING, _READY, _DRAINING, _CLOSED = H2State

#: streams assumed before the peer's first SETTINGS says how many (RFC 9113
#: §6.5.2 recommends at least 100)
_BEFORE_SETTINGS = 100

class _ClientConnection(Connection):
    """hyper-h2's client connection, where a graceful GOAWAY (NO_ERROR)
    leaves the connection open for the streams at or below its last stream
    ID (RFC 9113 §6.8; h2 closes at once, its issue #1181). The frames after
    the GOAWAY in the same read are then processed, not refused."""

    def _receive_goaway_frame(self, frame: Any) -> tuple[list[Any], list[Any]]:
        events: list[Any] = self.state_machine.process_input(ConnectionInputs.RECV_GOAWAY)
        try:
            code: Any = ErrorCodes(frame.error_code)
        except ValueError:
            code = frame.error_code
        if code == ErrorCodes.NO_ERROR:
            self.state_machine.state = ConnectionState.CLIENT_OPEN
        else:
            self.clear_outbound_data_buffer()
        event = h2.events.ConnectionTerminated()
        event.error_code = code
        event.last_stream_id = frame.last_stream_id
        event.additional_data = frame.additional_data or None
        events.append(event)
        return [], events


#: what h2 checks of headers is checked by the streams themselves (h2stream.field_problem), at a
#: fraction of the cost; h2 still checks the framing, HPACK, flow control and stream states
#: (codec.Configuration: h2's options as plain attributes)
_CONFIG = cast(h2.config.H2Configuration, Configuration(client_side=True))


@implementer(IPushProducer)
class H2Connection(Protocol):
    """One HTTP/2 connection to an upstream endpoint (see the module)."""

    transport: Any

    def __init__(self, pool: "H2Pool", key: Any, settings: Http2Settings, tls: bool) -> None:
        self.pool = pool
        self.key = key
        self.settings = settings
        self.scheme = b"https" if tls else b"http"
        self.tls = tls
        self.state = _CONNECTING
        # HPACK without Huffman coding of what the gateway sends: the dynamic table still makes
        # repeated fields one byte each, and Huffman coding in pure Python costs more CPU than the
        # bytes it saves on a data-centre link (docs/decisions.md); both ways it remembers what it
        # repeats (engine/http2/codec)
        self.h2 = equip(_ClientConnection(config=_CONFIG), huffman=False)
        self.streams: dict[int, H2Stream] = {}
        #: streams given a place before the connection is up, with the Deferred each waits on
        self.waiting: list[tuple[H2Stream, Deferred[H2Stream]]] = []
        self.settings_seen = False
        self.checked_alpn = not tls
        self.timer = LazyTimer(pool.reactor.seconds, pool.reactor.callLater)
        self._heads: list[Any] = []  # exchanges whose held head or body goes out after this read
        self._corked = False  # a write of h2's frames is due at the end of this reactor turn

    # -- places ----------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        remote = self.h2.remote_settings.max_concurrent_streams if self.settings_seen else _BEFORE_SETTINGS
        return min(self.settings.max_streams, remote)

    @property
    def has_room(self) -> bool:
        return self.state <= _READY and len(self.streams) + len(self.waiting) < self.capacity

    def reserve(self, stream: H2Stream) -> Deferred[H2Stream]:
        """A place for ``stream``: fires with it once it may be sent."""
        stream.conn = self
        stream.reused = self.state is _READY
        self.timer.clear()
        if self.state is _READY:
            return succeed(stream)

        def cancel(d: Deferred[H2Stream]) -> None:
            self.waiting[:] = [(s, w) for s, w in self.waiting if w is not d]
        d: Deferred[H2Stream] = Deferred(cancel)
        self.waiting.append((stream, d))
        return d

    # -- the connection ------------------------------------------------------------------

    def connectionMade(self) -> None:
        transport = self.transport
        transport.registerProducer(self, True)
        sock = socket_of(transport)
        if sock is not None:
            # HEADERS, DATA and WINDOW_UPDATE are small writes of their own: Nagle would hold
            # each behind the peer's delayed ACK (40 ms a request)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s = self.settings
        self.h2.initiate_connection()
        self.h2.update_settings({
            h2.settings.SettingCodes.ENABLE_PUSH: 0,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: s.stream_window,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: framing.MAX_RESPONSE_HEAD,
        })
        if s.connection_window > H2_DEFAULT_WINDOW:
            self.h2.increment_flow_control_window(s.connection_window - H2_DEFAULT_WINDOW)
        self.flush()
        self.state = _READY
        waiting, self.waiting = self.waiting, []
        for stream, d in waiting:
            d.callback(stream)

    def connect_failed(self, failure: Failure) -> None:
        """The endpoint could not connect: every stream waiting fails so."""
        self.state = _CLOSED
        waiting, self.waiting = self.waiting, []
        for _, d in waiting:
            d.errback(failure)
        self.pool.forget(self)

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.state = _CLOSED
        self.timer.stop()
        error = reason.getErrorMessage() if reason is not None else "closed"
        why = describe_tls_failure(reason.value) if self.tls and reason is not None and not self.settings_seen \
            else None
        streams, self.streams = self.streams, {}
        waiting, self.waiting = self.waiting, []
        self.pool.forget(self)
        for _, d in waiting:
            d.errback(reason)
        for stream in streams.values():
            stream.on_lost(error, tls_failure=why)

    def close(self) -> None:
        """No new stream; close once the open ones finished."""
        if self.state >= _DRAINING:
            return
        self.state = _DRAINING
        self.pool.forget(self)
        if not self.streams:
            self._close_now()

    def _close_now(self) -> None:
        try:
            self.h2.close_connection()
        except h2.exceptions.ProtocolError:
            pass
        self._send_now()  # the GOAWAY, before the close
        self.state = _CLOSED
        if self.transport is not None:
            self.transport.loseConnection()

    def idle_expired(self) -> None:
        if not self.streams and not self.waiting:
            self.close()

    # IPushProducer on our transport: the upstream does not read as fast as we send
    def pauseProducing(self) -> None:
        for stream in self.streams.values():
            stream.pause_client()

    def resumeProducing(self) -> None:
        for stream in list(self.streams.values()):
            stream.resume_client()

    def stopProducing(self) -> None:
        pass

    def flush(self) -> None:
        """Send what h2 has for the peer, once per reactor turn: the frames
        of every stream that changed in this turn (HEADERS, DATA, END_STREAM,
        WINDOW_UPDATE) go out in one write."""
        if not self._corked:
            self._corked = True
            self.pool.reactor.callLater(0, self._send_now)

    def _send_now(self) -> None:
        self._corked = False
        data = self.h2.data_to_send()
        if data and self.transport is not None and self.state is not _CLOSED:
            self.transport.write(data)

    # -- what streams do -----------------------------------------------------------------------

    def start(self, stream: H2Stream, headers: list[tuple[bytes, bytes]], end: bool) -> bool:
        """Open ``stream`` with ``headers``; False if it could not be (then
        its request was told)."""
        if self.state is not _READY:
            stream.on_lost("the connection went away before the request was sent", unprocessed=True)
            return False
        try:
            sid = self.h2.get_next_available_stream_id()
            self.h2.send_headers(sid, headers, end_stream=end)
        except h2.exceptions.NoAvailableStreamIDError:
            self.close()
            stream.on_lost("the connection ran out of stream IDs", unprocessed=True)
            return False
        except h2.exceptions.TooManyStreamsError:
            stream.on_lost("the upstream lowered its concurrent streams", unprocessed=True)
            return False
        stream.sid = sid
        stream.ended_local = end
        self.streams[sid] = stream
        if end:
            self.flush()  # else the body's first DATA goes in the same write
        return True

    def room(self, stream: H2Stream) -> int:
        try:
            return min(self.h2.local_flow_control_window(stream.sid), self.h2.max_outbound_frame_size)
        except SEND_ERRORS:
            return 0

    # data, end and acknowledge leave the bytes to the caller's flush (one write per turn)
    def data(self, stream: H2Stream, chunk: bytes) -> None:
        try:
            self.h2.send_data(stream.sid, chunk)
        except SEND_ERRORS:
            return

    def end(self, stream: H2Stream, trailers: Sequence[tuple[bytes, bytes]]) -> None:
        try:
            if trailers:
                self.h2.send_headers(stream.sid, list(trailers), end_stream=True)
            else:
                self.h2.end_stream(stream.sid)
        except SEND_ERRORS:
            return

    def reset(self, stream: H2Stream, code: int) -> None:
        try:
            self.h2.reset_stream(stream.sid, code)
        except SEND_ERRORS:
            pass
        self._gone(stream.sid)
        self.flush()

    def acknowledge(self, stream: H2Stream, n: int) -> None:
        if not n:
            return
        try:
            self.h2.acknowledge_received_data(n, stream.sid)
        except SEND_ERRORS:
            return

    def _gone(self, sid: int) -> None:
        """A stream is over: its place frees."""
        if self.streams.pop(sid, None) is None:
            return
        if not self.streams:
            if self.state is _DRAINING:
                self._close_now()
                return
            if self.state is _READY:
                timeout = self.pool.idle_timeout
                if timeout:
                    self.timer.set(timeout, self.idle_expired)
        self.pool.room_freed(self)

    # -- bytes in --------------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if not self.checked_alpn:
            self.checked_alpn = True
            chosen = getattr(self.transport, "negotiatedProtocol", None)
            if chosen not in (None, b"h2"):
                _log.warn("Upstream {upstream} chose ALPN {alpn!r}, not h2: connection closed",
                          upstream=self.pool.label(self.key), alpn=chosen)
                self._abort(f"the upstream does not speak HTTP/2 over TLS (ALPN {chosen!r})")
                return
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            self._abort(f"HTTP/2 protocol error from the upstream: {exc}", malformed=True)
            return
        for event in events:
            self._event(event)
            if self.state is _CLOSED:
                return  # a malformed header block ended the connection
        heads, self._heads = self._heads, []
        for ex in heads:
            if ex.held is not None:
                ex.flush()
        self.flush()

    def malformed(self, error: str) -> None:
        """A stream found a malformed header block: the whole connection
        ends (RFC 9113 §8.1.1; Envoy's default), its streams answered 502 or cut."""
        if self.state is _CLOSED:
            return
        try:
            self.h2.close_connection(error_code=ErrorCodes.PROTOCOL_ERROR)
        except h2.exceptions.ProtocolError:
            pass
        self._abort(error, malformed=True)

    def _abort(self, error: str, malformed: bool = False) -> None:
        self._send_now()  # h2's GOAWAY for a protocol error
        self.state = _CLOSED
        streams, self.streams = self.streams, {}
        self.pool.forget(self)
        self.transport.abortConnection()
        for stream in streams.values():
            stream.on_lost(error, malformed=malformed)

    def _event(self, event: Any) -> None:
        cls = event.__class__
        stream = self.streams.get(getattr(event, "stream_id", 0) or 0)
        if cls is h2.events.DataReceived:
            if stream is not None:
                stream.on_data(event.data, event.flow_controlled_length)
                req = stream.req
                if req is not None and req.ex.held is not None:  # an HTTP/2 client's stream queues its writes
                    heads = self._heads
                    if not heads or heads[-1] is not req.ex:
                        heads.append(req.ex)
            else:
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif cls is h2.events.ResponseReceived:
            if stream is not None:
                stream.on_head(event.headers)
                if stream.req is not None:
                    self._heads.append(stream.req.ex)
        elif cls is h2.events.TrailersReceived:
            if stream is not None:
                stream.on_trailers(event.headers)
        elif cls is h2.events.StreamEnded:
            if stream is not None:
                self._ended(stream)
        elif cls is h2.events.StreamReset:
            if stream is not None:
                self._gone(stream.sid)
                stream.on_reset(event.error_code, _code_name(event.error_code))
        elif cls is h2.events.WindowUpdated:
            for s in ([stream] if stream is not None else list(self.streams.values())):
                s.push()
        elif cls is h2.events.RemoteSettingsChanged:
            self.settings_seen = True
            for s in list(self.streams.values()):
                s.push()
            self.pool.room_freed(self)
        elif cls is h2.events.ConnectionTerminated:
            self._goaway(event.error_code, event.last_stream_id)

    def _ended(self, stream: H2Stream) -> None:
        if not stream.ended_local:
            # the response came before the request body ended (RFC 9113 §8.1): stop sending it
            stream.ended_local = True
            try:
                self.h2.reset_stream(stream.sid, ErrorCodes.NO_ERROR)
            except SEND_ERRORS:
                pass
        self._gone(stream.sid)
        stream.on_end()

    def _goaway(self, code: int, last: int | None) -> None:
        last = 0 if last is None else last
        graceful = code == ErrorCodes.NO_ERROR  # the open streams go on (_ClientConnection)
        self.state = _DRAINING
        self.pool.forget(self)
        error = f"the upstream closed the connection (GOAWAY {_code_name(code)})"
        for sid in sorted(self.streams):
            if sid > last or not graceful:
                stream = self.streams.pop(sid)
                stream.on_lost(error, unprocessed=sid > last)
        if not self.streams:
            self._close_now()


def _code_name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return str(code)
