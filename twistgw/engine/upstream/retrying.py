"""A forwarded request on a route with ``retries`` (Envoy's retry policy).

:class:`RetryingRequest` is made instead of a plain
:class:`~twistgw.engine.upstream.request.UpstreamRequest` only when the plan
carries a :class:`~twistgw.config.retries.Retries`, so a route without
``retries`` runs none of this. What it adds:

* a response whose status the policy retries (``5xx``, ``gateway-error``,
  ``retriable-4xx``, ``retriable-status-codes``) is dropped with its
  connection, unless it is the last try (then it is relayed, as Envoy does);
* a connection that fails to connect, or is lost before the response head,
  or a try that times out (``perTryTimeout``), is tried again when the
  policy says so (``connect-failure``, ``reset``, ``5xx``, ``gateway-error``);
* between tries, Envoy's fully jittered exponential backoff
  (``retryBackOff``: a random wait in [0, base × (2^n − 1)], at most ``max``);
* each retry goes to another endpoint when there is one: after the backoff
  the plan's balancer picks again among the endpoints taking traffic then,
  skipping those the request tried (``RetryingForward.retry_endpoint``,
  Envoy's ``previous_hosts`` predicate); the new endpoint's connection,
  access-log label, active-request count and ``autoHostRewrite`` follow;
* the route's timeout runs once, from the end of the client's body, over
  every try and every backoff: when it passes the answer is 504;
* a request body is sent again only if the whole of it was kept (at most
  :data:`~twistgw.config.retries.REPLAY_LIMIT`, Envoy's buffer limit): a body
  that went past the bound is never replayed, and its request is not retried.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from twistgw.config.retries import REPLAY_LIMIT, Retries
from twistgw.api.types import Endpoint
from twistgw.core.plan import Forward, RetryingForward
from twistgw.engine.seams import Downstream
from twistgw.engine.upstream import policy
from twistgw.engine.upstream.connection import State
from twistgw.engine.upstream.request import UpstreamRequest

if TYPE_CHECKING:
    from twistgw.engine.upstream.pool import UpstreamPool

__all__ = ["RetryingRequest"]


class RetryingRequest(UpstreamRequest):
    """One forwarded request under a retry policy (see the module)."""

    __slots__ = ("policy", "tries", "deadline", "waiting", "retry_statuses", "tried")

    retrying = True

    def __init__(self, pool: "UpstreamPool", ex: Downstream, plan: Forward, key: Any, label: str,
                 retries: Retries) -> None:
        # UpstreamRequest.__init__'s assignments without the call (once per
        # request; tests/unit/test_retries_inmemory.py checks every slot is set)
        self.pool = pool
        self.ex = ex
        self.plan = plan
        self.key = key
        self.label = label
        self.conn = None
        self.connecting = None
        self.retried = False
        self.finished = False
        self.timing = False
        self.policy = retries
        self.retry_statuses = retries.retried_statuses
        self.tries = 0
        self.deadline = 0.0
        self.waiting: Any = None  # the backoff's DelayedCall
        self.tried: tuple[Endpoint, ...] = ()  # the endpoints of the tries that failed
        if ex.body is not None:
            ex.body.keep(REPLAY_LIMIT)
        self.watch = watch = plan.watch
        if watch is not None:
            watch.started(plan.endpoint)

    # -- deadlines ---------------------------------------------------------------

    def _budget(self) -> float | None:
        """How long the current try may wait for its head (None: the deadline
        has not started: the client is still sending)."""
        if not self.timing:
            return None
        left = self.deadline - self.pool.reactor.seconds()
        per = self.policy.per_try
        return left if per is None else min(left, per)

    def client_body_done(self) -> None:
        conn = self.conn
        if self.finished or (conn is not None and conn.state >= State.BODY):
            return
        self.timing = True
        timeout = self.plan.timeout
        if conn is None:  # still connecting: the try's budget is set when it connects (_budget)
            self.deadline = self.pool.reactor.seconds() + timeout
            return
        # the first try's budget: the route timeout, or perTryTimeout if
        # shorter; the deadline over every try from the time the timer read
        per = self.policy.per_try
        budget = timeout if per is None or per > timeout else per
        self.deadline = conn.timer.set(budget, self.timed_out) + (timeout - budget)

    def connect(self, remaining: float | None = None) -> None:
        super().connect(self._budget() if remaining is None else remaining)

    def timed_out(self) -> None:
        if self.finished:
            return
        if self.pool.reactor.seconds() < self.deadline - 0.001 and self.policy.on_reset() and self._may_retry():
            self._drop_connection()
            self._counted(504)
            self._again()  # a try's timeout (perTryTimeout): Envoy counts it as a reset / 504
            return
        super().timed_out()

    # -- when a try fails ---------------------------------------------------------

    def _may_retry(self) -> bool:
        body = self.ex.body
        if self.tries >= self.policy.count or (body is not None and not body.replayable):
            return False
        breaker = self.breaker
        return breaker is None or breaker.may_retry(self)  # circuitBreakers' maxRetries

    def _drop_connection(self) -> None:
        """Give up the current try's connection (or the attempt to make one)."""
        conn = self.conn
        if conn is not None:
            conn.timer.stop()  # its deadline calls us: never for a later try
        self.finished = True  # the CancelledError of a connection attempt is ours
        self._abandon()
        self.finished = False

    def again_on_status(self, status: int) -> bool:
        """The response head of a try came: True if it is dropped (its
        connection closed) and the request tried again."""
        if not self.policy.on_status(status) or not self._may_retry():
            return False
        self._drop_connection()
        self._again()
        return True

    def again_on_reset(self) -> bool:
        """The connection was lost before the response head."""
        if not self.policy.on_reset() or not self._may_retry() or self.finished:
            return False
        self.conn = None
        self._counted(503)
        self._again()
        return True

    def _connect_failed(self, failure: Any) -> None:
        self.connecting = None
        if self.conn is not None:
            self.conn.timer.stop()
            self.conn = None
        if self.finished:
            return
        if self.policy.on_connect_failure() and self._may_retry():
            self._counted(503)
            self._again()
            return
        self.fail(policy.connect_failure(failure), failure.getErrorMessage())

    def _counted(self, status: int) -> None:
        """A try's local failure, hidden by the retry, still counts for
        outlier detection (as its 503 or 504, Envoy's default)."""
        if self.watch is not None:
            self.watch.answered(self.plan.endpoint, status)

    def _again(self) -> None:
        """Wait Envoy's backoff, then try again (within the route's deadline)."""
        self.tries += 1
        body = self.ex.body
        if body is not None:
            body.detach()
        p = self.policy
        wait = random.uniform(0.0, min(p.max, p.base * (2 ** self.tries - 1)))
        reactor = self.pool.reactor
        if self.timing and reactor.seconds() + wait >= self.deadline:
            self.waiting = reactor.callLater(max(self.deadline - reactor.seconds(), 0.0), self._deadline_passed)
            return
        self.waiting = reactor.callLater(wait, self._try_again)

    def _try_again(self) -> None:
        self.waiting = None
        if self.finished:
            return
        body = self.ex.body
        if body is not None and not body.replayable:
            # the client kept sending meanwhile, past the bound: never a
            # body with a part missing
            self.fail(policy.RESET, "the request body went past the retry buffer while waiting to retry")
            return
        plan = self.plan
        assert isinstance(plan, RetryingForward)  # a plan with retries is one
        self.tried += (plan.endpoint,)
        endpoint = plan.retry_endpoint(self.tried)
        if endpoint is None:  # none takes traffic now (healthyPanicThreshold 0)
            self.fail(policy.NO_HEALTHY, "no endpoint takes traffic for the retry")
            return
        if endpoint != plan.endpoint:
            self._move(plan, endpoint)
        self.connect()

    def _move(self, plan: RetryingForward, endpoint: Endpoint) -> None:
        """The next try goes to ``endpoint``: its connections, its label, its count."""
        watch = self.watch
        if watch is not None:
            watch.ended(plan.endpoint)
            watch.started(endpoint)
        plan.move_to(endpoint)
        pool = self.pool
        self.key = pool.key_of(endpoint, plan.upstream)
        self.label = pool.label(self.key)
        self.ex.upstream_moved(self.label)

    def _deadline_passed(self) -> None:
        self.waiting = None
        self.fail(policy.TIMEOUT, "no response head in time (retries included)")

    def client_gone(self) -> None:
        waiting, self.waiting = self.waiting, None
        if waiting is not None and waiting.active():
            waiting.cancel()
        super().client_gone()
