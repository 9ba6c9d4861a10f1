"""The PROXY protocol header (HAProxy's ``proxy-protocol.txt``, versions 1
and 2), parsed strictly: what a load balancer says about the client in
front of it becomes the client address, so nothing that is not exactly a
header gets through.

:func:`parse` takes the bytes received so far and answers ``None`` (not
complete yet: read more), ``(header, length)``, or raises
:class:`ProxyHeaderError` (close the connection: Envoy's
``proxy_protocol`` listener filter does the same on any error).

Version 1, one text line::

    PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\\r\\n
    PROXY TCP6 2001:db8::7 2001:db8::1 56324 443\\r\\n
    PROXY UNKNOWN ...\\r\\n           (the proxy's own connection: the peer's address is kept)

at most 107 bytes with its CRLF; single spaces; addresses in the family
the line names (IPv4 dotted quad without leading zeros, IPv6 without a
zone), unicast (not ``0.0.0.0``/``::``, broadcast or multicast, as Envoy
checks); ports 0 to 65535 in decimal, no sign, no leading zero; nothing but
visible ASCII before the CRLF.

Version 2, binary: the 12-byte signature, version 2, command ``LOCAL`` (a
health check of the proxy itself: the block is skipped, the peer's address
kept) or ``PROXY``; for ``PROXY`` the family ``AF_INET`` or ``AF_INET6``
over ``STREAM`` (``UNSPEC``, ``AF_UNIX`` and ``DGRAM`` are refused, as
Envoy refuses all but INET/INET6), an address block of the family's size at
least, and TLVs (type, 16-bit length, value) that fill the rest exactly.
The length is bounded by :data:`MAX_V2_LENGTH`. TLVs are checked for shape
and then ignored (``PP2_TYPE_CRC32C`` included, as Envoy does).
"""

from __future__ import annotations

import ipaddress
import re
import struct

__all__ = ["MAX_V1_LENGTH", "MAX_V2_LENGTH", "V2_SIGNATURE", "ProxyHeader", "ProxyHeaderError", "parse"]

#: the longest version 1 line, CRLF included (proxy-protocol.txt §2.1)
MAX_V1_LENGTH = 107
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
#: the most bytes of addresses and TLVs a version 2 header may announce:
#: load balancers send a few dozen (AWS's VPC endpoint id, Azure's link id,
#: HAProxy's TLS facts); the 16-bit field would allow 65,535 per connection
MAX_V2_LENGTH = 4096

_V1_PREFIX = b"PROXY "
_PORT = re.compile(r"0|[1-9][0-9]{0,4}")
_IPV4 = re.compile(r"(?:0|[1-9][0-9]{0,2})(?:\.(?:0|[1-9][0-9]{0,2})){3}")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]{2,45}")
#: visible ASCII and the space: what a version 1 line may hold before its CRLF
_V1_TEXT = re.compile(rb"[\x20-\x7e]*")
_AF_INET, _AF_INET6, _STREAM = 1, 2, 1
_LOCAL, _PROXY = 0, 1


class ProxyHeaderError(ValueError):
    """Not a valid PROXY protocol header; the message says why."""


class ProxyHeader:
    """What a header says: ``source`` and ``destination`` as ``(host,
    port)`` (``host`` in its canonical text form), or both None when the
    connection's own addresses stand (``LOCAL``, ``UNKNOWN``)."""

    __slots__ = ("version", "source", "destination")

    def __init__(self, version: int, source: tuple[str, int] | None = None,
                 destination: tuple[str, int] | None = None) -> None:
        self.version = version
        self.source = source
        self.destination = destination

    def __repr__(self) -> str:
        return f"ProxyHeader(v{self.version}, {self.source}, {self.destination})"


def parse(data: bytes) -> tuple[ProxyHeader, int] | None:
    """The header at the start of ``data`` and its length, None while it is
    incomplete; :class:`ProxyHeaderError` when ``data`` cannot start one."""
    if data[:1] == b"\r":
        if not V2_SIGNATURE.startswith(data[:12]):
            raise ProxyHeaderError("not a PROXY protocol header (bad version 2 signature)")
        return _parse_v2(data) if len(data) >= 16 else None
    if not _V1_PREFIX.startswith(data[:6]):
        raise ProxyHeaderError("not a PROXY protocol header")
    return _parse_v1(data)


# -- version 1 ----------------------------------------------------------------

def _parse_v1(data: bytes) -> tuple[ProxyHeader, int] | None:
    end = data.find(b"\r\n", 0, MAX_V1_LENGTH)
    line = data[:end] if end != -1 else data[:MAX_V1_LENGTH]
    if not _V1_TEXT.fullmatch(line.rstrip(b"\r") if end == -1 else line):
        raise ProxyHeaderError("a version 1 header holds only visible ASCII and single spaces before its CRLF")
    if end == -1:
        if len(data) >= MAX_V1_LENGTH:
            raise ProxyHeaderError(f"no CRLF in the first {MAX_V1_LENGTH} bytes of a version 1 header")
        return None
    fields = line.decode("ascii").split(" ")
    if fields[0] != "PROXY" or len(fields) < 2:
        raise ProxyHeaderError("a version 1 header starts 'PROXY TCP4', 'PROXY TCP6' or 'PROXY UNKNOWN'")
    if fields[1] == "UNKNOWN":
        return ProxyHeader(1), end + 2  # the rest of the line is ignored (proxy-protocol.txt §2.1)
    if fields[1] not in ("TCP4", "TCP6"):
        raise ProxyHeaderError(f"unknown version 1 protocol {fields[1][:10]!r}")
    if len(fields) != 6:
        raise ProxyHeaderError("a version 1 header has exactly: protocol, source and destination addresses,"
                               " source and destination ports, each after one space")
    six = fields[1] == "TCP6"
    source = (_v1_address(fields[2], six), _v1_port(fields[4]))
    destination = (_v1_address(fields[3], six), _v1_port(fields[5]))
    return ProxyHeader(1, source, destination), end + 2


def _v1_address(text: str, six: bool) -> str:
    try:
        if six:
            if not _IPV6.fullmatch(text):
                raise ValueError
            address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv6Address(text)
        else:
            if not _IPV4.fullmatch(text):
                raise ValueError
            address = ipaddress.IPv4Address(text)
    except ValueError:
        raise ProxyHeaderError(f"{text[:45]!r} is not an {'IPv6' if six else 'IPv4'} address") from None
    return _unicast(address)


def _v1_port(text: str) -> int:
    if not _PORT.fullmatch(text) or int(text) > 65535:
        raise ProxyHeaderError(f"{text[:10]!r} is not a port (0 to 65535, in decimal, no leading zero)")
    return int(text)


def _unicast(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """``address`` as text, if a TCP peer can have it (Envoy's
    ``isUnicastAddress``)."""
    if address.is_unspecified or address.is_multicast or (
            address.version == 4 and address == ipaddress.IPv4Address("255.255.255.255")):
        raise ProxyHeaderError(f"{address} is not a unicast address")
    return str(address)


# -- version 2 ----------------------------------------------------------------

def _parse_v2(data: bytes) -> tuple[ProxyHeader, int] | None:
    ver_cmd, family, length = data[12], data[13], struct.unpack_from("!H", data, 14)[0]
    if ver_cmd >> 4 != 2:
        raise ProxyHeaderError(f"unsupported PROXY protocol version {ver_cmd >> 4}")
    command = ver_cmd & 0x0F
    if command not in (_LOCAL, _PROXY):
        raise ProxyHeaderError(f"unknown version 2 command {command}")
    if length > MAX_V2_LENGTH:
        raise ProxyHeaderError(f"a version 2 header of {length} bytes is over the limit ({MAX_V2_LENGTH})")
    if command == _PROXY:
        need = {_AF_INET: 12, _AF_INET6: 36}.get(family >> 4)
        if need is None or family & 0x0F != _STREAM:
            raise ProxyHeaderError(f"unsupported version 2 family/transport 0x{family:02x} (only TCP over IPv4"
                                   " or IPv6)")
        if length < need:
            raise ProxyHeaderError(f"a version 2 address block of {length} bytes is too short ({need} needed)")
    total = 16 + length
    if len(data) < total:
        return None
    if command == _LOCAL:
        return ProxyHeader(2), total  # the proxy's own connection: the block is skipped
    block = data[16:total]
    if family >> 4 == _AF_INET:
        src: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv4Address(block[0:4])
        dst: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv4Address(block[4:8])
        ports, tlvs = block[8:12], block[12:]
    else:
        src, dst = ipaddress.IPv6Address(block[0:16]), ipaddress.IPv6Address(block[16:32])
        ports, tlvs = block[32:36], block[36:]
    sport, dport = struct.unpack("!HH", ports)
    _check_tlvs(tlvs)
    return ProxyHeader(2, (_unicast(src), sport), (_unicast(dst), dport)), total


def _check_tlvs(tlvs: bytes) -> None:
    at = 0
    while at < len(tlvs):
        if at + 3 > len(tlvs):
            raise ProxyHeaderError("a version 2 TLV is cut short (no room for its type and length)")
        size = struct.unpack_from("!H", tlvs, at + 1)[0]
        at += 3 + size
        if at > len(tlvs):
            raise ProxyHeaderError("a version 2 TLV's length runs past the header")
