"""The PROXY protocol header, parsed strictly (issue 32, item 3), and the
connection wrapper that reads it, in memory.

Before, Twisted's parser took ``PROXY TCP4 999.1.1.1 ...`` or a 200-digit
"address" as the client address, and a header whose first read was under 8
bytes closed the connection. Here: a table of good and bad headers, v1 and
v2 (``twistgw.engine.proxyheader.parse``), the same table fed one byte at a
time (a header arriving in pieces), and :class:`ProxyHeaderReader` on a
``StringTransport``: the protocol behind it is connected only once the
header is read, with the header's addresses as its peer and host; a bad or
slow header closes the connection before the protocol sees a byte. Over real
sockets: tests/integration/test_proxy_protocol_e2e.py.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport

from twistgw.engine.proxyheader import V2_SIGNATURE, ProxyHeaderError, parse
from twistgw.engine.proxyproto import ERRORS, ProxyHeaderReader

from support.proxyheaders import BAD, GOOD, v2
from support.trial import TestCase

REST = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"


def _whole(data: bytes) -> Any:
    found = parse(data + REST)
    assert found is not None
    header, used = found
    assert used == len(data)
    return None if header.source is None else (header.source, header.destination)


class ParseTests(TestCase):
    @pytest.mark.parametrize("data, expected", GOOD, ids=[str(i) for i in range(len(GOOD))])
    def test_good_headers(self, data: bytes, expected: Any) -> None:
        assert _whole(data) == expected

    @pytest.mark.parametrize("data, words", BAD, ids=[str(i) for i in range(len(BAD))])
    def test_bad_headers(self, data: bytes, words: str) -> None:
        with pytest.raises(ProxyHeaderError, match=words.replace("+", r"\+").replace("(", r"\(").replace(
                ")", r"\)")):
            parse(data + REST)

    @pytest.mark.parametrize("data, expected", GOOD, ids=[str(i) for i in range(len(GOOD))])
    def test_good_headers_in_pieces(self, data: bytes, expected: Any) -> None:
        for end in range(len(data)):
            assert parse(data[:end]) is None, end  # incomplete: read more
        assert _whole(data) == expected

    @pytest.mark.parametrize("data, words", BAD, ids=[str(i) for i in range(len(BAD))])
    def test_bad_headers_in_pieces_never_pass(self, data: bytes, words: str) -> None:
        for end in range(len(data) + len(REST) + 1):
            try:
                found = parse((data + REST)[:end])
            except ProxyHeaderError:
                return
            assert found is None, (end, found)
        raise AssertionError("never refused")

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=120))
    def test_any_bytes_give_a_valid_address_or_none(self, data: bytes) -> None:
        for blob in (data, b"PROXY TCP4 " + data, b"PROXY TCP6 " + data, V2_SIGNATURE + data):
            try:
                found = parse(blob)
            except ProxyHeaderError:
                continue
            if found is not None and found[0].source is not None:
                host, port = found[0].source
                address = ipaddress.ip_address(host)
                assert str(address) == host and 0 <= port <= 65535
                assert not address.is_unspecified and not address.is_multicast


class _Inner(Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.made = 0
        self.lost: Any = None
        self.peer: Any = None

    def connectionMade(self) -> None:
        self.made += 1
        self.peer = self.transport.getPeer()  # type: ignore[union-attr]

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Any = None) -> None:
        self.lost = reason


def _connected(timeout: float = 5.0) -> tuple[ProxyHeaderReader, _Inner, StringTransport, MemoryReactorClock]:
    inner, clock = _Inner(), MemoryReactorClock()
    reader = ProxyHeaderReader(inner, clock, timeout)
    transport = StringTransport(peerAddress=IPv4Address("TCP", "10.9.9.9", 5555))
    reader.makeConnection(transport)
    return reader, inner, transport, clock


class ReaderTests(TestCase):
    def test_the_protocol_behind_is_connected_once_the_header_is_read(self) -> None:
        reader, inner, transport, _ = _connected()
        header = b"PROXY TCP6 2001:db8::7 2001:db8::1 56324 443\r\n"
        for i in range(len(header)):  # one byte per read
            assert inner.made == 0
            reader.dataReceived(header[i:i + 1])
        assert inner.made == 1 and inner.peer == IPv6Address("TCP", "2001:db8::7", 56324)
        assert reader.getHost() == IPv6Address("TCP", "2001:db8::1", 443)
        reader.dataReceived(REST)
        assert inner.data == REST and not transport.disconnecting

    def test_bytes_after_the_header_in_the_same_read_go_behind_it(self) -> None:
        reader, inner, _, _ = _connected()
        reader.dataReceived(v2() + REST)
        assert inner.peer == IPv4Address("TCP", "198.51.100.9", 40000) and inner.data == REST

    def test_local_and_unknown_keep_the_connections_own_address(self) -> None:
        for header in (v2(command=0, family=0, block=b""), b"PROXY UNKNOWN\r\n"):
            reader, inner, _, _ = _connected()
            reader.dataReceived(header)
            assert inner.peer == IPv4Address("TCP", "10.9.9.9", 5555)

    def test_a_bad_header_closes_before_the_protocol_sees_a_byte(self) -> None:
        before = ERRORS.labels("invalid").value
        reader, inner, transport, _ = _connected()
        reader.dataReceived(b"PROXY TCP4 999.1.1.1 127.0.0.1 1 2\r\n" + REST)
        assert transport.disconnecting and transport.value() == b""
        assert inner.made == 0 and inner.data == b""
        reader.dataReceived(REST)
        assert inner.data == b""
        assert ERRORS.labels("invalid").value == before + 1
        reader.connectionLost(None)  # type: ignore[arg-type]
        assert inner.lost is None and inner.made == 0  # told, so its factory forgets it

    def test_a_slow_header_is_cut_off_at_the_timeout(self) -> None:
        before = ERRORS.labels("timeout").value
        reader, inner, transport, clock = _connected(timeout=2.0)
        reader.dataReceived(b"PROXY TCP4 1.2")
        clock.advance(1.9)
        reader.dataReceived(b".3.4 ")
        assert not transport.disconnecting
        clock.advance(0.2)
        assert transport.disconnecting and inner.made == 0
        assert ERRORS.labels("timeout").value == before + 1

    def test_a_complete_header_stops_the_timer(self) -> None:
        reader, inner, transport, clock = _connected(timeout=2.0)
        reader.dataReceived(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n")
        clock.advance(10)
        assert not transport.disconnecting and inner.made == 1 and not clock.getDelayedCalls()
