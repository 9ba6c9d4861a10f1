"""The request flow of SPEC.md §3 (LDAP), the decision cache, and metrics."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
import time
from collections import OrderedDict
from typing import Any, Callable

from prometheus_client import Counter, Histogram
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twistgw import Allow, Deny, NotChecked, RequestContext

from twistgw_ldap._client import FAULT_CODES, DirectoryFault, Pool, bind, search_base
from twistgw_ldap._dn import InvalidDN, clean_username, format_dn, parse_dn
from twistgw_ldap._options import CompiledExtAuth, LdapConfig, Target

_log = Logger(namespace="twistgw_ldap")

#: Longer credentials are refused (401) without asking the directory.
MAX_USERNAME = 256
MAX_PASSWORD = 1024
#: Base64 of user:password can be no longer than this.
_MAX_TOKEN = 4 * ((MAX_USERNAME * 4 + MAX_PASSWORD + 1 + 2) // 3) + 4
#: Entries kept per decision cache (oldest dropped first).
CACHE_MAX_ENTRIES = 10_000

DECISIONS = Counter(
    "twistgw_ldap_decisions_total", "LDAP (extauth) decisions by outcome",
    ["outcome"],  # allowed, unauthorized, forbidden, fault, error
)
CACHE = Counter("twistgw_ldap_cache_total", "LDAP decision cache lookups", ["result"])  # hit, miss
OPERATIONS = Counter(
    "twistgw_ldap_operations_total", "LDAP operations sent to directories",
    ["operation", "result"],  # operation: connect, bind_user, bind_service, search
)
LATENCY = Histogram("twistgw_ldap_check_seconds", "Time to decide one LDAP check against the directory",
                    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))

# Labelled children resolved once (.labels() takes a lock per call).
_CACHE_HIT = CACHE.labels("hit")
_ALLOWED = DECISIONS.labels("allowed")
_operations: dict[tuple[str, int], Any] = {}


def _operation(name: str, code: int) -> Any:
    child = _operations.get((name, code))
    if child is None:
        child = OPERATIONS.labels(name, str(code))
        if len(_operations) < 256:  # result codes come from the directory: bound the cache
            _operations[(name, code)] = child
    return child

#: Per-process secret for the cache key; never leaves memory, never logged.
_SALT = os.urandom(32)


def password_digest(password: bytes) -> bytes:
    """A salted, keyed hash: the cache never holds a password."""
    return hmac.new(_SALT, password, hashlib.sha256).digest()


class DecisionCache:
    """Recent outcomes of checks that reached the directory and succeeded in
    binding: "allowed" or "forbidden" (not in an allowed group).

    Keyed by (user name, HMAC-SHA256 of the password under a per-process
    random key), so a different password never matches an entry. Failures
    (401) and directory faults are never stored.
    """

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._entries: OrderedDict[tuple[str, bytes], tuple[float, str]] = OrderedDict()

    def get(self, key: tuple[str, bytes]) -> str | None:
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

    def put(self, key: tuple[str, bytes], outcome: str) -> None:
        if self.ttl <= 0:
            return
        self._entries[key] = (self.clock() + self.ttl, outcome)
        self._entries.move_to_end(key)
        while len(self._entries) > CACHE_MAX_ENTRIES:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class State:
    """Module state kept across configuration reloads: pools and caches."""

    def __init__(self) -> None:
        self.reactor: Any = None
        self.pools: dict[Target, Pool] = {}
        self.caches: dict[LdapConfig, DecisionCache] = {}

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

    def config_loaded(self, compiled: list[Any]) -> None:
        configs = {cfg for c in compiled if isinstance(c, CompiledExtAuth) for cfg in c.configs}
        wanted: dict[Target, list[LdapConfig]] = {}
        for cfg in configs:
            wanted.setdefault(cfg.target, []).append(cfg)
        for target in list(self.pools):
            if target not in wanted:
                self.pools.pop(target).close()
        for target, cfgs in wanted.items():
            pool = self.pool(cfgs[0])
            pool.max_size = max(c.pool_max for c in cfgs)
            pool.warm(max(c.pool_initial for c in cfgs), max(c.connect_timeout for c in cfgs))
        for cfg in list(self.caches):
            if cfg not in configs:
                del self.caches[cfg]

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()
        self.caches.clear()


STATE = State()


# ---------------------------------------------------------------------------
# Responses (empty bodies, content-length 0)
# ---------------------------------------------------------------------------


def unauthorized(cfg_realm: str, reason: str) -> Deny:
    DECISIONS.labels("unauthorized").inc()
    challenge = f'Basic realm="{cfg_realm}", charset="UTF-8"'.encode("ascii")
    return Deny(401, b"", headers=((b"www-authenticate", challenge),), content_type=b"", reason=reason)


def forbidden(reason: str) -> Deny:
    DECISIONS.labels("forbidden").inc()
    return Deny(403, b"", content_type=b"", reason=reason)


def unavailable(reason: str) -> Deny:
    DECISIONS.labels("fault").inc()
    return Deny(503, b"", content_type=b"", reason=reason)


def internal_error(reason: str) -> Deny:
    DECISIONS.labels("error").inc()
    return Deny(500, b"", content_type=b"", reason=reason)


# ---------------------------------------------------------------------------
# Credentials
# ---------------------------------------------------------------------------


def read_basic(ctx: RequestContext) -> tuple[str, bytes] | str:
    """(user name, password bytes) from ``Authorization: Basic``, or a reason
    (for logs; never containing the password) why there are none."""
    values = ctx.headers.getRawHeaders(b"authorization") or []
    if not values:
        return "no Authorization header"
    if len(values) > 1:
        return "more than one Authorization header"
    value = values[0].strip()
    scheme, _, token = value.partition(b" ")
    if scheme.lower() != b"basic":
        return "Authorization scheme is not Basic"
    token = token.strip()
    if not token:
        return "Basic credentials are empty"
    if len(token) > _MAX_TOKEN:
        return f"Basic credentials longer than {_MAX_TOKEN} bytes"
    try:
        decoded = base64.b64decode(token, validate=True)
    except (binascii.Error, ValueError):
        return "Basic credentials are not valid base64"
    user_raw, colon, password = decoded.partition(b":")
    if not colon:
        return "Basic credentials have no ':' between user and password"
    try:
        user = user_raw.decode("utf-8")
        password.decode("utf-8")
    except UnicodeDecodeError:
        return "Basic credentials are not UTF-8"
    return user, password


# ---------------------------------------------------------------------------
# One config against the directory
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _parse_value(text: str) -> Any:
    """Membership values repeat across requests; parse each once."""
    try:
        return parse_dn(text)
    except InvalidDN:
        return None


def _member_of(cfg: LdapConfig, entries: list[Any]) -> bool:
    wanted = cfg.membership_attribute.lower()
    for entry in entries:
        for atype, values in entry.attributes:
            name = atype.decode("utf-8", "replace") if isinstance(atype, bytes) else str(atype)
            if name.lower() != wanted:
                continue
            for v in values:
                text = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                if len(text) <= 4096 and _parse_value(text) in cfg.allowed_groups:
                    return True
    return False


async def _against_directory(cfg: LdapConfig, pool: Pool, user_dn: str, password: bytes,
                             reactor: Any) -> tuple[str, str]:
    """Returns (outcome, reason); outcome in allowed, unauthorized, forbidden,
    error. Raises DirectoryFault."""
    t = cfg.request_timeout
    for attempt in (1, 2):
        client = await pool.acquire(cfg.connect_timeout, t)
        reusable = False
        try:
            code = await bind(client, user_dn, password, t, reactor)
            _operation("bind_user", code).inc()
            if code in FAULT_CODES:
                raise DirectoryFault(f"user bind: directory answered result code {code}")
            if code != 0:
                reusable = True
                return "unauthorized", f"bind as {user_dn} failed (result code {code})"
            if cfg.disable_group_checking:
                reusable = True
                return "allowed", f"bind as {user_dn} succeeded; group checking disabled"
            if cfg.service_account is not None:
                sa = cfg.service_account
                code = await bind(client, sa.dn, sa.password, t, reactor)
                _operation("bind_service", code).inc()
                if code in FAULT_CODES:
                    raise DirectoryFault(f"service account bind: directory answered result code {code}")
                if code != 0:
                    reusable = True
                    return "error", (f"service account {sa.dn} (Secret {sa.secret}) could not bind"
                                     f" (result code {code}); fix the credentials Secret")
            code, entries = await search_base(client, user_dn, cfg.filter_ber,
                                              cfg.membership_attribute, t, reactor)
            _operation("search", code).inc()
            reusable = True
            if code in FAULT_CODES:
                reusable = False
                raise DirectoryFault(f"search: directory answered result code {code}")
            if code == 32 or (code == 0 and not entries):
                return "unauthorized", f"{user_dn} not found with filter {cfg.search_filter}"
            if code != 0:
                return "error", f"search of {user_dn} failed with result code {code}"
            if _member_of(cfg, entries):
                return "allowed", f"{user_dn} is in an allowed group"
            return "forbidden", f"{user_dn} is not in any allowed group ({cfg.membership_attribute})"
        except DirectoryFault as fault:
            reusable = False
            if attempt == 1 and fault.connection_lost and client.reused:
                _log.debug("Pooled connection to {target} was closed; retrying on a new one",
                           target=cfg.target.describe())
                continue
            raise
        finally:
            pool.release(client, reusable)
    raise AssertionError("unreachable")


_MISS: Any = object()


def _cached(cfg: LdapConfig, cache: DecisionCache, key: tuple[str, bytes]) -> Deny | None:
    """The cached decision for ``key`` (None: allowed, or the 403), or _MISS."""
    outcome = cache.get(key)
    if outcome is None:
        return _MISS
    _CACHE_HIT.inc()
    if outcome == "forbidden":
        return forbidden(f"{cfg.source}: {key[0]} is not in any allowed group (cached)")
    return None


async def check_one(cfg: LdapConfig, ctx: RequestContext, user: str, password: bytes) -> Deny | None:
    cache = STATE.cache(cfg)
    key = (user, password_digest(password))
    hit = _cached(cfg, cache, key)
    if hit is not _MISS:
        return hit
    if cache.ttl > 0:
        CACHE.labels("miss").inc()
    reactor = STATE.get_reactor(ctx)
    user_dn = cfg.user_dn(user)
    started = time.monotonic()
    try:
        outcome, reason = await _against_directory(cfg, STATE.pool(cfg, ctx), user_dn, password, reactor)
    except DirectoryFault as fault:
        _log.warn("LDAP directory {target} unavailable: {reason}", target=cfg.target.describe(),
                  reason=fault.reason)
        return unavailable(f"{cfg.source}: directory {cfg.target.describe()} unavailable: {fault.reason}")
    finally:
        LATENCY.observe(time.monotonic() - started)
    reason = f"{cfg.source}: {reason}"
    if outcome == "allowed":
        cache.put(key, "allowed")
        return None
    if outcome == "forbidden":
        cache.put(key, "forbidden")
        return forbidden(reason)
    if outcome == "unauthorized":
        return unauthorized(cfg.realm, reason)
    _log.error("LDAP check refused with 500: {reason}", reason=reason)
    return internal_error(reason)


def credentials(ctx: RequestContext, realm: str) -> tuple[str, bytes] | Deny:
    """The cleaned user name and the password, or the 401 refusing them
    without asking the directory."""
    creds = read_basic(ctx)
    if isinstance(creds, str):
        return unauthorized(realm, creds)
    raw_user, password = creds
    user = clean_username(raw_user)
    if not user:
        return unauthorized(realm, "empty user name (refused without binding)")
    if not password:
        return unauthorized(realm, f"empty password for {user!r} (refused without binding)")
    if len(user) > MAX_USERNAME:
        return unauthorized(realm, f"user name longer than {MAX_USERNAME} characters")
    if len(password) > MAX_PASSWORD:
        return unauthorized(realm, f"password longer than {MAX_PASSWORD} bytes")
    return user, password


def authenticate(ctx: RequestContext, compiled: CompiledExtAuth) -> Allow | Deny | Deferred[Allow | Deny]:
    """Decide from the decision cache when every config has an answer there
    (synchronously: no coroutine, no Deferred); otherwise ask the directory
    for the configs from the first one without a cached answer."""
    creds = credentials(ctx, compiled.configs[0].realm)
    if isinstance(creds, Deny):
        return creds
    user, password = creds
    key: tuple[str, bytes] | None = None
    for i, cfg in enumerate(compiled.configs):
        if cfg.cache_ttl <= 0:
            return Deferred.fromCoroutine(_ask_directory(ctx, compiled, user, password, i))
        if key is None:
            key = (user, password_digest(password))
        hit = _cached(cfg, STATE.cache(cfg), key)
        if hit is _MISS:
            return Deferred.fromCoroutine(_ask_directory(ctx, compiled, user, password, i))
        if hit is not None:
            return hit
    return _admit(ctx, compiled, user)


def dry_run(ctx: RequestContext, compiled: CompiledExtAuth) -> Deny | NotChecked:
    """``twistgw explain`` without ``--live``: refuse what is refused without
    asking the directory (no or malformed credentials); otherwise say what
    would be asked, contacting nothing."""
    creds = credentials(ctx, compiled.configs[0].realm)
    if isinstance(creds, Deny):
        return creds
    user, _ = creds
    steps = []
    for cfg in compiled.configs:
        step = f"bind as {cfg.user_dn(user)!r} at {cfg.target.describe()}"
        if not cfg.disable_group_checking:
            who = (f"as the service account {cfg.service_account.dn!r}" if cfg.service_account
                   else "as the user")
            groups = ", ".join(sorted(format_dn(g) for g in cfg.allowed_groups)) or "(none)"
            step += (f", then search that entry {who} and require {cfg.membership_attribute}"
                     f" to hold one of: {groups}")
        steps.append(f"{cfg.source} would {step}")
    return NotChecked("; then ".join(steps) + " (not contacted in a dry run; --live asks the directory)")


async def _ask_directory(ctx: RequestContext, compiled: CompiledExtAuth, user: str, password: bytes,
                         start: int) -> Allow | Deny:
    for cfg in compiled.configs[start:]:
        deny = await check_one(cfg, ctx, user, password)
        if deny is not None:
            return deny
    return _admit(ctx, compiled, user)


def _admit(ctx: RequestContext, compiled: CompiledExtAuth, user: str) -> Allow:
    ctx.principal = user
    ctx.state["extauth"] = {"user": user, "authConfig": compiled.auth_config}
    _ALLOWED.inc()
    return _admission(compiled.auth_config)


@functools.lru_cache(maxsize=1024)
def _admission(auth_config: str) -> Allow:
    # One Allow per AuthConfig (the user is in ctx.principal), not one per request.
    return Allow(f"LDAP: admitted by AuthConfig {auth_config}")
