"""The LDAP config type's metrics (prometheus names unchanged since the
plugin was one module)."""

from __future__ import annotations

from typing import Any

from prometheus_client import Histogram
from twistgw.sdk import counter

# twistgw.counter: an increment is an integer addition, not a lock (per request).
DECISIONS = counter(
    "twistgw_ldap_decisions_total", "LDAP (extauth) decisions by outcome",
    ["outcome"],  # allowed, unauthorized, forbidden, fault, error
)
CACHE = counter("twistgw_ldap_cache_total", "LDAP decision cache lookups", ["result"])  # hit, miss
OPERATIONS = counter(
    "twistgw_ldap_operations_total", "LDAP operations sent to directories",
    ["operation", "result"],  # operation: bind_user, bind_service, bind_anonymous, search
)
LATENCY = Histogram("twistgw_ldap_check_seconds", "Time to decide one LDAP check against the directory",
                    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))

# Labelled children resolved once (.labels() takes a lock per call).
CACHE_HIT = CACHE.labels("hit")
CACHE_MISS = CACHE.labels("miss")
ALLOWED = DECISIONS.labels("allowed")
FORBIDDEN = DECISIONS.labels("forbidden")
_operations: dict[tuple[str, int], Any] = {}


def operation(name: str, code: int) -> Any:
    """The counter child of one operation's result code (``Any``: a
    prometheus-client or twistgw counter child, whichever is in use)."""
    child = _operations.get((name, code))
    if child is None:
        child = OPERATIONS.labels(name, str(code))
        if len(_operations) < 256:  # result codes come from the directory: bound the cache
            _operations[(name, code)] = child
    return child
