"""Active health of an upstream's endpoints: what the runtime's checker
reports (:mod:`twistgw.runtime.health`) and what balancers pick from.

An upstream with ``healthChecks`` gets one :class:`HealthState` per
snapshot; each of its balancers (one per route subset) is a
:class:`CheckedBalancer`, which picks among the healthy endpoints. Envoy's
rules: an endpoint leaves the rotation after ``unhealthyThreshold``
failed checks in a row and comes back after ``healthyThreshold`` passed
ones; when fewer than half the endpoints are healthy (Envoy's default
panic threshold, 50 %), every endpoint takes traffic again ("panic"), as
sending everything to a few survivors would take them down too. Endpoints
start healthy (the first check runs at once). The request path pays
nothing for this: a change rebuilds the balancers when it is reported.
"""

from __future__ import annotations

import attrs

from typing import Any

from twistgw.api.types import Endpoint, UpstreamInfo
from twistgw.config.model import HealthCheck, LoadBalancer
from twistgw.core.balancers import HashBalancer, make_balancer

__all__ = ["PANIC_THRESHOLD", "CheckedBalancer", "HealthState"]

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
            balancer.refresh(self.unhealthy)


class CheckedBalancer:
    """A balancer over the healthy endpoints of its subset (all of them in panic)."""

    __slots__ = ("upstream", "_lb", "_all", "_current")

    def __init__(self, upstream: UpstreamInfo, lb: LoadBalancer | None, state: HealthState) -> None:
        self.upstream = upstream
        self._lb = lb
        self._all = make_balancer(upstream, lb)
        self._current: Any = self._all
        state.watch(self)

    @property
    def hashes(self) -> bool:
        return isinstance(self._all, HashBalancer)

    @property
    def healthy(self) -> tuple[Endpoint, ...]:
        """The endpoints taking traffic now."""
        return tuple(self._current.upstream.endpoints)

    def refresh(self, unhealthy: set[Endpoint]) -> None:
        eps = self.upstream.endpoints
        healthy = tuple(ep for ep in eps if ep not in unhealthy)
        if len(healthy) == len(eps) or len(healthy) * 100 < len(eps) * PANIC_THRESHOLD:
            self._current = self._all  # all healthy, or panic: every endpoint
            return
        up = self.upstream
        self._current = make_balancer(attrs.evolve(up, endpoints=healthy), self._lb)

    def pick(self) -> Endpoint | None:
        found: Endpoint | None = self._current.pick()
        return found

    def pick_hash(self, h: int) -> Endpoint | None:
        found: Endpoint | None = self._current.pick_hash(h)
        return found
