"""A Gateway's response compression: Gloo's ``httpGateway.options.gzip``
(Envoy's gzip filter, ``gzip.proto``) and twistgw's ``brotli`` beside it
(Envoy's brotli compressor library; Gloo has no field for it, see
docs/decisions.md). Read into :class:`Compression`; applied by
``core/compression.py`` and ``engine/compress.py``. See docs/gateways.md.

Every field of Gloo's ``Gzip`` is read; none is accepted and ignored.
"""

from __future__ import annotations

from typing import Any

import attrs

from twistgw.api.fields import FieldReader, Path

__all__ = ["Compression", "DEFAULT_TYPES", "Encoding", "read_brotli", "read_gzip"]

#: Envoy's content types when ``contentType`` is not given (gzip.proto)
DEFAULT_TYPES = frozenset({b"application/javascript", b"application/json", b"application/xhtml+xml",
                           b"image/svg+xml", b"text/css", b"text/html", b"text/plain", b"text/xml"})

#: gzip.proto's ``CompressionLevel.Enum`` → zlib's level (Envoy: BEST 9, SPEED 1, DEFAULT zlib's own, 6)
GZIP_LEVELS = {"DEFAULT": -1, "BEST": 9, "SPEED": 1}
#: gzip.proto's ``CompressionStrategy`` → zlib's (Z_DEFAULT_STRATEGY, Z_FILTERED, Z_HUFFMAN_ONLY, Z_RLE)
GZIP_STRATEGIES = {"DEFAULT": 0, "FILTERED": 1, "HUFFMAN": 2, "RLE": 3}
#: Envoy's brotli ``encoderMode`` → the brotli library's MODE_GENERIC, MODE_TEXT, MODE_FONT
BROTLI_MODES = {"DEFAULT": 0, "GENERIC": 0, "TEXT": 1, "FONT": 2}

_GZIP_FIELDS = ("compressionLevel", "compressionStrategy", "contentLength", "contentType", "disableOnEtagHeader",
                "memoryLevel", "removeAcceptEncodingHeader", "windowBits")
_BROTLI_FIELDS = ("contentLength", "contentType", "disableOnEtagHeader", "encoderMode", "quality",
                  "removeAcceptEncodingHeader", "windowBits")
_BROTLI_REFUSED = {
    "inputBlockBits": "the encoder's input block size is brotli's default",
    "disableLiteralContextModeling": "literal context modeling is always on (brotli's default)",
    "chunkSize": "compressed bytes go out as each upstream read is compressed, not in fixed chunks",
}


@attrs.frozen
class Encoding:
    """One content coding a Gateway offers, with its response rules
    (Envoy's per-compressor ``response_direction_config``).

    :ivar name: the ``Content-Encoding`` token, ``gzip`` or ``br``.
    :ivar min_length: ``contentLength``: a response whose Content-Length is
        smaller is not compressed (default 30).
    :ivar types: ``contentType``: the media types compressed, lower case.
    :ivar disable_on_etag: ``disableOnEtagHeader``: a response with an ETag
        is not compressed (otherwise a strong ETag is made weak).
    :ivar remove_accept_encoding: ``removeAcceptEncodingHeader``: the
        request goes upstream without ``Accept-Encoding``.
    :ivar level: zlib's level, or brotli's quality (0-11, default 3).
    :ivar window_bits: zlib's (9-15, default 12) or brotli's (10-24, default 18).
    :ivar memory_level: zlib's (1-9, default 5).
    :ivar strategy: zlib's strategy, or brotli's mode.
    """

    name: str
    min_length: int = 30
    types: frozenset[bytes] = DEFAULT_TYPES
    disable_on_etag: bool = False
    remove_accept_encoding: bool = False
    level: int = -1
    window_bits: int = 12
    memory_level: int = 5
    strategy: int = 0


@attrs.frozen
class Compression:
    """What a Gateway compresses with, in its order of preference (used
    when the client weighs them equally): brotli, then gzip."""

    encodings: tuple[Encoding, ...]

    @property
    def remove_accept_encoding(self) -> bool:
        return any(e.remove_accept_encoding for e in self.encodings)


def _common(r: FieldReader, m: dict[str, Any], path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with r.part():
        if m.get("contentLength") is not None:
            out["min_length"] = r.integer(m["contentLength"], path + ("contentLength",), 30, 2**32 - 1)
    with r.part():
        if m.get("contentType") is not None:
            types = r.strings(m["contentType"], path + ("contentType",))
            if len(types) > 50:
                raise r.fail(path + ("contentType",), f"lists at most 50 types (gzip.proto), got {len(types)}")
            for i, t in enumerate(types):
                if "/" not in t or ";" in t or not t.isascii() or not t.strip() == t or " " in t:
                    raise r.fail(path + ("contentType", i), f"must be a media type such as application/json"
                                 f" (no parameters), got {t!r}")
            if types:
                out["types"] = frozenset(t.lower().encode("ascii") for t in types)
    for field, attr in (("disableOnEtagHeader", "disable_on_etag"),
                        ("removeAcceptEncodingHeader", "remove_accept_encoding")):
        with r.part():
            if m.get(field) is not None:
                out[attr] = r.boolean(m[field], path + (field,))
    return out


def read_gzip(r: FieldReader, value: Any, path: Path) -> Encoding:
    """``httpGateway.options.gzip`` (gzip.proto), every field."""
    m = r.mapping(value if value is not None else {}, path, _GZIP_FIELDS)
    out = _common(r, m, path)
    with r.part():
        if m.get("memoryLevel") is not None:
            out["memory_level"] = r.integer(m["memoryLevel"], path + ("memoryLevel",), 1, 9)
    with r.part():
        if m.get("windowBits") is not None:
            out["window_bits"] = r.integer(m["windowBits"], path + ("windowBits",), 9, 15)
    with r.part():
        if m.get("compressionLevel") is not None:
            level = r.choice(m["compressionLevel"], path + ("compressionLevel",), GZIP_LEVELS, "compression level")
            out["level"] = GZIP_LEVELS[level]
    with r.part():
        if m.get("compressionStrategy") is not None:
            name = r.choice(m["compressionStrategy"], path + ("compressionStrategy",), GZIP_STRATEGIES,
                            "compression strategy")
            out["strategy"] = GZIP_STRATEGIES[name]
    return Encoding("gzip", **out)


def read_brotli(r: FieldReader, value: Any, path: Path) -> Encoding:
    """``httpGateway.options.brotli``, twistgw's extension: Envoy's brotli
    compressor library (``quality``, ``windowBits``, ``encoderMode``) with
    the same response rules as ``gzip``."""
    m = r.mapping(value if value is not None else {}, path, refused=_BROTLI_REFUSED)
    m = r.mapping(m, path, _BROTLI_FIELDS)
    out = _common(r, m, path)
    out["level"], out["window_bits"] = 3, 18  # Envoy's brotli defaults
    with r.part():
        if m.get("quality") is not None:
            out["level"] = r.integer(m["quality"], path + ("quality",), 0, 11)
    with r.part():
        if m.get("windowBits") is not None:
            out["window_bits"] = r.integer(m["windowBits"], path + ("windowBits",), 10, 24)
    with r.part():
        if m.get("encoderMode") is not None:
            mode = r.choice(m["encoderMode"], path + ("encoderMode",), BROTLI_MODES, "encoder mode")
            out["strategy"] = BROTLI_MODES[mode]
    return Encoding("br", **out)
