"""A loopback upstream that records the exact bytes the gateway sends it.

The echo backend of :mod:`support.http` is a ``twisted.web`` server: it
de-frames what it receives, so it cannot tell a re-framed chunked body from
one passed through raw, nor show the bytes of a request head. This server
parses just enough HTTP/1.1 (the gateway's own, well-formed output) to split
the stream into requests, and keeps every request's bytes as received.

``start_recorder(respond)`` → a listening :class:`Recorder`:

* ``respond(request)`` returns what to do with each complete request:
  ``bytes`` (written at once), a :class:`Pieces` (written piece by piece, one
  reactor turn apart, so the gateway reads them separately; the pieces not
  yet written when the connection is lost are dropped, so no timer outlives
  it), ``None`` (stay silent), :data:`CLOSE` (close without answering: FIN)
  or :data:`RESET` (abort: RST). The default answers ``200`` with ``ok``.
* ``recorder.requests`` lists :class:`Recorded` requests in arrival order;
  ``recorder.data`` every byte received; ``recorder.connections`` the count
  of accepted connections, ``recorder.open`` of those still open, and
  ``recorder.all_closed()`` a Deferred that fires once none is open.

Stop it with ``await recorder.close()``.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs
from twisted.internet import defer, protocol

from support.http import reactor

__all__ = ["CLOSE", "RESET", "OK", "Pieces", "Recorded", "Recorder", "start_recorder", "dechunk"]

CLOSE = b"<close>"
RESET = b"<reset>"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@attrs.define
class Pieces:
    """A reply written in pieces, ``delay`` seconds apart (0: next turn)."""

    parts: list[bytes]
    delay: float = 0.001
    close: bool = False


@attrs.define
class Recorded:
    """One request as the upstream received it."""

    head: bytes          # request line and headers, up to and including the blank line
    body_raw: bytes      # the body exactly as framed on the wire
    body: bytes          # the body de-framed
    chunked: bool
    connection: int      # 0-based number of the connection it came on
    index: int           # 0-based position on that connection

    @property
    def request_line(self) -> bytes:
        return self.head.split(b"\r\n", 1)[0]

    @property
    def method(self) -> bytes:
        return self.request_line.split(b" ", 1)[0]

    @property
    def target(self) -> bytes:
        return self.request_line.split(b" ")[1]

    def header_lines(self) -> list[tuple[bytes, bytes]]:
        out = []
        for line in self.head.split(b"\r\n")[1:]:
            if line:
                name, _, value = line.partition(b":")
                out.append((name, value.strip()))
        return out

    def headers(self, name: bytes) -> list[bytes]:
        return [v for n, v in self.header_lines() if n.lower() == name.lower()]

    def names(self) -> set[bytes]:
        return {n.lower() for n, _ in self.header_lines()}


class BadFraming(Exception):
    pass


def _chunked_end(data: bytes, start: int) -> tuple[int, bytes] | None:
    """Where a chunked body starting at ``start`` ends, and its content;
    None if incomplete. Raises BadFraming if it is not valid chunked."""
    pos, body = start, []
    while True:
        eol = data.find(b"\r\n", pos)
        if eol == -1:
            return None
        size_text = data[pos:eol].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BadFraming(data[pos:eol]) from None
        pos = eol + 2
        if size == 0:
            # trailers, then an empty line
            while True:
                eol = data.find(b"\r\n", pos)
                if eol == -1:
                    return None
                line, pos = data[pos:eol], eol + 2
                if not line:
                    return pos, b"".join(body)
        if len(data) < pos + size + 2:
            return None
        body.append(data[pos:pos + size])
        if data[pos + size:pos + size + 2] != b"\r\n":
            raise BadFraming(data[pos + size:pos + size + 2])
        pos += size + 2


def dechunk(data: bytes) -> bytes:
    """The content of a complete chunked body."""
    end = _chunked_end(data, 0)
    assert end is not None, data
    return end[1]


def split_request(data: bytes) -> tuple[bytes, bytes, bytes, bool, int] | None:
    """``(head, body_raw, body, chunked, consumed)`` of the first request in
    ``data``, or None when it is incomplete."""
    end = data.find(b"\r\n\r\n")
    if end == -1:
        return None
    head = data[:end + 4]
    te = cl = None
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.lower() == b"transfer-encoding":
            te = value.strip().lower()
        elif name.lower() == b"content-length":
            cl = int(value.strip())
    start = end + 4
    if te is not None and te.endswith(b"chunked"):
        got = _chunked_end(data, start)
        if got is None:
            return None
        stop, body = got
        return head, data[start:stop], body, True, stop
    n = cl or 0
    if len(data) < start + n:
        return None
    return head, data[start:start + n], data[start:start + n], False, start + n


class _RecorderProtocol(protocol.Protocol):
    factory: "Recorder"

    def connectionMade(self) -> None:
        self.number = self.factory.connections
        self.factory.connections += 1
        self.factory.live.add(self)
        self.buf = b""
        self.count = 0
        self.busy = False
        self.lost = False
        self.next_piece: Any = None  # the DelayedCall writing the next piece of a Pieces reply

    def dataReceived(self, data: bytes) -> None:
        self.factory.received.append(data)
        self.buf += data
        self._next()

    def _next(self) -> None:
        while not self.busy and self.transport is not None:
            try:
                got = split_request(self.buf)
            except (BadFraming, ValueError):
                self.factory.bad.append(self.buf)
                self.transport.abortConnection()
                return
            if got is None:
                return
            head, body_raw, body, chunked, consumed = got
            self.buf = self.buf[consumed:]
            rec = Recorded(head, body_raw, body, chunked, self.number, self.count)
            self.count += 1
            self.factory.requests.append(rec)
            self._answer(rec, self.factory.respond(rec))

    def _answer(self, rec: Recorded, reply: Any) -> None:
        if reply is None:
            self.busy = True  # silent: never answer anything on this connection
        elif reply == CLOSE:
            self.transport.loseConnection()
            self.busy = True
        elif reply == RESET:
            self.transport.abortConnection()
            self.busy = True
        elif isinstance(reply, Pieces):
            self.busy = True
            self._write_pieces(list(reply.parts), reply)
        else:
            self.transport.write(reply)
            if b"connection: close" in rec.head.lower():
                self.transport.loseConnection()

    def _write_pieces(self, parts: list[bytes], reply: Pieces) -> None:
        self.next_piece = None
        if self.transport is None or self.lost:
            return
        if parts:
            self.transport.write(parts.pop(0))
            self.next_piece = reactor.callLater(reply.delay, self._write_pieces, parts, reply)
            return
        self.busy = False
        if reply.close:
            self.transport.loseConnection()
        else:
            self._next()

    def connectionLost(self, reason: Any = None) -> None:
        # The rest of a Pieces reply has nobody to go to: its timer would
        # otherwise run on (and outlive a test that already has its answer).
        self.lost = True
        if self.next_piece is not None and self.next_piece.active():
            self.next_piece.cancel()
        self.next_piece = None
        self.factory.live.discard(self)
        if not self.factory.live:
            waiting, self.factory.closing = self.factory.closing, []
            for d in waiting:
                d.callback(None)


class Recorder(protocol.ServerFactory):
    protocol = _RecorderProtocol

    def __init__(self, respond: Callable[[Recorded], Any] | None = None) -> None:
        self.respond = respond or (lambda rec: OK)
        self.requests: list[Recorded] = []
        self.received: list[bytes] = []
        self.bad: list[bytes] = []
        self.connections = 0
        self.live: set[_RecorderProtocol] = set()
        self.closing: list[defer.Deferred[None]] = []
        self.listening: Any = None
        self.port = 0

    @property
    def data(self) -> bytes:
        return b"".join(self.received)

    @property
    def open(self) -> int:
        return len(self.live)

    def all_closed(self) -> defer.Deferred[None]:
        """Fires once no accepted connection is open (at once if none is)."""
        if not self.live:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self.closing.append(d)
        return d

    def reset(self) -> None:
        """Forget what was recorded (connections stay)."""
        self.requests.clear()
        self.received.clear()
        self.bad.clear()

    async def close(self) -> None:
        await defer.maybeDeferred(self.listening.stopListening)
        for p in list(self.live):
            if p.transport is not None:
                p.transport.abortConnection()


def start_recorder(respond: Callable[[Recorded], Any] | None = None, interface: str = "127.0.0.1") -> Recorder:
    r = Recorder(respond)
    r.listening = reactor.listenTCP(0, r, interface=interface)
    r.port = r.listening.getHost().port
    return r
