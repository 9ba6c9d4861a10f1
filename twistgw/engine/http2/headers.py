"""HTTP/2 header lists at the edge, both ways: one request model inside.

A request's header list (``h2`` has validated it: pseudo-header fields,
connection-specific fields, characters; RFC 9113 §8.2, §8.3; and joined its
``cookie`` crumbs with ``"; "``, §8.2.3) becomes what an HTTP/1.1 request
gives the pipeline: the method, the target (``:path``), and twistgw's
:class:`~twistgw.api.headers.Headers` with names in canonical case and
``:authority`` as ``Host``, under the same limits as an HTTP/1.1 head
(:mod:`twistgw.engine.framing`). A response head's lines
(``b"Name: value\\r\\n"``, as the seam carries them) become an ``h2``
header list: ``:status`` first, names in lower case, connection-specific
fields dropped (§8.2.2).
"""

from __future__ import annotations

from collections.abc import Iterable

from twistgw.api.headers import Headers, InvalidHeaderName, cached_canonical_name, canonical_name
from twistgw.engine import framing

__all__ = ["Malformed", "RequestFields", "TooLarge", "response_fields", "request_fields", "trailer_fields"]

#: RFC 9113 §8.2.2: never in an HTTP/2 message (and what HTTP/1.1 framing owns)
CONNECTION_SPECIFIC = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                                 b"upgrade", b"te", b"http2-settings", b"trailer"})

_MAX_HEADERS = framing.MAX_HEADERS
_MAX_HEAD_BYTES = framing.MAX_HEAD_BYTES
_MAX_TARGET = framing.MAX_TARGET
_known = cached_canonical_name

#: ``:status`` values, made once
_STATUS: dict[int, bytes] = {}
#: response header names as the seam carries them -> lower case (bounded)
_LOWER: dict[bytes, bytes] = {}


class Malformed(Exception):
    """A request the stream refuses (RST_STREAM PROTOCOL_ERROR)."""


class TooLarge(Exception):
    """A request head over the engine's limits: answered ``status`` (414, 431)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class RequestFields:
    """A request head as the engine needs it."""

    __slots__ = ("method", "target", "headers", "content_length", "expect_continue", "content_type")

    def __init__(self, method: bytes, target: bytes, headers: Headers, content_length: bytes | None,
                 expect_continue: bool, content_type: bytes | None) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.content_length = content_length
        self.expect_continue = expect_continue
        self.content_type = content_type


def request_fields(fields: Iterable[tuple[bytes, bytes]]) -> RequestFields:
    """The request head of a validated header list. Raises :class:`TooLarge`
    (past the HTTP/1.1 head limits: 100 fields, 16 KiB; an 8 KiB target)
    or :class:`Malformed` (a name twistgw cannot carry)."""
    raw: dict[bytes, list[bytes]] = {}
    method = target = authority = b""
    count = size = 0
    for name, value in fields:
        if name[:1] == b":":
            if name == b":method":
                method = value
            elif name == b":path":
                target = value
            elif name == b":authority":
                authority = value
            continue  # :scheme: the connection's own scheme is what the gateway states
        count += 1
        size += len(name) + len(value) + 4
        cname = _known(name)
        if cname is None:
            try:
                cname = canonical_name(name)
            except InvalidHeaderName:
                raise Malformed(f"header name {name!r}") from None
        values = raw.get(cname)
        if values is None:
            raw[cname] = [value]
        else:
            values.append(value)
    if count > _MAX_HEADERS or size > _MAX_HEAD_BYTES:
        raise TooLarge(431)
    if len(target) > _MAX_TARGET:
        raise TooLarge(414)
    if authority:
        raw[b"Host"] = [authority]  # h2 refused a Host that differs (RFC 9113 §8.3.1)
    cl = raw.get(b"Content-Length")
    expect = raw.get(b"Expect")
    ct = raw.get(b"Content-Type")
    return RequestFields(method, target, Headers.adopt(raw), cl[0] if cl else None,
                         expect is not None and expect[0].lower() == b"100-continue", ct[0] if ct else None)


def trailer_fields(fields: Iterable[tuple[bytes, bytes]]) -> tuple[tuple[bytes, bytes], ...]:
    """A request's trailers (validated by h2: no pseudo-header fields)."""
    return tuple((name, value) for name, value in fields if name not in CONNECTION_SPECIFIC)


def _lower(name: bytes) -> bytes:
    low = _LOWER.get(name)
    if low is None:
        low = name.lower()
        if len(_LOWER) < 10_000:
            _LOWER[name] = low
    return low


def response_fields(status: int, lines: list[bytes], length: bytes | None) -> list[tuple[bytes, bytes]]:
    """The header list of a response head: ``:status``, each line's field
    (lower-case name), ``content-length`` when given."""
    code = _STATUS.get(status)
    if code is None:
        code = _STATUS[status] = b"%d" % status
    out = [(b":status", code)]
    add = out.append
    for line in lines:
        colon = line.find(b":")
        name = _lower(line[:colon])
        if name in CONNECTION_SPECIFIC:
            continue
        add((name, line[colon + 1:].strip()))
    if length is not None:
        add((b"content-length", length))
    return out
