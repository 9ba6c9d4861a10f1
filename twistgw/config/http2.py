"""HTTP/2 as Gloo configures it, both ways (no I/O). See docs/http2.md.

**Towards clients** (applied by :mod:`twistgw.engine.http2`): the limits
of one client connection, and how Gloo writes them (a Gateway's
``httpConnectionManagerSettings``: ``http2ProtocolOptions`` and
``codecType``). Every bound a hostile client could push has a value here,
Envoy's default where Envoy has a safe one; where Envoy's own default is
unbounded (its ``max_concurrent_streams``, 2^31 - 1, and 256 MiB windows),
the value is the one Envoy's edge-proxy guide recommends (100 streams,
64 KiB per stream, 1 MiB per connection), so that one client cannot make
the gateway buffer more than that.

**Towards upstreams** (applied by ``engine/upstream/h2*``): an Upstream's
``useHttp2`` and its HTTP/2 fields (Gloo's ``upstream.proto``:
``initialStreamWindowSize``, ``initialConnectionWindowSize``,
``maxConcurrentStreams``, ``overrideStreamErrorOnInvalidHttpMessage``,
``protocolSelection``), and the rule by which Gloo's Kubernetes discovery
marks a Service port as HTTP/2 (``projects/gloo/pkg/plugins/kubernetes/
serviceconverter/use_http2_annotation_converter.go``): the Service
annotation ``gloo.solo.io/h2_service`` (``"true"`` or ``"false"``) first,
then the port's ``appProtocol`` (``http2``, ``grpc``, ``grpc-web``,
``kubernetes.io/h2c``), then its name starting with ``grpc``, ``h2`` or
``http2``.
"""

from __future__ import annotations

from typing import Any

import attrs

from twistgw.api.fields import FieldReader, Path
from twistgw.api.upstreampolicy import H2_DEFAULT_WINDOW, Http2Settings

__all__ = ["DEFAULT", "H2_ANNOTATION", "H2_APP_PROTOCOLS", "H2_FIELDS", "H2_PORT_PREFIXES", "Http2Options",
           "read_codec_type", "read_http2", "read_http2_options", "read_service_spec", "service_annotations",
           "speaks_http2"]

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


# -- towards upstreams --------------------------------------------------------


#: the Service annotation Gloo's discovery reads
H2_ANNOTATION = "gloo.solo.io/h2_service"
#: port names Gloo's discovery takes for HTTP/2 (a prefix: ``grpc-api`` too)
H2_PORT_PREFIXES = ("grpc", "h2", "http2")
#: ``appProtocol`` values Gloo's discovery takes for HTTP/2 (Istio's names and GEP-1911's)
H2_APP_PROTOCOLS = frozenset({"http2", "grpc", "grpc-web", "kubernetes.io/h2c"})
#: the Upstream fields read here (beside the Upstream's others)
H2_FIELDS = frozenset({"useHttp2", "initialStreamWindowSize", "initialConnectionWindowSize", "maxConcurrentStreams",
                       "overrideStreamErrorOnInvalidHttpMessage", "protocolSelection"})

_MAX_WINDOW = 2_147_483_647
_PROTOCOLS = ("USE_CONFIGURED_PROTOCOL", "USE_DOWNSTREAM_PROTOCOL")


def _uint32(r: FieldReader, value: Any, path: Path, lo: int, hi: int) -> int:
    """A UInt32Value as proto JSON writes it: a number, or digits in a string."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return r.integer(value, path, lo, hi)


def read_http2(r: FieldReader, spec: dict[str, Any], path: Path,
               service_spec_grpc: bool = False) -> Http2Settings | None:
    """The Upstream's HTTP/2 settings (None: HTTP/1.1). ``service_spec_grpc``:
    the Upstream has a gRPC ``serviceSpec``, which Gloo takes for ``useHttp2``."""
    use = service_spec_grpc
    if spec.get("useHttp2") is not None:
        use = r.boolean(spec["useHttp2"], path + ("useHttp2",))
    settings = Http2Settings()
    values: dict[str, Any] = {}
    for key, attr, lo in (("initialStreamWindowSize", "stream_window", H2_DEFAULT_WINDOW),
                          ("initialConnectionWindowSize", "connection_window", H2_DEFAULT_WINDOW),
                          ("maxConcurrentStreams", "max_streams", 1)):
        if spec.get(key) is None:
            continue
        with r.part():
            values[attr] = _uint32(r, spec[key], path + (key,), lo, _MAX_WINDOW)
            if not use:
                r.issue(path + (key,), "applies to HTTP/2 only: set useHttp2: true (Gloo acknowledges it only then)")
    with r.part():
        override = spec.get("overrideStreamErrorOnInvalidHttpMessage")
        if override is not None and r.boolean(override, path + ("overrideStreamErrorOnInvalidHttpMessage",)):
            raise r.fail(path + ("overrideStreamErrorOnInvalidHttpMessage",),
                         "true is not supported by twistgw: an invalid HEADERS frame from the upstream ends its whole"
                         " HTTP/2 connection (Envoy's default, false)")
    with r.part():
        selection = spec.get("protocolSelection")
        if selection is not None:
            if selection not in _PROTOCOLS:
                raise r.fail(path + ("protocolSelection",), f"must be one of {', '.join(_PROTOCOLS)},"
                             f" got {selection!r}")
            values["downstream_protocol"] = selection == "USE_DOWNSTREAM_PROTOCOL"
    if not use:
        return None
    return Http2Settings(**{**{a: getattr(settings, a) for a in ("stream_window", "connection_window",
                                                                   "max_streams", "downstream_protocol")},
                            **values})


def service_annotations(r: FieldReader, data: Any) -> bool | None:
    """A Service's ``metadata.annotations`` that Gloo's discovery reads:
    ``gloo.solo.io/h2_service`` (True, False, or None when absent). Other
    ``gloo.solo.io/`` annotations are refused: twistgw does not read them
    and would otherwise ignore them."""
    meta = data.get("metadata") if isinstance(data, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if annotations is None:
        return None
    path = ("metadata", "annotations")
    annotations = r.mapping(annotations, path)
    found: bool | None = None
    for key, value in annotations.items():
        if not isinstance(key, str) or not key.startswith("gloo.solo.io/"):
            continue  # the cluster's own (kubectl's last-applied-configuration...): informational
        with r.part():
            if key != H2_ANNOTATION:
                raise r.fail(path + (key,), "is not supported by twistgw: of Gloo's discovery annotations only"
                             f" {H2_ANNOTATION} is read; write an Upstream with the settings instead")
            if value not in ("true", "false"):
                raise r.fail(path + (key,), f"must be \"true\" or \"false\", got {value!r}")
            found = value == "true"
    return found


def speaks_http2(annotation: bool | None, name: str, app_protocol: str | None) -> bool:
    """Gloo discovery's rule for one Service port (see the module)."""
    if annotation is not None:
        return annotation
    if app_protocol is not None and app_protocol in H2_APP_PROTOCOLS:
        return True
    return name.startswith(H2_PORT_PREFIXES)


_SERVICE_SPEC_REFUSED = {
    "grpcJsonTranscoder": "gRPC-JSON transcoding is not supported by twistgw: gRPC clients (HTTP/2) and grpc-web"
                          " clients (HTTP/1.1) reach the service through the gateway without it",
    "rest": "REST function routing (transformations) is not supported by twistgw",
    "graphql": "GraphQL is out of twistgw's scope",
}


def read_service_spec(r: FieldReader, value: Any, path: Path) -> bool:
    """``serviceSpec`` of a ``kube`` or ``static`` Upstream: ``grpc`` (the
    service is gRPC: HTTP/2, as Gloo takes it) without its descriptors,
    which only Gloo's function routing and transcoding read. True for ``grpc``."""
    spec = r.mapping(value, path)
    grpc = False
    for key in spec:
        with r.part():
            if key in _SERVICE_SPEC_REFUSED:
                raise r.fail(path + (key,), f"is not supported: {_SERVICE_SPEC_REFUSED[key]}")
            if key != "grpc":
                raise r.fail(path + (key,), "unknown field (expected one of: grpc)")
            g = r.mapping(spec["grpc"] or {}, path + ("grpc",), {"descriptors", "grpcServices"})
            for field in ("descriptors", "grpcServices"):
                if g.get(field):
                    r.issue(path + ("grpc", field), "is not supported by twistgw: descriptors serve Gloo's function"
                            " routing and transcoding; the gateway proxies gRPC as it is (leave it out)")
            grpc = True
    return grpc
