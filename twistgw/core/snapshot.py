"""A serving snapshot: the configuration with every plugin's options compiled.

A reload builds a whole new Snapshot and swaps one reference; building is
all-or-nothing, so a bad edit never half-applies.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Mapping

import attrs

from twistgw.api.plugin import Placement, StagedOptions
from twistgw.api.types import Endpoint, OptionsError, OptionsScope, ResourceView, UpstreamInfo
from twistgw.config.loader import CORE_OPTION_KEYS, Config, ConfigError, ConfigIssue, path_text
from twistgw.config.model import DirectResponse, KubeRef, Route, UpstreamRef, VirtualService
from twistgw.core.plan import LocalResponse
from twistgw.options import type_name
from twistgw.core.plugins import PluginHost
from twistgw.core.routing import HostTable


@attrs.frozen
class ChainStep:
    """One plugin in a route's chain, with its compiled options."""

    plugin: str
    options: Any
    authenticate: Callable[..., Any] | None
    authorize: Callable[..., Any] | None


def flatten_chain(steps: tuple[ChainStep, ...]) -> tuple[tuple[ChainStep, str, Callable[..., Any]], ...]:
    """Each plugin's authenticate then authorize, in chain order, as
    (step, phase, callable)."""
    out = []
    for step in steps:
        if step.authenticate is not None:
            out.append((step, "authenticate", step.authenticate))
        if step.authorize is not None:
            out.append((step, "authorize", step.authorize))
    return tuple(out)


class Balancer:
    """Round robin over an upstream's endpoints."""

    __slots__ = ("upstream", "_counter")

    def __init__(self, upstream: UpstreamInfo) -> None:
        self.upstream = upstream
        self._counter = itertools.count()

    def pick(self) -> Endpoint | None:
        eps = self.upstream.endpoints
        if not eps:
            return None
        return eps[next(self._counter) % len(eps)]


@attrs.frozen
class RouteRuntime:
    virtual_service: VirtualService
    route: Route
    chain: tuple[ChainStep, ...]
    direct: DirectResponse | None
    balancer: Balancer | None
    #: the chain flattened into (step, phase, callable), once per snapshot
    calls: tuple[tuple[ChainStep, str, Callable[..., Any]], ...] = attrs.field(init=False, eq=False)
    #: the answer of a direct-response route, made once per snapshot
    answer: LocalResponse | None = attrs.field(init=False, eq=False)

    @calls.default
    def _flatten(self) -> tuple[tuple[ChainStep, str, Callable[..., Any]], ...]:
        return flatten_chain(self.chain)

    @answer.default
    def _answer(self) -> LocalResponse | None:
        if self.direct is None:
            return None
        return LocalResponse(self.direct.status, self.direct.body, reason="direct response")


class Snapshot:
    """What serves requests; immutable once built."""

    def __init__(self, config: Config, routes: dict[tuple[str, int], RouteRuntime],
                 generation: int, plugin_compiled: dict[str, list[Any]]) -> None:
        self.config = config
        self.hosts = HostTable(config.virtual_services)
        self.routes = routes
        self.generation = generation
        self.loaded_at = time.time()
        self.plugin_compiled = plugin_compiled

    def runtime(self, vs: VirtualService, route: Route) -> RouteRuntime:
        return self.routes[(vs.key, route.index)]


def _is_disabled(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("disable") is True


def build_snapshot(config: Config, host: PluginHost, generation: int = 1) -> Snapshot:
    """Compile every route's chain. Raises ConfigError listing every problem."""
    issues: list[ConfigIssue] = []
    view = ResourceView(config.upstreams, config.secrets, config.auth_configs, config.resolve_kube,
                        config.settings, config.directory)
    defaults: dict[str, Any] = {}
    for name in host.infos:
        fn = host.impl(name, "twistgw_default_options")
        if fn is not None:
            src = config.settings_source
            try:
                value = fn(settings=view.settings(name))
            except OptionsError as exc:
                issues.append(ConfigIssue(
                    exc.reason, file=src.file if src else "", document=src.document if src else None,
                    line=src.line if src else None, resource="Settings",
                    field=path_text(("spec", name) + exc.path)))
                continue
            except Exception as exc:
                issues.append(ConfigIssue(
                    f"plugin {name!r} failed reading its settings: {exc!r}",
                    file=src.file if src else "", resource="Settings", field=f"spec.{name}"))
                continue
            if value is not None:
                defaults[name] = value
    for key in config.settings:
        if key not in host.infos and key != "gateway":
            src = config.settings_source
            issues.append(ConfigIssue(
                f"no plugin named {key!r} is installed (installed: {', '.join(host.names()) or 'none'})",
                file=src.file if src else "", document=src.document if src else None,
                line=src.line if src else None, resource="Settings", field=f"spec.{key}"))
    staged = {info.staged_options.key: (name, info.staged_options)
              for name, info in host.infos.items() if info.staged_options is not None}
    routes: dict[tuple[str, int], RouteRuntime] = {}
    compiled_by_plugin: dict[str, list[Any]] = {name: [] for name in host.infos}
    balancers: dict[tuple[str, str], Balancer] = {}

    for vs in config.virtual_services:
        source = vs.source
        vh_path: tuple[str | int, ...] = ("spec", "virtualHost")
        cache: dict[tuple[str, int], Any] = {}

        def issue(path: tuple[str | int, ...], reason: str) -> None:
            issues.append(ConfigIssue(
                reason,
                file=source.file if source else "",
                document=source.document if source else None,
                line=source.line_of(tuple(path)) if source else None,
                resource=f"VirtualService {vs.key}",
                field=path_text(path),
            ))

        vh_plugins, vh_placements = _plugin_options(vs.options, vh_path + ("options",), staged, issue)
        for route in vs.routes:
            r_path = vh_path + ("routes", route.index)
            r_plugins, r_placements = _plugin_options(route.options, r_path + ("options",), staged, issue)
            effective: dict[str, tuple[Any, tuple[str | int, ...], str | None]] = {}
            for key, value in defaults.items():
                effective[key] = (value, ("Settings", "spec", key), None)
            for key, (value, where) in vh_plugins.items():
                effective[key] = (value, where, None)
            for key, (value, where) in r_plugins.items():
                effective[key] = (value, where, route.name)
            order_raw = route.options.get("pluginOrder", vs.options.get("pluginOrder"))

            steps: list[ChainStep] = []
            enabled = {k: v for k, v in effective.items() if not _is_disabled(v[0])}
            unknown = [k for k in enabled if k not in host.infos]
            for key in unknown:
                issue(enabled[key][1], f"no plugin named {key!r} is installed"
                      f" (installed: {', '.join(host.names()) or 'none'}); refusing to serve"
                      " a route whose protection cannot be enforced")
            if unknown:
                continue
            if order_raw is not None:
                missing = [k for k in enabled if k not in order_raw]
                if missing:
                    issue(r_path + ("options", "pluginOrder") if "pluginOrder" in route.options
                          else vh_path + ("options", "pluginOrder"),
                          f"pluginOrder must list every enabled plugin; missing: {', '.join(missing)}")
                    continue
                not_installed = [k for k in order_raw if k not in host.infos]
                if not_installed:
                    issue(vh_path + ("options", "pluginOrder"),
                          f"pluginOrder names plugins that are not installed: {', '.join(not_installed)}")
                    continue
                order = [k for k in order_raw if k in enabled]
            else:
                # A staged options key (jwtStaged) places its plugin; the
                # route's stage wins over the virtual host's.
                order = host.chain_order(enabled, {**vh_placements, **r_placements})
            failed = False
            for name in order:
                raw, where, route_name = enabled[name]
                cache_key = (name, id(raw))
                if cache_key in cache:
                    compiled = cache[cache_key]
                else:
                    scope = OptionsScope(vs.namespace, vs.key, route_name, view)
                    try:
                        compiled = _compile(host, name, raw, scope)
                    except OptionsError as exc:
                        issue(where + exc.path, exc.reason)
                        failed = True
                        continue
                    except Exception as exc:  # a plugin bug: reject, never serve unprotected
                        issue(where, f"plugin {name!r} failed compiling its options: {exc!r}")
                        failed = True
                        continue
                    cache[cache_key] = compiled
                    compiled_by_plugin[name].append(compiled)
                steps.append(ChainStep(
                    name, compiled,
                    host.impl(name, "twistgw_authenticate"),
                    host.impl(name, "twistgw_authorize"),
                ))
            if failed:
                continue

            direct = None
            balancer = None
            action = route.action
            if isinstance(action, DirectResponse):
                direct = action
            else:
                assert isinstance(action, (KubeRef, UpstreamRef))
                key = action.upstream_key()
                upstream = config.upstreams.get(key)
                if upstream is None:  # build_config already reported it
                    continue
                balancer = balancers.get(key)
                if balancer is None:
                    balancer = balancers[key] = Balancer(upstream)
            routes[(vs.key, route.index)] = RouteRuntime(vs, route, tuple(steps), direct, balancer)

    if issues:
        raise ConfigError(issues)
    return Snapshot(config, routes, generation, compiled_by_plugin)


Where = tuple[str | int, ...]


def _plugin_options(options: Mapping[str, Any], path: Where, staged: Mapping[str, tuple[str, StagedOptions]],
                    issue: Callable[[Where, str], None]) -> tuple[dict[str, tuple[Any, Where]], dict[str, Placement]]:
    """The plugins' entries of an ``options`` mapping at ``path``: ``{plugin:
    (raw options, where)}``, and the placement a staged options key
    (e.g. ``jwtStaged: {beforeExtAuth: {...}}``) gives its plugin."""
    out = {k: (v, path + (k,)) for k, v in options.items() if k not in CORE_OPTION_KEYS and k not in staged}
    placements: dict[str, Placement] = {}
    for key, (plugin, spec) in staged.items():
        if key not in options:
            continue
        where, value = path + (key,), options[key]
        stages = " or ".join(spec.stages)
        if not isinstance(value, Mapping):
            issue(where, f"must be a mapping with one of {stages}, got {type_name(value)}")
        elif any(k not in spec.stages for k in value):
            wrong = next(k for k in value if k not in spec.stages)
            issue(where + (str(wrong),), f"unknown field {wrong!r}; expected one of: {', '.join(spec.stages)}")
        elif len(value) != 1:
            issue(where, f"set exactly one of {stages}")
        elif plugin in options:
            issue(where, f"use either {plugin} or {key}, not both")
        else:
            (stage, raw), = value.items()
            out[plugin] = (raw, where + (stage,))
            placements[plugin] = spec.stages[stage]
    return out, placements


def _compile(host: PluginHost, name: str, raw: Any, scope: OptionsScope) -> Any:
    fn = host.impl(name, "twistgw_compile_options")
    if fn is None:
        return raw
    if not isinstance(raw, Mapping):
        raise OptionsError((), f"must be a mapping, got {type(raw).__name__}")
    return fn(options=raw, scope=scope)
