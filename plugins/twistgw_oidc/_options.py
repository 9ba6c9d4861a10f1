"""Validating one ``spec.configs[i].oauth2`` entry of an AuthConfig.

Pure: reads Secrets from the configuration snapshot, does no network I/O.
Gloo's field names (``extauth.proto``: ``OAuth2``, ``OidcAuthorizationCode``,
``UserSession``, ``AccessTokenValidation``). Every field is either enforced
or refused with the reason; every problem of an entry is reported at once.
Paths are relative to the entry (``oidcAuthorizationCode.appUrl``).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

import attrs

from twistgw.sdk import Fields, Invalid, Path, Problems, REQUIRED, RedisConfig
from twistgw_jwt.verify import VerifyKey
from twistgw_oidc._cookies import CookieOptions

DEFAULT_POLL_INTERVAL = 1800.0  # Gloo: 30 minutes
DEFAULT_CACHE_TIMEOUT = 600.0  # Gloo: 10 minutes
DEFAULT_HTTP_TIMEOUT = 5.0
DEFAULT_REDIS_COOKIE = "__session"
DEFAULT_PRE_EXPIRY = 2.0
SAME_SITE = {"DefaultMode": None, "LaxMode": "Lax", "StrictMode": "Strict", "NoneMode": "None"}
#: headers a token or claim may never be written into
RESERVED_HEADERS = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade",
    "proxy-authorization", "proxy-connection", "expect", "cookie", "x-forwarded-for", "x-forwarded-proto",
    "forwarded", "x-real-ip",
})
OAUTH_SECRET_KEY = "client-secret"
ENCRYPTION_SECRET_KEY = "key"


# ---------------------------------------------------------------------------
# Compiled forms (immutable)
# ---------------------------------------------------------------------------


@attrs.frozen
class ClaimHeader:
    claim: str
    header: bytes
    append: bool = False


@attrs.frozen
class RedisSpec:
    """Where sessions live with ``session.redis``; equal specs share a pool."""

    host: str
    port: int
    db: int
    pool_size: int
    #: socketType TLS, and the CA certificates the server's must lead to (None: the system's)
    tls: bool = False
    ca_pem: bytes | None = attrs.field(default=None, repr=False)
    #: twistgw's ``clustered: true``: ``host`` is a node (a seed) of a Redis Cluster
    clustered: bool = False

    def config(self) -> RedisConfig:
        return RedisConfig(self.host, self.port, self.db, tls=self.tls, ca_pem=self.ca_pem, clustered=self.clustered)

    def __str__(self) -> str:
        where = f"{'rediss' if self.tls else 'redis'}://{self.config().address}/{self.db}"
        return f"{where} (a Redis Cluster)" if self.clustered else where


@attrs.frozen
class SessionSpec:
    cookie: CookieOptions
    #: ``cookie`` (tokens sealed in the cookie) or ``redis`` (a session id in it)
    kind: str
    cookie_name: str
    key: bytes | None = attrs.field(repr=False)  # cookie store: cipherConfig's key, or derived from the client secret
    redis: RedisSpec | None
    key_prefix: str
    allow_refreshing: bool
    pre_expiry_buffer: float


@attrs.frozen
class Override:
    """``discoveryOverride``: values that win over the discovery document."""

    #: (member, value): a URL, or a tuple of strings (hashable: the provider is shared by equal overrides)
    values: tuple[tuple[str, Any], ...] = ()

    def apply(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(doc)
        out.update((member, list(value) if isinstance(value, tuple) else value) for member, value in self.values)
        return out


#: discoveryOverride field → the discovery document member it replaces (each one twistgw reads)
OVERRIDE_FIELDS = {
    "authEndpoint": "authorization_endpoint", "tokenEndpoint": "token_endpoint", "jwksUri": "jwks_uri",
    "authMethods": "token_endpoint_auth_methods_supported", "endSessionEndpoint": "end_session_endpoint",
    "revocationEndpoint": "revocation_endpoint",
}
#: discoveryOverride fields whose value must be an absolute http(s) URL (checked by compile)
URL_OVERRIDES = {"authEndpoint", "tokenEndpoint", "jwksUri", "endSessionEndpoint", "revocationEndpoint"}
#: Gloo's discoveryOverride fields for members twistgw never reads: refused, and why
OVERRIDE_REFUSED = {
    "scopes": "the scopes asked for are oidcAuthorizationCode.scopes (openid always)",
    "responseTypes": "the login always asks for response_type=code",
    "subjects": "the subject type is not checked: sub is taken as the provider writes it",
    "idTokenAlgs": "an ID token's algorithm is the one its signing key allows (never none or HMAC),"
                   " whatever the document lists",
    "claims": "the claims are those of the ID token itself",
}


@attrs.frozen
class OidcSpec:
    """``oauth2.oidcAuthorizationCode``, validated."""

    source: str
    binding: str  # a short digest of (issuer, client): sessions are never taken across configs
    issuer_url: str
    client_id: str
    client_secret: bytes | None = attrs.field(repr=False)
    app_url: str
    app_origin: str
    #: the request paths of the callback, logout and front-channel logout (appUrl's path prefixed)
    callback_path: str
    logout_path: str | None
    after_logout_url: str
    front_channel_logout_path: str | None
    scopes: tuple[str, ...]
    auth_params: tuple[tuple[str, str], ...]
    token_params: tuple[tuple[str, str], ...]
    override: Override
    poll_interval: float
    refetch_interval: float
    session: SessionSpec
    id_token_header: bytes | None
    access_token_header: bytes | None
    bearer: bool
    claims_to_headers: tuple[ClaimHeader, ...]
    fail_on_redirect: bool
    end_session_post: bool
    timeout: float = DEFAULT_HTTP_TIMEOUT

    @property
    def redirect_uri(self) -> str:
        return self.app_origin + self.callback_path


@attrs.frozen
class JwtSpec:
    issuer: str | None
    audiences: frozenset[str] | None
    remote_url: str | None
    refresh_interval: float
    local_keys: tuple[VerifyKey, ...] | None  # parsed from localJwks.inlineString


@attrs.frozen
class AccessTokenSpec:
    """``oauth2.accessTokenValidation``, validated."""

    source: str
    introspection_url: str | None
    client_id: str | None
    client_secret: bytes | None = attrs.field(repr=False)
    user_id_attribute: str | None
    jwt: JwtSpec | None
    userinfo_url: str | None
    cache_timeout: float
    required_scopes: frozenset[str]
    claims_to_headers: tuple[ClaimHeader, ...]
    timeout: float = DEFAULT_HTTP_TIMEOUT


# ---------------------------------------------------------------------------
# Reading an entry's fields (the gateway's field reader: Fields, by name)
# ---------------------------------------------------------------------------


def url(f: Fields, field: str, required: bool = False) -> str | None:
    """An absolute http(s) URL field (None: absent, or recorded as wrong)."""
    value = f.string(field, REQUIRED if required else None)
    if value is None:
        return None
    problem = url_problem(value)
    if problem:
        f.issue(field, problem)
        return None
    return value


def header(f: Fields, value: Any, field: str | Path) -> bytes | None:
    """A header name a token or claim is written into (lower-case bytes)."""
    path = f.at(field) if isinstance(field, str) else f.path + tuple(field)
    try:
        name = f.reader.header_name(value, path)
    except Invalid:
        return None
    if name.lower() in RESERVED_HEADERS:
        f.issue(field, f"{name!r} is a header the gateway or HTTP owns; pick another")
        return None
    return name.lower().encode("ascii")


def url_problem(value: str) -> str | None:
    if any(ord(c) <= 32 or ord(c) >= 127 for c in value):
        return "must be a URL without spaces or control characters"
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an absolute http(s) URL, got {value!r}"
    if parts.username is not None or parts.password is not None:
        return "must not contain credentials (use a Secret)"
    return None


def origin(url: str) -> str:
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    port = parts.port or default
    host = (parts.hostname or "").lower()
    return f"{parts.scheme}://{host}" + ("" if port == default else f":{port}")


def secret_value(f: Fields, field: str, key: str, namespace: str, lookup: Callable[[str, str], Any]) -> bytes | None:
    """``data[key]`` of the Secret the field ``field`` names."""
    if f.get(field) is None:
        f.issue(field, "must name a Secret: {name: NAME, namespace: NS}")
        return None
    ref = f.reference(field, namespace)
    if ref is None:
        return None
    name, ns = ref
    try:
        secret = lookup(name, ns)
    except KeyError as exc:
        f.issue(field, f"dangling reference: {exc.args[0] if exc.args else f'no Secret {ns}/{name}'}")
        return None
    value = secret.data.get(key)
    if not value:
        f.issue(field, f"Secret {ns}/{name} has no non-empty data.{key}")
        return None
    return bytes(value)


def claim_headers(f: Fields, field: str) -> tuple[ClaimHeader, ...]:
    """``claimsToHeaders: [{claim, header, append}]``."""
    if f.get(field) is not None and not isinstance(f[field], list):
        f.issue(field, "must be a list of {claim, header, append}")
        return ()
    out = []
    for item in f.items_of(field, ("claim", "header", "append")):
        claim = item.string("claim")
        name = header(item, item.get("header"), "header")
        append = item.boolean("append", False)
        if claim and name:
            out.append(ClaimHeader(claim, name, append))
    return tuple(out)


def metadata_headers(f: Fields, field: str) -> tuple[ClaimHeader, ...]:
    """``dynamicMetadataFromClaims: {key: claim}``: with no Envoy dynamic
    metadata in twistgw, each key is the name of an upstream header."""
    raw = f.get(field)
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        f.issue(field, "must be a mapping of metadata key (here: header name) to claim")
        return ()
    out = []
    for key, claim in raw.items():
        name = header(f, key, (field, str(key)))
        if not isinstance(claim, str) or not claim:
            f.issue((field, str(key)), "must name a claim")
            continue
        if name:
            out.append(ClaimHeader(claim, name))
    return tuple(out)


def binding_of(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:16]


#: what an ``oauth2`` entry holds (exactly one of them)
ENTRY_FIELDS = ("oidcAuthorizationCode", "accessTokenValidation")


def check_entry(problems: Problems, raw: Any) -> tuple[str, Any]:
    """``oauth2`` holds exactly one of ``oidcAuthorizationCode`` or
    ``accessTokenValidation``."""
    entry = problems.fields(raw, (), ENTRY_FIELDS, refused={
        "oauth2": "Gloo's plain OAuth2 flow (oauth2.oauth2) is not; use oidcAuthorizationCode, which validates"
                  " an ID token"})
    problems.raise_if_any()
    present = [k for k in ENTRY_FIELDS if k in entry]
    if len(present) != 1:
        raise problems.fail((), "set exactly one of oidcAuthorizationCode or accessTokenValidation")
    return present[0], entry[present[0]]
