"""``LazyTimer`` (``twistgw.engine.timers``): a deadline moved on every
request of a keep-alive connection without touching the reactor, that still
fires once it passes, never early, never after it was cleared."""

from __future__ import annotations

from twisted.internet.task import Clock

from twistgw.engine.timers import LazyTimer

from support.trial import TestCase


class _Owner:
    def __init__(self) -> None:
        self.clock = Clock()
        self.callLater = self.clock.callLater
        self.seconds = self.clock.seconds
        self.fired: list[float] = []

    def action(self) -> None:
        self.fired.append(self.clock.seconds())


class LazyTimerTests(TestCase):
    def test_fires_at_the_deadline(self) -> None:
        o = _Owner()
        LazyTimer(o.seconds, o.callLater).set(5, o.action)
        o.clock.advance(4.9)
        assert o.fired == []
        o.clock.advance(0.1)
        assert o.fired == [5]

    def test_moving_the_deadline_later_makes_no_reactor_call_and_fires_late(self) -> None:
        o = _Owner()
        t = LazyTimer(o.seconds, o.callLater)
        t.set(5, o.action)
        for _ in range(4):
            o.clock.advance(1)
            t.set(5, o.action)
        assert len(o.clock.getDelayedCalls()) == 1
        o.clock.advance(1)  # at 5 the call finds the deadline at 9 and sets itself again
        assert o.fired == [] and len(o.clock.getDelayedCalls()) == 1
        o.clock.advance(3.9)
        assert o.fired == []
        o.clock.advance(0.1)
        assert o.fired == [9]

    def test_an_earlier_deadline_moves_the_call(self) -> None:
        o = _Owner()
        t = LazyTimer(o.seconds, o.callLater)
        t.set(5, o.action)
        t.set(1, o.action)
        o.clock.advance(1)
        assert o.fired == [1]

    def test_cleared_never_fires_and_stop_cancels(self) -> None:
        o = _Owner()
        t = LazyTimer(o.seconds, o.callLater)
        t.set(1, o.action)
        t.clear()
        o.clock.advance(2)
        assert o.fired == [] and not t.armed
        t.set(1, o.action)
        t.stop()
        assert o.clock.getDelayedCalls() == []
        o.clock.advance(2)
        assert o.fired == []

    def test_a_call_cancelled_by_someone_else_is_made_again(self) -> None:
        # (trial's janitor cancels leftover calls, for one): a cancelled call
        # must not be taken for a pending one, or the deadline never fires
        o = _Owner()
        t = LazyTimer(o.seconds, o.callLater)
        t.set(1, o.action)
        for call in o.clock.getDelayedCalls():
            call.cancel()
        t.set(1, o.action)
        o.clock.advance(1)
        assert o.fired == [1]

    def test_a_call_that_fired_is_made_again(self) -> None:
        o = _Owner()
        t = LazyTimer(o.seconds, o.callLater)
        t.set(1, o.action)
        o.clock.advance(1)
        t.set(1, o.action)
        o.clock.advance(1)
        assert o.fired == [1, 2]
