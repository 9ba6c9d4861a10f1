"""A Gateway's ``gzip`` (every field of Gloo's gzip.proto), twistgw's
``brotli``, and the HCM request-id fields, read into the model; bad
values refused with their field."""

from __future__ import annotations

import textwrap

import pytest

from twistgw.config.compression import DEFAULT_TYPES, Compression, Encoding
from twistgw.config.gateways import GlooGateway
from twistgw.config.loader import ConfigError, load_text


def _gateway(options: str) -> str:
    return textwrap.dedent("""\
        apiVersion: gateway.solo.io/v1
        kind: Gateway
        metadata: {name: gw, namespace: gloo-system}
        spec:
          bindPort: 8080
          httpGateway:
            options:
        """) + textwrap.indent(textwrap.dedent(options), "      ")


def _read(options: str) -> GlooGateway:
    gw = load_text(_gateway(options)).of_kind("Gateway")[("gloo-system", "gw")]
    assert isinstance(gw, GlooGateway)
    return gw


def _problems(options: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_text(_gateway(options))
    return [str(issue) for issue in info.value.issues]


def test_every_gzip_field() -> None:
    gw = _read("""\
        gzip:
          memoryLevel: 9
          compressionLevel: BEST
          compressionStrategy: RLE
          windowBits: 15
          contentLength: 100
          contentType: [application/json, Text/HTML]
          disableOnEtagHeader: true
          removeAcceptEncodingHeader: true
        """)
    assert gw.compression == Compression((Encoding("gzip", 100, frozenset({b"application/json", b"text/html"}),
                                                   True, True, 9, 15, 9, 3),))
    assert gw.compression.remove_accept_encoding


def test_defaults_and_the_order_of_preference() -> None:
    gw = _read("gzip: {}\nbrotli: {}\n")
    assert gw.compression is not None
    br, gzip = gw.compression.encodings
    assert gzip == Encoding("gzip", 30, DEFAULT_TYPES, False, False, -1, 12, 5, 0)
    assert (br.name, br.level, br.window_bits, br.strategy) == ("br", 3, 18, 0)
    gw = _read("brotli: {quality: 11, windowBits: 24, encoderMode: TEXT, contentLength: 64, contentType: [text/css],"
               " disableOnEtagHeader: true, removeAcceptEncodingHeader: false}\n")
    assert gw.compression == Compression((Encoding("br", 64, frozenset({b"text/css"}), True, False, 11, 24, 5, 1),))
    assert _read("{}").compression is None
    for level, value in (("SPEED", 1), ("DEFAULT", -1)):
        gw = _read(f"gzip: {{compressionLevel: {level}}}\n")
        assert gw.compression is not None and gw.compression.encodings[0].level == value


def test_request_id_fields() -> None:
    gw = _read("httpConnectionManagerSettings: {generateRequestId: false, preserveExternalRequestId: true}\n")
    assert not gw.hcm.generate_request_id and gw.hcm.preserve_external_request_id
    gw = _read("{}")
    assert gw.hcm.generate_request_id and not gw.hcm.preserve_external_request_id


def test_bad_fields_are_located() -> None:
    issues = _problems("""\
        gzip: {compressionLevel: FASTEST, memoryLevel: 0, windowBits: 16, contentLength: 29, contentType: [json],
               compressionStrategy: ZIP, disableOnEtagHeader: 1, bufferSize: 4}
        brotli: {quality: -1, windowBits: 9, encoderMode: MUSIC, chunkSize: 1}
        httpConnectionManagerSettings: {uuidRequestIdConfig: {packTraceReason: false}}
        """)
    text = "\n".join(issues)
    for field in ("gzip.compressionLevel: unknown compression level 'FASTEST'", "gzip.memoryLevel", "gzip.windowBits",
                  "gzip.contentLength", "gzip.contentType[0]: must be a media type",
                  "gzip.compressionStrategy: unknown compression strategy 'ZIP'",
                  "gzip.disableOnEtagHeader: must be true or false", "gzip.bufferSize", "brotli.quality",
                  "brotli.windowBits", "brotli.encoderMode: unknown encoder mode 'MUSIC'",
                  "brotli.chunkSize: is not supported by twistgw",
                  "httpConnectionManagerSettings.uuidRequestIdConfig: is not supported by twistgw"):
        assert field in text, (field, text)
    assert all("<string>:" in issue for issue in issues)
