"""The LDAP check against the directory: find the user (DN template or
``userSearch``), bind as the user, read the groups (membership attribute or
``groupSearch``), decide. One borrowed pool connection per check."""

from __future__ import annotations

import functools
import unicodedata
from typing import Any

from twisted.logger import Logger

from twistgw import sdk

from twistgw_ldap._answers import Group, Verdict, header_text
from twistgw_ldap._ber import SCOPE_BASE, SCOPE_SUB
from twistgw_ldap._client import FAULT_CODES, DirectoryFault, Pool, bind, search
from twistgw_ldap._dn import InvalidDN, first_value, parse_dn
from twistgw_ldap._metrics import operation as count_operation
from twistgw_ldap._model import GroupSearch, LdapConfig, ServiceAccount, UserSearch

_log = Logger(namespace="twistgw_ldap")

#: Result codes with a cause an operator can fix (RFC 4511 appendix A).
OPERATIONS_ERROR = 1
STRONG_AUTH_REQUIRED = 8
_STRONG_AUTH = (" the directory accepts credentials only on a protected connection: use an ldaps:// address"
                " or startTLS: true")


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


class Answer(Exception):
    """Ends a check early with an outcome that is not a directory fault."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


class _Session:
    """One check's operations on one borrowed connection."""

    def __init__(self, cfg: LdapConfig, client: Any, reactor: Any, tracer: sdk.Tracer = sdk.NO_TRACER) -> None:
        self.cfg = cfg
        self.client = client
        self.reactor = reactor
        #: the request's tracer: each bind and search is a child span
        self.tracer = tracer
        #: bound anonymously (for a user search without a service account)
        self.anonymous = False

    async def bind(self, dn: str, password: bytes, operation: str) -> int:
        # the span names the operation and the server, never the DN's password
        span = self.tracer.child("ldap.bind", **{"ldap.operation": operation, "server.address":
                                                 self.cfg.target.describe()})
        try:
            code = await bind(self.client, dn, password, self.cfg.request_timeout, self.reactor)
        except BaseException as exc:
            span.end(error=exc)
            raise
        span.set("ldap.result_code", code)
        span.end(error=f"result code {code}" if code in FAULT_CODES else None)
        count_operation(operation, code).inc()
        if code in FAULT_CODES:
            raise DirectoryFault(f"{operation}: directory answered result code {code}")
        return code

    async def bind_account(self, account: ServiceAccount | None, purpose: str) -> None:
        """Bind as ``account``, or anonymously when None; a refusal is a 500."""
        if account is None:
            code = await self.bind("", b"", "bind_anonymous")
            if code != 0:
                raise Answer("error", f"anonymous bind for the {purpose} refused (result code {code});"
                                      + (_STRONG_AUTH if code == STRONG_AUTH_REQUIRED else
                                         " give userSearch.credentialsSecretRef a service account"))
            self.anonymous = True
            return
        code = await self.bind(account.dn, account.password, "bind_service")
        if code != 0:
            raise Answer("error", f"service account {account.dn} (Secret {account.secret}) could not bind"
                                  f" for the {purpose} (result code {code});"
                                  + (_STRONG_AUTH if code == STRONG_AUTH_REQUIRED else " fix the credentials Secret"))
        self.anonymous = False

    async def search(self, base: str, filter_ber: bytes, attributes: list[str], scope: int,
                     size_limit: int, what: str) -> tuple[int, list[Any]]:
        span = self.tracer.child("ldap.search", **{"ldap.operation": what, "server.address":
                                                   self.cfg.target.describe()})
        try:
            code, entries = await search(self.client, base, filter_ber, attributes, self.cfg.request_timeout,
                                         self.reactor, scope=scope, size_limit=size_limit)
        except BaseException as exc:
            span.end(error=exc)
            raise
        span.set("ldap.result_code", code)
        span.set("ldap.entries", len(entries))
        span.end(error=f"result code {code}" if code in FAULT_CODES else None)
        count_operation("search", code).inc()
        if code == OPERATIONS_ERROR and self.anonymous:
            raise Answer("error", f"{what}: the directory refused the anonymous search (result code 1,"
                                  " operationsError; Active Directory refuses anonymous searches): give"
                                  " userSearch.credentialsSecretRef a service account to search with")
        if code == STRONG_AUTH_REQUIRED:
            raise Answer("error", f"{what}: result code 8 (strongAuthRequired);{_STRONG_AUTH}")
        if code in FAULT_CODES:
            raise DirectoryFault(f"{what}: directory answered result code {code}")
        return code, entries


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _values(entry: Any, attribute: str) -> list[str]:
    wanted = attribute.lower()
    return [_text(v) for atype, values in entry.attributes if _text(atype).lower() == wanted for v in values]


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def canonical_name(entry: Any, us: UserSearch, typed: str) -> str | None:
    """The user's name as the directory writes it: the value of the first
    of ``us.username_attributes`` the entry has (of several values, the one
    that matches what was typed, compared as the directory would: case and
    compatibility forms folded), or None."""
    for attribute in us.username_attributes:
        values = [v for v in _values(entry, attribute) if v.strip()]
        if len(values) == 1:
            return values[0]
        if values:
            wanted = _fold(typed)
            return next((v for v in values if _fold(v) == wanted), sorted(values)[0])
    return None


async def _find_user(s: _Session, us: UserSearch, user: str) -> tuple[str, str]:
    """The DN and the canonical name of the one entry ``userSearch`` finds
    for ``user``."""
    await s.bind_account(us.account, "user search")
    code, entries = await s.search(us.base, us.filter.encode(user), list(us.username_attributes), us.scope, 2,
                                   "user search")
    where = us.describe(user)
    if code == 32:
        raise Answer("error", f"{where}: the base DN does not exist (or is hidden from the searching account)")
    if code == 4 or len(entries) > 1:
        _log.warn("LDAP directory problem: several entries match {search}; refusing (401) rather than"
                  " guessing. Make the filter or base unique per user.", search=where)
        raise Answer("unauthorized", f"several entries match {where} (ambiguous: a directory problem)")
    if code != 0:
        raise Answer("error", f"{where} failed with result code {code}")
    if not entries:
        raise Answer("unauthorized", f"no entry matches {where}")
    dn = _text(entries[0].objectName)
    if not dn.strip() or _parse_value(dn) is None:
        raise Answer("error", f"{where} returned an unusable DN {dn!r}")
    name = canonical_name(entries[0], us, user)
    if name is None:
        raise Answer("error", f"{where}: the entry {dn} has no {' or '.join(us.username_attributes)} to name"
                              " the user by; set userSearch.usernameAttribute to the attribute holding it")
    return dn, name


async def _membership(s: _Session, user_dn: str) -> dict[Any, Group]:
    """Groups from the membership attribute of the user's own entry."""
    cfg = s.cfg
    if cfg.service_account is not None:
        await s.bind_account(cfg.service_account, "group lookup")
    code, entries = await s.search(user_dn, cfg.filter_ber, [cfg.membership_attribute], SCOPE_BASE, 2, "search")
    if code == 32 or (code == 0 and not entries):
        # the user's own bind succeeded: the filter, not the password, refused the entry
        raise Answer("unauthorized", f"{user_dn} not found with filter {cfg.search_filter} (searchFilter: the"
                                     " user's own entry must match it)")
    if code != 0:
        raise Answer("error", f"search of {user_dn} failed with result code {code}")
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
                raise Answer("error", f"groupSearch.baseDn {gs.base} does not exist (or is hidden)")
            if code == 4:
                raise Answer("error", f"more than {MAX_GROUPS} groups match {gs.filter.show(batch[0])}")
            if code != 0:
                raise Answer("error", f"group search under {gs.base} failed with result code {code}")
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
            raise Answer("error", f"{user_dn} is in more than {MAX_GROUPS} groups")
        frontier, level = found, level + 1
    return groups


def _describe_groups(groups: dict[Any, Group]) -> str:
    shown = sorted(groups.values(), key=lambda g: (g.level, g.dn.lower()))
    parts = [g.dn + (f" (nested, level {g.level})" if g.level > 1 else "") for g in shown[:_REASON_GROUPS]]
    if len(shown) > _REASON_GROUPS:
        parts.append(f"... {len(shown) - _REASON_GROUPS} more")
    return ", ".join(parts) or "none"


def make_verdict(cfg: LdapConfig, user: str, outcome: str, reason: str, groups: dict[Any, Group]) -> Verdict:
    names = tuple(sorted({g.name for g in groups.values()}))
    headers: list[tuple[bytes, bytes | None]] = []
    if cfg.groups_header:
        headers.append((cfg.groups_header, b",".join(header_text(n) for n in names) or None))
    if cfg.user_header:
        headers.append((cfg.user_header, header_text(user)))
    return Verdict(outcome, f"{cfg.source}: {reason}", user, names, tuple(headers))


async def _decide(s: _Session, typed: str, password: bytes) -> Verdict:
    """Find the user's DN, bind as it, read the groups, decide. Raises
    Answer for outcomes other than allowed/forbidden, DirectoryFault."""
    cfg = s.cfg
    if cfg.user_search is None:
        user, user_dn, how = typed, cfg.user_dn(typed), "from userDnTemplate"
    else:
        user_dn, user = await _find_user(s, cfg.user_search, typed)
        how = "found by " + cfg.user_search.describe(typed)
    code = await s.bind(user_dn, password, "bind_user")
    if code == STRONG_AUTH_REQUIRED:
        raise Answer("error", f"bind as {user_dn}: result code 8 (strongAuthRequired);{_STRONG_AUTH}")
    if code != 0:
        raise Answer("unauthorized", f"bind as {user_dn} failed (result code {code})")
    who = f"{user} is {user_dn} ({how})"
    if cfg.disable_group_checking and not cfg.groups_header:
        return make_verdict(cfg, user, "allowed", f"bind as {user_dn} succeeded ({how}); group checking disabled", {})
    if cfg.group_search is None:
        groups = await _membership(s, user_dn)
        source = f"from {cfg.membership_attribute}"
    else:
        groups = await _search_groups(s, cfg.group_search, user_dn)
        source = "by groupSearch" + (" (nested)" if cfg.group_search.nested else "")
    listed = f"groups {source}: {_describe_groups(groups)}"
    if cfg.disable_group_checking:
        return make_verdict(cfg, user, "allowed", f"{who}; {listed}; group checking disabled", groups)
    matched = sorted(g.dn for key, g in groups.items() if key in cfg.allowed_groups)
    if matched:
        return make_verdict(cfg, user, "allowed", f"{who}; {listed}; allowed group matched: {', '.join(matched)}",
                        groups)
    return make_verdict(cfg, user, "forbidden", f"{who}; {listed}; none is an allowed group", groups)


async def against_directory(cfg: LdapConfig, pool: Pool, user: str, password: bytes,
                             reactor: Any, tracer: sdk.Tracer = sdk.NO_TRACER) -> Verdict | Answer:
    """The verdict (allowed, forbidden), or an Answer (unauthorized,
    error). Raises DirectoryFault."""
    for attempt in (1, 2):
        client = await pool.acquire(cfg.connect_timeout, cfg.request_timeout)
        reusable = False
        try:
            try:
                verdict = await _decide(_Session(cfg, client, reactor, tracer), user, password)
            except Answer as answer:
                reusable = True
                return answer
            reusable = True
            return verdict
        except DirectoryFault as fault:
            reusable = False
            if attempt == 1 and fault.connection_lost and client.reused:
                _log.debug("Pooled connection to {target} was closed; retrying on a new one",
                           target=cfg.target.describe())
                pool.drop_idle()
                continue
            raise
        finally:
            pool.release(client, reusable)
    raise AssertionError("unreachable")
