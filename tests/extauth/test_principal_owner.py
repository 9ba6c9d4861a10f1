"""Who owns ``ctx.principal`` when two plugins authenticate: the first in
chain order; ``ctx.identities`` keeps every plugin's, and the access log
names the owner. Also ChainTester's wording for an installed plugin that a
test left out (trial style: runs under trial and pytest)."""

from __future__ import annotations

import io

import treq
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from headertoken import HeaderTokenPlugin
from twisted.internet import reactor
from twisted.web.http_headers import Headers

from twistgw.sdk import testing as sdk_testing
import twistgw_extauth
import twistgw_jwt
from twistgw.api.types import RequestContext
from twistgw.runtime.logs import buffered_access_log
from twistgw.sdk.testing import ChainTester, start_gateway, start_recording_backend
from twistgw_jwt.tools import mint_token

from support.trial import TestCase

ISSUER = "https://issuer.example"
_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PRIVATE = _KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
PUBLIC = _KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo).decode()
PLUGINS = [("extauth", twistgw_extauth.ExtAuthPlugin), ("headertoken", HeaderTokenPlugin),
           ("jwt", twistgw_jwt.JwtPlugin)]


def resources(order: list[str] | None = None, route: dict | None = None) -> list[dict]:
    options: dict = {"extauth": {"configRef": {"name": "robots"}},
                     "jwt": {"providers": {"main": {"issuer": ISSUER, "jwks": {"local": {"key": PUBLIC}}}}}}
    if order is not None:
        options["pluginOrder"] = order
    return [
        {"apiVersion": "gateway.vendor.io/v1", "kind": "VirtualService", "metadata": {"name": "api"},
         "spec": {"virtualHost": {"domains": ["*"], "options": options, "routes": [
             route or {"matchers": [{"prefix": "/"}], "directResponseAction": {"status": 200, "body": "ok"}}]}}},
        {"apiVersion": "enterprise.gateway.vendor.io/v1", "kind": "AuthConfig", "metadata": {"name": "robots"},
         "spec": {"configs": [{"name": "token", "headerToken": {"secretRef": {"name": "tokens"}}}]}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tokens"}, "type": "Opaque",
         "stringData": {"robot-7": "t0ken"}},
    ]


def credentials() -> dict[str, str]:
    return {"x-token": "t0ken", "Authorization": "Bearer " + mint_token(PRIVATE, ISSUER, "alice", {}, 60)}


class PrincipalOwnerTests(TestCase):
    async def test_first_plugin_in_chain_order_owns_the_principal(self) -> None:
        tester = ChainTester.from_resources(resources(), PLUGINS)
        result = await tester.request("GET", "http://api/x", headers=credentials())
        self.assertEqual(result.status, 200)
        assert result.ctx is not None
        self.assertEqual([name for name, _, _ in result.trace], ["extauth", "jwt"])
        self.assertEqual(result.ctx.principal, "robot-7")  # extauth (100) ran first; jwt did not overwrite it
        self.assertEqual(dict(result.ctx.identities), {"extauth": "robot-7", "jwt": "alice"})
        self.assertEqual(list(result.ctx.identities), ["extauth", "jwt"])  # in the order they authenticated

    async def test_plugin_order_decides_the_owner(self) -> None:
        tester = ChainTester.from_resources(resources(order=["jwt", "extauth"]), PLUGINS)
        result = await tester.request("GET", "http://api/x", headers=credentials())
        assert result.ctx is not None
        self.assertEqual(result.ctx.principal, "alice")
        self.assertEqual(list(result.ctx.identities.items()), [("jwt", "alice"), ("extauth", "robot-7")])

    async def test_a_refused_request_keeps_who_was_authenticated(self) -> None:
        tester = ChainTester.from_resources(resources(), PLUGINS)
        result = await tester.request("GET", "http://api/x", headers={"x-token": "t0ken"})  # no JWT
        self.assertEqual((result.status, result.decided_by), (401, "jwt"))
        assert result.ctx is not None
        self.assertEqual((result.ctx.principal, dict(result.ctx.identities)), ("robot-7", {"extauth": "robot-7"}))

    def test_identities_are_read_only_and_shared_until_written(self) -> None:
        a, b = RequestContext("GET", "/"), RequestContext("GET", "/")
        self.assertIs(a.identities, b.identities)  # no dict made per request
        with self.assertRaises(TypeError):
            a.identities["x"] = "y"  # type: ignore[index]
        a.authenticated("one", "p1")
        a.authenticated("two", "p2")
        self.assertEqual((a.principal, dict(a.identities), dict(b.identities)), ("p1", {"one": "p1", "two": "p2"}, {}))

    async def test_access_log_names_the_owner(self) -> None:
        backend = start_recording_backend()
        self.addCleanup(backend.close)
        out = io.StringIO()
        route = {"matchers": [{"prefix": "/"}], "routeAction": {"single": {"upstream": {"name": "backend"}}}}
        gw = start_gateway(resources(route=route), PLUGINS, backend=backend,
                           access_log=buffered_access_log(out, "text", reactor))
        response = await treq.get(gw.url("/x"), headers=Headers({k: [v] for k, v in credentials().items()}))
        self.assertEqual(response.code, 200)
        await response.content()
        await gw.stop()  # writes the buffered lines
        line, = out.getvalue().splitlines()
        self.assertIn("principal=robot-7 ", line)
        self.assertIsNone(backend.last.header("x-token"))  # consumed credentials stay at the gateway
        self.assertIsNone(backend.last.header("authorization"))


class LeftOutPluginTests(TestCase):
    def test_installed_but_not_passed_in(self) -> None:
        with self.assertRaises(sdk_testing.ConfigError) as caught:
            ChainTester.from_resources(resources(), PLUGINS[:2])
        self.assertIn("plugin 'jwt' is installed but not in this ChainTester's plugins=['extauth', 'headertoken']",
                      str(caught.exception))
        self.assertNotIn("no plugin named 'jwt'", str(caught.exception))

    def test_start_gateway_says_so_too(self) -> None:
        with self.assertRaises(sdk_testing.ConfigError) as caught:
            start_gateway(resources(), [])
        self.assertIn("plugin 'extauth' is installed but not in start_gateway's plugins=[]", str(caught.exception))

    def test_a_name_nothing_installs(self) -> None:
        vs = resources()[0]
        vs["spec"]["virtualHost"]["options"] = {"nosuch": {}}
        with self.assertRaises(sdk_testing.ConfigError) as caught:
            ChainTester.from_resources([vs], PLUGINS)
        self.assertIn("or an installed plugin's name (no plugin named 'nosuch' is installed; installed: extauth,"
                      " headertoken, jwt)", str(caught.exception))
