"""Active health of an upstream's endpoints: what the runtime's checker
reports (:mod:`twistgw.runtime.health`) and what balancers pick from.

An upstream with ``healthChecks`` gets one :class:`HealthState` per
snapshot; each of its balancers (one per route subset) is a
:class:`CheckedBalancer`, which picks among the healthy endpoints. Envoy's
rules: an endpoint leaves the rotation after ``unhealthyThreshold``
failed checks in a row and comes back after ``healthyThreshold`` passed
ones; when fewer than half the endpoints are healthy (Envoy's default
panic threshold, 50 %; ``loadBalancerConfig.healthyPanicThreshold``
changes it, and ejected endpoints of ``outlierDetection`` count as
unhealthy here too), every endpoint takes traffic again ("panic"), as
sending everything to a few survivors would take them down too. Endpoints
start healthy (the first check runs at once). The request path pays
nothing for this: a change rebuilds the balancers when it is reported.

The checks run every ``noTrafficInterval`` (60 s by default) until the
upstream has had traffic, then every ``interval`` (Envoy's rule): a
balancer's first pick of an endpoint tells the state (:meth:`HealthState.saw_traffic`),
one test per pick until then and none after.
"""

from __future__ import annotations

import attrs

from typing import Any, Callable, Sequence

from twistgw.api.types import Endpoint, UpstreamInfo
from twistgw.config.model import HealthCheck, LoadBalancer, UpstreamResource
from twistgw.core.balancers import HashBalancer, make_balancer
from twistgw.core.outlier import OutlierState, UpstreamWatch

__all__ = ["PANIC_THRESHOLD", "CheckedBalancer", "HealthState", "UpstreamStates"]

#: Envoy's default healthy panic threshold, percent
PANIC_THRESHOLD = 50


class HealthState:
    """The active-check health of one upstream's endpoints."""

    def __init__(self, upstream: UpstreamInfo, check: HealthCheck) -> None:
        self.upstream = upstream
        self.check = check
        self.unhealthy: set[Endpoint] = set()
        self._fails: dict[Endpoint, int] = {}
        self._passes: dict[Endpoint, int] = {}
        self._watchers: list[CheckedBalancer] = []
        #: a request went to one of the endpoints (kept across reloads by the runtime)
        self.traffic = False
        #: told once, at the first traffic (the runtime brings the next check forward)
        self.on_traffic: Callable[[], None] | None = None

    @property
    def interval(self) -> float:
        """The time between two rounds of checks now: ``noTrafficInterval``
        until the upstream has had traffic, ``interval`` from then on."""
        return self.check.interval if self.traffic else self.check.no_traffic_interval

    def saw_traffic(self) -> None:
        if self.traffic:
            return
        self.traffic = True
        if self.on_traffic is not None:
            self.on_traffic()

    def watch(self, balancer: "CheckedBalancer") -> None:
        self._watchers.append(balancer)

    def report(self, endpoint: Endpoint, passed: bool) -> bool | None:
        """One check's result; returns the endpoint's new health when it
        changed (True: back in the rotation), else None."""
        if passed:
            self._fails[endpoint] = 0
            self._passes[endpoint] = self._passes.get(endpoint, 0) + 1
            if endpoint in self.unhealthy and self._passes[endpoint] >= self.check.healthy_threshold:
                self.unhealthy.discard(endpoint)
                self._changed()
                return True
            return None
        self._passes[endpoint] = 0
        self._fails[endpoint] = self._fails.get(endpoint, 0) + 1
        if endpoint not in self.unhealthy and self._fails[endpoint] >= self.check.unhealthy_threshold:
            self.unhealthy.add(endpoint)
            self._changed()
            return False
        return None

    def _changed(self) -> None:
        for balancer in self._watchers:
            balancer.refresh()


class CheckedBalancer:
    """A balancer over the endpoints of its subset that take traffic: not
    failing active checks (``healthChecks``), not ejected
    (``outlierDetection``); all of them in panic (fewer healthy than the
    ``healthyPanicThreshold``, 50 % by default; 0 disables panic). It also
    carries the upstream's :class:`~twistgw.core.outlier.UpstreamWatch`
    (``watch``) when the engine has something to report."""

    __slots__ = ("upstream", "watch", "_lb", "_all", "_current", "_health", "_outlier", "_active", "_quiet")

    def __init__(self, upstream: UpstreamInfo, lb: LoadBalancer | None, state: HealthState | None,
                 outlier: OutlierState | None = None, active: dict[Endpoint, int] | None = None) -> None:
        self.upstream = upstream
        self._lb = lb
        self._health = state
        self._outlier = outlier
        self._active = active
        self.watch = UpstreamWatch(active, outlier) if active is not None or outlier is not None else None
        self._all = make_balancer(upstream, lb, active)
        self._current: Any = self._all
        #: the health state not yet told of traffic (None once told, or without checks)
        self._quiet = state if state is not None and not state.traffic else None
        if state is not None:
            state.watch(self)
        if outlier is not None:
            outlier.watch(self)

    @property
    def hashes(self) -> bool:
        return isinstance(self._all, HashBalancer)

    @property
    def healthy(self) -> tuple[Endpoint, ...]:
        """The endpoints taking traffic now."""
        return tuple(self._current.upstream.endpoints)

    def refresh(self) -> None:
        """The health of an endpoint changed: rebuild what picks."""
        out: set[Endpoint] = set()
        if self._health is not None:
            out |= self._health.unhealthy
        if self._outlier is not None:
            out |= self._outlier.ejected.keys()
        eps = self.upstream.endpoints
        healthy = tuple(ep for ep in eps if ep not in out)
        threshold = PANIC_THRESHOLD if self._lb is None else self._lb.panic_threshold
        if len(healthy) == len(eps) or len(healthy) * 100 < len(eps) * threshold:
            self._current = self._all  # all healthy, or panic: every endpoint
            return
        up = self.upstream
        self._current = make_balancer(attrs.evolve(up, endpoints=healthy), self._lb, self._active)

    def pick(self) -> Endpoint | None:
        found: Endpoint | None = self._current.pick()
        if self._quiet is not None and found is not None:
            self._traffic()
        return found

    def pick_hash(self, h: int) -> Endpoint | None:
        found: Endpoint | None = self._current.pick_hash(h)
        if self._quiet is not None and found is not None:
            self._traffic()
        return found

    def pick_retry(self, tried: Sequence[Endpoint], h: int | None = None) -> Endpoint | None:
        """A retry's endpoint: among those taking traffic now (health,
        ejections and panic as for a first try), one not ``tried``."""
        found: Endpoint | None = self._current.pick_retry(tried, h)
        return found

    def _traffic(self) -> None:
        """The first request this balancer sends: the upstream has had traffic."""
        state, self._quiet = self._quiet, None
        if state is not None:
            state.saw_traffic()


class UpstreamStates:
    """What one snapshot keeps per upstream for its balancers: active
    health, outlier detection, active requests (shared by the balancers
    of the upstream's subsets)."""

    def __init__(self) -> None:
        #: upstream → its active health (healthChecks), for the runtime's checker
        self.health: dict[tuple[str, str], HealthState] = {}
        #: upstream → its outlier detection (outlierDetection), for the runtime's sweeps
        self.outliers: dict[tuple[str, str], OutlierState] = {}
        #: upstream → its active requests per endpoint (leastRequest)
        self.active: dict[tuple[str, str], dict[Endpoint, int]] = {}

    def balancer(self, key: tuple[str, str], res: UpstreamResource, whole: UpstreamInfo, info: UpstreamInfo,
                 lb: LoadBalancer | None) -> CheckedBalancer:
        """A balancer over the endpoints of ``info`` (a subset of ``whole``) that take traffic."""
        state = outlier = None
        if res.health_check is not None:
            state = self.health.get(key)
            if state is None:
                state = self.health[key] = HealthState(whole, res.health_check)
        if res.outlier is not None:
            outlier = self.outliers.get(key)
            if outlier is None:
                outlier = self.outliers[key] = OutlierState(whole, res.outlier)
        active = self.active.setdefault(key, {}) if lb is not None and lb.kind == "leastRequest" else None
        return CheckedBalancer(info, lb, state, outlier, active)
