"""The authorization code flow: starting a login, the callback, the code
exchange and the refresh.

A login in progress (state, nonce, PKCE verifier, the URL first asked for)
is kept in a cookie scoped to the callback path: sealed with the session
key (cookie store), or a random id naming a Redis key read once (Redis
store). So ``state`` is bound to the browser that started the login, lives
ten minutes, and is redeemed once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import quote, urlencode, urlsplit

from twistgw.sdk import RequestContext
from twistgw_extauth import AuthDeny
from twistgw_oidc import _idtoken
from twistgw_oidc._cookies import CookieOptions, SessionTooLarge, delete_cookie, set_cookie, split_cookies
from twistgw_oidc._http import Answer, CallFailed
from twistgw_oidc._options import OidcSpec, origin
from twistgw_oidc._session import LOGIN_TTL, RedisStore, Session, StoreDown, from_tokens, new_id

if TYPE_CHECKING:
    from twistgw_oidc._flow import OidcChecker


class ProviderDown(Exception):
    """The provider (discovery, keys or token endpoint) could not be reached."""


def can_redirect(spec: OidcSpec, ctx: RequestContext) -> bool:
    """A browser navigation: GET, ``Accept`` naming ``text/html``, no
    ``X-Requested-With``, and the AuthConfig not ``failOnRedirect``."""
    if spec.fail_on_redirect or ctx.method != "GET" or ctx.headers.hasHeader(b"x-requested-with"):
        return False
    return any(b"text/html" in v.lower() for v in ctx.headers.getRawHeaders(b"accept") or ())


def path_and_query(ctx: RequestContext) -> str:
    """The request's (normalised) path and query, as a URL path: it starts
    with one ``/`` (slashes are merged), so it is never a network-path reference."""
    query = "?" + ctx.query.decode("latin-1") if ctx.query else ""
    return quote(ctx.path, safe="/:@!$&()*+,;=-._~") + query


def original_url(spec: OidcSpec, ctx: RequestContext) -> str:
    """Where to come back after the login: this path on ``appUrl``'s origin
    when the request was for ``appUrl``'s host (a TLS-terminating proxy in
    front may make the scheme differ), else ``appUrl`` itself."""
    if ctx.host != (urlsplit(spec.app_url).hostname or "").lower():
        return spec.app_url
    return spec.app_origin + path_and_query(ctx)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _deny(status: int, body: bytes, reason: str, *headers: tuple[bytes, bytes]) -> AuthDeny:
    return AuthDeny(status, body, headers=((b"cache-control", b"no-store"), *headers), reason=f"oidc: {reason}")


def _login_cookie_options(ch: "OidcChecker") -> CookieOptions:
    c = ch.spec.session.cookie
    return CookieOptions(LOGIN_TTL, c.secure, True, ch.spec.callback_path, c.domain, "Lax")


def login_required(spec: OidcSpec) -> AuthDeny:
    return _deny(401, b"Login required", "no session, and this request cannot follow a redirect to log in",
                 (b"www-authenticate", f'Bearer realm="{spec.app_origin}"'.encode("latin-1")))


async def start(ch: "OidcChecker", ctx: RequestContext, cookies: Mapping[str, str]) -> AuthDeny:
    """No usable session: send a browser to the provider; 401 otherwise."""
    spec = ch.spec
    if not can_redirect(spec, ctx):
        return login_required(spec)
    doc = await ch.provider.get()
    if doc is None:
        return AuthDeny.failure(f"oidc: discovery of {spec.issuer_url} failed", 503)
    state, nonce, verifier = new_id(), new_id(), new_id() + new_id()
    login = {"s": state, "n": nonce, "v": verifier, "b": spec.binding, "x": ch.runtime.now() + LOGIN_TTL,
             "u": original_url(spec, ctx)}
    if isinstance(ch.store, RedisStore):
        value = new_id()
        try:
            await ch.store.put_login(value, login)
        except StoreDown as exc:
            return AuthDeny.failure(f"oidc: session store unreachable: {exc}", 503)
    else:
        value = ch.store.seal_login(ch.login_cookie, login)
    params = [("response_type", "code"), ("client_id", spec.client_id),
              ("redirect_uri", spec.redirect_uri), ("scope", " ".join(spec.scopes)),
              ("state", state), ("nonce", nonce),
              ("code_challenge", _b64(hashlib.sha256(verifier.encode("ascii")).digest())),
              ("code_challenge_method", "S256"), *spec.auth_params]
    endpoint = doc["authorization_endpoint"]
    url = endpoint + ("&" if "?" in endpoint else "?") + urlencode(params)
    return AuthDeny(302, b"", headers=((b"location", url.encode("ascii")), (b"cache-control", b"no-store"),
                                       (b"set-cookie", set_cookie(ch.login_cookie, value, _login_cookie_options(ch)))),
                    content_type=b"", reason="oidc: no session; login at the provider")


async def _take_login(ch: "OidcChecker", value: str) -> dict[str, Any] | None:
    if isinstance(ch.store, RedisStore):
        return await ch.store.take_login(value)
    return ch.store.open_login(ch.login_cookie, value)


async def callback(ch: "OidcChecker", ctx: RequestContext) -> AuthDeny:
    spec = ch.spec
    from twistgw_oidc._cookies import parse_cookie_header

    cookies = parse_cookie_header(ctx.headers.getRawHeaders(b"cookie") or ())
    clear = (b"set-cookie", delete_cookie(ch.login_cookie, _login_cookie_options(ch)))
    params: dict[str, str] = {}
    for k, v in ctx.query_params():
        if k in params:
            return _deny(400, b"Bad login callback", f"callback parameter {k!r} repeated", clear)
        params[k] = v
    value = cookies.get(ch.login_cookie)
    if ctx.method != "GET" or not value:
        return _deny(400, b"Login state missing or expired; open the page again",
                     "callback without this browser's login state", clear)
    try:
        login = await _take_login(ch, value)
    except StoreDown as exc:
        return AuthDeny.failure(f"oidc: session store unreachable: {exc}", 503)
    now = ch.runtime.now()
    state = params.get("state", "")
    if login is None or login.get("b") != spec.binding or not isinstance(login.get("s"), str) \
            or float(login.get("x", 0)) < now:
        return _deny(400, b"Login state missing or expired; open the page again", "login state unusable", clear)
    if not state or not hmac.compare_digest(state.encode("utf-8", "replace"), login["s"].encode("ascii")):
        return _deny(400, b"Login state does not match", "state is not this browser's", clear)
    if not isinstance(ch.store, RedisStore) and not ch.runtime.used_states.first_use(state, float(login["x"]), now):
        return _deny(400, b"Login state already used", "state replayed", clear)
    if "error" in params:
        return _deny(401, b"The identity provider did not log you in",
                     f"provider answered error {params['error'][:100]!r}", clear)
    # the code exchange (token endpoint, ID token keys, session store) as a child span of the request's
    span = ctx.tracer.child("oidc.code_exchange", **{"url.full": origin(spec.issuer_url)})
    try:
        answer = await _finish(ch, login, params, cookies, clear)
    except BaseException as exc:
        span.end(error=exc)
        raise
    span.end(error=answer.reason if isinstance(answer, AuthDeny) and answer.status >= 500 else None)
    return answer


async def _finish(ch: "OidcChecker", login: Mapping[str, Any], params: Mapping[str, str],
                  cookies: Mapping[str, str], clear: tuple[bytes, bytes]) -> AuthDeny:
    spec = ch.spec
    code = params.get("code")
    discovery = ch.provider
    doc = await discovery.get()
    if doc is None:
        return AuthDeny.failure(f"oidc: discovery of {spec.issuer_url} failed", 503)
    if "iss" in params and params["iss"] != doc["issuer"]:  # RFC 9207: a code from another provider
        return _deny(400, b"Login answer from another provider", f"callback iss {params['iss']!r}", clear)
    if not code:
        return _deny(400, b"Bad login callback", "no code", clear)
    try:
        answer = await exchange(ch, doc, {"grant_type": "authorization_code", "code": code,
                                          "redirect_uri": spec.redirect_uri,
                                          "code_verifier": str(login["v"])})
    except ProviderDown as exc:
        return AuthDeny.failure(f"oidc: token endpoint unreachable: {exc}", 503)
    tokens = answer.json() if answer.status == 200 else None
    if tokens is None:
        return _deny(401, b"Login failed", f"token endpoint refused the code ({answer.status})", clear)
    assert discovery.keys is not None
    try:
        claims = await _idtoken.validate(tokens.get("id_token"), discovery.keys, doc["issuer"], spec.client_id,
                                         str(login["n"]), ch.runtime.now())
    except _idtoken.KeysUnavailable as exc:
        return AuthDeny.failure(f"oidc: provider key set unavailable: {exc}", 503)
    except _idtoken.Invalid as exc:
        return _deny(401, b"Login failed", f"ID token refused: {exc}", clear)
    session = from_tokens(spec.binding, tokens, claims, ch.runtime.now())
    try:
        lines = await _store_new(ch, session, cookies)
    except StoreDown as exc:
        return AuthDeny.failure(f"oidc: session store unreachable: {exc}", 503)
    except SessionTooLarge as exc:
        return AuthDeny.failure(f"oidc: {exc}: use session.redis, or ask the provider for smaller tokens", 500)
    target = str(login["u"])
    if origin(target) != spec.app_origin:
        target = spec.app_url
    return AuthDeny(302, b"", headers=((b"location", target.encode("latin-1")), (b"cache-control", b"no-store"),
                                       clear, *((b"set-cookie", line) for line in lines)),
                    content_type=b"", reason=f"oidc: logged in {claims.get('sub')!r}")


async def _store_new(ch: "OidcChecker", session: Session, cookies: Mapping[str, str]) -> list[bytes]:
    """Store a new session under a new id (never one the browser sent:
    no session fixation) and return its Set-Cookie lines."""
    spec = ch.spec.session
    if isinstance(ch.store, RedisStore):
        session_id = new_id()
        await ch.store.save(session_id, session)
        return [set_cookie(spec.cookie_name, session_id, spec.cookie)]
    return split_cookies(spec.cookie_name, ch.store.seal(session), spec.cookie, dict(cookies))


def client_authentication(spec: OidcSpec, doc: Mapping[str, Any], form: dict[str, str]) -> dict[bytes, bytes]:
    """Authenticate the client as the provider's discovery document allows
    for its token endpoint (``client_secret_basic`` first): the headers to
    send; ``form`` gets the client's fields when they go in the body. The
    token and revocation endpoints use it alike.

    :raise ProviderDown: the provider allows neither way."""
    headers: dict[bytes, bytes] = {}
    methods = doc.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    if spec.client_secret is None:
        form["client_id"] = spec.client_id
    elif "client_secret_basic" in methods:
        pair = f"{quote(spec.client_id, safe='')}:{quote(spec.client_secret.decode('utf-8'), safe='')}"
        headers[b"Authorization"] = b"Basic " + base64.b64encode(pair.encode("utf-8"))
    elif "client_secret_post" in methods:
        form.update(client_id=spec.client_id, client_secret=spec.client_secret.decode("utf-8"))
    else:
        raise ProviderDown(f"the provider allows neither client_secret_basic nor client_secret_post ({methods})")
    return headers


async def exchange(ch: "OidcChecker", doc: Mapping[str, Any], form: dict[str, str]) -> Answer:
    """POST to the token endpoint, authenticating the client as the
    provider's discovery document allows (``client_secret_basic`` first)."""
    spec = ch.spec
    form = {**form, **dict(spec.token_params)}
    headers = client_authentication(spec, doc, form)
    try:
        return await ch.runtime.client().call("POST", doc["token_endpoint"], spec.timeout, form=form, headers=headers)
    except CallFailed as exc:
        raise ProviderDown(str(exc)) from None


async def refresh(ch: "OidcChecker", session: Session) -> Session | None:
    """The session with fresh tokens, or None when the provider refused the
    refresh token (the user must log in again).

    :raise ProviderDown: the provider could not be asked."""
    spec = ch.spec
    discovery = ch.provider
    doc = await discovery.get()
    if doc is None or discovery.keys is None:
        raise ProviderDown(f"discovery of {spec.issuer_url} failed")
    answer = await exchange(ch, doc, {"grant_type": "refresh_token", "refresh_token": session.refresh_token or ""})
    tokens = answer.json() if answer.status == 200 else None
    if tokens is None:
        return None
    now = ch.runtime.now()
    if "id_token" not in tokens:
        lifetime = tokens.get("expires_in")
        if not isinstance(lifetime, (int, float)) or isinstance(lifetime, bool) or lifetime <= 0:
            return None
        tokens = {**tokens, "id_token": session.id_token}
        claims = dict(session.claims, exp=now + lifetime)
    else:
        try:
            claims = await _idtoken.validate(tokens["id_token"], discovery.keys, doc["issuer"], spec.client_id,
                                             None, now)
        except _idtoken.KeysUnavailable as exc:
            raise ProviderDown(str(exc)) from None
        except _idtoken.Invalid:
            return None
        if claims.get("sub") != session.claims.get("sub"):
            return None
    fresh = from_tokens(spec.binding, tokens, claims, now, session)
    if "id_token" not in tokens or tokens["id_token"] == session.id_token:
        fresh.claims = dict(session.claims)
    return fresh
