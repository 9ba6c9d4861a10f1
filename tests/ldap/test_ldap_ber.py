"""twistgw_ldap._ber against ldaptor: the fast codec of the directory check
must say exactly what ldaptor would, and leave everything else to ldaptor."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from twistgw_ldap._ldaptor import LDAPClient, parse_filter, pureber, pureldap
from twisted.internet.testing import StringTransport

from twistgw_ldap import _ber
from twistgw_ldap._client import Client

from support.trial import TestCase

ids = st.integers(min_value=1, max_value=_ber.MAX_ID)
blobs = st.binary(max_size=300)
codes = st.integers(min_value=0, max_value=123)


def ldaptor_decode(data: bytes) -> Any:
    msg, used = pureber.berDecodeObject(LDAPClient.berdecoder, data)
    assert used == len(data)
    return msg


def _same_result(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    assert (a.resultCode, a.matchedDN, a.errorMessage) == (b.resultCode, b.matchedDN, b.errorMessage)


def _client() -> tuple[Client, list[Any]]:
    client = Client()
    client.makeConnection(StringTransport())
    seen: list[Any] = []

    def handler(msg: Any) -> bool:
        seen.append(msg)
        return isinstance(msg, pureldap.LDAPSearchResultDone)

    client.send_encoded(7, b"(a search)", handler)
    return client, seen


class LdapBerTests(TestCase):
    @settings(max_examples=200, deadline=None)
    @given(ids, blobs, blobs)
    def test_bind_request_is_what_ldaptor_sends(self, msg_id: int, dn: bytes, password: bytes) -> None:
        ours = _ber.bind_request(msg_id, dn, password)
        theirs = pureldap.LDAPMessage(pureldap.LDAPBindRequest(dn=dn, auth=password), id=msg_id).toWire()
        assert ours == theirs

    @settings(max_examples=200, deadline=None)
    @given(ids, blobs, st.sampled_from(["(objectClass=*)", "(&(objectClass=person)(uid=a*))", "(!(cn=x))"]),
           st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=3),
           st.integers(min_value=0, max_value=2**31 - 1), st.integers(min_value=0, max_value=2**31 - 1))
    def test_search_request_is_what_ldaptor_sends(self, msg_id: int, base: bytes, text: str, attrs: list[bytes],
                                                  size: int, seconds: int) -> None:
        flt = parse_filter(text)
        ours = _ber.search_request(msg_id, base, flt.toWire(), attrs, size, seconds)
        theirs = pureldap.LDAPMessage(pureldap.LDAPSearchRequest(
            baseObject=base, scope=pureldap.LDAP_SCOPE_baseObject,
            derefAliases=pureldap.LDAP_DEREF_neverDerefAliases, sizeLimit=size, timeLimit=seconds,
            typesOnly=0, filter=flt, attributes=attrs), id=msg_id).toWire()
        assert ours == theirs

    @settings(max_examples=200, deadline=None)
    @given(ids, codes, blobs, blobs, st.sampled_from([pureldap.LDAPBindResponse, pureldap.LDAPSearchResultDone]))
    def test_results_decode_as_ldaptor_decodes_them(self, msg_id: int, code: int, matched: bytes, message: bytes,
                                                    kind: Any) -> None:
        wire = pureldap.LDAPMessage(kind(resultCode=code, matchedDN=matched, errorMessage=message),
                                    id=msg_id).toWire()
        got_id, got = _ber.decode(wire)
        expected = ldaptor_decode(wire)
        assert got_id == expected.id == msg_id
        _same_result(got, expected.value)

    @settings(max_examples=200, deadline=None)
    @given(ids, blobs, st.lists(st.tuples(st.binary(min_size=1, max_size=30),
                                          st.lists(st.binary(max_size=200), max_size=4)), max_size=4))
    def test_entries_decode_as_ldaptor_decodes_them(self, msg_id: int, dn: bytes, attributes: list[Any]) -> None:
        wire = pureldap.LDAPMessage(pureldap.LDAPSearchResultEntry(objectName=dn, attributes=attributes),
                                    id=msg_id).toWire()
        got_id, got = _ber.decode(wire)
        expected = ldaptor_decode(wire).value
        assert got_id == msg_id
        assert isinstance(got, pureldap.LDAPSearchResultEntry)
        assert got.objectName == expected.objectName == dn
        assert [(t, list(v)) for t, v in got.attributes] == [(t, list(v)) for t, v in expected.attributes]

    def test_other_shapes_are_left_to_ldaptor(self) -> None:
        done = pureldap.LDAPSearchResultDone(resultCode=0)
        with_controls = pureldap.LDAPMessage(done, id=3, controls=[(b"1.2.3", None, None)]).toWire()
        extended = pureldap.LDAPMessage(pureldap.LDAPExtendedResponse(
            resultCode=52, responseName=b"1.3.6.1.4.1.1466.20036"), id=0).toWire()
        reference = pureldap.LDAPMessage(pureldap.LDAPSearchResultReference(
            uris=[pureldap.LDAPString(b"ldap://elsewhere/")]), id=4).toWire()
        # an LDAPResult with a referral ([3]) after the diagnostic message
        referral = (b"\x30\x1b\x02\x01\x05\x65\x16\x0a\x01\x0a\x04\x00\x04\x00"
                    b"\xa3\x0d\x04\x0bldap://x/dc")
        for wire in (with_controls, extended, reference, referral):
            with pytest.raises(_ber.Unhandled):
                _ber.decode(wire)
        for broken in (b"\x30", b"\x30\x80\x00\x00", b"\x31\x03\x02\x01\x01", b"\x30\x05\x02\x01"):
            with pytest.raises(_ber.Unhandled):
                _ber.decode(broken)

    def test_client_frames_answers_however_they_are_split(self) -> None:
        entry = pureldap.LDAPMessage(pureldap.LDAPSearchResultEntry(
            objectName=b"uid=alice", attributes=[(b"memberOf", [b"cn=a", b"cn=b"])]), id=7).toWire()
        ref = pureldap.LDAPMessage(pureldap.LDAPSearchResultReference(
            uris=[pureldap.LDAPString(b"ldap://x/")]), id=7).toWire()
        done = pureldap.LDAPMessage(pureldap.LDAPSearchResultDone(resultCode=0), id=7).toWire()
        stream = entry + ref + done
        for cut in range(len(stream) + 1):
            client, seen = _client()
            client.dataReceived(stream[:cut])
            client.dataReceived(stream[cut:])
            assert [type(m).__name__ for m in seen] == [
                "LDAPSearchResultEntry", "LDAPSearchResultReference", "LDAPSearchResultDone"], cut
            assert seen[0].attributes == [(b"memberOf", [b"cn=a", b"cn=b"])]
            assert 7 not in client.onwire and client.buffer == b""

    def test_notice_of_disconnection_reaches_ldaptor(self) -> None:
        client, seen = _client()
        notices: list[Any] = []
        client.unsolicitedNotification = notices.append  # type: ignore[method-assign]
        client.dataReceived(pureldap.LDAPMessage(pureldap.LDAPExtendedResponse(
            resultCode=52, responseName=b"1.3.6.1.4.1.1466.20036"), id=0).toWire())
        assert len(notices) == 1 and notices[0].resultCode == 52
        assert seen == []

    def test_message_ids_wrap_and_skip_those_in_use(self) -> None:
        client = Client()
        client._last_id = _ber.MAX_ID - 1
        client.onwire[1] = object()  # type: ignore[assignment]
        assert client.next_id() == _ber.MAX_ID
        assert client.next_id() == 2  # 1 is still waiting for its answer
