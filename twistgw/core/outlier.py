"""Passive health: an Upstream's ``outlierDetection`` (Envoy's outlier
detection, consecutive 5xx and consecutive gateway failures), and the
active-request counts of ``leastRequest``. Both learn from the engine,
which reports each forwarded request through the plan's ``watch`` (an
:class:`UpstreamWatch`): started, each response status (or the status of
the gateway's own answer to a local failure: connect failure, reset,
timeout), ended.

Envoy's rules, as its docs and source have them:

* a response with a 5xx status (or a local failure, counted as its 5xx)
  adds one to the endpoint's consecutive 5xx count; a 502, 503 or 504 also
  to its consecutive gateway failures; any other status resets both. When
  a count reaches its threshold, it is reset and the endpoint is ejected
  with the family's enforcing percentage as probability;
* an ejection is refused when it would take the ejected share above
  ``maxEjectionPercent``, unless no endpoint is ejected (at least one
  always may be);
* an ejected endpoint comes back at the first sweep (every ``interval``)
  after ``baseEjectionTime`` × the times it was ejected, at most
  ``max(maxEjectionTime, baseEjectionTime)``; the multiplier goes down by
  one at each sweep that finds it back in the rotation for an interval.

The sweeps are the runtime's (:mod:`twistgw.runtime.health`); this module
does no I/O and reads the clock it is given.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

from twisted.logger import Logger

from twistgw.api.types import Endpoint, UpstreamInfo
from twistgw.api.upstreampolicy import OutlierDetection

__all__ = ["OutlierState", "UpstreamWatch"]

_GATEWAY_ERRORS = frozenset({502, 503, 504})


class OutlierState:
    """The outlier detection of one upstream's endpoints (one per snapshot)."""

    _log = Logger(namespace="twistgw.outlier")

    def __init__(self, upstream: UpstreamInfo, config: OutlierDetection,
                 clock: Callable[[], float] = time.monotonic, roll: Callable[[], float] = random.random) -> None:
        self.upstream = upstream
        self.config = config
        #: the runtime sets it to the reactor's clock; tests to their own
        self.clock = clock
        self._roll = roll
        #: endpoint → when it was ejected
        self.ejected: dict[Endpoint, float] = {}
        #: endpoint → its ejection multiplier (times ejected, less the sweeps it stayed back)
        self.times: dict[Endpoint, int] = {}
        self._back: dict[Endpoint, float] = {}
        self._5xx: dict[Endpoint, int] = {}
        self._gateway: dict[Endpoint, int] = {}
        self._watchers: list[Any] = []  # Any: core.health.CheckedBalancer (which imports this module)

    def watch(self, balancer: Any) -> None:
        self._watchers.append(balancer)

    def answered(self, endpoint: Endpoint, status: int) -> None:
        """One response head (or the gateway's answer to a local failure)."""
        if status < 500:
            if self._5xx:
                self._5xx.pop(endpoint, None)
                self._gateway.pop(endpoint, None)
            return
        c = self.config
        if status in _GATEWAY_ERRORS:
            n = self._gateway[endpoint] = self._gateway.get(endpoint, 0) + 1
            if n >= c.consecutive_gateway_failure:
                self._gateway[endpoint] = 0
                self._detected(endpoint, c.enforcing_consecutive_gateway_failure)
        else:
            self._gateway[endpoint] = 0
        n = self._5xx[endpoint] = self._5xx.get(endpoint, 0) + 1
        if n >= c.consecutive_5xx:
            self._5xx[endpoint] = 0
            self._detected(endpoint, c.enforcing_consecutive_5xx)

    def _detected(self, endpoint: Endpoint, enforcing: int) -> None:
        if endpoint in self.ejected or endpoint not in self.upstream.endpoints:
            return
        if enforcing <= 0 or (enforcing < 100 and self._roll() * 100 >= enforcing):
            return
        total = len(self.upstream.endpoints)
        if self.ejected and (len(self.ejected) + 1) * 100 > self.config.max_ejection_percent * total:
            return  # Envoy's maxEjectionPercent; the first ejection always may happen
        times = self.times[endpoint] = self.times.get(endpoint, 0) + 1
        self.ejected[endpoint] = self.clock()
        up = self.upstream
        self._log.warn("Endpoint {host}:{port} of upstream {ns}/{name} is ejected for {seconds}s (outlier"
                       " detection, ejection {times})", host=endpoint.host, port=endpoint.port, ns=up.namespace,
                       name=up.name, seconds=self.ejection_time(endpoint), times=times)
        self._changed()

    def ejection_time(self, endpoint: Endpoint) -> float:
        """How long ``endpoint`` stays out this time."""
        c = self.config
        return min(c.base_ejection_time * self.times.get(endpoint, 1),
                   max(c.max_ejection_time, c.base_ejection_time))

    def sweep(self, now: float | None = None) -> list[Endpoint]:
        """Every ``interval``: bring back the endpoints whose time is up;
        returns them."""
        now = self.clock() if now is None else now
        back = [ep for ep, at in self.ejected.items() if now - at >= self.ejection_time(ep)]
        interval = self.config.interval
        for ep, since in list(self._back.items()):
            if ep not in self.ejected and now - since >= interval:
                if self.times.get(ep, 0) > 1:
                    self.times[ep] -= 1
                    self._back[ep] = now
                else:
                    self.times.pop(ep, None)
                    del self._back[ep]
        for ep in back:
            del self.ejected[ep]
            self._back[ep] = now
        if back:
            self._changed()
        return back

    def _changed(self) -> None:
        for balancer in self._watchers:
            balancer.refresh()


class UpstreamWatch:
    """What a forwarded request reports to (the plan's ``watch``): the
    active requests per endpoint (``leastRequest``), the outlier detection."""

    __slots__ = ("active", "outlier")

    def __init__(self, active: dict[Endpoint, int] | None, outlier: OutlierState | None) -> None:
        self.active = active
        self.outlier = outlier

    def started(self, endpoint: Endpoint) -> None:
        active = self.active
        if active is not None:
            active[endpoint] = active.get(endpoint, 0) + 1

    def answered(self, endpoint: Endpoint, status: int) -> None:
        if self.outlier is not None:
            self.outlier.answered(endpoint, status)

    def ended(self, endpoint: Endpoint) -> None:
        active = self.active
        if active is not None:
            n = active.get(endpoint, 0) - 1
            if n > 0:
                active[endpoint] = n
            else:
                active.pop(endpoint, None)
