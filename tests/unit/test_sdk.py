"""The plugin SDK (``twistgw.sdk``): the one package plugins import, and
twistgw 0.1's plugin API kept for one release with a deprecation warning
naming the new import (see docs/sdk.md and docs/decisions.md)."""

from __future__ import annotations

import ast
from typing import Any
import json
import re
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import twistgw
import twistgw.sdk
import twistgw.sdk.testing
from twistgw import _deprecated

from support.trial import TestCase

#: twistgw 0.1's ``twistgw.__all__`` (docs/plugins.md of session 9), minus ``__version__``
OLD_NAMES = ["Allow", "AuthAllow", "AuthConfigInfo", "AuthDecision", "AuthDeny", "BodyTooLarge", "BoundedBody",
             "Commands", "ConfigError", "ConfigIssue", "ConfigScope", "ConfigWarning", "Decision", "Deny",
             "Endpoint", "ExtAuthChecker", "ExtAuthConfigType", "GatewayInfo", "Headers", "NotChecked",
             "OptionsError", "OptionsScope", "OwnsRequestHeaders", "Placement", "PluginInfo", "RequestContext",
             "ResourceView", "Route", "SecretInfo", "StagedOptions", "UpstreamInfo", "VirtualService", "counter",
             "hookimpl", "read_basic_credentials"]

#: twistgw 0.1's ``twistgw.options.__all__``
OLD_OPTIONS = ["DURATION_UNITS", "FieldReader", "Invalid", "Path", "Problems", "check_fields", "is_kubernetes_name",
               "is_token", "loopback_problem", "parse_duration", "require_mapping", "type_name", "unknown_field"]

#: twistgw 0.1's ``twistgw.testing.__all__``
OLD_TESTING = ["BackendResponse", "ChainResult", "ChainTester", "RecordedRequest", "RecordingBackend", "Resources",
               "RunningGateway", "make_headers", "resolve_plugins", "resources_yaml", "start_gateway",
               "start_recording_backend", "trial_tests_first"]


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a new interpreter (modules imported for the first time), warnings shown."""
    return subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-c", code], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""}, check=False)


class DeprecatedNamesTests(TestCase):
    def test_the_package_exports_nothing_but_its_version(self) -> None:
        assert twistgw.__all__ == ["__version__"]

    @pytest.mark.parametrize("name", [n for n in OLD_NAMES if n in _deprecated.NAMES])
    def test_an_old_name_warns_with_the_new_import_and_is_the_same_object(self, name: str) -> None:
        module, attribute, instead = _deprecated.NAMES[name]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(twistgw, name)
        (warning,) = [w for w in caught if issubclass(w.category, DeprecationWarning)]
        text = str(warning.message)
        assert f"twistgw.{name} is deprecated" in text and "removed in twistgw 0.2" in text
        assert instead in text
        assert warning.filename == __file__  # attributed to the line that used it
        assert value is getattr(sys.modules[module], attribute)

    def test_every_old_name_still_resolves(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in OLD_NAMES:
                assert getattr(twistgw, name) is not None, name

    def test_an_unknown_name_is_an_attribute_error(self) -> None:
        with pytest.raises(AttributeError, match="no attribute 'Nope'"):
            twistgw.Nope  # noqa: B018

    def test_the_sdk_holds_every_old_plugin_name_but_the_loaders(self) -> None:
        """What 0.1 exported is in the SDK, but the loader's classes
        (ConfigError and ConfigIssue are in twistgw.sdk.testing)."""
        for name in OLD_NAMES:
            if name in ("ConfigError", "ConfigIssue"):
                assert hasattr(twistgw.sdk.testing, name) and not hasattr(twistgw.sdk, name)
            elif _deprecated.NAMES[name][0] == "twistgw_extauth":  # the extauth plugin's contract
                assert not hasattr(twistgw.sdk, name) and hasattr(__import__("twistgw_extauth"), name)
            elif name in ("Route", "VirtualService"):
                assert not hasattr(twistgw.sdk, name) and hasattr(twistgw.sdk, name + "View")
            elif name in _deprecated.NAMES:
                assert hasattr(twistgw.sdk, name), name


class DeprecatedModulesTests(TestCase):
    @pytest.mark.parametrize("old, new, names", [
        ("twistgw.options", "twistgw.sdk", OLD_OPTIONS),
        ("twistgw.testing", "twistgw.sdk.testing", OLD_TESTING),
        ("twistgw.hookspecs", "twistgw.sdk.hookspecs", ["twistgw_compile_options", "twistgw_authenticate"]),
    ])
    def test_an_old_module_warns_at_the_import_and_exports_its_names(self, old: str, new: str,
                                                                     names: list[str]) -> None:
        code = (f"import json, {new} as new\n"
                f"from {old} import {', '.join(names)}\n"
                f"import {old} as old\n"
                f"print(json.dumps([n for n in {names!r} if getattr(old, n) is not getattr(new, n)]))\n")
        result = _fresh(code)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == []
        assert f'<string>:2: TwistgwDeprecationWarning: {old} is deprecated and will be removed in twistgw 0.2' \
            in result.stderr, result.stderr
        assert new in result.stderr
        assert result.stderr.count("TwistgwDeprecationWarning") == 1  # once, where it is first imported

    def test_a_plugin_written_for_0_1_imports_and_warns(self) -> None:
        """The 0.1 guide's plugin (docs/plugins.md of session 9), unchanged."""
        code = ("import twistgw\nfrom twistgw.options import Problems\n"
                "@twistgw.hookimpl\ndef twistgw_plugin_info():\n"
                "    return twistgw.PluginInfo(order=400)\n"
                "print(twistgw_plugin_info().order, Problems().count())\n")
        result = _fresh(code)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["400", "0"]
        for what in ("twistgw.hookimpl", "twistgw.options", "twistgw.PluginInfo"):
            assert f"{what} is deprecated" in result.stderr, what

    def test_importing_twistgw_loads_no_gateway(self) -> None:
        """``import twistgw`` (every plugin's first import) costs nothing:
        neither the SDK nor the core is loaded until asked for."""
        result = _fresh("import sys, twistgw\nprint(sorted(m for m in sys.modules if m.startswith('twistgw')))")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout.replace("'", '"')) == ["twistgw", "twistgw._deprecated"]


ROUTES = """\
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: v, namespace: team}
spec:
  virtualHost:
    domains: [gw.test, "*.gw.test"]
    routes:
    - name: first
      matchers: [{prefix: /a}]
      directResponseAction: {status: 200, body: route-a}
    - matchers: [{exact: /b, methods: [GET]}]
      directResponseAction: {status: 200, body: route-b}
"""


class ViewRouter:
    """Picks a route by name from ``x-route``; keeps what it was given."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    @twistgw.sdk.hookimpl
    def twistgw_route_match(self, ctx: twistgw.sdk.RequestContext,
                            virtual_service: twistgw.sdk.VirtualServiceView) -> twistgw.sdk.RouteView | None:
        self.seen.append(virtual_service)
        wanted = ctx.header("x-route")
        return next((r for r in virtual_service.routes if r.name == wanted), None)


class RouteViewTests(TestCase):
    """``twistgw_route_match`` sees read-only views, never the loader's classes."""

    async def test_the_hook_gets_a_view_and_returns_one_of_its_routes(self) -> None:
        router = ViewRouter()
        tester = twistgw.sdk.testing.ChainTester.from_yaml(ROUTES, [("router", router)])
        picked = await tester.request("GET", "http://gw.test/a", headers={"x-route": "routes[1]"})
        assert (picked.status, picked.plan.body) == (200, b"route-b")  # type: ignore[union-attr]
        plain = await tester.request("GET", "http://gw.test/a")
        assert plain.plan.body == b"route-a"  # type: ignore[union-attr]  # None: the core's matcher
        view = router.seen[0]
        assert isinstance(view, twistgw.sdk.VirtualServiceView)
        assert (view.key, view.namespace, view.name, view.domains) == ("team/v", "team", "v", ("gw.test", "*.gw.test"))
        assert [(r.name, r.index, r.upstream, r.matchers) for r in view.routes] == [
            ("first", 0, "", ("prefix /a",)), ("routes[1]", 1, "", ("exact /b methods GET",))]
        assert router.seen[1] is view  # one view per snapshot
        assert not any(type(o).__module__.startswith("twistgw.config") for o in (view, *view.routes))

    async def test_a_copy_of_a_route_view_is_refused(self) -> None:
        """Only the view the hook was given routes; an equal copy fails closed."""
        import attrs

        class Copier(ViewRouter):
            @twistgw.sdk.hookimpl
            def twistgw_route_match(self, ctx, virtual_service):  # type: ignore[no-untyped-def, override]
                return attrs.evolve(virtual_service.routes[0])

        tester = twistgw.sdk.testing.ChainTester.from_yaml(ROUTES, [("router", Copier())])
        with pytest.raises(TypeError, match="not one of the virtual service's routes"):
            await tester.request("GET", "http://gw.test/a")


ROOT = Path(__file__).resolve().parents[2]


def _plugin_files() -> list[Path]:
    """Every module of a shipped plugin (``plugins/``), of the examples
    (``examples/``, their tests included) and the config type docs/plugins.md
    shows (``tests/extauth/headertoken.py``)."""
    found = [p for base in ("plugins", "examples") for p in sorted((ROOT / base).rglob("*.py"))
             if "build" not in p.relative_to(ROOT).parts and "node_modules" not in p.parts]
    return found + [ROOT / "tests" / "extauth" / "headertoken.py"]


def _allowed(module: str) -> bool:
    return module == "twistgw.sdk" or module.startswith("twistgw.sdk.")


def sdk_violations(source: str, where: str = "<source>") -> list[str]:
    """``where:line what`` for every use of twistgw other than the SDK:
    each import (module level, function level, ``if TYPE_CHECKING:``), and
    each attribute of a ``twistgw`` name other than ``sdk``."""
    tree = ast.parse(source, where)
    found = []
    binds_twistgw = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                if name == "twistgw" or name.startswith("twistgw."):
                    binds_twistgw |= alias.asname is None
                    if not _allowed(name):
                        found.append(f"{where}:{node.lineno} import {name}")
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            module = node.module
            if module == "twistgw":
                found += [f"{where}:{node.lineno} from twistgw import {a.name}" for a in node.names if a.name != "sdk"]
            elif module.startswith("twistgw.") and not _allowed(module):
                found.append(f"{where}:{node.lineno} from {module} import "
                             + ", ".join(a.name for a in node.names))
    if binds_twistgw:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "twistgw"
                    and node.attr != "sdk"):
                found.append(f"{where}:{node.lineno} twistgw.{node.attr}")
    return sorted(found, key=lambda text: int(text.rsplit(":", 1)[1].split(" ", 1)[0]))


class PluginsImportOnlyTheSdkTests(TestCase):
    """A plugin, shipped or example, uses exactly what a third party gets."""

    def test_every_plugin_imports_only_the_sdk_from_twistgw(self) -> None:
        files = _plugin_files()
        assert len(files) > 80 and any("twistgw_apikey" in str(p) for p in files)
        found = [v for path in files for v in sdk_violations(path.read_text(), str(path.relative_to(ROOT)))]
        assert not found, "plugins import twistgw around the SDK:\n" + "\n".join(found)

    def test_the_check_finds_every_kind_of_import_around_the_sdk(self) -> None:
        source = (
            "from typing import TYPE_CHECKING\n"
            "import twistgw.sdk\n"                         # 2 allowed
            "from twistgw import sdk\n"                    # 3 allowed
            "from twistgw.sdk import Problems, testing\n"  # 4 allowed
            "import twistgw.sdk.testing as t\n"            # 5 allowed
            "from twistgw.options import Problems\n"       # 6
            "from twistgw import Deny, sdk\n"              # 7
            "if TYPE_CHECKING:\n"
            "    from twistgw.config.model import Route\n"  # 9
            "def f():\n"
            "    import twistgw.api.types\n"               # 11
            "    return twistgw.api.types.Allow\n"         # 12
            "import twistgw\n"                             # 13
            "from twistgw_jwt.verify import parse_token\n"  # another plugin's public module: not twistgw
        )
        assert sdk_violations(source) == [
            "<source>:6 from twistgw.options import Problems", "<source>:7 from twistgw import Deny",
            "<source>:9 from twistgw.config.model import Route", "<source>:11 import twistgw.api.types",
            "<source>:12 twistgw.api", "<source>:13 import twistgw"]

    def test_the_docs_first_plugin_uses_only_the_sdk(self) -> None:
        """The Python blocks of docs/plugins.md and docs/sdk.md are written as a plugin is."""
        found = []
        for doc in ("plugins.md", "sdk.md"):
            text = (ROOT / "docs" / doc).read_text()
            for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
                try:
                    found += sdk_violations(block, f"docs/{doc} block {i}")
                except SyntaxError:
                    continue  # a signature or a fragment, not a module
        assert not found, "\n".join(found)


RBAC_ROUTE = """\
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: v}
spec:
  virtualHost:
    domains: [gw.test]
    options:
      verifier: {}
      rbac: {policies: {admins: {principals: [{jwtPrincipal: {claims: {role: admin}}}], permissions: {}}}}
    routes:
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200, body: ok}
"""


class _Verifier:
    """Stands for a plugin that verified a token: the role comes from a header."""

    def __init__(self, legacy: bool = False) -> None:
        self.legacy = legacy

    @twistgw.sdk.hookimpl
    def twistgw_plugin_info(self) -> twistgw.sdk.PluginInfo:
        return twistgw.sdk.PluginInfo(order=200)

    @twistgw.sdk.hookimpl
    def twistgw_authenticate(self, ctx: twistgw.sdk.RequestContext, options: object) -> None:
        from twistgw_jwt.claims import set_verified_claims

        role = ctx.header("x-role")
        if role is None:
            return
        if self.legacy:  # twistgw 0.1's way
            ctx.claims = {"role": role}  # type: ignore[assignment]
            ctx.claims_provider = "legacy"  # type: ignore[assignment]
        else:
            set_verified_claims(ctx, {"role": role}, "verifier")


class RequestStateTests(TestCase):
    """Per-plugin state on the request context; the verified claims are the
    jwt plugin's state, not fields of the core's type."""

    def test_a_state_key_is_typed_per_plugin_storage(self) -> None:
        ctx = twistgw.sdk.RequestContext("GET", "/")
        mine: twistgw.sdk.StateKey[int] = twistgw.sdk.StateKey("mine", "count")
        other: twistgw.sdk.StateKey[int] = twistgw.sdk.StateKey("mine", "count")
        assert mine.get(ctx) is None
        mine.set(ctx, 3)
        assert (mine.get(ctx), other.get(ctx)) == (3, None)  # keys are distinct objects, never names
        ctx.state["mine"] = "plain names still work"
        assert repr(mine) == "StateKey('mine', 'count')"

    def test_the_core_context_has_no_claims_of_its_own(self) -> None:
        cls = twistgw.sdk.RequestContext
        # compiled by mypyc (twistgw/compiled.py), the class lists its attributes in __mypyc_attrs__
        slots = cls.__dict__.get("__slots__") or cls.__mypyc_attrs__  # type: ignore[attr-defined]
        assert "claims" not in slots and "claims_provider" not in slots
        ctx = twistgw.sdk.RequestContext("GET", "/")
        assert ctx.state == {}

    async def test_rbac_reads_the_claims_a_plugin_verified(self) -> None:
        from twistgw_jwt.claims import verified_claims

        tester = twistgw.sdk.testing.ChainTester.from_yaml(RBAC_ROUTE, [("verifier", _Verifier()), "rbac"])
        admin = await tester.request("GET", "http://gw.test/", headers={"x-role": "admin"})
        assert admin.status == 200
        found = verified_claims(admin.ctx)  # type: ignore[arg-type]
        assert found is not None and (found.claims, found.provider) == ({"role": "admin"}, "verifier")
        viewer = await tester.request("GET", "http://gw.test/", headers={"x-role": "viewer"})
        assert (viewer.status, viewer.decided_by) == (403, "rbac")
        nobody = await tester.request("GET", "http://gw.test/")
        assert nobody.status == 403 and verified_claims(nobody.ctx) is None  # type: ignore[arg-type]

    async def test_ctx_claims_of_0_1_still_works_and_warns(self) -> None:
        tester = twistgw.sdk.testing.ChainTester.from_yaml(RBAC_ROUTE, [("verifier", _Verifier(legacy=True)), "rbac"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            admin = await tester.request("GET", "http://gw.test/", headers={"x-role": "admin"})
            assert admin.status == 200
            assert (admin.ctx.claims, admin.ctx.claims_provider) == ({"role": "admin"}, "legacy")  # type: ignore
        texts = {str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)}
        assert any("RequestContext.claims is deprecated" in t and "twistgw_jwt.claims" in t for t in texts), texts
        assert any("RequestContext.claims_provider is deprecated" in t for t in texts), texts
        assert all(w.filename == __file__ for w in caught if "RequestContext.claims" in str(w.message))


def _delegating(parent: str, children: list[str]) -> str:
    """A virtual service delegating ``/t/`` to a RouteTable: ``parent`` and
    each child's ``options`` as YAML flow mappings; child i matches ``/t/i``."""
    routes = "".join(f"    - matchers: [{{prefix: /t/{i}}}]\n      directResponseAction: {{status: 200, body: c{i}}}\n"
                     f"      options: {child}\n" for i, child in enumerate(children))
    return ("apiVersion: gateway.vendor.io/v1\nkind: VirtualService\nmetadata: {name: v}\nspec:\n"
            "  virtualHost:\n    domains: [gw.test]\n    routes:\n    - matchers: [{prefix: /t/}]\n"
            f"      delegateAction: {{ref: {{name: t}}}}\n      options: {parent}\n---\n"
            "apiVersion: gateway.vendor.io/v1\nkind: RouteTable\nmetadata: {name: t}\nspec:\n  routes:\n" + routes)


class _Recorder:
    """A plugin whose compiled options are the options as written."""

    def __init__(self, info: twistgw.sdk.PluginInfo) -> None:
        self.info = info

    @twistgw.sdk.hookimpl
    def twistgw_plugin_info(self) -> twistgw.sdk.PluginInfo:
        return self.info

    @twistgw.sdk.hookimpl
    def twistgw_compile_options(self, options: object, scope: twistgw.sdk.OptionsScope) -> object:
        return options


def _chains(tester: twistgw.sdk.testing.ChainTester) -> list[list[tuple[str, object]]]:
    """Each delegated route's chain: (step label, its options), in order."""
    snapshot = tester.snapshot
    (vs,) = snapshot.config.virtual_services
    return [[(step.label, step.options) for step in snapshot.runtime(vs, route).chain] for route in vs.routes]


class DelegatedOptionsMergeTests(TestCase):
    """Delegation merges options as each plugin declares, for any plugin:
    the loader knows no plugin's keys."""

    def test_any_staged_plugin_merges_stage_by_stage(self) -> None:
        """The jwt plugin's rule (docs/jwt.md, "Stages") for a plugin named
        otherwise: the parent's before stage stays when a child sets only
        its own key (the after stage), and {disable: true} turns all off."""
        sig = _Recorder(twistgw.sdk.PluginInfo(order=200, staged_options=twistgw.sdk.StagedOptions(
            "gate", "early", "late", ("sigStaged", "sigRouteStaged"), route_only=("sigRouteStaged",))))
        gate = _Recorder(twistgw.sdk.PluginInfo(order=100))
        text = _delegating("{gate: {}, sigRouteStaged: {early: {k: parent}}}",
                           ["{sig: {k: child}}", "{sig: {disable: true}}", "{sigStaged: {late: {disable: true}}}"])
        chains = _chains(twistgw.sdk.testing.ChainTester.from_yaml(text, [("gate", gate), ("sig", sig)]))
        assert chains == [
            [("sig[early]", {"k": "parent"}), ("gate", {}), ("sig[late]", {"k": "child"})],  # both stages
            [("gate", {})],  # every stage off
            [("sig", {"k": "parent"}), ("gate", {})],  # the parent's early stage alone
        ]

    def test_a_plugin_declares_its_own_merge(self) -> None:
        def union(parent: object, child: object) -> object:
            assert isinstance(parent, dict) and isinstance(child, dict)
            return {"allow": sorted({*parent.get("allow", ()), *child.get("allow", ())})}

        merging = _Recorder(twistgw.sdk.PluginInfo(merge_options=union))
        plain = _Recorder(twistgw.sdk.PluginInfo())
        text = _delegating("{merging: {allow: [a]}, plain: {allow: [a]}}",
                           ["{merging: {allow: [b]}, plain: {allow: [b]}}", "{}"])
        chains = _chains(twistgw.sdk.testing.ChainTester.from_yaml(text, [("merging", merging), ("plain", plain)]))
        assert chains == [
            [("merging", {"allow": ["a", "b"]}), ("plain", {"allow": ["b"]})],  # plain: the child's replaces
            [("merging", {"allow": ["a"]}), ("plain", {"allow": ["a"]})],  # only the parent sets them
        ]

    def test_the_route_table_code_names_no_plugin(self) -> None:
        import twistgw.config.routetables as routetables

        source = Path(routetables.__file__).read_text()
        assert not re.search(r"\bjwt", source, re.I), "config/routetables.py names the jwt plugin"


SETTINGS = """\
apiVersion: gateway.vendor.io/v1
kind: Settings
metadata: {name: s}
spec: %s
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: v}
spec:
  virtualHost:
    domains: [gw.test]
    options: %s
    routes:
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200}
"""


class _Shared:
    """Reads options.NAME and the shared Settings section ``pool``, whose
    ``size`` must be an integer."""

    def __init__(self, settings: tuple[str, ...] = ("pool",)) -> None:
        self.settings = settings
        self.checked: list[tuple[str, object]] = []

    @twistgw.sdk.hookimpl
    def twistgw_plugin_info(self) -> twistgw.sdk.PluginInfo:
        return twistgw.sdk.PluginInfo(settings=self.settings, description="shares a pool")

    @twistgw.sdk.hookimpl
    def twistgw_check_settings(self, section: str, settings: Any) -> None:
        self.checked.append((section, dict(settings)))
        if not isinstance(settings.get("size", 0), int):
            raise twistgw.sdk.OptionsError(("size",), "must be an integer")


class _Provider:
    """Reads no options and no Settings section: gives something else."""

    @twistgw.sdk.hookimpl
    def twistgw_plugin_info(self) -> twistgw.sdk.PluginInfo:
        return twistgw.sdk.PluginInfo(description="the 'x' widget, configured elsewhere", options=(), settings=())


def _issues(text: str, plugins: list[tuple[str, object]]) -> list[tuple[str, str]]:
    with pytest.raises(twistgw.sdk.testing.ConfigError) as caught:
        twistgw.sdk.testing.ChainTester.from_yaml(text, plugins)
    return [(i.field or "", i.reason) for i in caught.value.issues]


class DeclaredReadsTests(TestCase):
    """A plugin declares the options keys and Settings sections it reads;
    the loader, check, explain and the docs read that declaration, so no
    plugin exists only to refuse a key."""

    def test_a_shared_section_is_checked_by_its_readers_and_reported_once(self) -> None:
        a, b = _Shared(), _Shared()
        twistgw.sdk.testing.ChainTester.from_yaml(SETTINGS % ("{pool: {size: 3}}", "{a: {}}"), [("a", a), ("b", b)])
        assert a.checked == b.checked == [("pool", {"size": 3})]
        found = _issues(SETTINGS % ("{pool: {size: big}}", "{}"), [("a", _Shared()), ("b", _Shared())])
        assert found == [("spec.pool.size", "must be an integer")]

    def test_a_section_only_is_no_options_key(self) -> None:
        (found,) = _issues(SETTINGS % ("{}", "{pool: {size: 1}}"), [("a", _Shared()), ("b", _Shared())])
        assert found == ("spec.virtualHost.options.pool", "pool is a Settings section (Settings spec.pool, read by"
                                                           " a, b), not an option of virtual hosts or routes")

    def test_a_plugin_without_options_is_no_options_key_and_no_section(self) -> None:
        (found,) = _issues(SETTINGS % ("{}", "{widget: {}}"), [("widget", _Provider())])
        assert found == ("spec.virtualHost.options.widget", "plugin 'widget' reads no options of virtual hosts or"
                                                             " routes (the 'x' widget, configured elsewhere)")
        (found,) = _issues(SETTINGS % ("{widget: {}}", "{}"), [("widget", _Provider())])
        assert found == ("spec.widget", "plugin 'widget' reads no Settings section (the 'x' widget, configured"
                                        " elsewhere)")

    def test_a_section_its_plugin_does_not_read_is_refused(self) -> None:
        """Its own name's section too, when it declares others only (it used
        to be accepted and ignored)."""
        (found,) = _issues(SETTINGS % ("{a: {size: 1}}", "{}"), [("a", _Shared())])
        assert found[0] == "spec.a" and found[1].startswith("plugin 'a' reads no Settings section")

    def test_a_declaration_the_core_cannot_serve_is_a_plugin_error(self) -> None:
        from twistgw.core.plugins import PluginError, PluginHost

        class Other:
            @twistgw.sdk.hookimpl
            def twistgw_plugin_info(self) -> twistgw.sdk.PluginInfo:
                return twistgw.sdk.PluginInfo(options=("elsewhere",))

        with pytest.raises(PluginError, match="may list its own name and its staged keys, not 'elsewhere'"):
            PluginHost.create([("other", Other())], load_entry_points=False)

    def test_the_shipped_plugins_declare_what_they_read_and_none_only_refuses(self) -> None:
        """One entry point per real plugin; the ones that give the extauth
        plugin config types read no options and no section of their own."""
        from importlib.metadata import entry_points

        from twistgw.core.plugins import PluginHost

        shipped = sorted(ep.name for ep in entry_points(group="twistgw.plugins")
                         if ep.dist is not None and ep.dist.name == "twistgw")
        assert shipped == ["authtypes", "extauth", "jwt", "ldap", "localRatelimit", "oidc", "rateLimitConfigs",
                           "ratelimit", "ratelimitBasic", "ratelimitEarly", "ratelimitRegular", "rbac"]
        host = PluginHost.create(load_entry_points=True, blocked=())
        reads = {name: host.reads(name) for name in shipped}
        assert reads["jwt"] == "options.jwt, options.jwtStaged, options.jwtProvidersStaged; Settings spec.jwt"
        assert reads["ratelimit"] == "options.ratelimit; Settings spec.ratelimit, Settings spec.ratelimitServer"
        assert reads["localRatelimit"] == "options.localRatelimit; Settings spec.ratelimitServer"
        for provider in ("ldap", "authtypes", "oidc"):
            assert reads[provider] == "no options, no Settings section"
            assert host.impl(provider, "twistgw_compile_options") is None  # nothing to refuse
        assert sorted(host.sections["ratelimitServer"]) == ["localRatelimit", "rateLimitConfigs", "ratelimit",
                                                            "ratelimitBasic", "ratelimitEarly", "ratelimitRegular"]


class SdkIsAFacadeTests(TestCase):
    def test_nothing_in_the_gateway_imports_the_sdk(self) -> None:
        """The SDK only re-exports: the gateway's modules import the machinery,
        never ``twistgw.sdk`` (which sits above them, with the public surface)."""
        package = Path(twistgw.__file__).resolve().parent
        found = []
        for path in sorted(package.rglob("*.py")):
            if "sdk" in path.relative_to(package).parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) and \
                    node.module else []
                found += [f"{path.name}:{node.lineno} {n}" for n in names
                          if n == "twistgw.sdk" or n.startswith("twistgw.sdk.")]
        assert not found, found
