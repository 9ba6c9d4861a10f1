"""HTTP/2 header lists at the edge, both ways: one request model inside.

A request's header list, validated here in one pass with the rules ``h2``
applies (pseudo-header fields, connection-specific fields, characters; RFC
9113 §8.2, §8.3; ``h2``'s own validation loops over every byte of every
value in Python, which made a 1 KB JWT cost more than the whole route;
``tests/unit/test_http2_fields.py`` checks the two agree on generated header
lists), its ``cookie`` crumbs joined with ``"; "`` (§8.2.3), becomes what an
HTTP/1.1 request gives the pipeline: the method, the target (``:path``), and twistgw's
:class:`~twistgw.api.headers.Headers` with names in canonical case and
``:authority`` as ``Host``, under the same limits as an HTTP/1.1 head
(:mod:`twistgw.engine.framing`). A response head's lines
(``b"Name: value\\r\\n"``, as the seam carries them) become an ``h2``
header list: ``:status`` first, names in lower case, connection-specific
fields dropped (§8.2.2).
"""

from __future__ import annotations

from collections.abc import Iterable

from twistgw.api.headers import Headers, InvalidHeaderName, canonical_name
from twistgw.engine import framing

__all__ = ["Malformed", "RequestFields", "TooLarge", "request_fields", "response_fields", "response_trailers",
           "trailer_fields"]

#: RFC 9113 §8.2.2: never in an HTTP/2 message (and what HTTP/1.1 framing owns)
CONNECTION_SPECIFIC = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                                 b"upgrade", b"te", b"http2-settings", b"trailer"})

_MAX_HEADERS = framing.MAX_HEADERS
_MAX_HEAD_BYTES = framing.MAX_HEAD_BYTES
_MAX_TARGET = framing.MAX_TARGET

#: ``:status`` values, made once
_STATUS: dict[int, bytes] = {}
#: response header names as the seam carries them -> lower case (bounded)
_LOWER: dict[bytes, bytes] = {}


class Malformed(Exception):
    """A malformed request (RFC 9113 §8.1.1): refused with PROTOCOL_ERROR."""


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

    def copy(self) -> "RequestFields":
        """The same head with headers of its own (the pipeline changes a request's headers in place)."""
        return RequestFields(self.method, self.target, Headers.adopt({k: v[:] for k, v in self.headers.raw.items()}),
                             self.content_length, self.expect_continue, self.content_type)


#: RFC 9113 §8.2.1: the bytes a field name may hold (no upper case, no
#: controls, no space, nothing past 0x7e, no ``:``)
_NAME_BYTES = bytes(c for c in range(0x21, 0x7F) if not 0x41 <= c <= 0x5A and c != 0x3A)
#: h2's connection-specific fields (``te`` apart: ``trailers`` is allowed)
_CONNECTION = frozenset({b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade"})
_PSEUDO = frozenset({b":method", b":scheme", b":authority", b":path", b":status", b":protocol"})
#: lower-case field name -> canonical name, for names already found valid (bounded)
_VALID: dict[bytes, bytes] = {}


def _field_name(name: bytes) -> bytes:
    """The canonical name of a valid regular field name, or :class:`Malformed`."""
    canonical = _VALID.get(name)
    if canonical is not None:
        return canonical
    if not name or name.translate(None, _NAME_BYTES):
        raise Malformed(f"field name {name!r} (RFC 9113 §8.2.1)")
    if name in _CONNECTION:
        raise Malformed(f"connection-specific field {name!r} (RFC 9113 §8.2.2)")
    try:
        canonical = canonical_name(name)
    except InvalidHeaderName:
        raise Malformed(f"field name {name!r}") from None
    if len(_VALID) < 10_000:
        _VALID[name] = canonical
    return canonical


def _check_value(name: bytes, value: bytes) -> None:
    """RFC 9113 §8.2.1: no NUL, CR or LF; no space or tab at either end."""
    if value and (b"\0" in value or b"\n" in value or b"\r" in value
                  or value[0] in (0x20, 0x09) or value[-1] in (0x20, 0x09)):
        raise Malformed(f"the value of {name!r} (RFC 9113 §8.2.1)")


def _check_pseudo(seen: dict[bytes, bytes]) -> None:
    """RFC 9113 §8.3.1 (and RFC 8441 for ``:protocol``), as h2 checks a request."""
    method = seen.get(b":method")
    if method is None:
        raise Malformed("no :method")
    if b":status" in seen:
        raise Malformed(":status in a request")
    if method == b"CONNECT" and b":protocol" not in seen:
        if b":scheme" in seen or b":path" in seen:
            raise Malformed("an ordinary CONNECT with :scheme or :path")
        return
    if b":protocol" in seen and method != b"CONNECT":
        raise Malformed(":protocol without CONNECT")
    if b":scheme" not in seen or b":path" not in seen:
        raise Malformed("no :scheme or no :path")
    if not seen[b":path"]:
        raise Malformed("an empty :path")


def request_fields(fields: Iterable[tuple[bytes, bytes]]) -> RequestFields:
    """The request head of a header list, validated in one pass as ``h2``
    validates one (RFC 9113 §8.2, §8.3: names, values, pseudo-header fields,
    connection-specific fields, ``te``, ``:authority`` against ``Host``), its
    ``cookie`` crumbs joined (§8.2.3). Raises :class:`Malformed`, or
    :class:`TooLarge` past the HTTP/1.1 head limits (100 fields, 16 KiB; an
    8 KiB target)."""
    raw: dict[bytes, list[bytes]] = {}
    seen: dict[bytes, bytes] = {}
    regular = False
    count = size = 0
    cookies: list[bytes] | None = None
    for name, value in fields:
        if name[:1] == b":":
            if regular:
                raise Malformed(f"{name!r} after a regular field")
            if name in seen or name not in _PSEUDO:
                raise Malformed(f"pseudo-header field {name!r} repeated or unknown")
            _check_value(name, value)
            seen[name] = value
            continue
        regular = True
        count += 1
        size += len(name) + len(value) + 4
        cname = _field_name(name)
        _check_value(name, value)
        if name == b"te" and value.lower() != b"trailers":
            raise Malformed("te other than trailers (RFC 9113 §8.2.2)")
        if cname == b"Cookie":
            if cookies is None:
                cookies = [value]
            else:
                cookies.append(value)
            continue
        values = raw.get(cname)
        if values is None:
            raw[cname] = [value]
        else:
            if cname == b"Host":
                raise Malformed("two Host fields")
            values.append(value)
    _check_pseudo(seen)
    authority = seen.get(b":authority")
    host = raw.get(b"Host")
    if authority is None and host is None:
        raise Malformed("neither :authority nor Host")
    if authority is not None and host is not None and host[0] != authority:
        raise Malformed(":authority and Host differ (RFC 9113 §8.3.1)")
    if count > _MAX_HEADERS or size > _MAX_HEAD_BYTES:
        raise TooLarge(431)
    target = seen.get(b":path", b"")
    if len(target) > _MAX_TARGET:
        raise TooLarge(414)
    if authority is not None:
        raw[b"Host"] = [authority]
    if cookies is not None:
        raw[b"Cookie"] = [b"; ".join(cookies)]
    cl = raw.get(b"Content-Length")
    expect = raw.get(b"Expect")
    ct = raw.get(b"Content-Type")
    return RequestFields(seen.get(b":method", b""), target, Headers.adopt(raw), cl[0] if cl else None,
                         expect is not None and expect[0].lower() == b"100-continue", ct[0] if ct else None)


def trailer_fields(fields: Iterable[tuple[bytes, bytes]]) -> tuple[tuple[bytes, bytes], ...]:
    """A request's trailers, validated as ``h2`` validates them (no
    pseudo-header fields; names, values, connection-specific fields)."""
    out = []
    for name, value in fields:
        if name[:1] == b":":
            raise Malformed(f"pseudo-header field {name!r} in trailers")
        _field_name(name)
        _check_value(name, value)
        if name == b"te" and value.lower() != b"trailers":
            raise Malformed("te other than trailers")
        out.append((name, value))
    return tuple(out)


def response_trailers(fields: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Trailers sent to the client: connection-specific fields left out."""
    return [(name, value) for name, value in fields if name.lower() not in CONNECTION_SPECIFIC]


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
