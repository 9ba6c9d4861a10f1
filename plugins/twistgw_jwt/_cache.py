"""The verified-token cache: a bounded LRU so a repeated token costs a
dictionary lookup instead of a signature verification.

Keyed by ``(provider name, raw token)``. An entry expires no later than the
token's ``exp`` and at most :data:`MAX_ENTRY_SECONDS` after it was verified
(so a key removed from a key set stops admitting cached tokens soon).
Only successes are cached; failures always go through full verification.
Each entry remembers the generation of the key set that verified it; when a
remote key set changes (a key is removed or replaced), older entries are no
longer served.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Mapping

#: Longest time a verified token is trusted without checking it again.
MAX_ENTRY_SECONDS = 300.0


class VerifiedCache:
    __slots__ = ("size", "_entries", "hits", "misses")

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[str, str], tuple[float, int, Mapping[str, Any]]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, provider: str, token: str, now: float, generation: int = 0) -> Mapping[str, Any] | None:
        if not self.size:
            return None
        key = (provider, token)
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        expires, gen, claims = entry
        if now >= expires or gen != generation:
            del self._entries[key]
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return claims

    def put(self, provider: str, token: str, claims: Mapping[str, Any], now: float,
            generation: int = 0) -> None:
        if not self.size:
            return
        expires = now + MAX_ENTRY_SECONDS
        exp = claims.get("exp")
        if exp is not None:
            expires = min(expires, float(exp))
        if expires <= now:
            return
        key = (provider, token)
        entries = self._entries
        if key in entries:
            entries.move_to_end(key)  # a new key is already the most recent
        entries[key] = (expires, generation, claims)
        while len(entries) > self.size:
            entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
