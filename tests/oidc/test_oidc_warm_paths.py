"""The warm paths of the oauth2 config type, in memory: a valid cookie-store
session admitted from the remembered admissions (and what every request
still checks: the endpoints, the clock, the provider's logouts), and an
introspected access token decided from the cached answer, never past its
expiry. Runs under trial and pytest (listed in tests/inmemory.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial import unittest

from twistgw.sdk import Headers, RequestContext
from twistgw_extauth import AuthAllow, AuthDeny
from twistgw_oidc import AccessTokenChecker, OAuth2Type, OidcChecker
from twistgw_oidc._session import Session

from test_oidc_units import compile_oidc_checker, scope

T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def request(path: str = "/", cookie: str | None = None, **headers: str) -> RequestContext:
    h = Headers()
    if cookie is not None:
        h.addRawHeader(b"Cookie", cookie.encode())
    for k, v in headers.items():
        h.addRawHeader(k.replace("_", "-").encode(), v.encode())
    return RequestContext("GET", path, headers=h)


class SessionAdmissionTests(unittest.TestCase):
    def setUp(self) -> None:
        self.checker = self.make()

    def make(self, **changes: Any) -> OidcChecker:
        changes.setdefault("headers", {"idTokenHeader": "x-id-token"})
        changes.setdefault("identityToken", {"claimsToHeaders": [{"claim": "email", "header": "x-email"}]})
        checker = compile_oidc_checker(**changes)
        self.clock = Clock()
        checker.runtime.now = self.clock
        return checker

    def cookie(self, checker: OidcChecker, sid: str = "sid-1", lifetime: float = 3600, other: str = "theme=dark"
               ) -> str:
        claims = {"iss": checker.spec.issuer_url, "sub": "alice", "email": "alice@example.org", "sid": sid,
                  "exp": int(T0 + lifetime)}
        id_token = f"{_b64(b'{}')}.{_b64(json.dumps(claims).encode())}.c2ln"
        session = Session(checker.spec.binding, id_token, "at", None, T0 + lifetime, T0, claims)
        name = checker.spec.session.cookie_name
        return f"{name}={checker.store.seal(session)}; {other}"

    def test_a_valid_session_is_admitted_and_the_answer_remembered(self) -> None:
        cookie = self.cookie(self.checker)
        first = self.checker.check(request(cookie=cookie))
        self.assertIsInstance(first, AuthAllow)
        self.assertEqual(first.principal, "alice")
        headers = dict(first.headers)
        self.assertEqual(headers[b"cookie"], b"theme=dark")  # the session cookie is not forwarded
        self.assertEqual(headers[b"x-email"], b"alice@example.org")
        self.assertEqual(len(self.checker.admissions.entries), 1)
        again = self.checker.check(request(cookie=cookie))
        self.assertIs(again, first)
        with self.assertRaises(TypeError):  # shared between requests: read-only
            again.state["claims"] = {}  # type: ignore[index]

    def test_other_cookies_make_another_entry(self) -> None:
        self.checker.check(request(cookie=self.cookie(self.checker)))
        answer = self.checker.check(request(cookie=self.cookie(self.checker, other="theme=light")))
        self.assertEqual(dict(answer.headers)[b"cookie"], b"theme=light")
        self.assertEqual(len(self.checker.admissions.entries), 2)

    def test_never_used_once_the_session_expired(self) -> None:
        cookie = self.cookie(self.checker, lifetime=60)
        self.assertIsInstance(self.checker.check(request(cookie=cookie)), AuthAllow)
        self.clock.now = T0 + 59.9
        self.assertIsInstance(self.checker.check(request(cookie=cookie)), AuthAllow)
        self.clock.now = T0 + 60
        refused = self.checker.check(request(cookie=cookie))  # no refresh token, not a browser: 401
        self.assertIsInstance(refused, Deferred)
        self.assertEqual(self.successResultOf(refused).status, 401)
        self.assertEqual(self.checker.admissions.entries, {})

    def test_never_used_past_the_cookie_max_age(self) -> None:
        checker = self.make(session={"cookie": {}, "cipherConfig": {"keyRef": {"name": "key"}},
                                     "cookieOptions": {"maxAge": 30}})
        cookie = self.cookie(checker, lifetime=3600)
        self.assertIsInstance(checker.check(request(cookie=cookie)), AuthAllow)
        self.clock.now = T0 + 31
        self.assertEqual(self.successResultOf(checker.check(request(cookie=cookie))).status, 401)

    def test_a_session_the_provider_logged_out_is_refused_at_once(self) -> None:
        cookie = self.cookie(self.checker, sid="sid-7")
        self.assertIsInstance(self.checker.check(request(cookie=cookie)), AuthAllow)
        self.checker.runtime.revoke(self.checker.spec.binding, "other-sid", T0 + 600)
        self.assertIsInstance(self.checker.check(request(cookie=cookie)), AuthAllow)
        self.checker.runtime.revoke(self.checker.spec.binding, "sid-7", T0 + 600)
        self.assertEqual(self.successResultOf(self.checker.check(request(cookie=cookie))).status, 401)
        self.assertEqual(self.checker.admissions.entries, {})

    def test_the_endpoints_are_answered_whatever_the_cookie(self) -> None:
        cookie = self.cookie(self.checker)
        self.checker.check(request(cookie=cookie))
        logout = self.checker.check(request(path=self.checker.spec.logout_path, cookie=cookie)) \
            if self.checker.spec.logout_path else None
        if logout is not None:
            self.assertNotIsInstance(logout, AuthAllow)
        callback = self.checker.check(request(path=self.checker.spec.callback_path, cookie=cookie))
        self.assertIsInstance(callback, Deferred)
        self.assertNotIsInstance(self.successResultOf(callback), AuthAllow)

    def test_a_tampered_cookie_is_never_taken_for_a_remembered_one(self) -> None:
        cookie = self.cookie(self.checker)
        self.checker.check(request(cookie=cookie))
        name, _, rest = cookie.partition("=")
        flipped = name + "=" + ("A" if rest[5] != "A" else "B").join((rest[:5], rest[6:]))
        self.assertEqual(self.successResultOf(self.checker.check(request(cookie=flipped))).status, 401)

    def test_appending_claim_headers_keep_no_admissions(self) -> None:
        checker = self.make(identityToken={"claimsToHeaders": [{"claim": "email", "header": "x-email",
                                                                "append": True}]})
        cookie = self.cookie(checker)
        first = checker.check(request(cookie=cookie, x_email="a@b"))
        self.assertEqual(dict(first.headers)[b"x-email"], b"a@b,alice@example.org")
        self.assertEqual(checker.admissions.entries, {})
        second = checker.check(request(cookie=cookie, x_email="c@d"))
        self.assertEqual(dict(second.headers)[b"x-email"], b"c@d,alice@example.org")

    def test_bounded(self) -> None:
        self.checker.admissions.SIZE = 3  # type: ignore[misc]
        for i in range(5):
            self.checker.check(request(cookie=self.cookie(self.checker, other=f"n={i}")))
        self.assertEqual(len(self.checker.admissions.entries), 3)


class IntrospectionWarmPathTests(unittest.TestCase):
    def setUp(self) -> None:
        checker = OAuth2Type().compile({"accessTokenValidation": {
            "introspection": {"introspectionUrl": "https://idp.example/introspect", "clientId": "rs",
                              "clientSecretRef": {"name": "oauth"}},
            "cacheTimeout": "10m", "requiredScopes": {"scope": ["read"]},
            "dynamicMetadataFromClaims": {"x-user": "sub"}}}, scope())
        assert isinstance(checker, AccessTokenChecker)
        self.checker = checker
        self.clock = Clock()
        checker.runtime.now = self.clock
        self.asked: list[str] = []

        async def validate(this: AccessTokenChecker, token: str, tracer: Any = None) -> Any:
            self.asked.append(token)
            return AuthDeny(401, reason="asked the provider again")

        self.patch(AccessTokenChecker, "_validate", validate)

    def test_a_cached_token_is_decided_once_then_looked_up(self) -> None:
        self.checker.cache.put("tok", {"active": True, "sub": "svc", "scope": "read write"}, T0, 600, T0 + 3600)
        first = self.checker.check(request(authorization="Bearer tok"))
        self.assertIsInstance(first, AuthAllow)
        self.assertEqual((first.principal, dict(first.headers)), ("svc", {b"x-user": b"svc"}))
        self.assertIs(self.checker.check(request(authorization="Bearer tok")), first)
        self.assertEqual(self.asked, [])

    def test_decisions_are_remembered_too_and_checked(self) -> None:
        self.checker.cache.put("ro", {"active": True, "sub": "svc", "scope": "write"}, T0, 600)
        self.checker.cache.put("gone", None, T0, 600)
        for _ in range(2):
            self.assertEqual(self.checker.check(request(authorization="Bearer ro")).status, 403)
            self.assertEqual(self.checker.check(request(authorization="Bearer gone")).status, 401)
        self.assertEqual(self.asked, [])

    def test_never_past_the_token_expiry(self) -> None:
        self.checker.cache.put("tok", {"active": True, "sub": "svc", "scope": "read"}, T0, 600, T0 + 30)
        self.assertIsInstance(self.checker.check(request(authorization="Bearer tok")), AuthAllow)
        self.clock.now = T0 + 30
        again = self.checker.check(request(authorization="Bearer tok"))
        self.assertEqual(self.successResultOf(again).reason, "asked the provider again")
        self.assertEqual(self.asked, ["tok"])

    def test_never_past_the_cache_timeout(self) -> None:
        self.checker.cache.put("tok", {"active": True, "sub": "svc", "scope": "read"}, T0, 600, T0 + 3600)
        self.assertIsInstance(self.checker.check(request(authorization="Bearer tok")), AuthAllow)
        self.clock.now = T0 + 600
        self.successResultOf(self.checker.check(request(authorization="Bearer tok")))
        self.assertEqual(self.asked, ["tok"])

    def test_two_authorization_headers_are_refused_even_when_one_is_known(self) -> None:
        self.checker.cache.put("tok", {"active": True, "sub": "svc", "scope": "read"}, T0, 600)
        self.checker.check(request(authorization="Bearer tok"))
        ctx = request(authorization="Bearer tok")
        ctx.headers.addRawHeader(b"Authorization", b"Bearer tok")
        self.assertEqual(self.checker.check(ctx).status, 401)


class LocalJwksTests(unittest.TestCase):
    """``accessTokenValidation.jwt.localJwks``: access tokens verified against
    an inline key set, with no call anywhere (the JWT plugin's verification)."""

    def setUp(self) -> None:
        import jwt as pyjwt
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.pyjwt = pyjwt
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = json.loads(pyjwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        jwks = json.dumps({"keys": [dict(public, kid="k1", alg="RS256", use="sig")]})
        checker = OAuth2Type().compile({"accessTokenValidation": {
            "jwt": {"localJwks": {"inlineString": jwks}, "issuer": "https://idp.example", "audiences": ["api"]},
            "requiredScopes": {"scope": ["read"]},
            "claimsToHeaders": [{"claim": "sub", "header": "x-user"}]}}, scope())
        assert isinstance(checker, AccessTokenChecker)
        self.checker = checker
        self.clock = Clock()
        checker.runtime.now = self.clock

    def token(self, key: Any = None, **changes: Any) -> str:
        claims = {"iss": "https://idp.example", "aud": "api", "sub": "svc-1", "scope": "read write",
                  "iat": int(T0) - 10, "exp": int(T0) + 300}
        claims.update(changes)
        return self.pyjwt.encode({k: v for k, v in claims.items() if v is not None}, key or self.key,
                                 algorithm="RS256", headers={"kid": "k1"})

    def check(self, token: str) -> Any:
        found = self.checker.check(request(authorization="Bearer " + token))
        return self.successResultOf(found) if isinstance(found, Deferred) else found

    def test_a_token_signed_by_the_inline_key_is_admitted(self) -> None:
        allowed = self.check(self.token())
        self.assertIsInstance(allowed, AuthAllow)
        self.assertEqual((allowed.principal, dict(allowed.headers)), ("svc-1", {b"x-user": b"svc-1"}))

    def test_every_other_token_is_refused(self) -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        for token, status in ((self.token(key=other), 401), (self.token(iss="https://evil.example"), 401),
                              (self.token(aud="other"), 401), (self.token(exp=int(T0) - 120), 401),
                              (self.token(scope="write"), 403)):
            self.assertEqual(self.check(token).status, status, token)
        hs = self.pyjwt.encode({"iss": "https://idp.example", "aud": "api", "sub": "x", "exp": int(T0) + 60},
                               "secret-bytes-long-enough-for-hs256!", algorithm="HS256", headers={"kid": "k1"})
        self.assertEqual(self.check(hs).status, 401)
