"""Gloo's ``RateLimit`` (``requestsPerUnit`` per ``unit``) and the fixed
windows its rate-limit server counts in (pure, no I/O).

A window of a limit is aligned to its unit on the Unix clock, as
envoyproxy/ratelimit (and Gloo's server, built on it) counts: a ``MINUTE``
window starts at a whole minute (``now // 60 * 60``), a ``DAY`` window at
00:00 UTC. Every gateway sharing one Redis therefore counts in the same
window without talking to each other. See ``docs/ratelimit.md``, "The
algorithm".
"""

from __future__ import annotations

from typing import Any

import attrs

from twistgw.api.fields import Path, Problems, type_name


#: seconds per Gloo ``RateLimit.Unit``
UNITS: dict[str, int] = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400}

#: the fields of a ``RateLimit``
RATE_LIMIT_FIELDS = ("requestsPerUnit", "unit")

#: the largest ``requestsPerUnit`` accepted (Gloo's is a uint32)
MAX_REQUESTS = 2**32 - 1


@attrs.frozen
class RateLimit:
    """``requestsPerUnit`` requests per window of ``unit``."""

    requests_per_unit: int
    unit: str

    @property
    def seconds(self) -> int:
        return UNITS[self.unit]

    def window(self, now: float) -> int:
        """The start of the window ``now`` falls in (Unix seconds)."""
        seconds = UNITS[self.unit]
        return int(now) // seconds * seconds

    def reset_after(self, now: float) -> int:
        """Whole seconds until the window ``now`` falls in ends (at least 1)."""
        seconds = UNITS[self.unit]
        return max(1, seconds - int(now) % seconds)

    def describe(self) -> str:
        return f"{self.requests_per_unit}/{self.unit}"


def parse_rate_limit(value: Any, path: Path) -> RateLimit:
    """``{requestsPerUnit: N, unit: MINUTE}`` → :class:`RateLimit`."""
    problems = Problems()
    raw = problems.mapping(value, path, RATE_LIMIT_FIELDS, what="rateLimit")
    unit = raw.get("unit")
    if unit not in UNITS:
        got = repr(unit) if isinstance(unit, str) else type_name(unit)
        problems.add(path + ("unit",), f"must be one of SECOND, MINUTE, HOUR, DAY; got {got}")
    rpu = raw.get("requestsPerUnit")
    if isinstance(rpu, bool) or not isinstance(rpu, int) or not 0 <= rpu <= MAX_REQUESTS:
        problems.add(path + ("requestsPerUnit",), f"must be a whole number from 0 to {MAX_REQUESTS}, got {rpu!r}")
    problems.raise_if_any()
    assert isinstance(rpu, int)
    return RateLimit(rpu, str(unit))
