"""The base64url decoding used on Python 3.10 (no ``strict_mode``) accepts
and refuses exactly what the strict decoder of 3.11+ does."""

from __future__ import annotations

import binascii
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from twistgw_jwt import _token

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
    assert _outcome(_token._checked_a2b, data) == strict
