"""The few LDAP messages of the request path, encoded and decoded directly.

A directory check is a simple bind and a base-scope search for one
attribute. ldaptor encodes and decodes those through a generic tree of BER
objects, which cost about 150 µs of CPU per check (a third of the LDAP work
of an uncached request, see docs/performance.md). This module handles just
those shapes, producing the same ldaptor objects the rest of the plugin
reads, and hands anything else (controls, referrals, extended responses,
intermediate responses, a malformed message) to ldaptor's own decoder.

Tests check both directions against ldaptor (``tests/ldap/test_ber.py``): every
message encoded here decodes with ldaptor to the same fields, and every
response ldaptor encodes decodes here to the same objects.
"""

from __future__ import annotations

from typing import Any

from ldaptor.protocols import pureldap

#: Largest LDAP message ID (RFC 4511 §4.1.1.1: MessageID ::= INTEGER (0 .. maxInt)).
MAX_ID = 2**31 - 1

_BIND_REQUEST = 0x60      # [APPLICATION 0] constructed
_BIND_RESPONSE = 0x61     # [APPLICATION 1]
_SEARCH_REQUEST = 0x63    # [APPLICATION 3]
_SEARCH_ENTRY = 0x64      # [APPLICATION 4]
_SEARCH_DONE = 0x65       # [APPLICATION 5]


#: answers that are a bare LDAPResult, by tag
_RESULTS = {_BIND_RESPONSE: pureldap.LDAPBindResponse, _SEARCH_DONE: pureldap.LDAPSearchResultDone}


class Unhandled(Exception):
    """Not one of the shapes decoded here: let ldaptor decode it."""


# -- encoding ------------------------------------------------------------------


def _length(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(raw),)) + raw


def _tlv(tag: int, content: bytes) -> bytes:
    return bytes((tag,)) + _length(len(content)) + content


def _integer(value: int, tag: int = 0x02) -> bytes:
    return _tlv(tag, value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True))


def bind_request(msg_id: int, dn: bytes, password: bytes) -> bytes:
    """LDAPMessage(BindRequest(version 3, dn, simple password))."""
    op = _tlv(_BIND_REQUEST, b"\x02\x01\x03" + _tlv(0x04, dn) + _tlv(0x80, password))
    return _tlv(0x30, _integer(msg_id) + op)


#: SearchRequest scopes (RFC 4511 §4.5.1.2)
SCOPE_BASE, SCOPE_ONE, SCOPE_SUB = 0, 1, 2


def search_request(msg_id: int, base: bytes, filter_ber: bytes, attributes: list[bytes],
                   size_limit: int, time_limit: int, scope: int = SCOPE_BASE) -> bytes:
    """LDAPMessage(SearchRequest(base, scope, never deref, limits, typesOnly
    false, filter, attributes)); ``filter_ber`` is the filter's encoding
    (ldaptor's ``toWire()`` computed once per configuration, or a
    :class:`FilterTemplate` filled in)."""
    attrs = _tlv(0x30, b"".join(_tlv(0x04, a) for a in attributes))
    op = _tlv(_SEARCH_REQUEST,
              _tlv(0x04, base) + bytes((0x0A, 0x01, scope, 0x0A, 0x01, 0x00)) + _integer(size_limit)
              + _integer(time_limit) + b"\x01\x01\x00" + filter_ber + attrs)
    return _tlv(0x30, _integer(msg_id) + op)


# -- filter templates ----------------------------------------------------------

#: Filter choices whose content starts with an attribute description followed by
#: an assertion value (RFC 4511 §4.5.1.7): equality, >=, <=, approx.
_ASSERTIONS = frozenset({0xA3, 0xA5, 0xA6, 0xA8})
_SUBSTRINGS = 0xA4
_EXTENSIBLE = 0xA9
_AND_OR_NOT = frozenset({0xA0, 0xA1, 0xA2})


class FilterTemplate:
    """An encoded search filter with one placeholder in assertion values,
    filled in per request with raw value bytes.

    Built from ldaptor's encoding of the filter with a unique ``marker`` where
    the value goes; :meth:`encode` puts the value there and recomputes the
    lengths. In BER an assertion value is an opaque octet string, so nothing
    in the value can change the filter's structure: the result is what
    ldaptor encodes for the filter text with the value escaped by
    ``pureldap.escape`` (RFC 4515), which the property tests check.

    :raise ValueError: when the marker is missing or sits anywhere but in an
        assertion value (an attribute name, a matching rule).
    """

    def __init__(self, filter_ber: bytes, marker: bytes) -> None:
        self.marker = marker
        try:
            tag, start, end = _read(filter_ber, 0, len(filter_ber))
            if end != len(filter_ber):
                raise ValueError("trailing bytes after the filter")
            self._tree = self._parse(filter_ber, tag, start, end, "filter")
        except Unhandled as exc:
            raise ValueError(f"cannot read the encoded filter: {exc}") from None
        self.count = filter_ber.count(marker)
        if self.count == 0:
            raise ValueError("the placeholder is not in an assertion value")

    def _parse(self, data: bytes, tag: int, start: int, end: int, role: str) -> Any:
        if tag & 0x20:  # constructed
            children = []
            pos, index = start, 0
            while pos < end:
                ctag, cs, ce = _read(data, pos, end)
                children.append(self._parse(data, ctag, cs, ce, self._role(tag, role, index, ctag)))
                pos, index = ce, index + 1
            return (tag, children)
        content = data[start:end]
        if self.marker in content and role != "value":
            raise ValueError("the placeholder must be inside an assertion value, not an attribute"
                             " name or matching rule")
        return (tag, content.split(self.marker) if role == "value" else [content])

    @staticmethod
    def _role(parent: int, role: str, index: int, tag: int) -> str:
        if parent in _AND_OR_NOT:
            return "filter"
        if parent in _ASSERTIONS:
            return "value" if index == 1 else "name"
        if parent == _SUBSTRINGS:
            return "substrings" if index == 1 else "name"
        if role == "substrings":
            return "value"
        if parent == _EXTENSIBLE:
            return "value" if tag == 0x83 else "name"
        return "name"

    def encode(self, value: bytes) -> bytes:
        """The filter's BER with ``value`` (raw bytes, not escaped) in place."""
        return self._encode(self._tree, value)

    def encode_any(self, values: list[bytes]) -> bytes:
        """``(|F(v1)F(v2)...)``; a single value gives just ``F(v1)``."""
        if len(values) == 1:
            return self.encode(values[0])
        return _tlv(0xA1, b"".join(self._encode(self._tree, v) for v in values))

    def _encode(self, node: Any, value: bytes) -> bytes:
        tag, parts = node
        if tag & 0x20:
            return _tlv(tag, b"".join(self._encode(child, value) for child in parts))
        return _tlv(tag, value.join(parts))


# -- decoding ------------------------------------------------------------------


def _read(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the TLV at ``pos``;
    raises Unhandled for anything that is not a definite-length TLV inside
    ``end``."""
    if pos + 2 > end:
        raise Unhandled("truncated")
    tag = data[pos]
    if tag & 0x1F == 0x1F:
        raise Unhandled("multi-byte tag")
    first = data[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or pos + count > end:
            raise Unhandled("indefinite or oversized length")
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    if pos + length > end:
        raise Unhandled("length past the end")
    return tag, pos, pos + length


def _expect(data: bytes, pos: int, end: int, tag: int, what: str) -> tuple[int, int]:
    """(start, end) of the content of the TLV at ``pos``, which must have ``tag``."""
    found, start, stop = _read(data, pos, end)
    if found != tag:
        raise Unhandled(what)
    return start, stop


def _unsigned(data: bytes, start: int, end: int) -> int:
    if not 0 < end - start <= 5:
        raise Unhandled("integer size")
    return int.from_bytes(data[start:end], "big", signed=True)


def message_length(buffer: bytes) -> int | None:
    """Bytes the first message in ``buffer`` takes, or None when more must
    arrive first. Raises Unhandled when it cannot be framed (ldaptor then
    decides what the bytes are)."""
    if len(buffer) < 2:
        return None
    if buffer[0] != 0x30:
        raise Unhandled("not a SEQUENCE")
    first = buffer[1]
    if first < 0x80:
        return 2 + first
    count = first & 0x7F
    if count == 0 or count > 4:
        raise Unhandled("indefinite or oversized length")
    if len(buffer) < 2 + count:
        return None
    return 2 + count + int.from_bytes(buffer[2:2 + count], "big")


def _result(data: bytes, pos: int, end: int) -> tuple[int, bytes, bytes]:
    s, e = _expect(data, pos, end, 0x0A, "resultCode")
    code = _unsigned(data, s, e)
    ms, me = _expect(data, e, end, 0x04, "matchedDN")
    ds, de = _expect(data, me, end, 0x04, "diagnosticMessage")
    if de != end:
        raise Unhandled("referral or other optional parts")
    return code, data[ms:me], data[ds:de]


def decode(message: bytes) -> tuple[int, Any]:
    """(message ID, ldaptor protocol op) of one complete LDAPMessage holding a
    BindResponse, SearchResultEntry or SearchResultDone without controls.
    Raises Unhandled for anything else."""
    tag, s, end = _read(message, 0, len(message))
    if tag != 0x30 or end != len(message):
        raise Unhandled("envelope")
    s, e = _expect(message, s, end, 0x02, "messageID")
    msg_id = _unsigned(message, s, e)
    op_tag, s, op_end = _read(message, e, end)
    if op_end != end:
        raise Unhandled("controls")
    result_class = _RESULTS.get(op_tag)
    if result_class is not None:
        code, matched, diagnostic = _result(message, s, op_end)
        return msg_id, result_class(resultCode=code, matchedDN=matched, errorMessage=diagnostic)
    if op_tag == _SEARCH_ENTRY:
        ds, de = _expect(message, s, op_end, 0x04, "objectName")
        ls, le = _expect(message, de, op_end, 0x30, "attributes")
        if le != op_end:
            raise Unhandled("attributes")
        attributes: list[tuple[bytes, list[bytes]]] = []
        pos = ls
        while pos < le:
            ps, pe = _expect(message, pos, le, 0x30, "PartialAttribute")
            ts, te = _expect(message, ps, pe, 0x04, "attribute type")
            vs, ve = _expect(message, te, pe, 0x31, "attribute values")
            if ve != pe:
                raise Unhandled("attribute values")
            values = []
            vpos = vs
            while vpos < ve:
                xs, vpos = _expect(message, vpos, ve, 0x04, "attribute value")
                values.append(message[xs:vpos])
            attributes.append((message[ts:te], values))
            pos = pe
        return msg_id, pureldap.LDAPSearchResultEntry(objectName=message[ds:de], attributes=attributes)
    raise Unhandled(f"operation tag {op_tag:#x}")


__all__ = ["MAX_ID", "SCOPE_BASE", "SCOPE_ONE", "SCOPE_SUB", "FilterTemplate", "Unhandled", "bind_request",
           "decode", "message_length", "search_request"]
