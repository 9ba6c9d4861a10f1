"""Validating one ``spec.configs[i].ldap`` entry into an :class:`LdapConfig`.

Pure: reads files named in the options (CA certificates) but does no network
I/O and never touches the reactor. Problems are located relative to the
entry (``address``, ``userSearch.filter``); the extauth plugin places them
in the AuthConfig.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping
from urllib.parse import urlsplit

from twistgw_ldap._ldaptor import parse_filter
from twistgw.api.fields import Path, Problems, type_name

from twistgw import ConfigScope
from twistgw.tls import TLSSettingsError, client_tls

from twistgw_ldap._ber import SCOPE_ONE, SCOPE_SUB
from twistgw_ldap._dn import InvalidDN, NormalDN, format_dn, is_ad_logon_name, parse_dn
from twistgw_ldap._filter import SearchFilter, compile_filter
from twistgw_ldap._model import (
    DEFAULT_CACHE_TTL,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_GROUP_FILTER,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MEMBERSHIP_ATTRIBUTE,
    DEFAULT_NAME_ATTRIBUTE,
    DEFAULT_POOL_INITIAL,
    DEFAULT_POOL_MAX,
    DEFAULT_REALM,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SEARCH_FILTER,
    DEFAULT_USERNAME_ATTRIBUTES,
    GroupSearch,
    LdapConfig,
    ServiceAccount,
    Target,
    UserSearch,
)

__all__ = ["LdapConfig", "compile_ldap", "parse_address"]

_LDAP_FIELDS = {
    "address", "userDnTemplate", "userSearch", "membershipAttributeName", "allowedGroups",
    "searchFilter", "disableGroupChecking", "groupLookupSettings", "groupSearch", "groupsHeader",
    "userHeader", "keepCredentials", "pool", "startTLS", "tls", "connectTimeout", "requestTimeout",
    "cacheTtl", "realm",
}
_SCOPES = {"one": SCOPE_ONE, "sub": SCOPE_SUB}
#: Why ``tls.insecureSkipVerify`` is refused (TLS peers are verified by name, always).
NO_SKIP_VERIFY = ("twistgw always verifies the directory's certificate by name: give the CA with tls.caFile or"
                  " tls.caPem, and tls.serverName if the address is not the certificate's name")
#: RFC 9110 token characters (a header field name)
#: Headers the gateway or HTTP itself owns: never a place for the user or groups.
_RESERVED_HEADERS = frozenset({
    "authorization", "proxy-authorization", "host", "content-length", "transfer-encoding",
    "connection", "keep-alive", "te", "trailer", "upgrade", "proxy-connection", "expect", "cookie",
    "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "forwarded", "x-real-ip",
})
_ATTRIBUTE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")

_type_name = type_name


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


def _check_template(c: Problems, template: str) -> None:
    field: Path = ("userDnTemplate",)
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


def _read_ca(c: Problems, tls: Mapping[str, Any], config_dir: str) -> bytes | None:
    if "caFile" in tls and "caPem" in tls:
        raise c.fail(("tls",), "set caFile or caPem, not both")
    if "caPem" in tls:
        pem = c.string(tls["caPem"], ("tls", "caPem")).encode("ascii", "replace")
    elif "caFile" in tls:
        path = c.string(tls["caFile"], ("tls", "caFile"))
        if not os.path.isabs(path):
            path = os.path.join(config_dir or os.getcwd(), path)
        try:
            with open(path, "rb") as f:
                pem = f.read()
        except OSError as exc:
            raise c.fail(("tls", "caFile"), f"cannot read {path}: {exc.strerror}") from None
    else:
        return None
    from twisted.internet import ssl

    try:
        found = [ssl.Certificate.loadPEM(block + b"-----END CERTIFICATE-----\n")
                 for block in pem.split(b"-----END CERTIFICATE-----") if b"-----BEGIN CERTIFICATE-----" in block]
    except Exception as exc:
        raise c.fail(("tls",), f"CA certificates are not valid PEM: {exc}") from None
    if not found:
        raise c.fail(("tls",), "no PEM certificate (-----BEGIN CERTIFICATE-----) found")
    return pem


def compile_ldap(raw: Any, scope: ConfigScope) -> LdapConfig:
    """Validate one ``configs[i].ldap`` entry.

    :raise OptionsError: listing every problem found in the entry, each at
        its path below the entry.
    """
    c = Problems()
    read: Mapping[str, Any] = {}
    with c.check():  # unknown fields are reported, and the known ones still checked
        read = c.mapping(raw, (), _LDAP_FIELDS)
    if not isinstance(raw, dict):
        c.raise_if_any()
    spec = {k: v for k, v in read.items() if k in _LDAP_FIELDS}
    target: Target | None = None
    with c.check():
        target = _target(c, spec, scope)
    template, user_search = _user_part(c, spec, scope)
    groups = _group_part(c, spec, scope)
    headers = _headers(c, spec, groups)
    limits = _limits(c, spec)
    c.raise_if_any()
    assert target is not None and groups is not None and headers is not None and limits is not None
    return LdapConfig(
        scope.source, target, template, groups["attribute"], frozenset(groups["allowed"]), groups["filter_text"],
        groups["disable"], groups["account"], limits["pool_max"], limits["pool_initial"], limits["connectTimeout"],
        limits["requestTimeout"], limits["cacheTtl"], limits["realm"], user_search, groups["search"],
        headers[0], headers[1], headers[2], groups["filter_object"],
    )


def _user_part(c: Problems, spec: Mapping[str, Any], scope: ConfigScope) -> tuple[str, UserSearch | None]:
    """``userDnTemplate`` or ``userSearch`` (exactly one)."""
    template, user_search = "", None
    with c.check():
        if ("userDnTemplate" in spec) == ("userSearch" in spec):
            raise c.fail(("userDnTemplate",), "set exactly one of userDnTemplate (e.g."
                         " uid=%s,ou=people,dc=example,dc=org) and userSearch"
                         if "userSearch" in spec else
                         "is required (e.g. uid=%s,ou=people,dc=example,dc=org), or set userSearch instead")
        if "userDnTemplate" in spec:
            template = c.string(spec["userDnTemplate"], ("userDnTemplate",)).strip()
            _check_template(c, template)
    if "userSearch" in spec and "userDnTemplate" not in spec:
        user_search = _user_search(c, spec["userSearch"], scope)
    return template, user_search


def _group_part(c: Problems, spec: Mapping[str, Any], scope: ConfigScope) -> dict[str, Any]:
    """How the groups are found and which are allowed, by name; the values
    of fields with problems are left at their defaults (the problems are
    recorded)."""
    found: dict[str, Any] = {"disable": False, "allowed": set(), "search": None,
                             "attribute": DEFAULT_MEMBERSHIP_ATTRIBUTE, "filter_text": DEFAULT_SEARCH_FILTER,
                             "filter_object": None, "account": None}
    with c.check():
        found["disable"] = c.boolean(spec.get("disableGroupChecking", False), ("disableGroupChecking",))
    with c.check():
        found["allowed"] = _allowed_groups(c, spec.get("allowedGroups", []), found["disable"])
    if "groupSearch" in spec:
        found["search"] = _group_search(c, spec["groupSearch"])
        for field in ("membershipAttributeName", "searchFilter"):
            if field in spec:
                c.add((field,), "applies only to the membership-attribute lookup; with"
                         " groupSearch the groups come from the search (remove it)")
    with c.check():
        attribute = c.string(spec.get("membershipAttributeName", DEFAULT_MEMBERSHIP_ATTRIBUTE),
                             ("membershipAttributeName",)).strip()
        if not _ATTRIBUTE.match(attribute):
            raise c.fail(("membershipAttributeName",), f"is not an attribute name: {attribute!r}")
        found["attribute"] = attribute
    with c.check():
        text = c.string(spec.get("searchFilter", DEFAULT_SEARCH_FILTER), ("searchFilter",)).strip()
        if not (text.startswith("(") and text.endswith(")")):
            raise c.fail(("searchFilter",), f"must be an LDAP filter in parentheses, e.g. (objectClass=*);"
                         f" got {text!r}")
        try:
            found["filter_object"] = parse_filter(text)
        except Exception as exc:
            raise c.fail(("searchFilter",), f"is not a valid LDAP filter (RFC 4515): {text!r}"
                         f" ({type(exc).__name__})") from None
        found["filter_text"] = text
    with c.check():
        found["account"] = _lookup_account(c, spec, scope)
    return found


def _lookup_account(c: Problems, spec: Mapping[str, Any], scope: ConfigScope) -> ServiceAccount | None:
    """``groupLookupSettings``: the service account that reads the groups, or None."""
    account = None
    here: Path = ("groupLookupSettings",)
    gls = c.mapping(spec.get("groupLookupSettings"), here, {"checkGroupsWithServiceAccount", "credentialsSecretRef"},
                    optional=True)
    use_sa = c.boolean(gls.get("checkGroupsWithServiceAccount", False), here + ("checkGroupsWithServiceAccount",))
    if "credentialsSecretRef" in gls:
        account = _service_account(c, gls["credentialsSecretRef"], scope, here + ("credentialsSecretRef",))
    if use_sa and account is None:
        raise c.fail(("groupLookupSettings", "credentialsSecretRef"),
                     "is required when checkGroupsWithServiceAccount is true")
    if not use_sa and account is not None:
        raise c.fail(("groupLookupSettings", "credentialsSecretRef"),
                     "is used only with checkGroupsWithServiceAccount: true (the groups are otherwise"
                     " looked up as the user); set that, or remove the reference")
    return account


def _headers(c: Problems, spec: Mapping[str, Any], groups: dict[str, Any]) -> tuple[bytes, bytes, bool]:
    """(groupsHeader, userHeader, keepCredentials)."""
    groups_header, user_header = b"", b""
    with c.check():
        groups_header = _header_name(c, spec, "groupsHeader")
    with c.check():
        user_header = _header_name(c, spec, "userHeader")
        if user_header and user_header == groups_header:
            raise c.fail(("userHeader",), "must differ from groupsHeader")
    if groups["disable"] and groups["search"] is not None and not groups_header:
        c.add(("groupSearch",), "is never used: disableGroupChecking is true and no"
                 " groupsHeader asks for the groups (remove one of them)")
    keep = False
    with c.check():
        keep = c.boolean(spec.get("keepCredentials", False), ("keepCredentials",))
    return groups_header, user_header, keep


def _limits(c: Problems, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The pool, the timeouts, the cache's lifetime and the realm, by name."""
    found: dict[str, Any] = {"pool_max": DEFAULT_POOL_MAX, "pool_initial": DEFAULT_POOL_INITIAL,
                             "connectTimeout": DEFAULT_CONNECT_TIMEOUT, "requestTimeout": DEFAULT_REQUEST_TIMEOUT,
                             "cacheTtl": DEFAULT_CACHE_TTL, "realm": DEFAULT_REALM}
    with c.check():
        pool = c.mapping(spec.get("pool", {}), ("pool",), {"maxSize", "initialSize"})
        found["pool_max"] = c.integer(pool.get("maxSize", DEFAULT_POOL_MAX), ("pool", "maxSize"), 1, 1000)
        found["pool_initial"] = c.integer(pool.get("initialSize", min(DEFAULT_POOL_INITIAL, found["pool_max"])),
                                          ("pool", "initialSize"), 0, found["pool_max"])
    for field in ("connectTimeout", "requestTimeout", "cacheTtl"):
        with c.check():
            found[field] = c.duration(spec.get(field, found[field]), (field,), 0 if field == "cacheTtl" else 0.01,
                                      3600 if field == "cacheTtl" else 60)
    with c.check():
        realm = c.string(spec.get("realm", DEFAULT_REALM), ("realm",))
        if any(ch in realm for ch in '"\\') or not realm.isprintable():
            raise c.fail(("realm",), "must be printable and contain no quote or backslash")
        found["realm"] = realm
    return found


def _target(c: Problems, spec: Mapping[str, Any], scope: ConfigScope) -> Target:
    if "address" not in spec:
        raise c.fail(("address",), "is required (e.g. ldap://ldap.example.org:389)")
    address = c.string(spec["address"], ("address",))
    try:
        scheme, host, port = parse_address(address)
    except ValueError as exc:
        raise c.fail(("address",), f"{exc} (got {address!r})") from None
    start_tls = c.boolean(spec.get("startTLS", False), ("startTLS",))
    if start_tls and scheme == "ldaps":
        raise c.fail(("startTLS",), "ldaps:// is already TLS; use startTLS only with ldap://")
    # insecureSkipVerify: refused whatever its value; the other settings still checked
    tls = c.mapping(spec.get("tls"), ("tls",), {"caFile", "caPem", "serverName"}, optional=True,
                    refused={"insecureSkipVerify": NO_SKIP_VERIFY})
    if tls and scheme != "ldaps" and not start_tls:
        raise c.fail(("tls",), "TLS settings need an ldaps:// address or startTLS: true")
    ca_pem = _read_ca(c, tls, scope.config_dir)
    server_name = c.string(tls["serverName"], ("tls", "serverName")) if "serverName" in tls else ""
    if scheme == "ldaps" or start_tls:
        try:  # what the connections will use, built once to check the settings
            client_tls(server_name or host, ca_pem=ca_pem)
        except TLSSettingsError as exc:
            raise c.fail(("tls",), str(exc)) from None
    return Target(host, port, scheme, start_tls, ca_pem, server_name)


def _allowed_groups(c: Problems, groups_raw: Any, disable: bool) -> set[NormalDN]:
    if not isinstance(groups_raw, list):
        raise c.fail(("allowedGroups",), f"must be a list of group DNs, got {_type_name(groups_raw)}")
    parsed = []
    for i, g in enumerate(groups_raw):
        text = c.string(g, ("allowedGroups", i))
        try:
            parsed.append(parse_dn(text))
        except InvalidDN as exc:
            raise c.fail(("allowedGroups", i), f"is not a valid DN: {exc}") from None
    groups = set(_rejoin_flow_split(c, parsed))
    if not groups and not disable:
        raise c.fail(("allowedGroups",), "must list at least one group DN, or set"
                     " disableGroupChecking: true to admit every user whose bind succeeds")
    return groups


def _base_dn(c: Problems, spec: Mapping[str, Any], field: Path, what: str) -> str:
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


def _search_filter(c: Problems, value: Any, field: Path) -> SearchFilter:
    text = c.string(value, field)
    try:
        return compile_filter(text)
    except ValueError as exc:
        raise c.fail(field, str(exc)) from None


def _user_search(c: Problems, raw: Any, scope: ConfigScope) -> UserSearch | None:
    """``userSearch``; None (with the problems recorded) when invalid."""
    spec: Mapping[str, Any] = {}
    with c.check():
        spec = c.mapping(raw, ("userSearch",), {"baseDn", "filter", "scope", "credentialsSecretRef",
                                             "usernameAttribute"})
    found: dict[str, Any] = {}
    with c.check():
        found["base"] = _base_dn(c, spec, ("userSearch", "baseDn"), "where users are searched (e.g. dc=example,dc=org)")
    with c.check():
        if "filter" not in spec:
            raise c.fail(("userSearch", "filter"), "is required, with one %s for the user name (e.g. (uid=%s),"
                         " or (sAMAccountName=%s) for Active Directory)")
        found["filter"] = _search_filter(c, spec["filter"], ("userSearch", "filter"))
    with c.check():
        name = spec.get("scope", "sub")
        if name not in _SCOPES:
            raise c.fail(("userSearch", "scope"), f"must be one (the base's children) or sub (the whole"
                         f" subtree), got {name!r}")
        found["scope"] = _SCOPES[name]
    found["account"] = None
    with c.check():
        if "credentialsSecretRef" in spec:
            found["account"] = _service_account(c, spec["credentialsSecretRef"], scope,
                                                ("userSearch", "credentialsSecretRef"))
    found["names"] = DEFAULT_USERNAME_ATTRIBUTES
    with c.check():
        if "usernameAttribute" in spec:
            name = c.string(spec["usernameAttribute"], ("userSearch", "usernameAttribute")).strip()
            if not _ATTRIBUTE.match(name):
                raise c.fail(("userSearch", "usernameAttribute"), f"is not an attribute name: {name!r}")
            found["names"] = (name,)
    if len(found) != 5:
        return None
    return UserSearch(found["base"], found["filter"], found["scope"], found["account"], found["names"])


def _group_search(c: Problems, raw: Any) -> GroupSearch | None:
    """``groupSearch``; None (with the problems recorded) when invalid."""
    spec: Mapping[str, Any] = {}
    with c.check():
        spec = c.mapping(raw, ("groupSearch",), {"baseDn", "filter", "nameAttribute", "nested", "maxDepth"})
    found: dict[str, Any] = {}
    with c.check():
        found["base"] = _base_dn(c, spec, ("groupSearch", "baseDn"),
                                 "where groups are searched (e.g. ou=groups,dc=example,dc=org)")
    with c.check():
        found["filter"] = _search_filter(c, spec.get("filter", DEFAULT_GROUP_FILTER), ("groupSearch", "filter"))
    with c.check():
        name = c.string(spec.get("nameAttribute", DEFAULT_NAME_ATTRIBUTE), ("groupSearch", "nameAttribute")).strip()
        if not _ATTRIBUTE.match(name):
            raise c.fail(("groupSearch", "nameAttribute"), f"is not an attribute name: {name!r}")
        found["name"] = name
    with c.check():
        found["nested"] = c.boolean(spec.get("nested", False), ("groupSearch", "nested"))
        if "maxDepth" in spec and not found["nested"]:
            raise c.fail(("groupSearch", "maxDepth"), "applies only with nested: true")
    with c.check():
        found["depth"] = c.integer(spec.get("maxDepth", DEFAULT_MAX_DEPTH), ("groupSearch", "maxDepth"), 1, 64)
    if len(found) != 5:
        return None
    return GroupSearch(found["base"], found["filter"], found["name"], found["nested"], found["depth"])


def _header_name(c: Problems, spec: Mapping[str, Any], field: str) -> bytes:
    if field not in spec:
        return b""
    name = c.header_name(spec[field].strip() if isinstance(spec[field], str) else spec[field], (field,))
    if name.lower() in _RESERVED_HEADERS:
        raise c.fail((field,), f"{name!r} is a header HTTP or the gateway itself uses; pick another"
                     " (e.g. X-Auth-Groups)")
    return name.lower().encode("ascii")


_SUFFIX_TYPES = frozenset({"dc", "o", "c", "l", "st"})
_QUOTE_HINT = ("in a YAML flow list [a,b] every comma separates items, so an unquoted DN is cut"
               " into pieces; quote each DN (allowedGroups: [\"cn=managers,ou=groups,dc=example,dc=org\"])"
               " or use a block list (- cn=managers,ou=groups,dc=example,dc=org)")


def _rejoin_flow_split(c: Problems, groups: list[NormalDN]) -> list[NormalDN]:
    """Undo YAML's split of ``allowedGroups: [cn=managers,ou=groups,dc=example,dc=org]``.

    Written that way, YAML reads it as four one-RDN items.
    When *every* item has a single RDN and they join into one plausible DN
    (nothing after its dc/o/c suffix), they are read as that one DN. Mixed
    or ambiguous lists are refused with a hint to quote.
    """
    if len(groups) < 2 or any(len(g) != 1 for g in groups):
        for i, g in enumerate(groups):
            if len(g) == 1 and len(groups) > 1:
                raise c.fail(("allowedGroups", i), f"{format_dn(g)!r} is a single RDN, not a group DN; {_QUOTE_HINT}")
        return groups
    joined: NormalDN = tuple(rdn for g in groups for rdn in g)
    seen_suffix = False
    for rdn in joined:
        is_suffix = all(t in _SUFFIX_TYPES for t, _ in rdn)
        if seen_suffix and not is_suffix:
            raise c.fail(("allowedGroups",), f"looks like several unquoted DNs run together; {_QUOTE_HINT}")
        seen_suffix = seen_suffix or is_suffix
    return [joined]


def _service_account(c: Problems, ref: Any, scope: ConfigScope, field: Path) -> ServiceAccount:
    ref = c.mapping(ref, field, {"name", "namespace"})
    if "name" not in ref:
        raise c.fail(field + ("name",), "is required")
    name = c.string(ref["name"], field + ("name",))
    ns = c.string(ref.get("namespace", scope.namespace), field + ("namespace",))
    try:
        secret = scope.secret(name, ns)
    except KeyError as exc:
        raise c.fail(field, f"dangling reference: {exc.args[0]}") from None
    where = f"Secret {ns}/{name}"
    for key in ("username", "password"):
        if not secret.data.get(key):
            raise c.fail(field, f"{where} has no non-empty data.{key} (create it with"
                         " `twistgw create secret authcredentials`)")
    try:
        username = secret.data["username"].decode("utf-8").strip()
        if not is_ad_logon_name(username):
            parse_dn(username)
    except (UnicodeDecodeError, InvalidDN):
        raise c.fail(field, f"{where}: data.username must be the service account's DN"
                     " (e.g. cn=admin,dc=example,dc=org), or for Active Directory DOMAIN\\name or"
                     " name@realm") from None
    return ServiceAccount(username, secret.data["password"], f"{ns}/{name}")

