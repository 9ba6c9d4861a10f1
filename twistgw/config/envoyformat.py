"""Envoy's access-log format strings (``%REQ(:AUTHORITY)%``,
``%RESPONSE_CODE%``...), compiled once when the configuration loads.

A format is parsed into literal text and *operators*; an operator twistgw
cannot produce faithfully is refused at load with its name and the reason
(:class:`FormatError`), never printed literally nor left empty. What each
operator gives is in docs/gateways.md ("Access logs"). No I/O here: a
request's values come from an :class:`AccessFacts`, which the engine builds
only for a Gateway that logs (``engine/gateway.py``).
"""

from __future__ import annotations

import json
import re
import socket
import time
from typing import Any, Callable, Mapping, Protocol

from twistgw.api.headers import canonical_name, is_token

__all__ = ["AccessFacts", "DEFAULT_FORMAT", "FormatError", "JsonFormat", "TextFormat", "parse_text",
           "parse_json"]


class FormatError(ValueError):
    """A format twistgw refuses; the message names the operator, ``path``
    the key of a ``jsonFormat`` it is in."""

    def __init__(self, message: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.path = path


class AccessFacts(Protocol):
    """What the operators read of one finished request."""

    method: str
    target: str
    protocol: str
    status: int
    duration: float
    start: float
    client: str
    upstream_host: str | None
    upstream: str | None
    route: str | None
    server_name: str | None
    #: the Gateway's ``healthCheck`` answered it
    health_check: bool

    def header(self, canonical: bytes) -> str | None: ...
    def peer(self) -> tuple[str, int]: ...
    def local(self) -> tuple[str, int]: ...


#: An operator: the value for a request (str, int, or None for Envoy's ``-``).
Getter = Callable[[AccessFacts], "str | int | None"]

#: Envoy's default format (``stringFormat: ""`` and a file sink without a
#: format), which twistgw cannot produce (see :data:`_REFUSED`).
DEFAULT_FORMAT = ('[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE%'
                  ' %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION%'
                  ' %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%"'
                  ' "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"\n')

_OPERATOR = re.compile(r"%([A-Z][A-Z0-9_]*)(?:\(([^)]*)\))?(?::([0-9]+))?%")

#: Operators twistgw does not produce, and why.
_BYTES = "twistgw does not count the bytes of each request and response"
_TIMING = "twistgw times each request whole (%DURATION%), not its phases"
_META = "Envoy's filter metadata and state do not exist in twistgw"
_REFUSED = {
    "BYTES_RECEIVED": _BYTES, "BYTES_SENT": _BYTES, "UPSTREAM_WIRE_BYTES_SENT": _BYTES,
    "UPSTREAM_WIRE_BYTES_RECEIVED": _BYTES, "UPSTREAM_HEADER_BYTES_SENT": _BYTES,
    "UPSTREAM_HEADER_BYTES_RECEIVED": _BYTES, "DOWNSTREAM_WIRE_BYTES_SENT": _BYTES,
    "DOWNSTREAM_WIRE_BYTES_RECEIVED": _BYTES, "DOWNSTREAM_HEADER_BYTES_SENT": _BYTES,
    "DOWNSTREAM_HEADER_BYTES_RECEIVED": _BYTES, "REQUEST_HEADERS_BYTES": _BYTES,
    "RESPONSE_HEADERS_BYTES": _BYTES, "RESPONSE_TRAILERS_BYTES": _BYTES,
    "REQUEST_DURATION": _TIMING, "REQUEST_TX_DURATION": _TIMING, "RESPONSE_DURATION": _TIMING,
    "RESPONSE_TX_DURATION": _TIMING, "DOWNSTREAM_HANDSHAKE_DURATION": _TIMING, "COMMON_DURATION": _TIMING,
    "RESP": "response headers are not kept for the access log",
    "TRAILER": "trailers are not forwarded",
    "RESPONSE_FLAGS": "twistgw does not classify answers into Envoy's response flags",
    "RESPONSE_FLAGS_LONG": "twistgw does not classify answers into Envoy's response flags",
    "RESPONSE_CODE_DETAILS": "twistgw does not name Envoy's response code details",
    "CONNECTION_TERMINATION_DETAILS": "twistgw does not name Envoy's termination details",
    "UPSTREAM_TRANSPORT_FAILURE_REASON": "upstream failures are in the gateway's log, not the access log",
    "DYNAMIC_METADATA": _META, "CLUSTER_METADATA": _META, "UPSTREAM_METADATA": _META, "FILTER_STATE": _META,
    "UPSTREAM_FILTER_STATE": _META, "METADATA": _META, "CEL": _META,
    "GRPC_STATUS": "twistgw does not read gRPC status trailers",
    "GRPC_STATUS_NUMBER": "twistgw does not read gRPC status trailers",
    "CONNECTION_ID": "connections have no ids in twistgw", "STREAM_ID": "requests have no ids in twistgw",
    "UPSTREAM_CONNECTION_ID": "connections have no ids in twistgw",
    "UPSTREAM_LOCAL_ADDRESS": "the upstream connection's local address is not kept",
    "UPSTREAM_LOCAL_ADDRESS_WITHOUT_PORT": "the upstream connection's local address is not kept",
    "UPSTREAM_REMOTE_ADDRESS": "use %UPSTREAM_HOST%",
    "UPSTREAM_REQUEST_ATTEMPT_COUNT": "retries are not counted for the access log",
    "ROUTE_NAME": "Envoy's route names (Gloo's generated ones) are not twistgw's",
}
for _name in ("DOWNSTREAM_PEER_SUBJECT", "DOWNSTREAM_PEER_ISSUER", "DOWNSTREAM_PEER_SERIAL", "DOWNSTREAM_PEER_URI_SAN",
              "DOWNSTREAM_PEER_DNS_SAN", "DOWNSTREAM_PEER_FINGERPRINT_256", "DOWNSTREAM_PEER_FINGERPRINT_1",
              "DOWNSTREAM_PEER_CERT", "DOWNSTREAM_LOCAL_SUBJECT", "DOWNSTREAM_LOCAL_URI_SAN",
              "DOWNSTREAM_TLS_VERSION", "DOWNSTREAM_TLS_CIPHER", "DOWNSTREAM_TLS_SESSION_ID",
              "UPSTREAM_PEER_SUBJECT", "UPSTREAM_PEER_ISSUER", "UPSTREAM_TLS_VERSION", "UPSTREAM_TLS_CIPHER"):
    _REFUSED[_name] = "TLS session details are not kept for the access log"

#: ``%REQ(...)%`` names answered from the request line, not a header
_PSEUDO = {":METHOD", ":PATH", ":AUTHORITY", ":SCHEME"}

#: the pseudo-header names a header filter may use (lower case, as Envoy's)
PSEUDO_HEADERS = frozenset(p.lower() for p in _PSEUDO)


def request_value(facts: AccessFacts, name: str) -> str | None:
    """A request header's first value, or a pseudo-header's
    (``:method``, ``:path``, ``:authority``, ``:scheme``); ``name`` in
    upper case. ``X-ENVOY-ORIGINAL-PATH`` is the path the client sent
    (Envoy's header when a route rewrote the path; a client's own is never
    taken for it)."""
    if name == ":METHOD":
        return facts.method
    if name in (":PATH", "X-ENVOY-ORIGINAL-PATH"):
        return facts.target
    if name == ":SCHEME":
        return facts.header(b":scheme")
    if name == ":AUTHORITY":
        return facts.header(b"Host")
    return facts.header(canonical_name(name))


def _req(arg: str | None) -> Getter:
    if not arg:
        raise FormatError("%REQ% needs a header name: %REQ(USER-AGENT)%")
    names = [n.strip().upper() for n in arg.split("?")]
    if len(names) > 2 or not all(names):
        raise FormatError(f"%REQ({arg})%: write one header, or two separated by '?'")
    for n in names:
        if not n.startswith(":") and not is_token(n):
            raise FormatError(f"%REQ({arg})%: {n!r} is not a header name")
        if n.startswith(":") and n not in _PSEUDO:
            raise FormatError(f"%REQ({arg})%: {n} is not a request pseudo-header (twistgw knows"
                              f" {', '.join(sorted(_PSEUDO))})")
    first = names[0]
    if len(names) == 1:
        return lambda f: request_value(f, first)
    second = names[1]
    return lambda f: (request_value(f, first) if request_value(f, first) is not None
                      else request_value(f, second))


_STRFTIME_EXTRA = re.compile(r"%([1-9]?)f|%s")


def _start_time(arg: str | None) -> Getter:
    if not arg:
        def iso(f: AccessFacts) -> str:
            t = f.start
            return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"
        return iso
    fmt = arg

    def custom(f: AccessFacts) -> str:
        t = f.start

        def extra(m: re.Match[str]) -> str:
            if m.group(0) == "%s":
                return str(int(t))
            digits = int(m.group(1) or 9)
            return f"{int((t % 1) * 10 ** 9):09d}"[:digits]
        return time.strftime(_STRFTIME_EXTRA.sub(lambda m: extra(m).replace("%", "%%"), fmt), time.gmtime(t))
    return custom


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _upstream_cluster(f: AccessFacts) -> str | None:
    if not f.upstream:
        return None
    namespace, _, name = f.upstream.partition("/")
    return f"{name}_{namespace}"  # Gloo's cluster name for an Upstream


_HOSTNAME: list[str] = []


def _hostname(f: AccessFacts) -> str:
    if not _HOSTNAME:
        _HOSTNAME.append(socket.gethostname())
    return _HOSTNAME[0]


def _remote(f: AccessFacts) -> str:
    host, port = f.peer()
    return _address(f.client, port if f.client == host else 0)


#: operators without argument: (getter, numeric)
_SIMPLE: Mapping[str, tuple[Getter, bool]] = {
    "PROTOCOL": (lambda f: f.protocol, False),
    "RESPONSE_CODE": (lambda f: f.status, True),
    "DURATION": (lambda f: int(f.duration * 1000), True),
    "UPSTREAM_HOST": (lambda f: f.upstream_host, False),
    "UPSTREAM_CLUSTER": (_upstream_cluster, False),
    "REQUESTED_SERVER_NAME": (lambda f: f.server_name, False),
    "HOSTNAME": (_hostname, False),
    "DOWNSTREAM_REMOTE_ADDRESS": (_remote, False),
    "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT": (lambda f: f.client, False),
    "DOWNSTREAM_DIRECT_REMOTE_ADDRESS": (lambda f: _address(*f.peer()), False),
    "DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT": (lambda f: f.peer()[0], False),
    "DOWNSTREAM_LOCAL_ADDRESS": (lambda f: _address(*f.local()), False),
    "DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT": (lambda f: f.local()[0], False),
    "DOWNSTREAM_LOCAL_PORT": (lambda f: f.local()[1], True),
    "DOWNSTREAM_REMOTE_PORT": (lambda f: f.peer()[1], True),
}

#: every operator twistgw produces (for messages and docs)
SUPPORTED = ("REQ(...)", "START_TIME", *sorted(_SIMPLE))


def _operator(name: str, arg: str | None) -> tuple[Getter, bool]:
    if name == "REQ":
        return _req(arg), False
    if name == "START_TIME":
        return _start_time(arg), False
    if name in _SIMPLE:
        if arg is not None:
            raise FormatError(f"%{name}% takes no argument, got %{name}({arg})%")
        return _SIMPLE[name]
    reason = _REFUSED.get(name)
    if reason is not None:
        raise FormatError(f"%{name}% is not supported by twistgw: {reason}")
    raise FormatError(f"%{name}% is not a command operator twistgw knows (it knows"
                      f" {', '.join('%' + s + '%' for s in SUPPORTED)})")


#: A compiled part: literal text, or (getter, numeric, max length or None).
Part = "str | tuple[Getter, bool, int | None]"


def _parse(text: str) -> list[Any]:
    parts: list[Any] = []
    i = 0
    literal: list[str] = []
    while i < len(text):
        j = text.find("%", i)
        if j < 0:
            literal.append(text[i:])
            break
        literal.append(text[i:j])
        if text.startswith("%%", j):
            literal.append("%")
            i = j + 2
            continue
        m = _OPERATOR.match(text, j)
        if m is None:
            raise FormatError(f"the '%' at character {j + 1} starts no command operator (write %% for a"
                              f" percent sign)")
        getter, numeric = _operator(m.group(1), m.group(2))
        if "".join(literal):
            parts.append("".join(literal))
        literal = []
        parts.append((getter, numeric, int(m.group(3)) if m.group(3) else None))
        i = m.end()
    if literal and "".join(literal):
        parts.append("".join(literal))
    return parts


def _text(value: str | int | None, limit: int | None) -> str:
    if value is None:
        return "-"
    text = value if value.__class__ is str else str(value)
    if limit is not None:
        text = text[:limit]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
                       for c in text)
    return text


class TextFormat:
    """A ``stringFormat``: the line is the format with each operator
    replaced (``-`` for a value that is missing); non-printable characters
    in a value are escaped (``\\x0a``), so a request cannot forge a line.
    As in Envoy, no newline is added: the format ends with one."""

    def __init__(self, text: str) -> None:
        self.source = text
        self._parts = _parse(text)

    def render(self, facts: AccessFacts) -> str:
        return "".join(p if p.__class__ is str else _text(p[0](facts), p[2]) for p in self._parts)


class JsonFormat:
    """A ``jsonFormat``: one JSON object per line, keys in the configured
    order (nested objects allowed). A value that is a single operator is
    typed: a number for numeric operators (``%RESPONSE_CODE%``,
    ``%DURATION%``), ``null`` when missing; any other value is a string
    (``-`` for a missing operator inside it)."""

    def __init__(self, fields: Mapping[str, Any]) -> None:
        self._fields = self._compile(fields, ())

    def _compile(self, fields: Mapping[str, Any], where: tuple[str, ...]) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for key, value in fields.items():
            at = (*where, key)
            if isinstance(value, Mapping):
                out.append((key, ("object", self._compile(value, at))))
            elif isinstance(value, str):
                try:
                    parts = _parse(value)
                except FormatError as exc:
                    raise FormatError(str(exc), at) from None
                if len(parts) == 1 and parts[0].__class__ is not str:
                    out.append((key, ("one", parts[0])))
                else:
                    out.append((key, ("text", parts)))
            else:
                raise FormatError(f"must be a string or an object of them (Envoy's format strings), got"
                                  f" {value!r}", at)
        return out

    def _value(self, fields: list[tuple[str, Any]], facts: AccessFacts) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, (kind, spec) in fields:
            if kind == "object":
                out[key] = self._value(spec, facts)
            elif kind == "one":
                getter, numeric, limit = spec
                value = getter(facts)
                if value is not None and not numeric:
                    value = str(value)[:limit] if limit is not None else str(value)
                out[key] = value
            else:
                out[key] = "".join(p if p.__class__ is str else _text(p[0](facts), p[2]) for p in spec)
        return out

    def render(self, facts: AccessFacts) -> str:
        return json.dumps(self._value(self._fields, facts), ensure_ascii=True) + "\n"


def parse_text(text: str) -> TextFormat:
    """Compile a ``stringFormat`` (raises :class:`FormatError`)."""
    return TextFormat(text)


def parse_json(fields: Mapping[str, Any]) -> JsonFormat:
    """Compile a ``jsonFormat`` (raises :class:`FormatError`; its ``path``
    is the key the problem is in)."""
    return JsonFormat(fields)
