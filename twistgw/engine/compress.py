"""A forwarded response compressed on its way to the client
(:class:`CompressingDownstream`), on a Gateway with ``gzip`` or
``brotli``; the decisions are ``core/compression.py``'s.

The body is compressed as it streams: each upstream read's bytes go
through the encoder, and at the end of the read (when the upstream side
calls :meth:`~twistgw.engine.seams.Downstream.flush`) the encoder is
flushed, so the client can decode everything the upstream sent so far
before the upstream finishes; nothing is buffered past one read (memory:
the encoder's window, zlib's ``windowBits`` and ``memoryLevel`` or
brotli's ``windowBits``). The response goes out without Content-Length:
chunked over HTTP/1.1, DATA frames over HTTP/2.
"""

from __future__ import annotations

from typing import Sequence

from twistgw.config.compression import Compression, Encoding
from twistgw.core.compression import Encoder, response_head
from twistgw.engine.seams import Downstream, PassingDownstream

__all__ = ["CompressingDownstream"]


class CompressingDownstream(PassingDownstream):
    """A client's request as the upstream side sees it, its response
    compressed when :func:`~twistgw.core.compression.response_head` says so
    (a :class:`~twistgw.engine.seams.Downstream`)."""

    def __init__(self, ex: Downstream, compression: Compression, chosen: Encoding | None) -> None:
        super().__init__(ex)
        self.compression = compression
        self.chosen = chosen
        self.encoder: Encoder | None = None
        #: bytes went into the encoder since its last flush
        self.pending = False

    @property
    def held(self) -> bytes | None:
        # not None while the encoder holds bytes: the upstream side calls
        # flush() at the end of its read
        return b"" if self.pending else self.ex.held

    def send_head(self, status: int, reason: bytes, lines: list[bytes], length: bytes | None,
                  hold: bool = False) -> None:
        length, self.encoder = response_head(self.compression, self.chosen, status, self.method, lines, length)
        self.ex.send_head(status, reason, lines, length, hold)

    def write(self, data: bytes) -> None:
        enc = self.encoder
        if enc is None:
            self.ex.write(data)
            return
        out = enc.compress(data)
        self.pending = True
        if out:
            self.ex.write(out)

    def flush(self) -> None:
        if self.pending:
            self.pending = False
            out = self.encoder.flush() if self.encoder is not None else b""
            if out:
                self.ex.write(out)
        self.ex.flush()

    def finish(self, trailers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        enc, self.encoder = self.encoder, None
        self.pending = False
        if enc is not None:
            out = enc.finish()
            if out:
                self.ex.write(out)
        self.ex.finish(trailers)

    def upstream_broke(self, reason: str) -> None:
        self.encoder = None
        self.pending = False
        self.ex.upstream_broke(reason)
