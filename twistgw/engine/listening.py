"""Listening sockets opened here and served elsewhere (``--workers``): the
supervisor binds, the worker processes accept."""

from __future__ import annotations

import socket
from typing import Any

from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint, serverFromString


def open_listening_socket(reactor: Any, description: str) -> socket.socket:
    """Bind and listen, without accepting (the workers accept)."""
    endpoint = serverFromString(reactor, description)
    if isinstance(endpoint, TCP6ServerEndpoint):
        family, interface = socket.AF_INET6, endpoint._interface or "::"
    elif isinstance(endpoint, TCP4ServerEndpoint):
        family, interface = socket.AF_INET, endpoint._interface or "0.0.0.0"
    else:
        raise ValueError(f"--listen {description!r}: with --workers only tcp: and tcp6: endpoints are supported")
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((interface, endpoint._port))
    sock.listen(endpoint._backlog)
    sock.setblocking(False)
    return sock
