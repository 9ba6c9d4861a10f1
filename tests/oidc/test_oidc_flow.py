"""OIDC login through the gateway against a real OpenID provider
(oidc-provider), with a scripted browser (cookies and redirects by hand):
the flow, sessions in cookies and Redis, refresh, logout, and the attacks
the issue lists. The gateway is its own process; see ``stack.py``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from typing import Any, Iterator
from urllib.parse import parse_qs, urlencode, urlsplit
from urllib.request import urlopen

import jwt
import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from oidc_support import Browser, Response, login, new_ec_key, new_rsa_key, seen
from stack import Stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: Any) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("oidc-flow"))
    yield s
    s.close()


@pytest.fixture(autouse=True)
def no_tampering(stack: Stack) -> Iterator[None]:
    stack.tamperer.rewrite = None
    yield
    stack.tamperer.rewrite = None


def start(stack: Stack, browser: Browser, path: str) -> tuple[Response, dict[str, list[str]]]:
    """Open ``path``, follow to the provider's login page: (page, auth params)."""
    first = browser.get(stack.url(path))
    assert first.status == 302, (first, first.body)
    params = parse_qs(urlsplit(first.location).query)
    return browser.follow(first), {k: v[0] for k, v in params.items()}


def callback_url(stack: Stack, browser: Browser, path: str, user: str = "alice") -> str:
    """Log in at the provider; the callback URL it sends back (not yet opened)."""
    page, _ = start(stack, browser, path)
    return browser.until_gateway(browser.login_at_idp(page, user), stack.host).location


# ---------------------------------------------------------------------------
# The flow
# ---------------------------------------------------------------------------


def test_login_cookie_store(stack: Stack) -> None:
    b = Browser()
    first = b.get(stack.url("/cookie/hello?x=1"))
    assert first.status == 302
    auth = {k: v[0] for k, v in parse_qs(urlsplit(first.location).query).items()}
    assert first.location.startswith(stack.idp.issuers["a"] + "/auth?")
    assert auth["response_type"] == "code" and auth["client_id"] == "app"
    assert auth["code_challenge_method"] == "S256" and len(auth["code_challenge"]) == 43
    assert len(auth["state"]) >= 43 and len(auth["nonce"]) >= 43
    assert auth["redirect_uri"] == stack.url("/cookie/callback")
    assert set(auth["scope"].split()) == {"openid", "email", "groups", "offline_access"}
    back, final = login(b, stack.url("/cookie/hello?x=1"), stack.host)
    got = seen(final)
    assert final.json()["path"] == "/cookie/hello?x=1"
    assert got["x-user-email"] == ["alice@example.org"]
    claims = jwt.decode(got["x-id-token"][0], options={"verify_signature": False})
    assert claims["sub"] == "alice" and claims["iss"] == stack.idp.issuers["a"]
    assert got["x-access-token"][0].startswith("Bearer ")
    assert "c_session" not in " ".join(got.get("cookie", []))
    # the token request went through discoveryOverride.tokenEndpoint, with PKCE
    form = stack.tamperer.seen[-1]["form"]
    assert form["grant_type"] == "authorization_code" and len(form["code_verifier"]) >= 43
    assert stack.tamperer.seen[-1]["headers"]["Authorization"].startswith("Basic ")
    # the session serves the next requests without the provider
    again = b.get(stack.url("/cookie/again"))
    assert seen(again)["x-user-email"] == ["alice@example.org"]


def test_client_secret_post_and_extra_query_params(stack: Stack) -> None:
    # issuer b's discovery document offers only client_secret_post: the client
    # authenticates in the form, never with Basic; authEndpointQueryParams go
    # on the authorization redirect, tokenEndpointQueryParams in the token request
    doc = json.loads(urlopen(stack.idp.issuers["b"] + "/.well-known/openid-configuration").read())
    assert doc["token_endpoint_auth_methods_supported"] == ["client_secret_post"]
    b = Browser()
    first = b.get(stack.url("/b/post"))
    assert first.status == 302
    assert parse_qs(urlsplit(first.location).query)["ui_locales"] == ["en"]
    before = len(stack.token_b.seen)
    _, final = login(b, stack.url("/b/post"), stack.host)
    assert seen(final)["x-user-email"] == ["alice@example.org"]
    request = stack.token_b.seen[before]
    assert "Authorization" not in request["headers"]
    assert request["form"]["client_id"] == "app-b" and request["form"]["client_secret"] == "app-b-secret-1"
    assert request["form"]["x_gateway"] == "twistgw"
    assert request["form"]["grant_type"] == "authorization_code"


def test_other_cookies_reach_the_backend(stack: Stack) -> None:
    b = Browser()
    login(b, stack.url("/cookie/x"), stack.host)
    b.cookies("localhost")["app_pref"] = "dark"
    got = seen(b.get(stack.url("/cookie/x")))
    assert got["cookie"] == ["app_pref=dark"]


def test_login_redis_store_and_restart(stack: Stack) -> None:
    b = Browser()
    _, final = login(b, stack.url("/redis/page"), stack.host)
    assert seen(final)["x-user-email"] == ["alice@example.org"]
    session_id = b.cookies("localhost")["r_session"]
    assert 40 <= len(session_id) <= 50  # a random id, no token in the cookie
    assert stack.redis.command("KEYS", "twistgw-test:session:*")
    stack.restart_gateway()
    assert seen(b.get(stack.url("/redis/after-restart")))["x-user-email"] == ["alice@example.org"]


def test_requests_that_cannot_follow_a_redirect_get_401(stack: Stack) -> None:
    b = Browser()
    for method, headers in (("POST", {}), ("GET", {"Accept": "application/json"}),
                            ("GET", {"X-Requested-With": "XMLHttpRequest"}), ("DELETE", {})):
        r = b.request(method, stack.url("/cookie/api"), headers=headers)
        assert r.status == 401, (method, headers, r)
        assert r.header("location") is None


def test_claims_feed_rbac(stack: Stack) -> None:
    alice, bob = Browser(), Browser()
    login(alice, stack.url("/cookie/x"), stack.host)
    login(bob, stack.url("/cookie/x"), stack.host, user="bob")
    assert alice.get(stack.url("/admin/panel")).status == 200
    denied = bob.get(stack.url("/admin/panel"))
    assert (denied.status, denied.body) == (403, b"RBAC: access denied")


def test_logout_then_login_again(stack: Stack) -> None:
    b = Browser()
    login(b, stack.url("/cookie/x"), stack.host)
    old = b.cookies("localhost")["c_session"]
    out = b.get(stack.url("/cookie/logout?post_logout_redirect_uri=https://evil.example/"))
    assert out.status == 302
    end = urlsplit(out.location)
    assert out.location.startswith(stack.idp.issuers["a"] + "/session/end?")
    q = {k: v[0] for k, v in parse_qs(end.query).items()}
    assert q["post_logout_redirect_uri"] == stack.url("/bye")  # configuration only
    assert "id_token_hint" in q
    assert "c_session" not in b.cookies("localhost")
    # the provider asks to confirm; then back to afterLogoutUrl
    page = b.follow(out)
    form = dict(re.findall(r'name="(\w+)" value="([^"]*)"', page.body.decode()))
    done = b.post_form(stack.idp.issuers["a"] + "/session/end/confirm", {**form, "logout": "yes"})
    assert done.location == stack.url("/bye")
    # the old cookie value no longer admits (replayed after logout)
    replay = Browser()
    replay.cookies("localhost")["c_session"] = old
    assert replay.get(stack.url("/cookie/x")).status == 302
    assert b.get(stack.url("/cookie/x")).status == 302  # logged out
    page, _ = start(stack, b, "/cookie/x")
    assert b"Sign in" in page.body  # the provider's session ended too: a real login again
    back = b.until_gateway(b.login_at_idp(page), stack.host)
    assert seen(b.follow(b.get(back.location)))["x-user-email"] == ["alice@example.org"]


def test_redis_logout_deletes_the_session(stack: Stack) -> None:
    b = Browser()
    login(b, stack.url("/redis/x"), stack.host)
    sid = b.cookies("localhost")["r_session"]
    assert b.get(stack.url("/redis/logout")).status == 302
    thief = Browser()
    thief.cookies("localhost")["r_session"] = sid
    assert thief.get(stack.url("/redis/x")).status == 302


def test_cross_site_logout_is_refused(stack: Stack) -> None:
    b = Browser()
    login(b, stack.url("/cookie/x"), stack.host)
    for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}):
        r = b.get(stack.url("/cookie/logout"), headers=headers)
        assert r.status == 403
        assert seen(b.get(stack.url("/cookie/x")))["x-user-email"] == ["alice@example.org"]


def test_front_channel_logout_by_sid(stack: Stack) -> None:
    for prefix in ("redis", "cookie"):
        b = Browser()
        _, final = login(b, stack.url(f"/{prefix}/x"), stack.host)
        sid = jwt.decode(seen(final)["x-id-token"][0], options={"verify_signature": False})["sid"]
        wrong = Browser().get(stack.url(f"/{prefix}/fcl?" + urlencode({"iss": "https://evil", "sid": sid})))
        assert wrong.status == 400
        r = Browser().get(stack.url(f"/{prefix}/fcl?" + urlencode({"iss": stack.idp.issuers["a"], "sid": sid})))
        assert r.status == 200
        assert b.get(stack.url(f"/{prefix}/x")).status == 302, prefix


def test_refresh_redis(stack: Stack) -> None:
    b = Browser()
    _, final = login(b, stack.url("/short/x"), stack.host)
    first = seen(final)["x-access-token"]
    time.sleep(2.2)
    after = seen(b.get(stack.url("/short/y")))
    assert after["x-access-token"] != first
    assert seen(b.get(stack.url("/short/z")))["x-access-token"] == after["x-access-token"]
    # session.redis.options.db: the session is in database 1, not 0
    key = "twistgw-short:session:" + hashlib.sha256(b.cookies("localhost")["s_session"].encode()).hexdigest()
    assert stack.redis.command("-n", "1", "EXISTS", key) == "1"
    assert stack.redis.command("-n", "0", "EXISTS", key) == "0"


def test_refresh_cookie(stack: Stack) -> None:
    """With the cookie store, the refreshed session's cookie comes on the
    answer to the request that refreshed it (no redirect to itself), a GET
    or a POST alike; the next request uses it (no second refresh)."""
    b = Browser()
    login(b, stack.url("/cshort/x"), stack.host)
    old = b.cookies("localhost")["cs_session"]
    time.sleep(2.2)
    got = b.get(stack.url("/cshort/y"))
    assert got.status == 200, got
    first = seen(got)
    assert first["x-user-email"] == ["alice@example.org"]
    assert any(line.startswith("cs_session=") for line in got.header_values("set-cookie"))
    renewed = b.cookies("localhost")["cs_session"]
    assert renewed != old
    again = b.get(stack.url("/cshort/z"))  # the renewed cookie: no refresh, no new cookie
    assert again.status == 200 and again.header_values("set-cookie") == []
    assert seen(again)["x-access-token"] == first["x-access-token"]
    time.sleep(2.2)
    posted = b.post_form(stack.url("/cshort/form"), {"q": "1"})  # a form post is refreshed in place too
    assert posted.status == 200, posted
    assert seen(posted)["x-user-email"] == ["alice@example.org"]
    assert seen(posted)["x-access-token"] != first["x-access-token"]
    assert b.cookies("localhost")["cs_session"] not in (old, renewed)


def test_failed_refresh_starts_a_new_login(stack: Stack) -> None:
    b = Browser()
    login(b, stack.url("/short/x"), stack.host)
    sid = b.cookies("localhost")["s_session"]
    time.sleep(2.2)
    # revoke the refresh token at the provider: the next refresh is refused
    key = "twistgw-short:session:" + hashlib.sha256(sid.encode()).hexdigest()
    token = json.loads(stack.redis.command("-n", "1", "GET", key))["r"]
    assert token
    # revoked at the provider: the next refresh is refused
    revoked = b.post_form(stack.idp.issuers["a"] + "/token/revocation", {"token": token},
                          headers={"Authorization": "Basic c2hvcnQtYXBwOnNob3J0LXNlY3JldC0x"}, cookies=False)
    assert revoked.status == 200
    r = b.get(stack.url("/short/y"))
    assert r.status == 302 and r.location.startswith(stack.idp.issuers["a"] + "/auth?")
    assert b.cookies("localhost").get("s_session") in (None, sid)


# ---------------------------------------------------------------------------
# Attacks
# ---------------------------------------------------------------------------


def test_state_forged_missing_replayed(stack: Stack) -> None:
    b = Browser()
    url = callback_url(stack, b, "/cookie/x")
    parts = urlsplit(url)
    q = {k: v[0] for k, v in parse_qs(parts.query).items()}
    forged = b.get(f"{stack.gw}{parts.path}?" + urlencode({**q, "state": "A" * 43}))
    assert forged.status == 400
    assert "c_session" not in b.cookies("localhost")
    # the login cookie was spent by the forged attempt: the real one is refused too (state is single use)
    assert b.get(url).status == 400
    b2 = Browser()
    url2 = callback_url(stack, b2, "/cookie/x")
    missing = {k: v[0] for k, v in parse_qs(urlsplit(url2).query).items() if k != "state"}
    assert b2.get(f"{stack.gw}/cookie/callback?" + urlencode(missing)).status == 400
    # a callback in another browser (no login cookie): refused
    b3 = Browser()
    url3 = callback_url(stack, b3, "/cookie/x")
    assert Browser().get(url3).status == 400
    ok = b3.get(url3)
    assert ok.status == 302 and "c_session" in b3.cookies("localhost")
    # replayed with the same login cookie: refused
    b4 = Browser()
    url4 = callback_url(stack, b4, "/cookie/x")
    saved = dict(b4.cookies("localhost"))
    assert any("_login_" in k for k in saved)
    assert b4.get(url4).status == 302
    replay = Browser()
    replay.jar["localhost"] = saved
    assert replay.get(url4).status == 400


def test_state_replayed_redis(stack: Stack) -> None:
    b = Browser()
    url = callback_url(stack, b, "/redis/x")
    login_cookie = dict(b.cookies("localhost"))
    assert b.get(url).status == 302
    replay = Browser()
    replay.jar["localhost"] = login_cookie
    assert replay.get(url).status == 400


def test_code_replayed(stack: Stack) -> None:
    b = Browser()
    url = callback_url(stack, b, "/cookie/x")
    assert b.get(url).status == 302
    # a new login in the same browser, but the old code: the provider refuses it
    b2 = Browser()
    fresh = urlsplit(callback_url(stack, b2, "/cookie/x"))
    q = {k: v[0] for k, v in parse_qs(fresh.query).items()}
    q["code"] = parse_qs(urlsplit(url).query)["code"][0]
    r = b2.get(f"{stack.gw}/cookie/callback?" + urlencode(q))
    assert r.status == 401
    assert "c_session" not in b2.cookies("localhost")


@pytest.mark.parametrize("attack", ["nonce", "aud", "iss", "alg-none", "alg-hs256", "other-key", "ec-key",
                                    "expired", "no-signature"])
def test_forged_id_tokens(stack: Stack, attack: str) -> None:
    idp = stack.idp

    def rewrite(claims: dict[str, Any], header: dict[str, Any]) -> str:
        if attack == "nonce":
            return idp.sign("a", {**claims, "nonce": "not-the-one"})
        if attack == "aud":
            return idp.sign("a", {**claims, "aud": "someone-else"})
        if attack == "iss":
            return idp.sign("a", {**claims, "iss": idp.issuers["b"]})
        if attack == "alg-none":
            return jwt.encode(claims, None, algorithm="none", headers={"kid": "a-1"})
        if attack == "alg-hs256":  # the public key as an HMAC secret
            pem = idp.keys["a"].public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
            head = base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "kid": "a-1"}).encode()).rstrip(b"=")
            body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=")
            sig = base64.urlsafe_b64encode(hmac.new(pem, head + b"." + body, hashlib.sha256).digest()).rstrip(b"=")
            return (head + b"." + body + b"." + sig).decode()
        if attack == "other-key":
            return idp.sign("a", claims, key=new_rsa_key())
        if attack == "ec-key":
            return idp.sign("a", claims, key=new_ec_key(), alg="ES256")
        if attack == "expired":
            return idp.sign("a", {**claims, "exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200})
        token = idp.sign("a", claims)
        return token.rsplit(".", 1)[0] + "."

    stack.tamperer.rewrite = rewrite
    b = Browser()
    r = b.get(callback_url(stack, b, "/cookie/x"))
    assert r.status == 401, (attack, r.body)
    assert "c_session" not in b.cookies("localhost")
    assert b.get(stack.url("/cookie/x")).status == 302


def test_open_redirects(stack: Stack) -> None:
    # the URL first asked for: another Host, or a path that looks like a host
    for path, host in (("/cookie/x", "evil.example"), ("/cookie//evil.example/x", None)):
        b = Browser()
        headers = {"Host": host} if host else {}
        first = b.get(stack.url("/cookie/x") if host else stack.gw + path, headers=headers)
        if host:  # a login started under another Host name comes back to appUrl
            assert first.status == 302
        page = b.follow(first)
        back = b.until_gateway(b.login_at_idp(page), stack.host)
        final = b.get(back.location)
        assert final.status == 302
        assert final.location == (stack.gw if host else stack.gw + "/cookie/evil.example/x"), final.location


def test_session_fixation(stack: Stack) -> None:
    # an attacker plants a session id (Redis) or cookie (cookie store) before the victim logs in
    for prefix, name in (("redis", "r_session"), ("cookie", "c_session")):
        b = Browser()
        planted = "A" * 43
        b.cookies("localhost")[name] = planted
        login(b, stack.url(f"/{prefix}/x"), stack.host)
        assert b.cookies("localhost")[name] != planted
        attacker = Browser()
        attacker.cookies("localhost")[name] = planted
        assert attacker.get(stack.url(f"/{prefix}/x")).status == 302


def test_tampered_and_truncated_cookies(stack: Stack) -> None:
    b = Browser()
    login(b, stack.url("/cookie/x"), stack.host)
    good = b.cookies("localhost")["c_session"]
    for bad in (good[:-1], good[:20], good[:-2] + ("A" if good[-2] != "A" else "B") + good[-1], good + "AAAA",
                "", "%00", "x" * 5000):
        evil = Browser()
        evil.cookies("localhost")["c_session"] = bad
        r = evil.get(stack.url("/cookie/x"))
        assert r.status == 302, bad[:30]


def test_second_providers_code_at_the_first_callback(stack: Stack) -> None:
    b = Browser()
    url_b = callback_url(stack, b, "/b/x")  # issuer b's answer, for /b/callback
    q = {k: v[0] for k, v in parse_qs(urlsplit(url_b).query).items()}
    # the same browser also started a login at a
    start(stack, b, "/cookie/x")
    r = b.get(f"{stack.gw}/cookie/callback?" + urlencode(q))
    assert r.status == 400
    assert "c_session" not in b.cookies("localhost")
    # and b's own callback still works once
    assert b.get(url_b).status == 302
    assert seen(b.get(stack.url("/b/x")))["x-user-email"] == ["alice@example.org"]
    # a's session cookie is never taken as b's, nor b's as a's
    assert b.get(stack.url("/cookie/x")).status == 302


def test_provider_down(stack: Stack) -> None:
    b = Browser()
    url = callback_url(stack, b, "/redis/x")
    stack.idp.stop()
    try:
        r = b.get(url)
        assert r.status == 503
        assert "r_session" not in b.cookies("localhost")
    finally:
        old = dict(stack.idp.issuers)
        stack.idp.start()
        assert stack.idp.issuers == old


def test_redis_down_fails_closed(stack: Stack) -> None:
    b = Browser()
    login(b, stack.url("/redis/x"), stack.host)
    stack.redis.freeze()
    try:
        r = b.get(stack.url("/redis/x"))
        assert r.status == 503
        assert Browser().get(stack.url("/redis/new")).status == 503
    finally:
        stack.redis.thaw()
    assert seen(b.get(stack.url("/redis/x")))["x-user-email"] == ["alice@example.org"]


def test_redis_stopped_then_back(stack: Stack) -> None:
    b = Browser()
    login(b, stack.url("/redis/x"), stack.host)
    stack.redis.stop()
    try:
        assert b.get(stack.url("/redis/x")).status == 503  # refused connections: closed, not open
    finally:
        stack.redis.start()  # the same port, empty (no persistence)
    wait_for_status(b, stack.url("/redis/x"), 302)  # reconnected; the session is gone: a new login
    # still logged in at the provider: the login goes through without a form, to a new session
    final = b.follow(b.get(stack.url("/redis/x")))
    assert seen(final)["x-user-email"] == ["alice@example.org"]


def wait_for_status(b: Browser, url: str, status: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = b.get(url).status
        if got == status:
            return
        assert time.monotonic() < deadline, f"still {got}"
        time.sleep(0.2)
