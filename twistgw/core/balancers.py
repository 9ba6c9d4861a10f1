"""How a request picks one endpoint of an upstream: round robin (the
default, :class:`Balancer`), ``leastRequest`` (:class:`LeastRequest`: the
fewest active requests of ``choiceCount`` random endpoints), ``random``, or consistent
hashing (``ringHash``, ``maglev``) on the hash a route's ``lbHash`` makes of
the request (Envoy's load balancers, as Gloo's ``loadBalancerConfig`` names
them). Tables are built once per snapshot; hashes are stable across
processes and workers (BLAKE2b, not Python's salted ``hash``).

A retry asks again (``pick_retry(tried, h)``): the same balancer picks,
skipping the endpoints the request already tried (Envoy's
``previous_hosts`` retry predicate), unless it tried them all; consistent
hashing walks on from the request's point to the next endpoint not tried.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import random
from typing import Any, Callable, Sequence

from twistgw.api.types import Endpoint, RequestContext, UpstreamInfo
from twistgw.config.model import LoadBalancer
from twistgw.config.traffic import LbHash

__all__ = ["Balancer", "HashBalancer", "LeastRequest", "Maglev", "RandomBalancer", "RingHash", "hash_of",
           "make_balancer", "stable_hash", "untried"]

_MASK = (1 << 64) - 1
#: Maglev's lookup table size (Envoy's default, a prime)
MAGLEV_TABLE = 65537


def stable_hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _key(ep: Endpoint, by_hostname: bool) -> bytes:
    return (ep.host if by_hostname else f"{ep.host}:{ep.port}").encode("utf-8")


class Balancer:
    """Round robin over an upstream's endpoints (the default)."""

    __slots__ = ("upstream", "_counter", "_retries")

    #: what the engine reports a forwarded request to (a
    #: :class:`twistgw.core.outlier.UpstreamWatch`): None unless the upstream
    #: has ``leastRequest`` or ``outlierDetection`` (then it is the
    #: :class:`twistgw.core.health.CheckedBalancer`'s)
    watch: Any = None

    def __init__(self, upstream: UpstreamInfo) -> None:
        self.upstream = upstream
        self._counter = itertools.count()
        self._retries = itertools.count()

    def pick(self) -> Endpoint | None:
        eps = self.upstream.endpoints
        if not eps:
            return None
        return eps[next(self._counter) % len(eps)]

    def pick_retry(self, tried: Sequence[Endpoint], h: int | None = None) -> Endpoint | None:
        """A retry's endpoint: round robin over the endpoints not tried, on a
        count of its own (so retries spread over them, and the first tries'
        rotation is not moved by them)."""
        left = untried(self.upstream.endpoints, tried)
        return left[next(self._retries) % len(left)] if left else self.pick()


class RandomBalancer:
    """``random``: any endpoint, uniformly."""

    __slots__ = ("upstream", "_choice")

    watch: Any = None

    def __init__(self, upstream: UpstreamInfo, choice: Callable[[Any], Any] = random.choice) -> None:
        self.upstream = upstream
        self._choice = choice

    def pick(self) -> Endpoint | None:
        eps = self.upstream.endpoints
        return self._choice(eps) if eps else None

    def pick_retry(self, tried: Sequence[Endpoint], h: int | None = None) -> Endpoint | None:
        """A retry's endpoint: any not tried yet, uniformly."""
        left = untried(self.upstream.endpoints, tried)
        return self._choice(left) if left else self.pick()


class LeastRequest:
    """``leastRequest``: Envoy's power of N choices: ``choiceCount`` endpoints
    drawn at random (2 by default), the one with the fewest active requests
    wins (the first drawn on a tie). ``active`` is shared by every balancer of
    the upstream and kept by its :class:`~twistgw.core.outlier.UpstreamWatch`."""

    __slots__ = ("upstream", "active", "_choices", "_random")

    watch: Any = None

    def __init__(self, upstream: UpstreamInfo, lb: LoadBalancer, active: dict[Endpoint, int],
                 rand: Callable[[], float] = random.random) -> None:
        self.upstream = upstream
        self.active = active
        self._choices = lb.choice_count
        self._random = rand  # random.random: one C call per draw (randrange is several Python calls)

    def pick(self) -> Endpoint | None:
        return self._among(self.upstream.endpoints)

    def pick_retry(self, tried: Sequence[Endpoint], h: int | None = None) -> Endpoint | None:
        """A retry's endpoint: the same draw among the endpoints not tried yet."""
        left = untried(self.upstream.endpoints, tried)
        return self._among(left) if left else self.pick()

    def _among(self, eps: Sequence[Endpoint]) -> Endpoint | None:
        n = len(eps)
        if n < 2:
            return eps[0] if eps else None
        active = self.active
        rand = self._random
        best = eps[int(rand() * n)]
        low = active.get(best, 0)
        for _ in range(self._choices - 1):
            if not low:
                break
            ep = eps[int(rand() * n)]
            count = active.get(ep, 0)
            if count < low:
                best, low = ep, count
        return best


class HashBalancer(RandomBalancer):
    """Consistent hashing: :meth:`pick_hash` maps a request's hash to an
    endpoint; a request without a hash (no lbHash, or none of its
    policies found anything) gets a random endpoint, as in Envoy."""

    def pick_hash(self, h: int) -> Endpoint | None:
        raise NotImplementedError

    def pick_retry(self, tried: Sequence[Endpoint], h: int | None = None) -> Endpoint | None:
        """A retry's endpoint: from the request's hash on, the first
        endpoint not tried (the same one for the same hash); without a
        hash, any not tried."""
        if h is None:
            return super().pick_retry(tried)
        if all(ep in tried for ep in self.upstream.endpoints):
            return self.pick_hash(h)
        return self._walk(h, tried)

    def _walk(self, h: int, tried: Sequence[Endpoint]) -> Endpoint | None:
        raise NotImplementedError


class RingHash(HashBalancer):
    """Envoy's ring hash: each endpoint owns points on a ring; a hash goes
    to the first point at or after it (wrapping)."""

    __slots__ = ("_points", "_owners")

    def __init__(self, upstream: UpstreamInfo, lb: LoadBalancer) -> None:
        super().__init__(upstream)
        eps = upstream.endpoints
        ring: list[tuple[int, int]] = []
        if eps:
            per_host = max(1, -(-lb.min_ring // len(eps)))
            per_host = min(per_host, max(1, lb.max_ring // len(eps)))
            for i, ep in enumerate(eps):
                key = _key(ep, lb.by_hostname)
                ring.extend((stable_hash(key + b"_%d" % j), i) for j in range(per_host))
        ring.sort()
        self._points = [p for p, _ in ring]
        self._owners = [i for _, i in ring]

    def pick_hash(self, h: int) -> Endpoint | None:
        if not self._points:
            return None
        at = bisect.bisect_left(self._points, h)
        return self.upstream.endpoints[self._owners[at % len(self._points)]]

    def _walk(self, h: int, tried: Sequence[Endpoint]) -> Endpoint | None:
        """The next point of the ring (wrapping) whose endpoint was not tried."""
        n = len(self._points)
        at = bisect.bisect_left(self._points, h)
        eps, owners = self.upstream.endpoints, self._owners
        for k in range(n):
            ep = eps[owners[(at + k) % n]]
            if ep not in tried:
                return ep
        return self.pick_hash(h)


class Maglev(HashBalancer):
    """Maglev hashing (Eisenbud et al., 2016, as Envoy implements it): a
    lookup table of :data:`MAGLEV_TABLE` entries filled from each endpoint's
    permutation; a hash picks ``table[h % size]``."""

    __slots__ = ("_table",)

    def __init__(self, upstream: UpstreamInfo, lb: LoadBalancer, size: int = MAGLEV_TABLE) -> None:
        super().__init__(upstream)
        eps = upstream.endpoints
        table = [-1] * size if eps else []
        if eps:
            perms = []
            for ep in eps:
                key = _key(ep, lb.by_hostname)
                perms.append((stable_hash(key) % size, stable_hash(key + b"#skip") % (size - 1) + 1))
            nexts = [0] * len(eps)
            filled = 0
            while filled < size:
                for i, (offset, skip) in enumerate(perms):
                    c = (offset + nexts[i] * skip) % size
                    while table[c] >= 0:
                        nexts[i] += 1
                        c = (offset + nexts[i] * skip) % size
                    table[c] = i
                    nexts[i] += 1
                    filled += 1
                    if filled == size:
                        break
        self._table = table

    def pick_hash(self, h: int) -> Endpoint | None:
        if not self._table:
            return None
        return self.upstream.endpoints[self._table[h % len(self._table)]]

    def _walk(self, h: int, tried: Sequence[Endpoint]) -> Endpoint | None:
        """The next entry of the lookup table (wrapping) whose endpoint was not tried."""
        table, eps = self._table, self.upstream.endpoints
        size = len(table)
        for k in range(size):
            ep = eps[table[(h + k) % size]]
            if ep not in tried:
                return ep
        return self.pick_hash(h)


def untried(eps: Sequence[Endpoint], tried: Sequence[Endpoint]) -> list[Endpoint]:
    """The endpoints of ``eps`` a request has not tried."""
    return [ep for ep in eps if ep not in tried]


def make_balancer(upstream: UpstreamInfo, lb: LoadBalancer | None, active: dict[Endpoint, int] | None = None) -> Any:
    """The balancer ``lb`` names (round robin by default); ``active``: the
    upstream's active requests, for ``leastRequest``."""
    if lb is None or lb.kind == "roundRobin":
        return Balancer(upstream)
    if lb.kind == "leastRequest":
        return LeastRequest(upstream, lb, {} if active is None else active)
    if lb.kind == "random":
        return RandomBalancer(upstream)
    if lb.kind == "ringHash":
        return RingHash(upstream, lb)
    return Maglev(upstream, lb)


def _cookie(headers: Any, name: str) -> bytes | None:
    for line in headers.get_canonical(b"Cookie") or ():
        for part in line.split(b";"):
            k, eq, v = part.strip().partition(b"=")
            if eq and k.decode("latin-1") == name:
                return bytes(v)
    return None


def hash_of(policy: LbHash, ctx: RequestContext) -> int | None:
    """Envoy's combination of hash policies: each policy that finds its
    input adds its hash (rotate left by one, xor); a ``terminal`` one that
    found something ends the list. None when no policy found anything."""
    found: int | None = None
    for p in policy.policies:
        value: bytes | None
        if p.kind == "header":
            values = ctx.headers.get_canonical(p.name.encode("ascii"))
            value = b",".join(values) if values else None
        elif p.kind == "cookie":
            value = _cookie(ctx.headers, p.name)
        else:
            value = ctx.client_address.encode("ascii") or None
        if value is None:
            continue
        h = stable_hash(value)
        found = h if found is None else (((found << 1) | (found >> 63)) & _MASK) ^ h
        if p.terminal:
            break
    return found
