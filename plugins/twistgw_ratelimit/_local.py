"""``localRatelimit``: Envoy's local token bucket, per gateway process, no
dependencies (pure; the clock is handed in).

The bucket starts full (``maxTokens``); every ``fillInterval`` it gains
``tokensPerFill`` tokens, never holding more than ``maxTokens``; each
request takes one token or is refused with 429. Refills are computed
lazily from the clock when a request arrives, in whole intervals counted
from the bucket's creation, as Envoy's timer would have added them.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

from twistgw.api.fields import Path, Problems


BUCKET_FIELDS = ("maxTokens", "tokensPerFill", "fillInterval")
MIN_INTERVAL = 0.05
#: how early (a fraction of the interval) :meth:`TokenBucket.take` looks at
#: the refill: far more than a float's rounding of a monotonic clock, far
#: less than any interval
_EARLY = 1 - 1e-6


@attrs.frozen
class BucketSpec:
    max_tokens: int
    tokens_per_fill: int = 1
    fill_interval: float = 1.0

    def describe(self) -> str:
        return f"{self.max_tokens} tokens, +{self.tokens_per_fill}/{self.fill_interval:g}s"


class TokenBucket:
    """One bucket's state; not shared between processes.

    :meth:`take` is on every request of a limited route: between fills it
    is two comparisons and a decrement. The refill (:meth:`_refill`) runs
    only once the clock is near the next fill time (``_next``, kept a
    millionth of an interval early, so that the refill's own arithmetic
    decides exactly when a fill is due, as it always did).
    """

    __slots__ = ("spec", "tokens", "_last", "_next")

    def __init__(self, spec: BucketSpec, now: float) -> None:
        self.spec = spec
        self.tokens = spec.max_tokens
        self._last = now
        self._next = now + spec.fill_interval * _EARLY

    def take(self, now: float) -> bool:
        """Take a token if there is one."""
        if now >= self._next:
            self._refill(now)
        if self.tokens > 0:
            self.tokens -= 1
            return True
        return False

    def _refill(self, now: float) -> None:
        """The fills due since the last one, in whole intervals (a full
        bucket only moves its schedule on)."""
        spec = self.spec
        if self.tokens < spec.max_tokens:
            fills = int((now - self._last) / spec.fill_interval)
            if fills > 0:
                self.tokens = min(spec.max_tokens, self.tokens + fills * spec.tokens_per_fill)
                self._last += fills * spec.fill_interval
        else:
            self._last = now - (now - self._last) % spec.fill_interval
        self._next = self._last + spec.fill_interval * _EARLY

    def reset_after(self, now: float) -> int:
        """Whole seconds until the next token (at least 1)."""
        left = self.spec.fill_interval - (now - self._last)
        return max(1, int(left + 0.999))


def _positive(raw: Mapping[str, Any], name: str, path: Path, problems: Problems, default: int | None) -> int:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**32:
        problems.add(path + (name,), f"must be a whole number of at least 1, got {value!r}")
        return 1
    return value


def parse_bucket(raw: Any, path: Path = ()) -> BucketSpec:
    """``{maxTokens, tokensPerFill, fillInterval}`` (Gloo's ``TokenBucket``)."""
    problems = Problems()
    raw = problems.mapping(raw, path, BUCKET_FIELDS, what="localRatelimit")
    if "maxTokens" not in raw:
        problems.add(path + ("maxTokens",), "is required: how many requests the bucket holds")
    max_tokens = _positive(raw, "maxTokens", path, problems, 1)
    per_fill = _positive(raw, "tokensPerFill", path, problems, 1)
    interval = problems.fields(raw, path).duration("fillInterval", 1.0, MIN_INTERVAL)
    problems.raise_if_any()
    return BucketSpec(max_tokens, per_fill, interval)


class Buckets:
    """Every bucket of one gateway process, by where it is configured, so
    that a reload that keeps a bucket's configuration keeps its tokens."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._buckets: dict[tuple[str, str | None, BucketSpec], TokenBucket] = {}

    def get(self, virtual_service: str, route: str | None, spec: BucketSpec) -> TokenBucket:
        key = (virtual_service, route, spec)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(spec, self.clock())
        return bucket

    def keep_only(self, in_use: set[int]) -> None:
        """Forget buckets no compiled configuration refers to any more."""
        self._buckets = {k: b for k, b in self._buckets.items() if id(b) in in_use}
