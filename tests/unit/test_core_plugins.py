"""The plugin host and snapshot compiler: options errors, unknown keys,
ordering, disable, jwtStaged, Settings defaults, failing plugins, and a
third-party plugin loaded from outside the core (extra= and entry points)."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest
from twisted.internet import defer
from twisted.logger import globalLogPublisher

from twistgw import sdk
from twistgw.config.loader import ConfigError, load_text
from twistgw.api.headers import Headers
from twistgw.core.pipeline import RequestHead
from twistgw.core.plugins import PluginError, PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.sdk.testing import ChainTester

from support.trial import TestCase, fixture


class Recorder:
    """A configurable test plugin. ``calls`` records (plugin, hook) pairs."""

    def __init__(self, name: str, order: int = 1000, deny: Any = None, raise_in: str = "",
                 returns: Any = None, compile_error: Any = None, defaults: Any = None,
                 calls: list | None = None, asynchronous: bool = False, **info: Any) -> None:
        self.name = name
        self.info = info
        self.order = order
        self.deny = deny
        self.raise_in = raise_in
        self.returns = returns
        self.compile_error = compile_error
        self.defaults = defaults
        self.calls = calls if calls is not None else []
        self.compiled: list[Any] = []
        self.asynchronous = asynchronous

    @sdk.hookimpl
    def twistgw_plugin_info(self) -> sdk.PluginInfo:
        return sdk.PluginInfo(order=self.order, **self.info)

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Any, scope: sdk.OptionsScope) -> Any:
        if self.compile_error is not None:
            raise self.compile_error
        if options.get("bad") is not None:
            raise sdk.OptionsError(("bad", 0, "value"), "is not acceptable")
        compiled = ("compiled", self.name, tuple(sorted(options.items())), scope.route)
        self.compiled.append(compiled)
        return compiled

    @sdk.hookimpl
    def twistgw_default_options(self, settings: Any) -> Any:
        if self.defaults is None:
            return None
        return self.defaults(settings)

    @sdk.hookimpl
    def twistgw_authenticate(self, ctx: sdk.RequestContext, options: Any) -> Any:
        self.calls.append((self.name, "authenticate"))
        if self.raise_in == "authenticate":
            raise RuntimeError("boom in authenticate")
        if self.returns is not None:
            return self.returns
        if self.asynchronous:
            d: defer.Deferred = defer.Deferred()
            from twisted.internet import reactor

            reactor.callLater(0.01, d.callback, None)
            return d
        return None

    @sdk.hookimpl
    async def twistgw_authorize(self, ctx: sdk.RequestContext, options: Any) -> Any:
        self.calls.append((self.name, "authorize"))
        if self.raise_in == "authorize":
            raise ValueError("boom in authorize")
        if isinstance(options, tuple) and dict(options[2]).get("deny"):
            return sdk.Deny(403, f"denied by {self.name}".encode())
        return sdk.Allow()


def vs(options: str = "{}", route_options: str = "{}", routes: str | None = None) -> str:
    if routes is None:
        routes = (f"    - name: r0\n      matchers: [{{prefix: /}}]\n"
                  f"      directResponseAction: {{status: 200, body: ok}}\n      options: {route_options}\n")
    return ("apiVersion: gateway.vendor.io/v1\nkind: VirtualService\nmetadata: {name: v}\n"
            f"spec:\n  virtualHost:\n    domains: ['*']\n    options: {options}\n    routes:\n{routes}")


def host_with(*plugins: Recorder) -> PluginHost:
    return PluginHost.create(extra=[(p.name, p) for p in plugins], load_entry_points=False)


def chain_of(text: str, host: PluginHost, route: int = 0) -> list[str]:
    snap = build_snapshot(load_text(text, "cfg.yaml"), host)
    return [s.plugin for s in snap.routes[("default/v", route)].chain]


def issues_of(text: str, host: PluginHost) -> list:
    with pytest.raises(ConfigError) as info:
        build_snapshot(load_text(text, "cfg.yaml"), host)
    return info.value.issues


#: what the shipped jwt plugin declares: Gloo's jwtStaged
JWT_STAGED = sdk.StagedOptions("extauth", "beforeExtAuth", "afterExtAuth",
                                   ("jwtStaged", "jwtProvidersStaged"), route_only=("jwtProvidersStaged",))


def three() -> PluginHost:
    return host_with(Recorder("extauth", 100), Recorder("jwt", 200, staged_options=JWT_STAGED),
                     Recorder("apikey"))


def stages_of(host_opts: str, route_opts: str = "{}", host: PluginHost | None = None) -> list[tuple[str, Any]]:
    """The route's chain as (label, the options each step was compiled from)."""
    snap = build_snapshot(load_text(vs(host_opts, route_opts), "cfg.yaml"), host or three())
    return [(s.label, dict(s.options[2])) for s in snap.routes[("default/v", 0)].chain]


SETTINGS = "apiVersion: gateway.vendor.io/v1\nkind: Settings\nmetadata: {name: s}\nspec: {guard: {required: true}}\n---\n"


# ---------------------------------------------------------------------------
# Request time (in memory)
# ---------------------------------------------------------------------------


def make_tester(*plugins: Recorder, options: str) -> ChainTester:
    return ChainTester.from_yaml(vs(options), plugins=[(p.name, p) for p in plugins], load_entry_points=False)


async def untraced(tester: ChainTester, target: bytes = b"/") -> Any:
    """The plan for ``GET target`` as the gateway asks for it: no trace."""
    head = RequestHead(b"GET", target, Headers({b"host": [b"x"]}), "127.0.0.1")
    plan = tester.pipeline.handle(head, tester.snapshot)
    if isinstance(plan, defer.Deferred):
        plan = await plan
    return plan


class _LogCapture:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def __call__(self, event: dict) -> None:
        self.events.append(event)

    def __enter__(self) -> "_LogCapture":
        globalLogPublisher.addObserver(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        globalLogPublisher.removeObserver(self)


# ---------------------------------------------------------------------------
# A third-party plugin, from outside the core
# ---------------------------------------------------------------------------

APIKEY_PLUGIN = '''\
"""A minimal third-party plugin: an API key in a header, keys in a Secret."""
import hmac

import twistgw


@twistgw.hookimpl
def twistgw_plugin_info():
    return twistgw.PluginInfo(order=400, description="API keys")


@twistgw.hookimpl
def twistgw_compile_options(options, scope):
    ref = options.get("keysSecretRef")
    if not isinstance(ref, dict) or "name" not in ref:
        raise twistgw.OptionsError("keysSecretRef", "is required: {name: SECRET}")
    try:
        secret = scope.resources.secret(ref["name"], ref.get("namespace", scope.namespace))
    except KeyError as exc:
        raise twistgw.OptionsError(("keysSecretRef", "name"), f"dangling reference: {exc.args[0]}")
    return (options.get("header", "x-api-key").encode(), tuple(sorted(secret.data.items())))


@twistgw.hookimpl
def twistgw_authenticate(ctx, options):
    header, keys = options
    values = ctx.headers.getRawHeaders(header) or []
    if not values:
        return twistgw.Deny(401, b"API key is missing")
    if len(values) == 1:
        for name, key in keys:
            if hmac.compare_digest(values[0], key):
                ctx.principal = name
                ctx.headers.removeHeader(header)
                return twistgw.Allow()
    return twistgw.Deny(403, b"API key is not valid")
'''

APIKEY_CONFIG = """\
apiVersion: v1
kind: Secret
metadata: {name: api-keys}
stringData: {alice: k-alice, bob: k-bob}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: v}
spec:
  virtualHost:
    domains: [api.example.com]
    options:
      apikey: {keysSecretRef: {name: api-keys}}
    routes:
    - matchers: [{prefix: /public}]
      directResponseAction: {status: 200, body: public}
      options: {apikey: {disable: true}}
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200, body: private}
"""


@fixture
def apikey_dist(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A distribution 'acme-apikey' (module acme_apikey, entry point apikey)
    on a fresh sys.path entry, as pip would install it."""
    site = tmp_path / "site"
    (site / "acme_apikey").mkdir(parents=True)
    (site / "acme_apikey" / "__init__.py").write_text(APIKEY_PLUGIN)
    info = site / "acme_apikey-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-apikey\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[twistgw.plugins]\napikey = acme_apikey\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    sys.modules.pop("acme_apikey", None)


async def _check_apikey(t: ChainTester) -> None:
    ok = await t.request("GET", "http://api.example.com/pets", headers={"X-Api-Key": "k-bob"})
    assert (ok.status, ok.body) == (200, b"private")
    assert ok.ctx.principal == "bob"
    assert ok.forwarded_headers.getRawHeaders(b"x-api-key") is None
    missing = await t.request("GET", "http://api.example.com/pets")
    assert (missing.status, missing.body, missing.decided_by) == (401, b"API key is missing", "apikey")
    wrong = await t.request("GET", "http://api.example.com/pets", headers={"X-Api-Key": "k-eve"})
    assert (wrong.status, wrong.body) == (403, b"API key is not valid")
    two = await t.request("GET", "http://api.example.com/", headers=[("X-Api-Key", "k-eve"), ("X-Api-Key", "k-bob")])
    assert two.status == 403
    public = await t.request("GET", "http://api.example.com/public/x")
    assert (public.status, public.body) == (200, b"public")
    other = await t.request("GET", "http://other.example.com/")
    assert other.status == 404


class CorePluginsTests(TestCase):
    # ---------------------------------------------------------------------------
    # Compile-time
    # ---------------------------------------------------------------------------


    def test_options_error_path_is_prefixed_at_virtual_host(self) -> None:
        (issue,) = issues_of(vs("{apikey: {bad: 1}}"), three())
        assert issue.field == "spec.virtualHost.options.apikey.bad[0].value"
        assert issue.reason == "is not acceptable"
        assert issue.resource == "VirtualService default/v"
        assert issue.file == "cfg.yaml" and issue.document == 0

    def test_options_error_path_is_prefixed_at_route(self) -> None:
        (issue,) = issues_of(vs(route_options="{apikey: {bad: 1}}"), three())
        assert issue.field == "spec.virtualHost.routes[0].options.apikey.bad[0].value"

    def test_options_error_with_dotted_string_path(self) -> None:
        host = host_with(Recorder("apikey", compile_error=sdk.OptionsError("a.b", "nope")))
        (issue,) = issues_of(vs("{apikey: {}}"), host)
        assert issue.field == "spec.virtualHost.options.apikey.a.b" and issue.reason == "nope"

    def test_plugin_crashing_in_compile_rejects_the_config(self) -> None:
        host = host_with(Recorder("apikey", compile_error=KeyError("oops")))
        (issue,) = issues_of(vs("{apikey: {}}"), host)
        assert issue.field == "spec.virtualHost.options.apikey"
        assert "plugin 'apikey' failed compiling its options: KeyError('oops')" == issue.reason

    def test_non_mapping_options_rejected(self) -> None:
        (issue,) = issues_of(vs("{apikey: [1, 2]}"), three())
        assert issue.field == "spec.virtualHost.options.apikey"
        assert issue.reason == "must be a mapping, got list"

    def test_unknown_plugin_key_rejected(self) -> None:
        (issue,) = issues_of(vs(route_options="{apikye: {}}"), three())
        assert issue.field == "spec.virtualHost.routes[0].options.apikye"
        # neither a Gloo option nor an installed plugin: an unknown field, with the known ones
        assert issue.reason.startswith("unknown field 'apikye'; expected one of: autoHostRewrite,")
        assert "no plugin named 'apikye' is installed; installed: apikey, extauth, jwt" in issue.reason

    def test_disabling_an_unknown_plugin_is_harmless(self) -> None:
        assert chain_of(vs(route_options="{ghost: {disable: true}}"), three()) == []

    def test_default_order_and_plugin_order(self) -> None:
        opts = "{apikey: {}, jwt: {}, extauth: {}}"
        assert chain_of(vs(opts), three()) == ["extauth", "jwt", "apikey"]
        assert chain_of(vs(opts[:-1] + ", pluginOrder: [apikey, jwt, extauth]}"), three()) == ["apikey", "jwt", "extauth"]
        # a route's pluginOrder overrides the virtual host's
        assert chain_of(vs(opts[:-1] + ", pluginOrder: [apikey, jwt, extauth]}",
                           "{pluginOrder: [jwt, apikey, extauth]}"), three()) == ["jwt", "apikey", "extauth"]

    def test_plugin_order_must_list_every_enabled_plugin(self) -> None:
        (issue,) = issues_of(vs("{apikey: {}, jwt: {}, pluginOrder: [jwt]}"), three())
        assert issue.field == "spec.virtualHost.options.pluginOrder"
        assert issue.reason == "pluginOrder must list every enabled plugin; missing: apikey"

    def test_plugin_order_naming_uninstalled_plugin(self) -> None:
        (issue,) = issues_of(vs("{jwt: {}, pluginOrder: [jwt, ghost]}"), three())
        assert "not installed: ghost" in issue.reason

    def test_route_disables_one_plugin_and_overrides_another(self) -> None:
        host = three()
        text = vs("{apikey: {a: 1}, jwt: {b: 2}}", "{jwt: {disable: true}, apikey: {c: 3}}")
        snap = build_snapshot(load_text(text), host)
        (step,) = snap.routes[("default/v", 0)].chain
        assert step.plugin == "apikey"
        # route options replace the virtual host's wholesale, and carry the route name
        assert step.options == ("compiled", "apikey", (("c", 3),), "r0")

    def test_virtual_host_options_are_compiled_once_for_all_routes(self) -> None:
        p = Recorder("apikey")
        routes = "".join(
            f"    - matchers: [{{prefix: /{i}}}]\n      directResponseAction: {{status: 200}}\n" for i in range(3))
        snap = build_snapshot(load_text(vs("{apikey: {k: v}}", routes=routes)), host_with(p))
        assert len(p.compiled) == 1
        assert {id(snap.routes[("default/v", i)].chain[0].options) for i in range(3)} == {id(p.compiled[0])}

    def test_jwt_staged_orders_jwt_before_or_after_extauth(self) -> None:
        before = vs("{extauth: {}, jwtStaged: {beforeExtAuth: {x: 1}}}")
        after = vs("{extauth: {}, jwtStaged: {afterExtAuth: {x: 1}}}")
        host = three()
        assert chain_of(before, host) == ["jwt", "extauth"]
        assert chain_of(after, host) == ["extauth", "jwt"]
        snap = build_snapshot(load_text(before), host)
        assert snap.routes[("default/v", 0)].chain[0].options[2] == (("x", 1),)

    def test_jwt_staged_and_jwt_together_rejected(self) -> None:
        (issue,) = issues_of(vs("{jwt: {}, jwtStaged: {beforeExtAuth: {}}}"), three())
        assert issue.reason == "use either jwt or jwtStaged, not both"
        assert issue.field == "spec.virtualHost.options.jwtStaged"

    @pytest.mark.parametrize("staged, field, reason", [
        ("{}", "jwtStaged", "set beforeExtAuth, afterExtAuth or both"),
        ("{duringExtAuth: {}}", "jwtStaged.duringExtAuth", "unknown field 'duringExtAuth'"),
        ("[]", "jwtStaged", "must be a mapping"),
    ])
    def test_staged_options_are_checked(self, staged: str, field: str, reason: str) -> None:
        (issue,) = issues_of(vs(f"{{jwtStaged: {staged}}}"), three())
        assert issue.field == "spec.virtualHost.options." + field and reason in issue.reason
        assert issue.line == 7  # the virtual host's options line

    def test_route_only_staged_key_on_a_virtual_host(self) -> None:
        (issue,) = issues_of(vs("{jwtProvidersStaged: {afterExtAuth: {}}}"), three())
        assert issue.field == "spec.virtualHost.options.jwtProvidersStaged"
        assert "is a route option" in issue.reason

    def test_staged_options_key_belongs_to_its_plugin(self) -> None:
        """Without a plugin that declares jwtStaged, it is an unknown plugin."""
        (issue,) = issues_of(vs("{jwtStaged: {beforeExtAuth: {}}}"), host_with(Recorder("extauth", 100)))
        assert "no plugin named 'jwtStaged'" in issue.reason

    def test_a_third_party_plugin_declares_its_placement(self) -> None:
        """PluginInfo.placement: 'audit' (order 50) must run after rbac, and
    'gate' (order 1000) before jwt; explicit pluginOrder still wins."""
        host = host_with(Recorder("jwt", 200), Recorder("rbac", 300),
                         Recorder("audit", 50, placement=sdk.Placement(after=("rbac",))),
                         Recorder("gate", placement=sdk.Placement(before=("jwt", "rbac"))))
        assert host.default_order() == ["gate", "jwt", "rbac", "audit"]
        assert chain_of(vs("{audit: {}, gate: {}, jwt: {}, rbac: {}}"), host) == ["gate", "jwt", "rbac", "audit"]
        assert chain_of(vs("{audit: {}, jwt: {}}"), host) == ["audit", "jwt"]  # rbac not enabled: no constraint
        assert chain_of(vs("{audit: {}, jwt: {}, pluginOrder: [jwt, audit]}"), host) == ["jwt", "audit"]

    def test_a_plugin_places_itself_from_its_settings(self) -> None:
        """twistgw_placement(resources): asked at each load; its Placement
        applies on top of PluginInfo's; pluginOrder still wins; a wrong
        return value or an exception rejects the configuration."""

        class Mover(Recorder):
            @sdk.hookimpl
            def twistgw_placement(self, resources: Any) -> Any:
                setting = resources.settings("mover").get("first")
                if setting == "boom":
                    raise RuntimeError("boom")
                if setting == "junk":
                    return "first"
                return sdk.Placement(before=("jwt",)) if setting else None

        host = host_with(Recorder("jwt", 200), Mover("mover", 350))
        settings = "apiVersion: gateway.vendor.io/v1\nkind: Settings\nmetadata: {{name: s}}\nspec: {{mover: {}}}\n---\n"
        opts = "{jwt: {}, mover: {}}"
        assert chain_of(vs(opts), host) == ["jwt", "mover"]
        assert chain_of(settings.format("{first: true}") + vs(opts), host) == ["mover", "jwt"]
        assert chain_of(settings.format("{first: true}") + vs("{jwt: {}, mover: {}, pluginOrder: [jwt, mover]}"),
                        host) == ["jwt", "mover"]
        (issue,) = issues_of(settings.format("{first: junk}") + vs(opts), host)
        assert "twistgw_placement must return sdk.Placement or None, got 'first'" in issue.reason
        (issue,) = issues_of(settings.format("{first: boom}") + vs(opts), host)
        assert issue.field == "spec.mover"
        assert "plugin 'mover' failed choosing its place in the chain: RuntimeError('boom')" in issue.reason

    # Gloo's route-policy guide, scenario by scenario (docs/jwt.md, "Stages")
    @pytest.mark.parametrize("host_opts, route_opts, expected", [
        # 1: host policy only: every route runs it
        ("{jwt: {p: vh}}", "{}", [("jwt", {"p": "vh"})]),
        # 2/3: a route policy at the host's stage replaces it (jwt is the afterExtAuth stage)
        ("{jwt: {p: vh}}", "{jwtProvidersStaged: {afterExtAuth: {p: rt}}}", [("jwt", {"p": "rt"})]),
        ("{jwtStaged: {afterExtAuth: {p: vh}}}", "{jwtProvidersStaged: {afterExtAuth: {p: rt}}}",
         [("jwt", {"p": "rt"})]),
        # 4: different stages: both run, the before stage ahead of extauth
        ("{extauth: {e: 1}, jwtStaged: {beforeExtAuth: {p: vh}}}", "{jwtProvidersStaged: {afterExtAuth: {p: rt}}}",
         [("jwt[beforeExtAuth]", {"p": "vh"}), ("extauth", {"e": 1}), ("jwt[afterExtAuth]", {"p": "rt"})]),
        ("{jwtStaged: {beforeExtAuth: {p: vh}}}", "{jwtProvidersStaged: {afterExtAuth: {p: rt}}}",
         [("jwt[beforeExtAuth]", {"p": "vh"}), ("jwt[afterExtAuth]", {"p": "rt"})]),
        # our route-level jwtStaged holding providers is an alias of jwtProvidersStaged:
        # it never drops the host's other stage (it used to: a security bug)
        ("{jwtStaged: {beforeExtAuth: {p: vh}}}", "{jwtStaged: {afterExtAuth: {p: rt}}}",
         [("jwt[beforeExtAuth]", {"p": "vh"}), ("jwt[afterExtAuth]", {"p": "rt"})]),
        ("{jwt: {p: vh}}", "{jwtStaged: {beforeExtAuth: {p: rt}}}",
         [("jwt[beforeExtAuth]", {"p": "rt"}), ("jwt[afterExtAuth]", {"p": "vh"})]),
        # both stages on the host; a route replaces one of them
        ("{jwtStaged: {beforeExtAuth: {p: b}, afterExtAuth: {p: a}}}", "{jwtProvidersStaged: {beforeExtAuth: {p: rt}}}",
         [("jwt[beforeExtAuth]", {"p": "rt"}), ("jwt[afterExtAuth]", {"p": "a"})]),
        # route-level jwt replaces the after stage only
        ("{jwtStaged: {beforeExtAuth: {p: vh}}}", "{jwt: {p: rt}}",
         [("jwt[beforeExtAuth]", {"p": "vh"}), ("jwt[afterExtAuth]", {"p": "rt"})]),
        # Gloo's JwtStagedRouteExtension: disable one stage, keep the other
        ("{jwtStaged: {beforeExtAuth: {p: b}, afterExtAuth: {p: a}}}", "{jwtStaged: {beforeExtAuth: {disable: true}}}",
         [("jwt", {"p": "a"})]),
        ("{jwtStaged: {beforeExtAuth: {p: b}}}", "{jwtStaged: {beforeExtAuth: {disable: false}}}",
         [("jwt", {"p": "b"})]),
        # jwt: {disable: true} on a route turns every JWT check off
        ("{jwtStaged: {beforeExtAuth: {p: b}, afterExtAuth: {p: a}}}", "{jwt: {disable: true}}", []),
        # no host policy: only the route's
        ("{}", "{jwtProvidersStaged: {beforeExtAuth: {p: rt}}}", [("jwt", {"p": "rt"})]),
    ])
    def test_jwt_stages_follow_gloo(self, host_opts: str, route_opts: str, expected: list) -> None:
        assert stages_of(host_opts, route_opts) == expected

    @pytest.mark.parametrize("host_opts, route_opts, field, reason", [
        ("{jwt: {}, jwtStaged: {beforeExtAuth: {}}}", "{}", "spec.virtualHost.options.jwtStaged",
         "use either jwt or jwtStaged, not both"),
        ("{}", "{jwtStaged: {afterExtAuth: {disable: true}}, jwtProvidersStaged: {beforeExtAuth: {}}}",
         "spec.virtualHost.routes[0].options.jwtProvidersStaged", "use either jwtStaged or jwtProvidersStaged, not both"),
        ("{}", "{jwtStaged: {afterExtAuth: {disable: true, providers: {}}}}",
         "spec.virtualHost.routes[0].options.jwtStaged.afterExtAuth.disable", "it takes no other fields"),
        ("{jwtStaged: {afterExtAuth: {disable: true}}}", "{}",
         "spec.virtualHost.options.jwtStaged.afterExtAuth.disable", "is a route option"),
        ("{}", "{jwtStaged: {afterExtAuth: {disable: 'off'}}}",
         "spec.virtualHost.routes[0].options.jwtStaged.afterExtAuth.disable", "must be true or false"),
        ("{}", "{jwtStaged: {duringExtAuth: {}}}",
         "spec.virtualHost.routes[0].options.jwtStaged.duringExtAuth", "unknown field"),
    ])
    def test_jwt_stage_shapes_rejected(self, host_opts: str, route_opts: str, field: str, reason: str) -> None:
        """Checked by the core from the jwt plugin's StagedOptions declaration."""
        (issue,) = issues_of(vs(host_opts, route_opts), three())
        assert issue.field == field and reason in issue.reason

    def test_plugin_order_positions_the_after_stage_and_contradictions_are_errors(self) -> None:
        host = three()
        both = "{extauth: {}, jwtStaged: {beforeExtAuth: {p: b}, afterExtAuth: {p: a}}, pluginOrder: [extauth, apikey, jwt]}"
        assert [label for label, _ in stages_of(both, host=host)] == ["jwt[beforeExtAuth]", "extauth", "jwt[afterExtAuth]"]
        # plain jwt has no stage of its own: pluginOrder may put it first, as before
        assert chain_of(vs("{extauth: {}, jwt: {}, pluginOrder: [jwt, extauth]}"), host) == ["jwt", "extauth"]
        (issue,) = issues_of(vs("{extauth: {}, jwtStaged: {afterExtAuth: {}}, pluginOrder: [jwt, extauth]}"), host)
        assert issue.field == "spec.virtualHost.options.pluginOrder"
        assert "lists jwt before extauth, but an afterExtAuth jwt stage" in issue.reason
        (issue,) = issues_of(vs("{extauth: {}, jwtStaged: {beforeExtAuth: {}}, pluginOrder: [extauth, jwt]}"), host)
        assert "the only jwt stage is beforeExtAuth" in issue.reason

    def test_settings_and_default_options(self) -> None:
        seen: list[Any] = []

        def defaults(settings: Any) -> Any:
            seen.append(dict(settings))
            return {"deny": True} if settings.get("required") else None

        guard = Recorder("guard", defaults=defaults)
        routes = ("    - matchers: [{prefix: /open}]\n      directResponseAction: {status: 200}\n"
                  "      options: {guard: {disable: true}}\n"
                  "    - matchers: [{prefix: /own}]\n      directResponseAction: {status: 200}\n"
                  "      options: {guard: {mine: 1}}\n"
                  "    - matchers: [{prefix: /}]\n      directResponseAction: {status: 200}\n")
        snap = build_snapshot(load_text(SETTINGS + vs(routes=routes)), host_with(guard))
        assert seen == [{"required": True}]
        assert [s.plugin for s in snap.routes[("default/v", 0)].chain] == []
        assert snap.routes[("default/v", 1)].chain[0].options[2] == (("mine", 1),)
        assert snap.routes[("default/v", 2)].chain[0].options[2] == (("deny", True),)
        # without Settings, no defaults
        snap = build_snapshot(load_text(vs(routes=routes)), host_with(guard))
        assert snap.routes[("default/v", 2)].chain == ()

    def test_settings_for_unknown_plugin_rejected(self) -> None:
        text = SETTINGS.replace("guard", "ghost") + vs()
        (issue,) = issues_of(text, three())
        assert issue.resource == "Settings" and issue.field == "spec.ghost"
        assert "no plugin named 'ghost' is installed" in issue.reason

    def test_settings_section_must_be_mapping(self) -> None:
        with pytest.raises(ConfigError) as info:
            load_text(SETTINGS.replace("{required: true}", "5") + vs())
        assert info.value.issues[0].field == "spec.guard"

    def test_plugin_info_must_return_plugin_info(self) -> None:
        class Bad:
            @sdk.hookimpl
            def twistgw_plugin_info(self) -> Any:
                return {"order": 1}

        with pytest.raises(PluginError, match="must return sdk.PluginInfo"):
            PluginHost.create(extra=[("bad", Bad())], load_entry_points=False)

    async def test_chain_runs_authenticate_then_authorize_in_order(self) -> None:
        calls: list = []
        a, b = Recorder("a", 10, calls=calls, asynchronous=True), Recorder("b", 20, calls=calls)
        result = await make_tester(b, a, options="{a: {}, b: {}}").request("GET", "http://x/")
        assert result.status == 200 and result.body == b"ok" and result.forwarded
        assert calls == [("a", "authenticate"), ("a", "authorize"), ("b", "authenticate"), ("b", "authorize")]

    async def test_first_deny_stops_the_chain(self) -> None:
        calls: list = []
        a, b = Recorder("a", 10, calls=calls), Recorder("b", 20, calls=calls)
        result = await make_tester(a, b, options="{a: {deny: true}, b: {}}").request("GET", "http://x/")
        assert (result.status, result.body, result.decided_by) == (403, b"denied by a", "a")
        assert calls == [("a", "authenticate"), ("a", "authorize")]

    @pytest.mark.parametrize("phase", ["authenticate", "authorize"])
    async def test_plugin_raising_fails_closed_with_500_and_is_logged(self, phase: str) -> None:
        calls: list = []
        a, b = Recorder("a", 10, calls=calls, raise_in=phase), Recorder("b", 20, calls=calls)
        with _LogCapture() as log:
            result = await make_tester(a, b, options="{a: {}, b: {}}").request("GET", "http://x/p")
        assert (result.status, result.body, result.decided_by) == (500, b"Internal Server Error", "a")
        assert ("b", "authenticate") not in calls
        failures = [e for e in log.events if e.get("log_failure") is not None and e.get("plugin") == "a"]
        assert len(failures) == 1
        assert failures[0]["phase"] == phase and failures[0]["path"] == "/p"
        assert "boom in" in str(failures[0]["log_failure"].value)
        assert len(self.flushLoggedErrors(RuntimeError, ValueError)) == 1  # logged, and trial saw it too

    @pytest.mark.parametrize("garbage", [True, 403, "deny", b"", {"status": 403}, object()])
    async def test_plugin_returning_garbage_fails_closed(self, garbage: Any) -> None:
        calls: list = []
        a, b = Recorder("a", 10, calls=calls, returns=garbage), Recorder("b", 20, calls=calls)
        with _LogCapture() as log:
            result = await make_tester(a, b, options="{a: {}, b: {}}").request("GET", "http://x/")
        assert (result.status, result.decided_by) == (500, "a")
        assert calls == [("a", "authenticate")]
        assert any(e.get("plugin") == "a" and "expected Allow, Deny or None" in e.get("log_format", "")
                   for e in log.events)

    async def test_plugin_failing_deferred_fails_closed(self) -> None:
        failing = Recorder("a", returns=defer.fail(RuntimeError("async boom")))
        result = await make_tester(failing, options="{a: {}}").request("GET", "http://x/")
        assert (result.status, result.decided_by) == (500, "a")
        assert len(self.flushLoggedErrors(RuntimeError)) == 1  # and logged

    # The gateway runs the chain without a trace (ChainTester and explain
    # trace every step): the same outcomes on that path.

    async def test_untraced_chain_runs_in_order_and_first_deny_stops_it(self) -> None:
        calls: list = []
        a, b = Recorder("a", 10, calls=calls, asynchronous=True), Recorder("b", 20, calls=calls)
        plan = await untraced(make_tester(b, a, options="{a: {}, b: {}}"))
        assert plan.status == 200 and plan.body == b"ok"  # the route's direct response
        assert calls == [("a", "authenticate"), ("a", "authorize"), ("b", "authenticate"), ("b", "authorize")]
        calls.clear()
        plan = await untraced(make_tester(Recorder("a", 10, calls=calls), Recorder("b", 20, calls=calls),
                                          options="{a: {deny: true}, b: {}}"))
        assert (plan.status, plan.body) == (403, b"denied by a")
        assert calls == [("a", "authenticate"), ("a", "authorize")]

    @pytest.mark.parametrize("returns", [True, "deny", object(), sdk.NotChecked("no network")])
    async def test_untraced_chain_fails_closed_on_garbage(self, returns: Any) -> None:
        calls: list = []
        a, b = Recorder("a", 10, calls=calls, returns=returns), Recorder("b", 20, calls=calls)
        with _LogCapture():
            plan = await untraced(make_tester(a, b, options="{a: {}, b: {}}"))
        assert (plan.status, plan.body) == (500, b"Internal Server Error")
        assert calls == [("a", "authenticate")]

    async def test_untraced_chain_fails_closed_when_a_plugin_raises(self) -> None:
        calls: list = []
        a, b = Recorder("a", 10, calls=calls, raise_in="authenticate"), Recorder("b", 20, calls=calls)
        with _LogCapture():
            plan = await untraced(make_tester(a, b, options="{a: {}, b: {}}"))
        assert plan.status == 500 and calls == [("a", "authenticate")]
        assert len(self.flushLoggedErrors(RuntimeError)) == 1

    async def test_untraced_chain_runs_on_after_deferreds(self) -> None:
        # Two plugins answering with Deferreds (the rest of the chain runs as
        # callbacks of each): in order, and a Deny from a Deferred stops it.
        calls: list = []
        a = Recorder("a", 10, calls=calls, asynchronous=True)
        b = Recorder("b", 20, calls=calls, asynchronous=True)
        c = Recorder("c", 30, calls=calls, returns=defer.succeed(sdk.Deny(429, b"slow down")))
        d = Recorder("d", 40, calls=calls)
        plan = await untraced(make_tester(d, c, b, a, options="{a: {}, b: {}, c: {}, d: {}}"))
        assert (plan.status, plan.body) == (429, b"slow down")
        assert calls == [("a", "authenticate"), ("a", "authorize"), ("b", "authenticate"), ("b", "authorize"),
                         ("c", "authenticate")]

    async def test_untraced_chain_fails_closed_when_a_deferred_fails(self) -> None:
        calls: list = []
        pending: defer.Deferred = defer.Deferred()
        a, b = Recorder("a", 10, calls=calls, returns=pending), Recorder("b", 20, calls=calls)
        with _LogCapture() as log:
            plan = untraced(make_tester(a, b, options="{a: {}, b: {}}"))
            from twisted.internet import reactor

            reactor.callLater(0, pending.errback, RuntimeError("late boom"))
            plan = await plan
        assert (plan.status, plan.body) == (500, b"Internal Server Error")
        assert calls == [("a", "authenticate")]
        failures = [e for e in log.events if e.get("log_failure") is not None and e.get("plugin") == "a"]
        assert len(failures) == 1 and "late boom" in str(failures[0]["log_failure"].value)
        assert len(self.flushLoggedErrors(RuntimeError)) == 1

    async def test_untraced_chain_goes_on_after_an_allow_subclass(self) -> None:
        class Verdict(sdk.Allow):
            pass

        calls: list = []
        a, b = Recorder("a", 10, calls=calls, returns=Verdict("fine")), Recorder("b", 20, calls=calls)
        plan = await untraced(make_tester(a, b, options="{a: {}, b: {}}"))
        assert plan.status == 200
        assert calls == [("a", "authenticate"), ("a", "authorize"), ("b", "authenticate"), ("b", "authorize")]

    async def test_hook_implementations_with_other_signatures_get_their_arguments(self) -> None:
        """Compiled chains call a plugin positionally, ``(ctx, options)``; an
        implementation taking them in another order, or only one, still
        gets what it names."""
        seen: list = []

        class Reversed:
            @sdk.hookimpl
            def twistgw_compile_options(self, options: Any, scope: Any) -> Any:
                return "compiled-reversed"

            @sdk.hookimpl
            def twistgw_authenticate(self, options: Any, ctx: sdk.RequestContext) -> Any:
                seen.append(("reversed", options, ctx.path))

        class OnlyCtx:
            @sdk.hookimpl
            def twistgw_compile_options(self, options: Any, scope: Any) -> Any:
                return "compiled-only"

            @sdk.hookimpl
            def twistgw_authorize(self, ctx: sdk.RequestContext) -> Any:
                seen.append(("only", ctx.path))
                return sdk.Deny(401, b"no")

        tester = ChainTester.from_yaml(vs("{rev: {}, only: {}, pluginOrder: [rev, only]}"),
                                       plugins=[("rev", Reversed()), ("only", OnlyCtx())], load_entry_points=False)
        plan = await untraced(tester, b"/p")
        assert (plan.status, plan.body) == (401, b"no")
        assert seen == [("reversed", "compiled-reversed", "/p"), ("only", "/p")]

    async def test_third_party_plugin_registered_with_extra(self, apikey_dist: Any) -> None:
        import acme_apikey

        t = ChainTester.from_yaml(APIKEY_CONFIG, plugins=[("apikey", acme_apikey)], load_entry_points=False)
        await _check_apikey(t)

    async def test_third_party_plugin_loaded_from_entry_point(self, apikey_dist: Any) -> None:
        assert "acme_apikey" not in sys.modules
        # Block the shipped plugins: this proves *our* distribution's entry point loads.
        # every plugin this distribution ships is blocked: only the example's is left
        host = PluginHost.create(load_entry_points=True, blocked=_shipped())
        assert host.names() == ["apikey"]
        assert host.infos["apikey"].order == 400
        assert sys.modules["acme_apikey"].__file__.startswith(str(apikey_dist))
        await _check_apikey(ChainTester(build_snapshot(load_text(APIKEY_CONFIG), host), host))

    def test_third_party_plugin_options_error(self, apikey_dist: Any) -> None:
        import acme_apikey

        text = APIKEY_CONFIG.replace("keysSecretRef: {name: api-keys}", "keysSecretRef: {name: nope}")
        with pytest.raises(ConfigError) as info:
            ChainTester.from_yaml(text, plugins=[("apikey", acme_apikey)], load_entry_points=False)
        (issue,) = info.value.issues
        assert issue.field == "spec.virtualHost.options.apikey.keysSecretRef.name"
        assert issue.reason == "dangling reference: no Secret default/nope"

    def test_broken_entry_point_is_a_plugin_error(self, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        site = tmp_path / "site2"
        info = site / "broken_plugin-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("[twistgw.plugins]\nbroken = no_such_module_xyz\n")
        monkeypatch.syspath_prepend(str(site))
        importlib.invalidate_caches()
        with pytest.raises(PluginError, match="no_such_module_xyz"):
            PluginHost.create(load_entry_points=True, blocked=_shipped())


def _shipped() -> list[str]:
    """The plugins the twistgw distribution itself registers (its entry points)."""
    from importlib.metadata import entry_points

    shipped = sorted(ep.name for ep in entry_points(group="twistgw.plugins")
                     if ep.dist is not None and ep.dist.name == "twistgw")
    assert {"jwt", "rbac", "extauth", "ldap"} <= set(shipped)
    return shipped
