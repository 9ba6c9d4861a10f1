"""Fixtures for the LDAP plugin tests.

``slapd_open``    session-wide permissive slapd (accepts unauthenticated binds).
``slapd_strict``  session-wide slapd whose ACL hides ``memberOf`` from users
                  (only the service account reads it).
``slapd_factory`` ``slapd_factory(permissive=True)`` a private slapd for tests
                  that stop, kill or freeze it; stopped at teardown.

A missing ``slapd`` binary FAILS these fixtures (it does not skip): the LDAP
plugin's contract is tested against a real OpenLDAP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from slapd import Slapd, SlapdMissing, stop_all
from twistgw_ldap import _flow


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

    def make(permissive: bool = True, tls: bool = False) -> Slapd:
        try:
            server = Slapd(tmp_path / f"slapd{len(started)}", permissive=permissive, tls=tls).start()
        except SlapdMissing as exc:
            pytest.fail(str(exc), pytrace=False)
        started.append(server)
        return server

    yield make
    stop_all(started)


@pytest.fixture(autouse=True)
def _fresh_ldap_state() -> Iterator[None]:
    """Each test starts with empty decision caches (pools are kept, as in a
    long-running gateway)."""
    _flow.STATE.caches.clear()
    yield
    _flow.STATE.caches.clear()
