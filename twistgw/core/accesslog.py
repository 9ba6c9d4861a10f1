"""The access log: one line per request, cheap enough to leave on.

Building a ``twisted.logger`` event per request, and having ``twist``'s
observer format and flatten it, cost more than the rest of a proxied request
(docs/performance.md). Here each request becomes one preformatted line
appended to a buffer, and the buffer is written :data:`FLUSH_SECONDS` after
its first line (as nginx's ``access_log ... buffer= flush=``) or as soon as
it holds :data:`BUFFER_LIMIT` characters, so memory stays bounded however
many requests arrive. To a pipe (or anything but a regular file) it is
written in pieces of whole lines of at most :data:`WRITE_CHUNK` characters,
so that several ``--workers`` writing to one pipe never interleave inside a
line; to a regular file in one write (Linux writes to a file atomically
with respect to other writers of the same open file).

The lines look exactly like the events ``twist`` used to write:

* ``text``: ``2026-11-23T09:21:30+0000 [twistgw.access#info] 127.0.0.1 "GET /a" 200 vs=default/v
  route=r upstream=127.0.0.1:8081 decided_by=- principal=bob 0.9ms``; control characters,
  ``"`` and ``\\`` in the fields are escaped (``\\x0a``, ``\\x22``) as nginx does,
  so a JWT claim or a user name can never forge or break a line;
* ``json``: a record in ``twist --log-format=json``'s framing (``\\x1e{...}\\n``) with
  one key per field, ``log_namespace`` ``twistgw.access``, ``log_level`` and
  ``log_time``, readable by :func:`twisted.logger.eventsFromJSONLogFile`; JSON
  escapes control characters itself. Unlike other events' records it carries
  no ``log_format`` template (nor ``log_source``): those 190 of its 570
  bytes, written for every request, were what kept the log from its 10%
  budget (``docs/decisions.md``); the fields are all there;
* ``events`` (embedding without a file): a ``twisted.logger`` event per request
  in namespace ``twistgw.access``, as before, with the text fields escaped.

No I/O here: the writer and the end-of-turn scheduler are handed in
(:mod:`twistgw.runtime.logs` connects them to ``twist``'s log file).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from twisted.logger import Logger, formatTime

#: Characters buffered before a write, however soon (bounded memory).
BUFFER_LIMIT = 64 * 1024

#: The longest a line waits in the buffer (what the runtime schedules).
FLUSH_SECONDS = 0.1

#: Lines are written in pieces of at most this many characters (whole lines;
#: one longer line alone): a write of at most PIPE_BUF (4,096) bytes to a
#: pipe is atomic, so processes sharing one stdout never split each other's
#: lines (a line with non-ASCII text can exceed it; access lines rarely do).
WRITE_CHUNK = 4096

FORMATS = ("text", "json", "events")

#: The event format twist's text observer was given (kept for ``events``; the
#: text format writes the same line).
LOG_FORMAT = ('{client} "{method} {path}" {status} vs={virtual_service} route={route}'
              " upstream={upstream} decided_by={decided_by} principal={principal} {duration_ms:.1f}ms")

#: Twisted's serialised ``LogLevel.info`` (``eventAsJSON``'s form of it).
_JSON_LEVEL = '{"name": "info", "__class_uuid__": "02e59486-f24d-46ad-8224-3acdf2a5732a"}'
_JSON_TAIL = ', "log_namespace": "twistgw.access", "log_level": ' + _JSON_LEVEL + ', "log_time": '

def _escape_char(c: str) -> str:
    if c.isprintable() and c != '"' and c != "\\":
        return c
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def escape_text(value: str, keep: str = "") -> str:
    """``value`` safe inside one text log line: every character Python does
    not call printable (C0 and C1 controls, DEL, line and paragraph
    separators, bidirectional and other format characters, surrogates,
    non-space separators), ``"`` and ``\\`` become ``\\xNN``, ``\\uNNNN`` or
    ``\\UNNNNNNNN``; other text, and the characters in ``keep``, are kept."""
    if value.isprintable() and '"' not in value and "\\" not in value:
        return value  # the usual case: one C call
    if keep:
        return "".join(c if c in keep else _escape_char(c) for c in value)
    return "".join(map(_escape_char, value))


#: Module level, not class attributes: a Logger read through an instance
#: takes the class's name as its namespace.
_access = Logger(namespace="twistgw.access")
_log = Logger(namespace="twistgw")

#: JSON string literals, non-ASCII escaped as ``twist``'s JSON observer does (a
#: lone surrogate from a claim can then never make the write fail).
_encode = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


class AccessLog:
    """Access lines for one process.

    :param write: takes a ``str`` of whole lines (for ``text`` and ``json``).
    :param fmt: ``"text"``, ``"json"`` or ``"events"``.
    :param schedule: ``schedule(f)`` calls ``f`` a little later
        (``lambda f: reactor.callLater(FLUSH_SECONDS, f)``); without it every
        line is written at once.
    :param limit: buffered characters that force a write.
    :param clock: the wall clock for the timestamp (``time.time``).
    :param chunk: the most characters one write may carry (whole lines;
        ``None``: the whole buffer in one write, for a regular file).
    """

    def __init__(self, write: Callable[[str], Any] | None = None, fmt: str = "text",
                 schedule: Callable[[Callable[[], None]], Any] | None = None, limit: int = BUFFER_LIMIT,
                 clock: Callable[[], float] = time.time, chunk: int | None = WRITE_CHUNK) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"access log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        if fmt != "events" and write is None:
            raise ValueError(f"the {fmt!r} access log needs a writer")
        self.fmt = fmt
        self._write = write
        self._schedule = schedule
        self.limit = limit
        self._clock = clock
        self.chunk = chunk
        self._lines: list[str] = []
        self._size = 0
        self._pending = False
        self._closed = False
        #: write each line at once (no scheduler, or closed)
        self._direct = schedule is None
        #: lines lost because the writer failed (disk full, closed pipe)
        self.dropped = 0
        self._second = -1
        self._stamp = ""
        self.request = {"text": self._text, "json": self._json, "events": self._event}[fmt]

    # -- one request ---------------------------------------------------------

    # ``request(client, method, path, status, virtual_service, route,
    # upstream, decided_by, principal, duration)`` is one of these three,
    # chosen once (no per-request branching on the format). ``duration`` is
    # in seconds; every text argument is a ``str``.

    def _text(self, client: str, method: str, path: str, status: int, virtual_service: str, route: str,
              upstream: str, decided_by: str, principal: str, duration: float) -> None:
        now = self._clock()
        second = int(now)
        if second != self._second:
            self._second, self._stamp = second, formatTime(now) + " [twistgw.access#info] "
        every = "".join((client, method, path, virtual_service, route, upstream, decided_by, principal))
        if not (every.isprintable() and '"' not in every and "\\" not in every):
            # rare: escape each field (one check above for the usual case)
            e = escape_text
            client, method, path, virtual_service, route, upstream, decided_by, principal = (
                e(client), e(method), e(path), e(virtual_service), e(route), e(upstream), e(decided_by),
                e(principal))
        self._add(f'{self._stamp}{client} "{method} {path}" {status} vs={virtual_service}'
                  f" route={route} upstream={upstream} decided_by={decided_by}"
                  f" principal={principal} {duration * 1000:.1f}ms\n")

    # Numbers as fixed-point text (milliseconds to the microsecond, the time
    # to the microsecond): the same values as before to JSON readers, at a
    # third of the cost of repr(float) (two reprs were 2.4 µs of a 3.9 µs line).
    # Strings: printable ASCII without ``"`` or ``\\`` (the usual case, one
    # check for all eight) is its own JSON text; anything else is escaped
    # field by field as twist's JSON observer does.
    def _json(self, client: str, method: str, path: str, status: int, virtual_service: str, route: str,
              upstream: str, decided_by: str, principal: str, duration: float) -> None:
        every = "".join((client, method, path, virtual_service, route, upstream, decided_by, principal))
        if not (every.isascii() and every.isprintable() and '"' not in every and "\\" not in every):
            client, method, path, virtual_service, route, upstream, decided_by, principal = (
                _encode(client)[1:-1], _encode(method)[1:-1], _encode(path)[1:-1],
                _encode(virtual_service)[1:-1], _encode(route)[1:-1], _encode(upstream)[1:-1],
                _encode(decided_by)[1:-1], _encode(principal)[1:-1])
        self._add(f'\x1e{{"client": "{client}", "method": "{method}", "path": "{path}", "status": {status},'
                  f' "virtual_service": "{virtual_service}", "route": "{route}", "upstream": "{upstream}",'
                  f' "decided_by": "{decided_by}", "principal": "{principal}",'
                  f' "duration_ms": {duration * 1000:.3f}{_JSON_TAIL}{self._clock():.6f}}}\n')

    def _event(self, client: str, method: str, path: str, status: int, virtual_service: str, route: str,
               upstream: str, decided_by: str, principal: str, duration: float) -> None:
        e = escape_text
        _access.info(LOG_FORMAT, client=e(client), method=e(method), path=e(path), status=status,
                       virtual_service=e(virtual_service), route=e(route), upstream=e(upstream),
                       decided_by=e(decided_by), principal=e(principal), duration_ms=duration * 1000)

    # -- the buffer ----------------------------------------------------------

    def _add(self, line: str) -> None:
        self._lines.append(line)
        self._size += len(line)
        if self._size >= self.limit or self._direct:
            self.flush()
        elif not self._pending:
            self._pending = True
            self._schedule(self._turn_ended)

    def _turn_ended(self) -> None:
        self._pending = False
        self.flush()

    def flush(self) -> None:
        """Write every buffered line now, in order."""
        if not self._lines:
            return
        lines, self._lines, self._size = self._lines, [], 0
        chunk = self.chunk
        if chunk is None:
            self._put(lines, 0, len(lines))
            return
        start, size = 0, 0
        for i, line in enumerate(lines):
            if size and size + len(line) > chunk:
                self._put(lines, start, i)
                start, size = i, 0
            size += len(line)
        self._put(lines, start, len(lines))

    def _put(self, lines: list[str], start: int, end: int) -> None:
        try:
            self._write("".join(lines[start:end]))  # type: ignore[misc]
        except Exception as exc:
            if not self.dropped:
                _log.error("The access log cannot be written ({error}); dropping its lines"
                                     " until it can", error=repr(exc))
            self.dropped += end - start

    def close(self) -> None:
        """Flush; lines that still come (late requests) are written at once."""
        self._closed = self._direct = True
        self.flush()

    @property
    def buffered(self) -> int:
        """Characters waiting to be written."""
        return self._size
