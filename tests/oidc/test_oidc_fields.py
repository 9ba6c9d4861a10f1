"""oauth2 fields the field walk (tests/unit/test_field_walk.py) found with
no test asserting what they do: each is set here and its effect asserted,
on the compiled checker and on what it answers, in memory. Runs under
trial and pytest (listed in tests/inmemory.py).

The token endpoint's use of ``discoveryOverride`` (``authMethods``,
``tokenEndpoint``, ``jwksUri``, ``endSessionEndpoint``) over real HTTP is
in tests/oidc/test_oidc_discovery.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from twisted.trial import unittest

from twistgw import AuthAllow, AuthDeny, OptionsError
from twistgw_oidc import AccessTokenChecker, OAuth2Type, OidcChecker
from twistgw_oidc._cookies import split_cookies
from twistgw_oidc._options import OVERRIDE_REFUSED, Override
from twistgw_oidc._session import Session

from test_oidc_units import compile_oidc_checker, oidc, problems, scope
from test_oidc_warm_paths import T0, Clock, request


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _cookie(checker: OidcChecker, access_token: str = "at-1") -> str:
    claims = {"iss": checker.spec.issuer_url, "sub": "alice", "sid": "sid-1", "exp": int(T0 + 3600)}
    id_token = f"{_b64(b'{}')}.{_b64(json.dumps(claims).encode())}.c2ln"
    session = Session(checker.spec.binding, id_token, access_token, None, T0 + 3600, T0, claims)
    return f"{checker.spec.session.cookie_name}={checker.store.seal(session)}"


def _checker(**changes: Any) -> OidcChecker:
    checker = compile_oidc_checker(**changes)
    checker.runtime.now = Clock()
    return checker


class HeadersTests(unittest.TestCase):
    def test_use_bearer_schema_for_authorization(self) -> None:
        """headers.useBearerSchemaForAuthorization: the access token header is
        ``Bearer <token>`` (Gloo's default) or the bare token."""
        for bearer, expected in ((None, b"Bearer at-1"), (True, b"Bearer at-1"), (False, b"at-1")):
            headers: dict[str, Any] = {"accessTokenHeader": "authorization"}
            if bearer is not None:
                headers["useBearerSchemaForAuthorization"] = bearer
            checker = _checker(headers=headers)
            allowed = checker.check(request(cookie=_cookie(checker)))
            self.assertIsInstance(allowed, AuthAllow)
            self.assertEqual(dict(allowed.headers)[b"authorization"], expected)
        self.assertIn("must be true or false",
                      problems(oidc(headers={"useBearerSchemaForAuthorization": "yes"}))[
                          "oidcAuthorizationCode.headers.useBearerSchemaForAuthorization"])


class LogoutTests(unittest.TestCase):
    def logout(self, **changes: Any) -> AuthDeny:
        checker = _checker(logoutPath="/logout", afterLogoutUrl="https://app.example/bye", **changes)
        # the provider's document as discovery left it (discoveryOverride applied), fresh
        checker.provider.doc = checker.spec.override.apply({
            "issuer": checker.spec.issuer_url, "end_session_endpoint": "https://idp.example/end"})
        checker.provider.fetched_at = float("inf")
        answer = checker.check(request(path="/logout", cookie=_cookie(checker)))
        if not isinstance(answer, (AuthAllow, AuthDeny)):
            answer = self.successResultOf(answer)
        self.assertIsInstance(answer, AuthDeny)
        return answer

    def test_end_session_get_by_default(self) -> None:
        answer = self.logout()
        self.assertEqual(answer.status, 302)
        location = dict(answer.headers)[b"location"]
        self.assertTrue(location.startswith(b"https://idp.example/end?id_token_hint="), location)

    def test_end_session_properties_post_method(self) -> None:
        """endSessionProperties.methodType: PostMethod: the browser POSTs the
        logout to end_session_endpoint (a self-submitting form)."""
        answer = self.logout(endSessionProperties={"methodType": "PostMethod"})
        self.assertEqual(answer.status, 200)
        self.assertNotIn(b"location", dict(answer.headers))
        self.assertIn(b'<form method="post" action="https://idp.example/end">', answer.body)
        self.assertIn(b'name="post_logout_redirect_uri" value="https://app.example/bye"', answer.body)
        answer = self.logout(endSessionProperties={"methodType": "GetMethod"})
        self.assertEqual(answer.status, 302)
        self.assertIn("GetMethod or PostMethod", problems(oidc(endSessionProperties={"methodType": "PUT"}))[
            "oidcAuthorizationCode.endSessionProperties.methodType"])

    def test_discovery_override_end_session_endpoint(self) -> None:
        answer = self.logout(discoveryOverride={"endSessionEndpoint": "https://idp.example/other-end"})
        self.assertTrue(dict(answer.headers)[b"location"].startswith(b"https://idp.example/other-end?"))


class DiscoveryOverrideTests(unittest.TestCase):
    def test_list_overrides_compile_and_apply_as_lists(self) -> None:
        """authMethods (a list) once made compiling fail (an unhashable
        override); it now applies as the document's list."""
        checker = _checker(discoveryOverride={"authMethods": ["client_secret_post"],
                                              "jwksUri": "https://idp.example/keys"})
        doc = checker.spec.override.apply({"token_endpoint_auth_methods_supported": ["client_secret_basic"],
                                           "jwks_uri": "https://idp.example/jwks"})
        self.assertEqual(doc["token_endpoint_auth_methods_supported"], ["client_secret_post"])
        self.assertEqual(doc["jwks_uri"], "https://idp.example/keys")
        # equal overrides share one provider (discovery document, keys): the override is hashable
        again = _checker(discoveryOverride={"authMethods": ["client_secret_post"],
                                            "jwksUri": "https://idp.example/keys"})
        providers = checker.runtime.providers
        self.assertIs(providers.get("https://idp.example", checker.spec.override, 1, 1, 1, checker.runtime.client,
                                    checker.runtime.now),
                      providers.get("https://idp.example", again.spec.override, 1, 1, 1, checker.runtime.client,
                                    checker.runtime.now))
        self.assertEqual(hash(Override((("a", ("x",)),))), hash(Override((("a", ("x",)),))))

    def test_members_twistgw_never_reads_are_refused(self) -> None:
        fields = ("scopes", "responseTypes", "subjects", "idTokenAlgs", "claims")
        self.assertEqual(set(fields), set(OVERRIDE_REFUSED))
        for field in fields:
            got = problems(oidc(discoveryOverride={field: ["x"]}))
            self.assertIn("is not supported by twistgw", got[f"oidcAuthorizationCode.discoveryOverride.{field}"])

    def test_revocation_endpoint_is_read(self) -> None:
        """Issue 32 item 8: the logout revokes the tokens there
        (tests/oidc/test_oidc_logout_revocation.py)."""
        spec = compile_oidc_checker(discoveryOverride={"revocationEndpoint": "https://idp.example/revoke"}).spec
        self.assertEqual(spec.override.apply({})["revocation_endpoint"], "https://idp.example/revoke")
        got = problems(oidc(discoveryOverride={"revocationEndpoint": "ftp://idp.example/revoke"}))
        self.assertIn("absolute http(s) URL", got["oidcAuthorizationCode.discoveryOverride.revocationEndpoint"])


class RefreshPolicyTests(unittest.TestCase):
    def test_jwks_cache_refresh_policy(self) -> None:
        """jwksCacheRefreshPolicy: how often a token naming an unknown key
        may refetch the provider's key set (the refetch interval of the JWT
        plugin's key set, tests/jwt/test_jwt_remote.py)."""
        cases = ((None, float("inf")), ({"never": {}}, float("inf")), ({"always": {}}, 1.0),
                 ({"maxIdpReqPerPollingInterval": 4}, 15.0))
        for policy, refetch in cases:
            checker = _checker(discoveryPollInterval="60s", jwksCacheRefreshPolicy=policy)
            self.assertEqual((checker.spec.refetch_interval, checker.provider.refetch), (refetch, refetch))
            self.assertEqual(checker.provider.poll, 60.0)  # discoveryPollInterval
        got = problems(oidc(jwksCacheRefreshPolicy={"always": {}, "never": {}}))
        self.assertIn("exactly one", got["oidcAuthorizationCode.jwksCacheRefreshPolicy"])
        got = problems(oidc(jwksCacheRefreshPolicy={"maxIdpReqPerPollingInterval": 0}))
        self.assertIn(">= 1", got["oidcAuthorizationCode.jwksCacheRefreshPolicy.maxIdpReqPerPollingInterval"])


class ClientAuthenticationTests(unittest.TestCase):
    def test_client_authentication_client_secret(self) -> None:
        """clientAuthentication.clientSecret (Gloo's newer form of clientSecretRef / disableClientSecret)."""
        checker = _checker(clientSecretRef=None,
                           clientAuthentication={"clientSecret": {"clientSecretRef": {"name": "oauth",
                                                                                      "namespace": "default"}}})
        self.assertEqual(checker.spec.client_secret, b"s3cret")
        public = _checker(clientSecretRef=None, session={"cookie": {}, "cipherConfig": {"keyRef": {"name": "key"}}},
                          clientAuthentication={"clientSecret": {"disableClientSecret": True}})
        self.assertIsNone(public.spec.client_secret)
        got = problems(oidc(clientAuthentication={"clientSecret": {"clientSecretRef": {"name": "oauth"}}}))
        self.assertIn("not both", got["oidcAuthorizationCode.clientAuthentication"])
        got = problems(oidc(clientSecretRef=None, clientAuthentication={"privateKeyJwt": {}}))
        self.assertIn("use clientSecret", got["oidcAuthorizationCode.clientAuthentication.privateKeyJwt"])


class AccessTokenJwtTests(unittest.TestCase):
    def test_remote_jwks_refresh_interval(self) -> None:
        """accessTokenValidation.jwt.remoteJwks.refreshInterval: how long the
        key set is kept before it is fetched again (the JWT plugin's cache,
        tests/jwt/test_jwt_remote.py); 5 minutes unless set."""
        for interval, seconds in ((None, 300.0), ("2m", 120.0)):
            remote: dict[str, Any] = {"url": "https://idp.example/jwks"}
            if interval is not None:
                remote["refreshInterval"] = interval
            checker = OAuth2Type().compile({"accessTokenValidation": {"jwt": {"remoteJwks": remote}}}, scope())
            assert isinstance(checker, AccessTokenChecker) and checker.remote_keys is not None
            self.assertEqual(checker.remote_keys.spec.cache_duration, seconds)
            self.assertEqual(checker.remote_keys.spec.url, "https://idp.example/jwks")
        with self.assertRaises(OptionsError):
            OAuth2Type().compile({"accessTokenValidation": {"jwt": {"remoteJwks": {
                "url": "https://idp.example/jwks", "refreshInterval": "soon"}}}}, scope())


class SessionFieldTests(unittest.TestCase):
    def test_cookie_options_become_the_cookie_attributes(self) -> None:
        """session.cookieOptions: every field reaches the Set-Cookie line of the session."""
        checker = _checker(session={"cookie": {}, "cipherConfig": {"keyRef": {"name": "key", "namespace": "default"}},
                                    "cookieOptions": {"maxAge": 600, "notSecure": True, "httpOnly": False,
                                                      "path": "/app", "domain": "app.example",
                                                      "sameSite": "StrictMode"}})
        cookie = checker.spec.session.cookie
        self.assertEqual((cookie.max_age, cookie.secure, cookie.http_only, cookie.path, cookie.domain,
                          cookie.same_site), (600, False, False, "/app", "app.example", "Strict"))
        self.assertEqual(split_cookies("s", "v", cookie, {})[0],
                         b"s=v; Path=/app; Domain=app.example; Max-Age=600; SameSite=Strict")

    def test_redis_allow_refreshing(self) -> None:
        """session.redis.allowRefreshing (default true, as Gloo): false never uses the refresh token."""
        for value, expected in ((None, True), (False, False)):
            redis: dict[str, Any] = {"options": {"host": "127.0.0.1:6379"}}
            if value is not None:
                redis["allowRefreshing"] = value
            self.assertEqual(_checker(session={"redis": redis}).spec.session.allow_refreshing, expected)

    def test_refused_by_name(self) -> None:
        cases = {
            "oidcAuthorizationCode.autoMapFromMetadata": oidc(autoMapFromMetadata={}),
            "oidcAuthorizationCode.accessToken": oidc(accessToken={"claimsToHeaders": []}),
            "oidcAuthorizationCode.azure": oidc(azure={}),
            "oidcAuthorizationCode.session.cookie.targetDomain": oidc(session={
                "cookie": {"targetDomain": "x"}, "cipherConfig": {"keyRef": {"name": "key"}}}),
            "oidcAuthorizationCode.session.redis.targetDomain": oidc(session={
                "redis": {"options": {"host": "r:1"}, "targetDomain": "x"}}),
            "oidcAuthorizationCode.session.redis.headerName": oidc(session={
                "redis": {"options": {"host": "r:1"}, "headerName": "x-session"}}),
            "accessTokenValidation.azure": {"accessTokenValidation": {"introspectionUrl": "https://idp/i", "azure": {}}},
        }
        for field, raw in cases.items():
            self.assertIn("not supported by twistgw", problems(raw)[field])


class ClaimHeaderTests(unittest.TestCase):
    def test_oidc_dynamic_metadata_from_claims_are_headers(self) -> None:
        """dynamicMetadataFromClaims: twistgw has no dynamic metadata; each key is a request header."""
        checker = _checker(dynamicMetadataFromClaims={"x-subject": "sub"})
        allowed = checker.check(request(cookie=_cookie(checker), x_subject="forged"))
        self.assertIsInstance(allowed, AuthAllow)
        self.assertEqual(dict(allowed.headers)[b"x-subject"], b"alice")
        self.assertIn(b"x-subject", checker.owned_request_headers)


class IntrospectionFieldTests(unittest.TestCase):
    def test_introspection_without_client_credentials(self) -> None:
        """accessTokenValidation.introspectionUrl (no client authentication),
        and introspection.disableClientSecret (a clientId, no secret)."""
        bare = OAuth2Type().compile({"accessTokenValidation": {"introspectionUrl": "https://idp/i"}}, scope())
        assert isinstance(bare, AccessTokenChecker)
        self.assertEqual((bare.spec.introspection_url, bare.spec.client_id, bare.spec.client_secret),
                         ("https://idp/i", None, None))
        public = OAuth2Type().compile({"accessTokenValidation": {"introspection": {
            "introspectionUrl": "https://idp/i", "clientId": "rs", "disableClientSecret": True}}}, scope())
        assert isinstance(public, AccessTokenChecker)
        self.assertEqual((public.spec.client_id, public.spec.client_secret), ("rs", None))
        got = problems({"accessTokenValidation": {"introspection": {
            "introspectionUrl": "https://idp/i", "clientId": "rs", "disableClientSecret": True,
            "clientSecretRef": {"name": "oauth"}}}})
        self.assertIn("needs clientId", got["accessTokenValidation.introspection.clientSecretRef"])
