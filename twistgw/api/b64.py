"""Strict base64 (RFC 4648): the one decoder for what a client sends.

Python's own decoders are lenient in ways an attacker can use:
``base64.b64decode`` without ``validate=True`` skips characters outside the
alphabet, and every mode accepts a last character whose unused low bits are
not zero, so several spellings decode to the same bytes (a sealed cookie or
a token with its last character changed would still be accepted). Here
there is exactly one spelling of each byte string:

* only the alphabet's characters (``+/`` for base64, ``-_`` for base64url);
* the padding as asked: ``padded=True`` requires the ``=`` that complete the
  last group (RFC 7617's Basic credentials), ``padded=False`` forbids them
  (base64url tokens and cookies, RFC 7515 §2);
* the bits past the last whole byte are zero (RFC 4648 §3.5).

Used for Basic credentials (:mod:`twistgw.api.basic`), JWT segments (the
``jwt`` plugin) and sealed OIDC cookies.
"""

from __future__ import annotations

import binascii
import sys

__all__ = ["b64decode_strict"]

_STANDARD = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
#: base64url to standard base64 for ``binascii``; ``+``, ``/`` and ``=``
#: (not base64url) become ``!`` so that the strict decoding refuses them.
_URL_TO_STANDARD = bytes.maketrans(b"-_+/=", b"+/!!!")
#: ``=`` inside the data (not as padding) becomes ``!``: refused.
_NO_PAD = bytes.maketrans(b"=", b"!")
#: The characters a canonical encoding may end with, by the length of the
#: last group: the bits past the last whole byte must be zero, i.e. the last
#: 6-bit value is a multiple of 16 (two characters, one byte) or of 4 (three
#: characters, two bytes). The same characters in both alphabets (they
#: differ only at values 62 and 63).
_CANONICAL_LAST = {2: frozenset(_STANDARD[0::16]), 3: frozenset(_STANDARD[0::4])}
_PAD = (b"", b"", b"==", b"=")


def _checked_a2b(data: bytes) -> bytes:
    """Python 3.10's way (no strict mode): refuse what strict mode refuses and
    ``a2b_base64`` would skip: a character outside the alphabet, padding
    first, anything but padding after it, and more padding than completes
    the last group."""
    head, _, tail = data.partition(b"=")
    rest = len(head) % 4
    if (data[:1] == b"=" or head.translate(None, _STANDARD) or tail.strip(b"=")
            or (rest >= 2 and len(data) > len(head) + 4 - rest)):
        raise binascii.Error("not base64")
    return binascii.a2b_base64(data)


if sys.version_info >= (3, 11):
    def _strict_a2b(data: bytes) -> bytes:
        # strict_mode: any character outside the alphabet is an error
        return binascii.a2b_base64(data, strict_mode=True)
else:
    _strict_a2b = _checked_a2b


def b64decode_strict(data: bytes | str, *, urlsafe: bool, padded: bool) -> bytes:
    """The bytes ``data`` encodes, when it is their one canonical encoding.

    :param urlsafe: the base64url alphabet (``-_``) instead of base64's (``+/``).
    :param padded: the ``=`` padding is required (True) or forbidden (False).
    :raise ValueError: anything else (``binascii.Error`` is a ValueError).
    """
    if isinstance(data, str):
        try:
            data = data.encode("ascii")
        except UnicodeEncodeError:
            raise ValueError("not base64: a character outside the alphabet") from None
    if padded:
        if len(data) % 4:
            raise ValueError("not base64: the length is not a multiple of four")
        body = data.rstrip(b"=")
        if len(data) - len(body) > 2 or _PAD[len(body) % 4] != data[len(body):]:
            raise ValueError("not base64: wrong padding")
    else:
        body = data
    rest = len(body) % 4
    if rest == 1:
        raise ValueError("not base64: the length is impossible")
    if rest and body[-1] not in _CANONICAL_LAST[rest]:
        raise ValueError("not base64: the last character has unused bits set (not the canonical encoding)")
    return _strict_a2b(body.translate(_URL_TO_STANDARD if urlsafe else _NO_PAD) + _PAD[rest])
