"""grpc-web on the client side (gRPC's PROTOCOL-WEB, as Envoy's
``grpc_web`` filter does it): :class:`GrpcWebDownstream` stands between a
grpc-web client's exchange and the HTTP/2 upstream's gRPC answer.

* the response's content type becomes ``application/grpc-web+proto``
  (``application/grpc-web-text+proto`` when the client's ``Accept`` asked
  for text, ``core.grpc``); its trailers (``grpc-status``,
  ``grpc-message``, the trailing metadata) are framed at the end of the
  body — flag byte ``0x80``, a 4-byte length, ``name:value\\r\\n`` lines —
  so an HTTP/1.1 client (a browser) reads them; a trailers-only answer keeps
  its ``grpc-status`` in the head;
* text: the response body is base64 (in groups of 3 bytes as it streams),
  the request body base64-decoded (in groups of 4 characters);
* a response that is not gRPC (a 404 page, the gateway's own 503) passes
  as it is.

The core decided all this (``core.grpc.prepare_http2``); the request's
headers went out changed already.
"""

from __future__ import annotations

import base64
import binascii
from typing import Sequence

from twisted.logger import Logger

from twistgw.core.grpc import GRPC_WEB_TEXT, is_grpc
from twistgw.engine.body import BodyConsumer, RequestBody
from twistgw.engine.seams import Downstream, PassingDownstream

__all__ = ["GrpcWebDownstream"]

_log = Logger(namespace="twistgw.grpcweb")

_BINARY_TYPE = b"Content-Type: application/grpc-web+proto\r\n"
_TEXT_TYPE = b"Content-Type: application/grpc-web-text+proto\r\n"


def trailer_frame(trailers: Sequence[tuple[bytes, bytes]]) -> bytes:
    """gRPC-web's trailer frame (PROTOCOL-WEB: the MSB of the flag byte set)."""
    block = b"".join(b"%s:%s\r\n" % (name, value) for name, value in trailers)
    return b"\x80" + len(block).to_bytes(4, "big") + block


class _Decoder:
    """A base64 (``grpc-web-text``) request body decoded on its way upstream:
    whole groups of 4 characters as they come (a segment may end in padding
    and another follow, as clients send one per message)."""

    __slots__ = ("consumer", "rest", "broken")

    def __init__(self, consumer: BodyConsumer) -> None:
        self.consumer = consumer
        self.rest = b""
        self.broken = False

    def send_body(self, data: bytes) -> None:
        if self.broken:
            return
        data = self.rest + data.translate(None, b" \t\r\n")
        cut = len(data) - len(data) % 4
        self.rest = data[cut:]
        if cut:
            self._decode(data[:cut])

    def _decode(self, data: bytes) -> None:
        try:
            if b"=" not in data[:-2]:
                out = base64.b64decode(data, validate=True)
            else:  # padded segments one after another
                out = b"".join(base64.b64decode(data[i:i + 4], validate=True) for i in range(0, len(data), 4))
        except (binascii.Error, ValueError):
            self.broken = True
            _log.info("A grpc-web-text request body is not base64: the request ends there")
            self.consumer.end_body()
            return
        if out:
            self.consumer.send_body(out)

    def end_body(self, trailers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        if self.broken:
            return
        if self.rest:  # not a whole group: the client's body was cut
            self.broken = True
            self.consumer.end_body()
            return
        self.consumer.end_body(trailers)


class _TextBody:
    """The request body as the upstream side sees it: decoded, so of no known length."""

    __slots__ = ("body",)

    length = None

    def __init__(self, body: RequestBody) -> None:
        self.body = body

    def attach(self, consumer: BodyConsumer) -> None:
        self.body.attach(_Decoder(consumer))  # a retry attaches again: a fresh decoder over the replayed body

    def keep(self, limit: int) -> None:
        self.body.keep(limit)

    def detach(self) -> None:
        self.body.detach()

    @property
    def replayable(self) -> bool:
        return self.body.replayable


class GrpcWebDownstream(PassingDownstream):
    """A grpc-web client's exchange, as the upstream side sees it (a
    :class:`~twistgw.engine.seams.Downstream`; see the module)."""

    def __init__(self, ex: Downstream, kind: int, text_body: bool) -> None:
        super().__init__(ex)
        self.text = kind == GRPC_WEB_TEXT
        body = ex.body
        self.body = _TextBody(body) if text_body and body is not None else body
        self.grpc = False
        self.rest = b""

    def send_head(self, status: int, reason: bytes, lines: list[bytes], length: bytes | None,
                  hold: bool = False) -> None:
        for i, line in enumerate(lines):
            if line[:13].lower() == b"content-type:" and is_grpc(line[13:].strip()):
                self.grpc = True
                lines[i] = _TEXT_TYPE if self.text else _BINARY_TYPE
                length = None  # the trailers go in the body
                break
        self.ex.send_head(status, reason, lines, length, hold)

    def write(self, data: bytes) -> None:
        if self.grpc and self.text:
            data = self.rest + data
            cut = len(data) - len(data) % 3
            self.rest = data[cut:]
            data = base64.b64encode(data[:cut])
        if data:
            self.ex.write(data)

    def finish(self, trailers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        if not self.grpc:
            self.ex.finish(trailers)
            return
        end = self.rest + (trailer_frame(trailers) if trailers else b"")
        self.rest = b""
        if end:
            self.ex.write(base64.b64encode(end) if self.text else end)
        self.ex.finish(())

