"""HTTP/1 framing, both directions, in one place: the limits, status lines,
the gateway's canned answers, chunk encoding, and the request head sent
upstream. Both sides of the engine (the client connection and the upstream
connection) frame with these; nothing else writes HTTP/1 syntax.

What is decided where (keep-alive, which framing a response gets) is in
:mod:`twistgw.engine.exchange`; see ``docs/engine.md`` for the rules.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Iterable

from twistgw.api.headers import Headers

__all__ = ["BAD_REQUEST", "BODY_BUFFER_LIMIT", "CHUNK", "CLOSE_GRACE", "CLOSE_LINE", "CONTINUE", "HTTP10", "HTTP11",
           "LAST_CHUNK", "MAX_HEADERS", "MAX_HEAD_BYTES", "MAX_PIPELINE", "MAX_RESPONSE_HEAD", "MAX_TARGET",
           "NOT_IMPLEMENTED", "NO_BODY_STATUS", "REQUEST_TIMEOUT", "TOO_LARGE", "URI_TOO_LONG", "canned",
           "connection_tokens", "last_chunk", "request_head", "status_line"]

# -- limits -------------------------------------------------------------------------

#: The request target's limit (414 past it), as nginx's default buffer.
MAX_TARGET = 8192
#: The header block's limit in bytes, names and values (431 past it).
MAX_HEAD_BYTES = 16384
#: Header lines per request (431 past it; Envoy's default is 100 too).
MAX_HEADERS = 100
#: Requests parsed but not answered yet on one connection: reading stops at
#: the first queued one; this bounds what one read can queue.
MAX_PIPELINE = 100
#: An upstream response head larger than this is a 502 (Envoy: 60 KiB).
MAX_RESPONSE_HEAD = 64 * 1024
#: How much of a request body (or of the bytes after an upgrade request) is
#: buffered before the upstream connection takes it; past it the client is
#: paused.
BODY_BUFFER_LIMIT = 64 * 1024

#: Seconds a closing TLS connection waits for the client's close_notify
#: once our bytes are out, then it is aborted (Envoy's
#: ``delayed_close_timeout`` default is 1 s).
CLOSE_GRACE = 1.0

# -- syntax -------------------------------------------------------------------------

HTTP11 = b"HTTP/1.1"
HTTP10 = b"HTTP/1.0"
CLOSE_LINE = b"Connection: close\r\n"
#: ``CHUNK % (len(data), data)``: one chunk (a format, not a function: no
#: Python call per chunk on the relay path).
CHUNK = b"%x\r\n%s\r\n"
LAST_CHUNK = b"0\r\n\r\n"


def last_chunk(trailers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The last chunk with trailer fields (RFC 9112 §7.1.2); names and
    values as ``core.headers.trailer_pairs`` left them (no CR, LF or NUL:
    both parsers refuse those)."""
    return b"0\r\n" + b"".join(b"%s: %s\r\n" % (n, v) for n, v in trailers) + b"\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
#: Statuses whose responses never have a body (RFC 9110 §15.3.5, §15.4.5).
NO_BODY_STATUS = frozenset({204, 304})

_status_lines: dict[int, bytes] = {}


def status_line(status: int, reason: bytes = b"") -> bytes:
    """``b"HTTP/1.1 200 OK\\r\\n"``; the standard phrase when ``reason`` is empty."""
    if reason:
        return b"HTTP/1.1 %d %s\r\n" % (status, reason)
    line = _status_lines.get(status)
    if line is None:
        try:
            phrase = HTTPStatus(status).phrase.encode("ascii")
        except ValueError:
            phrase = b"Unknown"
        line = _status_lines[status] = b"HTTP/1.1 %d %s\r\n" % (status, phrase)
    return line


def canned(status: int, reason: bytes) -> bytes:
    """A complete, empty answer that closes the connection."""
    return status_line(status, reason) + CLOSE_LINE + b"Content-Length: 0\r\n\r\n"


BAD_REQUEST = canned(400, b"Bad Request")
REQUEST_TIMEOUT = canned(408, b"Request Timeout")
URI_TOO_LONG = canned(414, b"URI Too Long")
TOO_LARGE = canned(431, b"Request Header Fields Too Large")
NOT_IMPLEMENTED = canned(501, b"Not Implemented")


def connection_tokens(values: list[bytes] | None) -> frozenset[bytes]:
    """Every comma-separated token of every ``Connection`` line, lower-cased."""
    if not values:
        return frozenset()
    return frozenset(t.strip().lower() for v in values for t in v.split(b","))


def request_head(method: bytes, target: bytes, headers: Headers, framing: bytes | None,
                 upgrade: bytes | None) -> bytes:
    """The head of a request sent upstream: the request line, ``headers``
    as planned, then the engine's own lines: ``framing``
    (``b"Content-Length: N"`` or ``b"Transfer-Encoding: chunked"``) and,
    for an admitted upgrade, ``Connection: Upgrade`` and ``Upgrade``."""
    # Lines without their CRLF, joined once (fewer formatting operations
    # than b"%s: %s\r\n" per header).
    lines = [method + b" " + target + b" HTTP/1.1"]
    add = lines.append
    for name, values in headers.getAllRawHeaders():
        if len(values) == 1:
            add(name + b": " + values[0])
        else:
            for value in values:
                add(name + b": " + value)
    if framing is not None:
        add(framing)
    if upgrade is not None:
        add(b"Connection: Upgrade\r\nUpgrade: " + upgrade)
    add(b"\r\n")  # the empty line ending the head
    return b"\r\n".join(lines)
