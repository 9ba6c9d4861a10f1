"""Active HTTP health checks (an Upstream's ``healthChecks``): every
``interval``, ``GET path`` to each endpoint (on a kept-alive connection), answered
within ``timeout`` with an expected status (200 by default) or it fails.
Results go to the snapshot's :class:`twistgw.core.health.HealthState`,
which takes endpoints out of the rotation and back (see that module).
Also the sweeps of ``outlierDetection`` (every ``interval``, ejected
endpoints whose time is up come back; :mod:`twistgw.core.outlier`).
A reload stops the old snapshot's checks and sweeps and starts the new one's.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import task
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.web.client import Agent, HTTPConnectionPool, readBody
from twisted.web.http_headers import Headers as TwistedHeaders

from twistgw.api.types import Endpoint
from twistgw.core.health import HealthState
from twistgw.core.outlier import OutlierState

__all__ = ["HealthChecker"]


class HealthChecker:
    """Runs the health checks of the serving snapshot."""

    _log = Logger(namespace="twistgw.health")

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        # twisted.web.client is untyped: Any at this seam
        agent: Any = Agent
        pool: Any = HTTPConnectionPool
        # one kept-alive connection per endpoint, reused (Envoy's reuseConnection default)
        checks_pool = pool(reactor, persistent=True)
        checks_pool.maxPersistentPerHost = 1
        self._agent = agent(reactor, pool=checks_pool)
        self._loops: list[task.LoopingCall] = []

    def sync(self, snapshot: Any) -> None:
        """Check what ``snapshot`` asks for (and stop the previous checks)."""
        self.stop()
        for state in snapshot.health.values():
            loop = task.LoopingCall(self._round, state)
            loop.clock = self.reactor
            loop.start(state.check.interval, now=True).addErrback(
                lambda f: self._log.failure("Health check loop failed", f))
            self._loops.append(loop)
        for outlier in getattr(snapshot, "outliers", {}).values():
            outlier.clock = self.reactor.seconds
            loop = task.LoopingCall(self._sweep, outlier)
            loop.clock = self.reactor
            loop.start(outlier.config.interval, now=False).addErrback(
                lambda f: self._log.failure("Outlier detection sweep failed", f))
            self._loops.append(loop)

    def _sweep(self, outlier: OutlierState) -> None:
        up = outlier.upstream
        for endpoint in outlier.sweep():
            self._log.info("Endpoint {host}:{port} of upstream {ns}/{name} is back from outlier ejection",
                           host=endpoint.host, port=endpoint.port, ns=up.namespace, name=up.name)

    def stop(self) -> None:
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops = []

    def _round(self, state: HealthState) -> None:
        for endpoint in state.upstream.endpoints:
            self.check(state, endpoint)

    def check(self, state: HealthState, endpoint: Endpoint) -> Deferred[None]:
        check = state.check
        up = state.upstream
        url = f"http://{endpoint.host}:{endpoint.port}{check.path}".encode("ascii")
        host = (check.host or up.name).encode("ascii")
        d: Deferred[Any] = self._agent.request(b"GET", url, TwistedHeaders({b"host": [host],
                                                                             b"user-agent": [b"twistgw/health"]}))
        d.addTimeout(check.timeout, self.reactor)

        def answered(response: Any) -> Deferred[int]:
            return readBody(response).addCallback(lambda _: int(response.code))

        d.addCallback(answered)
        d.addCallbacks(lambda status: self._report(state, endpoint, check.passes(status), f"status {status}"),
                       lambda f: self._report(state, endpoint, False, f.getErrorMessage() or f.type.__name__))
        return d

    def _report(self, state: HealthState, endpoint: Endpoint, passed: bool, what: str) -> None:
        changed = state.report(endpoint, passed)
        if changed is None:
            return
        up = state.upstream
        if changed:
            self._log.info("Endpoint {host}:{port} of upstream {ns}/{name} is healthy again ({what})",
                           host=endpoint.host, port=endpoint.port, ns=up.namespace, name=up.name, what=what)
        else:
            self._log.warn("Endpoint {host}:{port} of upstream {ns}/{name} is unhealthy and leaves the"
                           " rotation ({what})", host=endpoint.host, port=endpoint.port, ns=up.namespace,
                           name=up.name, what=what)
