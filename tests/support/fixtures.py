"""The shared pytest fixtures (made available to every test directory by
``tests/conftest.py``); the helpers they build on are in :mod:`support.http`.

``backend``           a loopback HTTP backend (twisted.web, port 0) that echoes
                      the request as JSON; see :class:`support.http.EchoBackend`
                      for its special paths (slow large bodies, hangs, resets,
                      sleeps).
``backend_factory``   ``backend_factory(name)`` starts another one (round robin
                      tests need two).
``raw_server``        ``raw_server(reply)`` a TCP server answering every request
                      with the bytes you give it (malformed responses,
                      resets, silence); records what it received.
``unused_port``       a loopback port number nobody listens on (refused).
``config_dir``        ``config_dir(yaml_text, name="config.yaml")`` writes a
                      configuration directory under ``tmp_path`` and returns
                      its path; call again with the same ``directory=`` to
                      add or replace files.
``gateway``           ``gateway(config_dir_path, plugins=..., **service_options)``
                      starts :func:`twistgw.sdk.testing.start_gateway` and stops it
                      at teardown. ``load_entry_points`` defaults to False
                      here; pass True to load the installed plugins.
``redis_cluster``     a real Redis Cluster (3 primaries, 3 replicas, ``redis-server``
                      on loopback; :class:`support.rediscluster.RedisClusterServers`),
                      started once per test session: each test gets it whole
                      (every node up, cluster ok) and empty (FLUSHALL), and may
                      kill, fail over or reshard it (it is healed afterwards).
"""

from __future__ import annotations

import os
import textwrap
from typing import Any, Iterable

import pytest
import pytest_twisted
from twisted.internet import defer, protocol

from support.http import Backend, RawServer, reactor, start_backend

__all__ = ['backend_factory', 'backend', 'raw_server', 'unused_port', 'config_dir', 'gateway',
           'redis_cluster_servers', 'redis_cluster']


@pytest.fixture
def backend_factory() -> Any:
    """``backend_factory(name="backend")`` → a started :class:`Backend`."""
    started: list[Backend] = []

    def start(name: str = "backend") -> Backend:
        b = start_backend(name)
        started.append(b)
        return b

    yield start
    for b in started:
        pytest_twisted.blockon(defer.ensureDeferred(b.close()))


@pytest.fixture
def backend(backend_factory: Any) -> Backend:
    """One echo backend named ``backend``."""
    return backend_factory("backend")


@pytest.fixture
def raw_server() -> Any:
    """``raw_server(reply, close_after=True, pause_reading=False)`` → a
    listening :class:`RawServer`."""
    started: list[RawServer] = []

    def start(reply: Any, close_after: bool = True, pause_reading: bool = False) -> RawServer:
        f = RawServer(reply, close_after, pause_reading)
        f.listening = reactor.listenTCP(0, f, interface="127.0.0.1")
        f.port = f.listening.getHost().port
        started.append(f)
        return f

    yield start
    for f in started:
        pytest_twisted.blockon(defer.maybeDeferred(f.listening.stopListening))
        for p in f.connections:
            if p.transport is not None:
                p.transport.abortConnection()


@pytest.fixture
def unused_port() -> int:
    """A loopback port that was just free (connections to it are refused)."""
    p = reactor.listenTCP(0, protocol.ServerFactory(), interface="127.0.0.1")
    number = p.getHost().port
    pytest_twisted.blockon(defer.maybeDeferred(p.stopListening))
    return number


@pytest.fixture
def config_dir(tmp_path: Any) -> Any:
    """``config_dir(yaml_text, name="config.yaml", directory=None)`` → path.

    Writes ``yaml_text`` (dedented) to ``name`` in a fresh directory under
    ``tmp_path`` (or in ``directory``, replacing the file atomically) and
    returns the directory as a string.
    """
    counter = [0]

    def write(text: str, name: str = "config.yaml", directory: str | None = None) -> str:
        if directory is None:
            counter[0] += 1
            d = tmp_path / f"config{counter[0]}"
            d.mkdir()
            directory = str(d)
        path = os.path.join(directory, name)
        tmp = os.path.join(directory, f".{name}.tmp")
        with open(tmp, "w") as f:
            f.write(textwrap.dedent(text))
        os.replace(tmp, path)
        return directory

    return write


@pytest.fixture
def gateway() -> Any:
    """``gateway(config_dir, plugins=(), load_entry_points=False, **service_options)``
    → a :class:`twistgw.sdk.testing.RunningGateway`, stopped at teardown.

    ``service_options`` go to ``GatewayService`` (e.g. ``head_timeout=0.5``,
    ``upstream_timeout=2``, ``idle_timeout=5``, ``poll_interval=0.1``).
    """
    from twistgw.sdk.testing import start_gateway

    started: list[Any] = []

    def start(config_dir: str, plugins: Iterable[tuple[str, object]] = (),
              load_entry_points: bool = False, **service_options: Any) -> Any:
        gw = start_gateway(config_dir, plugins=plugins, load_entry_points=load_entry_points,
                           **service_options)
        started.append(gw)
        return gw

    yield start
    for gw in started:
        pytest_twisted.blockon(defer.ensureDeferred(gw.stop()))


#: every node of the shared cluster: a dead primary is replaced after 1 s; a slot with
#: no node leaves the other slots served (the tests of denyOnFail need that)
CLUSTER_ARGS = ("--cluster-require-full-coverage", "no")


@pytest.fixture(scope="session")
def redis_cluster_servers(tmp_path_factory: Any) -> Any:
    """The session's Redis Cluster (use ``redis_cluster`` in tests)."""
    from support.rediscluster import RedisClusterServers

    cluster = RedisClusterServers(tmp_path_factory.mktemp("redis-cluster"), node_timeout=1000, args=CLUSTER_ARGS)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_cluster(redis_cluster_servers: Any) -> Any:
    """The session's Redis Cluster, whole and empty for this test (healed after it)."""
    redis_cluster_servers.heal()
    redis_cluster_servers.flush()
    yield redis_cluster_servers
    redis_cluster_servers.heal()
