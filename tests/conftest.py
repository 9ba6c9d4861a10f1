"""Makes the shared fixtures of :mod:`support.fixtures` available to every
test directory (core, jwt, rbac, ldap, reliability). Helpers are imported
from the :mod:`support` package: ``from support.http import http_request``.

It also says how the suite is shared among pytest-xdist workers
(``./run-tests.sh`` runs ``pytest -n 4 --dist loadgroup``; see
docs/contributing.md): each module with a module-scoped fixture (a real
part it starts once: nginx, a TLS backend, Samba's DC, an OpenID provider,
Chromium) is one xdist group, run whole on one worker, so the part starts
once; the modules of one shared session part (the Redis Cluster) are one
group together; the trial ``TestCase`` tests are one group, the first on
its worker (see :func:`pytest_runtest_setup`)."""

from __future__ import annotations

from typing import Any

import pytest

from support.fixtures import *  # noqa: F401,F403  (pytest finds fixtures by name)

#: session-scoped fixtures that start something expensive: every module
#: using one is in this xdist group, so that one worker starts it, once
SHARED_PARTS = {"redis_cluster_servers": "redis-cluster"}
#: the group of the trial TestCase tests
TRIAL_GROUP = "trial"
#: fixture scopes that keep a part up for a whole module (or class)
_WIDE = {"module", "package", "class"}


def _is_trial(item: Any) -> bool:
    from twisted.trial.unittest import TestCase

    cls = getattr(item, "cls", None)
    return isinstance(cls, type) and issubclass(cls, TestCase)


def _ours(fixturedef: Any) -> bool:
    """A fixture of this suite (a plugin's, such as tmp_path_factory, has no baseid)."""
    return bool(getattr(fixturedef, "baseid", ""))


def xdist_group_of(items: list[Any]) -> str | None:
    """The xdist group of one module's items (None: each test on its own)."""
    wide = False
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        for name in item.fixturenames:
            if name in SHARED_PARTS:
                return SHARED_PARTS[name]
            for fixturedef in info.name2fixturedefs.get(name, ()):
                if fixturedef.scope in _WIDE and _ours(fixturedef):
                    wide = True
    return items[0].nodeid.split("::", 1)[0] if wide else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """trial ``TestCase`` modules spin the reactor themselves; run them
    before the pytest-twisted tests, which keep it running in a greenlet.

    Under xdist (tryfirst: before xdist reads the marks into node ids) each
    item gets its xdist_group mark, unless its module chose one itself
    (``pytestmark = pytest.mark.xdist_group("name")``)."""
    from twistgw.sdk.testing import trial_tests_first

    trial_tests_first(items)
    modules: dict[str, list[Any]] = {}
    for item in items:
        if not _is_trial(item):
            modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    groups = {path: xdist_group_of(module) for path, module in modules.items()}
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        group = TRIAL_GROUP if _is_trial(item) else groups[item.nodeid.split("::", 1)[0]]
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(tryfirst=True)  # before xdist's, which sends the node ids to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker under ``--dist loadgroup``, every grouped item's node
    id must end in ``@group``: that suffix is all the controller schedules
    by. pytest-xdist (3.8) writes it to ``item._nodeid``, which pytest 9.2 no
    longer reads (a node id is ``item._id`` there), so the groups would be
    silently ignored and a module's real part started on every worker. Write
    it where this pytest reads it, and fail the run if it still is not there."""
    if not getattr(session.config.option, "loadgroup", False):  # set on xdist workers only
        return
    from _pytest.nodeid import NodeId  # pytest >= 9.2; older ones never get here with a missing suffix

    for item in session.items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if not names:
            continue
        suffix = "@" + "_".join(names)
        if not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)  # type: ignore[attr-defined]
        if not item.nodeid.endswith(suffix):
            raise pytest.UsageError(f"{item.nodeid}: cannot give it its xdist group {suffix[1:]} "
                                    "(tests/conftest.py: pytest_collection_finish)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A trial ``TestCase`` runs the reactor itself: once a pytest-twisted test
    has started the reactor (in its greenlet, for the rest of the process),
    trial cannot. Say so, rather than fail with ReactorAlreadyRunning deep in
    trial: the trial tests must come first on their worker (the "trial" xdist
    group is the largest, so xdist hands it out first)."""
    if _is_trial(item):
        from twisted.internet import reactor

        if reactor.running:  # type: ignore[attr-defined]
            pytest.fail(f"{item.nodeid}: a trial TestCase scheduled after a pytest-twisted test started "
                        "the reactor in this process; trial tests must run first (tests/conftest.py)",
                        pytrace=False)
