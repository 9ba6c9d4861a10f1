"""Writing to a plain TCP transport without waiting for the next reactor turn.

Twisted's ``transport.write`` appends to a buffer and registers the socket
for writability (an ``epoll_ctl``); the next reactor turn sends and
unregisters it (another ``epoll_ctl``). For a proxy that writes one request
head and one response per request that is four system calls and a reactor
turn of Python per request, about a quarter of the CPU the engine spends.
:func:`write` sends at once when nothing is queued and hands Twisted only
what the socket did not take, so order, back-pressure (Twisted's buffer
and producer) and error handling stay Twisted's.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from twisted.internet import tcp
from twisted.protocols.tls import BufferingTLSTransport, TLSMemoryBIOProtocol

__all__ = ["send_tls_at_once", "unsent", "write"]

#: Transports whose ``socket`` carries our bytes as they are (not TLS, not a
#: wrapper such as TLSMemoryBIOProtocol, whose attribute lookups fall
#: through to the TCP transport underneath and must never be written to).
PLAIN_TCP = (tcp.Server, tcp.Client)


def write(transport: Any, data: bytes) -> None:
    """``transport.write(data)``, sending at once when nothing waits."""
    if (transport.__class__ in PLAIN_TCP and not transport.TLS and not transport._tempDataBuffer
            and not transport.dataBuffer and transport.connected and not transport.disconnecting):
        try:
            sent = transport.socket.send(data)
        except OSError:
            sent = 0  # EAGAIN, or an error Twisted will find when it writes
        if sent == len(data):
            return
        data = data[sent:]
    transport.write(data)


def _tcp_write(transport: Any, data: bytes) -> None:
    """:func:`write` for a TCP transport whose ``write`` is this function
    (the TCP transport under TLS, :func:`send_tls_at_once`): what the
    socket does not take goes to Twisted's own ``write`` (the class's)."""
    if (not transport._tempDataBuffer and not transport.dataBuffer and transport.connected
            and not transport.disconnecting):
        try:
            sent = transport.socket.send(data)
        except OSError:
            sent = 0
        if sent == len(data):
            return
        data = data[sent:]
    transport.__class__.write(transport, data)


def send_tls_at_once(transport: Any) -> bool:
    """Make a TLS transport over plain TCP (one of Twisted's
    ``BufferingTLSTransport``) encrypt and send every write at once, like
    :func:`write` on plain TCP: Twisted would keep a small write for the next
    reactor turn (a DelayedCall per write) and then register the socket for
    writability (two ``epoll_ctl``). Only for a connection whose every
    application write goes through its ``write`` (an upstream connection of
    the engine: one request head, then body chunks), so nothing is
    reordered. Returns whether the transport was one of those."""
    if transport.__class__ is not BufferingTLSTransport:
        return False
    # BufferingTLSTransport sets its own ``write`` on the instance the same
    # way (its aggregator's); this is TLSMemoryBIOProtocol's, unbuffered.
    transport.write = partial(TLSMemoryBIOProtocol.write, transport)  # type: ignore[method-assign]
    tcp_transport = transport.transport
    if tcp_transport.__class__ in PLAIN_TCP and not tcp_transport.TLS:
        tcp_transport.write = partial(_tcp_write, tcp_transport)
    return True


def unsent(transport: Any) -> int:
    """Bytes written to ``transport`` (or the TCP transport under a TLS
    one) that the socket has not taken yet."""
    tcp_transport = getattr(transport, "transport", None) or transport
    if tcp_transport.__class__ not in PLAIN_TCP:
        return 0
    return len(tcp_transport.dataBuffer) - tcp_transport.offset + tcp_transport._tempDataLen
