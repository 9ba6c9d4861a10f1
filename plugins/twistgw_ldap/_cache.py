"""The LDAP config type's memory of recent answers: the decision cache (one
per config entry) and the credentials memo, both owned by the config type
object (one per gateway), never module globals."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable

from twistgw_ldap._answers import Verdict

#: Entries kept per decision cache (oldest dropped first).
CACHE_MAX_ENTRIES = 10_000
#: Entries kept by the credentials memo and by a config's name map.
MEMO_MAX_ENTRIES = 10_000


class DecisionCache:
    """Recent verdicts of checks that reached the directory and succeeded in
    binding: admitted, or "forbidden" (not in an allowed group), with the
    groups found and the headers they make.

    One cache per configuration entry (keyed by the whole, hashable
    :class:`LdapConfig`), keyed by (user name, keyed BLAKE2b of the password
    under a per-process random key): a different password or a changed
    configuration never matches an entry. With ``userSearch`` the user name
    is the directory's canonical one (:attr:`names` maps each name as typed
    to it, learned from the searches that found it). Failures (401) and
    directory faults are never stored.
    """

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._entries: OrderedDict[tuple[str, bytes], tuple[float, Verdict]] = OrderedDict()
        #: the name as typed -> the canonical name the directory gave for it
        self.names: dict[str, str] = {}

    def get(self, key: tuple[str, bytes]) -> Verdict | None:
        if self.ttl <= 0:
            return None
        found = self._entries.get(key)
        if found is None:
            return None
        expires, outcome = found
        if self.clock() >= expires:
            del self._entries[key]
            return None
        return outcome

    def put(self, key: tuple[str, bytes], outcome: Verdict) -> None:
        if self.ttl <= 0:
            return
        self._entries[key] = (self.clock() + self.ttl, outcome)
        self._entries.move_to_end(key)
        while len(self._entries) > CACHE_MAX_ENTRIES:
            self._entries.popitem(last=False)

    def learn_name(self, typed: str, canonical: str) -> None:
        if self.ttl <= 0:
            return
        if len(self.names) >= MEMO_MAX_ENTRIES:
            self.names.clear()
        self.names[typed] = canonical

    def __len__(self) -> int:
        return len(self._entries)


class CredentialsMemo:
    """What an ``Authorization`` value means: its keyed BLAKE2b (never the
    value, which holds the password) -> (the user name, the password's
    digest), for values the credentials check accepted. A deterministic
    function of the value, so entries never go stale; it spares a cached
    request the Basic parsing and the second hash. The config type keeps
    two: names cleaned for a DN template, and names as typed for a search.
    Bounded (clients choose the values): emptied when full."""

    def __init__(self) -> None:
        self._entries: dict[bytes, tuple[str, bytes]] = {}

    def get(self, key: bytes) -> tuple[str, bytes] | None:
        return self._entries.get(key)

    def put(self, key: bytes, value: tuple[str, bytes]) -> None:
        if len(self._entries) >= MEMO_MAX_ENTRIES:
            self._entries.clear()
        self._entries[key] = value

    def clear(self) -> None:
        self._entries.clear()
