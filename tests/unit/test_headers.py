"""``twistgw.Headers`` (``RequestContext.headers``) behaves as Twisted's
``Headers``, the type plugins were written against."""

from __future__ import annotations

import pytest
from twisted.web.http_headers import Headers as TwistedHeaders

from twistgw import sdk
from twistgw.api.headers import Headers, InvalidHeaderName, canonical_name

from support.trial import TestCase


def _both(script):
    ours, theirs = sdk.Headers(), TwistedHeaders()
    return script(ours), script(theirs), ours, theirs


class HeadersTests(TestCase):
    @pytest.mark.parametrize("script", [
        lambda h: (h.addRawHeader(b"x-a", b"1"), h.addRawHeader(b"X-A", b"2"), h.getRawHeaders(b"x-a"))[-1],
        lambda h: (h.setRawHeaders("X-Name", ["Zoë"]), h.getRawHeaders("x-name"), h.getRawHeaders(b"x-name"))[1:],
        lambda h: (h.setRawHeaders(b"x-b", [b"a\r\nb"]), h.getRawHeaders(b"x-b"))[-1],
        lambda h: (h.setRawHeaders(b"x-c", [b"v"]), h.removeHeader(b"X-C"), h.hasHeader(b"x-c"),
                   h.getRawHeaders(b"x-c", "absent"))[2:],
        lambda h: (h.addRawHeader(b"etag", b"e"), h.addRawHeader(b"www-authenticate", b"w"),
                   h.addRawHeader(b"content-type", b"t"), list(h.getAllRawHeaders()))[-1],
        lambda h: (h.setRawHeaders(b"x-e", []), h.getRawHeaders(b"x-e"), h.hasHeader(b"x-e"))[1:],
    ])
    def test_same_answers_as_twisted(self, script) -> None:
        ours, theirs, _, _ = _both(script)
        assert ours == theirs

    def test_names_must_be_tokens(self) -> None:
        h = sdk.Headers()
        with pytest.raises(InvalidHeaderName):
            h.addRawHeader(b"bad name", b"v")
        with pytest.raises(InvalidHeaderName):
            canonical_name("x:y")

    def test_constructor_copy_and_equality(self) -> None:
        h = sdk.Headers({b"x-a": [b"1"], "X-B": ["2"]})
        assert list(h.getAllRawHeaders()) == [(b"X-A", [b"1"]), (b"X-B", [b"2"])]
        c = h.copy()
        assert c == h
        c.addRawHeader(b"x-a", b"more")
        assert c != h and h.getRawHeaders(b"x-a") == [b"1"]

    def test_set_raw_headers_refuses_a_single_value(self) -> None:
        with pytest.raises(TypeError):
            sdk.Headers().setRawHeaders(b"x-a", b"value")


class HeadersRawDoorTests(TestCase):
    def test_raw_is_the_live_dict_and_adopt_takes_one_without_copying(self):
        raw = {b"X-A": [b"1"]}
        h = Headers.adopt(raw)
        assert h.raw is raw and h.getRawHeaders(b"x-a") == [b"1"]
        h.addRawHeader(b"x-b", b"2")
        assert raw[b"X-B"] == [b"2"]
