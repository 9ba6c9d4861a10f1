"""One forwarded request: a connection (pooled or new), the response
deadline, one retry of a stale pooled connection, and the outcome reported
to the client side through the :class:`~twistgw.engine.seams.Downstream`
it was handed.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from typing import TYPE_CHECKING, Any

from twisted.python.failure import Failure

from twistgw.core.plan import Forward
from twistgw.engine.seams import Downstream
from twistgw.engine.upstream import policy
from twistgw.engine.upstream.connection import State

if TYPE_CHECKING:
    from twistgw.engine.upstream.connection import UpstreamConnection
    from twistgw.engine.upstream.pool import UpstreamPool

__all__ = ["UpstreamRequest"]

_BODY = State.BODY


@mypyc_attr(allow_interpreted_subclasses=True)  # retrying.py, breakers.py
class UpstreamRequest:
    """One forwarded request (a :class:`~twistgw.engine.seams.Forwarding`).

    The response deadline runs on the connection's own timer (the same
    :class:`~twistgw.engine.timers.LazyTimer` that expires it when idle in
    the pool), from the end of the client's body to the response head.
    ``finished`` is set once the outcome was reported (or the client went
    away): from then on nothing is reported.
    """

    __slots__ = ("pool", "ex", "plan", "key", "label", "conn", "connecting", "retried", "finished", "timing",
                 "watch")

    #: a :class:`~twistgw.engine.upstream.retrying.RetryingRequest` (a route
    #: with ``retries``) says True; the connection asks before relaying a head
    retrying = False
    #: the response statuses tried again (a retry policy's, computed once)
    retry_statuses: frozenset[int] = frozenset()
    #: the upstream's circuit-breaker counters (an
    #: :class:`~twistgw.engine.upstream.breakers.Breaker`) on a limited
    #: request's subclass; None here, so an unlimited request stores nothing
    breaker: Any = None

    def __init__(self, pool: "UpstreamPool", ex: Downstream, plan: Forward, key: Any,
                 label: str) -> None:
        self.pool = pool
        self.ex = ex
        self.plan = plan
        self.key = key
        self.label = label
        self.conn: UpstreamConnection | None = None
        self.connecting: Any = None  # the Deferred of a connection attempt
        self.retried = False
        self.finished = False
        #: the response deadline runs (the client's body is complete)
        self.timing = False
        #: the plan's UpstreamWatch (leastRequest, outlierDetection): told of
        #: the start, each response status or local failure, and the end
        self.watch = watch = plan.watch
        if watch is not None:
            watch.started(plan.endpoint)

    # -- connection -----------------------------------------------------------

    def connect(self, remaining: float | None = None) -> None:
        """Make a new connection; ``remaining``: what is left of a running
        response deadline (a retry)."""
        conn = self.conn = self.pool.new_connection(self.key, self.breaker)
        if remaining is not None:
            conn.timer.set(max(remaining, 0.0), self.timed_out)
        d = self.connecting = self.pool.connect(conn)
        d.addCallbacks(self._connected, self._connect_failed)

    def _connected(self, conn: "UpstreamConnection") -> None:
        self.connecting = None
        if self.finished:
            self.pool.release(conn)
            return
        conn.send(self, reused=False)

    def _connect_failed(self, failure: Failure) -> None:
        self.connecting = None
        if self.conn is not None:
            self.conn.timer.stop()
            self.conn = None
        if self.finished:
            return
        self.fail(policy.connect_failure(failure), failure.getErrorMessage())

    def again_on_status(self, status: int) -> bool:
        """Whether a response head with ``status`` is dropped for another try
        (only under a retry policy)."""
        return False

    def again_on_reset(self) -> bool:
        """Whether a connection lost before the head leads to another try."""
        return False

    def retry_after_stale(self) -> bool:
        """A pooled connection died before any answer: send again once, on
        a new connection, if the policy allows."""
        ex = self.ex
        if self.finished or not policy.may_retry(ex.method, ex.body is not None, self.retried):
            return False
        self.retried = True
        old = self.conn
        remaining = old.timer.due - self.pool.reactor.seconds() if self.timing and old is not None else None
        self.connect(remaining)
        return True

    def retry_unprocessed(self) -> bool:
        """The upstream said it never processed the request (HTTP/2: a
        GOAWAY below its stream, REFUSED_STREAM, RFC 9113 §8.7): send it
        again once on a new connection, whatever its method, if its body
        (if any) can be sent again whole."""
        ex = self.ex
        body = ex.body
        if self.finished or self.retried or (body is not None and not body.replayable):
            return False
        self.retried = True
        old = self.conn
        remaining = old.timer.due - self.pool.reactor.seconds() if self.timing and old is not None else None
        if body is not None:
            body.detach()
        self.connect(remaining)
        return True

    # -- outcomes, reported to the client side -------------------------------------

    def done(self) -> None:
        """The response ended (the connection reports it, then finishes the exchange)."""
        self.finished = True
        if self.breaker is not None:
            self.breaker.ended(self)
        if self.watch is not None:
            self.watch.ended(self.plan.endpoint)

    def fail(self, answer: policy.Answer, error: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        if self.finished:
            return
        self.finished = True
        if self.breaker is not None:
            self.breaker.ended(self)
        status, body, why = answer
        watch = self.watch
        if watch is not None:
            # a local failure counts as its 5xx (Envoy's default); an overflow or
            # no endpoint left for a retry is not the endpoint's doing
            if answer is not policy.OVERFLOW and answer is not policy.NO_HEALTHY:
                watch.answered(self.plan.endpoint, status)
            watch.ended(self.plan.endpoint)
        self.ex.upstream_failed(status, body, why, error, headers)

    def broke(self, reason: str) -> None:
        """The response broke off after its head."""
        if self.finished:
            return
        self.finished = True
        if self.breaker is not None:
            self.breaker.ended(self)
        if self.watch is not None:
            self.watch.ended(self.plan.endpoint)
        self.ex.upstream_broke(reason)

    def _abandon(self) -> None:
        """Abort the upstream connection, or the attempt to make one. The
        caller sets ``finished`` first, so the CancelledError that follows
        is ignored."""
        conn, self.conn = self.conn, None
        if self.connecting is not None:
            d, self.connecting = self.connecting, None
            d.cancel()
        elif conn is not None:
            conn.abandon()

    def timed_out(self) -> None:
        if self.finished:
            return
        self.finished = True  # the CancelledError is ours
        self._abandon()
        self.finished = False
        self.fail(policy.TIMEOUT, "no response head in time",
                  policy.DEADLINE_EXCEEDED if self.plan.grpc_deadline else ())

    # -- what the client side asks (seams.Forwarding) ----------------------------

    def client_gone(self) -> None:
        """The client went away: abort the upstream request."""
        if self.finished:
            return
        self.finished = True
        if self.breaker is not None:
            self.breaker.ended(self)
        if self.watch is not None:
            self.watch.ended(self.plan.endpoint)
        self._abandon()

    def client_body_done(self) -> None:
        """The client sent its whole request: like Envoy, the route timeout
        runs from here (a slow upload is not the upstream's fault)."""
        conn = self.conn
        if self.finished or (conn is not None and conn.state >= _BODY):
            return
        self.timing = True
        if conn is not None:
            conn.timer.set(self.plan.timeout, self.timed_out)

    def pause(self) -> None:
        conn = self.conn
        if conn is not None:
            conn.pause_relay()

    def resume(self) -> None:
        conn = self.conn
        if conn is not None:
            conn.resume_relay()
