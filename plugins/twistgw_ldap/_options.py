"""Validating and compiling ``options.extauth`` and the AuthConfig it names.

Pure: reads files named in the options (CA certificates) but does no network
I/O and never touches the reactor. The result is immutable.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from typing import Any, Iterator, Mapping
from urllib.parse import urlsplit

import attrs
from ldaptor import ldapfilter
from twistgw.options import Problems, is_token, parse_duration, type_name, unknown_field
from twistgw import OptionsError, OptionsScope

from twistgw_ldap._ber import SCOPE_ONE, SCOPE_SUB
from twistgw_ldap._dn import InvalidDN, NormalDN, format_dn, parse_dn
from twistgw_ldap._filter import SearchFilter, compile_filter

DEFAULT_SEARCH_FILTER = "(uid=*)"
DEFAULT_MEMBERSHIP_ATTRIBUTE = "memberOf"
DEFAULT_POOL_MAX = 5
DEFAULT_POOL_INITIAL = 2
DEFAULT_CONNECT_TIMEOUT = 2.0
DEFAULT_REQUEST_TIMEOUT = 3.0
DEFAULT_CACHE_TTL = 60.0
DEFAULT_REALM = "twistgw"
DEFAULT_GROUP_FILTER = "(member=%s)"
DEFAULT_NAME_ATTRIBUTE = "cn"
DEFAULT_MAX_DEPTH = 8
SECRET_TYPE = "extauth.vendor.io/accountcredentials"

_LDAP_FIELDS = {
    "address", "userDnTemplate", "userSearch", "membershipAttributeName", "allowedGroups",
    "searchFilter", "disableGroupChecking", "groupLookupSettings", "groupSearch", "groupsHeader",
    "userHeader", "keepCredentials", "pool", "startTLS", "tls", "connectTimeout", "requestTimeout",
    "cacheTtl", "realm",
}
_SCOPES = {"one": SCOPE_ONE, "sub": SCOPE_SUB}
#: RFC 9110 token characters (a header field name)
#: Headers the gateway or HTTP itself owns: never a place for the user or groups.
_RESERVED_HEADERS = frozenset({
    "authorization", "proxy-authorization", "host", "content-length", "transfer-encoding",
    "connection", "keep-alive", "te", "trailer", "upgrade", "proxy-connection", "expect", "cookie",
    "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "forwarded", "x-real-ip",
})
_ATTRIBUTE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")


@attrs.frozen
class Target:
    """Where and how to connect; the key of a connection pool."""

    host: str
    port: int
    scheme: str  # "ldap" or "ldaps"
    start_tls: bool = False
    ca_pem: bytes | None = None  # None: the platform's trust store
    server_name: str = ""  # the name the certificate must carry
    insecure_skip_verify: bool = False

    def describe(self) -> str:
        tls = " (StartTLS)" if self.start_tls else ""
        return f"{self.scheme}://{self.host}:{self.port}{tls}"


@attrs.frozen
class ServiceAccount:
    dn: str
    password: bytes = attrs.field(repr=False)
    secret: str  # namespace/name, for messages


@attrs.frozen
class UserSearch:
    """``userSearch``: find the user's entry instead of computing its DN."""

    base: str
    filter: SearchFilter
    scope: int  # _ber.SCOPE_ONE or SCOPE_SUB
    account: ServiceAccount | None  # None: search anonymously

    def describe(self, user: str) -> str:
        scope = "one" if self.scope == SCOPE_ONE else "sub"
        return f"userSearch {self.filter.show(user)} under {self.base} (scope {scope})"


@attrs.frozen
class GroupSearch:
    """``groupSearch``: the user's groups are the entries that list them."""

    base: str
    filter: SearchFilter
    name_attribute: str
    nested: bool
    max_depth: int


@attrs.frozen(cache_hash=True)
class LdapConfig:
    """One ``spec.configs[i].ldap`` entry, validated. Hashable: equal configs
    share a decision cache across routes and reloads (the hash, over every
    field, is computed once: the cache is looked up on every request)."""

    source: str  # "AuthConfig ns/name configs[i]"
    target: Target
    user_dn_template: str  # "" with user_search
    membership_attribute: str
    allowed_groups: frozenset[NormalDN]
    search_filter: str
    disable_group_checking: bool
    service_account: ServiceAccount | None
    pool_max: int
    pool_initial: int
    connect_timeout: float
    request_timeout: float
    cache_ttl: float
    realm: str
    user_search: UserSearch | None = None
    group_search: GroupSearch | None = None
    groups_header: bytes = b""  # b"": not sent
    user_header: bytes = b""
    keep_credentials: bool = False
    filter_object: Any = attrs.field(eq=False, repr=False, default=None)
    #: the filter's BER encoding, computed once
    filter_ber: bytes = attrs.field(init=False, eq=False, repr=False)

    @filter_ber.default
    def _encode_filter(self) -> bytes:
        return self.filter_object.toWire() if self.filter_object is not None else b""

    def user_dn(self, cleaned_name: str) -> str:
        return self.user_dn_template.replace("%s", cleaned_name)


@attrs.frozen
class CompiledExtAuth:
    """What ``twistgw_compile_options`` returns for ``extauth``."""

    auth_config: str  # namespace/name
    configs: tuple[LdapConfig, ...]
    #: the Authorization header is forwarded only when every config keeps it
    keep_credentials: bool = attrs.field(init=False)
    #: the parsed booleanExpr (``_expr.Node``); None: every config must admit, in order
    expression: Any = None
    #: Settings spec.extauth's requestTimeout/failureModeAllow/statusOnError
    #: (a ``_settings.ErrorPolicy``; None: SPEC's statuses, no overall bound)
    on_error: Any = None
    #: the plugin instance's pools and caches (``_flow.State``)
    state: Any = attrs.field(default=None, eq=False, repr=False)

    @keep_credentials.default
    def _keep(self) -> bool:
        return all(c.keep_credentials for c in self.configs)

    @property
    def owned_request_headers(self) -> frozenset[bytes]:
        """Every config's ``groupsHeader`` and ``userHeader``: the gateway
        removes a client's copies from every request (twistgw.OwnsRequestHeaders),
        on routes where this check is off too."""
        return frozenset(h for c in self.configs for h in (c.groups_header, c.user_header) if h)


# ---------------------------------------------------------------------------


_type_name = type_name


class _Checker:
    """Makes OptionsErrors located in the AuthConfig itself (its file, line
    and field, e.g. ``spec.configs[0].ldap.address``), and collects them in a
    :class:`twistgw.options.Problems`: each ``with c.checking():`` block
    records its first problem and the next block still runs, so
    ``twistgw check`` lists (and counts) every problem of an AuthConfig."""

    def __init__(self, resource: tuple[str, str, str], base: tuple[str | int, ...] = ()) -> None:
        self.resource = resource
        self.base = base
        self.problems = Problems()
        self.checking = self.problems.check

    def raise_problems(self) -> None:
        """One OptionsError carrying everything recorded."""
        self.problems.raise_if_any()

    def fail(self, field: str | tuple[str | int, ...], reason: str) -> OptionsError:
        """The problem at ``field`` below this checker's base (``"pool.maxSize"``,
        ``"allowedGroups[0]"``, or a path tuple)."""
        return OptionsError(self.base + (_field_path(field) if isinstance(field, str) else field), reason,
                            self.resource)

    def record(self, field: str | tuple[str | int, ...], reason: str) -> None:
        self.problems.errors.append(self.fail(field, reason))

    def mapping(self, value: Any, field: str, allowed: set[str]) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(field, f"must be a mapping, got {_type_name(value)}")
        unknown = [self.fail(_field_path(field) + (str(key),), unknown_field(key, sorted(allowed)))
                   for key in value if key not in allowed]
        if unknown:
            raise OptionsError.several(unknown)
        return value

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str):
            raise self.fail(field, f"must be a string, got {_type_name(value)}")
        if not value.strip():
            raise self.fail(field, "must not be empty")
        return value

    def boolean(self, value: Any, field: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(field, f"must be true or false, got {value!r}")
        return value

    def integer(self, value: Any, field: str, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(field, f"must be an integer, got {_type_name(value)}")
        if not lo <= value <= hi:
            raise self.fail(field, f"must be between {lo} and {hi}, got {value}")
        return value

    def duration(self, value: Any, field: str, lo: float, hi: float) -> float:
        seconds = parse_duration(value)
        if seconds is None:
            raise self.fail(field, f"must be a duration such as '3s' or '500ms', got {value!r}")
        if not lo <= seconds <= hi:
            raise self.fail(field, f"must be between {lo:g}s and {hi:g}s, got {seconds:g}s")
        return seconds


def _field_path(field: str) -> tuple[str | int, ...]:
    """``"allowedGroups[0]"`` → ``("allowedGroups", 0)``; ``"pool.maxSize"`` → ``("pool", "maxSize")``."""
    out: list[str | int] = []
    for part in field.split(".") if field else ():
        name, *indexes = part.split("[")
        if name:
            out.append(name)
        out.extend(int(i.rstrip("]")) for i in indexes)
    return tuple(out)


def parse_address(value: str) -> tuple[str, str, int]:
    """``ldap://h:p``, ``ldaps://h[:p]``, ``h:p`` or ``h`` → (scheme, host, port).

    :raise ValueError: with a reason.
    """
    text = value.strip()
    if "://" not in text:
        text = "ldap://" + text
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in ("ldap", "ldaps"):
        raise ValueError(f"scheme must be ldap:// or ldaps://, got {parts.scheme!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("give only scheme, host and port (no DN, query or credentials)")
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"invalid port: {exc}") from None
    if not host:
        raise ValueError("has no host")
    return scheme, host, port or (636 if scheme == "ldaps" else 389)


def _check_template(c: _Checker, template: str) -> None:
    field = "userDnTemplate"
    if template.count("%s") != 1:
        raise c.fail(field, f"must contain exactly one %s (the user name), got {template!r}")
    try:
        dn = parse_dn(template)
    except InvalidDN as exc:
        raise c.fail(field, f"is not a valid DN: {exc}") from None
    if not dn:
        raise c.fail(field, "must not be empty")
    # %s must sit inside an attribute value, never in a type or as a whole RDN.
    for rdn in dn:
        for atype, _value in rdn:
            if "%s" in atype:
                raise c.fail(field, "the %s must be inside an attribute value, e.g. uid=%s,ou=people,dc=example,dc=org")
    if not any("%s" in v for rdn in dn for _, v in rdn):
        raise c.fail(field, "the %s must be inside an attribute value, e.g. uid=%s,ou=people,dc=example,dc=org")


def _read_ca(c: _Checker, tls: Mapping[str, Any], config_dir: str) -> bytes | None:
    if "caFile" in tls and "caPem" in tls:
        raise c.fail("tls", "set caFile or caPem, not both")
    if "caPem" in tls:
        pem = c.string(tls["caPem"], "tls.caPem").encode("ascii", "replace")
    elif "caFile" in tls:
        path = c.string(tls["caFile"], "tls.caFile")
        if not os.path.isabs(path):
            path = os.path.join(config_dir or os.getcwd(), path)
        try:
            with open(path, "rb") as f:
                pem = f.read()
        except OSError as exc:
            raise c.fail("tls.caFile", f"cannot read {path}: {exc.strerror}") from None
    else:
        return None
    from twisted.internet import ssl

    try:
        found = [ssl.Certificate.loadPEM(block + b"-----END CERTIFICATE-----\n")
                 for block in pem.split(b"-----END CERTIFICATE-----") if b"-----BEGIN CERTIFICATE-----" in block]
    except Exception as exc:
        raise c.fail("tls", f"CA certificates are not valid PEM: {exc}") from None
    if not found:
        raise c.fail("tls", "no PEM certificate (-----BEGIN CERTIFICATE-----) found")
    return pem


def compile_ldap(raw: Any, where: str, default_ns: str, scope: OptionsScope,
                 resource: tuple[str, str, str] = ("AuthConfig", "", ""),
                 path: tuple[str | int, ...] = ()) -> LdapConfig:
    """Validate one ``configs[i].ldap`` entry.

    :param where: ``AuthConfig ns/name: spec.configs[i].ldap``, for reasons.
    :param resource: the AuthConfig as ``(kind, namespace, name)``, and
    :param path: the entry's path in it (``("spec", "configs", i, "ldap")``),
        where each problem is located.
    :raise OptionsError: listing every problem found in the entry.
    """
    c = _Checker(resource, path)
    with c.checking():  # unknown fields are reported, and the known ones still checked
        c.mapping(raw, "", _LDAP_FIELDS)
    if not isinstance(raw, dict):
        c.raise_problems()
    spec = {k: v for k, v in raw.items() if k in _LDAP_FIELDS}
    target: Target | None = None
    with c.checking():
        target = _target(c, spec, scope)

    template, user_search = "", None
    with c.checking():
        if ("userDnTemplate" in spec) == ("userSearch" in spec):
            raise c.fail("userDnTemplate", "set exactly one of userDnTemplate (e.g."
                         " uid=%s,ou=people,dc=example,dc=org) and userSearch"
                         if "userSearch" in spec else
                         "is required (e.g. uid=%s,ou=people,dc=example,dc=org), or set userSearch instead")
        if "userDnTemplate" in spec:
            template = c.string(spec["userDnTemplate"], "userDnTemplate").strip()
            _check_template(c, template)
    if "userSearch" in spec and "userDnTemplate" not in spec:
        user_search = _user_search(c, spec["userSearch"], default_ns, scope)

    disable = False
    with c.checking():
        disable = c.boolean(spec.get("disableGroupChecking", False), "disableGroupChecking")
    groups: set[NormalDN] = set()
    with c.checking():
        groups = _allowed_groups(c, spec.get("allowedGroups", []), disable)

    group_search = None
    if "groupSearch" in spec:
        group_search = _group_search(c, spec["groupSearch"])
        for field in ("membershipAttributeName", "searchFilter"):
            if field in spec:
                c.record(field, "applies only to the membership-attribute lookup; with"
                         " groupSearch the groups come from the search (remove it)")

    attribute = DEFAULT_MEMBERSHIP_ATTRIBUTE
    with c.checking():
        attribute = c.string(spec.get("membershipAttributeName", DEFAULT_MEMBERSHIP_ATTRIBUTE),
                             "membershipAttributeName").strip()
        if not _ATTRIBUTE.match(attribute):
            raise c.fail("membershipAttributeName", f"is not an attribute name: {attribute!r}")

    filter_text, filter_object = DEFAULT_SEARCH_FILTER, None
    with c.checking():
        filter_text = c.string(spec.get("searchFilter", DEFAULT_SEARCH_FILTER), "searchFilter").strip()
        if not (filter_text.startswith("(") and filter_text.endswith(")")):
            raise c.fail("searchFilter", f"must be an LDAP filter in parentheses, e.g. (objectClass=*);"
                         f" got {filter_text!r}")
        try:
            filter_object = ldapfilter.parseFilter(filter_text)
        except Exception as exc:
            raise c.fail("searchFilter", f"is not a valid LDAP filter (RFC 4515): {filter_text!r}"
                         f" ({type(exc).__name__})") from None

    account = None
    with c.checking():
        gls = c.mapping(spec.get("groupLookupSettings", {}), "groupLookupSettings",
                        {"checkGroupsWithServiceAccount", "credentialsSecretRef"})
        use_sa = c.boolean(gls.get("checkGroupsWithServiceAccount", False),
                           "groupLookupSettings.checkGroupsWithServiceAccount")
        if "credentialsSecretRef" in gls:
            account = _service_account(c, gls["credentialsSecretRef"], default_ns, scope,
                                       "groupLookupSettings.credentialsSecretRef")
        if use_sa and account is None:
            raise c.fail("groupLookupSettings.credentialsSecretRef",
                         "is required when checkGroupsWithServiceAccount is true")
        if not use_sa and account is not None:
            raise c.fail("groupLookupSettings.credentialsSecretRef",
                         "is used only with checkGroupsWithServiceAccount: true (the groups are otherwise"
                         " looked up as the user); set that, or remove the reference")

    groups_header, user_header = b"", b""
    with c.checking():
        groups_header = _header_name(c, spec, "groupsHeader")
    with c.checking():
        user_header = _header_name(c, spec, "userHeader")
        if user_header and user_header == groups_header:
            raise c.fail("userHeader", "must differ from groupsHeader")
    if disable and group_search is not None and not groups_header:
        c.record("groupSearch", "is never used: disableGroupChecking is true and no"
                 " groupsHeader asks for the groups (remove one of them)")
    keep = False
    with c.checking():
        keep = c.boolean(spec.get("keepCredentials", False), "keepCredentials")

    pool_max, pool_initial = DEFAULT_POOL_MAX, DEFAULT_POOL_INITIAL
    with c.checking():
        pool = c.mapping(spec.get("pool", {}), "pool", {"maxSize", "initialSize"})
        pool_max = c.integer(pool.get("maxSize", DEFAULT_POOL_MAX), "pool.maxSize", 1, 1000)
        pool_initial = c.integer(pool.get("initialSize", min(DEFAULT_POOL_INITIAL, pool_max)),
                                 "pool.initialSize", 0, pool_max)

    timeouts = {"connectTimeout": DEFAULT_CONNECT_TIMEOUT, "requestTimeout": DEFAULT_REQUEST_TIMEOUT,
                "cacheTtl": DEFAULT_CACHE_TTL}
    for field, default in timeouts.items():
        with c.checking():
            timeouts[field] = c.duration(spec.get(field, default), field, 0 if field == "cacheTtl" else 0.01,
                                         3600 if field == "cacheTtl" else 60)
    realm = DEFAULT_REALM
    with c.checking():
        realm = c.string(spec.get("realm", DEFAULT_REALM), "realm")
        if any(ch in realm for ch in '"\\') or not realm.isprintable():
            raise c.fail("realm", "must be printable and contain no quote or backslash")

    c.raise_problems()
    assert target is not None
    return LdapConfig(
        where, target, template, attribute, frozenset(groups), filter_text, disable, account,
        pool_max, pool_initial, timeouts["connectTimeout"], timeouts["requestTimeout"], timeouts["cacheTtl"],
        realm, user_search, group_search, groups_header, user_header, keep, filter_object,
    )


def _target(c: _Checker, spec: Mapping[str, Any], scope: OptionsScope) -> Target:
    if "address" not in spec:
        raise c.fail("address", "is required (e.g. ldap://ldap.example.org:389)")
    address = c.string(spec["address"], "address")
    try:
        scheme, host, port = parse_address(address)
    except ValueError as exc:
        raise c.fail("address", f"{exc} (got {address!r})") from None
    start_tls = c.boolean(spec.get("startTLS", False), "startTLS")
    if start_tls and scheme == "ldaps":
        raise c.fail("startTLS", "ldaps:// is already TLS; use startTLS only with ldap://")
    tls = c.mapping(spec.get("tls", {}), "tls", {"caFile", "caPem", "serverName", "insecureSkipVerify"})
    if tls and scheme != "ldaps" and not start_tls:
        raise c.fail("tls", "TLS settings need an ldaps:// address or startTLS: true")
    ca_pem = _read_ca(c, tls, scope.resources.config_dir)
    server_name = c.string(tls["serverName"], "tls.serverName") if "serverName" in tls else ""
    insecure = c.boolean(tls.get("insecureSkipVerify", False), "tls.insecureSkipVerify")
    if insecure and ca_pem is not None:
        raise c.fail("tls.insecureSkipVerify", "makes the CA setting pointless; choose one")
    return Target(host, port, scheme, start_tls, ca_pem, server_name, insecure)


def _allowed_groups(c: _Checker, groups_raw: Any, disable: bool) -> set[NormalDN]:
    if not isinstance(groups_raw, list):
        raise c.fail("allowedGroups", f"must be a list of group DNs, got {_type_name(groups_raw)}")
    parsed = []
    for i, g in enumerate(groups_raw):
        text = c.string(g, f"allowedGroups[{i}]")
        try:
            parsed.append(parse_dn(text))
        except InvalidDN as exc:
            raise c.fail(f"allowedGroups[{i}]", f"is not a valid DN: {exc}") from None
    groups = set(_rejoin_flow_split(c, parsed))
    if not groups and not disable:
        raise c.fail("allowedGroups", "must list at least one group DN, or set"
                     " disableGroupChecking: true to admit every user whose bind succeeds")
    return groups


def _base_dn(c: _Checker, spec: Mapping[str, Any], field: str, what: str) -> str:
    """The required ``baseDn`` of ``spec`` (at ``field``), a valid DN."""
    if "baseDn" not in spec:
        raise c.fail(field, f"is required: {what}")
    text = c.string(spec["baseDn"], field).strip()
    try:
        if not parse_dn(text):
            raise InvalidDN("empty")
    except InvalidDN as exc:
        raise c.fail(field, f"is not a valid DN: {exc}") from None
    return text


def _search_filter(c: _Checker, value: Any, field: str) -> SearchFilter:
    text = c.string(value, field)
    try:
        return compile_filter(text)
    except ValueError as exc:
        raise c.fail(field, str(exc)) from None


def _user_search(c: _Checker, raw: Any, default_ns: str, scope: OptionsScope) -> UserSearch | None:
    """``userSearch``; None (with the problems recorded) when invalid."""
    spec: Mapping[str, Any] = {}
    with c.checking():
        spec = c.mapping(raw, "userSearch", {"baseDn", "filter", "scope", "credentialsSecretRef"})
    found: dict[str, Any] = {}
    with c.checking():
        found["base"] = _base_dn(c, spec, "userSearch.baseDn", "where users are searched (e.g. dc=example,dc=org)")
    with c.checking():
        if "filter" not in spec:
            raise c.fail("userSearch.filter", "is required, with one %s for the user name (e.g. (uid=%s),"
                         " or (sAMAccountName=%s) for Active Directory)")
        found["filter"] = _search_filter(c, spec["filter"], "userSearch.filter")
    with c.checking():
        name = spec.get("scope", "sub")
        if name not in _SCOPES:
            raise c.fail("userSearch.scope", f"must be one (the base's children) or sub (the whole"
                         f" subtree), got {name!r}")
        found["scope"] = _SCOPES[name]
    found["account"] = None
    with c.checking():
        if "credentialsSecretRef" in spec:
            found["account"] = _service_account(c, spec["credentialsSecretRef"], default_ns, scope,
                                                "userSearch.credentialsSecretRef")
    if len(found) != 4:
        return None
    return UserSearch(found["base"], found["filter"], found["scope"], found["account"])


def _group_search(c: _Checker, raw: Any) -> GroupSearch | None:
    """``groupSearch``; None (with the problems recorded) when invalid."""
    spec: Mapping[str, Any] = {}
    with c.checking():
        spec = c.mapping(raw, "groupSearch", {"baseDn", "filter", "nameAttribute", "nested", "maxDepth"})
    found: dict[str, Any] = {}
    with c.checking():
        found["base"] = _base_dn(c, spec, "groupSearch.baseDn",
                                 "where groups are searched (e.g. ou=groups,dc=example,dc=org)")
    with c.checking():
        found["filter"] = _search_filter(c, spec.get("filter", DEFAULT_GROUP_FILTER), "groupSearch.filter")
    with c.checking():
        name = c.string(spec.get("nameAttribute", DEFAULT_NAME_ATTRIBUTE), "groupSearch.nameAttribute").strip()
        if not _ATTRIBUTE.match(name):
            raise c.fail("groupSearch.nameAttribute", f"is not an attribute name: {name!r}")
        found["name"] = name
    with c.checking():
        found["nested"] = c.boolean(spec.get("nested", False), "groupSearch.nested")
        if "maxDepth" in spec and not found["nested"]:
            raise c.fail("groupSearch.maxDepth", "applies only with nested: true")
    with c.checking():
        found["depth"] = c.integer(spec.get("maxDepth", DEFAULT_MAX_DEPTH), "groupSearch.maxDepth", 1, 64)
    if len(found) != 5:
        return None
    return GroupSearch(found["base"], found["filter"], found["name"], found["nested"], found["depth"])


def _header_name(c: _Checker, spec: Mapping[str, Any], field: str) -> bytes:
    if field not in spec:
        return b""
    name = c.string(spec[field], field).strip()
    if not is_token(name):
        raise c.fail(field, f"is not an HTTP header name: {name!r}")
    if name.lower() in _RESERVED_HEADERS:
        raise c.fail(field, f"{name!r} is a header HTTP or the gateway itself uses; pick another"
                     " (e.g. X-Auth-Groups)")
    return name.lower().encode("ascii")


_SUFFIX_TYPES = frozenset({"dc", "o", "c", "l", "st"})
_QUOTE_HINT = ("in a YAML flow list [a,b] every comma separates items, so an unquoted DN is cut"
               " into pieces; quote each DN (allowedGroups: [\"cn=managers,ou=groups,dc=example,dc=org\"])"
               " or use a block list (- cn=managers,ou=groups,dc=example,dc=org)")


def _rejoin_flow_split(c: _Checker, groups: list[NormalDN]) -> list[NormalDN]:
    """Undo YAML's split of ``allowedGroups: [cn=managers,ou=groups,dc=example,dc=org]``.

    SPEC.md writes the list that way; YAML reads it as four one-RDN items.
    When *every* item has a single RDN and they join into one plausible DN
    (nothing after its dc/o/c suffix), they are read as that one DN. Mixed
    or ambiguous lists are refused with a hint to quote.
    """
    if len(groups) < 2 or any(len(g) != 1 for g in groups):
        for i, g in enumerate(groups):
            if len(g) == 1 and len(groups) > 1:
                raise c.fail(f"allowedGroups[{i}]", f"{format_dn(g)!r} is a single RDN, not a group DN; {_QUOTE_HINT}")
        return groups
    joined: NormalDN = tuple(rdn for g in groups for rdn in g)
    seen_suffix = False
    for rdn in joined:
        is_suffix = all(t in _SUFFIX_TYPES for t, _ in rdn)
        if seen_suffix and not is_suffix:
            raise c.fail("allowedGroups", f"looks like several unquoted DNs run together; {_QUOTE_HINT}")
        seen_suffix = seen_suffix or is_suffix
    return [joined]


def _service_account(c: _Checker, ref: Any, default_ns: str, scope: OptionsScope, field: str) -> ServiceAccount:
    ref = c.mapping(ref, field, {"name", "namespace"})
    if "name" not in ref:
        raise c.fail(f"{field}.name", "is required")
    name = c.string(ref["name"], f"{field}.name")
    ns = c.string(ref.get("namespace", default_ns), f"{field}.namespace")
    try:
        secret = scope.resources.secret(name, ns)
    except KeyError as exc:
        raise c.fail(field, f"dangling reference: {exc.args[0]}") from None
    where = f"Secret {ns}/{name}"
    for key in ("username", "password"):
        if not secret.data.get(key):
            raise c.fail(field, f"{where} has no non-empty data.{key} (create it with"
                         " `twistgw create secret authcredentials`)")
    try:
        username = secret.data["username"].decode("utf-8")
        parse_dn(username)
    except (UnicodeDecodeError, InvalidDN):
        raise c.fail(field, f"{where}: data.username must be the service account's DN"
                     " (e.g. cn=admin,dc=example,dc=org)") from None
    return ServiceAccount(username.strip(), secret.data["password"], f"{ns}/{name}")


def compile_options(options: Mapping[str, Any], scope: OptionsScope) -> CompiledExtAuth:
    """The body of ``twistgw_compile_options`` for ``extauth``."""
    unknown = [OptionsError((key,), unknown_field(key, ("configRef", "disable")))
               for key in options if key != "configRef"]
    if unknown:
        raise OptionsError.several(unknown)
    if "configRef" not in options:
        raise OptionsError(("configRef",), "is required: {configRef: {name: NAME, namespace: NS}}")
    ref = options["configRef"]
    if not isinstance(ref, dict):
        raise OptionsError(("configRef",), f"must be a mapping {{name, namespace}}, got {_type_name(ref)}")
    unknown = [OptionsError(("configRef", key), unknown_field(key, ("name", "namespace")))
               for key in ref if key not in ("name", "namespace")]
    if unknown:
        raise OptionsError.several(unknown)
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        raise OptionsError(("configRef", "name"), "is required: the name of an AuthConfig")
    ns = ref.get("namespace", scope.namespace)
    if not isinstance(ns, str) or not ns:
        raise OptionsError(("configRef", "namespace"), "must be a non-empty string")
    try:
        info = scope.resources.auth_config(name, ns)
    except KeyError as exc:
        raise OptionsError(("configRef",), f"dangling reference: {exc.args[0]}") from None
    compiled = []
    names: dict[str, int] = {}
    resource = ("AuthConfig", info.namespace, info.name)
    everything = _Checker(resource, ("spec",))  # every entry's problems, together, each where it is written
    for i, entry in enumerate(info.configs):
        if not isinstance(entry, Mapping) or set(entry) - {"name"} != {"ldap"}:
            kinds = ", ".join(sorted(set(entry) - {"name"})) if isinstance(entry, Mapping) else _type_name(entry)
            everything.record(("configs", i), f"only 'ldap' configs are supported by the extauth plugin,"
                              f" got {kinds}")
            continue
        with everything.checking():
            names[_config_name(everything, entry, i, names)] = i
        with everything.checking():
            compiled.append(compile_ldap(entry["ldap"], f"AuthConfig {ns}/{name}: spec.configs[{i}].ldap",
                                         info.namespace, scope, resource, ("spec", "configs", i, "ldap")))
    if info.fail_on_redirect:
        everything.record("failOnRedirect", "applies to OAuth2/OIDC redirects; an LDAP check never"
                          " redirects, so there is nothing for it to do: remove it")
    expression = None
    if info.boolean_expr is not None and len(names) == len(info.configs):
        from twistgw_ldap._expr import ExprError, parse, references

        with everything.checking():
            try:
                expression = parse(info.boolean_expr, names)
            except ExprError as exc:
                raise everything.fail("booleanExpr", f"{info.boolean_expr!r}: {exc}") from None
            unused = [n for n, i in names.items() if i not in references(expression)]
            if unused:
                raise everything.fail("booleanExpr", f"does not use the config(s) {', '.join(unused)};"
                                      " use them in it or remove them")
    everything.raise_problems()
    return CompiledExtAuth(f"{ns}/{name}", tuple(compiled), expression=expression)


def _config_name(c: _Checker, entry: Mapping[str, Any], index: int, seen: Mapping[str, int]) -> str:
    """``spec.configs[i].name``, or Gloo's generated ``config_<i>``."""
    from twistgw_ldap._expr import NAME

    name = entry.get("name", f"config_{index}")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise c.fail(("configs", index, "name"), "must be a name of letters, digits, '_', '-' and '.',"
                     f" starting with a letter or '_'; got {name!r}")
    if name in seen:
        raise c.fail(("configs", index, "name"), f"{name!r} is also the name of spec.configs[{seen[name]}]")
    return name


def fingerprint(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]
