"""The request flow of SPEC.md §3 (LDAP), the decision cache, and metrics."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
import time
from collections import OrderedDict
from typing import Any, Callable
from urllib.parse import quote

import attrs

from prometheus_client import Histogram
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twistgw import Allow, Deny, NotChecked, RequestContext, counter

from twistgw_ldap._ber import SCOPE_BASE, SCOPE_SUB
from twistgw_ldap._client import FAULT_CODES, DirectoryFault, Pool, bind, search
from twistgw_ldap._dn import InvalidDN, clean_username, first_value, format_dn, parse_dn
from twistgw_ldap._options import CompiledExtAuth, GroupSearch, LdapConfig, ServiceAccount, Target, UserSearch

_log = Logger(namespace="twistgw_ldap")

#: Longer credentials are refused (401) without asking the directory.
MAX_USERNAME = 256
MAX_PASSWORD = 1024
#: Base64 of user:password can be no longer than this.
_MAX_TOKEN = 4 * ((MAX_USERNAME * 4 + MAX_PASSWORD + 1 + 2) // 3) + 4
#: Entries kept per decision cache (oldest dropped first).
CACHE_MAX_ENTRIES = 10_000

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
    """A keyed hash (BLAKE2b in its keyed MAC mode, under the per-process
    random key): the cache never holds a password. 0.5 µs where
    HMAC-SHA256 took 2 µs of every cached request."""
    return hashlib.blake2b(password, key=_SALT, digest_size=32).digest()


class DecisionCache:
    """Recent verdicts of checks that reached the directory and succeeded in
    binding: admitted, or "forbidden" (not in an allowed group), with the
    groups found and the headers they make.

    One cache per configuration entry (``State.caches`` is keyed by the
    whole, hashable :class:`LdapConfig`), keyed by (user name, keyed BLAKE2b of
    the password under a per-process random key): a different password or a
    changed configuration never matches an entry. Failures (401) and
    directory faults are never stored.
    """

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._entries: OrderedDict[tuple[str, bytes], tuple[float, Any]] = OrderedDict()

    def get(self, key: tuple[str, bytes]) -> Any:
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

    def put(self, key: tuple[str, bytes], outcome: Any) -> None:
        if self.ttl <= 0:
            return
        self._entries[key] = (self.clock() + self.ttl, outcome)
        self._entries.move_to_end(key)
        while len(self._entries) > CACHE_MAX_ENTRIES:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class State:
    """The plugin instance's state, kept across configuration reloads:
    connection pools and decision caches."""

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
    """Group DNs repeat across requests; parse each once."""
    try:
        return parse_dn(text)
    except InvalidDN:
        return None


#: Most groups one user may have (per search and in all); more is a 500.
MAX_GROUPS = 1000
#: Group DNs per nested-group search (one OR filter).
_NESTED_BATCH = 50
#: Group DNs listed in a reason (explain, logs).
_REASON_GROUPS = 20
#: Printable ASCII but ``%`` and ``,``: kept as they are in a header value.
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in "%,")


def header_text(value: str) -> bytes:
    """A name for a header value: UTF-8, with ``%``, ``,``, control and
    non-ASCII characters (and leading/trailing spaces) percent-encoded, so a
    group's name can never add a list item, a header line or a space that
    disappears (decode with ``urllib.parse.unquote``)."""
    text = quote(value, safe=_HEADER_SAFE)
    if text.startswith(" ") or text.endswith(" "):
        stripped = text.strip(" ")
        lead = len(text) - len(text.lstrip(" "))
        trail = len(text) - len(text.rstrip(" ")) if stripped else 0
        text = "%20" * lead + stripped + "%20" * trail
    return text.encode("ascii")


@attrs.frozen
class Group:
    dn: str
    name: str
    level: int  # 1: the user is a member; 2: a member of a level-1 group...


@attrs.frozen
class Verdict:
    """A decision made against the directory, as the decision cache keeps it."""

    outcome: str  # "allowed" or "forbidden"
    reason: str  # for explain and logs; never holds the password
    groups: tuple[str, ...] = ()  # the group names, sorted
    #: request headers to set (value) or remove (None) when admitted
    headers: tuple[tuple[bytes, bytes | None], ...] = ()


class _Answer(Exception):
    """Ends a check early with an outcome that is not a directory fault."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


class _Session:
    """One check's operations on one borrowed connection."""

    def __init__(self, cfg: LdapConfig, client: Any, reactor: Any) -> None:
        self.cfg = cfg
        self.client = client
        self.reactor = reactor

    async def bind(self, dn: str, password: bytes, operation: str) -> int:
        code = await bind(self.client, dn, password, self.cfg.request_timeout, self.reactor)
        _operation(operation, code).inc()
        if code in FAULT_CODES:
            raise DirectoryFault(f"{operation}: directory answered result code {code}")
        return code

    async def bind_account(self, account: ServiceAccount | None, purpose: str) -> None:
        """Bind as ``account``, or anonymously when None; a refusal is a 500."""
        if account is None:
            code = await self.bind("", b"", "bind_anonymous")
            if code != 0:
                raise _Answer("error", f"anonymous bind for the {purpose} refused (result code {code});"
                                       " give userSearch.credentialsSecretRef a service account")
            return
        code = await self.bind(account.dn, account.password, "bind_service")
        if code != 0:
            raise _Answer("error", f"service account {account.dn} (Secret {account.secret}) could not bind"
                                   f" for the {purpose} (result code {code}); fix the credentials Secret")

    async def search(self, base: str, filter_ber: bytes, attributes: list[str], scope: int,
                     size_limit: int, what: str) -> tuple[int, list[Any]]:
        code, entries = await search(self.client, base, filter_ber, attributes, self.cfg.request_timeout,
                                     self.reactor, scope=scope, size_limit=size_limit)
        _operation("search", code).inc()
        if code in FAULT_CODES:
            raise DirectoryFault(f"{what}: directory answered result code {code}")
        return code, entries


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _values(entry: Any, attribute: str) -> list[str]:
    wanted = attribute.lower()
    return [_text(v) for atype, values in entry.attributes if _text(atype).lower() == wanted for v in values]


async def _find_user(s: _Session, us: UserSearch, user: str) -> str:
    """The DN of the one entry ``userSearch`` finds for ``user``."""
    await s.bind_account(us.account, "user search")
    code, entries = await s.search(us.base, us.filter.encode(user), ["1.1"], us.scope, 2, "user search")
    where = us.describe(user)
    if code == 32:
        raise _Answer("error", f"{where}: the base DN does not exist (or is hidden from the searching account)")
    if code == 4 or len(entries) > 1:
        _log.warn("LDAP directory problem: several entries match {search}; refusing (401) rather than"
                  " guessing. Make the filter or base unique per user.", search=where)
        raise _Answer("unauthorized", f"several entries match {where} (ambiguous: a directory problem)")
    if code != 0:
        raise _Answer("error", f"{where} failed with result code {code}")
    if not entries:
        raise _Answer("unauthorized", f"no entry matches {where}")
    dn = _text(entries[0].objectName)
    if not dn.strip() or _parse_value(dn) is None:
        raise _Answer("error", f"{where} returned an unusable DN {dn!r}")
    return dn


async def _membership(s: _Session, user_dn: str) -> dict[Any, Group]:
    """Groups from the membership attribute of the user's own entry."""
    cfg = s.cfg
    if cfg.service_account is not None:
        await s.bind_account(cfg.service_account, "group lookup")
    code, entries = await s.search(user_dn, cfg.filter_ber, [cfg.membership_attribute], SCOPE_BASE, 2, "search")
    if code == 32 or (code == 0 and not entries):
        raise _Answer("unauthorized", f"{user_dn} not found with filter {cfg.search_filter}")
    if code != 0:
        raise _Answer("error", f"search of {user_dn} failed with result code {code}")
    groups: dict[Any, Group] = {}
    for value in (v for e in entries for v in _values(e, cfg.membership_attribute)):
        key = _parse_value(value) if len(value) <= 4096 else None
        if key is not None and key not in groups:
            groups[key] = Group(value, first_value(value), 1)
    return groups


async def _search_groups(s: _Session, gs: GroupSearch, user_dn: str) -> dict[Any, Group]:
    """Groups whose entries list the user (``groupSearch``), and with
    ``nested`` the groups listing those, level by level, each group once."""
    cfg = s.cfg
    if cfg.service_account is not None:
        await s.bind_account(cfg.service_account, "group search")
    groups: dict[Any, Group] = {}
    seen = {_parse_value(user_dn)}
    frontier, level = [user_dn], 1
    last_level = 1 + gs.max_depth if gs.nested else 1
    while frontier and level <= last_level:
        found: list[str] = []
        for i in range(0, len(frontier), _NESTED_BATCH):
            batch = frontier[i:i + _NESTED_BATCH]
            code, entries = await s.search(gs.base, gs.filter.encode_any(batch), [gs.name_attribute], SCOPE_SUB,
                                           MAX_GROUPS, "group search")
            if code == 32:
                raise _Answer("error", f"groupSearch.baseDn {gs.base} does not exist (or is hidden)")
            if code == 4:
                raise _Answer("error", f"more than {MAX_GROUPS} groups match {gs.filter.show(batch[0])}")
            if code != 0:
                raise _Answer("error", f"group search under {gs.base} failed with result code {code}")
            for entry in entries:
                dn = _text(entry.objectName)
                key = _parse_value(dn)
                if key is None or key in seen:
                    continue  # already found: this is how a membership cycle ends
                seen.add(key)
                names = _values(entry, gs.name_attribute)
                groups[key] = Group(dn, names[0] if names else first_value(dn), level)
                found.append(dn)
        if len(groups) > MAX_GROUPS:
            raise _Answer("error", f"{user_dn} is in more than {MAX_GROUPS} groups")
        frontier, level = found, level + 1
    return groups


def _describe_groups(groups: dict[Any, Group]) -> str:
    shown = sorted(groups.values(), key=lambda g: (g.level, g.dn.lower()))
    parts = [g.dn + (f" (nested, level {g.level})" if g.level > 1 else "") for g in shown[:_REASON_GROUPS]]
    if len(shown) > _REASON_GROUPS:
        parts.append(f"... {len(shown) - _REASON_GROUPS} more")
    return ", ".join(parts) or "none"


def _verdict(cfg: LdapConfig, user: str, outcome: str, reason: str, groups: dict[Any, Group]) -> Verdict:
    names = tuple(sorted({g.name for g in groups.values()}))
    headers: list[tuple[bytes, bytes | None]] = []
    if cfg.groups_header:
        headers.append((cfg.groups_header, b",".join(header_text(n) for n in names) or None))
    if cfg.user_header:
        headers.append((cfg.user_header, header_text(user)))
    return Verdict(outcome, f"{cfg.source}: {reason}", names, tuple(headers))


async def _decide(s: _Session, user: str, password: bytes) -> Verdict:
    """Find the user's DN, bind as it, read the groups, decide. Raises
    _Answer for outcomes other than allowed/forbidden, DirectoryFault."""
    cfg = s.cfg
    if cfg.user_search is None:
        user_dn, how = cfg.user_dn(user), "from userDnTemplate"
    else:
        user_dn = await _find_user(s, cfg.user_search, user)
        how = "found by " + cfg.user_search.describe(user)
    code = await s.bind(user_dn, password, "bind_user")
    if code != 0:
        raise _Answer("unauthorized", f"bind as {user_dn} failed (result code {code})")
    who = f"{user} is {user_dn} ({how})"
    if cfg.disable_group_checking and not cfg.groups_header:
        return _verdict(cfg, user, "allowed", f"bind as {user_dn} succeeded ({how}); group checking disabled", {})
    if cfg.group_search is None:
        groups = await _membership(s, user_dn)
        source = f"from {cfg.membership_attribute}"
    else:
        groups = await _search_groups(s, cfg.group_search, user_dn)
        source = "by groupSearch" + (" (nested)" if cfg.group_search.nested else "")
    listed = f"groups {source}: {_describe_groups(groups)}"
    if cfg.disable_group_checking:
        return _verdict(cfg, user, "allowed", f"{who}; {listed}; group checking disabled", groups)
    matched = sorted(g.dn for key, g in groups.items() if key in cfg.allowed_groups)
    if matched:
        return _verdict(cfg, user, "allowed", f"{who}; {listed}; allowed group matched: {', '.join(matched)}",
                        groups)
    return _verdict(cfg, user, "forbidden", f"{who}; {listed}; none is an allowed group", groups)


async def _against_directory(cfg: LdapConfig, pool: Pool, user: str, password: bytes,
                             reactor: Any) -> Verdict | _Answer:
    """The verdict (allowed, forbidden), or an _Answer (unauthorized,
    error). Raises DirectoryFault."""
    for attempt in (1, 2):
        client = await pool.acquire(cfg.connect_timeout, cfg.request_timeout)
        reusable = False
        try:
            try:
                verdict = await _decide(_Session(cfg, client, reactor), user, password)
            except _Answer as answer:
                reusable = True
                return answer
            reusable = True
            return verdict
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


def _cached(cfg: LdapConfig, cache: DecisionCache, key: tuple[str, bytes]) -> Verdict | Deny:
    """The cached verdict for ``key`` (an admission, or the 403), or _MISS."""
    verdict = cache.get(key)
    if verdict is None:
        return _MISS
    _CACHE_HIT.inc()
    if verdict.outcome == "forbidden":
        return forbidden(verdict.reason + " (cached)")
    return verdict


async def check_one(state: State, cfg: LdapConfig, ctx: RequestContext, user: str,
                    password: bytes) -> Verdict | Deny:
    cache = state.cache(cfg)
    key = (user, password_digest(password))
    hit = _cached(cfg, cache, key)
    if hit is not _MISS:
        return hit
    if cache.ttl > 0:
        CACHE.labels("miss").inc()
    reactor = state.get_reactor(ctx)
    started = time.monotonic()
    try:
        result = await _against_directory(cfg, state.pool(cfg, ctx), user, password, reactor)
    except DirectoryFault as fault:
        _log.warn("LDAP directory {target} unavailable: {reason}", target=cfg.target.describe(),
                  reason=fault.reason)
        return unavailable(f"{cfg.source}: directory {cfg.target.describe()} unavailable: {fault.reason}")
    finally:
        LATENCY.observe(time.monotonic() - started)
    if isinstance(result, Verdict):
        cache.put(key, result)
        return result if result.outcome == "allowed" else forbidden(result.reason)
    reason = f"{cfg.source}: {result.reason}"
    if result.outcome == "unauthorized":
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


#: What an ``Authorization`` value means to the decision cache: its keyed
#: BLAKE2b (never the value, which holds the password) -> (the cleaned user
#: name, the password's digest), for values :func:`credentials` accepted.
#: A deterministic function of the value, so entries never go stale; it
#: spares a cached request the Basic parsing and the second hash. Bounded
#: (clients choose the values): emptied when full.
_CREDENTIALS: dict[bytes, tuple[str, bytes]] = {}
_CREDENTIALS_MAX = 10_000


def _from_caches(compiled: CompiledExtAuth, key: tuple[str, bytes], verdicts: list[Verdict]) -> Deny | bool:
    """Append each config's cached verdict to ``verdicts``, in order. Returns
    True when every config had one, False at the first that has none (no
    cache, or a miss), or the cached 403."""
    for cfg in compiled.configs[len(verdicts):]:
        if cfg.cache_ttl <= 0:
            return False
        hit = _cached(cfg, compiled.state.cache(cfg), key)
        if hit is _MISS:
            return False
        if hit.__class__ is not Verdict:  # the cached 403
            return hit
        verdicts.append(hit)
    return True


def authenticate(ctx: RequestContext, compiled: CompiledExtAuth) -> Allow | Deny | Deferred[Allow | Deny]:
    """Decide from the decision cache when every config has an answer there
    (synchronously: no coroutine, no Deferred); otherwise ask the directory
    for the configs from the first one without a cached answer."""
    values = ctx.headers.getRawHeaders(b"authorization")
    seen = None
    verdicts: list[Verdict] = []
    if values is not None and len(values) == 1:
        seen = hashlib.blake2b(values[0], key=_SALT, digest_size=32).digest()
        known = _CREDENTIALS.get(seen)
        if known is not None:  # this value was parsed before: straight to the caches
            done = _from_caches(compiled, known, verdicts)
            if done is True:
                return _admit(ctx, compiled, known[0], verdicts, True)
            if done is not False:
                return done
            # a config without a cached answer: the password is needed (and
            # the verdicts found so far are kept, not looked up and counted twice)
    creds = credentials(ctx, compiled.configs[0].realm)
    if isinstance(creds, Deny):
        return creds
    user, password = creds
    key = (user, password_digest(password))
    if seen is not None:
        if len(_CREDENTIALS) >= _CREDENTIALS_MAX:
            _CREDENTIALS.clear()
        _CREDENTIALS[seen] = key
    done = _from_caches(compiled, key, verdicts)
    if done is True:
        return _admit(ctx, compiled, user, verdicts, True)
    if done is not False:
        return done
    return Deferred.fromCoroutine(_ask_directory(ctx, compiled, user, password, verdicts))


def dry_run(ctx: RequestContext, compiled: CompiledExtAuth) -> Deny | NotChecked:
    """``twistgw explain`` without ``--live``: refuse what is refused without
    asking the directory (no or malformed credentials); otherwise say what
    would be asked, contacting nothing."""
    creds = credentials(ctx, compiled.configs[0].realm)
    if isinstance(creds, Deny):
        return creds
    user, _ = creds
    steps = [f"{cfg.source} would {_would_ask(cfg, user)}" for cfg in compiled.configs]
    how = ("as its booleanExpr needs them: " if compiled.expression is not None else "")
    return NotChecked(how + "; then ".join(steps) + " (not contacted in a dry run; --live asks the directory)")


def _would_ask(cfg: LdapConfig, user: str) -> str:
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


async def _ask_directory(ctx: RequestContext, compiled: CompiledExtAuth, user: str, password: bytes,
                         verdicts: list[Verdict]) -> Allow | Deny:
    """Check the configs from the first one without a cached ``verdicts`` entry."""
    for cfg in compiled.configs[len(verdicts):]:
        result = await check_one(compiled.state, cfg, ctx, user, password)
        if isinstance(result, Deny):
            return result
        verdicts.append(result)
    return _admit(ctx, compiled, user, verdicts, False)


def _admit(ctx: RequestContext, compiled: CompiledExtAuth, user: str, verdicts: list[Verdict],
           cached: bool) -> Allow:
    ctx.principal = user
    ctx.state["extauth"] = {"user": user, "authConfig": compiled.auth_config}
    headers = ctx.headers
    if not compiled.keep_credentials:
        headers.removeHeader(b"authorization")
    for verdict in verdicts:
        for name, value in verdict.headers:
            if value is None:
                headers.removeHeader(name)
            else:
                headers.setRawHeaders(name, [value])
    _ALLOWED.inc()
    if len(verdicts) == 1:
        return _admission((verdicts[0].reason,), cached)
    return _admission(tuple(v.reason for v in verdicts), cached)


@functools.lru_cache(maxsize=1024)
def _admission(reasons: tuple[str, ...], cached: bool) -> Allow:
    # One Allow per set of reasons (kept with the cached verdicts), not one per request.
    # Each reason starts with its config's place: "AuthConfig ns/name: spec.configs[i].ldap: ...".
    return Allow(f"LDAP: admitted{' (cached)' if cached else ''}: " + " | ".join(reasons))
