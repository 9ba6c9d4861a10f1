"""Listening sockets opened here and served elsewhere (``--workers``): the
supervisor binds, the worker processes accept; and the endpoints of
``--listen`` strings, TLS ones picking their certificate by SNI."""

from __future__ import annotations

import socket
from typing import Any, Callable

from twisted.internet.endpoints import SSL4ServerEndpoint, TCP4ServerEndpoint, TCP6ServerEndpoint, serverFromString

from twistgw.core.tlsroutes import TlsRoutes
from twistgw.engine.sni import SniServerEndpoint


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


def gateway_endpoint(reactor: Any, description: str, routes: Callable[[], TlsRoutes | None]) -> Any:
    """The server endpoint of a ``--listen`` string. ``tcp:``, ``unix:`` and
    the rest are Twisted's own; two are TLS listeners whose certificate is
    picked per connection by SNI from ``routes()`` (the VirtualServices'
    ``sslConfig``, see :mod:`twistgw.engine.sni`):

    * ``ssl:PORT:privateKey=KEY:certKey=CERT[:...]``: Twisted's TLS
      endpoint; its certificate answers the server names no virtual
      service's certificate answers (and serves the virtual services
      without ``sslConfig``).
    * ``tls:PORT[:interface=...][:backlog=...]``: the same options as
      ``tcp:``; only the virtual services' certificates, so a name none
      answers gets no handshake.
    """
    if description.startswith("tls:"):
        inner = serverFromString(reactor, "tcp:" + description[4:])
        return SniServerEndpoint(reactor, inner, routes)
    endpoint = serverFromString(reactor, description)
    if isinstance(endpoint, SSL4ServerEndpoint):
        tcp = TCP4ServerEndpoint(reactor, endpoint._port, endpoint._backlog, endpoint._interface)
        return SniServerEndpoint(reactor, tcp, routes, endpoint._sslContextFactory)
    return endpoint


def tls_listen_problem(description: str) -> str | None:
    """Why a ``tls:`` string cannot be a listener, or None (other strings:
    None; Twisted checks them)."""
    if not description.startswith("tls:"):
        return None
    try:
        endpoint = serverFromString(object(), "tcp:" + description[4:])
    except Exception as exc:
        return str(exc) or type(exc).__name__
    return None if isinstance(endpoint, TCP4ServerEndpoint) else "not a tcp: endpoint"
