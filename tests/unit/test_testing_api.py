"""twistgw.testing as plugin authors use it, dry runs, raw_target and the
JWT provider's keyFile (in memory; trial style, runs under trial and pytest)."""

from __future__ import annotations

import os
import textwrap
import types

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

import twistgw
import twistgw_jwt
import twistgw_ldap
from twistgw.testing import ChainTester, resolve_plugins
from twistgw_jwt.tools import mint_token

from support.trial import TestCase

ISSUER = "https://issuer.example"


def virtual_service(options: str, route_options: str = "{}") -> str:
    return textwrap.dedent(f"""\
        apiVersion: gateway.vendor.io/v1
        kind: VirtualService
        metadata: {{name: vs}}
        spec:
          virtualHost:
            domains: ["*"]
            options: {options}
            routes:
            - matchers: [{{prefix: /}}]
              directResponseAction: {{status: 200, body: "ok"}}
              options: {route_options}
        """)


def plugin(name: str, authenticate) -> tuple[str, object]:
    """A minimal plugin module whose authenticate is ``authenticate``."""
    module = types.ModuleType(f"plugin_{name}")

    @twistgw.hookimpl
    def twistgw_compile_options(options, scope):
        return dict(options)

    @twistgw.hookimpl
    def twistgw_authenticate(ctx, options):
        return authenticate(ctx, options)

    module.twistgw_compile_options = twistgw_compile_options
    module.twistgw_authenticate = twistgw_authenticate
    return name, module


class ExplicitPluginsTests(TestCase):
    def test_only_the_named_plugins_take_part(self) -> None:
        with self.assertRaises(twistgw.ConfigError) as caught:
            ChainTester.from_yaml(virtual_service("{jwt: {providers: {}}}"), [])
        self.assertIn("plugin 'jwt' is installed but not in this ChainTester's plugins=[]", str(caught.exception))

    async def test_installed_plugins_by_name(self) -> None:
        tester = ChainTester.from_yaml(virtual_service("{rbac: {policies: {}}}"), ["rbac"])
        self.assertEqual(sorted(tester.host.infos), ["rbac"])
        result = await tester.request("GET", "http://any/x")
        self.assertEqual((result.status, result.body, result.decided_by), (403, b"RBAC: access denied", "rbac"))

    def test_an_unknown_name_says_what_is_installed(self) -> None:
        with self.assertRaises(ValueError) as caught:
            resolve_plugins(["nope"])
        self.assertIn("no installed twistgw plugin is named 'nope'", str(caught.exception))
        self.assertIn("jwt", str(caught.exception))

    def test_config_error_is_public_and_lists_every_issue(self) -> None:
        self.assertIs(twistgw.ConfigError, __import__("twistgw.config.loader", fromlist=["x"]).ConfigError)
        text = virtual_service("{a: {}, b: {}}")
        with self.assertRaises(twistgw.ConfigError) as caught:
            ChainTester.from_yaml(text, [])
        self.assertEqual(len(caught.exception.issues), 2)


class DryRunTests(TestCase):
    def _tester(self, authenticate, dry_run: bool) -> ChainTester:
        directory = self.temp_path()
        with open(os.path.join(directory, "vs.yaml"), "w") as f:
            f.write(virtual_service("{probe: {}}"))
        return ChainTester.from_directory(directory, [plugin("probe", authenticate)], dry_run=dry_run)

    async def test_not_checked_goes_on_in_a_dry_run(self) -> None:
        seen = []
        tester = self._tester(lambda ctx, o: seen.append(ctx.dry_run) or twistgw.NotChecked("would ask"), True)
        result = await tester.request("GET", "http://any/x")
        self.assertEqual(seen, [True])
        self.assertEqual((result.status, result.body), (200, b"ok"))
        self.assertEqual(result.trace, [("probe", "authenticate", twistgw.NotChecked("would ask"))])

    async def test_not_checked_outside_a_dry_run_fails_closed(self) -> None:
        tester = self._tester(lambda ctx, o: twistgw.NotChecked("would ask"), False)
        result = await tester.request("GET", "http://any/x")
        self.assertEqual(result.status, 500)

    async def test_ldap_dry_run_binds_nothing(self, tmp_path) -> None:
        text = virtual_service("{extauth: {configRef: {name: ldap}}}") + textwrap.dedent("""\
            ---
            apiVersion: enterprise.gateway.vendor.io/v1
            kind: AuthConfig
            metadata: {name: ldap}
            spec:
              configs:
              - ldap:
                  address: ldap://127.0.0.1:1
                  userDnTemplate: uid=%s,ou=people,dc=example,dc=org
                  allowedGroups: [cn=admins,ou=groups,dc=example,dc=org]
            """)
        directory = str(tmp_path)
        with open(os.path.join(directory, "c.yaml"), "w") as f:
            f.write(text)
        tester = ChainTester.from_directory(directory, [("extauth", twistgw_ldap.ExtAuthPlugin)], dry_run=True)
        missing = await tester.request("GET", "http://any/x")
        self.assertEqual(missing.status, 401)  # decided without the directory
        result = await tester.request("GET", "http://any/x", headers={"Authorization": "Basic YWxpY2U6cHc="})
        self.assertEqual(result.status, 200)
        (_, _, decision), = result.trace
        self.assertIsInstance(decision, twistgw.NotChecked)
        self.assertIn("would bind as 'uid=alice,ou=people,dc=example,dc=org' at ldap://127.0.0.1:1",
                      decision.reason)
        self.assertIn("cn=admins,ou=groups,dc=example,dc=org", decision.reason)

    async def test_jwt_dry_run_fetches_no_key_set(self, tmp_path) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        text = virtual_service(
            "{jwt: {providers: {remote: {issuer: '%s', jwks: {remote: {upstreamRef: {name: keys},"
            " url: 'http://auth.example/jwks.json'}}}}}}" % ISSUER) + textwrap.dedent("""\
            ---
            apiVersion: core.vendor.io/v1
            kind: Upstream
            metadata: {name: keys}
            spec: {static: {hosts: [{addr: 127.0.0.1, port: 1}]}}
            """)
        directory = str(tmp_path)
        with open(os.path.join(directory, "c.yaml"), "w") as f:
            f.write(text)
        tester = ChainTester.from_directory(directory, [("jwt", twistgw_jwt.JwtPlugin)], dry_run=True)
        token = mint_token(pem, ISSUER, "alice", {}, 60)
        result = await tester.request("GET", "http://any/x", headers={"Authorization": f"Bearer {token}"})
        (_, _, decision), = result.trace
        self.assertIsInstance(decision, twistgw.NotChecked)
        self.assertIn("would fetch its key set http://auth.example/jwks.json from upstream default/keys"
                      " (127.0.0.1:1)", decision.reason)
        missing = await tester.request("GET", "http://any/x")
        self.assertEqual((missing.status, missing.body), (401, b"Jwt is missing"))

    async def test_jwt_dry_run_forwards_no_token_the_live_check_would_consume(self, tmp_path) -> None:
        """Issue 32 item 13: admitted, the token is removed before
        forwarding (unless keepToken): a dry run that cannot fetch the key
        set shows the same request upstream."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        token = mint_token(pem, ISSUER, "alice", {}, 60)
        for keep, forwarded in (("false", False), ("true", True)):
            text = virtual_service(
                "{jwt: {providers: {remote: {issuer: '%s', keepToken: %s, jwks: {remote: {upstreamRef: {name: keys},"
                " url: 'http://auth.example/jwks.json'}}}}}}" % (ISSUER, keep)) + textwrap.dedent("""\
                ---
                apiVersion: core.vendor.io/v1
                kind: Upstream
                metadata: {name: keys}
                spec: {static: {hosts: [{addr: 127.0.0.1, port: 1}]}}
                """)
            directory = os.path.join(str(tmp_path), keep)
            os.mkdir(directory)
            with open(os.path.join(directory, "c.yaml"), "w") as f:
                f.write(text)
            tester = ChainTester.from_directory(directory, [("jwt", twistgw_jwt.JwtPlugin)], dry_run=True)
            result = await tester.request("GET", "http://any/x", headers={"Authorization": f"Bearer {token}"})
            self.assertIsInstance(result.trace[0][2], twistgw.NotChecked)
            self.assertEqual(result.forwarded_headers.hasHeader(b"authorization"), forwarded, keep)


class RawTargetTests(TestCase):
    async def test_raw_target_is_what_the_client_sent(self) -> None:
        seen = []
        tester = ChainTester.from_yaml(virtual_service("{probe: {}}"),
                                       [plugin("probe", lambda ctx, o: seen.append(ctx) or None)])
        await tester.request("GET", "http://any/a%2Fb/../c//d?x=%41")
        ctx, = seen
        self.assertEqual(ctx.path, "/a/c/d")
        self.assertEqual(ctx.raw_target, b"/a%2Fb/../c//d?x=%41")
        self.assertEqual(ctx.query, b"x=%41")
        self.assertIsInstance(ctx.method, str)


class KeyFileTests(TestCase):
    """``jwks.local.keyFile``: relative to the configuration directory."""

    def setUp(self) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption())
        self.public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                    serialization.PublicFormat.SubjectPublicKeyInfo)
        self.directory = str(self.temp_path())
        os.makedirs(os.path.join(self.directory, "keys"))

    def _write(self, local: str) -> None:
        with open(os.path.join(self.directory, "api.yaml"), "w") as f:
            f.write(virtual_service("{jwt: {providers: {mine: {issuer: '%s', jwks: {local: %s}}}}}"
                                    % (ISSUER, local)))

    def _issue(self, local: str) -> twistgw.ConfigError:
        self._write(local)
        with self.assertRaises(twistgw.ConfigError) as caught:
            ChainTester.from_directory(self.directory, [("jwt", twistgw_jwt.JwtPlugin)])
        return caught.exception

    async def test_relative_to_the_config_directory(self) -> None:
        with open(os.path.join(self.directory, "keys", "public.pem"), "wb") as f:
            f.write(self.public)
        self._write("{keyFile: keys/public.pem}")
        cwd = os.getcwd()
        self.addCleanup(os.chdir, cwd)
        os.chdir("/")  # never the working directory
        tester = ChainTester.from_directory(self.directory, [("jwt", twistgw_jwt.JwtPlugin)])
        token = mint_token(self.private, ISSUER, "alice", {}, 60)
        ok = await tester.request("GET", "http://any/x", headers={"Authorization": f"Bearer {token}"})
        self.assertEqual(ok.status, 200)

    def test_missing_file_is_located(self) -> None:
        issue, = self._issue("{keyFile: keys/nope.pem}").issues
        self.assertEqual(issue.field, "spec.virtualHost.options.jwt.providers.mine.jwks.local.keyFile")
        self.assertEqual(issue.line, 7)  # the options line
        self.assertIn("cannot read 'keys/nope.pem' (%s): No such file or directory"
                      % os.path.join(self.directory, "keys/nope.pem"), issue.reason)

    def test_key_and_key_file_together(self) -> None:
        issue, = self._issue("{key: x, keyFile: keys/public.pem}").issues
        self.assertTrue(issue.field.endswith("jwks.local"))
        self.assertIn("set exactly one of key", issue.reason)

    def test_not_a_key(self) -> None:
        with open(os.path.join(self.directory, "keys", "public.pem"), "wb") as f:
            f.write(b"hello")
        issue, = self._issue("{keyFile: keys/public.pem}").issues
        self.assertTrue(issue.field.endswith("jwks.local.keyFile"))

    def test_binary_and_oversized_files(self) -> None:
        with open(os.path.join(self.directory, "keys", "bin.pem"), "wb") as f:
            f.write(b"\xff\xfe")
        self.assertIn("is not UTF-8 text", self._issue("{keyFile: keys/bin.pem}").issues[0].reason)
        with open(os.path.join(self.directory, "keys", "big.pem"), "wb") as f:
            f.write(b"a" * ((1 << 20) + 1))
        self.assertIn("is larger than", self._issue("{keyFile: keys/big.pem}").issues[0].reason)

    def test_relative_without_a_directory(self) -> None:
        text = virtual_service("{jwt: {providers: {mine: {issuer: '%s', jwks: {local: {keyFile: k.pem}}}}}}"
                               % ISSUER)
        with self.assertRaises(twistgw.ConfigError) as caught:
            ChainTester.from_yaml(text, [("jwt", twistgw_jwt.JwtPlugin)])
        self.assertIn("is relative, but this configuration was not read from a directory",
                      str(caught.exception))
