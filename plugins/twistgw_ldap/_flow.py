"""One LDAP config's check of a request: the decision cache first (no
Deferred when it answers), the directory otherwise; and what ``twistgw
explain`` says it would ask."""

from __future__ import annotations

import time

import attrs
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twistgw.sdk import NotChecked, RequestContext
from twistgw_extauth import AuthAllow, AuthDeny

from twistgw_ldap._answers import Verdict, internal_error, unauthorized, unavailable
from twistgw_ldap._cache import CredentialsMemo, DecisionCache
from twistgw_ldap._client import DirectoryFault
from twistgw_ldap._credentials import credentials, password_digest, value_digest
from twistgw_ldap._directory import against_directory
from twistgw_ldap._dn import format_dn
from twistgw_ldap._metrics import ALLOWED, CACHE_HIT, CACHE_MISS, FORBIDDEN, LATENCY
from twistgw_ldap._model import LdapConfig
from twistgw_ldap._state import State

_log = Logger(namespace="twistgw_ldap")


@attrs.frozen
class LdapChecker:
    """One compiled ``spec.configs[i].ldap`` (a :class:`twistgw_extauth.ExtAuthChecker`)."""

    cfg: LdapConfig
    state: State = attrs.field(eq=False, repr=False)
    #: ``Authorization`` unless keepCredentials: removed when the check admits
    credential_headers: tuple[bytes, ...] = ()
    #: groupsHeader and userHeader (twistgw.OwnsRequestHeaders)
    owned_request_headers: frozenset[bytes] = frozenset()
    #: the state's decision cache of ``cfg`` and credentials memo, looked up
    #: once (equal configs share them across routes and reloads)
    cache: DecisionCache = attrs.field(init=False, eq=False, repr=False)
    memo: CredentialsMemo = attrs.field(init=False, eq=False, repr=False)

    @cache.default
    def _cache(self) -> DecisionCache:
        return self.state.cache(self.cfg)

    @memo.default
    def _memo(self) -> CredentialsMemo:
        return self.state.memos[self.cfg.user_search is None]

    def check(self, ctx: RequestContext) -> AuthAllow | AuthDeny | Deferred[AuthAllow | AuthDeny]:
        """From the decision cache when it has the answer (synchronously);
        otherwise a Deferred of the directory's."""
        cfg = self.cfg
        memo = self.memo
        values = ctx.headers.getRawHeaders(b"authorization")
        seen = None
        if values is not None and len(values) == 1:
            seen = value_digest(values[0])
            known = memo.get(seen)
            if known is not None:  # this value was parsed before: straight to the cache
                hit = self._cached(known)
                if hit is not None:
                    return hit
        creds = credentials(ctx, cfg.realm, cfg.user_search is None)
        if isinstance(creds, AuthDeny):
            return creds
        typed, password = creds
        key = (typed, password_digest(password))
        if seen is not None:
            memo.put(seen, key)
        hit = self._cached(key)
        if hit is not None:
            return hit
        return Deferred.fromCoroutine(self._ask(ctx, typed, password, key[1]))

    def _cached(self, key: tuple[str, bytes]) -> AuthAllow | AuthDeny | None:
        cfg = self.cfg
        if cfg.cache_ttl <= 0:
            return None
        cache = self.cache
        if cfg.user_search is not None:  # the cache is keyed by the directory's name for the user
            canonical = cache.names.get(key[0])
            if canonical is None:
                return None
            key = (canonical, key[1])
        verdict = cache.get(key)
        if verdict is None:
            return None
        CACHE_HIT.inc()
        (ALLOWED if verdict.outcome == "allowed" else FORBIDDEN).inc()
        return verdict.cached

    async def _ask(self, ctx: RequestContext, typed: str, password: bytes, digest: bytes) -> AuthAllow | AuthDeny:
        cfg, state, cache = self.cfg, self.state, self.cache
        if cache.ttl > 0:
            CACHE_MISS.inc()
        started = time.monotonic()
        try:
            result = await against_directory(cfg, state.pool(cfg, ctx), typed, password, state.get_reactor(ctx),
                                             ctx.tracer)
        except DirectoryFault as fault:
            _log.warn("LDAP directory {target} unavailable: {reason}", target=cfg.target.describe(),
                      reason=fault.reason)
            return unavailable(f"{cfg.source}: directory {cfg.target.describe()} unavailable: {fault.reason}")
        finally:
            LATENCY.observe(time.monotonic() - started)
        if isinstance(result, Verdict):
            cache.put((result.user, digest), result)
            if cfg.user_search is not None:
                cache.learn_name(typed, result.user)
            (ALLOWED if result.outcome == "allowed" else FORBIDDEN).inc()
            return result.fresh
        reason = f"{cfg.source}: {result.reason}"
        if result.outcome == "unauthorized":
            return unauthorized(cfg.realm, reason)
        _log.error("LDAP check refused with 500: {reason}", reason=reason)
        return internal_error(reason)

    def dry_run(self, ctx: RequestContext) -> AuthDeny | NotChecked:
        """Refuse what is refused without asking the directory (no or
        malformed credentials); otherwise say what would be asked."""
        cfg = self.cfg
        creds = credentials(ctx, cfg.realm, cfg.user_search is None)
        if isinstance(creds, AuthDeny):
            return creds
        return NotChecked(f"{cfg.source} would {would_ask(cfg, creds[0])} (not contacted in a dry run;"
                          " --live asks the directory)")


def would_ask(cfg: LdapConfig, user: str) -> str:
    """The steps of a check of ``user``, in words."""
    if cfg.user_search is not None:
        account = cfg.user_search.account
        who = f"as {account.dn!r}" if account is not None else "anonymously"
        step = (f"search {cfg.user_search.describe(user)} {who} at {cfg.target.describe()},"
                f" then bind as the one entry found")
        user_dn = "the entry found"
    else:
        user_dn = repr(cfg.user_dn(user))
        step = f"bind as {user_dn} at {cfg.target.describe()}"
    if cfg.disable_group_checking and cfg.group_search is None and not cfg.groups_header:
        return step
    who = (f"as the service account {cfg.service_account.dn!r}" if cfg.service_account else "as the user")
    if cfg.group_search is not None:
        nested = " (nested)" if cfg.group_search.nested else ""
        step += f", then search groups {cfg.group_search.filter.show('USER-DN')} under {cfg.group_search.base}{nested}"
    else:
        step += f", then read {cfg.membership_attribute} of {user_dn} {who}"
    if not cfg.disable_group_checking:
        groups = ", ".join(sorted(format_dn(g) for g in cfg.allowed_groups)) or "(none)"
        step += f" and require one of: {groups}"
    return step


__all__ = ["LdapChecker", "would_ask"]
