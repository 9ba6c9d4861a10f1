"""The HTTP/2 request header list, validated by the engine in one pass
(``engine/http2/headers.py``), agrees with ``h2``'s own validation
(``h2.utilities.validate_headers``) on generated header lists: every list
one refuses the other refuses (the engine also refuses names that are not
RFC 9110 tokens, which twistgw's ``Headers`` cannot hold). ``h2``'s checks
loop over every byte of every value in Python; the engine's use C's.
Plus the conversions: cookies joined, ``:authority`` as Host, the limits."""

from __future__ import annotations

import re

import pytest
from h2.exceptions import ProtocolError
from h2.utilities import HeaderValidationFlags, validate_headers
from hypothesis import example, given, settings
from hypothesis import strategies as st

from twistgw.engine.http2.headers import Malformed, TooLarge, request_fields, trailer_fields

REQUEST = HeaderValidationFlags(is_client=False, is_trailer=False, is_response_header=False, is_push_promise=False)
TRAILER = HeaderValidationFlags(is_client=False, is_trailer=True, is_response_header=False, is_push_promise=False)
BASE = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"gw.test"), (b":path", b"/")]

_NAMES = st.sampled_from([b":method", b":scheme", b":authority", b":path", b":status", b":protocol", b":other",
                          b":Path", b"host", b"te", b"connection", b"keep-alive", b"proxy-connection",
                          b"transfer-encoding", b"upgrade", b"cookie", b"x-a", b"X-A", b"x a", b"x:a", b"",
                          b"content-length", b"accept", b"x\x00", b"x\x7f", b"\xc3\xa9", b"x-\"q\""])
_VALUES = st.sampled_from([b"GET", b"CONNECT", b"POST", b"/", b"", b"http", b"gw.test", b"other.test", b"trailers",
                           b"gzip", b"Trailers", b" x", b"x ", b"a\tb", b"\tx", b"a\r\nb", b"a\x00b", b"a\nb",
                           b"websocket", b"5", b"v"])
LISTS = st.lists(st.tuples(_NAMES, _VALUES), max_size=8)
TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9a-z]+")


def h2_accepts(fields: list[tuple[bytes, bytes]], flags: HeaderValidationFlags) -> bool:
    try:
        list(validate_headers(fields, flags))
    except ProtocolError:
        return False
    return True


def tokens(fields: list[tuple[bytes, bytes]]) -> bool:
    return all(n[:1] == b":" or TOKEN.fullmatch(n) for n, _ in fields)


@settings(max_examples=3000, deadline=None)
@given(LISTS, st.booleans())
@example([], False)
@example([(b"x-a", b"1")], False)
@example([(b"host", b"a"), (b"host", b"a")], True)
def test_the_request_rules_are_h2s(extra: list[tuple[bytes, bytes]], with_base: bool) -> None:
    fields = (BASE + extra) if with_base else extra
    try:
        request_fields(fields)
        ours = True
    except Malformed:
        ours = False
    assert ours == (h2_accepts(fields, REQUEST) and tokens(fields)), fields


@settings(max_examples=2000, deadline=None)
@given(LISTS)
def test_the_trailer_rules_are_h2s(fields: list[tuple[bytes, bytes]]) -> None:
    try:
        trailer_fields(fields)
        ours = True
    except Malformed:
        ours = False
    assert ours == (h2_accepts(fields, TRAILER) and tokens(fields)), fields


def test_cookies_are_joined_and_authority_is_host() -> None:
    got = request_fields(BASE + [(b"cookie", b"a=1"), (b"x-b", b"2"), (b"cookie", b"b=2")])
    assert got.headers.getRawHeaders(b"cookie") == [b"a=1; b=2"]
    assert got.headers.getRawHeaders(b"host") == [b"gw.test"]
    assert (got.method, got.target) == (b"GET", b"/")
    assert request_fields(BASE[:2] + BASE[3:] + [(b"host", b"h.test")]).headers.getRawHeaders(b"host") == [b"h.test"]


def test_a_long_value_is_checked_in_c_not_byte_by_byte() -> None:
    token = b"Bearer " + b"a" * 100_000
    got = request_fields(BASE[:1] + BASE[1:] + [(b"authorization", token[:16000])])
    assert got.headers.getRawHeaders(b"authorization")[0].startswith(b"Bearer a")
    with pytest.raises(Malformed):
        request_fields(BASE + [(b"authorization", token[:15000] + b"\r\nx")])


def test_the_http11_head_limits_apply() -> None:
    with pytest.raises(TooLarge) as info:
        request_fields(BASE + [(b"x-%d" % i, b"v") for i in range(101)])
    assert info.value.status == 431
    with pytest.raises(TooLarge) as info:
        request_fields(BASE[:3] + [(b":path", b"/" + b"p" * 8192)])
    assert info.value.status == 414
