"""The access log: one line per request, cheap enough to leave on.

Building a ``twisted.logger`` event per request, and having ``twist``'s
observer format and flatten it, cost more than the rest of a proxied request
(docs/performance.md). Here each request is kept as a tuple of its fields in
a buffer, and the buffer is written :data:`FLUSH_SECONDS` after its first
request (as nginx's ``access_log ... buffer= flush=``) or as soon as it holds
:data:`RECORDS_LIMIT` requests, so memory stays bounded however many
requests arrive; the lines of a batch are made when it is written. To a
pipe (or anything but a regular file) it is written in pieces of whole
lines of at most :data:`WRITE_CHUNK` characters,
so that several ``--workers`` writing to one pipe never interleave inside a
line; to a regular file in one write (Linux writes to a file atomically
with respect to other writers of the same open file).

The lines look exactly like the events ``twist`` used to write:

* ``text``: ``2026-11-23T09:21:30+0000 [twistgw.access#info] 127.0.0.1 "GET /a HTTP/1.1" 200 vs=default/v
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

A response cut short after its head went out, because the upstream broke
off (a reset, a malformed chunk, a TLS connection closed without
``close_notify``), has one more field: ``truncated=upstream`` at the end of
the text line, ``"truncated": "upstream"`` in JSON.

No I/O here: the writer and the end-of-turn scheduler are handed in
(:mod:`twistgw.runtime.logs` connects them to ``twist``'s log file).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from twisted.logger import Logger, formatTime

#: Requests buffered before a write, however soon (bounded memory: a record
#: holds a request target and a principal, each bounded by the engine's
#: head limits; 128 ordinary JSON lines are about 48 KiB).
RECORDS_LIMIT = 128

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
LOG_FORMAT = ('{client} "{method} {path} {protocol}" {status} vs={virtual_service} route={route}'
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
_encode: Callable[[str], str] = json.encoder.encode_basestring_ascii


#: One request kept for the next batch: (client, method, path, status,
#: virtual_service, route, upstream, decided_by, principal, duration, time,
#: protocol, truncated, request_id).
_Record = tuple[str, str, str, int, str, str, str, str, str, float, float, str, str, str]


#: The characters a field may hold and be written as it is, in a text line
#: and in a JSON string alike: printable ASCII but ``"`` and ``\\``.
_SAFE = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')


def _clean(text: str, lines: int, own: int) -> bool:
    """Whether ``text``, ``lines`` lines each holding ``own`` characters
    outside :data:`_SAFE` of their own (quotes, the record separator, the
    newline), has no other: then no field in them needed escaping. One pass
    in C over the batch (``bytes.translate`` deleting the safe characters),
    instead of a check per field per line."""
    return text.isascii() and len(text.encode("ascii").translate(None, _SAFE)) == own * lines


def _json_text(value: str) -> str:
    """``value`` inside a JSON string literal, non-ASCII escaped."""
    return _encode(value)[1:-1]


def _text_lines(records: list[_Record]) -> list[str]:
    """twist's text lines (its RFC 3339 time, made once a second) of
    ``records``, fields as they are."""
    lines: list[str] = []
    add = lines.append
    second, stamp = -1, ""
    for c, m, p, s, v, ro, u, d, pr, du, t, pt, cut, rid in records:
        if int(t) != second:
            second, stamp = int(t), formatTime(t) + " [twistgw.access#info] "
        add(f'{stamp}{c} "{m} {p} {pt}" {s} vs={v} route={ro} upstream={u} decided_by={d}'
            f" principal={pr} {du * 1000:.1f}ms{' truncated=' + cut if cut else ''}"
            f"{' request_id=' + rid if rid else ''}\n")
    return lines


# Numbers as fixed-point text (milliseconds to the microsecond, the time to
# the microsecond): the same values as before to JSON readers, at a third of
# the cost of repr(float).
def _json_lines(records: list[_Record]) -> list[str]:
    """JSON records in twist's framing of ``records``, fields as they are."""
    return [f'\x1e{{"client": "{c}", "method": "{m}", "path": "{p}", "protocol": "{pt}", "status": {s},'
            f' "virtual_service": "{v}", "route": "{ro}", "upstream": "{u}", "decided_by": "{d}",'
            f' "principal": "{pr}", "duration_ms": {du * 1000:.3f}{_truncated(cut)}'
            f'{_RID % rid if rid else ""}{_JSON_TAIL}{t:.6f}}}\n'
            for c, m, p, s, v, ro, u, d, pr, du, t, pt, cut, rid in records]


def _truncated(cut: str) -> str:
    return f', "truncated": "{cut}"' if cut else ""


_RID = ', "request_id": "%s"'


def _own(lines: list[str]) -> int:
    """The characters outside :data:`_SAFE` in a line with empty fields."""
    return len(lines[0].encode("ascii").translate(None, _SAFE))


_EMPTY: list[_Record] = [("", "", "", 200, "", "", "", "", "", 0.0, 0.0, "", "", "")]
_TEXT_OWN = _own(_text_lines(_EMPTY))  # two quotes and the newline
_JSON_OWN = _own(_json_lines(_EMPTY))  # the quotes, the record separator and the newline


def _batch(records: list[_Record], make: Callable[[list[_Record]], list[str]], own: int,
           escape: Callable[[str], str]) -> tuple[list[str], str]:
    """The lines of a batch of records and their text joined. The lines are
    made from the fields as they are, then checked all at once
    (:func:`_clean`); only a batch where some field needs escaping is made
    again, every text field through ``escape``."""
    lines = make(records)
    text = "".join(lines)
    if not _clean(text, len(lines), own):
        e = escape
        lines = make([(e(c), e(m), e(p), s, e(v), e(ro), e(u), e(d), e(pr), du, t, e(pt), cut, e(rid))
                      for c, m, p, s, v, ro, u, d, pr, du, t, pt, cut, rid in records])
        text = "".join(lines)
    return lines, text


class AccessLog:
    """Access lines for one process.

    :param write: takes a ``str`` of whole lines (for ``text`` and ``json``).
    :param fmt: ``"text"``, ``"json"`` or ``"events"``.
    :param schedule: ``schedule(f)`` calls ``f`` a little later
        (``lambda f: reactor.callLater(FLUSH_SECONDS, f)``); without it every
        line is written at once.
    :param limit: buffered records that force a write.
    :param clock: the wall clock for the timestamp (``time.time``).
    :param chunk: the most characters one write may carry (whole lines;
        ``None``: the whole buffer in one write, for a regular file).
    """

    def __init__(self, write: Callable[[str], Any] | None = None, fmt: str = "text",
                 schedule: Callable[[Callable[[], None]], Any] | None = None, limit: int = RECORDS_LIMIT,
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
        #: (client, method, path, status, virtual_service, route, upstream,
        #: decided_by, principal, duration, time, protocol) of requests not yet written
        self._records: list[_Record] = []
        self._pending = False
        #: what ``schedule`` returned for the pending flush (a reactor's
        #: ``IDelayedCall``: cancelled by :meth:`close`), or None
        self._scheduled: Any = None
        #: write each line at once (no scheduler, or closed)
        self._direct = schedule is None
        #: lines lost because the writer failed (disk full, closed pipe)
        self.dropped = 0
        self._format = (_json_lines, _JSON_OWN, _json_text) if fmt == "json" else (_text_lines, _TEXT_OWN, escape_text)
        self.request = self._event if fmt == "events" else self._keep

    # -- one request ---------------------------------------------------------

    # ``request(client, method, path, status, virtual_service, route,
    # upstream, decided_by, principal, duration, protocol, truncated="")``:
    # ``duration`` is in seconds; ``protocol`` what the client speaks
    # (``HTTP/1.1``, ``HTTP/2``); every text argument is a ``str``;
    # ``truncated`` names who cut the response short after its head
    # (``upstream``), written as ``truncated=upstream`` only then;
    # ``request_id`` the request's ``x-request-id`` on a Gateway that sets
    # one (``request_id=...`` last, only then). For ``text`` and ``json``
    # the request is kept as it is, with the time, and its line made when
    # the buffer is written: a tuple and an append per request, and the
    # lines of a whole batch made in one comprehension, checked for
    # characters that need escaping in one pass (docs/performance.md).

    def _keep(self, client: str, method: str, path: str, status: int, virtual_service: str, route: str,
              upstream: str, decided_by: str, principal: str, duration: float, protocol: str = "HTTP/1.1",
              truncated: str = "", request_id: str = "") -> None:
        records = self._records
        records.append((client, method, path, status, virtual_service, route, upstream, decided_by, principal,
                        duration, self._clock(), protocol, truncated, request_id))
        if len(records) >= self.limit or self._direct:
            self.flush()
        elif not self._pending:
            self._pending = True
            self._scheduled = self._schedule(self._turn_ended)  # type: ignore[misc]

    def _event(self, client: str, method: str, path: str, status: int, virtual_service: str, route: str,
               upstream: str, decided_by: str, principal: str, duration: float, protocol: str = "HTTP/1.1",
               truncated: str = "", request_id: str = "") -> None:
        e = escape_text
        if truncated or request_id:
            tail = (" truncated={truncated}" if truncated else "") + (" request_id={request_id}" if request_id else "")
            _access.info(LOG_FORMAT + tail, client=e(client), method=e(method), path=e(path),
                         protocol=e(protocol), status=status, virtual_service=e(virtual_service), route=e(route),
                         upstream=e(upstream), decided_by=e(decided_by), principal=e(principal),
                         duration_ms=duration * 1000, truncated=truncated, request_id=e(request_id))
            return
        _access.info(LOG_FORMAT, client=e(client), method=e(method), path=e(path), protocol=e(protocol),
                     status=status, virtual_service=e(virtual_service), route=e(route), upstream=e(upstream),
                     decided_by=e(decided_by), principal=e(principal), duration_ms=duration * 1000)

    # -- the buffer ----------------------------------------------------------

    def _turn_ended(self) -> None:
        self._pending, self._scheduled = False, None
        self.flush()

    def flush(self) -> None:
        """Write every buffered line now, in order."""
        records = self._records
        if not records:
            return
        self._records = []
        try:
            lines, text = _batch(records, *self._format)
        except Exception as exc:  # a field that is not text: never the gateway's problem
            self._failed(exc, len(records))
            return
        chunk = self.chunk
        if chunk is None or len(text) <= chunk:
            self._write_text(text, len(lines))
            return
        start, size = 0, 0
        for i, line in enumerate(lines):
            if size and size + len(line) > chunk:
                self._put(lines, start, i)
                start, size = i, 0
            size += len(line)
        self._put(lines, start, len(lines))

    def _put(self, lines: list[str], start: int, end: int) -> None:
        self._write_text("".join(lines[start:end]), end - start)

    def _write_text(self, text: str, lines: int) -> None:
        try:
            self._write(text)  # type: ignore[misc]
        except Exception as exc:
            self._failed(exc, lines)

    def _failed(self, exc: Exception, lost: int) -> None:
        if not self.dropped:
            _log.error("The access log cannot be written ({error}); dropping its lines until it can",
                       error=repr(exc))
        self.dropped += lost

    def close(self) -> None:
        """Flush; lines that still come (late requests) are written at once."""
        self._direct = True
        scheduled, self._scheduled = self._scheduled, None
        if self._pending and scheduled is not None and getattr(scheduled, "active", lambda: False)():
            scheduled.cancel()  # no timer left behind (trial's clean reactor)
        self._pending = False
        self.flush()

    @property
    def buffered(self) -> int:
        """Requests whose lines wait to be written."""
        return len(self._records)
