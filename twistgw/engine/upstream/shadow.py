"""Shadow requests (a route's ``shadowing``): a copy of a forwarded request
sent to the shadow upstream, fire and forget.

The primary request never waits for, and never hears of, its shadow:

* the copy goes out after the primary was handed to its upstream; its
  answer is read and discarded (:class:`ShadowExchange` is the
  :class:`~twistgw.engine.seams.Downstream` that discards it), its failure
  is counted and logged, never reported to the client;
* a request body is copied only up to
  :data:`~twistgw.config.shadowing.SHADOW_BODY_LIMIT`: the copy is sent
  once the client's body is complete, whole or not at all (a body declared
  or grown past the bound is not shadowed; one that does not complete within
  the route's timeout is not either); the client is never paused for it;
* at most :data:`~twistgw.config.shadowing.SHADOW_MAX_INFLIGHT` shadows are
  in flight per process (waiting for their body, connecting, or waiting for
  the shadow's answer); above it a shadow is dropped and counted;
* a shadow that hangs is cut off by the route's timeout, like any request.

Outcomes are counted in ``twistgw_shadow_requests_total{outcome}``
(:data:`twistgw.core.shadowing.SHADOWS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from twisted.logger import Logger

from twistgw.config.shadowing import SHADOW_BODY_LIMIT, SHADOW_MAX_INFLIGHT
from twistgw.core.plan import Forward
from twistgw.core.shadowing import SHADOWS
from twistgw.engine.body import RequestBody
from twistgw.engine.seams import Downstream, Splice, TunnelEnd

if TYPE_CHECKING:
    from twistgw.engine.upstream.pool import UpstreamPool

__all__ = ["ShadowExchange", "Shadows"]

_log = Logger(namespace="twistgw.shadow")
_OUTCOMES = {name: SHADOWS.labels(name) for name in
             ("answered", "failed", "overflow", "body_too_large", "incomplete_body")}
#: seconds between two log lines about the failures of one shadow upstream
LOG_EVERY = 10.0


class ShadowExchange:
    """The client side of a shadow request: what it answers is discarded."""

    __slots__ = ("shadows", "method", "body", "content_length", "label", "ended", "status")

    upgrade: bytes | None = None
    protocol = b"HTTP/1.1"
    body_complete = True
    held: bytes | None = None

    def __init__(self, shadows: "Shadows", method: bytes, body: RequestBody | None,
                 content_length: bytes | None) -> None:
        self.shadows = shadows
        self.method = method
        self.body = body
        self.content_length = content_length
        self.label = ""
        self.ended = False
        self.status = 0

    def send_head(self, status: int, reason: bytes, lines: list[bytes], length: bytes | None,
                  hold: bool = False) -> None:
        self.status = status

    def write(self, data: bytes) -> None:
        pass  # discarded

    def flush(self) -> None:
        pass

    def finish(self, trailers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        self._end("answered")

    def upstream_failed(self, status: int, body: bytes, why: str, error: str,
                        headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        self._end("failed", f"{why} ({error})")

    def upstream_broke(self, reason: str) -> None:
        self._end("failed", f"the response broke off: {reason}")

    def upstream_moved(self, label: str) -> None:
        self.label = label  # never: a shadow is not retried

    def _end(self, outcome: str, why: str = "") -> None:
        if self.ended:
            return
        self.ended = True
        self.shadows.ended(outcome, self.label, why)

    def upgraded(self, tunnel: Splice) -> list[bytes]:
        raise AssertionError("a shadow never asks for an upgrade")  # upgrade is None: the 101 is refused

    def tunnel_end(self) -> TunnelEnd:
        raise AssertionError("a shadow never asks for an upgrade")

    def pause_body(self) -> None:
        pass  # the copy is whole in memory: nothing to pause

    def resume_body(self) -> None:
        pass


class _Pending:
    """A shadow waiting for the primary's request body (a tap on it, see
    :meth:`RequestBody.mirror_to`), and for the primary to be on its way."""

    __slots__ = ("shadows", "plan", "body", "content_length", "chunks", "size", "complete", "started", "done",
                 "timer")

    def __init__(self, shadows: "Shadows", plan: Forward, body: RequestBody | None,
                 content_length: bytes | None) -> None:
        self.shadows = shadows
        self.plan = plan
        self.body = body
        self.content_length = content_length
        self.chunks: list[bytes] = []
        self.size = 0
        self.complete = body is None
        self.started = False
        self.done = False
        self.timer: Any = None

    # -- the tap on the primary's body ---------------------------------------------

    def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.shadows.body_limit:
            self._drop("body_too_large")
        else:
            self.chunks.append(data)

    def finish(self) -> None:
        self.complete = True
        if self.started:
            self._send()

    def stop(self) -> None:
        self._drop("incomplete_body")

    # -- the primary is on its way ---------------------------------------------------

    def go(self) -> None:
        self.started = True
        if self.done:
            return
        if self.complete:
            self._send()
        else:
            self.timer = self.shadows.reactor.callLater(self.plan.timeout, self._drop, "incomplete_body")

    def _finish_waiting(self) -> None:
        self.done = True
        if self.body is not None and self.body.tap is self:
            self.body.tap = None
        timer, self.timer = self.timer, None
        if timer is not None and timer.active():
            timer.cancel()

    def _drop(self, outcome: str) -> None:
        if self.done:
            return
        self._finish_waiting()
        self.chunks = []
        self.shadows.ended(outcome, "", "")

    def _send(self) -> None:
        if self.done:
            return
        self._finish_waiting()
        self.shadows.send(self.plan, self.body, self.chunks, self.content_length)


class Shadows:
    """The shadow requests of one gateway process: the in-flight bound, the
    sending, the outcomes."""

    def __init__(self, pool: "UpstreamPool", reactor: Any, max_inflight: int = SHADOW_MAX_INFLIGHT,
                 body_limit: int = SHADOW_BODY_LIMIT) -> None:
        self.pool = pool
        self.reactor = reactor  # Any: Twisted's reactor interfaces are not typed
        self.max_inflight = max_inflight
        self.body_limit = body_limit
        self.inflight = 0
        #: shadow label → (time of the last log line, failures since)
        self._logged: dict[str, tuple[float, int]] = {}

    def prepare(self, ex: Downstream, plan: Forward) -> _Pending | None:
        """Before the primary is forwarded: reserve a place in flight and tap
        the request body. None: not shadowed (counted)."""
        if ex.upgrade is not None:
            return None  # an upgrade (WebSocket) is a tunnel, not a request to copy
        if self.inflight >= self.max_inflight:
            _OUTCOMES["overflow"].inc()
            self._note_failure(f"{plan.endpoint.host}:{plan.endpoint.port}",
                               f"dropped: {self.max_inflight} shadow requests in flight already")
            return None
        body = ex.body
        if body is not None and body.length is not None and body.length > self.body_limit:
            _OUTCOMES["body_too_large"].inc()
            return None
        self.inflight += 1
        pending = _Pending(self, plan, body, ex.content_length)
        if body is not None:
            body.mirror_to(pending)
        return pending

    def send(self, plan: Forward, body: RequestBody | None, chunks: list[bytes],
             content_length: bytes | None) -> None:
        """The copy goes out (its body, if any, whole)."""
        ex = ShadowExchange(self, plan.method, None, content_length)
        if body is not None:
            copy = ex.body = RequestBody(body.length, ex)
            for chunk in chunks:
                copy.write(chunk)
            copy.finish()
        ex.label = f"{plan.endpoint.host}:{plan.endpoint.port}"  # for a failure reported before forward returns
        req = self.pool.forward(ex, plan)
        ex.label = req.label

    def ended(self, outcome: str, label: str, why: str) -> None:
        self.inflight -= 1
        _OUTCOMES[outcome].inc()
        if outcome == "failed":
            self._note_failure(label, why)

    def _note_failure(self, label: str, why: str) -> None:
        """Log a shadow's failure: the first, then at most one line per
        :data:`LOG_EVERY` seconds per shadow upstream (with the count since)."""
        now = self.reactor.seconds()
        last, since = self._logged.get(label, (-LOG_EVERY, 0))
        if now - last < LOG_EVERY:
            self._logged[label] = (last, since + 1)
            return
        if len(self._logged) > 1024:
            self._logged.clear()
        self._logged[label] = (now, 0)
        _log.warn("Shadow request to {upstream} failed: {why} ({more} more since the last line; the primary"
                  " requests are not affected)", upstream=label, why=why, more=since)
