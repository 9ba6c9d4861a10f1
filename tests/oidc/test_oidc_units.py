"""In-memory tests of the oauth2 config type's pure parts: sealed cookies,
cookie splitting, ID token claim checks, the options and the small rules
(who may be redirected, what a cross-site logout looks like). Runs under
trial and pytest (listed in tests/inmemory.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.trial import unittest

from twistgw.sdk import AuthConfigInfo, Headers, NotChecked, OptionsError, OptionsScope, RequestContext, ResourceView
from twistgw_extauth import ConfigScope
from twistgw.api.types import SecretInfo
from twistgw_oidc import AccessTokenChecker, OAuth2Type, OidcChecker
from twistgw_oidc._cookies import (
    MAX_CHUNKS,
    MAX_COOKIE_VALUE,
    CookieOptions,
    Sealer,
    SessionTooLarge,
    joined_value,
    parse_cookie_header,
    split_cookies,
    without_cookies,
)
from twistgw_oidc._idtoken import Invalid, check_claims
from twistgw_oidc._login import can_redirect
from twistgw_oidc._logout import cross_site
from twistgw_oidc._session import UsedStates

from support.pki import TestCA

KEY = os.urandom(32)


class SealedCookieTests(unittest.TestCase):
    def setUp(self) -> None:
        self.sealer = Sealer(KEY)
        self.value = self.sealer.seal("__session", b'{"hello": "world"}')

    def test_round_trip(self) -> None:
        self.assertEqual(self.sealer.open("__session", self.value), b'{"hello": "world"}')

    def test_every_flipped_character_is_refused(self) -> None:
        for i in range(0, len(self.value), 7):
            c = "A" if self.value[i] != "A" else "B"
            self.assertIsNone(self.sealer.open("__session", self.value[:i] + c + self.value[i + 1:]), i)

    def test_truncated_is_refused(self) -> None:
        for n in (0, 1, 10, len(self.value) - 1):
            self.assertIsNone(self.sealer.open("__session", self.value[:n]))

    def test_other_purpose_or_key_is_refused(self) -> None:
        self.assertIsNone(self.sealer.open("other", self.value))
        self.assertIsNone(Sealer(os.urandom(32)).open("__session", self.value))

    def test_garbage_is_refused(self) -> None:
        for junk in ("", "!!!", "%00", "a" * 5000, "AQ"):
            self.assertIsNone(self.sealer.open("__session", junk))

    def test_key_must_be_32_bytes(self) -> None:
        self.assertRaises(ValueError, Sealer, b"short")

    def test_unused_low_bits_of_the_last_character_are_refused(self) -> None:
        """Issue 32 item 21: a sealed value whose last base64url character
        differs only in bits past the last byte decodes to the same bytes;
        it is a different cookie and is refused (one spelling per value)."""
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        for size in (17, 18):  # sealed lengths 46 and 47 bytes: a last group of 2 and of 3 characters
            value = self.sealer.seal("__session", b"x" * size)
            self.assertNotEqual(len(value) % 4, 0)
            self.assertEqual(self.sealer.open("__session", value), b"x" * size)
            last = alphabet.index(value[-1])
            for low in range(1, 16 if len(value) % 4 == 2 else 4):
                twin = value[:-1] + alphabet[last + low]
                self.assertIsNone(self.sealer.open("__session", twin), twin[-3:])
            # padding, and the other alphabet, are not this value either
            self.assertIsNone(self.sealer.open("__session", value + "=" * (-len(value) % 4)))


class CookieTests(unittest.TestCase):
    def test_parse(self) -> None:
        self.assertEqual(parse_cookie_header([b'a=1; b="2"; a=3; junk; =x']), {"a": "1", "b": "2"})

    def test_split_and_join(self) -> None:
        value = "x" * (MAX_COOKIE_VALUE * 2 + 10)
        lines = split_cookies("s", value, CookieOptions(), {})
        self.assertEqual(len(lines), 3)
        jar = {line.split(b"=", 1)[0].decode(): line.split(b"=", 1)[1].split(b";")[0].decode() for line in lines}
        self.assertEqual(joined_value(jar, "s"), value)

    def test_old_chunks_are_deleted(self) -> None:
        lines = split_cookies("s", "short", CookieOptions(), {"s": "a", "s.1": "b", "s.2": "c"})
        self.assertEqual([line.split(b";")[0] for line in lines], [b"s=short", b"s.1=", b"s.2="])
        self.assertIn(b"Max-Age=0", lines[1])

    def test_too_large_is_refused(self) -> None:
        self.assertRaises(SessionTooLarge, split_cookies, "s", "x" * (MAX_COOKIE_VALUE * MAX_CHUNKS + 1),
                          CookieOptions(), {})

    def test_without_cookies(self) -> None:
        self.assertEqual(without_cookies([b"s=1; s.1=2; app=3", b"x=4"], frozenset({"s"})), b"app=3; x=4")
        self.assertIsNone(without_cookies([b"s=1; s.1=2"], frozenset({"s"})))

    def test_attributes(self) -> None:
        line = split_cookies("s", "v", CookieOptions(60, True, True, "/", "example.org", "Strict"), {})[0]
        self.assertEqual(line, b"s=v; Path=/; Domain=example.org; Max-Age=60; Secure; HttpOnly; SameSite=Strict")
        line = split_cookies("s", "v", CookieOptions(0, False, False, None, None, None), {})[0]
        self.assertEqual(line, b"s=v")


CLAIMS = {"iss": "https://idp", "aud": "app", "sub": "alice", "exp": 2000, "iat": 1000, "nonce": "n1"}


class IdTokenClaimTests(unittest.TestCase):
    def check(self, now: float = 1500, expect_nonce: str | None = "n1", **changes: Any) -> None:
        claims = {**CLAIMS, **changes}
        for k, v in changes.items():
            if v is None:
                del claims[k]
        check_claims(claims, "https://idp", "app", expect_nonce, now)

    def test_good(self) -> None:
        self.check()
        self.check(aud=["app", "other"], azp="app")

    def test_bad(self) -> None:
        for changes in ({"iss": "https://idp/"}, {"iss": "https://IDP"}, {"aud": "other"}, {"aud": ["other"]},
                        {"aud": ["app", "other"]}, {"azp": "other"}, {"nonce": "n2"}, {"nonce": None},
                        {"exp": None}, {"iat": None}, {"sub": None}, {"sub": ""}, {"iat": 1700}, {"nbf": 1600}):
            self.assertRaises(Invalid, self.check, **changes)
        self.assertRaises(Invalid, self.check, now=2061)

    def test_refresh_needs_no_nonce(self) -> None:
        self.check(expect_nonce=None, nonce=None)
        self.assertRaises(Invalid, self.check, expect_nonce=None, nonce=5)


class UsedStateTests(unittest.TestCase):
    def test_once(self) -> None:
        used = UsedStates()
        self.assertTrue(used.first_use("s", 100, now=0))
        self.assertFalse(used.first_use("s", 100, now=1))
        self.assertTrue(used.first_use("s", 300, now=101))  # forgotten only once expired anyway


def ctx(method: str = "GET", **headers: str) -> RequestContext:
    h = Headers()
    for k, v in headers.items():
        h.addRawHeader(k.replace("_", "-").encode(), v.encode())
    return RequestContext(method, "/", headers=h)


class RulesTests(unittest.TestCase):
    def test_who_is_redirected(self) -> None:
        spec = compile_oidc_checker().spec
        self.assertTrue(can_redirect(spec, ctx(accept="text/html,application/xhtml+xml")))
        for c in (ctx(), ctx("POST", accept="text/html"), ctx("HEAD", accept="text/html"),
                  ctx(accept="application/json"), ctx(accept="text/html", x_requested_with="XMLHttpRequest")):
            self.assertFalse(can_redirect(spec, c))

    def test_cross_site(self) -> None:
        app = "http://app.example"
        self.assertFalse(cross_site(ctx(), app))
        self.assertFalse(cross_site(ctx(sec_fetch_site="same-origin", origin=app), app))
        self.assertFalse(cross_site(ctx(sec_fetch_site="none"), app))
        for c in (ctx(sec_fetch_site="cross-site"), ctx(sec_fetch_site="same-site"), ctx(origin="http://evil"),
                  ctx(origin="null")):
            self.assertTrue(cross_site(c, app))


# ---------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------

SECRETS = {
    ("default", "oauth"): SecretInfo("default", "oauth", "extauth.solo.io/oauth", {"client-secret": b"s3cret"}),
    ("default", "key"): SecretInfo("default", "key", "Opaque", {"key": KEY}),
    ("default", "shortkey"): SecretInfo("default", "shortkey", "Opaque", {"key": b"x" * 16}),
}


def scope(fail_on_redirect: bool | None = None) -> ConfigScope:
    resources = ResourceView({}, SECRETS, {}, None)
    ac = AuthConfigInfo("default", "oidc", (), None, fail_on_redirect)
    return ConfigScope(OptionsScope("default", "default/vs", None, resources), "default", ac, "config_0", 0,
                       ("AuthConfig", "default", "oidc"), ("spec", "configs", 0, "oauth2"))


def oidc(**changes: Any) -> dict[str, Any]:
    body = {"issuerUrl": "https://idp.example", "clientId": "app", "clientSecretRef": {"name": "oauth"},
            "appUrl": "https://app.example", "callbackPath": "/callback",
            "session": {"cookie": {}, "cipherConfig": {"keyRef": {"name": "key"}}}}
    body.update(changes)
    return {"oidcAuthorizationCode": {k: v for k, v in body.items() if v is not None}}


def compile_oidc_checker(**changes: Any) -> OidcChecker:
    checker = OAuth2Type().compile(oidc(**changes), scope())
    assert isinstance(checker, OidcChecker)
    return checker


def problems(raw: Any) -> dict[str, str]:
    try:
        OAuth2Type().compile(raw, scope())
    except OptionsError as exc:
        return {p.dotted_path(): p.reason for p in exc.problems}
    raise AssertionError("compiled")


class OptionsTests(unittest.TestCase):
    def test_good(self) -> None:
        checker = compile_oidc_checker(scopes=["email", "openid"], headers={"idTokenHeader": "x-id-token"},
                                       identityToken={"claimsToHeaders": [{"claim": "email", "header": "x-email"}]})
        self.assertEqual(checker.spec.scopes, ("openid", "email"))
        self.assertEqual(set(checker.owned_request_headers), {b"x-id-token", b"x-email"})
        self.assertEqual(checker.spec.session.cookie_name, "__session")
        self.assertEqual(checker.spec.client_secret, b"s3cret")

    def test_all_problems_at_once(self) -> None:
        got = problems(oidc(issuerUrl="ftp://x", clientId=None, callbackPath="callback", bogus=1))
        self.assertEqual(set(got), {"oidcAuthorizationCode.issuerUrl", "oidcAuthorizationCode.clientId",
                                    "oidcAuthorizationCode.callbackPath", "oidcAuthorizationCode.bogus"})

    def test_cookie_store_needs_a_key_without_a_client_secret(self) -> None:
        got = problems(oidc(session={"cookie": {}}, clientSecretRef=None, disableClientSecret=True))
        self.assertIn("is required for the cookie store without a client secret",
                      got["oidcAuthorizationCode.session.cipherConfig"])
        # a dangling clientSecretRef is one problem, where it is written, not also a missing key
        got = problems(oidc(session={"cookie": {}}, clientSecretRef={"name": "missing"}))
        self.assertEqual(set(got), {"oidcAuthorizationCode.clientSecretRef"})
        got = problems(oidc(session={"cookie": {}, "redis": {"options": {"host": "127.0.0.1:6379"}}}))
        self.assertIn("not both", got["oidcAuthorizationCode.session"])
        got = problems(oidc(session={"cookie": {}, "cipherConfig": {"keyRef": {"name": "shortkey"}}}))
        self.assertIn("exactly 32 bytes", got["oidcAuthorizationCode.session.cipherConfig.keyRef"])

    def test_gloo_guide_sessions_default_to_the_cookie_store(self) -> None:
        # most of Gloo's OIDC guides write no session, or only cookieOptions
        for session in (None, {"cookieOptions": {"notSecure": True}}, {"cookie": {}}):
            checker = compile_oidc_checker(session=session)
            spec = checker.spec.session
            self.assertEqual(spec.kind, "cookie")
            self.assertEqual(spec.cookie.secure, session is None or "cookieOptions" not in session)
            # the key is derived from the client secret, bound to issuer and client id
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.kdf.hkdf import HKDF
            info = (b"twistgw oidc session cookie v1\0" + checker.spec.issuer_url.encode() + b"\0"
                    + checker.spec.client_id.encode())
            self.assertEqual(spec.key, HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info)
                             .derive(b"s3cret"))
        other = compile_oidc_checker(session={"cookie": {}}, clientId="another-client")
        self.assertNotEqual(other.spec.session.key, spec.key)

    def test_refused_fields(self) -> None:
        got = problems(oidc(parseCallbackPathAsRegex=True, sessionIdHeaderName="x",
                            authEndpointQueryParams={"state": "x", "prompt": "login"},
                            session={"redis": {"options": {"host": "unix:///tmp/r"}}, "failOnFetchFailure": False}))
        self.assertEqual(set(got), {
            "oidcAuthorizationCode.parseCallbackPathAsRegex", "oidcAuthorizationCode.sessionIdHeaderName",
            "oidcAuthorizationCode.authEndpointQueryParams.state", "oidcAuthorizationCode.session.redis.options.host",
            "oidcAuthorizationCode.session.failOnFetchFailure"})

    def test_secret_problems(self) -> None:
        got = problems(oidc(clientSecretRef={"name": "missing"}))
        self.assertIn("dangling reference", got["oidcAuthorizationCode.clientSecretRef"])
        got = problems(oidc(clientSecretRef=None))
        self.assertIn("disableClientSecret", got["oidcAuthorizationCode.clientSecretRef"])
        self.assertIsNone(compile_oidc_checker(clientSecretRef=None, disableClientSecret=True).spec.client_secret)

    def test_headers_the_gateway_owns_are_refused(self) -> None:
        got = problems(oidc(headers={"idTokenHeader": "cookie", "accessTokenHeader": "bad header"}))
        self.assertEqual(len(got), 2)

    def test_one_kind_only(self) -> None:
        self.assertIn("", problems({**oidc(), "accessTokenValidation": {}}))
        self.assertIn("oauth2", problems({"oauth2": {}}))

    def test_redis_session(self) -> None:
        checker = compile_oidc_checker(session={"redis": {"options": {"host": "127.0.0.1:6379", "db": 2},
                                                          "cookieName": "sid", "keyPrefix": "app:"},
                                                "cookieOptions": {"maxAge": 0, "notSecure": True,
                                                                  "sameSite": "StrictMode"}})
        s = checker.spec.session
        self.assertEqual((s.kind, s.cookie_name, s.key_prefix, s.allow_refreshing), ("redis", "sid", "app:", True))
        self.assertEqual((s.cookie.max_age, s.cookie.secure, s.cookie.same_site), (0, False, "Strict"))

    def test_a_redis_session_not_looked_up_in_a_dry_run_is_still_not_forwarded(self) -> None:
        """Issue 32 item 13: admitted, the session's cookie would not reach
        the backend; the dry run says so (explain's headers sent upstream)."""
        checker = compile_oidc_checker(session={"redis": {"options": {"host": "127.0.0.1:6379"},
                                                          "cookieName": "sid"}})
        answer = checker.dry_run(ctx(Cookie="sid=abc; theme=dark"))
        self.assertIsInstance(answer, NotChecked)
        self.assertEqual(answer.headers, ((b"cookie", b"theme=dark"),))
        alone = checker.dry_run(ctx(Cookie="sid=abc"))
        self.assertEqual(alone.headers, ((b"cookie", None),))

    def test_redis_tls_socket_type(self) -> None:
        ca = TestCA().pem
        directory = Path(tempfile.mkdtemp(prefix="twistgw-oidc-ca-"))
        self.addCleanup(shutil.rmtree, directory, True)
        (directory / "ca.crt").write_bytes(ca)
        for path in (str(directory), str(directory / "ca.crt")):  # a mounted Secret, or the file itself
            checker = compile_oidc_checker(session={"redis": {"options": {
                "host": "redis.internal:6380", "socketType": "TLS", "tlsCertMountPath": path}}})
            redis = checker.spec.session.redis
            assert redis is not None
            self.assertEqual((redis.tls, redis.ca_pem, str(redis)), (True, ca, "rediss://redis.internal:6380/0"))
        system = compile_oidc_checker(session={"redis": {"options": {"host": "r:6380", "socketType": "TLS"}}})
        self.assertEqual((system.spec.session.redis.tls, system.spec.session.redis.ca_pem), (True, None))
        got = problems(oidc(session={"redis": {"options": {"host": "r:1", "socketType": "TLS",
                                                           "tlsCertMountPath": str(directory / "nope.pem")}}}))
        self.assertIn("cannot read", got["oidcAuthorizationCode.session.redis.options.tlsCertMountPath"])
        got = problems(oidc(session={"redis": {"options": {"host": "r:1", "tlsCertMountPath": str(directory)}}}))
        self.assertIn("socketType: TLS only", got["oidcAuthorizationCode.session.redis.options.tlsCertMountPath"])
        got = problems(oidc(session={"redis": {"options": {"host": "r:1", "socketType": "UNIX"}}}))
        self.assertIn("must be TCP or TLS", got["oidcAuthorizationCode.session.redis.options.socketType"])

    def test_redis_cluster(self) -> None:
        """twistgw's session.redis.options.clustered: host is a seed of a Redis Cluster, db must be 0."""
        checker = compile_oidc_checker(session={"redis": {"options": {"host": "redis:6379", "clustered": True,
                                                                      "poolSize": 2}}})
        redis = checker.spec.session.redis
        assert redis is not None
        self.assertEqual((redis.clustered, redis.config().clustered, str(redis)),
                         (True, True, "redis://redis:6379/0 (a Redis Cluster)"))
        got = problems(oidc(session={"redis": {"options": {"host": "r:1", "clustered": True, "db": 2}}}))
        self.assertIn("must be 0 with clustered: true", got["oidcAuthorizationCode.session.redis.options.db"])
        got = problems(oidc(session={"redis": {"options": {"host": "r:1", "clustered": "yes"}}}))
        self.assertIn("oidcAuthorizationCode.session.redis.options.clustered", got)

    def test_fail_on_redirect(self) -> None:
        checker = OAuth2Type().compile(oidc(), scope(fail_on_redirect=True))
        self.assertFalse(can_redirect(checker.spec, ctx(accept="text/html")))

    def test_access_token_validation(self) -> None:
        checker = OAuth2Type().compile({"accessTokenValidation": {
            "introspection": {"introspectionUrl": "https://idp/introspect", "clientId": "rs",
                              "clientSecretRef": {"name": "oauth"}, "userIdAttributeName": "sub"},
            "cacheTimeout": "30s", "requiredScopes": {"scope": ["read"]},
            "dynamicMetadataFromClaims": {"x-user": "sub"}}}, scope())
        self.assertIsInstance(checker, AccessTokenChecker)
        self.assertEqual((checker.spec.cache_timeout, checker.spec.required_scopes), (30.0, frozenset({"read"})))
        self.assertEqual(checker.owned_request_headers, (b"x-user",))
        got = problems({"accessTokenValidation": {"jwt": {"localJwks": {"inlineString": "{}"}}, "userinfoUrl": "x"}})
        self.assertEqual(set(got), {"accessTokenValidation.jwt.localJwks.inlineString",
                                    "accessTokenValidation.userinfoUrl"})


# ---------------------------------------------------------------------------
# The worked example of docs/oidc.md, through the real extauth plugin
# ---------------------------------------------------------------------------

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "oidc")


class WorkedExampleTests(unittest.TestCase):
    def setUp(self) -> None:
        import twistgw_extauth
        import twistgw_rbac
        from twistgw.sdk.testing import ChainTester
        from twistgw_oidc import OidcPlugin

        self.tester = ChainTester.from_directory(
            EXAMPLE, [("extauth", twistgw_extauth.ExtAuthPlugin), ("oidc", OidcPlugin), ("rbac", twistgw_rbac)],
            dry_run=True)

    async def test_a_script_without_a_session_gets_401(self) -> None:
        r = await self.tester.request("POST", "http://shop.example.com/orders", {"Accept": "application/json"})
        self.assertEqual((r.status, r.body), (401, b"Login required"))
        self.assertIn((b"www-authenticate", b'Bearer realm="https://shop.example.com"'), r.response_headers)

    async def test_the_id_token_and_email_headers_are_the_gateways(self) -> None:
        r = await self.tester.request("POST", "http://shop.example.com/orders",
                                      {"Accept": "application/json", "X-Id-Token": "forged", "x-user-email": "x"})
        self.assertIsNotNone(r.ctx)
        assert r.ctx is not None
        self.assertFalse(r.ctx.headers.hasHeader(b"x-id-token"))
        self.assertFalse(r.ctx.headers.hasHeader(b"x-user-email"))


class AppPathTests(unittest.TestCase):
    def test_paths_are_relative_to_app_url(self) -> None:
        spec = compile_oidc_checker(appUrl="https://app.example/shop/", logoutPath="/logout").spec
        self.assertEqual((spec.callback_path, spec.logout_path), ("/shop/callback", "/shop/logout"))
        self.assertEqual(spec.redirect_uri, "https://app.example/shop/callback")
        spec = compile_oidc_checker(appUrl="https://app.example:8443").spec
        self.assertEqual(spec.redirect_uri, "https://app.example:8443/callback")
