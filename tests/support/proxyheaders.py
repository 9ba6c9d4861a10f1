"""PROXY protocol headers, good and bad, v1 and v2, with what each must
give (the source and destination) or the words of its refusal: the table
tests/unit/test_proxy_header.py parses and
tests/integration/test_proxy_protocol_e2e.py sends to a real gateway."""

from __future__ import annotations

import socket
import struct
from typing import Any

#: the protocol's own constant (proxy-protocol.txt §2.2), written out here so
#: that the table does not depend on the parser it tests
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
#: twistgw's bound on a version 2 header's length (docs/gateways.md)
MAX_V2_LENGTH = 4096

__all__ = ["BAD", "GOOD", "v2", "v2_6"]


def v2(command: int = 1, family: int = 0x11, block: bytes | None = None, length: int | None = None,
       version: int = 2) -> bytes:
    if block is None:
        block = (socket.inet_pton(socket.AF_INET, "198.51.100.9") + socket.inet_pton(socket.AF_INET, "192.0.2.1")
                 + struct.pack("!HH", 40000, 443))
    size = len(block) if length is None else length
    return V2_SIGNATURE + bytes([version << 4 | command, family]) + struct.pack("!H", size) + block


def v2_6(tlvs: bytes = b"", family: int = 0x21) -> bytes:
    block = (socket.inet_pton(socket.AF_INET6, "2001:db8::7") + socket.inet_pton(socket.AF_INET6, "2001:db8::1")
             + struct.pack("!HH", 1, 65535) + tlvs)
    return v2(family=family, block=block)


GOOD: list[tuple[bytes, Any]] = [
    (b"PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\r\n", (("203.0.113.7", 56324), ("192.0.2.1", 443))),
    (b"PROXY TCP4 0.1.2.3 10.0.0.1 0 65535\r\n", (("0.1.2.3", 0), ("10.0.0.1", 65535))),
    (b"PROXY TCP6 2001:DB8::7 2001:db8:0:0::1 1 2\r\n", (("2001:db8::7", 1), ("2001:db8::1", 2))),
    (b"PROXY TCP6 ::ffff:203.0.113.7 ::1 1 2\r\n", (("::ffff:cb00:7107", 1), ("::1", 2))),
    (b"PROXY UNKNOWN\r\n", None),
    (b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", None),
    (b"PROXY TCP4 255.255.255.254 1.1.1.1 1 1\r\n", (("255.255.255.254", 1), ("1.1.1.1", 1))),
    (v2(), (("198.51.100.9", 40000), ("192.0.2.1", 443))),
    (v2_6(), (("2001:db8::7", 1), ("2001:db8::1", 65535))),
    (v2_6(b"\x04\x00\x00" + b"\xea\x00\x05vpc-1"), (("2001:db8::7", 1), ("2001:db8::1", 65535))),  # TLVs
    (v2(block=v2()[16:] + b"\x01\x00\x02h2"), (("198.51.100.9", 40000), ("192.0.2.1", 443))),  # an ALPN TLV
    (v2(command=0, family=0, block=b""), None),  # LOCAL: a health check of the proxy itself
    (v2(command=0, family=0x31, block=b"x" * 216), None),  # LOCAL skips any block
]

BAD: list[tuple[bytes, str]] = [
    # the examples
    (b"PROXY TCP4 999.1.1.1 192.0.2.1 1 2\r\n", "not an IPv4 address"),
    (b"PROXY TCP4 " + b"1" * 60 + b" 192.0.2.1 1 2\r\n", "not an IPv4 address"),
    (b"PROXY TCP4 " + b"1" * 200 + b" 192.0.2.1 1 2\r\n", "no CRLF in the first 107"),
    # family against address syntax
    (b"PROXY TCP4 2001:db8::1 192.0.2.1 1 2\r\n", "not an IPv4 address"),
    (b"PROXY TCP6 192.0.2.7 2001:db8::1 1 2\r\n", "not an IPv6 address"),
    (b"PROXY TCP6 fe80::1%eth0 2001:db8::1 1 2\r\n", "not an IPv6 address"),
    (b"PROXY TCP4 01.2.3.4 192.0.2.1 1 2\r\n", "not an IPv4 address"),
    (b"PROXY TCP4 1.2.3 192.0.2.1 1 2\r\n", "not an IPv4 address"),
    (b"PROXY TCP4 1.2.3.4.5 192.0.2.1 1 2\r\n", "not an IPv4 address"),
    (b"PROXY TCP4 0x7f.0.0.1 192.0.2.1 1 2\r\n", "not an IPv4 address"),
    (b"PROXY TCP4 a.example 192.0.2.1 1 2\r\n", "not an IPv4 address"),
    (b"PROXY TCP5 1.2.3.4 192.0.2.1 1 2\r\n", "unknown version 1 protocol"),
    (b"PROXY tcp4 1.2.3.4 192.0.2.1 1 2\r\n", "unknown version 1 protocol"),
    # not unicast (Envoy's check)
    (b"PROXY TCP4 0.0.0.0 192.0.2.1 1 2\r\n", "not a unicast address"),
    (b"PROXY TCP4 255.255.255.255 192.0.2.1 1 2\r\n", "not a unicast address"),
    (b"PROXY TCP4 224.0.0.1 192.0.2.1 1 2\r\n", "not a unicast address"),
    (b"PROXY TCP6 :: 2001:db8::1 1 2\r\n", "not a unicast address"),
    (b"PROXY TCP6 ff02::1 2001:db8::1 1 2\r\n", "not a unicast address"),
    # ports
    (b"PROXY TCP4 1.2.3.4 192.0.2.1 65536 2\r\n", "not a port"),
    (b"PROXY TCP4 1.2.3.4 192.0.2.1 01 2\r\n", "not a port"),
    (b"PROXY TCP4 1.2.3.4 192.0.2.1 +1 2\r\n", "not a port"),
    (b"PROXY TCP4 1.2.3.4 192.0.2.1 -1 2\r\n", "not a port"),
    (b"PROXY TCP4 1.2.3.4 192.0.2.1 1 0x50\r\n", "not a port"),
    (b"PROXY TCP4 1.2.3.4 192.0.2.1 1 " + b"9" * 20 + b"\r\n", "not a port"),
    # spacing, line ends, characters
    (b"PROXY TCP4  1.2.3.4 192.0.2.1 1 2\r\n", "exactly"),
    (b"PROXY TCP4 1.2.3.4 192.0.2.1 1 2 \r\n", "exactly"),
    (b"PROXY TCP4 1.2.3.4 192.0.2.1 1\r\n", "exactly"),
    (b"PROXY  TCP4 1.2.3.4 192.0.2.1 1 2\r\n", "unknown version 1 protocol"),
    (b"PROXY\tTCP4 1.2.3.4 192.0.2.1 1 2\r\n", "not a PROXY protocol header"),
    (b"PROXY TCP4\t1.2.3.4 192.0.2.1 1 2\r\n", "visible ASCII"),
    (b"PROXY TCP4 1.2.3.4 192.0.2.1 1 2\n", "visible ASCII"),
    (b"PROXY TCP4 1.2.3.4 192.0.2.1 1 2\r\r\n", "visible ASCII"),
    (b"PROXY TCP4 1.2.3.4 192.0.2.1 1 2\x00\r\n", "visible ASCII"),
    (b"PROXY TCP4 1.2.3.4 192.0.2.1 1 \xff\r\n", "visible ASCII"),
    (b"PROXY UNKNOWN" + b" " * 100 + b"\r\n", "no CRLF in the first 107"),
    (b"PROXY\r\n", "not a PROXY protocol header"),
    (b"proxy TCP4 1.2.3.4 192.0.2.1 1 2\r\n", "not a PROXY protocol header"),
    (b"GET / HTTP/1.1\r\n", "not a PROXY protocol header"),
    (b"\x16\x03\x01\x02\x00", "not a PROXY protocol header"),  # a TLS ClientHello
    # version 2
    (V2_SIGNATURE[:11] + b"X" + b"\x21\x11\x00\x0c" + b"\x00" * 12, "bad version 2 signature"),
    (v2(version=1), "unsupported PROXY protocol version 1"),
    (v2(version=3), "unsupported PROXY protocol version 3"),
    (v2(command=2), "unknown version 2 command 2"),
    (v2(command=0xF), "unknown version 2 command 15"),
    (v2(family=0x12), "family/transport 0x12"),  # DGRAM
    (v2(family=0x10), "family/transport 0x10"),  # UNSPEC transport
    (v2(family=0x01), "family/transport 0x01"),  # AF_UNSPEC with PROXY
    (v2(family=0x31, block=b"\x00" * 216), "family/transport 0x31"),  # AF_UNIX
    (v2(family=0x41), "family/transport 0x41"),
    (v2(block=v2()[16:][:11]), "too short (12 needed)"),
    (v2(family=0x21), "too short (36 needed)"),  # an IPv4-sized block for INET6
    (v2(length=MAX_V2_LENGTH + 1), "over the limit"),
    (v2(length=0xFFFF), "over the limit"),
    (v2(block=v2()[16:] + b"\x04\x00"), "cut short"),
    (v2(block=v2()[16:] + b"\x04\x00\x05abc"), "runs past the header"),
    (v2(block=v2()[16:] + b"\x04\x00\x01a\x05"), "cut short"),
    (v2(block=socket.inet_aton("0.0.0.0") + socket.inet_aton("1.1.1.1") + b"\x00\x01\x00\x02"),
     "not a unicast address"),
    (v2(block=socket.inet_aton("1.1.1.1") + socket.inet_aton("239.1.1.1") + b"\x00\x01\x00\x02"),
     "not a unicast address"),
]
