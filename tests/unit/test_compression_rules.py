"""Compression's decisions (core/compression.py) and request ids
(core/requestid.py), in memory: Accept-Encoding with weights, the response
head's rules, the encoders' streams, the gateway's own answers, and the
ids' format and rules."""

from __future__ import annotations

import uuid
import zlib

import brotli
import pytest

from twisted.web.http_headers import Headers as TwistedHeaders

from twistgw.api.headers import Headers
from twistgw.config.compression import Compression, Encoding
from twistgw.config.gateways import HcmSettings
from twistgw.core.compression import choose, compress_local, encoder, response_head
from twistgw.core.plan import LocalResponse
from twistgw.core.requestid import is_sane, new_id, request_id

GZIP, BR = Encoding("gzip"), Encoding("br", level=3, window_bits=18)
BOTH = Compression((BR, GZIP))
ONLY_GZIP = Compression((GZIP,))


@pytest.mark.parametrize("accept, expected", [
    (None, None), ([], None), ([b""], None),
    ([b"gzip"], "gzip"), ([b"br"], "br"), ([b"GZIP"], "gzip"),
    ([b"gzip, br"], "gzip"), ([b"br, gzip"], "br"),            # ties: the client's order
    ([b"gzip;q=0.5, br;q=0.9"], "br"), ([b"gzip;q=1.0, br;q=0.9"], "gzip"),
    ([b"gzip;q=0"], None), ([b"gzip;q=0, br;q=0"], None), ([b"gzip;q=0", b"br"], "br"),
    ([b"*"], "br"), ([b"*;q=0"], None), ([b"gzip;q=0, *"], "br"), ([b"br;q=0, *;q=0.1"], "gzip"),
    ([b"identity"], None), ([b"deflate"], None), ([b"identity;q=1, gzip;q=0.5"], None),
    ([b"gzip, identity"], "gzip"), ([b"gzip;q=0.5, identity;q=0.5"], "gzip"),
    ([b"gzip;q=abc"], None), ([b"gzip;q=2"], None), ([b"gzip ; q=0.3"], "gzip"),
])
def test_choose(accept: list[bytes] | None, expected: str | None) -> None:
    chosen = choose(BOTH, accept)
    assert (chosen.name if chosen else None) == (None if expected is None else {"gzip": "gzip", "br": "br"}[expected])


def test_choose_remembers_per_value_and_per_gateway() -> None:
    assert choose(BOTH, [b"gzip, br"]) is GZIP and choose(BOTH, [b"gzip, br"]) is GZIP
    assert choose(ONLY_GZIP, [b"br"]) is None and choose(BOTH, [b"br"]) is BR
    other = Compression((Encoding("gzip", level=9),))
    assert choose(other, [b"gzip, br"]) is other.encodings[0]
    assert choose(BOTH, [b"gzip;q=0.1", b"br"]) is BR  # several lines: one value


def test_choose_offers_only_what_is_configured() -> None:
    assert choose(ONLY_GZIP, [b"br"]) is None
    assert choose(ONLY_GZIP, [b"br, gzip;q=0.1"]) is GZIP


def _head(lines: list[bytes], length: bytes | None = b"1000", status: int = 200, method: bytes = b"GET",
          chosen: Encoding | None = GZIP, compression: Compression = ONLY_GZIP) -> tuple[list[bytes], bytes | None,
                                                                                           object]:
    lines = list(lines)
    length, enc = response_head(compression, chosen, status, method, lines, length)
    return lines, length, enc


def test_compressed_head() -> None:
    lines, length, enc = _head([b"Content-Type: application/json; charset=utf-8\r\n", b"ETag: \"v1\"\r\n"])
    assert enc is not None and length is None
    assert lines == [b"Content-Type: application/json; charset=utf-8\r\n", b"ETag: W/\"v1\"\r\n",
                     b"Vary: Accept-Encoding\r\n", b"Content-Encoding: gzip\r\n"]


@pytest.mark.parametrize("lines, length, status, method", [
    ([b"Content-Type: image/png\r\n"], b"1000", 200, b"GET"),
    ([b"Content-Type: application/json\r\n", b"Content-Encoding: br\r\n"], b"1000", 200, b"GET"),
    ([b"Content-Type: application/json\r\n", b"Cache-Control: public, No-Transform\r\n"], b"1000", 200, b"GET"),
    ([b"Content-Type: application/json\r\n"], b"29", 200, b"GET"),
    ([b"Content-Type: application/json\r\n"], b"1000", 204, b"GET"),
    ([b"Content-Type: application/json\r\n"], b"1000", 304, b"GET"),
    ([b"Content-Type: application/json\r\n"], b"1000", 101, b"GET"),
    ([b"Content-Type: application/json\r\n"], b"1000", 200, b"HEAD"),
])
def test_never_compressed(lines: list[bytes], length: bytes, status: int, method: bytes) -> None:
    out, sent_length, enc = _head(lines, length, status, method)
    assert enc is None and sent_length == length and out == lines  # no Vary either


def test_vary_without_a_coding_and_the_etag_rule() -> None:
    lines, length, enc = _head([b"Content-Type: text/html\r\n", b"Vary: Origin\r\n"], chosen=None)
    assert enc is None and length == b"1000" and lines[1] == b"Vary: Origin, Accept-Encoding\r\n"
    lines, _, _ = _head([b"Content-Type: text/html\r\n", b"Vary: accept-encoding\r\n"])
    assert lines.count(b"Vary: accept-encoding\r\n") == 1 and not any(b"Vary: Accept" in x for x in lines)
    no_etag = Compression((Encoding("gzip", disable_on_etag=True),))
    lines, length, enc = _head([b"Content-Type: text/html\r\n", b"ETag: W/\"x\"\r\n"], compression=no_etag,
                               chosen=no_etag.encodings[0])
    assert enc is None and length == b"1000" and len(lines) == 2
    # no Content-Type, or no Content-Length (streamed): compressed, as Envoy
    assert _head([], None)[2] is not None


@pytest.mark.parametrize("e", [GZIP, Encoding("gzip", level=1, window_bits=9, memory_level=1, strategy=2), BR,
                               Encoding("br", level=11, window_bits=24, strategy=1)])
def test_encoders_stream_and_flush(e: Encoding) -> None:
    enc = encoder(e)
    parts = [b"alpha " * 300, b"beta " * 300, b"gamma"]
    out = b""
    decoded = b""
    for part in parts:
        out += enc.compress(part) + enc.flush()
        # everything so far decodes after each flush
        decoded = (zlib.decompressobj(31).decompress(out) if e.name == "gzip"
                   else brotli.Decompressor().process(out))
    assert decoded == b"".join(parts)
    out += enc.finish()
    whole = zlib.decompress(out, 31) if e.name == "gzip" else brotli.decompress(out)
    assert whole == b"".join(parts)


def test_local_answers() -> None:
    text = b"Hello, world! It's me. I've been wondering if after all these years you'd like to meet."
    answer = LocalResponse(200, text, ((b"X-A", b"1"),), answer=True, reason="direct")
    out = compress_local(ONLY_GZIP, answer, b"GET", [b"gzip"])
    assert zlib.decompress(out.body, 31) == text and out.content_type == b"text/plain" and out.answer
    assert out.headers == ((b"X-A", b"1"), (b"Vary", b"Accept-Encoding"), (b"Content-Encoding", b"gzip"))
    plain = compress_local(ONLY_GZIP, answer, b"GET", None)
    assert plain.body == text and plain.headers == ((b"X-A", b"1"), (b"Vary", b"Accept-Encoding"))
    assert compress_local(ONLY_GZIP, answer, b"HEAD", [b"gzip"]) is answer
    small = LocalResponse(404, b"not found")
    assert compress_local(ONLY_GZIP, small, b"GET", [b"gzip"]) is small


def test_new_ids_are_uuid4s_and_differ() -> None:
    ids = [new_id() for _ in range(3000)]  # several blocks
    assert len(set(ids)) == 3000
    for text in ids:
        u = uuid.UUID(text)
        assert u.version == 4 and u.variant == uuid.RFC_4122 and str(u) == text


def _headers(*values: bytes) -> Headers:
    h = Headers()
    if values:
        h.setRawHeaders(b"x-request-id", list(values))
    return h


def test_request_id_rules() -> None:
    edge = HcmSettings()
    keep = HcmSettings(preserve_external_request_id=True)
    inner = HcmSettings(use_remote_address=False)
    off = HcmSettings(generate_request_id=False)
    assert request_id(off, _headers(b"abc")) is None and request_id(off, _headers()) is None
    assert uuid.UUID(request_id(edge, _headers())).version == 4
    assert request_id(edge, _headers(b"abc")) != "abc"
    assert request_id(keep, _headers(b"abc")) == "abc" and request_id(inner, _headers(b"abc")) == "abc"
    twisted_headers = TwistedHeaders({b"X-Request-ID": [b"abc"]})  # any object with getRawHeaders
    assert request_id(keep, twisted_headers) == "abc"
    for bad in ([b""], [b"a b"], [b"x" * 129], [b"a\x01"], [b"\xff"], [b"one", b"two"]):
        got = request_id(keep, _headers(*bad))
        assert got is not None and uuid.UUID(got).version == 4, bad
    assert is_sane(b"x" * 128) and not is_sane(b"x" * 129)
