"""A Gateway's ``options.accessLoggingService``: Envoy access logs written
to files, each line in a ``stringFormat`` or a ``jsonFormat`` of Envoy's
command operators, optionally filtered (Gloo's ``als.proto``).

::

    spec:
      options:
        accessLoggingService:
          accessLog:
          - fileSink:
              path: /var/log/twistgw/access.json
              jsonFormat: {method: '%REQ(:METHOD)%', status: '%RESPONSE_CODE%'}
            filter:
              statusCodeFilter: {comparison: {op: GE, value: {defaultValue: 400}}}

Everything is compiled here, when the configuration loads (an unsupported
operator or filter is an error naming it); the files are opened by the
runtime (``runtime/accessfiles.py``). See docs/gateways.md.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs

from twistgw.api.fields import FieldReader, Path
from twistgw.api.headers import is_token
from twistgw.config.envoyformat import (PSEUDO_HEADERS, AccessFacts, FormatError, JsonFormat, TextFormat, parse_json,
                                      parse_text, request_value)
from twistgw.regex import SafeRegex, UnsafePattern

__all__ = ["AccessLogSink", "read_listener_options"]

#: Gloo's ListenerOptions other than accessLoggingService, and why each is refused
_LISTENER_REFUSED = {
    "extensions": "Gloo Enterprise extensions are not supported",
    "perConnectionBufferLimitBytes": "buffers are bounded by twistgw's own limits, not per listener",
    "socketOptions": "socket options are not supported",
    "proxyProtocol": "the PROXY protocol is spec.useProxyProto",
    "connectionBalanceConfig": "connections are balanced by the kernel (--workers)",
    "listenerAccessLoggingService": "listener (connection) access logs are not supported; use"
                                    " accessLoggingService (one line per request)",
    "tcpStats": "TCP statistics are not collected",
}
_SINK_REFUSED = {
    "grpcService": "access logs are written to files only; an Envoy gRPC access-log service is not supported",
    "openTelemetryService": "access logs are written to files only; OpenTelemetry export is not supported",
}
_FILTER_REFUSED = {
    "runtimeFilter": "twistgw has no runtime layer to sample by",
    "traceableFilter": "twistgw does not trace requests",
    "responseFlagFilter": "twistgw does not classify answers into Envoy's response flags",
    "grpcStatusFilter": "twistgw does not read gRPC status trailers",
    "extensionFilter": "filter extensions are not supported",
}
_FILTERS = ("statusCodeFilter", "durationFilter", "notHealthCheckFilter", "headerFilter", "andFilter", "orFilter")
_OPS: dict[str, Callable[[int, int], bool]] = {"EQ": lambda a, b: a == b, "GE": lambda a, b: a >= b,
                                               "LE": lambda a, b: a <= b}
_MATCHES = ("exactMatch", "prefixMatch", "suffixMatch", "containsMatch", "safeRegexMatch", "presentMatch")

#: a compiled filter: does this request get a line?
Filter = Callable[[AccessFacts], bool]


@attrs.frozen
class AccessLogSink:
    """One ``accessLog`` entry: lines of ``format`` appended to ``path``,
    for the requests ``admits`` (None: every request)."""

    path: str
    format: TextFormat | JsonFormat = attrs.field(eq=False)
    admits: Filter | None = attrs.field(default=None, eq=False)


def read_listener_options(r: FieldReader, value: Any, path: Path) -> tuple[AccessLogSink, ...]:
    """A Gateway's ``spec.options``: its access-log sinks."""
    opts = r.mapping(value, path, refused=_LISTENER_REFUSED, names=("accessLoggingService",))
    for key in opts:
        if key != "accessLoggingService":
            r.issue(path + (key,), "is not a listener option twistgw knows (it applies accessLoggingService)")
    if "accessLoggingService" not in opts:
        return ()
    apath = path + ("accessLoggingService",)
    als = r.mapping(opts["accessLoggingService"], apath, {"accessLog"})
    sinks = []
    for i, entry in enumerate(r.sequence(als.get("accessLog") or [], apath + ("accessLog",))):
        with r.part():
            sinks.append(_read_sink(r, entry, apath + ("accessLog", i)))
    return tuple(sinks)


def _read_sink(r: FieldReader, value: Any, path: Path) -> AccessLogSink:
    count = r.count()
    m = r.mapping(value, path, {"fileSink", "filter"}, refused=_SINK_REFUSED)
    if "fileSink" not in m:
        if r.count() > count:
            raise r.invalid()
        raise r.fail(path, "needs a fileSink (the only access-log destination twistgw writes)")
    admits = None
    with r.part():
        if "filter" in m:
            admits = _read_filter(r, m["filter"], path + ("filter",))
    fpath = path + ("fileSink",)
    sink = r.mapping(m["fileSink"], fpath, {"path", "stringFormat", "jsonFormat"}, required=("path",))
    file = r.string(sink["path"], fpath + ("path",))
    if not file.startswith("/"):
        raise r.fail(fpath + ("path",), f"must be an absolute path (as Envoy's), got {file!r}")
    if "stringFormat" in sink and "jsonFormat" in sink:
        raise r.fail(fpath, "set stringFormat or jsonFormat, not both")
    fmt: TextFormat | JsonFormat
    if "jsonFormat" in sink:
        jpath = fpath + ("jsonFormat",)
        fields = r.mapping(sink["jsonFormat"], jpath)
        if not fields:
            raise r.fail(jpath, "must name at least one field")
        try:
            fmt = parse_json(fields)
        except FormatError as exc:
            raise r.fail(jpath + exc.path, str(exc)) from None
    else:
        spath = fpath + ("stringFormat",)
        text = r.string(sink.get("stringFormat", ""), spath, nonempty=False)
        if not text:
            raise r.fail(spath if "stringFormat" in sink else fpath,
                         "Envoy's default format (an empty or absent stringFormat) is not supported by twistgw:"
                         " it has %BYTES_RECEIVED%, %BYTES_SENT%, %RESPONSE_FLAGS% and"
                         " %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%, which twistgw does not produce; write a"
                         " stringFormat or jsonFormat of the operators it does (docs/gateways.md)")
        try:
            fmt = parse_text(text)
        except FormatError as exc:
            raise r.fail(spath, str(exc)) from None
    return AccessLogSink(file, fmt, admits)


def _read_filter(r: FieldReader, value: Any, path: Path) -> Filter:
    m = r.mapping(value, path)
    for key in m:
        if key in _FILTER_REFUSED:
            raise r.fail(path + (key,), f"is not supported by twistgw: {_FILTER_REFUSED[key]}")
    m = r.mapping(m, path, _FILTERS)
    if len(m) != 1:
        raise r.fail(path, f"must set exactly one of {', '.join(_FILTERS)}")
    (kind, spec), = m.items()
    at = path + (kind,)
    if kind == "statusCodeFilter":
        return _comparison(r, spec, at, lambda f: f.status)
    if kind == "durationFilter":
        return _comparison(r, spec, at, lambda f: int(f.duration * 1000))
    if kind == "notHealthCheckFilter":
        r.mapping(spec or {}, at, ())
        # not the requests the Gateway's healthCheck answered
        return lambda f: not f.health_check
    if kind == "headerFilter":
        return _header(r, spec, at)
    fm = r.mapping(spec, at, {"filters"}, required=("filters",))
    subs = []
    for i, sub in enumerate(r.sequence(fm["filters"], at + ("filters",), nonempty=True)):
        with r.part():
            subs.append(_read_filter(r, sub, at + ("filters", i)))
    every = tuple(subs)
    if kind == "andFilter":
        return lambda f: all(s(f) for s in every)
    return lambda f: any(s(f) for s in every)


def _comparison(r: FieldReader, value: Any, path: Path, measure: Callable[[AccessFacts], int]) -> Filter:
    m = r.mapping(value, path, {"comparison"}, required=("comparison",))
    cpath = path + ("comparison",)
    c = r.mapping(m["comparison"], cpath, {"op", "value"}, required=("value",))
    op = _OPS[r.choice(c.get("op", "EQ"), cpath + ("op",), _OPS, "op")]
    vpath = cpath + ("value",)
    v = r.mapping(c["value"], vpath, {"defaultValue", "runtimeKey"})
    with r.part():
        if "runtimeKey" in v:
            r.string(v["runtimeKey"], vpath + ("runtimeKey",))  # no runtime: the default value applies
    threshold = r.integer(v.get("defaultValue", 0), vpath + ("defaultValue",), 0, 2**32 - 1)
    return lambda f: op(measure(f), threshold)


def _header(r: FieldReader, value: Any, path: Path) -> Filter:
    m = r.mapping(value, path, {"header"}, required=("header",))
    hpath = path + ("header",)
    h = r.mapping(m["header"], hpath, {"name", "invertMatch", *_MATCHES}, required=("name",))
    name = r.string(h["name"], hpath + ("name",)).lower()
    if not name.startswith(":") and not is_token(name):
        raise r.fail(hpath + ("name",), f"{name!r} is not a header name")
    if name.startswith(":") and name not in PSEUDO_HEADERS:
        raise r.fail(hpath + ("name",), f"{name} is not a request pseudo-header (twistgw knows"
                     f" {', '.join(sorted(PSEUDO_HEADERS))})")
    invert = r.boolean(h.get("invertMatch", False), hpath + ("invertMatch",))
    given = [k for k in _MATCHES if k in h]
    if len(given) > 1:
        raise r.fail(hpath, f"set one of {', '.join(_MATCHES)}, not {' and '.join(given)}")
    key = name.upper()
    test: Callable[[str], bool]
    if not given:
        test = lambda v: True  # noqa: E731  # Envoy: no match given means the header is present
    else:
        kind = given[0]
        kpath = hpath + (kind,)
        if kind == "presentMatch":
            present = r.boolean(h[kind], kpath)
            if not present:
                return lambda f: (request_value(f, key) is None) != invert
            test = lambda v: True  # noqa: E731
        elif kind == "safeRegexMatch":
            rm = r.mapping(h[kind], kpath, {"regex"}, required=("regex",))
            try:
                regex = SafeRegex(r.string(rm["regex"], kpath + ("regex",)))
            except UnsafePattern as exc:
                raise r.fail(kpath + ("regex",), f"{exc} (RE2 syntax, as in Envoy)") from None
            test = lambda v: bool(regex.fullmatch(v))  # noqa: E731
        else:
            text = r.string(h[kind], kpath, nonempty=False)
            test = {"exactMatch": lambda v: v == text, "prefixMatch": lambda v: v.startswith(text),
                    "suffixMatch": lambda v: v.endswith(text), "containsMatch": lambda v: text in v}[kind]

    def header_filter(f: AccessFacts) -> bool:
        v = request_value(f, key)
        return (v is not None and test(v)) != invert

    return header_filter
