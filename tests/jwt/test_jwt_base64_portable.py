"""The base64 decoding used on Python 3.10 (no ``strict_mode``) in
``twistgw.api.b64``, the gateway's one strict decoder, accepts and refuses
exactly what the strict decoder of 3.11+ does."""

from __future__ import annotations

import binascii
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from twistgw.api import b64

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/=!. \n\x00"


def _outcome(decode, data: bytes):  # type: ignore[no-untyped-def]
    try:
        return decode(data)
    except (binascii.Error, ValueError):
        return "error"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="compares with 3.11's strict_mode")
@settings(deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=24))
@example("")
@example("QQ==")
@example("QQ!!")
@example("Q Q=")
def test_the_portable_decoder_matches_strict_mode(text: str) -> None:
    data = text.encode()
    strict = _outcome(lambda d: binascii.a2b_base64(d, strict_mode=True), data)
    assert _outcome(b64._checked_a2b, data) == strict


@settings(deadline=None)
@given(st.binary(max_size=40), st.booleans())
def test_one_spelling_per_byte_string(data: bytes, urlsafe: bool) -> None:
    """``b64decode_strict`` reads the canonical encoding back, and refuses
    every other spelling of the last character (unused low bits set)."""
    import base64

    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    text = encode(data)
    if urlsafe:
        text = text.rstrip(b"=")
    assert b64.b64decode_strict(text, urlsafe=urlsafe, padded=not urlsafe) == data
    body = text.rstrip(b"=")
    if len(body) % 4:
        alphabet = (b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                    + (b"-_" if urlsafe else b"+/"))
        last = alphabet.index(body[-1:])
        for low in range(1, 16 if len(body) % 4 == 2 else 4):
            twin = body[:-1] + alphabet[last + low:last + low + 1] + text[len(body):]
            assert _outcome(lambda d: b64.b64decode_strict(d, urlsafe=urlsafe, padded=not urlsafe), twin) == "error"
