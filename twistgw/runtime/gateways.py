"""The listeners of Gloo ``Gateway`` resources, opened and closed as the
configuration changes.

At start they open with ``--listen`` and ``--admin`` (all or nothing: one
that cannot listen is one line and exit 3, ``runtime/listeners.py``). On a
reload, :meth:`GatewayListeners.prepare` opens the listeners of new
Gateways and of Gateways whose ``bindAddress``/``bindPort`` changed before
the new configuration serves; if one cannot listen, the ones it opened are
closed again and the reload is rejected (the last good configuration and
its listeners keep serving). Once the new snapshot serves,
:meth:`GatewayListeners.commit` applies each Gateway's connection settings
(``useProxyProto``, timeouts) to its listener and closes the listeners no
Gateway binds any more, draining them: no new connection, idle ones closed,
the others once their requests are answered (at most ``--drain-timeout``).

Every Gateway listener is an :class:`~twistgw.engine.sni.SniServerEndpoint`
over TCP that serves plain HTTP while its Gateway has no ``ssl`` (one extra
call per accepted connection, none per request), and TLS while it has: the
certificate picked by SNI among the Gateway's own virtual services
(``GatewayView.tls``, rebuilt with every snapshot, so a reload rotates
certificates for new connections, and an older keep-alive connection whose
certificate changed gets 421). So ``ssl`` can change on a reload without
closing the socket.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Callable

from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint
from twisted.logger import Logger

from twistgw.config.gateways import GlooGateway
from twistgw.core.gateways import GatewayView
from twistgw.core.snapshot import Snapshot
from twistgw.core.tlsroutes import TlsRoutes
from twistgw.engine.gateway import Gateway, GatewayFactory
from twistgw.engine.sni import SniServerEndpoint
from twistgw.runtime.accessfiles import AccessFiles
from twistgw.runtime.listeners import Listener, open_all

__all__ = ["GatewayListeners", "GatewayTlsRoutes", "bind_text", "gateway_tls"]

#: the certificates of a Gateway a snapshot does not serve (or serves without ``ssl``)
_NO_TLS = TlsRoutes(())


def bind_text(gw: GlooGateway) -> str:
    """``127.0.0.1:8080``, ``[::]:8080``."""
    host = gw.bind_address
    return f"[{host}]:{gw.bind_port}" if ":" in host else f"{host}:{gw.bind_port}"


def gateway_tls(snapshot: Snapshot | None, key: str) -> TlsRoutes | None:
    """The certificates by server name of Gateway ``key`` in ``snapshot``;
    None when it has no ``ssl`` (its listener then serves plain HTTP) or is
    not served."""
    view = snapshot.gateways.get(key) if snapshot is not None else None
    return view.tls if view is not None else None


class GatewayTlsRoutes:
    """Where one Gateway's listener finds its certificates: in the serving
    snapshot (handshakes) and in the snapshot a request is handled with
    (a reload may have changed them since the handshake: 421)."""

    __slots__ = ("gateway", "key")

    def __init__(self, gateway: Gateway, key: str) -> None:
        #: what holds the serving snapshot (``gateway.snapshot``)
        self.gateway = gateway
        self.key = key

    def serving(self) -> TlsRoutes | None:
        return gateway_tls(self.gateway.snapshot, self.key)

    def in_snapshot(self, snapshot: Snapshot) -> TlsRoutes:
        # A Gateway removed or no longer ssl: no certificate answers, so the
        # connection's next request is told to reconnect (421).
        routes = gateway_tls(snapshot, self.key)
        return _NO_TLS if routes is None else routes


class GatewayListeners:
    """One :class:`Listener` per served Gateway, keyed by ``namespace/name``."""

    _log = Logger(namespace="twistgw")

    def __init__(self, reactor: Any, gateway: Gateway, backlog: int, idle_timeout: float, head_timeout: float,
                 drain_timeout: float) -> None:
        self.reactor = reactor
        self.gateway = gateway
        self.backlog = backlog
        self.idle_timeout = idle_timeout
        self.head_timeout = head_timeout
        self.drain_timeout = drain_timeout
        #: the listeners serving now: key → (bind, listener)
        self.current: dict[str, tuple[tuple[str, int], Listener]] = {}
        #: opened by :meth:`prepare` for the snapshot about to serve
        self._pending: dict[str, tuple[tuple[str, int], Listener]] = {}
        #: the Gateways' access-log files, opened and closed with the listeners
        self.files = AccessFiles(reactor)
        #: the access-log files the first configuration could not open
        self.first_problems: list[str] = []

    def listeners(self) -> list[Listener]:
        return [listener for _, listener in self.current.values()]

    def _listener(self, view: GatewayView) -> Listener:
        gw = view.gateway
        address = ipaddress.ip_address(gw.bind_address)
        kind = TCP6ServerEndpoint if address.version == 6 else TCP4ServerEndpoint
        routes = GatewayTlsRoutes(self.gateway, gw.key)
        endpoint = SniServerEndpoint(self.reactor, kind(self.reactor, gw.bind_port, self.backlog, gw.bind_address),
                                     routes.serving, routes_in=routes.in_snapshot, plain_without_routes=True)
        factory = GatewayFactory(self.gateway, self.idle_timeout, self.head_timeout, gateway_key=gw.key)
        listener = Listener("Gateway", f"{gw.key} ({bind_text(gw)})", endpoint, factory, f"Gateway {gw.key}")
        self._configure(listener, view)
        return listener

    def _configure(self, listener: Listener, view: GatewayView) -> None:
        gw = view.gateway
        hcm = gw.hcm
        factory = listener.factory
        # the PROXY header is read before the TLS handshake, or before HTTP
        listener.endpoint.proxy_protocol = gw.proxy_protocol and gw.ssl
        factory.proxy_protocol = gw.proxy_protocol and not gw.ssl
        factory.timeOut = hcm.idle_timeout if hcm.idle_timeout is not None else self.idle_timeout
        factory.head_timeout = hcm.head_timeout if hcm.head_timeout is not None else self.head_timeout
        # codecType and http2ProtocolOptions: for the connections accepted from now on
        factory.http2 = hcm.http2

    def _wanted(self, snapshot: Snapshot) -> dict[str, tuple[tuple[str, int], Listener]]:
        """The listeners ``snapshot`` needs that do not listen yet."""
        out = {}
        for key, view in snapshot.gateways.items():
            bind = view.gateway.bind
            have = self.current.get(key)
            if have is None or have[0] != bind:
                out[key] = (bind, self._listener(view))
        return out

    def first(self, snapshot: Snapshot) -> None:
        """The first configuration's listeners, opened with the others by the
        service (``open_listeners``), and its access-log files (opened now;
        those that cannot be are :attr:`first_problems`)."""
        self.current = self._wanted(snapshot)
        self.files.close()
        self.first_problems = self.files.prepare(snapshot)
        self._commit_files(snapshot)

    def _commit_files(self, snapshot: Snapshot) -> None:
        self.gateway.log_gateways_to(self.files if self.files.commit(snapshot) else None)

    def prepare(self, snapshot: Snapshot, on_late_failure: Callable[[Listener], None]) -> list[str]:
        """Open what ``snapshot`` adds; the lines of those that cannot listen
        (then none of them stays open); and the access-log files it adds."""
        problems = self.files.prepare(snapshot)
        if problems:
            return problems
        self._pending = self._wanted(snapshot)
        problems = open_all([listener for _, listener in self._pending.values()], on_late_failure)
        if problems:
            self._pending = {}
            self.files.discard()
        return problems

    def commit(self, snapshot: Snapshot) -> None:
        """``snapshot`` serves now: settings applied, old listeners drained."""
        closing = []
        for key, (_bind, listener) in list(self.current.items()):
            if key not in snapshot.gateways or key in self._pending:
                closing.append(listener)
                del self.current[key]
        self.current.update(self._pending)
        self._pending = {}
        for key, (_, listener) in self.current.items():
            self._configure(listener, snapshot.gateways[key])
        self._commit_files(snapshot)
        for listener in closing:
            self._close(listener)

    def _close(self, listener: Listener) -> None:
        self._log.info("Closing the listener of {what} ({description}): draining its connections",
                       what=listener.what, description=listener.description)
        listener.close()
        listener.factory.drain(self.drain_timeout)

    def stop(self) -> list[Any]:
        """Stop accepting on every Gateway listener (the service stops);
        the Deferreds of the ports closing, and of each factory's
        connections (closed by :meth:`close_connections`)."""
        return [listener.close() for _, listener in self.current.values()]

    def close_files(self) -> None:
        """The last access lines written, the files closed (the service stops)."""
        self.gateway.log_gateways_to(None)
        self.files.close()

    def goaway(self) -> None:
        """GOAWAY to every HTTP/2 client of every Gateway listener (the service stops)."""
        for _, listener in self.current.values():
            listener.factory.goaway()

    def close_connections(self) -> list[Any]:
        return [listener.factory.close_connections() for _, listener in self.current.values()]
