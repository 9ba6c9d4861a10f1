"""The engine's upstream side in memory: the pool connects through a
MemoryReactorClock's ``connectTCP``; :class:`MemoryUpstreams` connects each
attempt to a StringTransport, so a test reads what the gateway sent and
feeds the upstream's answer.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

__all__ = ["MemoryUpstreams", "memory_config"]


def memory_config(routes: str, upstream: str = "up") -> str:
    """The in-memory engine tests' configuration: one static Upstream
    ``upstream`` (127.0.0.1:9, never dialled: :class:`MemoryUpstreams`
    answers) and the VirtualService ``mem`` for every domain, with
    ``routes`` (YAML list items indented four spaces, as under ``routes:``)."""
    return f"""\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: {upstream}, namespace: default}}
spec:
  static:
    hosts: [{{addr: 127.0.0.1, port: 9}}]
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: mem, namespace: default}}
spec:
  virtualHost:
    domains: ["*"]
    routes:
{routes}"""


class MemoryUpstreams:
    """The upstream connections a gateway on ``reactor`` made, in order."""

    def __init__(self, reactor: MemoryReactorClock) -> None:
        self.reactor = reactor
        self.connected: list[tuple[Any, StringTransport]] = []

    def __len__(self) -> int:
        self._connect_pending()
        return len(self.connected)

    def __iter__(self) -> Any:
        self._connect_pending()
        return iter(list(self.connected))

    def __getitem__(self, i: int) -> tuple[Any, StringTransport]:
        """``(engine connection, its transport)`` of the i-th attempt."""
        self._connect_pending()
        return self.connected[i]

    def _connect_pending(self) -> None:
        while len(self.connected) < len(self.reactor.tcpClients):
            host, port, factory = self.reactor.tcpClients[len(self.connected)][:3]
            p = factory.buildProtocol(IPv4Address("TCP", host, port))
            t = StringTransport()
            p.makeConnection(t)
            # the endpoint wraps the engine's connection: keep the engine's
            self.connected.append((getattr(p, "_wrappedProtocol", p), t))
