"""The config types in the gateway's chain, in memory (``ChainTester`` with
the ``extauth`` dispatcher and the ``authtypes`` plugin): what the backend
receives, mixes of types with and without ``booleanExpr``, forged
metadata headers, and configuration errors located in the AuthConfig."""

from __future__ import annotations

from typing import Any

import pytest

from twistgw import ConfigError
from twistgw.testing import ChainTester
from twistgw_authtypes import AuthTypesPlugin
from twistgw_extauth import ExtAuthPlugin

from authtypes_helpers import htpasswd
from support.trial import TestCase

PLUGINS = [("extauth", ExtAuthPlugin), ("authtypes", AuthTypesPlugin)]

SALT, HASH = "TYiryv0/", "8BvzLUO9IfGPGGsPnAgSu1"  # Gloo's guide: user / password

BASE = """apiVersion: v1
kind: Secret
type: extauth.solo.io/apikey
metadata: {name: infra-apikey, namespace: gloo-system}
stringData: {api-key: N2YwMDIxZTEtNGUzNS1jNzgz, user: alice, user-email: alice@example.com}
---
apiVersion: v1
kind: Secret
type: extauth.solo.io/apikey
metadata: {name: ops-apikey, namespace: gloo-system}
stringData: {api-key: b3BzLWtleS0xMjM0NTY3ODk}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: petstore, namespace: gloo-system}
spec:
  virtualHost:
    domains: ["*"]
    options:
      extauth: {configRef: {name: auth, namespace: gloo-system}}
    routes:
    - matchers: [{prefix: /public}]
      directResponseAction: {status: 200, body: "public"}
      options:
        extauth: {disable: true}
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200, body: "ok"}
---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {name: auth, namespace: gloo-system}
spec:
"""

APIKEY = """  - name: key
    apiKeyAuth:
      apiKeySecretRefs: [{name: infra-apikey}, {name: ops-apikey}]
      headersFromMetadataEntry:
        x-user-email: {name: user-email}
"""

BASIC = f"""  - name: pw
    basicAuth:
      apr:
        users:
          user: {{salt: "{SALT}", hashedPassword: "{HASH}"}}
"""

ALICE_KEY = ("api-key", "N2YwMDIxZTEtNGUzNS1jNzgz")
OPS_KEY = ("api-key", "b3BzLWtleS0xMjM0NTY3ODk")
USER_BASIC = ("Authorization", "Basic dXNlcjpwYXNzd29yZA==")  # user:password
WRONG_BASIC = ("Authorization", "Basic dXNlcjp3cm9uZw==")  # user:wrong


def make_tester(configs: str, expr: str | None = None) -> ChainTester:
    spec = (f"  booleanExpr: {expr!r}\n" if expr else "") + "  configs:\n" + configs
    return ChainTester.from_yaml(BASE + spec, PLUGINS)


async def get(t: ChainTester, *headers: tuple[str, str], path: str = "/pets") -> Any:
    return await t.request("GET", f"http://petstore.example.com{path}", headers=list(headers))


class ApiKeyChainTests(TestCase):
    async def test_admitted_key_header_removed_metadata_forwarded(self) -> None:
        result = await get(make_tester(APIKEY), ALICE_KEY, ("X-User-Email", "forged@evil.example"))
        self.assertEqual(result.status, 200)
        forwarded = result.forwarded_headers
        self.assertIsNone(forwarded.getRawHeaders(b"api-key"))
        self.assertEqual(forwarded.getRawHeaders(b"x-user-email"), [b"alice@example.com"])
        self.assertEqual(result.ctx.principal, "alice")

    async def test_forged_metadata_header_removed_where_extauth_is_off(self) -> None:
        result = await get(make_tester(APIKEY), ("x-user-email", "forged@evil.example"), path="/public")
        self.assertEqual(result.status, 200)
        self.assertIsNone(result.forwarded_headers.getRawHeaders(b"x-user-email"))

    async def test_key_without_metadata_forwards_no_header(self) -> None:
        result = await get(make_tester(APIKEY), OPS_KEY, ("x-user-email", "forged@evil.example"))
        self.assertEqual((result.status, result.ctx.principal), (200, "ops-apikey"))
        self.assertIsNone(result.forwarded_headers.getRawHeaders(b"x-user-email"))

    @pytest.mark.parametrize("headers", [
        pytest.param((), id="missing"),
        pytest.param((("api-key", "nope"),), id="wrong"),
        pytest.param((ALICE_KEY, ("API-KEY", "N2YwMDIxZTEtNGUzNS1jNzgz")), id="duplicated-case"),
        pytest.param((("api-key", ""),), id="empty"),
    ])
    async def test_refused(self, headers: tuple) -> None:
        result = await get(make_tester(APIKEY), *headers)
        self.assertEqual((result.status, result.body, result.decided_by), (401, b"", "extauth"))


class MixTests(TestCase):
    async def test_key_then_basic_both_must_admit(self) -> None:
        t = make_tester(APIKEY + BASIC)
        both = await get(t, ALICE_KEY, USER_BASIC)
        self.assertEqual(both.status, 200)
        self.assertEqual(both.ctx.principal, "alice")  # the first config that names one
        self.assertEqual(both.ctx.state["extauth"]["identities"], {"key": "alice", "pw": "user"})
        self.assertIsNone(both.forwarded_headers.getRawHeaders(b"authorization"))
        self.assertIsNone(both.forwarded_headers.getRawHeaders(b"api-key"))
        only_key = await get(t, ALICE_KEY, WRONG_BASIC)
        self.assertEqual(only_key.status, 401)
        self.assertIn((b"www-authenticate", b'Basic realm=""'), only_key.response_headers)

    async def test_boolean_expr_either(self) -> None:
        t = make_tester(APIKEY + BASIC, "key || pw")
        self.assertEqual((await get(t, ALICE_KEY)).status, 200)
        basic_only = await get(t, USER_BASIC)
        self.assertEqual((basic_only.status, basic_only.ctx.principal), (200, "user"))
        self.assertEqual((await get(t, WRONG_BASIC)).status, 401)
        self.assertEqual((await get(t)).status, 401)

    async def test_boolean_expr_negation_names_no_typed_user(self) -> None:
        t = make_tester(APIKEY + BASIC, "key && !pw")
        result = await get(t, ALICE_KEY, ("Authorization", "Basic " + "bm9ib2R5OnB3"))  # nobody:pw
        self.assertEqual((result.status, result.ctx.principal), (200, "alice"))
        self.assertIn((await get(t, ALICE_KEY, USER_BASIC)).status, (401, 403))

    async def test_htpasswd_user_and_key(self) -> None:
        salt, hashed = htpasswd("ann", "s:e:c")
        users = f"""  - name: pw
    basicAuth:
      encryption: {{apr: {{}}}}
      userList: {{users: {{ann: {{salt: "{salt}", hashedPassword: "{hashed}"}}}}}}
"""
        t = make_tester(APIKEY + users)
        import base64

        creds = ("Authorization", "Basic " + base64.b64encode(b"ann:s:e:c").decode())
        self.assertEqual((await get(t, OPS_KEY, creds)).status, 200)


class ConfigErrorTests(TestCase):
    def test_problems_are_located_in_the_auth_config(self) -> None:
        bad = """  - apiKeyAuth: {apiKeySecretRefs: [{name: gone}], hmac: {}}
  - basicAuth: {apr: {users: {user: {salt: "s", hashedPassword: "h"}}}}
  - passThroughAuth: {grpc: {address: "a:1", retryPolicy: {numRetries: -2}}}
"""
        with pytest.raises(ConfigError) as exc:
            make_tester(bad)
        fields = sorted(i.field for i in exc.value.issues)
        self.assertEqual(fields, ["spec.configs[0].apiKeyAuth.apiKeySecretRefs[0]",
                                  "spec.configs[0].apiKeyAuth.hmac",
                                  "spec.configs[1].basicAuth.apr.users.user",
                                  "spec.configs[2].passThroughAuth.grpc.retryPolicy.numRetries"])


POLICY_MAP = """---
apiVersion: v1
kind: ConfigMap
metadata: {name: allow-get-users, namespace: gloo-system}
data:
  policy.rego: |
    package test

    default allow = false
    allow {
        startswith(input.http_request.path, "/api/pets")
        input.http_request.method == "GET"
    }
    allow {
        input.http_request.path == "/api/pets/2"
        input.http_request.method in {"GET", "DELETE"}
    }
    allow {
        input.http_request.headers["x-role"] == "admin"
    }
"""

OPA = """  - name: policy
    opaAuth:
      modules: [{name: allow-get-users}]
      query: "data.test.allow == true"
"""


class OpaChainTests(TestCase):
    """Gloo's OPA guide through the gateway's chain, with the ConfigMap in
    the configuration."""

    def opa(self, configs: str, expr: str | None = None) -> ChainTester:
        spec = (f"  booleanExpr: {expr!r}\n" if expr else "") + "  configs:\n" + configs
        return ChainTester.from_yaml(BASE + spec + POLICY_MAP, PLUGINS)

    @pytest.mark.parametrize("method, path, status", [
        ("GET", "/api/pets", 200), ("GET", "/api/", 403), ("DELETE", "/api/pets/1", 403),
        ("DELETE", "/api/pets/2", 200)])
    async def test_the_guide(self, method: str, path: str, status: int) -> None:
        result = await self.opa(OPA).request(method, f"http://petstore.example.com{path}")
        self.assertEqual(result.status, status)

    async def test_key_then_policy(self) -> None:
        t = self.opa(APIKEY + OPA)
        ok = await t.request("GET", "http://petstore.example.com/api/pets", headers=[ALICE_KEY])
        self.assertEqual((ok.status, ok.ctx.principal), (200, "alice"))
        self.assertEqual((await t.request("DELETE", "http://petstore.example.com/api/pets/1",
                                          headers=[ALICE_KEY])).status, 403)
        self.assertEqual((await t.request("GET", "http://petstore.example.com/api/pets")).status, 401)

    async def test_key_or_policy(self) -> None:
        t = self.opa(APIKEY + OPA, "key || policy")
        self.assertEqual((await t.request("DELETE", "http://petstore.example.com/api/pets/1",
                                          headers=[ALICE_KEY])).status, 200)
        self.assertEqual((await t.request("GET", "http://petstore.example.com/api/pets")).status, 200)
        self.assertIn((await t.request("DELETE", "http://petstore.example.com/api/pets/1")).status, (401, 403))

    async def test_smuggled_role_header(self) -> None:
        t = self.opa(OPA)
        url = "http://petstore.example.com/admin"
        self.assertEqual((await t.request("POST", url, headers=[("x-role", "admin")])).status, 200)
        for headers in ([("X-Role", "user"), ("x-role", "admin")], [("x-role", "admin"), ("X-ROLE", "admin")]):
            self.assertEqual((await t.request("POST", url, headers=headers)).status, 403, headers)

    def test_guide_policy_with_any_is_refused_at_its_file_and_line(self) -> None:
        text = BASE + "  configs:\n" + OPA + POLICY_MAP.replace(
            'input.http_request.method in {"GET", "DELETE"}',
            'any({input.http_request.method == "GET", input.http_request.method == "DELETE"})')
        with pytest.raises(ConfigError) as exc:
            ChainTester.from_yaml(text, PLUGINS)
        (issue,) = exc.value.issues
        self.assertEqual((issue.resource, issue.field),
                         ("AuthConfig gloo-system/auth", "spec.configs[0].opaAuth.modules"))
        self.assertIn("calls any()", issue.reason)


class ConfigMapKindTests(TestCase):
    def test_binary_data_and_non_text_entries_are_refused(self) -> None:
        text = """apiVersion: v1
kind: ConfigMap
metadata: {name: m, namespace: default}
data: {policy.rego: 5}
binaryData: {blob: AAAA}
"""
        with pytest.raises(ConfigError) as exc:
            ChainTester.from_yaml(text, PLUGINS)
        self.assertEqual(sorted((i.field, i.reason) for i in exc.value.issues),
                         [("binaryData", "is not supported by twistgw: put text in data"),
                          ("data.policy.rego", "must be a string, got an integer")])


class OpaWithRealJwtTests(TestCase):
    """The claims of a token the real ``jwt`` plugin verified before extauth
    (``jwtStaged: {beforeExtAuth: ...}``) are ``input.state.claims``: an
    email claim decides, and a token that did not verify never reaches the
    policy. ``input.state.jwt`` is not them (Gloo puts only an OIDC login's
    raw ID token there, issue 32 item 9): the rule on it admits no one."""

    def setUp(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from twistgw_jwt import JwtPlugin

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())
        public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()
        indented = "\n".join("                    " + line for line in public.strip().splitlines())
        text = f"""apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {{name: petclinic, namespace: gloo-system}}
spec:
  virtualHost:
    domains: ["*"]
    options:
      jwtStaged:
        beforeExtAuth:
          providers:
            idp:
              issuer: https://idp.example.com
              jwks:
                local:
                  key: |
{indented}
      extauth: {{configRef: {{name: jwt-opa, namespace: gloo-system}}}}
    routes:
    - matchers: [{{prefix: /}}]
      directResponseAction: {{status: 200, body: ok}}
---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: jwt-opa, namespace: gloo-system}}
spec:
  configs:
  - opaAuth:
      modules: [{{name: allow-jwt}}]
      query: "data.test.allow == true"
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: allow-jwt, namespace: gloo-system}}
data:
  policy.rego: |
    package test

    default allow = false
    allow {{
        input.state.claims.email == "admin@example.com"
    }}
    allow {{
        input.state.claims.email == "user@example.com"
        input.http_request.method == "GET"
    }}
    allow {{
        input.state.jwt.email == "legacy@example.com"
    }}
"""
        self.tester = ChainTester.from_yaml(text, PLUGINS + [("jwt", JwtPlugin)])

    def token(self, email: str, pem: bytes | None = None) -> tuple[str, str]:
        from twistgw_jwt import tools

        return ("Authorization", "Bearer " + tools.mint_token(pem or self.pem, "https://idp.example.com", "u-1",
                                                              {"email": email}, 300))

    async def test_claims_of_the_verified_token_decide(self) -> None:
        url = "http://petclinic.example.com/owners"
        admin, user = self.token("admin@example.com"), self.token("user@example.com")
        self.assertEqual((await self.tester.request("POST", url, headers=[admin])).status, 200)
        self.assertEqual((await self.tester.request("GET", url, headers=[user])).status, 200)
        self.assertEqual((await self.tester.request("POST", url, headers=[user])).status, 403)
        self.assertEqual((await self.tester.request("GET", url, headers=[self.token("eve@example.com")])).status,
                         403)
        legacy = await self.tester.request("GET", url, headers=[self.token("legacy@example.com")])
        self.assertEqual(legacy.status, 403)

    async def test_an_unverified_token_never_reaches_the_policy(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        forged = await self.tester.request("POST", "http://petclinic.example.com/owners",
                                           headers=[self.token("admin@example.com", other)])
        self.assertEqual((forged.status, forged.decided_by), (401, "jwt"))
        # no token at all: refused by the jwt stage, before the policy
        missing = await self.tester.request("GET", "http://petclinic.example.com/owners")
        self.assertEqual((missing.status, missing.decided_by), (401, "jwt"))
