"""HTTP/2 towards clients: the limits of one client connection, and how
Gloo writes them (a Gateway's ``httpConnectionManagerSettings``:
``http2ProtocolOptions`` and ``codecType``). No I/O; the engine
(:mod:`twistgw.engine.http2`) applies them. See docs/http2.md.

Every bound a hostile client could push has a value here, Envoy's default
where Envoy has a safe one; where Envoy's own default is unbounded (its
``max_concurrent_streams``, 2^31 - 1, and 256 MiB windows), the value is
the one Envoy's edge-proxy guide recommends (100 streams, 64 KiB per
stream, 1 MiB per connection), so that one client cannot make the gateway
buffer more than that.
"""

from __future__ import annotations

from typing import Any

import attrs

from twistgw.api.fields import FieldReader, Path

__all__ = ["DEFAULT", "Http2Options", "read_codec_type", "read_http2_options"]

#: RFC 9113 §6.9.2: a window may not exceed 2^31 - 1
MAX_WINDOW = 2**31 - 1
#: the HTTP/2 initial window (RFC 9113 §6.9.2), Gloo's minimum
MIN_WINDOW = 65535


@attrs.frozen
class Http2Options:
    """The limits of one HTTP/2 client connection.

    :ivar max_concurrent_streams: ``SETTINGS_MAX_CONCURRENT_STREAMS`` (Gloo's
        ``maxConcurrentStreams``); a client that opens more gets a GOAWAY
        (RFC 9113 §5.1.2, §5.4.1).
    :ivar initial_stream_window: ``SETTINGS_INITIAL_WINDOW_SIZE`` (Gloo's
        ``initialStreamWindowSize``): request-body bytes a client may send
        on one stream before the gateway hands the window back, which it
        does only as the upstream takes them.
    :ivar initial_connection_window: the connection's window (Gloo's
        ``initialConnectionWindowSize``), over all streams.
    :ivar max_frame_size: ``SETTINGS_MAX_FRAME_SIZE``; a longer frame is a
        connection error (FRAME_SIZE_ERROR) as soon as its header arrives.
    :ivar max_header_list: the most bytes of a decoded header list
        (``SETTINGS_MAX_HEADER_LIST_SIZE``, RFC 9113 §6.5.2 counting) and of
        an encoded header block (HEADERS + CONTINUATION) the gateway reads;
        past it the connection ends (ENHANCE_YOUR_CALM): HPACK bombs and the
        CONTINUATION flood. Smaller lists over the engine's request-head
        limit (16 KiB, 100 fields, as HTTP/1.1) are answered 431.
    :ivar premature_reset_count: Envoy's ``premature_reset_total_stream_count``
        (CVE-2023-44487): once this many streams closed, or half of it were
        reset by the client early, a connection where at least half the
        streams were reset by the client within ``premature_reset_seconds``
        of opening (before any response head) is closed.
    :ivar premature_reset_seconds: Envoy's ``premature_reset_min_stream_lifetime_seconds``.
    :ivar max_control_frames: Envoy's ``max_outbound_control_frames``: PING
        and SETTINGS acknowledgements and RST_STREAM frames queued for a
        client that does not read them (ping and settings floods).
    :ivar max_empty_frames: Envoy's
        ``max_consecutive_inbound_frames_with_empty_payload``: DATA,
        HEADERS or CONTINUATION frames without payload and without
        END_STREAM, one after the other.
    :ivar priority_frames_per_stream: Envoy's ``max_inbound_priority_frames_per_stream``.
    :ivar window_updates_per_data_frame: Envoy's
        ``max_inbound_window_update_frames_per_data_frame_sent``.
    :ivar stream_error_on_invalid: Gloo's
        ``overrideStreamErrorOnInvalidHttpMessage``: a malformed request
        resets its stream only (RST_STREAM PROTOCOL_ERROR, RFC 9113 §8.1.1);
        default False, Envoy's: the connection ends (GOAWAY PROTOCOL_ERROR).
    """

    max_concurrent_streams: int = 100
    initial_stream_window: int = MIN_WINDOW
    initial_connection_window: int = 1024 * 1024
    max_frame_size: int = 16384
    max_header_list: int = 64 * 1024
    premature_reset_count: int = 500
    premature_reset_seconds: float = 1.0
    max_control_frames: int = 1000
    max_empty_frames: int = 1
    priority_frames_per_stream: int = 100
    window_updates_per_data_frame: int = 10
    stream_error_on_invalid: bool = False


#: the limits of a listener that says nothing (``--listen``, a Gateway without ``http2ProtocolOptions``)
DEFAULT = Http2Options()

_FIELDS = ("maxConcurrentStreams", "initialStreamWindowSize", "initialConnectionWindowSize",
           "overrideStreamErrorOnInvalidHttpMessage")


def read_http2_options(r: FieldReader, value: Any, path: Path) -> Http2Options:
    """``httpConnectionManagerSettings.http2ProtocolOptions`` (Gloo's
    ``protocol.options.gloo.solo.io.Http2ProtocolOptions``), with Gloo's
    ranges."""
    m = r.mapping(value, path, _FIELDS)
    out: dict[str, Any] = {}
    with r.part():
        if "maxConcurrentStreams" in m:
            out["max_concurrent_streams"] = r.integer(m["maxConcurrentStreams"], path + ("maxConcurrentStreams",),
                                                      1, MAX_WINDOW)
    for field, attr in (("initialStreamWindowSize", "initial_stream_window"),
                        ("initialConnectionWindowSize", "initial_connection_window")):
        with r.part():
            if field in m:
                out[attr] = r.integer(m[field], path + (field,), MIN_WINDOW, MAX_WINDOW)
    with r.part():
        field = "overrideStreamErrorOnInvalidHttpMessage"
        if field in m:
            out["stream_error_on_invalid"] = r.boolean(m[field], path + (field,))
    return Http2Options(**out)


#: Gloo's ``codecType`` values twistgw serves
_CODECS = ("AUTO", "HTTP1")


def read_codec_type(r: FieldReader, value: Any, path: Path) -> bool:
    """``httpConnectionManagerSettings.codecType``: True for ``AUTO`` (HTTP/2
    by ALPN on TLS and by its preface on plain connections, beside
    HTTP/1.1), False for ``HTTP1`` (HTTP/1.1 only). ``HTTP2`` (HTTP/2
    only) is refused with the reason."""
    if value == "HTTP2":
        raise r.fail(path, "is not supported by twistgw: a listener serves HTTP/1.1 beside HTTP/2 (AUTO) or"
                     " HTTP/1.1 only (HTTP1), never HTTP/2 only")
    return r.choice(value, path, _CODECS) == "AUTO"
