"""An HTTP/2 client connection to the engine, in memory: the gateway's
factory over a StringTransport, a MemoryReactorClock, ``h2`` as the client
(:class:`H2Memory`), and the upstreams of :class:`support.memory.MemoryUpstreams`.

    m = H2Memory(memory_config(ROUTES), plugins=[("denyall", DenyAll())])
    sid = m.request(b"/a")
    up, t = m.upstreams[0]           # what the gateway sent upstream
    up.dataReceived(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok")
    m.response(sid)                  # (status, headers, body, trailers, ended)
"""

from __future__ import annotations

from typing import Any, Iterable

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import (ConnectionTerminated, DataReceived, Event, ResponseReceived, StreamEnded, StreamReset,
                       TrailersReceived)
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

from twistgw.config.http2 import DEFAULT, Http2Options
from twistgw.config.loader import load_text
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.engine.gateway import Gateway, GatewayFactory

from support.memory import MemoryUpstreams

__all__ = ["H2Memory", "Recording"]


class Recording(Gateway):
    """A Gateway that remembers what it accounted (exchange, status)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorded: list[Any] = []

    def record(self, ex: Any) -> None:
        self.recorded.append(ex)
        super().record(ex)


class H2Memory:
    """One HTTP/2 client (``client``, an h2 connection) talking to a gateway
    in memory; ``events`` keeps everything the client got."""

    def __init__(self, config: str, plugins: Iterable[tuple[str, object]] = (), options: Http2Options = DEFAULT,
                 idle_timeout: float = 60, head_timeout: float = 10, client_settings: dict[int, int] | None = None,
                 preface: bool = True) -> None:
        self.reactor = MemoryReactorClock()
        host = PluginHost.create(list(plugins), load_entry_points=False)
        self.gateway = Recording(self.reactor, host, access_log=False, upstream_timeout=5)
        self.gateway.snapshot = build_snapshot(load_text(config), host)
        self.factory = GatewayFactory(self.gateway, timeout=idle_timeout, head_timeout=head_timeout, http2=options)
        self.proto = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 8080))
        self.t = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.7", 5555))
        self.proto.makeConnection(self.t)
        self.upstreams = MemoryUpstreams(self.reactor)
        self.client = H2Connection(H2Configuration(client_side=True, header_encoding=None,
                                                   validate_outbound_headers=False,
                                                   normalize_outbound_headers=False))
        self.events: list[Event] = []
        self.client.initiate_connection()
        if client_settings:
            self.client.update_settings(client_settings)
        if preface:
            self.send()

    # -- the client ---------------------------------------------------------------

    def send(self, raw: bytes = b"") -> list[Event]:
        """What the client queued (and ``raw`` bytes after it) to the gateway;
        then what came back."""
        data = self.client.data_to_send() + raw
        if data:
            self.proto.dataReceived(data)
        return self.receive()

    def receive(self) -> list[Event]:
        data = self.t.value()
        self.t.clear()
        got = self.client.receive_data(data) if data else []
        self.events += got
        out = self.client.data_to_send()  # acks, window updates
        if out and not self.t.disconnecting:
            self.proto.dataReceived(out)
            return got + self.receive()
        return got

    def request(self, path: bytes, method: bytes = b"GET", headers: Iterable[tuple[bytes, bytes]] = (),
                body: bytes | None = None, end: bool = True, authority: bytes = b"gw.test") -> int:
        sid = self.client.get_next_available_stream_id()
        fields = [(b":method", method), (b":scheme", b"http"), (b":authority", authority), (b":path", path),
                  *headers]
        self.client.send_headers(sid, fields, end_stream=end and body is None)
        if body is not None:
            self.client.send_data(sid, body, end_stream=end)
        self.send()
        return sid

    def response(self, sid: int) -> tuple[int, dict[bytes, bytes], bytes, dict[bytes, bytes], bool]:
        """``(status, headers, body, trailers, ended)`` of stream ``sid`` so far."""
        status, headers, body, trailers, ended = 0, {}, b"", {}, False
        for e in self.events:
            if getattr(e, "stream_id", None) != sid:
                continue
            if isinstance(e, ResponseReceived):
                headers = dict(e.headers)
                status = int(headers[b":status"])
            elif isinstance(e, DataReceived):
                body += e.data
            elif isinstance(e, TrailersReceived):
                trailers = dict(e.headers)
            elif isinstance(e, StreamEnded):
                ended = True
        return status, headers, body, trailers, ended

    def reset_of(self, sid: int) -> int | None:
        """The error code of the gateway's RST_STREAM for ``sid``, or None."""
        for e in self.events:
            if isinstance(e, StreamReset) and e.stream_id == sid:
                return int(e.error_code)
        return None

    def goaway(self) -> ConnectionTerminated | None:
        for e in self.events:
            if isinstance(e, ConnectionTerminated):
                return e
        return None

    # -- the upstream -------------------------------------------------------------------

    def upstream(self, i: int = 0) -> tuple[Any, StringTransport]:
        return self.upstreams[i]

    def answer(self, i: int, data: bytes) -> list[Event]:
        """Upstream connection ``i`` sends ``data``; what the client got."""
        self.upstreams[i][0].dataReceived(data)
        return self.receive()


def frames_of(data: bytes) -> list[Any]:
    """The frames in ``data`` (hyperframe's), for replies to raw bytes a
    well-behaved client would never send."""
    from hyperframe.frame import Frame

    out = []
    view = memoryview(data)
    while len(view) >= 9:
        frame, length = Frame.parse_frame_header(view[:9])
        if len(view) < 9 + length:
            break
        frame.parse_body(view[9:9 + length])
        out.append(frame)
        view = view[9 + length:]
    return out


def goaway_code(data: bytes) -> int | None:
    """The error code of the first GOAWAY frame in ``data``, or None."""
    from hyperframe.frame import GoAwayFrame

    for frame in frames_of(data):
        if isinstance(frame, GoAwayFrame):
            return int(frame.error_code)
    return None
