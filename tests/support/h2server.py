"""A scriptable HTTP/2 (h2c) server for tests, on hyper-h2's server side
under a Twisted protocol: ``behave(conn, stream_id, headers, body)`` decides
what each complete request gets — answer it (:meth:`H2ServerProtocol.answer`),
reset it, send a GOAWAY, or nothing. It records every request
(``requests``: (connection number, stream id, headers dict, body, trailers))
so tests see what the gateway sent and on which connection."""

from __future__ import annotations

from typing import Any, Callable

import h2.config
import h2.connection
import h2.events
from twisted.internet import protocol, reactor

__all__ = ["H2Server", "H2ServerProtocol", "start_h2_server"]


class H2ServerProtocol(protocol.Protocol):
    def __init__(self, server: "H2Server", number: int) -> None:
        self.server = server
        self.number = number
        # it may send what a hostile upstream sends: h2 checks nothing it is told to send
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding=None, validate_outbound_headers=False,
            normalize_outbound_headers=False))
        self.bodies: dict[int, bytes] = {}
        self.heads: dict[int, dict[bytes, bytes]] = {}
        self.trailers: dict[int, dict[bytes, bytes]] = {}

    def connectionMade(self) -> None:
        self.h2.initiate_connection()
        if self.server.max_streams is not None:
            self.h2.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.server.max_streams})
        self.flush()

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)

    def dataReceived(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                self.heads[event.stream_id] = dict(event.headers)
                self.bodies[event.stream_id] = b""
            elif isinstance(event, h2.events.DataReceived):
                self.bodies[event.stream_id] += event.data
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.TrailersReceived):
                self.trailers[event.stream_id] = dict(event.headers)
            elif isinstance(event, h2.events.StreamEnded):
                sid = event.stream_id
                self.server.requests.append((self.number, sid, self.heads[sid], self.bodies[sid],
                                             self.trailers.get(sid, {})))
                self.server.behave(self, sid, self.heads[sid], self.bodies[sid])
        self.flush()

    def answer(self, sid: int, status: int = 200, body: bytes = b"", headers: tuple = (),
               trailers: tuple = ()) -> None:
        self.h2.send_headers(sid, [(b":status", b"%d" % status), *headers], end_stream=not body and not trailers)
        if body:
            self.h2.send_data(sid, body, end_stream=not trailers)
        if trailers:
            self.h2.send_headers(sid, list(trailers), end_stream=True)
        self.flush()

    def goaway(self, last_stream_id: int, code: int = 0) -> None:
        self.h2.close_connection(error_code=code, last_stream_id=last_stream_id)
        self.flush()

    def reset(self, sid: int, code: int) -> None:
        self.h2.reset_stream(sid, code)
        self.flush()


class H2Server(protocol.Factory):
    def __init__(self, behave: Callable[[H2ServerProtocol, int, dict, bytes], Any],
                 max_streams: int | None = None) -> None:
        self.behave = behave
        self.max_streams = max_streams
        self.requests: list[tuple[int, int, dict, bytes, dict]] = []
        self.connections = 0
        self.listening: Any = None
        self.port = 0

    def buildProtocol(self, addr: Any) -> H2ServerProtocol:
        self.connections += 1
        return H2ServerProtocol(self, self.connections)


def start_h2_server(behave: Callable[[H2ServerProtocol, int, dict, bytes], Any],
                    max_streams: int | None = None) -> H2Server:
    server = H2Server(behave, max_streams)
    server.listening = reactor.listenTCP(0, server, interface="127.0.0.1")
    server.port = server.listening.getHost().port
    return server
