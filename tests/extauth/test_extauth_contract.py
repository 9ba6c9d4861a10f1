"""The AuthConfig config-type contract (``twistgw_extauth``): located
problems, the compile scope, and the hook relay a plugin class is given to
collect ``twistgw_extauth_config_types`` (a hook the extauth plugin adds with
``twistgw_addhooks``, as the collector here does)."""

from __future__ import annotations

from typing import Any

from twistgw import sdk
from twistgw.sdk import OptionsError, OptionsScope
from twistgw_extauth import AuthAllow, AuthDeny, ConfigScope, ExtAuthConfigType
from twistgw_extauth import relocate
import twistgw_extauth
from twistgw.api.types import ResourceView, SecretInfo
from twistgw.core.plugins import PluginHost

from support.trial import TestCase


def _scope(inline: bool = False) -> ConfigScope:
    secrets = {("team", "k"): SecretInfo("team", "k", "Opaque", {"token": b"t"})}
    resources = ResourceView({}, secrets, {}, None)
    options = OptionsScope("default", "default/vs", None, resources)
    if inline:
        return ConfigScope(options, "default", None, "customAuth", 0, None, ("customAuth",))
    return ConfigScope(options, "team", None, "keys", 1, ("AuthConfig", "team", "ac"),
                       ("spec", "configs", 1, "myAuth"))


class RelocateTests(TestCase):
    def test_problems_are_located_in_the_auth_config(self) -> None:
        error = OptionsError.several([OptionsError(("header",), "bad"), OptionsError("a.b", "worse")])
        moved = relocate(error, _scope())
        self.assertEqual([(p.resource, p.path) for p in moved.problems],
                         [(("AuthConfig", "team", "ac"), ("spec", "configs", 1, "myAuth", "header")),
                          (("AuthConfig", "team", "ac"), ("spec", "configs", 1, "myAuth", "a", "b"))])

    def test_a_problem_with_its_own_resource_is_left_alone(self) -> None:
        own = OptionsError(("data", "x"), "no", resource=("Secret", "team", "k"))
        self.assertIs(relocate(own, _scope()).problems[0], own)

    def test_inline_entries_stay_below_the_options(self) -> None:
        moved = relocate(OptionsError(("httpService",), "bad"), _scope(inline=True))
        self.assertEqual((moved.resource, moved.path), (None, ("customAuth", "httpService")))

    def test_scope_error_is_located(self) -> None:
        self.assertEqual(_scope().error("x", "r").path, ("spec", "configs", 1, "myAuth", "x"))


class ScopeTests(TestCase):
    def test_secret_defaults_to_the_auth_config_namespace(self) -> None:
        self.assertEqual(_scope().secret("k").data, {"token": b"t"})
        with self.assertRaises(KeyError):
            _scope().secret("k", "default")

    def test_source_names_the_entry(self) -> None:
        self.assertEqual(_scope().source, "AuthConfig team/ac: spec.configs[1].myAuth")
        self.assertEqual(_scope(inline=True).source, "default/vs options.extauth.customAuth")

    def test_config_maps_need_the_core_to_read_them(self) -> None:
        with self.assertRaises(KeyError):
            _scope().config_map("policy")

    def test_failure_is_an_error_with_an_empty_body(self) -> None:
        deny = AuthDeny.failure("down")
        self.assertEqual((deny.status, deny.body, deny.error), (503, b"", True))
        self.assertFalse(AuthDeny(401).error)
        self.assertIsNone(AuthAllow().principal)


class _Type(ExtAuthConfigType):
    name = "myAuth"


class _Provider:
    @sdk.hookimpl(optionalhook=True)  # the extauth plugin's hook: absent without a plugin adding it
    def twistgw_extauth_config_types(self) -> list[ExtAuthConfigType]:
        return [_Type()]


class _Collector:
    """A plugin class that asks for the hook relay in its constructor."""

    def __init__(self, hook: Any) -> None:
        self.hook = hook

    @sdk.hookimpl
    def twistgw_addhooks(self, pluginmanager: sdk.HookRegistry) -> None:
        pluginmanager.add_hookspecs(twistgw_extauth.hookspecs)  # the hook it collects, as the extauth plugin does

    def names(self) -> list[str]:
        return [t.name for types in self.hook.twistgw_extauth_config_types() for t in types]


class HookRelayTests(TestCase):
    def test_a_plugin_class_taking_hook_can_collect_config_types(self) -> None:
        host = PluginHost.create([("collector", _Collector), ("provider", _Provider)], load_entry_points=False)
        collector = host.plugin("collector")
        assert isinstance(collector, _Collector)
        self.assertEqual(collector.names(), ["myAuth"])

    def test_other_plugin_classes_are_made_as_before(self) -> None:
        host = PluginHost.create([("provider", _Provider)], load_entry_points=False)
        self.assertIsInstance(host.plugin("provider"), _Provider)

    def test_the_default_compile_refuses(self) -> None:
        with self.assertRaises(NotImplementedError):
            _Type().compile({}, _scope())


class AddHooksTests(TestCase):
    """The extauth plugin brings its own hook: the core's hooks do not have it."""

    def test_the_core_has_no_hook_of_a_plugin(self) -> None:
        host = PluginHost.create([], load_entry_points=False)
        assert not hasattr(host.pm.hook, "twistgw_extauth_config_types")
        import twistgw.sdk.hookspecs

        assert "twistgw_extauth_config_types" not in twistgw.sdk.hookspecs.__all__

    def test_the_extauth_plugin_adds_its_hook_whatever_the_registration_order(self) -> None:
        for plugins in ([("provider", _Provider), ("extauth", twistgw_extauth.ExtAuthPlugin)],
                        [("extauth", twistgw_extauth.ExtAuthPlugin), ("provider", _Provider)]):
            host = PluginHost.create(plugins, load_entry_points=False)
            assert host.pm.hook.twistgw_extauth_config_types.has_spec()
            assert list(host.plugin("extauth").registry.types()) == ["myAuth"]  # type: ignore[attr-defined]

    def test_adding_the_same_specifications_twice_is_one_addition(self) -> None:
        host = PluginHost.create([("extauth", twistgw_extauth.ExtAuthPlugin), ("collector", _Collector),
                                  ("provider", _Provider)], load_entry_points=False)
        assert host.plugin("collector").names() == ["myAuth"]  # type: ignore[attr-defined]

    def test_a_provider_that_is_not_optional_needs_the_plugin_that_defines_the_hook(self) -> None:
        class Strict:
            @sdk.hookimpl
            def twistgw_extauth_config_types(self) -> list[ExtAuthConfigType]:
                return [_Type()]

        import pluggy

        with self.assertRaises(pluggy.PluginValidationError):
            PluginHost.create([("strict", Strict)], load_entry_points=False)
        host = PluginHost.create([("strict", Strict), ("extauth", twistgw_extauth.ExtAuthPlugin)],
                                 load_entry_points=False)
        assert list(host.plugin("extauth").registry.types()) == ["myAuth"]  # type: ignore[attr-defined]
