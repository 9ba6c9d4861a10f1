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
from slapd import Slapd, SlapdMissing, stop_all  # noqa: E402


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
    stop_all(started)


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


#: Descriptors a test may leave behind legitimately (a session-wide slapd
#: started on first use keeps its pipes; the reactor may keep a waker).
FD_SLACK = 8


def _open_fds() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


@pytest_twisted.async_yield_fixture(autouse=True)
async def fds_return_to_baseline() -> Any:
    """Every fault test: once it and its fixtures are done (gateway stopped,
    servers closed), this process's open descriptors return to where they
    were, within FD_SLACK. A leak per request or per fault shows up as far
    more than that."""
    from support.http import sleep

    before = _open_fds()
    yield
    deadline = 3.0
    while _open_fds() > before + FD_SLACK and deadline > 0:
        await sleep(0.1)
        deadline -= 0.1
    after = _open_fds()
    assert after <= before + FD_SLACK, f"open descriptors grew from {before} to {after}"
