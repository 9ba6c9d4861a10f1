"""Cookies: reading the request's ``Cookie`` header, writing ``Set-Cookie``,
splitting a large value over several cookies, and the sealed (encrypted and
authenticated) values the cookie session store and the login state use.

Pure: no reactor, no I/O. Sealing is ``cryptography``'s AES-GCM (never a
cipher of our own); the cookie's name is the associated data, so a value
sealed for one cookie is refused under another.
"""

from __future__ import annotations

import base64
import os
from typing import Iterable

import attrs
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from twistgw.api.b64 import b64decode_strict

#: Longest value the gateway puts in one cookie. Browsers keep at least 4096
#: bytes per cookie (name, value and attributes); this leaves room for the rest.
MAX_COOKIE_VALUE = 3800
#: Most cookies one session may be split over (``name``, ``name.1``, ...).
MAX_CHUNKS = 4
NONCE_BYTES = 12
_VERSION = b"\x01"


class SessionTooLarge(ValueError):
    """The sealed session does not fit in :data:`MAX_CHUNKS` cookies."""


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def parse_cookie_header(values: Iterable[bytes]) -> dict[str, str]:
    """Every ``name=value`` pair of the ``Cookie`` header(s). A name sent
    twice keeps its first value (the most specific path, RFC 6265 5.4)."""
    out: dict[str, str] = {}
    for raw in values:
        for part in raw.decode("latin-1").split(";"):
            name, eq, value = part.strip().partition("=")
            if not eq or not name:
                continue
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            out.setdefault(name, value)
    return out


def without_cookies(values: Iterable[bytes], drop: frozenset[str]) -> bytes | None:
    """The ``Cookie`` header with the named cookies (and their ``.N`` chunks)
    removed; None when nothing is left."""
    kept = []
    for raw in values:
        for part in raw.split(b";"):
            text = part.strip()
            if not text:
                continue
            name = text.split(b"=", 1)[0].strip().decode("latin-1")
            base = name.rsplit(".", 1)[0] if name.rsplit(".", 1)[-1].isdigit() else name
            if name in drop or base in drop:
                continue
            kept.append(text)
    return b"; ".join(kept) if kept else None


def joined_value(cookies: dict[str, str], name: str) -> str | None:
    """A value split over ``name``, ``name.1``, ``name.2``... joined back."""
    first = cookies.get(name)
    if first is None:
        return None
    parts = [first]
    for i in range(1, MAX_CHUNKS):
        more = cookies.get(f"{name}.{i}")
        if more is None:
            break
        parts.append(more)
    return "".join(parts)


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


@attrs.frozen
class CookieOptions:
    """Gloo's ``session.cookieOptions``."""

    max_age: int = 2592000  # 30 days; 0: a browser-session cookie
    secure: bool = True
    http_only: bool = True
    path: str | None = "/"
    domain: str | None = None
    same_site: str | None = "Lax"  # "Lax", "Strict", "None" or None (not sent)

    def attributes(self, max_age: int | None) -> str:
        out = []
        if self.path is not None:
            out.append(f"Path={self.path}")
        if self.domain:
            out.append(f"Domain={self.domain}")
        if max_age is not None:
            out.append(f"Max-Age={max_age}")
        if self.secure:
            out.append("Secure")
        if self.http_only:
            out.append("HttpOnly")
        if self.same_site:
            out.append(f"SameSite={self.same_site}")
        return "; ".join(out)


def set_cookie(name: str, value: str, options: CookieOptions, max_age: int | None = None) -> bytes:
    age = max_age if max_age is not None else (options.max_age or None)
    attributes = options.attributes(age)
    return f"{name}={value}; {attributes}".encode("latin-1") if attributes else f"{name}={value}".encode("latin-1")


def delete_cookie(name: str, options: CookieOptions) -> bytes:
    return set_cookie(name, "", options, max_age=0)


def split_cookies(name: str, value: str, options: CookieOptions, present: dict[str, str]) -> list[bytes]:
    """``Set-Cookie`` lines carrying ``value`` over as few cookies as it
    needs, deleting chunks of an older, longer value the browser still has.

    :raise SessionTooLarge: more than :data:`MAX_CHUNKS` cookies are needed.
    """
    chunks = [value[i:i + MAX_COOKIE_VALUE] for i in range(0, len(value), MAX_COOKIE_VALUE)] or [""]
    if len(chunks) > MAX_CHUNKS:
        raise SessionTooLarge(f"the session needs {len(chunks)} cookies of {MAX_COOKIE_VALUE} bytes;"
                              f" at most {MAX_CHUNKS} are sent")
    lines = [set_cookie(name if i == 0 else f"{name}.{i}", chunk, options) for i, chunk in enumerate(chunks)]
    for i in range(len(chunks), MAX_CHUNKS):
        if f"{name}.{i}" in present:
            lines.append(delete_cookie(f"{name}.{i}", options))
    return lines


def delete_split(name: str, options: CookieOptions, present: dict[str, str]) -> list[bytes]:
    lines = [delete_cookie(name, options)]
    lines += [delete_cookie(f"{name}.{i}", options) for i in range(1, MAX_CHUNKS) if f"{name}.{i}" in present]
    return lines


# ---------------------------------------------------------------------------
# Sealed values
# ---------------------------------------------------------------------------


class Sealer:
    """AES-256-GCM over a value, bound to a purpose (the cookie's name):
    ``version || nonce || ciphertext+tag``, base64url without padding."""

    __slots__ = ("_aead",)

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError(f"the key must be 32 bytes, got {len(key)}")
        self._aead = AESGCM(key)

    def seal(self, purpose: str, data: bytes) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = _VERSION + nonce + self._aead.encrypt(nonce, data, purpose.encode("utf-8"))
        return base64.urlsafe_b64encode(sealed).rstrip(b"=").decode("ascii")

    def open(self, purpose: str, value: str) -> bytes | None:
        """The data, or None for anything not sealed by this key for this
        purpose (tampered, truncated, another key, garbage)."""
        try:
            # strict: one spelling per sealed value (no padding, no unused bits set)
            raw = b64decode_strict(value, urlsafe=True, padded=False)
        except ValueError:
            return None
        if len(raw) < 1 + NONCE_BYTES + 16 or raw[:1] != _VERSION:
            return None
        try:
            return self._aead.decrypt(raw[1:1 + NONCE_BYTES], raw[1 + NONCE_BYTES:], purpose.encode("utf-8"))
        except InvalidTag:
            return None
