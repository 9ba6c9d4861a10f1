"""Reading a request head: the checks httptools (llhttp, strict) leaves to
us, the limits, and the :class:`~twistgw.engine.exchange.Exchange` made of
a complete head (version, framing, keep-alive, ``Expect``, upgrade).

:class:`RequestReader` is mixed into the client connection, so that
llhttp calls ``on_url`` and ``on_header`` without a Python call in
between. It changes no connection state: the callbacks that do
(``on_message_begin``, ``on_headers_complete``, ``on_body``,
``on_message_complete``) are the connection's.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from typing import Any


from twistgw.api.headers import Headers, InvalidHeaderName, cached_canonical_name, canonical_name
from twistgw.core.headers import trailer_pairs
from twistgw.engine import framing
from twistgw.engine.body import RequestBody
from twistgw.engine.exchange import Exchange
from twistgw.engine.states import ConnState

__all__ = ["ALLOWED_UPGRADES", "Reject", "RequestReader", "Stop"]

#: Upgrade protocols forwarded (lower-case); any other ``Upgrade`` is
#: dropped from the request and the connection closes after its answer
#: (Envoy forwards only the upgrade types a route enables; WebSocket by
#: default). ``h2c`` in particular is never forwarded: a backend that
#: speaks HTTP/2 after a spliced 101 would see every later request raw.
ALLOWED_UPGRADES = frozenset({b"websocket"})

_HEAD = ConnState.HEAD
# framing's limits and answers as module globals: read per header
_MAX_HEADERS = framing.MAX_HEADERS
_MAX_HEAD_BYTES = framing.MAX_HEAD_BYTES
_MAX_TARGET = framing.MAX_TARGET
_TOO_LARGE = framing.TOO_LARGE
_BAD_REQUEST = framing.BAD_REQUEST
#: header name as received -> canonical name, for names seen before
#: (``canonical_name``'s bounded cache; a name that is not a token is never in it)
_known_name = cached_canonical_name


class Reject(Exception):
    """Raised from a parser callback: answer ``response`` and close."""

    def __init__(self, response: bytes) -> None:
        self.response = response


class Stop(Exception):
    """Raised from a parser callback: the connection reads no more."""


class _Parsed(Headers):
    """Headers made of the parser's dict as it is (no copy per request)."""

    __slots__ = ()

    def __init__(self, raw: dict[bytes, list[bytes]]) -> None:
        self._raw = raw


@mypyc_attr(native_class=False)  # mixed into a Twisted Protocol (twistgw/compiled.py)
class RequestReader:
    """The request side of a client connection (a mixin; see the module)."""

    parser: Any  # httptools.HttpRequestParser (untyped)
    parsing: Exchange | None  # the connection's request being read
    gateway: Any  # the connection's Gateway (typed there)
    clock: Any  # the reactor's seconds

    def __init__(self) -> None:
        self._url = b""
        self._raw: dict[bytes, list[bytes]] = {}
        self._nheaders = 0
        self._head_bytes = 0
        self._data = b""

    state: ConnState

    # what the connection provides
    def reject(self, answer: bytes) -> None: ...
    def pause_body(self) -> None: ...
    def resume_body(self) -> None: ...

    def head_too_large(self, n: int) -> bool:
        """A read of ``n`` bytes inside a head: past the head limits (before
        llhttp buffers more), it is answered (431) and True."""
        self._head_bytes += n
        if self._head_bytes > framing.MAX_HEAD_BYTES + framing.MAX_TARGET:
            self.reject(framing.TOO_LARGE)
            return True
        return False

    # -- httptools callbacks ----------------------------------------------------

    def start_head(self) -> None:
        """A new head begins (the connection's ``on_message_begin``)."""
        self._url = b""
        self._raw = {}
        self._nheaders = 0
        self._head_bytes = 0

    def on_url(self, url: bytes) -> None:
        if not self._url:
            # llhttp lets more than one space follow the method; RFC 9112
            # §3 says one (and so do nginx and Envoy).
            twice = self.parser.get_method() + b"  "
            at = self._data.find(twice)
            if at != -1 and (at == 0 or self._data[at - 1] == 10):
                raise Reject(framing.BAD_REQUEST)
        url = self._url + url if self._url else url
        if len(url) > _MAX_TARGET:
            raise Reject(framing.URI_TOO_LONG)
        self._url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.state is not _HEAD:
            self.on_trailer(name, value)  # checked by llhttp
            return
        self._nheaders += 1
        self._head_bytes += len(name) + len(value) + 4
        if self._nheaders > _MAX_HEADERS or self._head_bytes > _MAX_HEAD_BYTES:
            raise Reject(_TOO_LARGE)
        cname = _known_name(name)  # canonical_name's cache, read inline: no call for a name seen before
        if cname is None:
            try:
                cname = canonical_name(name)
            except InvalidHeaderName:
                raise Reject(_BAD_REQUEST) from None
        value = value.rstrip(b" \t")
        values = self._raw.get(cname)
        if values is None:
            self._raw[cname] = [value]
        else:
            values.append(value)

    def on_trailer(self, name: bytes, value: bytes) -> None:
        """A chunked request's trailer field: counted in the head's limits,
        kept on the body to go upstream (``core.headers.trailer_pairs``)."""
        self._nheaders += 1
        self._head_bytes += len(name) + len(value) + 4
        if self._nheaders > _MAX_HEADERS or self._head_bytes > _MAX_HEAD_BYTES:
            raise Reject(_TOO_LARGE)
        ex = self.parsing
        if ex is not None and ex.body is not None:
            ex.body.trailers += trailer_pairs(((name, value),))

    # -- the head --------------------------------------------------------------

    def read_head(self) -> Exchange:
        """The Exchange of a complete head, or Reject."""
        parser = self.parser
        v = parser.get_http_version()
        if v == "1.1":
            version = framing.HTTP11
        elif v == "1.0":
            version = framing.HTTP10
        else:
            raise Reject(framing.BAD_REQUEST)
        method = parser.get_method()
        if method == b"CONNECT":
            raise Reject(framing.NOT_IMPLEMENTED)  # a reverse proxy has no tunnel target
        raw = self._raw
        connection = framing.connection_tokens(raw.get(b"Connection"))
        keep_alive = version is framing.HTTP11 and b"close" not in connection
        ex = Exchange(self, method, self._url, version, _Parsed(raw), keep_alive,  # type: ignore[arg-type]
                      self.clock())  # (the mixin is always a GatewayProtocol)
        te = raw.get(b"Transfer-Encoding")
        cl = raw.get(b"Content-Length")
        if te is not None:
            if version is not framing.HTTP11:
                raise Reject(framing.BAD_REQUEST)  # RFC 9112 §6.1: chunked needs HTTP/1.1
            if len(te) != 1 or te[0].lower() != b"chunked":
                _check_codings(te)
            ex.body = RequestBody(None, self)
        elif cl is not None:
            ex.content_length = cl[0]
            if cl[0] != b"0":
                ex.body = RequestBody(int(cl[0]), self)
        if ex.body is None:
            ex.body_complete = True
        elif version is framing.HTTP11:
            expect = raw.get(b"Expect")
            if expect is not None and expect[0].lower() == b"100-continue":
                ex.expect_continue = True
        upgrade = raw.get(b"Upgrade")
        if upgrade is not None and b"upgrade" in connection:
            if version is framing.HTTP11 and ex.body is None and upgrade[0].strip().lower() in ALLOWED_UPGRADES:
                ex.upgrade = upgrade[0]
            elif ex.body is None:
                # Not forwarded (RFC 9110 §7.8: never for HTTP/1.0): the
                # request is answered as a plain one, and nothing after it
                # is read (llhttp takes what follows for the new protocol).
                ex.keep_alive = False
        return ex


def _check_codings(te: list[bytes]) -> None:
    """Transfer-Encoding other than ``chunked`` alone: llhttp took the body
    as chunked (the last coding), but the gateway implements no other
    coding and must not pass the bytes on as if it had removed them: 501
    (RFC 9112 §6.1; Envoy answers 501 too). A list that does not end with
    ``chunked`` is llhttp's 400."""
    codings = [c.strip().lower() for line in te for c in line.split(b",")]
    if not codings or codings[-1] != b"chunked":
        raise Reject(framing.BAD_REQUEST)
    if any(c != b"chunked" for c in codings):
        raise Reject(framing.NOT_IMPLEMENTED)
