"""Fixtures for the LDAP plugin tests.

``slapd_open``    session-wide permissive slapd (accepts unauthenticated binds).
``slapd_strict``  session-wide slapd whose ACL hides ``memberOf`` from users
                  (only the service account reads it).
``slapd_factory`` ``slapd_factory(permissive=True, tls=False, san=True)`` a private slapd for tests
                  that stop, kill or freeze it; stopped at teardown.

A missing ``slapd`` binary FAILS these fixtures (it does not skip): the LDAP
plugin's contract is tested against a real OpenLDAP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from slapd import Slapd, SlapdMissing, stop_all
import pytest_twisted
from twisted.internet import defer
from twistgw.sdk.testing import ChainTester


def _start(directory: Path, permissive: bool) -> Slapd:
    try:
        return Slapd(directory, permissive=permissive).start()
    except SlapdMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def slapd_open(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    server = _start(tmp_path_factory.mktemp("slapd-open"), permissive=True)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def slapd_strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    server = _start(tmp_path_factory.mktemp("slapd-strict"), permissive=False)
    yield server
    server.stop()


@pytest.fixture
def slapd_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[Slapd] = []

    def make(permissive: bool = True, tls: bool = False, san: bool = True) -> Slapd:
        try:
            server = Slapd(tmp_path / f"slapd{len(started)}", permissive=permissive, tls=tls, san=san).start()
        except SlapdMissing as exc:
            pytest.fail(str(exc), pytrace=False)
        started.append(server)
        return server

    yield make
    stop_all(started)


@pytest.fixture(autouse=True)
def _plugins_shut_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each ChainTester has plugin instances of its own (fresh pools and
    caches); at the end of the test they are shut down as a stopping gateway
    shuts its plugins down (pools closed, dev directories stopped)."""
    made: list[ChainTester] = []
    real = ChainTester.__init__

    def record(self: ChainTester, *args: Any, **kw: Any) -> None:
        real(self, *args, **kw)
        made.append(self)

    monkeypatch.setattr(ChainTester, "__init__", record)
    yield
    hosts = {id(t.host): t.host for t in made}
    for host in hosts.values():
        pytest_twisted.blockon(defer.ensureDeferred(host.unconfigure()))
