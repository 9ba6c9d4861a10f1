"""Active HTTP health checks (an Upstream's ``healthChecks``): every
``interval`` (``noTrafficInterval``, 60 s by default, until the upstream has
had traffic: Envoy's rule), ``GET path`` to each endpoint (on a kept-alive
connection), answered within ``timeout`` with an expected status (200 by
default) or it fails. The first round runs at once; when the first request
goes to the upstream, a next round due later than ``interval`` is brought
forward to ``interval`` from then (Envoy waits the no-traffic interval out).
Whether an upstream has had traffic is kept across reloads.
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

from twistgw.api.http import HttpClient
from twistgw.api.types import Endpoint
from twistgw.core.health import HealthState
from twistgw.core.outlier import OutlierState

__all__ = ["HealthChecker"]


class HealthChecker:
    """Runs the health checks of the serving snapshot."""

    _log = Logger(namespace="twistgw.health")

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        # one kept-alive connection per endpoint, reused (Envoy's reuseConnection default);
        # the answer's body read up to the side calls' bound (twistgw.api.http.MAX_BODY); a GET on a
        # connection the endpoint closed while idle is sent again, not counted as a failed check
        self._client = HttpClient(reactor, max_per_host=1, retry_idempotent=True)
        self._loops: list[task.LoopingCall] = []
        #: the serving snapshot's health states, and each one's next round of checks
        self._health: dict[tuple[str, str], HealthState] = {}
        self._rounds: dict[HealthState, Any] = {}
        #: the upstreams (namespace, name) that have had traffic, kept across reloads
        self._used: set[tuple[str, str]] = set()

    def sync(self, snapshot: Any) -> None:
        """Check what ``snapshot`` asks for (and stop the previous checks)."""
        self._used |= {key for key, state in self._health.items() if state.traffic}
        self.stop()
        self._health = dict(snapshot.health)
        for key, state in self._health.items():
            if key in self._used:
                state.traffic = True
            state.on_traffic = lambda state=state: self._first_traffic(state)
            self._run(state)
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
        for state, call in self._rounds.items():
            state.on_traffic = None
            if call.active():
                call.cancel()
        self._rounds = {}

    def _run(self, state: HealthState) -> None:
        """One round of checks, and the next one scheduled (``state.interval`` from now)."""
        self._rounds[state] = self.reactor.callLater(state.interval, self._run, state)
        for endpoint in state.upstream.endpoints:
            self.check(state, endpoint)

    def _first_traffic(self, state: HealthState) -> None:
        """The upstream's first request: from now on every ``interval``."""
        call = self._rounds.get(state)
        if call is not None and call.active() and call.getTime() - self.reactor.seconds() > state.interval:
            call.reset(state.interval)

    def check(self, state: HealthState, endpoint: Endpoint) -> Deferred[None]:
        check = state.check
        up = state.upstream
        netloc = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
        url = f"http://{netloc}:{endpoint.port}{check.path}"
        host = (check.host or up.name).encode("ascii")
        d: Deferred[Any] = Deferred.fromCoroutine(self._client.request(
            "GET", url, headers={b"host": host, b"user-agent": b"twistgw/health"}, timeout=check.timeout))
        d.addCallbacks(lambda answer: self._report(state, endpoint, check.passes(answer.status),
                                                   f"status {answer.status}"),
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
