"""The ``retries`` route and virtual-host option (Gloo's RetryPolicy, Envoy's
route retry policy), read into a :class:`Retries` the engine carries out
(:mod:`twistgw.engine.upstream.retrying`).
"""

from __future__ import annotations

from typing import Any

import attrs

from twistgw.api.fields import FieldReader, Path

__all__ = ["RETRY_ON", "REPLAY_LIMIT", "Retries", "read_retries"]

#: Envoy's ``x-envoy-retry-on`` conditions twistgw carries out.
RETRY_ON = ("5xx", "gateway-error", "connect-failure", "retriable-4xx", "reset", "retriable-status-codes")
#: The other conditions Envoy knows, refused by name.
_OTHER = {
    "refused-stream": "an HTTP/2 condition (twistgw speaks HTTP/1.1 to upstreams)",
    "http3-post-connect-failure": "an HTTP/3 condition",
    "retriable-headers": "retriable headers are not supported",
    "envoy-ratelimited": "there is no Envoy rate limiting header here",
    "reset-before-request": "use reset",
    "cancelled": "a gRPC condition", "deadline-exceeded": "a gRPC condition", "internal": "a gRPC condition",
    "resource-exhausted": "a gRPC condition", "unavailable": "a gRPC condition",
}
#: Envoy's default buffer limit (``per_connection_buffer_limit_bytes``): a
#: request body is replayed on a retry only if it fits.
REPLAY_LIMIT = 1024 * 1024


@attrs.frozen
class Retries:
    """A route's retry policy."""

    on: frozenset[str]
    #: retries after the first try (Gloo's default: 1)
    count: int = 1
    #: seconds each try may wait for the response head (None: the route timeout)
    per_try: float | None = None
    statuses: frozenset[int] = frozenset()
    #: Envoy's backoff: fully jittered exponential from ``base``, at most ``max``
    base: float = 0.025
    max: float = 0.25
    #: every status :meth:`on_status` retries (a response head's check is
    #: one set lookup; a 101 is never retried)
    retried_statuses: frozenset[int] = attrs.field(init=False, eq=False, repr=False)

    @retried_statuses.default
    def _retried_statuses(self) -> frozenset[int]:
        return frozenset(s for s in range(100, 600) if s != 101 and self.on_status(s))

    def on_status(self, status: int) -> bool:
        """Whether a response with ``status`` is tried again."""
        on = self.on
        if status >= 500 and "5xx" in on:
            return True
        if status in (502, 503, 504) and "gateway-error" in on:
            return True
        if status == 409 and "retriable-4xx" in on:
            return True
        return status in self.statuses and "retriable-status-codes" in on

    def on_reset(self) -> bool:
        """Whether a connection lost before the response head (or a try's
        timeout) is tried again."""
        return bool(self.on & {"5xx", "gateway-error", "reset"})

    def on_connect_failure(self) -> bool:
        return bool(self.on & {"5xx", "gateway-error", "reset", "connect-failure"})


def read_retries(r: FieldReader, value: Any, path: Path, ns: str = "default") -> Retries:
    """``retries: {retryOn, numRetries, perTryTimeout, retriableStatusCodes,
    retryBackOff: {baseInterval, maxInterval}}``."""
    m = dict(r.mapping(value, path))
    if m.pop("previousPriorities", None) is not None:
        r.issue(path + ("previousPriorities",), "is not supported by twistgw: there are no priority levels")
    if m.pop("rateLimitedRetryBackOff", None) is not None:
        r.issue(path + ("rateLimitedRetryBackOff",), "is not supported by twistgw: retries do not read the"
                " upstream's rate-limit reset headers; use retryBackOff")
    m = r.mapping(m, path, {"retryOn", "numRetries", "perTryTimeout", "retriableStatusCodes", "retryBackOff"},
                  required=("retryOn",))
    conditions = [c.strip() for c in r.string(m["retryOn"], path + ("retryOn",)).split(",") if c.strip()]
    for c in conditions:
        if c in _OTHER:
            r.issue(path + ("retryOn",), f"{c!r} is not supported by twistgw: {_OTHER[c]}")
        elif c not in RETRY_ON:
            r.issue(path + ("retryOn",), f"unknown retry condition {c!r} (expected: {', '.join(RETRY_ON)})")
    count = r.integer(m["numRetries"], path + ("numRetries",), 0, 100) if m.get("numRetries") is not None else 1
    per_try = r.duration(m["perTryTimeout"], path + ("perTryTimeout",)) if m.get("perTryTimeout") else None
    statuses = frozenset(r.integer(s, path + ("retriableStatusCodes", i), 100, 599)
                         for i, s in enumerate(r.sequence(m.get("retriableStatusCodes") or [],
                                                          path + ("retriableStatusCodes",))))
    if statuses and "retriable-status-codes" not in conditions:
        r.issue(path + ("retriableStatusCodes",), "needs 'retriable-status-codes' in retryOn (as in Envoy)")
    base, most = 0.025, None
    if m.get("retryBackOff") is not None:
        bp = path + ("retryBackOff",)
        b = r.mapping(m["retryBackOff"], bp, {"baseInterval", "maxInterval"}, required=("baseInterval",))
        base = r.duration(b["baseInterval"], bp + ("baseInterval",))
        if b.get("maxInterval") is not None:
            most = r.duration(b["maxInterval"], bp + ("maxInterval",))
            if most < base:
                raise r.fail(bp + ("maxInterval",), "must not be below baseInterval")
    return Retries(frozenset(conditions), count, per_try, statuses, base, most if most is not None else base * 10)
