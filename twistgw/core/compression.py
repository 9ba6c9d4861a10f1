"""Response compression as Envoy's compressor filter decides it (no I/O):
which coding a request accepts (:func:`choose`), whether a response head
may be compressed and how its headers change (:func:`response_head`), the
streaming encoders (:func:`encoder`: zlib's gzip, brotli), and the
gateway's own answers compressed whole (:func:`compress_local`).

The engine wraps a forwarded request's downstream in
``engine/compress.CompressingDownstream`` only on a Gateway with ``gzip``
or ``brotli``: elsewhere nothing here runs. See docs/gateways.md.
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol

import brotli

from twistgw.config.compression import Compression, Encoding
from twistgw.core.plan import LocalResponse

__all__ = ["Encoder", "choose", "compress_local", "encoder", "negotiate", "response_head"]

_VARY_LINE = b"Vary: Accept-Encoding\r\n"
_NO_BODY = frozenset({204, 304})


class Encoder(Protocol):
    """A streaming compressor: ``compress`` may keep bytes back, ``flush``
    gives out all it has so far (the client can decode it), ``finish`` ends
    the stream."""

    def compress(self, data: bytes) -> bytes: ...

    def flush(self) -> bytes: ...

    def finish(self) -> bytes: ...


class _Gzip:
    __slots__ = ("z",)

    def __init__(self, e: Encoding) -> None:
        # 16 + window bits: the gzip header and trailer (RFC 1952), as Envoy's zlib compressor writes
        self.z = zlib.compressobj(e.level, zlib.DEFLATED, 16 + e.window_bits, e.memory_level, e.strategy)

    def compress(self, data: bytes) -> bytes:
        return self.z.compress(data)

    def flush(self) -> bytes:
        return self.z.flush(zlib.Z_SYNC_FLUSH)

    def finish(self) -> bytes:
        return self.z.flush(zlib.Z_FINISH)


class _Brotli:
    __slots__ = ("b",)

    def __init__(self, e: Encoding) -> None:
        self.b = brotli.Compressor(mode=e.strategy, quality=e.level, lgwin=e.window_bits)

    def compress(self, data: bytes) -> bytes:
        out: bytes = self.b.process(data)
        return out

    def flush(self) -> bytes:
        out: bytes = self.b.flush()
        return out

    def finish(self) -> bytes:
        out: bytes = self.b.finish()
        return out


def encoder(e: Encoding) -> Encoder:
    """A new streaming encoder for ``e``."""
    return _Brotli(e) if e.name == "br" else _Gzip(e)


def _qvalue(params: list[str]) -> float:
    """An Accept-Encoding item's weight: ``q=`` (RFC 9110 §12.4.2), 1 when
    absent; a malformed one is 0 (not acceptable)."""
    for p in params:
        key, _, value = p.strip().partition("=")
        if key.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return 0.0
            return q if 0.0 <= q <= 1.0 else 0.0
    return 1.0


#: ``choose``'s answers by (Gateway compression, Accept-Encoding): clients send
#: few distinct values (each browser its own); bounded, emptied when full
_CHOSEN: dict[tuple[int, bytes], tuple[Compression, Encoding | None]] = {}
_CHOSEN_LIMIT = 1024


def choose(compression: Compression, accept: list[bytes] | None) -> Encoding | None:
    """:func:`negotiate`, remembered per Accept-Encoding value."""
    if not accept:
        return None
    value = accept[0] if len(accept) == 1 else b",".join(accept)
    key = (id(compression), value)
    found = _CHOSEN.get(key)
    if found is not None and found[0] is compression:
        return found[1]
    chosen = negotiate(compression, [value])
    if len(_CHOSEN) >= _CHOSEN_LIMIT:
        _CHOSEN.clear()
    _CHOSEN[key] = (compression, chosen)
    return chosen


def negotiate(compression: Compression, accept: list[bytes] | None) -> Encoding | None:
    """The coding to compress a response with, from the request's
    ``Accept-Encoding`` values, or None: the highest weight among the
    Gateway's codings (an explicit name, else ``*``), ties to the one the
    client listed first, then to the Gateway's preference; none when the
    client sent no Accept-Encoding, weighs every offered coding 0
    (``gzip;q=0``, ``*;q=0``), or prefers ``identity`` to them."""
    if not accept:
        return None
    weights: dict[str, tuple[float, int]] = {}
    for position, item in enumerate(b",".join(accept).decode("latin-1").split(",")):
        name, *params = item.split(";")
        name = name.strip().lower()
        if name and name not in weights:
            weights[name] = (_qvalue(params), position)
    star = weights.get("*")
    best: Encoding | None = None
    best_key = (0.0, 0)
    for rank, e in enumerate(compression.encodings):
        found = weights.get(e.name)
        if found is None:
            found = star if star is not None else (0.0, 0)
        q, position = found
        key = (q, -(position * 16 + rank))
        if q > 0 and (best is None or key > best_key):
            best, best_key = e, key
    if best is None:
        return None
    identity = weights.get("identity")
    if identity is not None and identity[0] > best_key[0]:
        return None
    return best


def _tokens(value: bytes) -> list[bytes]:
    return [t.strip().lower() for t in value.split(b",")]


def _media_type(value: bytes) -> bytes:
    return value.split(b";", 1)[0].strip().lower()


def response_head(compression: Compression, chosen: Encoding | None, status: int, method: bytes,
                  lines: list[bytes], length: bytes | None) -> tuple[bytes | None, Encoder | None]:
    """Decide for a forwarded response head: its end-to-end ``lines``
    (``b"Name: value\\r\\n"``, changed in place) and Content-Length.
    Returns ``(the Content-Length to send, the encoder or None)``.

    Compressible (Envoy's rules): a body may follow (not HEAD, 1xx, 204,
    304), no ``Content-Encoding``, no ``Cache-Control: no-transform``, a
    listed media type (or none given), a Content-Length at least the
    minimum (or none: a streamed body), and no ETag under
    ``disableOnEtagHeader``. A compressible response gets ``Vary:
    Accept-Encoding``; it is compressed when the client accepted a coding
    (``chosen``): Content-Length dropped, ``Content-Encoding`` set, a strong
    ETag made weak."""
    if method == b"HEAD" or status < 200 or status in _NO_BODY:
        return length, None
    e = chosen or compression.encodings[0]
    content_type = etag_at = vary_at = None
    for i, line in enumerate(lines):
        c = line[0] | 0x20
        if c not in b"cev":  # only Content-*, Cache-Control, ETag, Vary matter
            continue
        name, _, value = line.partition(b":")
        name = name.lower()
        if name == b"content-encoding":
            return length, None
        if name == b"cache-control":
            if b"no-transform" in _tokens(value):
                return length, None
        elif name == b"content-type":
            content_type = value
        elif name == b"etag":
            etag_at = i
        elif name == b"vary":
            vary_at = i
    if content_type is not None and _media_type(content_type) not in e.types:
        return length, None
    if length is not None and (not length.isdigit() or int(length) < e.min_length):
        return length, None
    if etag_at is not None and e.disable_on_etag:
        return length, None
    _add_vary(lines, vary_at)
    if chosen is None:
        return length, None
    if etag_at is not None:
        lines[etag_at] = _weak_etag(lines[etag_at])
    lines.append(b"Content-Encoding: %s\r\n" % chosen.name.encode("ascii"))
    return None, encoder(chosen)


def _add_vary(lines: list[bytes], at: int | None) -> None:
    if at is None:
        lines.append(_VARY_LINE)
        return
    value = lines[at].partition(b":")[2].strip()
    tokens = _tokens(value)
    if b"*" in tokens or b"accept-encoding" in tokens:
        return
    lines[at] = b"Vary: %s, Accept-Encoding\r\n" % value if value else _VARY_LINE


def _weak_etag(line: bytes) -> bytes:
    """A strong ETag made weak (``W/"..."``), as Envoy does when it
    compresses: the compressed bytes are not the upstream's representation."""
    name, _, value = line.partition(b":")
    value = value.strip()
    if value[:2].lower() == b"w/":
        return line
    return b"%s: W/%s\r\n" % (name, value)


def compress_local(compression: Compression, answer: LocalResponse, method: bytes,
                   accept: list[bytes] | None) -> LocalResponse:
    """The gateway's own answer (a direct response, a refusal) compressed
    whole under the same rules (Envoy's compressor sees local replies too):
    its Content-Length is the compressed body's."""
    body = answer.body
    if not body:
        return answer
    lines = [b"Content-Type: %s\r\n" % answer.content_type] if answer.content_type else []
    lines += [b"%s: %s\r\n" % (n, v) for n, v in answer.headers]
    chosen = choose(compression, accept)
    count = len(lines)
    _, enc = response_head(compression, chosen, answer.status, method, lines, b"%d" % len(body))
    if len(lines) == count and enc is None:
        return answer  # not compressible
    if enc is not None:
        body = enc.compress(body) + enc.finish()
    headers: list[Any] = []
    for line in lines[1:] if answer.content_type else lines:
        name, _, value = line.partition(b":")
        headers.append((name, value.strip()))
    return LocalResponse(answer.status, body, tuple(headers), answer.content_type, answer.reason, answer.answer)
