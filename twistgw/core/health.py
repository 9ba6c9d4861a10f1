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
"""

from __future__ import annotations

import attrs

from typing import Any, Sequence

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

    __slots__ = ("upstream", "watch", "_lb", "_all", "_current", "_health", "_outlier", "_active")

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
        return found

    def pick_hash(self, h: int) -> Endpoint | None:
        found: Endpoint | None = self._current.pick_hash(h)
        return found

    def pick_retry(self, tried: Sequence[Endpoint], h: int | None = None) -> Endpoint | None:
        """A retry's endpoint: among those taking traffic now (health,
        ejections and panic as for a first try), one not ``tried``."""
        found: Endpoint | None = self._current.pick_retry(tried, h)
        return found


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
