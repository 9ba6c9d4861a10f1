"""The request headers plugins see and change (``RequestContext.headers``).

twistgw's own type, so the HTTP engine underneath may change while plugins
keep working. It behaves like :class:`twisted.web.http_headers.Headers`, the
type plugins were written against: names are case-insensitive and kept in
canonical ``Header-Case``; a ``str`` name gets ``str`` values back (UTF-8),
a ``bytes`` name ``bytes``; line breaks in values become spaces.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

import re
from typing import Any, Iterable, Iterator, Mapping, Sequence, TypeVar, overload

_T = TypeVar("_T")

#: RFC 9110 §5.6.2 ``token``: an HTTP header name or method.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")

#: Canonical spellings Twisted (and so every plugin so far) uses.
_CASE = {
    b"Content-Md5": b"Content-MD5", b"Dnt": b"DNT", b"Etag": b"ETag", b"P3p": b"P3P",
    b"Te": b"TE", b"Www-Authenticate": b"WWW-Authenticate", b"X-Xss-Protection": b"X-XSS-Protection",
}

#: name as given → canonical name (valid names only; bounded, 10,000): the
#: engine's header parser reads it directly, one dict lookup per header
CANONICAL_CACHE: dict[str | bytes, bytes] = {}
_canonical_cache = CANONICAL_CACHE


def is_token(text: str) -> bool:
    """Whether ``text`` is an RFC 9110 token (a valid header name or method);
    also :func:`sdk.is_token`."""
    return _TOKEN.fullmatch(text) is not None


class InvalidHeaderName(ValueError):
    """A header name that is not an RFC 9110 token (spaces, colons, NUL...)."""


#: ``canonical_name(name)`` for a name seen before, else None (its cache's
#: ``get``): the engine's per-header path, without a Python call
cached_canonical_name = _canonical_cache.get


def canonical_name(name: str | bytes) -> bytes:
    """``b"x-forwarded-for"`` → ``b"X-Forwarded-For"`` (raises
    :class:`InvalidHeaderName` for a name that is not a token)."""
    found = _canonical_cache.get(name)
    if found is not None:
        return found
    raw = name.encode("iso-8859-1") if isinstance(name, str) else name
    if not is_token(raw.decode("iso-8859-1")):
        raise InvalidHeaderName(raw)
    result = b"-".join(word.capitalize() for word in raw.split(b"-"))
    result = _CASE.get(result, result)
    if len(_canonical_cache) < 10_000:
        _canonical_cache[name] = result
    return result


#: Response headers only the engine writes (the framing of the answer,
#: hop-by-hop ones): :meth:`sdk.RequestContext.add_response_header`
#: refuses them.
OWNED_RESPONSE_HEADERS = frozenset({
    b"content-length", b"transfer-encoding", b"connection", b"keep-alive", b"proxy-connection", b"te",
    b"trailer", b"upgrade", b"proxy-authenticate",
})


def checked_response_header(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    """``(name, value)`` for a response header a plugin adds, or ValueError:
    a name that is not a token or that the engine owns
    (:data:`OWNED_RESPONSE_HEADERS`), a value with CR, LF or NUL."""
    if not isinstance(name, bytes) or not isinstance(value, bytes):
        raise TypeError(f"response header name and value must be bytes, got {name!r}: {value!r}")
    if not is_token(name.decode("iso-8859-1")):
        raise InvalidHeaderName(name)
    if name.lower() in OWNED_RESPONSE_HEADERS:
        raise ValueError(f"{name.decode('iso-8859-1')} is a framing/hop-by-hop header the gateway writes itself;"
                         f" a plugin cannot add it to a response")
    if b"\r" in value or b"\n" in value or b"\0" in value:
        raise ValueError(f"response header {name.decode('iso-8859-1')}: value contains CR, LF or NUL: {value!r}")
    return name, value


def _value(value: str | bytes) -> bytes:
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return b" ".join(raw.splitlines()) if (b"\n" in raw or b"\r" in raw) else raw


@mypyc_attr(allow_interpreted_subclasses=True)  # plugins may subclass it
class Headers:
    """Header names to lists of values, in the order they were first set."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Mapping[str | bytes, Sequence[str | bytes]] | None = None) -> None:
        #: canonical name -> values; the engine hands this dict on as it is.
        self._raw: dict[bytes, list[bytes]] = {}
        if raw is not None:
            for name, values in raw.items():
                self.setRawHeaders(name, values)

    @classmethod
    def of_pairs(cls, pairs: Iterable[tuple[bytes, Sequence[bytes]]]) -> "Headers":
        """From ``getAllRawHeaders()`` of another headers object (names
        already canonical, values already clean), copying the lists."""
        out = cls()
        raw = out._raw
        for name, values in pairs:
            raw[name] = list(values)
        return out

    def __repr__(self) -> str:
        return f"Headers({self._raw!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return self._raw == other._raw
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable: not hashable

    def copy(self) -> "Headers":
        return Headers.of_pairs(self._raw.items())

    def hasHeader(self, name: str | bytes) -> bool:
        return canonical_name(name) in self._raw

    def removeHeader(self, name: str | bytes) -> None:
        self._raw.pop(canonical_name(name), None)

    def setRawHeaders(self, name: str | bytes, values: Sequence[str | bytes]) -> None:
        if isinstance(values, (str, bytes)):
            raise TypeError(f"setRawHeaders takes a sequence of values, not one value: {values!r}")
        self._raw[canonical_name(name)] = [_value(v) for v in values]

    def addRawHeader(self, name: str | bytes, value: str | bytes) -> None:
        self._raw.setdefault(canonical_name(name), []).append(_value(value))

    @overload
    def getRawHeaders(self, name: str) -> list[str] | None: ...
    @overload
    def getRawHeaders(self, name: bytes) -> list[bytes] | None: ...
    @overload
    def getRawHeaders(self, name: str | bytes, default: _T) -> list[Any] | _T: ...

    def getRawHeaders(self, name: str | bytes, default: Any = None) -> Any:
        """Every value of ``name``, or ``default`` when it is absent."""
        values = self._raw.get(canonical_name(name))
        if not values:
            return default
        if isinstance(name, str):
            return [v.decode("utf-8") for v in values]
        return values

    def getAllRawHeaders(self) -> Iterator[tuple[bytes, list[bytes]]]:
        """``(canonical name, values)`` for every header, as bytes."""
        return iter(self._raw.items())

    @classmethod
    def adopt(cls, raw: dict[bytes, list[bytes]]) -> "Headers":
        """Headers over ``raw`` itself, no copy: for the engine, whose parser
        already built the dict with canonical names and clean values."""
        out = cls()
        out._raw = raw
        return out

    @property
    def raw(self) -> dict[bytes, list[bytes]]:
        """The live ``{canonical name: [values]}`` dict, no copy: for the
        core's and the engine's copy loops (names must be canonical, values
        clean bytes). Plugins use the methods above."""
        return self._raw

    def set_canonical(self, canonical: bytes, value: bytes) -> None:
        """``setRawHeaders`` for a name already in canonical form and a value
        the gateway made itself (no line breaks): no re-encoding per request."""
        self._raw[canonical] = [value]

    def get_canonical(self, canonical: bytes) -> list[bytes] | None:
        """``getRawHeaders`` for a canonical name (bytes); None when absent."""
        return self._raw.get(canonical) or None

    def add_canonical(self, canonical: bytes, value: bytes) -> None:
        """``addRawHeader`` for a canonical name and a checked value."""
        self._raw.setdefault(canonical, []).append(value)

    def remove_canonical(self, canonical: bytes) -> None:
        """``removeHeader`` for a canonical name."""
        self._raw.pop(canonical, None)
