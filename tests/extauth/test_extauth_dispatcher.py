"""The extauth plugin over config types it knows only through the hook: a
third-party type (``headertoken.py``, the docs' example) and small ones made
here, mixed in one AuthConfig, in order or by booleanExpr; located
problems; the error policy; dry runs; inline types."""

from __future__ import annotations

import base64
import pathlib
import shutil
import tempfile
import textwrap
from typing import Any

import attrs
from headertoken import HeaderTokenPlugin
from twisted.internet import defer

import twistgw
import twistgw_extauth
from twistgw import AuthAllow, AuthDeny, ConfigError
from twistgw.testing import ChainTester, start_gateway

from support.http import http_request, start_backend
from support.trial import TestCase

URL = "http://api.example.com/x"
TOKENS = {"robot": "r-0b0t-token", "ci": "c1-token"}


@attrs.frozen
class _Fixed:
    """A checker that answers ``answer`` (at once, or through a Deferred)."""

    answer: Any
    later: bool = False
    credential_headers: tuple[bytes, ...] = (b"x-other",)
    owned_request_headers: tuple[bytes, ...] = (b"x-fixed",)

    def check(self, ctx: twistgw.RequestContext) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return defer.succeed(self.answer) if self.later else self.answer


class _FixedType(twistgw.ExtAuthConfigType):
    """``fixed: {allow: NAME | deny: STATUS | error: true | hang: true, later: bool}``."""

    name = "fixed"

    def compile(self, raw: Any, scope: twistgw.ConfigScope) -> _Fixed:
        twistgw.options.check_fields(raw, ("allow", "deny", "error", "hang", "boom", "later", "claims", "share",
                                           "cookie", "credential"), ())
        if "credential" in raw:  # a type that names its credential header badly
            return _Fixed(AuthAllow(reason="fixed"), credential_headers=(raw["credential"].encode(),))
        if "allow" in raw:
            cookie = ((b"set-cookie", raw["cookie"].encode()),) if "cookie" in raw else ()
            answer: Any = AuthAllow(principal=raw["allow"] or None, headers=((b"x-fixed", b"yes"),),
                                    reason=f"fixed allows {raw['allow']}", claims=raw.get("claims"),
                                    claims_provider="fixed" if "claims" in raw else None, state=raw.get("share"),
                                    response_headers=cookie)
        elif "deny" in raw:
            answer = AuthDeny(raw["deny"], b"fixed says no", ((b"x-why", b"fixed"),), reason="fixed denies")
        elif raw.get("hang"):
            return _Fixed(defer.Deferred())  # a Deferred that never fires
        elif raw.get("boom"):
            answer = RuntimeError("a bug in a config type")
        else:
            answer = AuthDeny.failure("fixed is down")
        return _Fixed(answer, bool(raw.get("later")))


@attrs.frozen
class _Peek:
    """Admits, saying what the configs before it shared."""

    def check(self, ctx: twistgw.RequestContext) -> AuthAllow:
        shared = ctx.state.get("extauth", {}).get("state", {})
        return AuthAllow(reason=f"peek saw {sorted(shared.items())}")


class _PeekType(twistgw.ExtAuthConfigType):
    name = "peek"

    def compile(self, raw: Any, scope: twistgw.ConfigScope) -> _Peek:
        return _Peek()


class _Inline(twistgw.ExtAuthConfigType):
    name = "inlineAuth"
    where = "inline"

    def compile(self, raw: Any, scope: twistgw.ConfigScope) -> _Fixed:
        if raw.get("status") not in (401, 403):
            raise twistgw.OptionsError(("status",), "must be 401 or 403")
        return _Fixed(AuthDeny(raw["status"], b"inline", reason="inline"))


@attrs.frozen
class _Remote:
    """Admits after asking a server: a dry run cannot tell, and says what
    admitting would set on the forwarded request."""

    credential_headers: tuple[bytes, ...] = (b"x-secret",)
    owned_request_headers: tuple[bytes, ...] = (b"x-user",)

    def check(self, ctx: twistgw.RequestContext) -> AuthAllow:
        return AuthAllow(principal="remote", headers=((b"x-user", b"remote"),), reason="the server said yes")

    def dry_run(self, ctx: twistgw.RequestContext) -> twistgw.NotChecked:
        return twistgw.NotChecked("would ask the server", headers=((b"x-user", b"remote"),))


class _RemoteType(twistgw.ExtAuthConfigType):
    name = "remote"

    def compile(self, raw: Any, scope: twistgw.ConfigScope) -> _Remote:
        return _Remote()


class _Types:
    @twistgw.hookimpl
    def twistgw_extauth_config_types(self) -> list[twistgw.ExtAuthConfigType]:
        return [_FixedType(), _PeekType(), _Inline(), _RemoteType()]


PLUGINS = [("extauth", twistgw_extauth.ExtAuthPlugin), ("headertoken", HeaderTokenPlugin), ("fixedtypes", _Types)]


def config(configs: str, expr: str = "", settings: str = "", options: str = "{configRef: {name: ac}}") -> str:
    secret = {k: base64.b64encode(v.encode()).decode() for k, v in TOKENS.items()}
    text = textwrap.dedent(f"""\
        apiVersion: gateway.vendor.io/v1
        kind: VirtualService
        metadata: {{name: vs}}
        spec:
          virtualHost:
            domains: ["*"]
            options: {{extauth: {options}}}
            routes:
            - matchers: [{{prefix: /}}]
              directResponseAction: {{status: 200, body: admitted}}
        ---
        apiVersion: enterprise.gateway.vendor.io/v1
        kind: AuthConfig
        metadata: {{name: ac, namespace: default}}
        spec:
        """)
    if expr:
        text += f"  booleanExpr: {expr!r}\n"
    text += f"  configs: {configs}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: tokens}}\ndata: {secret}\n"
    if settings:
        text += ("---\napiVersion: gateway.vendor.io/v1\nkind: Settings\nmetadata: {name: s}\n"
                 f"spec: {{extauth: {settings}}}\n")
    return text


TOKEN = "{name: token, headerToken: {secretRef: {name: tokens}}}"


def make(text: str, **kw: Any) -> ChainTester:
    return ChainTester.from_yaml(text, PLUGINS, **kw)


class InOrderTests(TestCase):
    async def test_every_config_must_admit_and_the_first_denial_answers(self) -> None:
        t = make(config(f"[{TOKEN}, {{fixed: {{deny: 403}}}}, {{fixed: {{deny: 401}}}}]"))
        r = await t.request("GET", URL, headers={"X-Token": TOKENS["ci"]})
        self.assertEqual((r.status, r.body), (403, b"fixed says no"))
        self.assertIn((b"x-why", b"fixed"), r.response_headers)
        first = await t.request("GET", URL)  # the token config refuses first
        self.assertEqual((first.status, first.body), (401, b"token required"))

    async def test_admission_applies_principal_headers_and_drops_credentials(self) -> None:
        t = make(config(f"[{TOKEN}, {{name: other, fixed: {{allow: second, later: true}}}}]"))
        r = await t.request("GET", URL, headers={"X-Token": TOKENS["robot"], "X-Other": "secret",
                                                 "X-Fixed": "forged"})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.ctx.principal, "robot")  # the first config that names one
        self.assertEqual(r.ctx.state["extauth"]["identities"], {"token": "robot", "other": "second"})
        self.assertFalse(r.forwarded_headers.hasHeader(b"x-token"))
        self.assertFalse(r.forwarded_headers.hasHeader(b"x-other"))
        self.assertEqual(r.forwarded_headers.getRawHeaders(b"x-fixed"), [b"yes"])  # set by the config, not the client

    async def test_claims_of_the_first_config_with_claims_are_the_requests(self) -> None:
        t = make(config("[{fixed: {allow: a}}, {fixed: {allow: b, claims: {sub: b, role: admin}, later: true}},"
                        " {fixed: {allow: c, claims: {sub: c}}}]"))
        r = await t.request("GET", URL)
        self.assertEqual((r.ctx.claims, r.ctx.claims_provider), ({"sub": "b", "role": "admin"}, "fixed"))
        self.assertEqual(r.ctx.principal, "a")

    async def test_state_is_shared_with_the_configs_that_run_after(self) -> None:
        t = make(config("[{name: first, fixed: {allow: a, share: {tier: gold}}}, {name: second, peek: {}}]"))
        r = await t.request("GET", URL)
        self.assertEqual(r.status, 200)
        self.assertIn("peek saw [('first', {'tier': 'gold'})]", str(r.trace[-1][2]))
        self.assertEqual(r.ctx.state["extauth"]["state"], {"first": {"tier": "gold"}})

    async def test_a_checker_that_raises_fails_closed(self) -> None:
        r = await make(config("[{fixed: {boom: true}}]")).request("GET", URL)
        self.assertEqual(r.status, 500)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)


class ExpressionTests(TestCase):
    async def test_boolean_expr_over_two_types(self) -> None:
        t = make(config(f"[{TOKEN}, {{name: ok, fixed: {{allow: ''}}}}, {{name: nope, fixed: {{deny: 403}}}}]",
                          expr="(token && ok) || nope"))
        good = await t.request("GET", URL, headers={"X-Token": TOKENS["ci"]})
        self.assertEqual((good.status, good.ctx.principal), (200, "ci"))
        bad = await t.request("GET", URL)
        self.assertEqual((bad.status, bad.body), (403, b"fixed says no"))  # the last refusal seen

    async def test_an_error_stops_the_expression_and_is_the_answer(self) -> None:
        t = make(config(f"[{TOKEN}, {{name: down, fixed: {{error: true}}}}]", expr="!down || token"))
        r = await t.request("GET", URL, headers={"X-Token": TOKENS["ci"]})
        self.assertEqual((r.status, r.body), (503, b""))

    async def test_failure_mode_allow_admits_errors_without_credentials(self) -> None:
        text = config(f"[{TOKEN}, {{fixed: {{error: true, later: true}}}}]", settings="{failureModeAllow: true}")
        r = await make(text).request("GET", URL, headers={"X-Token": TOKENS["ci"], "X-Other": "pw"})
        self.assertEqual((r.status, r.ctx.principal), (200, None))
        self.assertFalse(r.forwarded_headers.hasHeader(b"x-token"))
        self.assertFalse(r.forwarded_headers.hasHeader(b"x-other"))

    async def test_request_timeout_bounds_a_config_that_never_answers(self) -> None:
        from twisted.internet import reactor

        text = config("[{fixed: {hang: true}}]", settings="{requestTimeout: 50ms, statusOnError: 504}")
        r = await make(text, reactor=reactor).request("GET", URL)
        self.assertEqual(r.status, 504)
        self.assertIn("requestTimeout", r.deny.reason)


class DryRunTests(TestCase):
    async def test_explain_settles_what_it_can_and_lists_each_verdict(self) -> None:
        t = make(config(f"[{TOKEN}, {{name: other, fixed: {{allow: x}}}}]", expr="token && other"), dry_run=True)
        r = await t.request("GET", URL, headers={"X-Token": TOKENS["robot"]})
        text = " ".join(str(d) for _, _, d in r.trace)
        self.assertIn("token: AuthConfig default/ac: spec.configs[0].headerToken: ALLOW (token of robot)", text)
        self.assertIn("other: AuthConfig default/ac: spec.configs[1].fixed would be checked", text)
        refused = await t.request("GET", URL)
        self.assertEqual(refused.status, 401)  # the token's dry run decides: && cannot be true


    async def test_a_dry_run_forwards_what_the_live_check_forwards_when_it_admits(self) -> None:
        """Issue 32 item 13: a config a dry run cannot check (no dry run of
        its own, or one that would ask a server) is shown as admitting:
        every credential the AuthConfig consumes is then removed, whichever
        type consumed it, and the configs' own headers are set, exactly as
        the live check forwards the request when it admits."""
        cases = [
            (f"[{TOKEN}, {{remote: {{}}}}]", ""),              # in order: one checked, one not
            ("[{fixed: {allow: x}}]", ""),                     # a type without a dry run
            (f"[{TOKEN}, {{name: r, remote: {{}}}}]", "token && r"),  # a booleanExpr not settled
        ]
        sent = {"X-Token": TOKENS["robot"], "X-Secret": "pw", "X-Other": "pw2", "X-Kept": "1"}
        for configs, expr in cases:
            dry = await make(config(configs, expr=expr), dry_run=True).request("GET", URL, headers=sent)
            self.assertIsInstance(dry.trace[-1][2], twistgw.NotChecked, configs)
            live = await make(config(configs, expr=expr)).request("GET", URL, headers=sent)
            self.assertEqual(live.status, 200, configs)

            def names(r: Any) -> set[str]:
                return {k.decode().lower() for k, _ in r.forwarded_headers.getAllRawHeaders()}

            self.assertEqual(names(dry) - {"x-fixed"}, names(live) - {"x-fixed"}, configs)
            for gone in ("x-token", "x-secret", "x-other"):
                self.assertEqual(dry.forwarded_headers.hasHeader(gone.encode()),
                                 live.forwarded_headers.hasHeader(gone.encode()), (configs, gone))
            self.assertTrue(dry.forwarded_headers.hasHeader(b"x-kept"))
        remote = await make(config("[{remote: {}}]"), dry_run=True).request("GET", URL, headers=sent)
        self.assertEqual(remote.forwarded_headers.getRawHeaders(b"x-user"), [b"remote"])
        self.assertFalse(remote.forwarded_headers.hasHeader(b"x-secret"))


class ConfigurationTests(TestCase):
    def issues(self, text: str) -> list[Any]:
        with self.assertRaises(ConfigError) as info:
            make(text)
        return list(info.exception.issues)

    def test_problems_are_located_in_the_auth_config(self) -> None:
        issues = self.issues(config("[{headerToken: {secretRef: {name: nope}, header: 7, extra: 1}},"
                                    " {fixed: {deny: 403, what: 1}}]"))
        fields = sorted(i.field for i in issues)
        self.assertEqual(fields, ["spec.configs[0].headerToken.extra", "spec.configs[0].headerToken.header",
                                  "spec.configs[0].headerToken.secretRef.name", "spec.configs[1].fixed.what"])
        self.assertTrue(all(i.resource == "AuthConfig default/ac" and i.line for i in issues), issues)
        every = self.issues(config("[{headerToken: {secretRef: {name: nope}, header: 7}}]"))
        self.assertEqual(sorted(i.field for i in every), ["spec.configs[0].headerToken.header",
                                                          "spec.configs[0].headerToken.secretRef.name"])

    def test_a_type_no_plugin_provides_names_the_installed_ones(self) -> None:
        (issue,) = self.issues(config("[{myAuth: {}}]"))
        self.assertEqual(issue.field, "spec.configs[0].myAuth")
        self.assertIn("(installed: fixed, headerToken, peek, remote)", issue.reason)

    def test_two_plugins_providing_one_name_are_refused(self) -> None:
        class Again:
            @twistgw.hookimpl
            def twistgw_extauth_config_types(self) -> list[Any]:
                class Other(_FixedType):
                    pass
                return [Other()]

        with self.assertRaises(ConfigError) as info:
            ChainTester.from_yaml(config("[{fixed: {deny: 403}}]"), [*PLUGINS, ("again", Again)])
        self.assertIn("two plugins provide the AuthConfig config type 'fixed'", str(info.exception))

    def test_fail_on_redirect_needs_a_type_that_reads_it(self) -> None:
        text = config("[{fixed: {deny: 403}}]").replace("spec:\n  configs", "spec:\n  failOnRedirect: true\n  configs")
        (issue,) = self.issues(text)
        self.assertEqual(issue.field, "spec.failOnRedirect")

    def test_a_credential_header_that_is_no_header_name_is_refused(self) -> None:
        issues = self.issues(config("[{fixed: {credential: 'x bad'}}]"))
        self.assertIn("AuthConfig default/ac", [i.resource for i in issues])  # and where it is used
        self.assertTrue(all("spec.configs[0].fixed: the config type gave an invalid credential header name"
                            " b'x bad'" in i.reason for i in issues), issues)
        make(config("[{fixed: {credential: X-Good}}]"))  # a token is fine, in any case

    async def test_one_config_admitting_removes_its_credential_in_any_spelling(self) -> None:
        t = make(config("[{fixed: {credential: X-Key}}]"))
        r = await t.request("GET", URL, headers={"x-KEY": "secret", "X-Other": "kept"})
        self.assertEqual(r.status, 200)
        self.assertFalse(r.ctx.headers.hasHeader(b"x-key"))
        self.assertEqual(r.ctx.headers.getRawHeaders(b"x-other"), [b"kept"])

    async def test_inline_types_are_written_in_the_options(self) -> None:
        t = make(config("[{fixed: {deny: 403}}]", options="{inlineAuth: {status: 401}}"))
        self.assertEqual((await t.request("GET", URL)).status, 401)
        (issue,) = self.issues(config("[{fixed: {deny: 403}}]", options="{inlineAuth: {status: 200}}"))
        self.assertEqual(issue.field, "spec.virtualHost.options.extauth.inlineAuth.status")
        (wrong,) = self.issues(config("[{inlineAuth: {status: 401}}]"))
        self.assertIn("written in options.extauth", wrong.reason)

    async def test_owned_headers_of_every_config_are_stripped_from_clients(self) -> None:
        t = make(config("[{fixed: {deny: 401}}]"))
        r = await t.request("GET", "http://api.example.com/", headers={"X-Fixed": "forged"})
        self.assertEqual(r.status, 401)
        self.assertFalse(r.ctx.headers.hasHeader(b"x-fixed"))


class ResponseHeadersGatewayTests(TestCase):
    """``AuthAllow.response_headers`` through a real gateway, in front of a
    real backend: on the client's response when the whole AuthConfig
    admits, never on a refusal, never to the backend."""

    async def test_added_to_the_client_response_of_an_admitted_request(self) -> None:
        backend = start_backend("backend")
        self.addCleanup(backend.close)
        directory = tempfile.mkdtemp(prefix="twistgw-extauth-")
        self.addCleanup(shutil.rmtree, directory, True)
        upstream = (f"---\napiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {{name: app}}\n"
                    f"spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {backend.port}}}]}}}}\n")
        text = config(f"[{TOKEN}, {{name: a, fixed: {{allow: '', cookie: a=1, later: true}}}},"
                      " {name: b, fixed: {allow: '', cookie: b=2}}]").replace(
            "directResponseAction: {status: 200, body: admitted}", "routeAction: {single: {upstream: {name: app}}}")
        pathlib.Path(directory, "gw.yaml").write_text(text + upstream)
        gw = start_gateway(directory, PLUGINS)
        self.addCleanup(gw.stop)
        ok = await http_request("GET", gw.url("/x"), headers={"x-token": TOKENS["ci"]})
        self.assertEqual(ok.status, 200)
        self.assertEqual(ok.headers.getRawHeaders(b"set-cookie"), [b"a=1", b"b=2"])  # in config order
        self.assertEqual(len(backend.requests), 1)
        self.assertIsNone(backend.requests[0].header(b"set-cookie"))
        refused = await http_request("GET", gw.url("/x"))  # the token config refuses: none of them
        self.assertEqual(refused.status, 401)
        self.assertIsNone(refused.headers.getRawHeaders(b"set-cookie"))


class AllowByReasonTests(TestCase):
    """The one ``twistgw.Allow`` per admission reason (``_flow._allow``): the
    same object for a reason seen before, and a bounded table."""

    def test_one_allow_per_reason_and_the_table_stays_bounded(self) -> None:
        from twistgw_extauth import _flow

        first = _flow._allow("API key of Secret a/b")
        self.assertIs(_flow._allow("API key of Secret a/b"), first)
        self.assertEqual(first.reason, "API key of Secret a/b")
        for i in range(_flow._ALLOWS_MAX * 2 + 3):  # a reason per user must not grow it without bound
            self.assertEqual(_flow._allow(f"user {i}").reason, f"user {i}")
            self.assertLessEqual(len(_flow._ALLOWS), _flow._ALLOWS_MAX)
