"""Which certificate, and which virtual services, a TLS connection gets:
Envoy's filter-chain match on the server name (SNI), built per snapshot from
the virtual services' ``sslConfig`` (pure: no TLS library, no I/O).

A connection asking for ``api.example.com`` gets the chain that lists
that name in ``sniDomains``, else the one with the longest matching
``*.`` wildcard (``*.example.com``, then ``*.com``), else the chain with no
``sniDomains`` (every name, and no name), else none: the listener's own
certificate (``--listen ssl:...``) when it has one, or a failed handshake.
Requests on it are then routed by ``Host`` among that chain's virtual
services only (a certificate's client verification cannot be side-stepped
by naming another virtual service in ``Host``). See docs/tls.md.
"""

from __future__ import annotations

from typing import Iterable

from twistgw.config.model import VirtualService
from twistgw.config.servertls import ServerTls, tls_chains
from twistgw.core.routing import HostTable

__all__ = ["TlsChain", "TlsRoutes"]


class TlsChain:
    """One certificate on TLS listeners and the virtual services it serves.

    :ivar tls: its settings (without ``sniDomains``); equal settings mean the
        same certificate, verified the same way.
    :ivar names: the server names it answers (() for every name).
    :ivar hosts: the ``Host`` table of its virtual services.
    """

    __slots__ = ("hosts", "names", "tls")

    def __init__(self, tls: ServerTls, names: tuple[str, ...], hosts: HostTable) -> None:
        self.tls = tls
        self.names = names
        self.hosts = hosts

    def __repr__(self) -> str:
        return f"TlsChain(names={self.names or '(every name)'})"


class TlsRoutes:
    """The chains of one snapshot, looked up by server name."""

    __slots__ = ("chains", "every", "exact", "wildcards")

    def __init__(self, virtual_services: Iterable[VirtualService]) -> None:
        by_key = {vs.key: vs for vs in virtual_services if vs.tls is not None}
        self.chains: list[TlsChain] = []
        self.exact: dict[str, TlsChain] = {}
        #: (".example.com", chain), longest suffix first
        self.wildcards: list[tuple[str, TlsChain]] = []
        self.every: TlsChain | None = None
        for spec in tls_chains((key, vs.tls) for key, vs in by_key.items() if vs.tls is not None):
            chain = TlsChain(spec.tls, spec.names, HostTable(by_key[k] for k in spec.virtual_services))
            self.chains.append(chain)
            if not spec.names:
                self.every = self.every or chain
            for name in spec.names:
                if name.startswith("*."):
                    self.wildcards.append((name[1:], chain))
                else:
                    self.exact.setdefault(name, chain)
        self.wildcards.sort(key=lambda item: -len(item[0]))

    def __bool__(self) -> bool:
        return bool(self.chains)

    def select(self, server_name: str | None) -> TlsChain | None:
        """The chain for a connection that asked for ``server_name``
        (lower-cased; None: the client sent no SNI), or None."""
        if server_name:
            chain = self.exact.get(server_name)
            if chain is not None:
                return chain
            for suffix, chain in self.wildcards:
                if server_name.endswith(suffix) and len(server_name) > len(suffix):
                    return chain
        return self.every
