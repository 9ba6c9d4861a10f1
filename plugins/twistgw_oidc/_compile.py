"""Compiling ``oidcAuthorizationCode`` and ``accessTokenValidation`` (pure).

See :mod:`._options` for the reader and the compiled forms. Fields of
Gloo's that twistgw does not implement are refused by name, with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from twistgw.options import Problems
from twistgw.tls import TLSSettingsError, client_tls
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
    Reader,
    RedisSpec,
    SessionSpec,
    URL_OVERRIDES,
    binding_of,
    claim_headers,
    metadata_headers,
    origin,
    secret_value,
)

SecretLookup = Callable[[str, str], Any]

OIDC_FIELDS = (
    "clientId", "clientSecretRef", "issuerUrl", "authEndpointQueryParams", "tokenEndpointQueryParams",
    "appUrl", "callbackPath", "logoutPath", "afterLogoutUrl", "scopes", "session", "headers",
    "discoveryOverride", "discoveryPollInterval", "jwksCacheRefreshPolicy", "identityToken",
    "frontChannelLogout", "endSessionProperties", "dynamicMetadataFromClaims", "clientAuthentication",
    "disableClientSecret",
)
#: Gloo fields twistgw refuses, and why
OIDC_REFUSED = {
    "sessionIdHeaderName": "the session id is never sent to the provider",
    "parseCallbackPathAsRegex": "callback paths are exact paths",
    "autoMapFromMetadata": "twistgw has no Envoy dynamic metadata",
    "accessToken": "claimsToHeaders of the access token need a JWT access token; use identityToken.claimsToHeaders",
    "azure": "Microsoft Graph distributed claims are not implemented",
    "default": None,  # Gloo's no-op provider marker: accepted, means nothing else
}
SESSION_FIELDS = ("failOnFetchFailure", "cookieOptions", "cookie", "redis", "cipherConfig")


def compile_oidc(raw: Any, read: Reader, source: str, namespace: str, secret: SecretLookup,
                 fail_on_redirect: bool) -> OidcSpec | None:
    raw = read.mapping(raw, OIDC_FIELDS + tuple(OIDC_REFUSED))
    for field, why in OIDC_REFUSED.items():
        if field in raw and why is not None:
            read.fail(field, f"is not supported by twistgw: {why}")
    issuer = read.url(raw, "issuerUrl", required=True)
    client_id = read.string(raw, "clientId", required=True)
    client_secret = _client_secret(raw, read, namespace, secret)
    app_url = read.url(raw, "appUrl", required=True)
    callback = _path(read, raw, "callbackPath", required=True)
    logout = _path(read, raw, "logoutPath")
    front = None
    if "frontChannelLogout" in raw:
        fr = read.sub("frontChannelLogout")
        front = _path(fr, fr.mapping(raw["frontChannelLogout"], ("path",)), "path", required=True)
    paths = [p for p in (callback, logout, front) if p]
    if len(set(paths)) != len(paths):
        read.fail("callbackPath", "callbackPath, logoutPath and frontChannelLogout.path must differ")
    after_logout = read.url(raw, "afterLogoutUrl") or app_url or ""
    scopes = ("openid",) + tuple(s for s in read.strings(raw, "scopes") if s != "openid")
    auth_params = read.string_map(raw, "authEndpointQueryParams")
    token_params = read.string_map(raw, "tokenEndpointQueryParams")
    reserved = {"client_id", "redirect_uri", "response_type", "scope", "state", "nonce", "code_challenge",
                "code_challenge_method", "code", "code_verifier", "grant_type", "client_secret"}
    for field, params in (("authEndpointQueryParams", auth_params), ("tokenEndpointQueryParams", token_params)):
        for k, _ in params:
            if k in reserved:
                read.fail((field, k), f"{k!r} is set by the gateway (state, nonce and PKCE are always sent)")
    override = _override(read, raw.get("discoveryOverride"))
    poll = read.duration(raw, "discoveryPollInterval", DEFAULT_POLL_INTERVAL)
    refetch = _refresh_policy(read, raw.get("jwksCacheRefreshPolicy"), poll)
    session = compile_session(read.sub("session"), raw.get("session"), namespace, secret,
                              _derived_key(client_secret, issuer, client_id), "clientSecretRef" in raw)
    hr = read.sub("headers")
    headers = hr.mapping(raw.get("headers"), ("idTokenHeader", "accessTokenHeader",
                                              "useBearerSchemaForAuthorization"))
    id_header = hr.header(headers["idTokenHeader"], "idTokenHeader") if "idTokenHeader" in headers else None
    at_header = hr.header(headers["accessTokenHeader"], "accessTokenHeader") \
        if "accessTokenHeader" in headers else None
    bearer = hr.boolean(headers, "useBearerSchemaForAuthorization", True)
    it = read.sub("identityToken")
    claims = claim_headers(it, it.mapping(raw.get("identityToken"), ("claimsToHeaders",)).get("claimsToHeaders"),
                           "claimsToHeaders")
    claims += metadata_headers(read, raw.get("dynamicMetadataFromClaims"), "dynamicMetadataFromClaims")
    es = read.sub("endSessionProperties")
    method = es.mapping(raw.get("endSessionProperties"), ("methodType",)).get("methodType", "GetMethod")
    if method not in ("GetMethod", "PostMethod"):
        es.fail("methodType", "must be GetMethod or PostMethod")
    if read.problems or session is None or not (issuer and client_id and app_url and callback):
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


def _client_secret(raw: Mapping[str, Any], read: Reader, namespace: str, secret: SecretLookup) -> bytes | None:
    ref = raw.get("clientSecretRef")
    disable = read.boolean(raw, "disableClientSecret", False)
    if "clientAuthentication" in raw:
        if "clientSecretRef" in raw or "disableClientSecret" in raw:
            read.fail("clientAuthentication", "set either clientAuthentication or clientSecretRef/"
                                              "disableClientSecret, not both")
        ca = read.sub("clientAuthentication")
        body = ca.mapping(raw["clientAuthentication"], ("clientSecret", "privateKeyJwt"))
        if "privateKeyJwt" in body:
            ca.fail("privateKeyJwt", "is not supported by twistgw: use clientSecret")
        cs = ca.sub("clientSecret")
        inner = cs.mapping(body.get("clientSecret"), ("clientSecretRef", "disableClientSecret"))
        ref, disable = inner.get("clientSecretRef"), cs.boolean(inner, "disableClientSecret", False)
        read = cs
    if disable:
        if ref is not None:
            read.fail("clientSecretRef", "set clientSecretRef or disableClientSecret: true, not both")
        return None
    if ref is None:
        read.fail("clientSecretRef", "is required (a Secret with data.client-secret), or set"
                                     " disableClientSecret: true for a public client (PKCE only)")
        return None
    return secret_value(read, ref, "clientSecretRef", OAUTH_SECRET_KEY, namespace, secret)


def _path(read: Reader, raw: Mapping[str, Any], field: str, required: bool = False) -> str | None:
    value = read.string(raw, field, required)
    if value is None:
        return None
    if not value.startswith("/") or any(c in value for c in "?#") or any(ord(c) <= 32 for c in value):
        read.fail(field, f"must be a path starting with '/', without query or fragment, got {value!r}")
        return None
    return value


def _override(read: Reader, raw: Any) -> Override:
    r = read.sub("discoveryOverride")
    raw = r.mapping(raw, tuple(OVERRIDE_FIELDS) + tuple(OVERRIDE_REFUSED))
    for field, why in OVERRIDE_REFUSED.items():
        if field in raw:
            r.fail(field, f"is not supported by twistgw: {why}")
    values: list[tuple[str, Any]] = []
    for field, member in OVERRIDE_FIELDS.items():
        if field not in raw:
            continue
        if field in URL_OVERRIDES:
            url = r.url(raw, field)
            if url:
                values.append((member, url))
        else:
            values.append((member, r.strings(raw, field)))
    return Override(tuple(values))


def _refresh_policy(read: Reader, raw: Any, poll: float) -> float:
    """``jwksCacheRefreshPolicy`` → the least seconds between two key-set
    fetches caused by a token naming a key we do not have."""
    if raw is None:
        return float("inf")  # Gloo's default: never
    r = read.sub("jwksCacheRefreshPolicy")
    raw = r.mapping(raw, ("never", "always", "maxIdpReqPerPollingInterval"))
    if len(raw) != 1:
        r.fail((), "set exactly one of never, always or maxIdpReqPerPollingInterval")
        return float("inf")
    if "always" in raw:
        return 1.0  # at most one fetch a second even so: a storm of unknown kids is one fetch
    if "maxIdpReqPerPollingInterval" in raw:
        n = raw["maxIdpReqPerPollingInterval"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            r.fail("maxIdpReqPerPollingInterval", "must be a whole number >= 1")
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


def compile_session(read: Reader, raw: Any, namespace: str, secret: SecretLookup,
                    derived: bytes | None = None, secret_given: bool = False) -> SessionSpec | None:
    """``session`` (Gloo's UserSession). Neither ``cookie`` nor ``redis`` (or no
    ``session`` at all, as most of Gloo's OIDC guides write it) is Gloo's
    default, the cookie store; without ``cipherConfig`` its key is
    ``derived`` from the client secret."""
    raw = read.mapping(raw, SESSION_FIELDS)
    if raw.get("failOnFetchFailure", True) is not True:
        read.fail("failOnFetchFailure", "twistgw always fails closed when the session store is unreachable"
                                        " (503); omit it or set it to true")
    cookie = _cookie_options(read.sub("cookieOptions"), raw.get("cookieOptions"))
    key = None
    if "cipherConfig" in raw:
        cr = read.sub("cipherConfig")
        cc = cr.mapping(raw["cipherConfig"], ("keyRef",))
        key = secret_value(cr, cc.get("keyRef"), "keyRef", ENCRYPTION_SECRET_KEY, namespace, secret)
        if key is not None and len(key) != 32:
            cr.fail("keyRef", f"the key must be exactly 32 bytes (data.key), got {len(key)}")
            key = None
    if "cookie" in raw and "redis" in raw:
        read.fail((), "set one of cookie (tokens sealed in the cookie) or redis, not both")
        return None
    if "redis" not in raw:
        cr = read.sub("cookie")
        c = cr.mapping(raw.get("cookie"), ("allowRefreshing", "keyPrefix", "targetDomain"))
        if "targetDomain" in c:
            cr.fail("targetDomain", "is not supported by twistgw: route by domains instead")
        prefix = cr.string(c, "keyPrefix", default="") or ""
        if key is None and "cipherConfig" not in raw:
            key = derived
            # a clientSecretRef that did not resolve is reported where it is written
            if key is None and not secret_given:
                read.fail("cipherConfig", "is required for the cookie store without a client secret: the tokens"
                                          " are kept in the browser, encrypted and authenticated with this"
                                          " 32-byte key")
        if read.problems:
            return None
        return SessionSpec(cookie, "cookie", f"{prefix}_session" if prefix else "__session", key, None, prefix,
                           cr.boolean(c, "allowRefreshing", False), 0.0)
    rr = read.sub("redis")
    r = rr.mapping(raw["redis"], ("options", "keyPrefix", "cookieName", "allowRefreshing", "preExpiryBuffer",
                                  "targetDomain", "headerName"))
    for field in ("targetDomain", "headerName"):
        if field in r:
            rr.fail(field, "is not supported by twistgw")
    redis = _redis_options(rr.sub("options"), r.get("options"))
    name = rr.string(r, "cookieName", default=DEFAULT_REDIS_COOKIE) or DEFAULT_REDIS_COOKIE
    prefix = rr.string(r, "keyPrefix", default="") or ""
    buffer = rr.duration(r, "preExpiryBuffer", DEFAULT_PRE_EXPIRY, allow_zero=True)
    if read.problems or redis is None:
        return None
    return SessionSpec(cookie, "redis", name, key, redis, prefix, rr.boolean(r, "allowRefreshing", True), buffer)


def _cookie_options(read: Reader, raw: Any) -> CookieOptions:
    raw = read.mapping(raw, ("maxAge", "notSecure", "httpOnly", "path", "sameSite", "domain"))
    max_age = raw.get("maxAge", 2592000)
    if isinstance(max_age, bool) or not isinstance(max_age, int) or max_age < 0:
        read.fail("maxAge", "must be a whole number of seconds (0: a browser-session cookie)")
        max_age = 2592000
    same_site = raw.get("sameSite", "LaxMode")
    if same_site not in SAME_SITE:
        read.fail("sameSite", f"must be one of {', '.join(SAME_SITE)}, got {same_site!r}")
        same_site = "LaxMode"
    secure = not read.boolean(raw, "notSecure", False)
    if same_site == "NoneMode" and not secure:
        read.fail("sameSite", "NoneMode needs a Secure cookie: unset notSecure")
    path = raw.get("path", "/")
    if not isinstance(path, str) or (path and not path.startswith("/")):
        read.fail("path", "must be a path starting with '/' (or \"\" for no Path attribute)")
        path = "/"
    domain = read.string(raw, "domain")
    return CookieOptions(max_age, secure, read.boolean(raw, "httpOnly", True), path or None, domain,
                         SAME_SITE[same_site])


def _redis_options(read: Reader, raw: Any) -> RedisSpec | None:
    raw = read.mapping(raw, ("host", "db", "poolSize", "socketType", "tlsCertMountPath", "clustered"))
    clustered = read.boolean(raw, "clustered", False)
    socket_type = raw.get("socketType", "TCP")
    if socket_type not in ("TCP", "TLS"):
        read.fail("socketType", f"must be TCP or TLS, got {socket_type!r}")
    if "tlsCertMountPath" in raw and socket_type != "TLS":
        read.fail("tlsCertMountPath", "applies to socketType: TLS only")
    host = read.string(raw, "host", required=True)
    db, pool = raw.get("db", 0), raw.get("poolSize", 10)
    for field, value in (("db", db), ("poolSize", pool)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if field == "db" else 1):
            read.fail(field, "must be a whole number" + (" >= 0" if field == "db" else " >= 1"))
    if clustered and db not in (0, None) and not isinstance(db, bool):
        read.fail("db", f"must be 0 with clustered: true (a Redis Cluster has only database 0 and refuses SELECT),"
                        f" got {db!r}")
    if host is None:
        return None
    if host.startswith("unix://"):
        read.fail("host", "unix sockets are not supported by twistgw: give host:port")
        return None
    name, _, port = host.rpartition(":")
    if not name or not port.isdigit() or not 0 < int(port) < 65536:
        read.fail("host", f"must be host:port, got {host!r}")
        return None
    ca = _redis_ca(read, raw.get("tlsCertMountPath"), name.strip("[]")) if socket_type == "TLS" else None
    if read.problems:
        return None
    return RedisSpec(name.strip("[]"), int(port), db, pool, socket_type == "TLS", ca, clustered)


def _redis_ca(read: Reader, path: Any, host: str) -> bytes | None:
    """``tlsCertMountPath``: a PEM file of CA certificates, or a directory
    holding ``ca.crt`` (a mounted Secret); absent: the system's CAs."""
    ca = None
    if path is not None:
        if not isinstance(path, str) or not path:
            read.fail("tlsCertMountPath", "must be the path of a PEM CA file (or a directory with ca.crt)")
            return None
        file = Path(path) / "ca.crt" if Path(path).is_dir() else Path(path)
        try:
            ca = file.read_bytes()
        except OSError as exc:
            read.fail("tlsCertMountPath", f"cannot read {file}: {exc.strerror or exc}")
            return None
    try:
        client_tls(host, ca_pem=ca)
    except TLSSettingsError as exc:
        read.fail("tlsCertMountPath", str(exc))
    return ca


ATV_FIELDS = ("introspectionUrl", "introspection", "jwt", "userinfoUrl", "cacheTimeout", "requiredScopes",
              "dynamicMetadataFromClaims", "claimsToHeaders", "default")


def compile_access_token(raw: Any, read: Reader, source: str, namespace: str,
                         secret: SecretLookup) -> AccessTokenSpec | None:
    raw = read.mapping(raw, ATV_FIELDS + ("azure",))
    if "azure" in raw:
        read.fail("azure", "is not supported by twistgw: Microsoft Graph distributed claims are not implemented")
    kinds = [k for k in ("introspectionUrl", "introspection", "jwt") if k in raw]
    if len(kinds) != 1:
        read.fail((), "set exactly one of introspection, introspectionUrl or jwt")
        return None
    url = client_id = client_secret = user_attr = None
    jwt_spec = None
    if kinds[0] == "introspectionUrl":
        url = read.url(raw, "introspectionUrl", required=True)
    elif kinds[0] == "introspection":
        ir = read.sub("introspection")
        i = ir.mapping(raw["introspection"], ("introspectionUrl", "clientId", "clientSecretRef",
                                               "userIdAttributeName", "disableClientSecret"))
        url = ir.url(i, "introspectionUrl", required=True)
        client_id = ir.string(i, "clientId")
        user_attr = ir.string(i, "userIdAttributeName")
        disabled = ir.boolean(i, "disableClientSecret", False)
        if client_id and not disabled:
            client_secret = secret_value(ir, i.get("clientSecretRef"), "clientSecretRef", OAUTH_SECRET_KEY,
                                         namespace, secret)
        elif "clientSecretRef" in i:
            ir.fail("clientSecretRef", "needs clientId (and no disableClientSecret)")
    else:
        jwt_spec = _jwt(read.sub("jwt"), raw["jwt"])
    userinfo = read.url(raw, "userinfoUrl")
    cache = read.duration(raw, "cacheTimeout", DEFAULT_CACHE_TIMEOUT, allow_zero=True)
    sr = read.sub("requiredScopes")
    scopes = sr.mapping(raw.get("requiredScopes"), ("scope",))
    required = frozenset(sr.strings(scopes, "scope"))
    claims = claim_headers(read, raw.get("claimsToHeaders"), "claimsToHeaders")
    claims += metadata_headers(read, raw.get("dynamicMetadataFromClaims"), "dynamicMetadataFromClaims")
    if read.problems:
        return None
    return AccessTokenSpec(source, url, client_id, client_secret, user_attr, jwt_spec, userinfo, cache,
                           required, claims)


def _jwt(read: Reader, raw: Any) -> JwtSpec:
    raw = read.mapping(raw, ("remoteJwks", "localJwks", "issuer", "audiences"))
    remote = local = None
    refresh = 300.0
    if ("remoteJwks" in raw) == ("localJwks" in raw):
        read.fail((), "set exactly one of remoteJwks {url} or localJwks {inlineString}")
    if "remoteJwks" in raw:
        rr = read.sub("remoteJwks")
        r = rr.mapping(raw["remoteJwks"], ("url", "refreshInterval"))
        remote = rr.url(r, "url", required=True)
        refresh = rr.duration(r, "refreshInterval", 300.0)
    if "localJwks" in raw:
        lr = read.sub("localJwks")
        text = lr.string(lr.mapping(raw["localJwks"], ("inlineString",)), "inlineString", required=True)
        if text is not None:
            try:
                local = parse_local_key(text, "inlineString").keys
            except KeyProblem as exc:
                lr.fail("inlineString", str(exc))
    audiences = read.strings(raw, "audiences")
    return JwtSpec(read.string(raw, "issuer"), frozenset(audiences) or None, remote, refresh, local)


def new_problems() -> Problems:
    return Problems()
