"""Deadlines that move without touching the reactor on every request."""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["LazyTimer"]


class LazyTimer:
    """A deadline that moves without touching the reactor.

    ``set`` records when the deadline falls; a reactor call is made only
    when none is pending, or when the new deadline is earlier than the
    pending call. A call that finds the deadline moved later sets itself
    again for it; one that finds it cleared does nothing. So a deadline
    re-set on every request of a keep-alive connection costs two attribute
    writes, and the reactor sees about one call per timeout period.
    """

    __slots__ = ("_seconds", "_call_later", "_due", "_action", "_call", "_call_at")

    def __init__(self, seconds: Callable[[], float], call_later: Callable[..., Any]) -> None:
        """``seconds`` and ``call_later``: the reactor's ``seconds`` and ``callLater``."""
        self._seconds = seconds
        self._call_later = call_later
        self._due = 0.0
        self._action: Any = None
        self._call: Any = None
        self._call_at = 0.0

    @property
    def armed(self) -> bool:
        return self._action is not None

    @property
    def due(self) -> float:
        """When the deadline last set falls (``seconds()`` time)."""
        return self._due

    def set(self, seconds: float, action: Any) -> float:
        """Run ``action`` ``seconds`` from now (unless set again or
        cleared first); returns when that is (``seconds()`` time)."""
        due = self._seconds() + seconds
        self._due, self._action = due, action
        call = self._call
        # DelayedCall.active() without the method call
        if call is None or call.cancelled or call.called:
            self._call = self._call_later(seconds, self._fire)
            self._call_at = due
        elif due < self._call_at:
            call.reset(seconds)
            self._call_at = due
        return due

    def clear(self) -> None:
        self._action = None  # a pending call will find nothing to do

    def stop(self) -> None:
        self._action = None
        if self._call is not None:
            if self._call.active():
                self._call.cancel()
            self._call = None

    def _fire(self) -> None:
        self._call = None
        action = self._action
        if action is None:
            return
        remaining = self._due - self._seconds()
        if remaining > 0:  # moved later since the call was made
            self._call = self._call_later(remaining, self._fire)
            self._call_at = self._due
            return
        self._action = None
        action()
