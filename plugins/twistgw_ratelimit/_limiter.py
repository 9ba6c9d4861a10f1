"""The per-request decision: count a request's hits, answer 429 when a
rule is over its limit (Envoy's answer), or let it through.

A rule admits ``requestsPerUnit`` requests per window: the request that
makes the count ``requestsPerUnit + 1`` is the first refused. Refused
requests are counted too (as Envoy's rate-limit server does), so a client
that keeps hammering stays refused until the window ends.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twistgw import sdk
from twistgw.sdk import RequestContext

from twistgw_ratelimit._descriptors import Hit
from twistgw_ratelimit._limits import RateLimit
from twistgw_ratelimit._options import GlobalLimits, LocalLimit
from twistgw_ratelimit._redis import RedisCounters

_log = Logger(namespace="twistgw_ratelimit")

RATELIMITED = (b"x-envoy-ratelimited", b"true")

DECISIONS = sdk.counter(
    "twistgw_ratelimit_decisions",
    "Rate-limit rule checks by plugin, rule (as configured) and outcome: ok, over_limit,"
    " shadow_over_limit (counted, not refused), redis_failed_open, redis_failed_closed.",
    ["plugin", "rule", "outcome"])
_children: dict[tuple[str, str, str], Any] = {}


def count(plugin: str, rule: str, outcome: str) -> None:
    key = (plugin, rule, outcome)
    child = _children.get(key)
    if child is None:
        child = _children[key] = DECISIONS.labels(plugin, rule, outcome)
    child.inc()


def limited(headers: tuple[tuple[bytes, bytes], ...] = (), body: bytes = b"", reason: str = "") -> sdk.Deny:
    return sdk.Deny(429, body, (RATELIMITED,) + headers, reason=reason)


def draft_headers(limit: RateLimit, remaining: int, reset: int) -> tuple[tuple[bytes, bytes], ...]:
    """Envoy's ``x-ratelimit-*`` headers (the IETF draft 03 it implements)."""
    n = limit.requests_per_unit
    return ((b"x-ratelimit-limit", f"{n}, {n};w={limit.seconds}".encode()),
            (b"x-ratelimit-remaining", str(max(0, remaining)).encode()),
            (b"x-ratelimit-reset", str(reset).encode()))


def add_headers(ctx: RequestContext, headers: tuple[tuple[bytes, bytes], ...]) -> None:
    """The ``x-ratelimit-*`` headers on the response of an admitted request
    (Envoy adds them to every response when they are enabled)."""
    for name, value in headers:
        ctx.add_response_header(name, value)


def local_headers(options: LocalLimit, now: float) -> tuple[tuple[bytes, bytes], ...]:
    bucket = options.bucket
    return ((b"x-ratelimit-limit", f"{options.spec.max_tokens}".encode()),
            (b"x-ratelimit-remaining", str(max(0, bucket.tokens)).encode()),
            (b"x-ratelimit-reset", str(bucket.reset_after(now)).encode()))


def check_local(ctx: RequestContext, options: LocalLimit, now: float) -> sdk.Deny | None:
    """Take a token from the route's bucket: None (admitted, with the
    draft headers when enabled), or 429. (``LocalPlugin.twistgw_authorize``
    runs the same steps inline: it is on every request of the route.)"""
    if options.bucket.take(now):
        if options.headers:
            add_headers(ctx, local_headers(options, now))
        return None
    return refuse_local(options, now)


def refuse_local(options: LocalLimit, now: float) -> sdk.Deny:
    """The 429 of an empty bucket (counted in the metrics)."""
    count("localRatelimit", options.where, "over_limit")
    headers = local_headers(options, now) if options.headers else ()
    return limited(headers, b"local_rate_limited", reason=f"local token bucket of {options.where} is empty")


class _FailureLog:
    """Logs a Redis failure at most once per ``every`` seconds per plugin (a
    dead Redis under load must not flood the log); the metric counts all."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self._last: dict[str, float] = {}

    def __call__(self, plugin: str, reason: str, deny: bool) -> None:
        now = time.monotonic()
        if now - self._last.get(plugin, -self.every) >= self.every:
            self._last[plugin] = now
            _log.warn("{plugin}: {reason}; {what} (denyOnFail: {deny})", plugin=plugin, reason=reason,
                      what="refusing with 500" if deny else "admitting", deny=str(deny).lower())


failure_log = _FailureLog()


def check_global(ctx: RequestContext, options: GlobalLimits, store: RedisCounters,
                 now: Callable[[], float]) -> Deferred[sdk.Deny | None] | None:
    """Count the request's hits in Redis; None at once when no rule applies.
    The Deferred (the one object the chain needs to wait) travels with the
    request through the batch: no closure, no callback chain per request."""
    hits = options.hits(ctx)
    if not hits:
        return None
    moment = now()
    items = [(f"{hit.key}|{hit.limit.window(moment)}", hit.limit.seconds) for hit in hits]
    d: Deferred[sdk.Deny | None] = Deferred()
    # the wait for Redis as a child span of the request's (sdk.NO_SPAN when not sampled)
    span = ctx.tracer.child("ratelimit.redis", **{"ratelimit.counters": len(items)})
    store.increment(items, _deliver, (d, ctx, hits, options, moment, span))
    return d


def _deliver(token: tuple[Deferred[sdk.Deny | None], RequestContext, list[Hit], GlobalLimits, float, sdk.SpanHandle],
             counts: list[int] | None, error: str | None) -> None:
    """The batch's answer for one request: its decision fires its Deferred."""
    d, ctx, hits, options, moment, span = token
    span.end(error=error)
    try:
        decision = _decide(ctx, counts, hits, options, moment) if counts is not None else _failed(error, options)
    except Exception as exc:  # a bug: the chain fails closed with 500
        d.errback(exc)
    else:
        d.callback(decision)


def _decide(ctx: RequestContext, counts: list[int], hits: list[Hit], options: GlobalLimits,
            moment: float) -> sdk.Deny | None:
    """429 when a rule is over its limit (unless in shadow mode); the
    draft headers of the rule closest to its limit, when enabled, on the
    429 and on an admitted request's response alike."""
    server = options.server
    worst: tuple[int, Hit] | None = None
    over: list[Hit] = []
    for hit, n in zip(hits, counts, strict=True):
        remaining = hit.limit.requests_per_unit - n
        if worst is None or remaining < worst[0]:
            worst = (remaining, hit)
        if remaining < 0:
            over.append(hit)
            count(options.plugin, hit.label, "shadow_over_limit" if server.shadow else "over_limit")
        else:
            count(options.plugin, hit.label, "ok")
    headers: tuple[tuple[bytes, bytes], ...] = ()
    if server.headers and worst is not None:
        headers = draft_headers(worst[1].limit, worst[0], worst[1].limit.reset_after(moment))
    if over:
        rules = ", ".join(f"{h.label} ({h.limit.describe()})" for h in over)
        if not server.shadow:
            return limited(headers, reason=f"over limit: {rules}")
        _log.info("shadow mode: {plugin} would refuse a request on {where}: over {rules}",
                  plugin=options.plugin, where=options.where, rules=rules)
    add_headers(ctx, headers)
    return None


def _failed(reason: str | None, options: GlobalLimits) -> sdk.Deny | None:
    """Redis failed (``reason``): refuse with 500 under denyOnFail, else admit."""
    deny = options.server.deny_on_fail
    count(options.plugin, "redis", "redis_failed_closed" if deny else "redis_failed_open")
    failure_log(options.plugin, str(reason), deny)
    if deny:
        return sdk.Deny(500, b"", reason=f"rate-limit counters unavailable: {reason}")
    return None
