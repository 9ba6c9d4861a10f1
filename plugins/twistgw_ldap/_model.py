"""The LDAP config type's model: one validated ``spec.configs[i].ldap``
entry and its parts, immutable. The bottom of the package: imports only
the pure DN, filter and BER helpers."""

from __future__ import annotations

from typing import Any

import attrs

from twistgw_ldap._ber import SCOPE_ONE
from twistgw_ldap._dn import NormalDN
from twistgw_ldap._filter import SearchFilter

#: The bound user's own entry, whatever its object classes. Gloo's default is
#: ``(uid=*)``, which no Active Directory user matches (they have no ``uid``):
#: every member of an allowed group got 401 (issue 32 item 11).
DEFAULT_SEARCH_FILTER = "(objectClass=*)"
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
#: The attributes a user's canonical name is read from when
#: ``userSearch.usernameAttribute`` is not set: the first the entry has.
DEFAULT_USERNAME_ATTRIBUTES = ("uid", "sAMAccountName")


@attrs.frozen
class Target:
    """Where and how to connect; the key of a connection pool."""

    host: str
    port: int
    scheme: str  # "ldap" or "ldaps"
    start_tls: bool = False
    ca_pem: bytes | None = None  # None: the platform's trust store
    server_name: str = ""  # the name the certificate must carry

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
    #: where the user's canonical name is read (the principal, the cache
    #: key and userHeader): the first of these the entry has
    username_attributes: tuple[str, ...] = DEFAULT_USERNAME_ATTRIBUTES

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

