"""The running gateway: loads the config directory, serves it, reloads it.

A reload reads the whole directory, validates it, compiles every plugin's
options into a new Snapshot, and only then swaps the serving reference. Any
error rejects the whole change; the last good snapshot keeps serving.
"""

from __future__ import annotations

import gc
import os
import signal
from typing import Any, Iterable

from prometheus_client import REGISTRY
from twisted.application import service
from twisted.internet import defer, task
from twisted.internet.endpoints import serverFromString
from twisted.internet.error import CannotListenError
from twisted.logger import Logger
from twisted.python.failure import Failure

from twistgw.config.defaults import (BACKLOG, DRAIN_TIMEOUT, HEAD_TIMEOUT, IDLE_TIMEOUT, POLL_INTERVAL,
                                     TUNNEL_IDLE_TIMEOUT,
                                     UPSTREAM_TIMEOUT)
from twistgw.config.http2 import DEFAULT as HTTP2_DEFAULT
from twistgw.config.loader import ConfigError, load_directory
from twistgw.config.names import is_yaml_file, with_backlog
from twistgw.core.accesslog import AccessLog
from twistgw.core.gateways import gateway_notes
from twistgw.core.plugins import GatewayInfo, PluginHost
from twistgw.core.snapshot import Snapshot, build_snapshot
from twistgw.core.tlsroutes import TlsRoutes
from twistgw.engine.listening import gateway_endpoint
from twistgw.engine.reactor import streamline
from twistgw.engine.server import Gateway, GatewayFactory
from twistgw.engine.upstream import UpstreamPool
from twistgw.runtime.admin import AdminRoot, quiet_site
from twistgw.runtime.devecho import start_echo
from twistgw.runtime.gateways import GatewayListeners
from twistgw.runtime.listeners import Listener, exit_after_stopping, listen_problem, open_all
from twistgw.runtime.health import HealthChecker
from twistgw.runtime.metrics import Metrics

_METRICS: Metrics | None = None


def shared_metrics() -> Metrics:
    """One Metrics per process (prometheus-client registers names globally)."""
    global _METRICS
    if _METRICS is None:
        _METRICS = Metrics(REGISTRY)
    return _METRICS


def fingerprint(directory: str) -> tuple:
    """Cheap change detection: names, sizes, mtimes and inodes of the YAML files."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        return (("error", str(exc)),)
    out = []
    for name in names:
        if not is_yaml_file(name):
            continue
        try:
            st = os.stat(os.path.join(directory, name))
        except OSError:
            continue
        out.append((name, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


def file_stats(paths: tuple[str, ...]) -> tuple:
    """Size, mtime and inode of each file (following symbolic links, so a
    Kubernetes Secret volume's swapped link counts as a change)."""
    out: list[tuple[str, int | None, int | None, int | None]] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((path, None, None, None))
            continue
        out.append((path, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


def freeze_startup_heap() -> int:
    """Once a gateway process has imported and configured everything (its
    modules, plugins and first configuration): collect, then move every
    object that exists to the garbage collector's permanent generation
    (:func:`gc.freeze`), and return how many there are.

    Those objects live as long as the process, but every full (generation
    2) collection used to walk all of them: 25–36 ms pauses a few times a
    minute under load, every request in flight waiting, which was the whole
    p99 of uncached LDAP requests (docs/performance.md). Only what is made
    afterwards is walked now. Objects are still freed by reference counting;
    a cycle among the first configuration's objects, once a reload drops
    them, is never collected (once, bounded: later configurations are not
    frozen). Called by ``twist twistgw`` and ``--workers``' workers, not by
    :class:`GatewayService` itself (a test process starting many gateways
    must not freeze its own heap each time)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class GatewayService(service.MultiService):
    """Config loading and reloading, the proxy listeners and the admin listener."""

    _log = Logger(namespace="twistgw")

    def __init__(self, config_dir: str, listen: Iterable[str] = ("tcp:8080",),
                 admin: str | None = "tcp:9901:interface=127.0.0.1", reactor: Any = None,
                 plugins: PluginHost | None = None, poll_interval: float = POLL_INTERVAL,
                 access_log: bool | AccessLog = True, drain_timeout: float = DRAIN_TIMEOUT,
                 upstream_timeout: float = UPSTREAM_TIMEOUT, idle_timeout: float = IDLE_TIMEOUT,
                 head_timeout: float = HEAD_TIMEOUT, backlog: int = BACKLOG,
                 tunnel_idle_timeout: float = TUNNEL_IDLE_TIMEOUT, http2: bool = True) -> None:
        super().__init__()
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.reactor = reactor
        self.health = HealthChecker(reactor)
        self.config_dir = config_dir
        self.plugins = plugins or PluginHost.create()
        self.metrics = shared_metrics()
        self.plugins.configure(GatewayInfo(reactor, self.metrics.registry, Logger(namespace="twistgw.plugin")))
        self.gateway = Gateway(reactor, self.plugins, UpstreamPool(reactor, idle_timeout=idle_timeout,
                                                                  tunnel_idle_timeout=tunnel_idle_timeout),
                               self.metrics, access_log, upstream_timeout)
        self.poll_interval = poll_interval
        self.drain_timeout = drain_timeout
        self.generation = 0
        self._fingerprint: tuple | None = None
        #: files the configuration reads besides its YAML (sslFiles)
        self._watched: tuple[str, ...] = ()
        self.last_error: ConfigError | None = None
        #: the --listen endpoints' connections: HTTP/2 beside HTTP/1.1 unless --no-http2
        self.factory = GatewayFactory(self.gateway, timeout=idle_timeout, head_timeout=head_timeout,
                                      http2=HTTP2_DEFAULT if http2 else None)
        self.listeners: list[Listener] = [
            Listener("--listen", description, gateway_endpoint(reactor, with_backlog(description, backlog),
                                                               self._tls_routes),
                     self.factory, "Gateway")
            for description in listen]
        self.gateways = GatewayListeners(reactor, self.gateway, backlog, idle_timeout, head_timeout, drain_timeout)
        self._listening = False
        self.admin_listener: Listener | None = None
        if admin:
            self.admin_listener = Listener("--admin", admin, serverFromString(reactor, admin),
                                           quiet_site(AdminRoot(self)), "Admin endpoint")
        self._echo_listen: str | None = None
        self._echo_port: Any = None
        self._poller = task.LoopingCall(self.reload_if_changed)
        self._poller.clock = reactor

    # -- configuration -----------------------------------------------------

    @property
    def snapshot(self) -> Snapshot | None:
        return self.gateway.snapshot

    def _tls_routes(self) -> TlsRoutes | None:
        """The serving snapshot's certificates by SNI (TLS listeners ask at
        each handshake)."""
        snapshot = self.gateway.snapshot
        return snapshot.tls if snapshot is not None else None

    def load(self) -> Snapshot:
        """Build a snapshot from the directory (raises ConfigError)."""
        fp = fingerprint(self.config_dir)
        config = load_directory(self.config_dir, keep_going=True, merges=self.plugins.option_merges())
        snapshot = build_snapshot(config, self.plugins, self.generation + 1)
        for note in (*config.skipped, *gateway_notes(config)):
            self._log.info("{note}", note=note)
        # sslFiles outside the YAML: a changed certificate file reloads too
        self._watched = tuple(sorted({f for vs in config.virtual_services if vs.tls is not None
                                      for f in vs.tls.files}))
        self._fingerprint = fp + file_stats(self._watched)
        return snapshot

    def load_initial(self) -> Snapshot:
        """The first load: errors propagate so the process refuses to start."""
        snapshot = self.load()
        self.gateways.first(snapshot)
        self._swap(snapshot)
        return snapshot

    def _swap(self, snapshot: Snapshot) -> None:
        self.generation = snapshot.generation
        self.gateway.snapshot = snapshot
        self.gateway.sync_tracing(snapshot)  # the Gateways' span exporters
        self.last_error = None
        self.metrics.reload(True, snapshot.generation, snapshot.loaded_at)
        self.plugins.config_loaded(snapshot.plugin_compiled, snapshot.config.settings)
        self._sync_echo(snapshot)
        self.health.sync(snapshot)  # upstreams' healthChecks
        if snapshot.tls and not any(lst.description.startswith(("ssl:", "tls:")) for lst in self.listeners):
            served = {vs.key for view in snapshot.gateways.values() if view.tls is not None
                      for vs in view.virtual_services}
            unserved = [vs.key for vs in snapshot.config.virtual_services if vs.tls is not None
                        and vs.key not in served]
            if unserved:
                self._log.warn("VirtualServices with sslConfig ({names}) are served on TLS listeners only, and"
                               " none serves them: add --listen tls:8443, or a Gateway with ssl: true (see"
                               " docs/tls.md)", names=", ".join(unserved))

    def _sync_echo(self, snapshot: Snapshot) -> None:
        gateway_settings = snapshot.config.settings.get("gateway") or {}
        listen = (gateway_settings.get("echoServer") or {}).get("listen")
        if listen == self._echo_listen:
            return
        if self._echo_port is not None:
            self._echo_port.addCallback(lambda port: port.stopListening() if port is not None else None)
            self._echo_port = None
        self._echo_listen = listen
        if listen:
            self._echo_port = start_echo(self.reactor, listen)
            self._echo_port.addErrback(self._echo_failed, listen)

    def _echo_failed(self, failure: Failure, listen: str) -> None:
        """One line when the echo server cannot listen (a second demo
        running); a traceback only for what is not a listening problem."""
        if failure.check(CannotListenError, OSError):
            self._log.error("Development echo server not started: cannot listen on {listen}"
                            " (Settings spec.gateway.echoServer.listen): {reason}",
                            listen=listen, reason=listen_problem(failure.value))
        else:
            self._log.failure("Could not start the development echo server on {listen}", failure, listen=listen)

    def reload(self, why: str = "requested") -> bool:
        """Reload now; on error log every issue and keep serving the last good snapshot."""
        try:
            snapshot = self.load()
        except ConfigError as exc:
            self._fingerprint = self._current_fingerprint()
            self.last_error = exc
            self.metrics.reload(False)
            self._log.error(
                "Configuration change rejected ({why}); still serving generation {generation}."
                " {count} problem(s):\n{problems}",
                why=why, generation=self.generation, count=len(exc.issues),
                problems="\n".join(f"  {i}" for i in exc.issues),
            )
            return False
        except Exception:
            self._fingerprint = self._current_fingerprint()
            self.metrics.reload(False)
            self._log.failure("Configuration reload failed unexpectedly ({why});"
                              " still serving generation {generation}", why=why, generation=self.generation)
            return False
        if not self._listen_for(snapshot, why):
            return False
        self._swap(snapshot)
        self.gateways.commit(snapshot)
        vs_count = len(snapshot.config.virtual_services)
        self._log.info("Configuration generation {generation} is serving ({why}): {vs} virtual service(s),"
                       " {routes} route(s)", generation=snapshot.generation, why=why, vs=vs_count,
                       routes=len(snapshot.routes))
        return True

    def _listen_for(self, snapshot: Snapshot, why: str) -> bool:
        """Open the listeners of the Gateways ``snapshot`` adds (or moves);
        False, with the reason logged, when one cannot listen."""
        if not self._listening:  # before the first open_listeners: they open then
            self.gateways.first(snapshot)
            return True
        problems = self.gateways.prepare(snapshot, lambda listener: self._log.error(
            "twistgw: {line}", line=listener.line()))
        if not problems:
            return True
        self._fingerprint = fingerprint(self.config_dir)
        self.metrics.reload(False)
        self._log.error("Configuration change rejected ({why}); still serving generation {generation}"
                        " and its listeners:\n{problems}", why=why, generation=self.generation,
                        problems="\n".join(f"  {line}" for line in problems))
        return False

    def start_polling(self, interval: float) -> None:
        """Look for changed files every ``interval`` seconds."""
        if not self._poller.running:
            self._poller.start(interval, now=False)

    def stop_polling(self) -> None:
        if self._poller.running:
            self._poller.stop()

    def _current_fingerprint(self) -> tuple:
        return fingerprint(self.config_dir) + file_stats(self._watched)

    def reload_if_changed(self) -> None:
        if self._current_fingerprint() != self._fingerprint:
            self.reload("files changed")

    # -- listening -------------------------------------------------------------

    def all_listeners(self) -> list[Listener]:
        return [*self.listeners, *self.gateways.listeners(),
                *([self.admin_listener] if self.admin_listener else [])]

    def open_listeners(self) -> list[str]:
        """Listen on every endpoint now; the lines of those that cannot (then
        none listens). ``twist twistgw`` calls it before the reactor runs and
        exits on a problem; one that fails later stops the process."""
        self._listening = True
        if self.gateways.first_problems:
            return list(self.gateways.first_problems)
        return open_all(self.all_listeners(), lambda listener: exit_after_stopping(self.reactor, listener.line()))

    def not_listening(self) -> list[Listener]:
        """The endpoints that do not listen (yet, or at all)."""
        return [listener for listener in self.all_listeners() if not listener.listening()]

    # -- lifecycle -----------------------------------------------------------

    def startService(self) -> None:
        if self.gateway.snapshot is None:
            self.load_initial()
        if any(listener.port is None and listener.problem is None for listener in self.all_listeners()):
            problems = self.open_listeners()
            if problems:
                raise RuntimeError("; ".join(problems))
        streamline(self.reactor)  # epoll: no legacy logging context per ready socket
        super().startService()
        if self.poll_interval:
            self.start_polling(self.poll_interval)
        try:
            self._old_sighup = signal.signal(signal.SIGHUP, self._on_sighup)
        except ValueError:  # not the main thread (embedded use)
            self._old_sighup = None
        self._log.info("twistgw starting: gateway on {listen}; admin on {admin}; config {config}",
                       listen=", ".join([str(listener) for listener in self.listeners]
                                        + [listener.what for listener in self.gateways.listeners()]) or "(nothing)",
                       admin=str(self.admin_listener) if self.admin_listener else "(off)",
                       config=os.path.abspath(self.config_dir))

    def _on_sighup(self, signum: int, frame: Any) -> None:
        self.reactor.callFromThread(self.reload, "SIGHUP")

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        self.gateway.draining = True
        self.health.stop()
        self.stop_polling()
        # Stop accepting, then let in-flight requests finish (bounded).
        for listener in self.listeners:
            yield listener.close()
        for closing in self.gateways.stop():
            yield closing
        # HTTP/2 clients are told now (GOAWAY): no new stream, the open ones answered
        self.factory.goaway()
        self.gateways.goaway()
        deadline = self.reactor.seconds() + self.drain_timeout
        while self.gateway.inflight > 0 and self.reactor.seconds() < deadline:
            yield task.deferLater(self.reactor, 0.05, lambda: None)
        if self.gateway.inflight:
            self._log.warn("Stopping with {n} request(s) still in flight after {t}s",
                           n=self.gateway.inflight, t=self.drain_timeout)
        # Idle keep-alive connections, and any request the drain gave up on.
        yield self.factory.close_connections()
        for closed in self.gateways.close_connections():
            yield closed
        # what is queued goes to the collectors (at most 2 s: the exporters' threads send it)
        self.gateway.exporters.stop(2.0)
        if self.admin_listener is not None:
            yield self.admin_listener.close()
        service.Service.stopService(self)
        if self._echo_port is not None:
            self._echo_port.addCallback(lambda port: port.stopListening() if port is not None else None)
        yield self.gateway.forwarder.close()
        yield defer.ensureDeferred(self.plugins.unconfigure())
        self.gateways.close_files()
        if self.gateway.access_log is not None:
            self.gateway.access_log.close()  # the last lines, before the process ends
