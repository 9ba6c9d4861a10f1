"""Compiling ``oidcAuthorizationCode`` and ``accessTokenValidation`` (pure).

See :mod:`._options` for the reader and the compiled forms. Fields of
Gloo's that twistgw does not implement are refused by name, with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from twistgw.sdk import Fields, REQUIRED, TLSSettingsError, client_tls
from twistgw_jwt.verify import KeyProblem, parse_local_key
from twistgw_oidc._cookies import CookieOptions
from twistgw_oidc._options import (
    DEFAULT_CACHE_TIMEOUT,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_PRE_EXPIRY,
    DEFAULT_REDIS_COOKIE,
    ENCRYPTION_SECRET_KEY,
    OAUTH_SECRET_KEY,
    OVERRIDE_FIELDS,
    OVERRIDE_REFUSED,
    SAME_SITE,
    AccessTokenSpec,
    JwtSpec,
    OidcSpec,
    Override,
    RedisSpec,
    SessionSpec,
    URL_OVERRIDES,
    binding_of,
    claim_headers,
    header,
    metadata_headers,
    origin,
    secret_value,
    url,
)

SecretLookup = Callable[[str, str], Any]

OIDC_FIELDS = (
    "clientId", "clientSecretRef", "issuerUrl", "authEndpointQueryParams", "tokenEndpointQueryParams",
    "appUrl", "callbackPath", "logoutPath", "afterLogoutUrl", "scopes", "session", "headers",
    "discoveryOverride", "discoveryPollInterval", "jwksCacheRefreshPolicy", "identityToken",
    "frontChannelLogout", "endSessionProperties", "dynamicMetadataFromClaims", "clientAuthentication",
    "disableClientSecret",
    "default",  # Gloo's no-op provider marker: accepted, means nothing else
)
#: Gloo fields twistgw refuses, and why
OIDC_REFUSED = {
    "sessionIdHeaderName": "the session id is never sent to the provider",
    "parseCallbackPathAsRegex": "callback paths are exact paths",
    "autoMapFromMetadata": "twistgw has no Envoy dynamic metadata",
    "accessToken": "claimsToHeaders of the access token need a JWT access token; use identityToken.claimsToHeaders",
    "azure": "Microsoft Graph distributed claims are not implemented",
}
SESSION_FIELDS = ("failOnFetchFailure", "cookieOptions", "cookie", "redis", "cipherConfig")


def compile_oidc(f: Fields, source: str, namespace: str, secret: SecretLookup,
                 fail_on_redirect: bool) -> OidcSpec | None:
    """``oidcAuthorizationCode``: ``f`` its fields (read with ``OIDC_FIELDS``
    and ``OIDC_REFUSED``); None when a problem is recorded."""
    problems = f.reader
    count = problems.count()
    issuer = url(f, "issuerUrl", required=True)
    client_id = f.string("clientId")
    client_secret = _client_secret(f, namespace, secret)
    app_url = url(f, "appUrl", required=True)
    callback = _path(f, "callbackPath", required=True)
    logout = _path(f, "logoutPath")
    front = None
    if "frontChannelLogout" in f:
        front = _path(f.fields("frontChannelLogout", ("path",)), "path", required=True)
    paths = [p for p in (callback, logout, front) if p]
    if len(set(paths)) != len(paths):
        f.issue("callbackPath", "callbackPath, logoutPath and frontChannelLogout.path must differ")
    after_logout = url(f, "afterLogoutUrl") or app_url or ""
    scopes = ("openid",) + tuple(s for s in f.strings("scopes") if s != "openid")
    auth_params = tuple(f.labels("authEndpointQueryParams").items())
    token_params = tuple(f.labels("tokenEndpointQueryParams").items())
    reserved = {"client_id", "redirect_uri", "response_type", "scope", "state", "nonce", "code_challenge",
                "code_challenge_method", "code", "code_verifier", "grant_type", "client_secret"}
    for field, params in (("authEndpointQueryParams", auth_params), ("tokenEndpointQueryParams", token_params)):
        for k, _ in params:
            if k in reserved:
                f.issue((field, k), f"{k!r} is set by the gateway (state, nonce and PKCE are always sent)")
    override = _override(f.fields("discoveryOverride", tuple(OVERRIDE_FIELDS) + tuple(OVERRIDE_REFUSED)))
    poll = f.duration("discoveryPollInterval", DEFAULT_POLL_INTERVAL)
    refetch = _refresh_policy(f, poll)
    session = compile_session(f.fields("session", SESSION_FIELDS), namespace, secret,
                              _derived_key(client_secret, issuer, client_id), "clientSecretRef" in f)
    headers = f.fields("headers", ("idTokenHeader", "accessTokenHeader", "useBearerSchemaForAuthorization"))
    id_header = header(headers, headers["idTokenHeader"], "idTokenHeader") if "idTokenHeader" in headers else None
    at_header = header(headers, headers["accessTokenHeader"], "accessTokenHeader") \
        if "accessTokenHeader" in headers else None
    bearer = headers.boolean("useBearerSchemaForAuthorization", True)
    claims = claim_headers(f.fields("identityToken", ("claimsToHeaders",)), "claimsToHeaders")
    claims += metadata_headers(f, "dynamicMetadataFromClaims")
    es = f.fields("endSessionProperties", ("methodType",))
    method = es.get("methodType", "GetMethod")
    if method not in ("GetMethod", "PostMethod"):
        es.issue("methodType", "must be GetMethod or PostMethod")
    if problems.count() > count or session is None or not (issuer and client_id and app_url and callback):
        return None
    # the paths are relative to appUrl (Gloo): under https://host/app, /callback is /app/callback
    base = urlsplit(app_url).path.rstrip("/")
    callback, logout, front = (base + p if p else None for p in (callback, logout, front))
    assert callback is not None
    return OidcSpec(
        source=source, binding=binding_of(issuer, client_id, app_url, callback), issuer_url=issuer,
        client_id=client_id, client_secret=client_secret, app_url=app_url, app_origin=origin(app_url),
        callback_path=callback, logout_path=logout, after_logout_url=after_logout,
        front_channel_logout_path=front, scopes=scopes, auth_params=auth_params, token_params=token_params,
        override=override, poll_interval=poll, refetch_interval=refetch, session=session,
        id_token_header=id_header, access_token_header=at_header, bearer=bearer, claims_to_headers=claims,
        fail_on_redirect=fail_on_redirect, end_session_post=method == "PostMethod")


def _client_secret(f: Fields, namespace: str, secret: SecretLookup) -> bytes | None:
    disable = f.boolean("disableClientSecret", False)
    if "clientAuthentication" in f:
        if "clientSecretRef" in f or "disableClientSecret" in f:
            f.issue("clientAuthentication", "set either clientAuthentication or clientSecretRef/"
                                            "disableClientSecret, not both")
        body = f.fields("clientAuthentication", ("clientSecret", "privateKeyJwt"))
        if "privateKeyJwt" in body:
            body.issue("privateKeyJwt", "is not supported by twistgw: use clientSecret")
        f = body.fields("clientSecret", ("clientSecretRef", "disableClientSecret"))
        disable = f.boolean("disableClientSecret", False)
    if disable:
        if f.get("clientSecretRef") is not None:
            f.issue("clientSecretRef", "set clientSecretRef or disableClientSecret: true, not both")
        return None
    if f.get("clientSecretRef") is None:
        f.issue("clientSecretRef", "is required (a Secret with data.client-secret), or set"
                                   " disableClientSecret: true for a public client (PKCE only)")
        return None
    return secret_value(f, "clientSecretRef", OAUTH_SECRET_KEY, namespace, secret)


def _path(f: Fields, field: str, required: bool = False) -> str | None:
    value = f.string(field, REQUIRED if required else None)
    if value is None:
        return None
    if not value.startswith("/") or any(c in value for c in "?#") or any(ord(c) <= 32 for c in value):
        f.issue(field, f"must be a path starting with '/', without query or fragment, got {value!r}")
        return None
    return value


def _override(f: Fields) -> Override:
    for field, why in OVERRIDE_REFUSED.items():
        if field in f:
            f.issue(field, f"is not supported by twistgw: {why}")
    values: list[tuple[str, Any]] = []
    for field, member in OVERRIDE_FIELDS.items():
        if field not in f:
            continue
        if field in URL_OVERRIDES:
            found = url(f, field)
            if found:
                values.append((member, found))
        else:
            values.append((member, tuple(f.strings(field))))
    return Override(tuple(values))


def _refresh_policy(parent: Fields, poll: float) -> float:
    """``jwksCacheRefreshPolicy`` → the least seconds between two key-set
    fetches caused by a token naming a key we do not have."""
    if parent.get("jwksCacheRefreshPolicy") is None:
        return float("inf")  # Gloo's default: never
    f = parent.fields("jwksCacheRefreshPolicy", ("never", "always", "maxIdpReqPerPollingInterval"))
    if len(f) != 1:
        f.issue((), "set exactly one of never, always or maxIdpReqPerPollingInterval")
        return float("inf")
    if "always" in f:
        return 1.0  # at most one fetch a second even so: a storm of unknown kids is one fetch
    if "maxIdpReqPerPollingInterval" in f:
        n = f["maxIdpReqPerPollingInterval"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            f.issue("maxIdpReqPerPollingInterval", "must be a whole number >= 1")
            return float("inf")
        return max(1.0, poll / n)
    return float("inf")


def _derived_key(client_secret: bytes | None, issuer: str | None, client_id: str | None) -> bytes | None:
    """The cookie store's key when ``cipherConfig`` is not set: HKDF-SHA256 of
    the client secret (which every replica already shares, and only the
    gateway and the provider know), bound to the issuer and client id. Gloo
    keeps such sessions in unencrypted cookies; twistgw never does. None
    without a client secret (the key must then be given)."""
    if not client_secret or not issuer or not client_id:
        return None
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    info = b"twistgw oidc session cookie v1\0" + issuer.encode() + b"\0" + client_id.encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(client_secret)


def compile_session(f: Fields, namespace: str, secret: SecretLookup,
                    derived: bytes | None = None, secret_given: bool = False) -> SessionSpec | None:
    """``session`` (Gloo's UserSession). Neither ``cookie`` nor ``redis`` (or no
    ``session`` at all, as most of Gloo's OIDC guides write it) is Gloo's
    default, the cookie store; without ``cipherConfig`` its key is
    ``derived`` from the client secret."""
    problems = f.reader
    count = problems.count()
    if f.get("failOnFetchFailure", True) is not True:
        f.issue("failOnFetchFailure", "twistgw always fails closed when the session store is unreachable"
                                      " (503); omit it or set it to true")
    cookie = _cookie_options(f.fields("cookieOptions", ("maxAge", "notSecure", "httpOnly", "path", "sameSite",
                                                        "domain")))
    key = None
    if "cipherConfig" in f:
        cc = f.fields("cipherConfig", ("keyRef",))
        key = secret_value(cc, "keyRef", ENCRYPTION_SECRET_KEY, namespace, secret)
        if key is not None and len(key) != 32:
            cc.issue("keyRef", f"the key must be exactly 32 bytes (data.key), got {len(key)}")
            key = None
    if "cookie" in f and "redis" in f:
        f.issue((), "set one of cookie (tokens sealed in the cookie) or redis, not both")
        return None
    if "redis" not in f:
        c = f.fields("cookie", ("allowRefreshing", "keyPrefix", "targetDomain"))
        if "targetDomain" in c:
            c.issue("targetDomain", "is not supported by twistgw: route by domains instead")
        prefix = c.string("keyPrefix", "", nonempty=False)
        if key is None and "cipherConfig" not in f:
            key = derived
            # a clientSecretRef that did not resolve is reported where it is written
            if key is None and not secret_given:
                f.issue("cipherConfig", "is required for the cookie store without a client secret: the tokens"
                                        " are kept in the browser, encrypted and authenticated with this"
                                        " 32-byte key")
        refreshing = c.boolean("allowRefreshing", False)
        if problems.count() > count:
            return None
        return SessionSpec(cookie, "cookie", f"{prefix}_session" if prefix else "__session", key, None, prefix,
                           refreshing, 0.0)
    r = f.fields("redis", ("options", "keyPrefix", "cookieName", "allowRefreshing", "preExpiryBuffer",
                           "targetDomain", "headerName"))
    for field in ("targetDomain", "headerName"):
        if field in r:
            r.issue(field, "is not supported by twistgw")
    redis = _redis_options(r.fields("options", ("host", "db", "poolSize", "socketType", "tlsCertMountPath",
                                                  "clustered")))
    name = r.string("cookieName", DEFAULT_REDIS_COOKIE)
    prefix = r.string("keyPrefix", "", nonempty=False)
    buffer = r.duration("preExpiryBuffer", DEFAULT_PRE_EXPIRY, lo=0)
    refreshing = r.boolean("allowRefreshing", True)
    if problems.count() > count or redis is None:
        return None
    return SessionSpec(cookie, "redis", name, key, redis, prefix, refreshing, buffer)


def _cookie_options(f: Fields) -> CookieOptions:
    max_age = f.get("maxAge", 2592000)
    if isinstance(max_age, bool) or not isinstance(max_age, int) or max_age < 0:
        f.issue("maxAge", "must be a whole number of seconds (0: a browser-session cookie)")
        max_age = 2592000
    same_site = f.get("sameSite", "LaxMode")
    if same_site not in SAME_SITE:
        f.issue("sameSite", f"must be one of {', '.join(SAME_SITE)}, got {same_site!r}")
        same_site = "LaxMode"
    secure = not f.boolean("notSecure", False)
    if same_site == "NoneMode" and not secure:
        f.issue("sameSite", "NoneMode needs a Secure cookie: unset notSecure")
    path = f.get("path", "/")
    if not isinstance(path, str) or (path and not path.startswith("/")):
        f.issue("path", "must be a path starting with '/' (or \"\" for no Path attribute)")
        path = "/"
    domain = f.string("domain", None, nonempty=False)
    return CookieOptions(max_age, secure, f.boolean("httpOnly", True), path or None, domain or None,
                         SAME_SITE[same_site])


def _redis_options(f: Fields) -> RedisSpec | None:
    count = f.reader.count()
    clustered = f.boolean("clustered", False)
    socket_type = f.get("socketType", "TCP")
    if socket_type not in ("TCP", "TLS"):
        f.issue("socketType", f"must be TCP or TLS, got {socket_type!r}")
    if "tlsCertMountPath" in f and socket_type != "TLS":
        f.issue("tlsCertMountPath", "applies to socketType: TLS only")
    host = f.string("host")
    db, pool = f.get("db", 0), f.get("poolSize", 10)
    for field, value in (("db", db), ("poolSize", pool)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if field == "db" else 1):
            f.issue(field, "must be a whole number" + (" >= 0" if field == "db" else " >= 1"))
    if clustered and db not in (0, None) and not isinstance(db, bool):
        f.issue("db", f"must be 0 with clustered: true (a Redis Cluster has only database 0 and refuses SELECT),"
                      f" got {db!r}")
    if host is None:
        return None
    if host.startswith("unix://"):
        f.issue("host", "unix sockets are not supported by twistgw: give host:port")
        return None
    name, _, port = host.rpartition(":")
    if not name or not port.isdigit() or not 0 < int(port) < 65536:
        f.issue("host", f"must be host:port, got {host!r}")
        return None
    ca = _redis_ca(f, f.get("tlsCertMountPath"), name.strip("[]")) if socket_type == "TLS" else None
    if f.reader.count() > count:
        return None
    return RedisSpec(name.strip("[]"), int(port), db, pool, socket_type == "TLS", ca, clustered)


def _redis_ca(f: Fields, path: Any, host: str) -> bytes | None:
    """``tlsCertMountPath``: a PEM file of CA certificates, or a directory
    holding ``ca.crt`` (a mounted Secret); absent: the system's CAs."""
    ca = None
    if path is not None:
        if not isinstance(path, str) or not path:
            f.issue("tlsCertMountPath", "must be the path of a PEM CA file (or a directory with ca.crt)")
            return None
        file = Path(path) / "ca.crt" if Path(path).is_dir() else Path(path)
        try:
            ca = file.read_bytes()
        except OSError as exc:
            f.issue("tlsCertMountPath", f"cannot read {file}: {exc.strerror or exc}")
            return None
    try:
        client_tls(host, ca_pem=ca)
    except TLSSettingsError as exc:
        f.issue("tlsCertMountPath", str(exc))
    return ca


ATV_FIELDS = ("introspectionUrl", "introspection", "jwt", "userinfoUrl", "cacheTimeout", "requiredScopes",
              "dynamicMetadataFromClaims", "claimsToHeaders", "default")
ATV_REFUSED = {"azure": "Microsoft Graph distributed claims are not implemented"}


def compile_access_token(f: Fields, source: str, namespace: str, secret: SecretLookup) -> AccessTokenSpec | None:
    """``accessTokenValidation``: ``f`` its fields (read with ``ATV_FIELDS``
    and ``ATV_REFUSED``); None when a problem is recorded."""
    count = f.reader.count()
    kinds = [k for k in ("introspectionUrl", "introspection", "jwt") if k in f]
    if len(kinds) != 1:
        f.issue((), "set exactly one of introspection, introspectionUrl or jwt")
        return None
    introspection_url = client_id = client_secret = user_attr = None
    jwt_spec = None
    if kinds[0] == "introspectionUrl":
        introspection_url = url(f, "introspectionUrl", required=True)
    elif kinds[0] == "introspection":
        i = f.fields("introspection", ("introspectionUrl", "clientId", "clientSecretRef", "userIdAttributeName",
                                       "disableClientSecret"))
        introspection_url = url(i, "introspectionUrl", required=True)
        client_id = i.string("clientId", None)
        user_attr = i.string("userIdAttributeName", None)
        disabled = i.boolean("disableClientSecret", False)
        if client_id and not disabled:
            client_secret = secret_value(i, "clientSecretRef", OAUTH_SECRET_KEY, namespace, secret)
        elif "clientSecretRef" in i:
            i.issue("clientSecretRef", "needs clientId (and no disableClientSecret)")
    else:
        jwt_spec = _jwt(f.fields("jwt", ("remoteJwks", "localJwks", "issuer", "audiences")))
    userinfo = url(f, "userinfoUrl")
    cache = f.duration("cacheTimeout", DEFAULT_CACHE_TIMEOUT, lo=0)
    required = frozenset(f.fields("requiredScopes", ("scope",)).strings("scope"))
    claims = claim_headers(f, "claimsToHeaders")
    claims += metadata_headers(f, "dynamicMetadataFromClaims")
    if f.reader.count() > count:
        return None
    return AccessTokenSpec(source, introspection_url, client_id, client_secret, user_attr, jwt_spec, userinfo, cache,
                           required, claims)


def _jwt(f: Fields) -> JwtSpec:
    remote = local = None
    refresh = 300.0
    if ("remoteJwks" in f) == ("localJwks" in f):
        f.issue((), "set exactly one of remoteJwks {url} or localJwks {inlineString}")
    if "remoteJwks" in f:
        r = f.fields("remoteJwks", ("url", "refreshInterval"))
        remote = url(r, "url", required=True)
        refresh = r.duration("refreshInterval", 300.0)
    if "localJwks" in f:
        lf = f.fields("localJwks", ("inlineString",))
        text = lf.string("inlineString")
        if text is not None:
            try:
                local = parse_local_key(text, "inlineString").keys
            except KeyProblem as exc:
                lf.issue("inlineString", str(exc))
    audiences = f.strings("audiences")
    return JwtSpec(f.string("issuer", None), frozenset(audiences) or None, remote, refresh, local)


