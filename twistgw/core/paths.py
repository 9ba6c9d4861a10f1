"""Request-path normalisation (RFC 3986 §6.2.2 and §5.2.4), before routing.

The same normalised path is matched, authorized and forwarded, so a prefix
check can never pass on one path while the backend serves another.

Rules (see docs/configuration.md, "Paths"):

* the path must be origin-form (start with ``/``), or be ``*``;
* percent-escapes of unreserved characters are decoded (``%2e`` → ``.``,
  ``%7E`` → ``~``); other escapes are kept, with upper-case hex;
* ``%2F`` is decoded to ``/`` before dot segments are removed (Envoy's
  ``UNESCAPE_AND_FORWARD``), so ``..%2f`` cannot hide a dot segment;
* refused with 400: a backslash raw or as ``%5C``; NUL, control characters
  and DEL, raw or escaped; raw bytes outside ASCII; a bad escape; ``#``;
  a segment that is ``.`` or ``..`` followed by ``;parameters`` (the
  ``/..;/`` trick some servlet containers honour);
* runs of slashes are merged; ``.`` and ``..`` segments are removed.
"""

from __future__ import annotations

import re

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Characters allowed raw in a path by RFC 3986 (pchar + "/"), plus "%" for escapes.
_ALLOWED_RAW = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/%"
)
#: A path with nothing to normalise: "/" and segments of characters allowed
#: raw (no "%"), none empty ("//") and none starting with "." (so no dot
#: segment), an optional trailing "/". The slow path below gives the same
#: answer for these; tests/unit/test_core_paths.py checks that.
_ALREADY_NORMAL = re.compile(rb"(?:/[A-Za-z0-9\-_~!$&'()*+,;=:@][A-Za-z0-9\-._~!$&'()*+,;=:@]*)+/?|/")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_SLASHES = re.compile(r"/{2,}")


class BadPath(ValueError):
    """The request path cannot be normalised safely (answer 400)."""


def normalise_path(raw: bytes) -> str:
    """Normalise a raw request path (without the query). Raises BadPath."""
    if raw == b"*":
        return "*"
    if not raw.startswith(b"/"):
        raise BadPath("the request path must start with '/'")
    # Fast path: the common, already-normal path (one C call).
    if _ALREADY_NORMAL.fullmatch(raw) is not None:
        return raw.decode("ascii")
    return normalise_slowly(raw)


def normalise_slowly(raw: bytes) -> str:
    """:func:`normalise_path` without its fast path (for a path starting with "/")."""
    out = bytearray()
    i = 0
    n = len(raw)
    while i < n:
        c = raw[i]
        if c == 0x25:  # %
            h = raw[i + 1 : i + 3]
            if len(h) != 2 or not _HEX.issuperset(h):
                raise BadPath("invalid percent-escape")
            value = int(h, 16)
            if value < 0x20 or value == 0x7F:
                raise BadPath("an escaped control character is not allowed in the path")
            if value == 0x5C:
                raise BadPath("a backslash is not allowed in the path")
            if value in _UNRESERVED or value == 0x2F:
                out.append(value)
            else:
                out += b"%" + h.upper()
            i += 3
            continue
        if c == 0x5C:
            raise BadPath("a backslash is not allowed in the path")
        if c not in _ALLOWED_RAW:
            if c < 0x20 or c == 0x7F:
                raise BadPath("a control character is not allowed in the path")
            if c == 0x23:
                raise BadPath("a fragment is not allowed in the request target")
            if c >= 0x80:
                raise BadPath("raw non-ASCII bytes must be percent-encoded")
            raise BadPath(f"the character {chr(c)!r} must be percent-encoded")
        out.append(c)
        i += 1
    return remove_dot_segments(_SLASHES.sub("/", out.decode("ascii")))


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 on an absolute path with no empty segments."""
    segments = path.split("/")
    stack: list[str] = []
    trailing = False
    for seg in segments[1:]:
        base = seg.split(";", 1)[0]
        if seg != base and base in (".", ".."):
            raise BadPath("a dot segment with ';' parameters is not allowed")
        if seg == ".":
            trailing = True
            continue
        if seg == "..":
            if stack:
                stack.pop()
            trailing = True
            continue
        stack.append(seg)
        trailing = False
    result = "/" + "/".join(stack)
    if trailing and not result.endswith("/"):
        result += "/"
    return result
