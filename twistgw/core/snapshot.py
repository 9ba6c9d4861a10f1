"""A serving snapshot: the configuration with every plugin's options compiled.

A reload builds a whole new Snapshot and swaps one reference; building is
all-or-nothing, so a bad edit never half-applies.
"""

from __future__ import annotations

import time
from typing import Any, Mapping


from twistgw.api.plugin import Placement
from twistgw.api.types import OptionsError, OptionsScope, ResourceView
from twistgw.api.types import path_text
from twistgw.config.errors import ConfigError, ConfigIssue
from twistgw.config.routeoptions import GLOO_PLUGIN_KEYS, KNOWN_OPTION_KEYS
from twistgw.config.resolution import Config
from twistgw.config.model import DirectResponse, KubeRef, Route, UpstreamRef, VirtualService
from twistgw.core.chain import ChainStep
from twistgw.core.compiling import (
    about_invalid_resource,
    check_resources,
    check_unused_route_tables,
    compile_plugin,
    owned_headers,
    plugin_options,
    written_on_host,
)
from twistgw.core.routeruntime import RouteRuntime
from twistgw.core import stages
from twistgw.core.plugins import PluginHost
from twistgw.core.gateways import GatewayView, build_gateway_views
from twistgw.core.routing import HostTable
from twistgw.core.tlsroutes import TlsRoutes
from twistgw.core.balancers import make_balancer
from twistgw.core.health import HealthState, UpstreamStates
from twistgw.core.outlier import OutlierState
from twistgw.core.policies import compile_policy, forged_headers


class Snapshot:
    """What serves requests; immutable once built."""

    def __init__(self, config: Config, routes: dict[tuple[str, int], RouteRuntime],
                 generation: int, plugin_compiled: dict[str, list[Any]],
                 owned_headers: tuple[bytes, ...] = (),
                 health: dict[tuple[str, str], HealthState] | None = None,
                 outliers: dict[tuple[str, str], OutlierState] | None = None,
                 gateways: dict[str, GatewayView] | None = None) -> None:
        self.config = config
        #: each Gloo Gateway this process serves, by ``namespace/name``
        self.gateways = gateways or {}
        #: upstream → its active health, for the runtime's checker (healthChecks)
        self.health = health or {}
        #: upstream → its outlier detection, for the runtime's sweeps (outlierDetection)
        self.outliers = outliers or {}
        #: canonical names of the request headers plugins own
        #: (:class:`twistgw.OwnsRequestHeaders`): a client's copies are removed
        #: from every request before routing and before the chain
        self.owned_headers = owned_headers
        #: the virtual services of plain listeners (those without
        #: ``sslConfig``; also a TLS listener's own certificate's), and the
        #: certificates and virtual services of TLS listeners, by SNI
        self.hosts = HostTable(vs for vs in config.virtual_services if vs.tls is None)
        self.tls = TlsRoutes(config.virtual_services)
        self.routes = routes
        self.generation = generation
        self.loaded_at = time.time()
        self.plugin_compiled = plugin_compiled

    def runtime(self, vs: VirtualService, route: Route) -> RouteRuntime:
        return self.routes[(vs.key, route.index)]


def build_snapshot(config: Config, host: PluginHost, generation: int = 1) -> Snapshot:
    """Compile every route's chain. Raises ConfigError listing every problem.

    The steps: the plugins' gateway-wide defaults (``Settings``), a check
    that every Settings section names an installed plugin, then each
    virtual service (:class:`_HostCompiler`: each route's effective options,
    stages, order, compiled chain and destination; then the options written
    on the virtual host that no route runs).
    """
    build = _Build(config, host)
    _compile_defaults(build)
    _check_settings_sections(build)
    check_resources(config, host, build.view, build.issues)
    _placements(build)
    for vs in config.virtual_services:
        _HostCompiler(build, vs).run()
    check_unused_route_tables(config, host, build.view, build.staged, build.issues)
    _check_forged_headers(build)
    gateways = build_gateway_views(config, host, build.view, build.issues, build.compiled_by_plugin)
    if build.issues or config.issues:
        raise ConfigError(list(config.issues) + build.issues)
    return Snapshot(config, build.routes, generation, build.compiled_by_plugin, tuple(sorted(build.owned)),
                    build.states.health, build.states.outliers, gateways)


#: The key of one upstream's balancer: (namespace, name) and the route's subset.
_BalancerKey = tuple[tuple[str, str], tuple[tuple[str, str], ...]]

#: A plugin's options where they take effect: (raw options, where written,
#: the route's name or None when inherited); see :data:`stages.Entry`.
_Entry = stages.Entry


class _Build:
    """What one snapshot build accumulates."""

    def __init__(self, config: Config, host: PluginHost) -> None:
        self.config = config
        self.host = host
        self.view = ResourceView(config.upstreams, config.secrets, config.auth_configs, config.resolve_kube,
                                 config.settings, config.directory, config.invalid, config.resources)
        self.issues: list[ConfigIssue] = []
        #: each plugin's compiled Settings section (``twistgw_default_options``)
        self.defaults: dict[str, Any] = {}
        self.staged = {name: info.staged_options for name, info in host.infos.items()
                       if info.staged_options is not None}
        self.staged_keys = frozenset(key for decl in self.staged.values() for key in decl.keys)
        self.routes: dict[tuple[str, int], RouteRuntime] = {}
        self.compiled_by_plugin: dict[str, list[Any]] = {name: [] for name in host.infos}
        self.balancers: dict[_BalancerKey, Any] = {}
        #: each upstream's active health, outlier detection, active requests
        self.states = UpstreamStates()
        #: request headers the compiled options own (OwnsRequestHeaders)
        self.owned: set[bytes] = set()
        #: (virtual service, id(raw options), plugin) already reported
        self.reported: set[tuple[str, int, str]] = set()
        #: each plugin's place for this configuration (``twistgw_placement``)
        self.placements: dict[str, Placement] = {}

    def settings_issue(self, path: stages.Where, reason: str, with_line: bool = True) -> None:
        """A problem in the Settings resource at ``path`` (below ``spec``)."""
        src = self.config.settings_source
        field = ("spec",) + tuple(path)
        self.issues.append(ConfigIssue(
            reason, file=src.file if src else "", document=src.document if src and with_line else None,
            line=src.line_of(field) if src and with_line else None, resource="Settings",
            field=src.field_of(field) if src else path_text(field)))

    def balancer(self, key: tuple[str, str], subset: tuple[tuple[str, str], ...]) -> Any:
        """One balancer per upstream and subset, shared by the routes to it."""
        found = self.balancers.get((key, subset))
        if found is None:
            res = self.config.upstream_resources.get(key)
            lb = res.load_balancer if res is not None else None
            info = self.config.select(key, subset)
            if res is not None and (res.health_check is not None or res.outlier is not None
                                    or (lb is not None and lb.kind == "leastRequest")):
                found = self.states.balancer(key, res, self.config.upstreams[key], info, lb)
            else:
                found = make_balancer(info, lb)
            self.balancers[(key, subset)] = found
        return found



def _compile_defaults(build: _Build) -> None:
    """Each plugin's ``Settings.spec.<plugin>`` through its ``twistgw_default_options``."""
    for name in build.host.infos:
        fn = build.host.impl(name, "twistgw_default_options")
        if fn is None:
            continue
        try:
            value = fn(settings=build.view.settings(name), config_dir=build.config.directory)
        except OptionsError as exc:
            for p in exc.problems:
                build.settings_issue((name,) + p.path, p.reason)
            continue
        except Exception as exc:
            build.settings_issue((name,), f"plugin {name!r} failed reading its settings: {exc!r}", with_line=False)
            continue
        if value is not None:
            build.defaults[name] = value


def _placements(build: _Build) -> None:
    """Each plugin's ``twistgw_placement`` for this configuration (the ones that return one)."""
    for name in build.host.infos:
        fn = build.host.impl(name, "twistgw_placement")
        if fn is None:
            continue
        try:
            placement = fn(resources=build.view)
        except Exception as exc:
            build.settings_issue((name,), f"plugin {name!r} failed choosing its place in the chain: {exc!r}",
                                 with_line=False)
            continue
        if placement is None:
            continue
        if not isinstance(placement, Placement):
            build.settings_issue((name,), f"plugin {name!r}: twistgw_placement must return twistgw.Placement"
                                 f" or None, got {placement!r}", with_line=False)
            continue
        build.placements[name] = placement
def _check_forged_headers(build: _Build) -> None:
    """headerManipulation may not name a request header a plugin owns."""
    for runtime, reason in forged_headers(build.routes.values(), build.owned):
        _HostCompiler(build, runtime.virtual_service).issue(
            runtime.route.path + ("options", "headerManipulation"), reason, runtime.route)


def _check_settings_sections(build: _Build) -> None:
    """Every ``Settings.spec`` section but ``gateway`` names an installed plugin."""
    src = build.config.settings_source
    for key in build.config.settings:
        if key not in build.host.infos and key != "gateway":
            build.issues.append(ConfigIssue(
                build.host.missing(key),
                file=src.file if src else "", document=src.document if src else None,
                line=src.line if src else None, resource="Settings", field=f"spec.{key}"))


class _Failed(Exception):
    """A route cannot be served; its problem is recorded."""


class _HostCompiler:
    """Compiles the routes of one virtual service."""

    VH_PATH: stages.Where = ("spec", "virtualHost")

    def __init__(self, build: _Build, vs: VirtualService) -> None:
        self.build = build
        self.vs = vs
        #: (plugin, id(raw options)) → compiled: options shared by routes compile once
        self.cache: dict[tuple[str, int], Any] = {}

    def issue(self, path: stages.Where, reason: str, route: Route | None = None) -> None:
        """A problem at ``path``; a route written in a RouteTable is
        reported where it is written."""
        vs = self.vs
        in_table = route is not None and route.source is not None and tuple(path[:2]) != self.VH_PATH
        source = route.source if in_table and route is not None else vs.source
        self.build.issues.append(ConfigIssue(
            reason, file=source.file if source else "", document=source.document if source else None,
            line=source.line_of(tuple(path)) if source else None,
            resource=route.owner if in_table and route is not None else f"VirtualService {vs.key}",
            field=source.field_of(tuple(path)) if source else path_text(path)))

    def plugin_problems(self, exc: OptionsError, where: stages.Where, route: Route | None) -> None:
        """Each problem of a plugin's OptionsError, located: below the
        options key, or in the resource the options refer to."""
        for p in exc.problems:
            if about_invalid_resource(p):
                continue
            if p.resource is None:
                self.issue(where + p.path, p.reason, route)
                continue
            kind, ns, name = p.resource
            source = self.build.config.sources.get(p.resource)
            if source is None:
                self.issue(where, f"{kind} {ns}/{name}: {path_text(p.path)}: {p.reason}", route)
            else:
                self.build.issues.append(ConfigIssue(
                    p.reason, file=source.file, document=source.document, line=source.line_of(p.path),
                    resource=f"{kind} {ns}/{name}", field=source.field_of(p.path)))

    def stages_ok(self, options: Mapping[str, Any], path: stages.Where, route: Route | None) -> bool:
        """The staged plugins' keys (``jwtStaged``...) are well formed here."""
        def report(where: stages.Where, reason: str) -> None:
            self.issue(where, reason, route)

        return all([stages.check(name, decl, options, path, route is not None, report)
                    for name, decl in self.build.staged.items()])

    def run(self) -> None:
        vs = self.vs
        vh_options = self.VH_PATH + ("options",)
        if not self.stages_ok(vs.options, vh_options, None):
            return
        vh_plugins = plugin_options(vs.options, vh_options, self.build.staged_keys)
        self.check_disabled(vh_plugins, None)
        reselect = any(r.reads_request for r in vs.routes)
        for route in vs.routes:
            try:
                runtime = self.route(route, vh_plugins, reselect)
            except _Failed:
                continue
            if runtime is not None:
                self.build.routes[(vs.key, route.index)] = runtime
        self.compile_unrun(vh_plugins)

    def route(self, route: Route, vh_plugins: Mapping[str, tuple[Any, stages.Where]],
              reselect: bool) -> RouteRuntime | None:
        """One route's runtime: its chain and destination (None when its
        destination was already reported as dangling); raises _Failed."""
        effective = self.effective(route, vh_plugins)
        if not self.stages_ok(route.options, route.path + ("options",), route):
            raise _Failed()
        # A staged plugin (jwt) stands for its stages in the checks below;
        # each stage is compiled on its own.
        route_stages: dict[str, dict[str, _Entry]] = {}
        for name, decl in self.build.staged.items():
            found = stages.stages_of(decl, effective.pop(name, None), self.vs.options, route.options,
                                     self.VH_PATH, route.path, route.name)
            if found:
                effective[name] = next(iter(found.values()))
            route_stages[name] = found
        enabled = {k: v for k, v in effective.items() if not stages.is_disabled(v[0])}
        placed = self.placed(route, enabled, route_stages)
        steps = self.steps(route, placed, enabled, route_stages)
        return self.runtime(route, steps, reselect)

    def effective(self, route: Route, vh_plugins: Mapping[str, tuple[Any, stages.Where]]) -> dict[str, _Entry]:
        """Each plugin's options for ``route``: Settings default, then the
        virtual host's, then the route's own."""
        effective: dict[str, _Entry] = {}
        for key, value in self.build.defaults.items():
            effective[key] = (value, ("Settings", "spec", key), None)
        for key, (value, where) in vh_plugins.items():
            effective[key] = (value, where, None)
        r_plugins = plugin_options(route.options, route.path + ("options",), self.build.staged_keys)
        self.check_disabled(r_plugins, route)
        for key, (value, where) in r_plugins.items():
            effective[key] = (value, where, route.name)
        return effective

    def check_disabled(self, plugins: Mapping[str, tuple[Any, stages.Where]], route: Route | None) -> None:
        """``{disable: true}`` turns a plugin off and takes no other field:
        the others would be accepted and ignored."""
        for raw, where in plugins.values():
            if stages.is_disabled(raw) and len(raw) > 1:
                others = ", ".join(sorted(str(k) for k in raw if k != "disable"))
                self.issue(where + ("disable",), f"disable: true turns the plugin off here, so {others} would be"
                           " ignored: write either disable: true alone or the options without it", route)

    def placed(self, route: Route, enabled: Mapping[str, _Entry],
               route_stages: Mapping[str, Mapping[str, _Entry]]) -> list[tuple[str, str]]:
        """The chain as (plugin, stage) pairs, in order; raises _Failed."""
        host = self.build.host
        unknown = [k for k in enabled if k not in host.infos]
        for key in unknown:
            if key in GLOO_PLUGIN_KEYS:  # a Gloo option an add-on serves
                self.issue(enabled[key][1], f"{host.missing(key)};"
                           " refusing to serve a route whose protection cannot be enforced", route)
            else:
                self.issue(enabled[key][1], f"unknown field {key!r}; expected one of: {', '.join(KNOWN_OPTION_KEYS)},"
                           f" or an installed plugin's name ({host.missing(key, nested=True)})", route)
        if unknown:
            raise _Failed()
        order_raw = route.options.get("pluginOrder", self.vs.options.get("pluginOrder"))
        order_at = (route.path + ("options", "pluginOrder") if "pluginOrder" in route.options
                    else self.VH_PATH + ("options", "pluginOrder"))
        if order_raw is not None:
            missing = [k for k in enabled if k not in order_raw]
            if missing:
                self.issue(order_at, f"pluginOrder must list every enabled plugin; missing: {', '.join(missing)}",
                           route)
                raise _Failed()
            not_installed = [k for k in order_raw if k not in host.infos]
            if not_installed:
                self.issue(self.VH_PATH + ("options", "pluginOrder"),
                           f"pluginOrder names plugins that are not installed: {', '.join(not_installed)}", route)
                raise _Failed()
            order = [k for k in order_raw if k in enabled]
        else:
            order = host.chain_order(enabled, self.build.placements)
        placed: list[tuple[str, str]] = [(name, "") for name in order]
        for name, decl in self.build.staged.items():
            result = stages.place(name, decl, placed, route_stages[name], order_raw is not None)
            if isinstance(result, str):
                self.issue(order_at, result, route)
                raise _Failed()
            placed = result
        return placed

    def steps(self, route: Route, placed: list[tuple[str, str]], enabled: Mapping[str, _Entry],
              route_stages: Mapping[str, Mapping[str, _Entry]]) -> tuple[ChainStep, ...]:
        """Each placed plugin's options compiled, as chain steps; raises
        _Failed after compiling every one (so each problem is reported)."""
        host = self.build.host
        steps: list[ChainStep] = []
        failed = False
        for name, stage in placed:
            raw, where, route_name = route_stages[name][stage] if stage else enabled[name]
            try:
                compiled = self.compile(name, raw, where, route_name, route)
            except _Failed:
                failed = True
                continue
            steps.append(ChainStep(
                name, compiled, host.impl(name, "twistgw_authenticate"), host.impl(name, "twistgw_authorize"),
                stage if len(route_stages.get(name, ())) > 1 else "",
            ))
        if failed:
            raise _Failed()
        return tuple(steps)

    def compile(self, name: str, raw: Any, where: stages.Where, route_name: str | None,
                route: Route | None, runs: bool = True) -> Any:
        """A plugin's options compiled once per virtual service; raises
        _Failed with the problem recorded (once for options shared by
        several routes).

        :param runs: some route runs them (options no route runs are only
            checked: they are not handed to the plugin as compiled)."""
        cache_key = (name, id(raw))
        if cache_key in self.cache:
            return self.cache[cache_key]
        build, vs = self.build, self.vs
        scope = OptionsScope(vs.namespace, vs.key, route_name, build.view, vs.options)
        try:
            compiled = compile_plugin(build.host, name, raw, scope)
        except OptionsError as exc:
            if (vs.key, id(raw), name) not in build.reported:
                build.reported.add((vs.key, id(raw), name))
                self.plugin_problems(exc, where, route)
            raise _Failed() from None
        except Exception as exc:  # a plugin bug: reject, never serve unprotected
            self.issue(where, f"plugin {name!r} failed compiling its options: {exc!r}", route)
            raise _Failed() from None
        try:
            build.owned.update(owned_headers(compiled))
        except ValueError as exc:  # a plugin bug, named plainly: the header it declared
            self.issue(where, f"plugin {name!r} declares its owned request headers wrongly: {exc}", route)
            raise _Failed() from None
        self.cache[cache_key] = compiled
        if runs:
            build.compiled_by_plugin[name].append(compiled)
        return compiled

    def runtime(self, route: Route, steps: tuple[ChainStep, ...], reselect: bool) -> RouteRuntime | None:
        """The route's runtime with its destination (a direct response, a
        balancer, or weighted balancers in its policy); None when an
        upstream is missing (already reported)."""
        action = route.action
        try:
            policy = compile_policy(self.vs, route, self.build.config, self.build.balancer)
        except LookupError:  # a dangling destination or Secret, already reported
            return None
        except ValueError as exc:
            self.issue(route.path + ("options",), str(exc), route)
            raise _Failed() from None
        if isinstance(action, DirectResponse):
            return RouteRuntime(self.vs, route, steps, action, None, reselect, policy)
        if not isinstance(action, (KubeRef, UpstreamRef)):  # a redirect, weighted destinations
            return RouteRuntime(self.vs, route, steps, None, None, reselect, policy)
        key = action.upstream_key()
        if key not in self.build.config.upstreams:  # build_config already reported it
            return None
        return RouteRuntime(self.vs, route, steps, None, self.build.balancer(key, action.subset), reselect, policy)

    def compile_unrun(self, vh_plugins: Mapping[str, tuple[Any, stages.Where]]) -> None:
        """Options written on the virtual host but run by no route (every
        route turns the plugin off) are still checked, and the headers they
        own still protected: a route turning a plugin off must not let a
        client forge what the plugin vouches for elsewhere."""
        vs, build = self.vs, self.build
        for name, raw, where in written_on_host(vs.options, self.VH_PATH + ("options",), vh_plugins, build.staged):
            if name not in build.host.infos or (vs.key, id(raw), name) in build.reported:
                continue
            try:
                self.compile(name, raw, where, None, None, runs=False)
            except _Failed:
                pass
