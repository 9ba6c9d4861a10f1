"""``--workers N``: several gateway processes serving the same listening sockets.

The parent (supervisor) validates the configuration, opens each ``--listen``
socket itself, never accepts on them, and spawns N workers. Each worker
adopts the sockets (``reactor.adoptStreamPort``), loads the configuration,
watches it for changes and serves, exactly like a single-process gateway;
the kernel spreads new connections over them. The parent serves the admin
endpoint: ``/metrics`` aggregates every worker through prometheus-client's
multiprocess mode, ``/readyz`` is ready while every worker runs. A worker
that dies is restarted (with backoff). On SIGTERM the parent stops its
workers with SIGTERM, and each drains its in-flight requests.

Only ``tcp:`` and ``tcp6:`` listen endpoints are supported with workers.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
from typing import Any, Sequence

from twisted.application import service
from twisted.internet import defer, protocol, task
from twisted.internet.endpoints import serverFromString
from twisted.logger import Logger
from twisted.web import resource

from twistgw.config.names import with_backlog
from twistgw.engine.listening import open_listening_socket
from twistgw.runtime.admin import TextLeaf
from twistgw.runtime.admin import quiet_site
from twistgw.runtime.listeners import Listener, exit_after_stopping, listen_problem, open_all

ENV_DIR = "PROMETHEUS_MULTIPROC_DIR"


def parse_workers(value: str) -> int:
    if value == "auto":
        return max(1, os.cpu_count() or 1)
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"--workers must be a number or 'auto', got {value!r}") from None
    if not 1 <= n <= 256:
        raise ValueError(f"--workers must be between 1 and 256, got {n}")
    return n


class _Worker(protocol.ProcessProtocol):
    def __init__(self, supervisor: "WorkersService", index: int) -> None:
        self.supervisor = supervisor
        self.index = index
        self.alive = False

    def connectionMade(self) -> None:
        self.alive = True

    def processEnded(self, reason: Any) -> None:
        self.alive = False
        self.supervisor.worker_ended(self, reason)


class WorkersService(service.MultiService):
    _log = Logger(namespace="twistgw.workers")

    def __init__(self, count: int, listen: Sequence[str], admin: str | None, worker_args: Sequence[str],
                 reactor: Any = None, backlog: int | None = None) -> None:
        """``listen``: the ``--listen`` endpoint strings as given; ``backlog``
        is added to those that set none."""
        super().__init__()
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.reactor = reactor
        self.count = count
        self.listen = list(listen)
        self.backlog = backlog
        self.worker_args = list(worker_args)
        self.sockets: list[socket.socket] = []
        self.workers: dict[int, _Worker] = {}
        self.transports: dict[int, Any] = {}
        self.stopping = False
        self._restart_delay: dict[int, float] = {}
        self.metrics_dir = tempfile.mkdtemp(prefix="twistgw-metrics-")
        self._ended: dict[int, defer.Deferred[None]] = {}
        self.admin_listener: Listener | None = None
        if admin:
            self.admin_listener = Listener("--admin", admin, serverFromString(reactor, admin),
                                           quiet_site(_AdminRoot(self)), "Admin endpoint")

    def open_listeners(self) -> list[str]:
        """Bind every ``--listen`` socket and the admin endpoint now; the
        lines of those that cannot (then nothing stays open)."""
        problems = []
        for description in self.listen[len(self.sockets):]:
            try:
                opened = description if self.backlog is None else with_backlog(description, self.backlog)
                self.sockets.append(open_listening_socket(self.reactor, opened))
            except OSError as exc:
                problems.append(f"cannot listen on --listen {description}: {listen_problem(exc)}")
                break
        if not problems and self.admin_listener is not None:
            problems = open_all([self.admin_listener],
                                lambda listener: exit_after_stopping(self.reactor, listener.line()))
        if problems:
            for sock in self.sockets:
                sock.close()
            self.sockets = []
        return problems

    def startService(self) -> None:
        if len(self.sockets) < len(self.listen):
            problems = self.open_listeners()
            if problems:
                raise RuntimeError("; ".join(problems))
        super().startService()
        for i in range(self.count):
            self.spawn(i)
        self._log.info("Started {n} workers on {listen}", n=self.count, listen=self.listen)

    def spawn(self, index: int) -> None:
        fds = {0: "w", 1: 1, 2: 2}
        args = [sys.executable, "-m", "twistgw.runtime.worker", *self.worker_args]
        for k, sock in enumerate(self.sockets):
            fd = 3 + k
            fds[fd] = sock.fileno()
            args += ["--fd", f"{fd}:{'6' if sock.family == socket.AF_INET6 else '4'}"]
        env = dict(os.environ, **{ENV_DIR: self.metrics_dir})
        worker = _Worker(self, index)
        self.workers[index] = worker
        self.transports[index] = self.reactor.spawnProcess(worker, sys.executable, args, env=env, childFDs=fds)

    def worker_ended(self, worker: _Worker, reason: Any) -> None:
        pid = getattr(self.transports.get(worker.index), "pid", None)
        if pid is None:
            pid = "?"
        try:
            from prometheus_client import multiprocess

            if isinstance(pid, int):
                multiprocess.mark_process_dead(pid, self.metrics_dir)
        except Exception:
            pass
        if self.stopping:
            d = self._ended.pop(worker.index, None)
            if d is not None:
                d.callback(None)
            return
        delay = min(self._restart_delay.get(worker.index, 0.5) * 2, 30.0)
        self._restart_delay[worker.index] = delay
        self._log.error("Worker {i} exited ({reason}); restarting in {delay:.1f}s",
                        i=worker.index, reason=reason.getErrorMessage(), delay=delay)
        self.reactor.callLater(delay, self._respawn, worker.index)

    def _respawn(self, index: int) -> None:
        if not self.stopping:
            self.spawn(index)

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        self.stopping = True
        waits = []
        for index, worker in self.workers.items():
            if worker.alive:
                self._ended[index] = d = defer.Deferred[None]()
                waits.append(d)
                try:
                    self.transports[index].signalProcess("TERM")
                except Exception:
                    pass
        if waits:
            timeout = task.deferLater(self.reactor, 30, lambda: None)
            yield defer.DeferredList([defer.DeferredList(waits), timeout], fireOnOneCallback=True)
        for index, worker in self.workers.items():
            if worker.alive:
                try:
                    self.transports[index].signalProcess("KILL")
                except Exception:
                    pass
        for sock in self.sockets:
            sock.close()
        if self.admin_listener is not None:
            yield self.admin_listener.close()
        yield service.MultiService.stopService(self)
        shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def ready(self) -> bool:
        return (not self.stopping and len(self.sockets) == len(self.listen)
                and all(w.alive for w in self.workers.values()))


class _AdminRoot(resource.Resource):
    def __init__(self, supervisor: WorkersService) -> None:
        super().__init__()
        self.supervisor = supervisor
        self.putChild(b"healthz", TextLeaf(lambda: (200, b"text/plain", b"ok\n")))
        self.putChild(b"readyz", TextLeaf(self._ready))
        self.putChild(b"metrics", TextLeaf(self._metrics))

    def _ready(self) -> tuple[int, bytes, bytes]:
        alive = sum(w.alive for w in self.supervisor.workers.values())
        body = f"{alive}/{self.supervisor.count} workers running\n".encode()
        return (200 if self.supervisor.ready() else 503), b"text/plain", body

    def _metrics(self) -> tuple[int, bytes, bytes]:
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess
        from prometheus_client.exposition import CONTENT_TYPE_LATEST

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=self.supervisor.metrics_dir)
        return 200, CONTENT_TYPE_LATEST.encode(), generate_latest(registry)


__all__ = ["WorkersService", "parse_workers"]
