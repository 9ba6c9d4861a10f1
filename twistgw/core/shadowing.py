"""A route's ``shadowing`` compiled (:class:`Shadow`): per request, whether
this request is copied (the percentage), the shadow's endpoint, and the
copy's plan: the primary's method, target and headers (after every rewrite
and header change, ``X-Forwarded-*`` included) with Envoy's ``-shadow``
suffix on the host (``api.example.com:8080`` → ``api.example.com-shadow:8080``).

The engine sends the copy and discards its answer
(:mod:`twistgw.engine.upstream.shadow`); nothing here does I/O.
"""

from __future__ import annotations

import random
from typing import Any

from twistgw.api.counters import counter
from twistgw.core.plan import Forward

__all__ = ["SHADOWS", "Shadow", "shadow_host"]

#: Shadow requests by outcome: ``answered`` (the shadow sent a response,
#: whatever its status; discarded), ``failed`` (no answer: connect failure,
#: reset, timeout, malformed), ``overflow`` (dropped: too many in flight),
#: ``body_too_large`` (dropped: the request body is over the bound),
#: ``incomplete_body`` (dropped: the client's body never completed in
#: time), ``no_endpoint`` (the shadow upstream has no endpoint).
SHADOWS = counter("twistgw_shadow_requests", "Shadow (mirrored) requests by outcome: answered, failed, overflow,"
                  " body_too_large, incomplete_body, no_endpoint. Their responses are discarded.", ["outcome"])
NO_ENDPOINT = SHADOWS.labels("no_endpoint")


def shadow_host(host: bytes) -> bytes:
    """Envoy's shadow host: ``-shadow`` after the host name, before any port."""
    if host.startswith(b"["):  # an IPv6 literal: [::1]:8080
        end = host.find(b"]")
        if end > 0:
            return host[:end + 1] + b"-shadow" + host[end + 1:]
    colon = host.rfind(b":")
    if colon > 0 and host[colon + 1:].isdigit():
        return host[:colon] + b"-shadow" + host[colon:]
    return host + b"-shadow"


class Shadow:
    """A route's ``shadowing``: its upstream's balancer and percentage."""

    __slots__ = ("balancer", "percentage", "random")

    def __init__(self, balancer: Any, percentage: float, rand: Any = random.random) -> None:
        # balancer: Any, a core.balancers balancer (pick(), upstream)
        self.balancer = balancer
        self.percentage = percentage
        self.random = rand

    def mirror(self, primary: Forward) -> Forward | None:
        """The copy's plan for this request, or None (not in the
        percentage, or no endpoint: counted)."""
        pct = self.percentage
        if pct < 100.0 and (pct <= 0.0 or self.random() * 100.0 >= pct):
            return None
        balancer = self.balancer
        endpoint = balancer.pick()
        if endpoint is None:
            NO_ENDPOINT.inc()
            return None
        headers = primary.headers.copy()
        hosts = headers.get_canonical(b"Host")
        if hosts:
            headers.set_canonical(b"Host", shadow_host(hosts[0]))
        return Forward(endpoint, primary.method, primary.target, headers, primary.timeout, balancer.upstream)
