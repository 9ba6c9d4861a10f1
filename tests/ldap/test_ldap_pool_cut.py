"""A directory that closed every pooled connection (a restart, a failover
behind a virtual IP) costs no request a 503: after the first pooled
connection turns out closed, the other idle ones are dropped too, and the
retry opens a fresh connection.

The directory is ldaptor's in-memory server behind a relay the test
controls: once ``cut`` is set, a connection opened before it is closed as
soon as the gateway sends on it, without an answer — exactly what the
gateway sees when its close arrives only after its request went out."""

from __future__ import annotations

import io
from typing import Any

import pytest_twisted
from ldap_helpers import MANAGERS_DN, basic, ldap_config, make_tester
from ldaptor import inmemory
from ldaptor.interfaces import IConnectedLDAPEntry
from ldaptor.protocols.ldap.ldapserver import LDAPServer
from twisted.internet import defer, protocol, reactor
from twisted.python.components import registerAdapter

URL = "http://api.example.com/pets"

LDIF = f"""\
dn: dc=example,dc=org
objectClass: dcObject
objectClass: organization
dc: example
o: Example

dn: uid=alice,dc=example,dc=org
objectClass: inetOrgPerson
uid: alice
cn: Alice
sn: A
userPassword: alice-pw
memberOf: {MANAGERS_DN}
"""


class _Backend(protocol.Protocol):
    def __init__(self, front: "_Front") -> None:
        self.front = front

    def connectionMade(self) -> None:
        self.front.backend_ready(self)

    def dataReceived(self, data: bytes) -> None:
        self.front.transport.write(data)

    def connectionLost(self, reason: Any = None) -> None:
        self.front.transport.loseConnection()


class _Front(protocol.Protocol):
    """One gateway connection, relayed to the directory."""

    def __init__(self, relay: "Relay") -> None:
        self.relay = relay
        self.backend: _Backend | None = None
        self.pending: list[bytes] = []
        self.generation = relay.generation

    def connectionMade(self) -> None:
        self.relay.fronts.append(self)
        protocol.ClientCreator(reactor, _Backend, self).connectTCP("127.0.0.1", self.relay.target)

    def backend_ready(self, backend: _Backend) -> None:
        self.backend = backend
        for data in self.pending:
            backend.transport.write(data)
        self.pending = []

    def dataReceived(self, data: bytes) -> None:
        if self.generation < self.relay.generation:  # opened before the cut
            self.relay.cut_count += 1
            self.transport.abortConnection()
            return
        if self.backend is None:
            self.pending.append(data)
        else:
            self.backend.transport.write(data)

    def connectionLost(self, reason: Any = None) -> None:
        if self.backend is not None:
            self.backend.transport.loseConnection()


class Relay(protocol.Factory):
    def __init__(self, target: int) -> None:
        self.target = target
        self.generation = 0
        self.cut_count = 0
        self.fronts: list[_Front] = []

    def buildProtocol(self, addr: Any) -> _Front:
        return _Front(self)


class _DirectoryFactory(protocol.ServerFactory):
    protocol = LDAPServer

    def __init__(self, root: Any) -> None:
        self.root = root


registerAdapter(lambda factory: factory.root, _DirectoryFactory, IConnectedLDAPEntry)


async def _directory() -> Any:
    root = await inmemory.fromLDIFFile(io.BytesIO(LDIF.encode() + b"\n"))
    return reactor.listenTCP(0, _DirectoryFactory(root), interface="127.0.0.1")


@pytest_twisted.ensureDeferred
async def test_a_directory_that_closed_every_pooled_connection_costs_no_request() -> None:
    directory = await _directory()
    relay = Relay(directory.getHost().port)
    front = reactor.listenTCP(0, relay, interface="127.0.0.1")
    try:
        tester = make_tester(ldap_config(
            f"ldap://127.0.0.1:{front.getHost().port}", userDnTemplate="uid=%s,dc=example,dc=org",
            cacheTtl=0, pool={"maxSize": 4, "initialSize": 0}))
        # three requests at once: three pooled connections, idle afterwards
        results = await defer.gatherResults([
            defer.ensureDeferred(tester.request("GET", URL, headers=basic("alice", "alice-pw")))
            for _ in range(3)])
        assert [r.status for r in results] == [200, 200, 200]
        assert len(relay.fronts) == 3
        relay.generation += 1  # every connection opened so far is closed when it next speaks
        result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
        assert result.status == 200, result
        assert relay.cut_count == 1  # one dead connection tried, the other idle ones dropped unused
        assert len(relay.fronts) == 4  # the retry's fresh connection
    finally:
        await front.stopListening()
        await directory.stopListening()
