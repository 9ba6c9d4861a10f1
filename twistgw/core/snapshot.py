"""A serving snapshot: the configuration with every plugin's options compiled.

A reload builds a whole new Snapshot and swaps one reference; building is
all-or-nothing, so a bad edit never half-applies.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Iterable, Mapping

import attrs

from twistgw.api.headers import InvalidHeaderName, canonical_name
from twistgw.api.plugin import Placement
from twistgw.api.types import InvalidResource, Endpoint, OptionsError, OptionsScope, ResourceView, UpstreamInfo
from twistgw.config.loader import CORE_OPTION_KEYS, Config, ConfigError, ConfigIssue, path_text
from twistgw.config.model import DirectResponse, KubeRef, Route, UpstreamRef, VirtualService
from twistgw.core.plan import LocalResponse
from twistgw.core import stages
from twistgw.core.plugins import PluginHost
from twistgw.core.routing import HostTable


@attrs.frozen
class ChainStep:
    """One plugin in a route's chain, with its compiled options."""

    plugin: str
    options: Any
    authenticate: Callable[..., Any] | None
    authorize: Callable[..., Any] | None
    #: ``beforeExtAuth``/``afterExtAuth`` when a route runs two JWT stages
    stage: str = ""

    @property
    def label(self) -> str:
        """The plugin's name, with its stage when it runs twice (``jwt[beforeExtAuth]``)."""
        return f"{self.plugin}[{self.stage}]" if self.stage else self.plugin


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
    #: route selection is repeated after the chain (its virtual service has
    #: routes matching headers or query parameters, which plugins may write:
    #: JWT claimsToHeaders; see docs/decisions.md "claim-based routing")
    reselect: bool = False
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
    """Compile every route's chain. Raises ConfigError listing every problem."""
    issues: list[ConfigIssue] = []
    view = ResourceView(config.upstreams, config.secrets, config.auth_configs, config.resolve_kube,
                        config.settings, config.directory, config.invalid)
    defaults: dict[str, Any] = {}
    for name in host.infos:
        fn = host.impl(name, "twistgw_default_options")
        if fn is not None:
            src = config.settings_source
            try:
                value = fn(settings=view.settings(name), config_dir=config.directory)
            except OptionsError as exc:
                for p in exc.problems:
                    field = ("spec", name) + p.path
                    issues.append(ConfigIssue(
                        p.reason, file=src.file if src else "", document=src.document if src else None,
                        line=src.line_of(field) if src else None, resource="Settings",
                        field=path_text(field)))
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
    placements = _placements(host, view, issues)
    staged = {name: info.staged_options for name, info in host.infos.items() if info.staged_options is not None}
    staged_keys = frozenset(key for decl in staged.values() for key in decl.keys)
    routes: dict[tuple[str, int], RouteRuntime] = {}
    compiled_by_plugin: dict[str, list[Any]] = {name: [] for name in host.infos}
    balancers: dict[tuple[tuple[str, str], tuple[tuple[str, str], ...]], Balancer] = {}
    owned: set[bytes] = set()

    reported: set[tuple[str, int, str]] = set()
    for vs in config.virtual_services:
        vh_path: tuple[str | int, ...] = ("spec", "virtualHost")
        cache: dict[tuple[str, int], Any] = {}

        def issue(path: tuple[str | int, ...], reason: str, route: Route | None = None) -> None:
            # A route written in a RouteTable is reported where it is written.
            in_table = route is not None and route.source is not None and path[:2] != vh_path
            source = route.source if in_table and route is not None else vs.source
            issues.append(ConfigIssue(
                reason,
                file=source.file if source else "",
                document=source.document if source else None,
                line=source.line_of(tuple(path)) if source else None,
                resource=route.owner if in_table and route is not None else f"VirtualService {vs.key}",
                field=path_text(path),
            ))

        def plugin_problems(exc: OptionsError, where: tuple[str | int, ...], route: Route | None) -> None:
            """Each problem of a plugin's OptionsError, located: below the
            options key, or in the resource the options refer to."""
            for p in exc.problems:
                if _about_invalid_resource(p):
                    continue
                source = config.sources.get(p.resource) if p.resource is not None else None
                if p.resource is None:
                    issue(where + p.path, p.reason, route)
                elif source is None:
                    kind, ns, name = p.resource
                    issue(where, f"{kind} {ns}/{name}: {path_text(p.path)}: {p.reason}", route)
                else:
                    kind, ns, name = p.resource
                    issues.append(ConfigIssue(p.reason, file=source.file, document=source.document,
                                              line=source.line_of(p.path), resource=f"{kind} {ns}/{name}",
                                              field=path_text(p.path)))

        def stages_ok(options: Mapping[str, Any], path: stages.Where, route: Route | None) -> bool:
            def report(where: stages.Where, reason: str) -> None:
                issue(where, reason, route)

            return all([stages.check(name, decl, options, path, route is not None, report)
                        for name, decl in staged.items()])

        if not stages_ok(vs.options, vh_path + ("options",), None):
            continue
        vh_plugins = _plugin_options(vs.options, vh_path + ("options",), staged_keys)
        reselect = any(r.reads_request for r in vs.routes)
        for route in vs.routes:
            r_path = route.path
            r_plugins = _plugin_options(route.options, r_path + ("options",), staged_keys)
            effective: dict[str, tuple[Any, tuple[str | int, ...], str | None]] = {}
            for key, value in defaults.items():
                effective[key] = (value, ("Settings", "spec", key), None)
            for key, (value, where) in vh_plugins.items():
                effective[key] = (value, where, None)
            for key, (value, where) in r_plugins.items():
                effective[key] = (value, where, route.name)
            order_raw = route.options.get("pluginOrder", vs.options.get("pluginOrder"))
            if not stages_ok(route.options, r_path + ("options",), route):
                continue
            # A staged plugin (jwt) stands for its stages in the checks
            # below; each stage is compiled on its own.
            route_stages: dict[str, dict[str, stages.Entry]] = {}
            for name, decl in staged.items():
                found = stages.stages_of(decl, effective.pop(name, None), vs.options, route.options,
                                         vh_path, r_path, route.name)
                if found:
                    effective[name] = next(iter(found.values()))
                route_stages[name] = found

            steps: list[ChainStep] = []
            enabled = {k: v for k, v in effective.items() if not stages.is_disabled(v[0])}
            unknown = [k for k in enabled if k not in host.infos]
            for key in unknown:
                issue(enabled[key][1], f"no plugin named {key!r} is installed"
                      f" (installed: {', '.join(host.names()) or 'none'}); refusing to serve"
                      " a route whose protection cannot be enforced", route)
            if unknown:
                continue
            if order_raw is not None:
                missing = [k for k in enabled if k not in order_raw]
                if missing:
                    issue(r_path + ("options", "pluginOrder") if "pluginOrder" in route.options
                          else vh_path + ("options", "pluginOrder"),
                          f"pluginOrder must list every enabled plugin; missing: {', '.join(missing)}", route)
                    continue
                not_installed = [k for k in order_raw if k not in host.infos]
                if not_installed:
                    issue(vh_path + ("options", "pluginOrder"),
                          f"pluginOrder names plugins that are not installed: {', '.join(not_installed)}", route)
                    continue
                order = [k for k in order_raw if k in enabled]
            else:
                order = host.chain_order(enabled, placements)
            placed: list[tuple[str, str]] | str = [(name, "") for name in order]
            for name, decl in staged.items():
                placed = stages.place(name, decl, placed, route_stages[name], order_raw is not None)
                if isinstance(placed, str):
                    break
            if isinstance(placed, str):
                issue(r_path + ("options", "pluginOrder") if "pluginOrder" in route.options
                      else vh_path + ("options", "pluginOrder"), placed, route)
                continue
            failed = False
            for name, stage in placed:
                raw, where, route_name = route_stages[name][stage] if stage else enabled[name]
                cache_key = (name, id(raw))
                if cache_key in cache:
                    compiled = cache[cache_key]
                else:
                    scope = OptionsScope(vs.namespace, vs.key, route_name, view, vs.options)
                    try:
                        compiled = _compile(host, name, raw, scope)
                        owned.update(owned_headers(compiled))
                    except OptionsError as exc:
                        # The same options shared by many routes are reported once.
                        if (vs.key, id(raw), name) not in reported:
                            reported.add((vs.key, id(raw), name))
                            plugin_problems(exc, where, route)
                        failed = True
                        continue
                    except Exception as exc:  # a plugin bug: reject, never serve unprotected
                        issue(where, f"plugin {name!r} failed compiling its options: {exc!r}", route)
                        failed = True
                        continue
                    cache[cache_key] = compiled
                    compiled_by_plugin[name].append(compiled)
                steps.append(ChainStep(
                    name, compiled,
                    host.impl(name, "twistgw_authenticate"),
                    host.impl(name, "twistgw_authorize"),
                    stage if len(route_stages.get(name, ())) > 1 else "",
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
                if key not in config.upstreams:  # build_config already reported it
                    continue
                balancer = balancers.get((key, action.subset))
                if balancer is None:
                    balancer = balancers[(key, action.subset)] = Balancer(config.select(key, action.subset))
            routes[(vs.key, route.index)] = RouteRuntime(vs, route, tuple(steps), direct, balancer, reselect)

        # Options written on the virtual host but run by no route (every route
        # turns the plugin off) are still checked, and the headers they own
        # still protected: a route turning a plugin off must not let a client
        # forge what the plugin vouches for elsewhere.
        for name, raw, where in _written_on_host(vs.options, vh_path + ("options",), vh_plugins, staged):
            if name not in host.infos or (name, id(raw)) in cache or (vs.key, id(raw), name) in reported:
                continue
            try:
                compiled = _compile(host, name, raw, OptionsScope(vs.namespace, vs.key, None, view, vs.options))
                owned.update(owned_headers(compiled))
            except OptionsError as exc:
                reported.add((vs.key, id(raw), name))
                plugin_problems(exc, where, None)
            except Exception as exc:
                issue(where, f"plugin {name!r} failed compiling its options: {exc!r}")
            else:
                cache[(name, id(raw))] = compiled

    if issues or config.issues:
        raise ConfigError(list(config.issues) + issues)
    return Snapshot(config, routes, generation, compiled_by_plugin, tuple(sorted(owned)))


def _placements(host: PluginHost, view: ResourceView, issues: list[ConfigIssue]) -> dict[str, Placement]:
    """Each plugin's ``twistgw_placement`` for this configuration (the ones that return one)."""
    out: dict[str, Placement] = {}
    for name in host.infos:
        fn = host.impl(name, "twistgw_placement")
        if fn is None:
            continue
        try:
            placement = fn(resources=view)
        except Exception as exc:
            issues.append(ConfigIssue(f"plugin {name!r} failed choosing its place in the chain: {exc!r}",
                                      resource="Settings", field=f"spec.{name}"))
            continue
        if placement is not None:
            if not isinstance(placement, Placement):
                issues.append(ConfigIssue(f"plugin {name!r}: twistgw_placement must return twistgw.Placement"
                                          f" or None, got {placement!r}", resource="Settings", field=f"spec.{name}"))
                continue
            out[name] = placement
    return out


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
