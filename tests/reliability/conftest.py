"""Fixtures for the reliability (fault) tests.

Reuses the shared fixtures of ``tests/conftest.py`` (``backend``,
``raw_server``, ``config_dir``, ``gateway``, ``unused_port``), the slapd
helper of ``tests/ldap/slapd.py`` and the key and token helpers of
``tests/jwt/jwt_helpers.py`` (both directories are put on ``sys.path`` here,
so this directory also runs on its own).

``slapd_server``   ``slapd_server(start=True, port=None)`` a private slapd
                   (permissive) in ``tmp_path``; stopped (and resumed first if
                   paused) at teardown.
``keyset_server``  ``keyset_server(port=None)`` a loopback key-set server
                   (:class:`rel_helpers.KeySet`); stopped at teardown.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import pytest_twisted
from twisted.internet import defer

_TESTS = Path(__file__).resolve().parent.parent
for _sub in ("ldap", "jwt"):
    _p = str(_TESTS / _sub)
    if _p not in sys.path:
        sys.path.append(_p)

import rel_helpers  # noqa: E402  (needs the paths above)
from slapd import Slapd, SlapdMissing  # noqa: E402


@pytest.fixture
def slapd_server(tmp_path: Path) -> Iterator[Any]:
    started: list[Slapd] = []

    def make(start: bool = True, port: int | None = None) -> Slapd:
        try:
            server = Slapd(tmp_path / f"slapd{len(started)}", permissive=True, port=port)
        except SlapdMissing as exc:
            pytest.fail(str(exc), pytrace=False)
        started.append(server)
        if start:
            server.start()
        return server

    yield make
    for server in started:
        if server.process is not None:
            try:
                server.resume()
            except Exception:
                pass
        server.stop()


@pytest.fixture
def keyset_server() -> Iterator[Any]:
    started: list[rel_helpers.KeySet] = []

    def make(port: int | None = None) -> rel_helpers.KeySet:
        ks = rel_helpers.KeySet(port)
        started.append(ks)
        return ks

    yield make
    for ks in started:
        pytest_twisted.blockon(defer.ensureDeferred(ks.stop()))


@pytest.fixture(autouse=True)
def _fresh_ldap_caches() -> Iterator[None]:
    """No LDAP decision cached by an earlier test can answer for this one."""
    from twistgw_ldap import _flow

    _flow.STATE.caches.clear()
    yield
    _flow.STATE.caches.clear()
