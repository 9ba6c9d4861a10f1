"""Circuit breakers: an Upstream's ``circuitBreakers`` (Envoy's thresholds),
counted per gateway process.

Only an upstream that has them gets a :class:`Breaker` and limited requests
(:class:`LimitedRequest`, :class:`LimitedRetryingRequest`); every other
request runs none of this. What is counted, per upstream:

* ``maxRequests``: requests under way (from the moment they are forwarded
  to their outcome); one more is answered 503 with ``x-envoy-overloaded: true``;
* ``maxConnections``: connections its requests opened (still open); a
  request that needs a new one beyond it waits, as Envoy's pending requests,
  for one of them to finish its exchange or close;
* ``maxPendingRequests``: requests waiting so; one more is answered 503 with
  ``x-envoy-overloaded: true``;
* ``maxRetries``: requests retrying at once; past it a failed try is not
  retried (its answer goes to the client).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from twistgw.api.upstreampolicy import CircuitBreakers
from twistgw.engine.upstream.request import UpstreamRequest
from twistgw.engine.upstream.retrying import RetryingRequest

if TYPE_CHECKING:
    from twistgw.engine.upstream.connection import UpstreamConnection

__all__ = ["Breaker", "LimitedRequest", "LimitedRetryingRequest"]


class LimitedRequest(UpstreamRequest):
    """An :class:`UpstreamRequest` to an upstream with circuit breakers."""

    __slots__ = ("breaker",)


class LimitedRetryingRequest(RetryingRequest):
    """A :class:`RetryingRequest` to an upstream with circuit breakers."""

    __slots__ = ("breaker",)


class Breaker:
    """The counters of one upstream's circuit breakers."""

    __slots__ = ("limits", "requests", "connections", "pending", "retrying")

    def __init__(self, limits: CircuitBreakers) -> None:
        self.limits = limits
        self.requests: set[UpstreamRequest] = set()
        self.connections: set[UpstreamConnection] = set()
        self.pending: deque[UpstreamRequest] = deque()
        self.retrying: set[UpstreamRequest] = set()

    def admit(self, req: UpstreamRequest) -> bool:
        """Count ``req`` in, unless ``maxRequests`` are under way."""
        if len(self.requests) >= self.limits.max_requests:
            return False
        self.requests.add(req)
        return True

    def may_connect(self) -> bool:
        return len(self.connections) < self.limits.max_connections

    def may_wait(self) -> bool:
        return len(self.pending) < self.limits.max_pending

    def may_retry(self, req: UpstreamRequest) -> bool:
        """Count ``req`` as retrying, unless ``maxRetries`` already are."""
        if req in self.retrying:
            return True
        if len(self.retrying) >= self.limits.max_retries:
            return False
        self.retrying.add(req)
        return True

    def ended(self, req: UpstreamRequest) -> None:
        """``req`` has its outcome (or its client went away)."""
        self.requests.discard(req)
        self.retrying.discard(req)
        if req in self.pending:
            self.pending.remove(req)

    def next_pending(self) -> UpstreamRequest | None:
        while self.pending:
            req = self.pending.popleft()
            if not req.finished:
                return req
        return None


def start(req: UpstreamRequest, pool: Any) -> None:
    """Start a request that waited (or waits no longer): an idle connection
    to its endpoint, else a new one (the caller checked the limit)."""
    idle = pool.idle.get(req.key)
    while idle:
        conn = idle.pop()
        if conn.usable:
            conn.send(req, reused=True)
            return
    req.connect(req.plan.timeout if req.timing and not req.retrying else None)
