"""HTTP/2 to upstreams, as Gloo configures it: an Upstream's ``useHttp2``
and its HTTP/2 fields (Gloo's ``upstream.proto``: ``initialStreamWindowSize``,
``initialConnectionWindowSize``, ``maxConcurrentStreams``,
``overrideStreamErrorOnInvalidHttpMessage``, ``protocolSelection``), and
the rule by which Gloo's Kubernetes discovery marks a Service port as
HTTP/2 (``projects/gloo/pkg/plugins/kubernetes/serviceconverter/
use_http2_annotation_converter.go``): the Service annotation
``gloo.solo.io/h2_service`` (``"true"`` or ``"false"``) first, then the
port's ``appProtocol`` (``http2``, ``grpc``, ``grpc-web``,
``kubernetes.io/h2c``), then its name starting with ``grpc``, ``h2`` or
``http2``.
"""

from __future__ import annotations

from typing import Any

from twistgw.api.fields import FieldReader, Path
from twistgw.api.upstreampolicy import H2_DEFAULT_WINDOW, Http2Settings

__all__ = ["H2_ANNOTATION", "H2_APP_PROTOCOLS", "H2_FIELDS", "H2_PORT_PREFIXES", "read_http2", "read_service_spec",
           "service_annotations", "speaks_http2"]

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
