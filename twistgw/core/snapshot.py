"""A serving snapshot: the configuration with every plugin's options compiled.

A reload builds a whole new Snapshot and swaps one reference; building is
all-or-nothing, so a bad edit never half-applies.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Iterable, Mapping

import attrs

from twistgw.api.headers import InvalidHeaderName, canonical_name
from twistgw.api.types import InvalidResource, Endpoint, OptionsError, OptionsScope, ResourceView, UpstreamInfo
from twistgw.api.types import path_text
from twistgw.config.errors import ConfigError, ConfigIssue
from twistgw.config.gloo import CORE_OPTION_KEYS
from twistgw.config.resolution import Config
from twistgw.config.model import DirectResponse, KubeRef, Route, UpstreamRef, VirtualService
from twistgw.core.chain import Call, ChainStep, flatten_chain
from twistgw.core.plan import LocalResponse
from twistgw.core import stages
from twistgw.core.plugins import PluginHost
from twistgw.core.routing import HostTable


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
    #: route selection is repeated after the chain (its virtual service has
    #: routes matching headers or query parameters, which plugins may write:
    #: JWT claimsToHeaders; see docs/decisions.md "claim-based routing")
    reselect: bool = False
    #: the chain flattened into (step, phase, callable), once per snapshot
    calls: tuple[Call, ...] = attrs.field(init=False, eq=False)
    #: the answer of a direct-response route, made once per snapshot
    answer: LocalResponse | None = attrs.field(init=False, eq=False)

    @calls.default
    def _flatten(self) -> tuple[Call, ...]:
        return flatten_chain(self.chain)

    @answer.default
    def _answer(self) -> LocalResponse | None:
        if self.direct is None:
            return None
        return LocalResponse(self.direct.status, self.direct.body, reason="direct response")


class Snapshot:
    """What serves requests; immutable once built."""

    def __init__(self, config: Config, routes: dict[tuple[str, int], RouteRuntime],
                 generation: int, plugin_compiled: dict[str, list[Any]],
                 owned_headers: tuple[bytes, ...] = ()) -> None:
        self.config = config
        #: canonical names of the request headers plugins own
        #: (:class:`twistgw.OwnsRequestHeaders`): a client's copies are removed
        #: from every request before routing and before the chain
        self.owned_headers = owned_headers
        self.hosts = HostTable(config.virtual_services)
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
    for vs in config.virtual_services:
        _HostCompiler(build, vs).run()
    if build.issues or config.issues:
        raise ConfigError(list(config.issues) + build.issues)
    return Snapshot(config, build.routes, generation, build.compiled_by_plugin, tuple(sorted(build.owned)))


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
        self.balancers: dict[_BalancerKey, Balancer] = {}
        #: request headers the compiled options own (OwnsRequestHeaders)
        self.owned: set[bytes] = set()
        #: (virtual service, id(raw options), plugin) already reported
        self.reported: set[tuple[str, int, str]] = set()

    def settings_issue(self, path: stages.Where, reason: str, with_line: bool = True) -> None:
        """A problem in the Settings resource at ``path`` (below ``spec``)."""
        src = self.config.settings_source
        field = ("spec",) + tuple(path)
        self.issues.append(ConfigIssue(
            reason, file=src.file if src else "", document=src.document if src and with_line else None,
            line=src.line_of(field) if src and with_line else None, resource="Settings",
            field=path_text(field)))

    def balancer(self, key: tuple[str, str], subset: tuple[tuple[str, str], ...]) -> Balancer:
        """One balancer per upstream and subset, shared by the routes to it."""
        found = self.balancers.get((key, subset))
        if found is None:
            found = self.balancers[(key, subset)] = Balancer(self.config.select(key, subset))
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


def _check_settings_sections(build: _Build) -> None:
    """Every ``Settings.spec`` section but ``gateway`` names an installed plugin."""
    src = build.config.settings_source
    for key in build.config.settings:
        if key not in build.host.infos and key != "gateway":
            build.issues.append(ConfigIssue(
                f"no plugin named {key!r} is installed (installed: {', '.join(build.host.names()) or 'none'})",
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
            field=path_text(path)))

    def plugin_problems(self, exc: OptionsError, where: stages.Where, route: Route | None) -> None:
        """Each problem of a plugin's OptionsError, located: below the
        options key, or in the resource the options refer to."""
        for p in exc.problems:
            if _about_invalid_resource(p):
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
                    resource=f"{kind} {ns}/{name}", field=path_text(p.path)))

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
        vh_plugins = _plugin_options(vs.options, vh_options, self.build.staged_keys)
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
        r_plugins = _plugin_options(route.options, route.path + ("options",), self.build.staged_keys)
        for key, (value, where) in r_plugins.items():
            effective[key] = (value, where, route.name)
        return effective

    def placed(self, route: Route, enabled: Mapping[str, _Entry],
               route_stages: Mapping[str, Mapping[str, _Entry]]) -> list[tuple[str, str]]:
        """The chain as (plugin, stage) pairs, in order; raises _Failed."""
        host = self.build.host
        unknown = [k for k in enabled if k not in host.infos]
        for key in unknown:
            self.issue(enabled[key][1], f"no plugin named {key!r} is installed"
                       f" (installed: {', '.join(host.names()) or 'none'}); refusing to serve"
                       " a route whose protection cannot be enforced", route)
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
            order = host.chain_order(enabled)
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
        scope = OptionsScope(vs.namespace, vs.key, route_name, build.view)
        try:
            compiled = _compile(build.host, name, raw, scope)
            build.owned.update(owned_headers(compiled))
        except OptionsError as exc:
            if (vs.key, id(raw), name) not in build.reported:
                build.reported.add((vs.key, id(raw), name))
                self.plugin_problems(exc, where, route)
            raise _Failed() from None
        except Exception as exc:  # a plugin bug: reject, never serve unprotected
            self.issue(where, f"plugin {name!r} failed compiling its options: {exc!r}", route)
            raise _Failed() from None
        self.cache[cache_key] = compiled
        if runs:
            build.compiled_by_plugin[name].append(compiled)
        return compiled

    def runtime(self, route: Route, steps: tuple[ChainStep, ...], reselect: bool) -> RouteRuntime | None:
        """The route's runtime with its destination (a direct response or a
        balancer); None when its upstream is missing (already reported)."""
        action = route.action
        if isinstance(action, DirectResponse):
            return RouteRuntime(self.vs, route, steps, action, None, reselect)
        assert isinstance(action, (KubeRef, UpstreamRef))
        key = action.upstream_key()
        if key not in self.build.config.upstreams:  # build_config already reported it
            return None
        return RouteRuntime(self.vs, route, steps, None, self.build.balancer(key, action.subset), reselect)

    def compile_unrun(self, vh_plugins: Mapping[str, tuple[Any, stages.Where]]) -> None:
        """Options written on the virtual host but run by no route (every
        route turns the plugin off) are still checked, and the headers they
        own still protected: a route turning a plugin off must not let a
        client forge what the plugin vouches for elsewhere."""
        vs, build = self.vs, self.build
        for name, raw, where in _written_on_host(vs.options, self.VH_PATH + ("options",), vh_plugins, build.staged):
            if name not in build.host.infos or (vs.key, id(raw), name) in build.reported:
                continue
            try:
                self.compile(name, raw, where, None, None, runs=False)
            except _Failed:
                pass


def owned_headers(compiled: Any) -> tuple[bytes, ...]:
    """The canonical names ``compiled`` declares in ``owned_request_headers``
    (:class:`twistgw.OwnsRequestHeaders`); raises ValueError for a plugin
    declaring something that is not a header name, or ``Host``."""
    names = getattr(compiled, "owned_request_headers", None)
    if names is None:
        return ()
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise ValueError(f"owned_request_headers must be a collection of header names, got {names!r}")
    out = []
    for name in names:
        if not isinstance(name, (str, bytes)):
            raise ValueError(f"owned_request_headers holds {name!r}, not a header name")
        try:
            canonical = canonical_name(name)
        except InvalidHeaderName:
            raise ValueError(f"owned_request_headers holds {name!r}, not an HTTP header name") from None
        if canonical == b"Host":
            raise ValueError("owned_request_headers may not name Host: the gateway routes by it")
        out.append(canonical)
    return tuple(out)


def _written_on_host(options: Mapping[str, Any], path: stages.Where,
                     plugins: Mapping[str, tuple[Any, stages.Where]],
                     staged: Mapping[str, Any]) -> list[tuple[str, Any, stages.Where]]:
    """Every plugin entry of a virtual host's ``options``, staged ones
    (``jwtStaged: {beforeExtAuth: ...}``) each on its own: (plugin, raw, where)."""
    out = [(name, raw, where) for name, (raw, where) in plugins.items() if not stages.is_disabled(raw)]
    for name, decl in staged.items():
        for key in decl.keys:
            value = options.get(key)
            if key in decl.route_only or not isinstance(value, Mapping):
                continue
            out.extend((name, raw, path + (key, stage)) for stage, raw in value.items()
                       if isinstance(raw, Mapping) and not stages.is_disabled(raw))
    return out


def _plugin_options(options: Mapping[str, Any], path: stages.Where,
                    staged_keys: frozenset[str]) -> dict[str, tuple[Any, stages.Where]]:
    """The plugins' entries of an ``options`` mapping at ``path``:
    ``{plugin: (raw options, where)}`` (staged keys are read by :mod:`stages`)."""
    return {k: (v, path + (k,)) for k, v in options.items() if k not in CORE_OPTION_KEYS and k not in staged_keys}


def _compile(host: PluginHost, name: str, raw: Any, scope: OptionsScope) -> Any:
    fn = host.impl(name, "twistgw_compile_options")
    if fn is None:
        return raw
    if not isinstance(raw, Mapping):
        raise OptionsError((), f"must be a mapping, got {type(raw).__name__}")
    return fn(options=raw, scope=scope)


def _about_invalid_resource(error: BaseException) -> bool:
    """Whether a plugin's OptionsError comes from looking up a resource that
    is itself invalid (already reported where it is written)."""
    seen = 0
    cause: BaseException | None = error
    while cause is not None and seen < 10:
        if isinstance(cause, InvalidResource):
            return True
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return False
