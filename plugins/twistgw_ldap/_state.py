"""The LDAP config type's state, kept across configuration reloads:
connection pools (one per directory target), decision caches (one per
config entry) and the credentials memos. Owned by the config type object,
so two gateways in one process share nothing."""

from __future__ import annotations

from typing import Any, Iterable

from twistgw.sdk import RequestContext

from twistgw_ldap._cache import CredentialsMemo, DecisionCache
from twistgw_ldap._client import Pool
from twistgw_ldap._model import LdapConfig, Target


class State:
    def __init__(self) -> None:
        self.reactor: Any = None
        self.pools: dict[Target, Pool] = {}
        self.caches: dict[LdapConfig, DecisionCache] = {}
        #: names cleaned for a DN template (True) and names as typed for a search (False)
        self.memos = {True: CredentialsMemo(), False: CredentialsMemo()}

    def get_reactor(self, ctx: RequestContext | None = None) -> Any:
        if self.reactor is not None:
            return self.reactor
        if ctx is not None and ctx.reactor is not None:
            return ctx.reactor
        from twisted.internet import reactor

        return reactor

    def pool(self, cfg: LdapConfig, ctx: RequestContext | None = None) -> Pool:
        pool = self.pools.get(cfg.target)
        if pool is None or pool.closed:
            pool = self.pools[cfg.target] = Pool(self.get_reactor(ctx), cfg.target, cfg.pool_max)
        return pool

    def cache(self, cfg: LdapConfig) -> DecisionCache:
        cache = self.caches.get(cfg)
        if cache is None:
            cache = self.caches[cfg] = DecisionCache(cfg.cache_ttl)
        return cache

    def config_loaded(self, configs: Iterable[LdapConfig]) -> None:
        """Pools for the targets in use (warmed, sized for the largest
        config), none for the others; caches only for configs in use."""
        wanted: dict[Target, list[LdapConfig]] = {}
        used = set(configs)
        for cfg in used:
            wanted.setdefault(cfg.target, []).append(cfg)
        for target in list(self.pools):
            if target not in wanted:
                self.pools.pop(target).close()
        for cfgs in wanted.values():
            pool = self.pool(cfgs[0])
            pool.max_size = max(c.pool_max for c in cfgs)
            pool.warm(max(c.pool_initial for c in cfgs), max(c.connect_timeout for c in cfgs))
        for cfg in list(self.caches):
            if cfg not in used:
                del self.caches[cfg]

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()
        self.caches.clear()
        for memo in self.memos.values():
            memo.clear()
