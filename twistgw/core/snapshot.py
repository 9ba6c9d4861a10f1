"""A serving snapshot: the configuration with every plugin's options compiled.

A reload builds a whole new Snapshot and swaps one reference; building is
all-or-nothing, so a bad edit never half-applies.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Mapping

import attrs

from twistgw.api.types import InvalidResource, Endpoint, OptionsError, OptionsScope, ResourceView, UpstreamInfo
from twistgw.config.loader import CORE_OPTION_KEYS, Config, ConfigError, ConfigIssue, path_text
from twistgw.config.model import DirectResponse, KubeRef, Route, UpstreamRef, VirtualService
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

    @calls.default
    def _flatten(self) -> tuple[tuple[ChainStep, str, Callable[..., Any]], ...]:
        return flatten_chain(self.chain)


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
    routes: dict[tuple[str, int], RouteRuntime] = {}
    compiled_by_plugin: dict[str, list[Any]] = {name: [] for name in host.infos}
    balancers: dict[tuple[str, str], Balancer] = {}

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

        vh_plugins = _plugin_options(vs.options)
        reselect = any(r.reads_request for r in vs.routes)
        for route in vs.routes:
            r_path = route.path
            effective: dict[str, tuple[Any, tuple[str | int, ...], str | None]] = {}
            for key, value in defaults.items():
                effective[key] = (value, ("Settings", "spec", key), None)
            for key, value in vh_plugins.items():
                effective[key] = (value, vh_path + ("options", key), None)
            for key, value in _plugin_options(route.options).items():
                effective[key] = (value, r_path + ("options", key), route.name)
            order_raw = route.options.get("pluginOrder", vs.options.get("pluginOrder"))
            stages = jwt_stages(effective.pop(JWT, None), vs.options, route.options, vh_path, r_path,
                                route.name)
            if stages:
                # "jwt" stands for its stages in the checks below; each is compiled on its own
                effective[JWT] = next(iter(stages.values()))

            steps: list[ChainStep] = []
            enabled = {k: v for k, v in effective.items() if not _is_disabled(v[0])}
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
                order = [k for k in host.default_order() if k in enabled]
            placed = place_jwt_stages(order, stages, order_raw is not None)
            if isinstance(placed, str):
                issue(r_path + ("options", "pluginOrder") if "pluginOrder" in route.options
                      else vh_path + ("options", "pluginOrder"), placed)
                continue
            failed = False
            for name, stage in placed:
                raw, where, route_name = stages[stage] if stage else enabled[name]
                cache_key = (name, id(raw))
                if cache_key in cache:
                    compiled = cache[cache_key]
                else:
                    scope = OptionsScope(vs.namespace, vs.key, route_name, view)
                    try:
                        compiled = _compile(host, name, raw, scope)
                    except OptionsError as exc:
                        # The same options shared by many routes are reported once.
                        if (vs.key, id(raw), name) not in reported:
                            reported.add((vs.key, id(raw), name))
                            for p in exc.problems:
                                if not _about_invalid_resource(p):
                                    issue(where + p.path, p.reason, route)
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
                    stage if len(stages) > 1 else "",
                ))
            if failed:
                continue

            direct = None
            balancer = None
            action = route.action
            if isinstance(action, DirectResponse):
                direct = action
            else:
                if isinstance(action, KubeRef):
                    key = (action.namespace, f"{action.namespace}-{action.name}-{action.port}")
                else:
                    assert isinstance(action, UpstreamRef)
                    key = (action.namespace, action.name)
                upstream = config.upstreams.get(key)
                if upstream is None:  # build_config already reported it
                    continue
                balancer = balancers.get(key)
                if balancer is None:
                    balancer = balancers[key] = Balancer(upstream)
            routes[(vs.key, route.index)] = RouteRuntime(vs, route, tuple(steps), direct, balancer, reselect)

    if issues or config.issues:
        raise ConfigError(list(config.issues) + issues)
    return Snapshot(config, routes, generation, compiled_by_plugin)


def _plugin_options(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k not in CORE_OPTION_KEYS}


# ---------------------------------------------------------------------------
# JWT stages, as Gloo runs them
# ---------------------------------------------------------------------------

JWT = "jwt"
BEFORE = "beforeExtAuth"
AFTER = "afterExtAuth"
_STAGED = {"jwtStaged", "jwtProvidersStaged"}
#: (raw options, where they were written, route name or None)
_Entry = tuple[Any, tuple[str | int, ...], str | None]


def jwt_stages(inherited: _Entry | None, vh_options: Mapping[str, Any], route_options: Mapping[str, Any],
               vh_path: tuple[str | int, ...], r_path: tuple[str | int, ...],
               route_name: str) -> dict[str, _Entry]:
    """The JWT stages a route runs, Gloo's way (``docs/jwt.md``, "Stages").

    A route runs up to two JWT checks, one before ``extauth`` and one after,
    and a request must pass both. The virtual host sets them with ``jwt``
    (the after stage) or ``jwtStaged``; a route replaces **only the stages it
    names** (``jwtProvidersStaged``, or ``jwtStaged`` holding providers) and
    turns one off with ``jwtStaged: {STAGE: {disable: true}}``. Route-level
    ``jwt`` replaces the after stage; ``jwt: {disable: true}`` turns both off.

    :param inherited: the ``jwt`` entry the generic rules produced (Settings
        default, virtual host ``jwt``, or route ``jwt``), if any.
    """
    stages: dict[str, _Entry] = {}
    if inherited is not None and inherited[2] is None:  # Settings default or virtual-host jwt
        stages[AFTER] = inherited
    for stage, raw in (vh_options.get("jwtStaged") or {}).items():
        stages[stage] = (raw, vh_path + ("options", "jwtStaged", stage), None)
    if inherited is not None and inherited[2] is not None:  # route-level jwt
        if _is_disabled(inherited[0]):
            return {}
        stages[AFTER] = inherited
    for key in ("jwtStaged", "jwtProvidersStaged"):
        for stage, raw in (route_options.get(key) or {}).items():
            if _is_disabled(raw):
                stages.pop(stage, None)
            elif key == "jwtProvidersStaged" or set(raw) - {"disable"}:
                stages[stage] = (raw, r_path + ("options", key, stage), route_name)
    return {s: stages[s] for s in (BEFORE, AFTER) if s in stages and not _is_disabled(stages[s][0])}


def place_jwt_stages(order: list[str], stages: Mapping[str, _Entry],
                     explicit_order: bool) -> list[tuple[str, str]] | str:
    """The chain as (plugin, stage) pairs, ``jwt`` expanded into its stages.

    The after stage takes ``jwt``'s place in the order (after ``extauth`` by
    default, or where ``pluginOrder`` lists it); the before stage runs right
    before ``extauth`` (or right before the after stage when there is no
    ``extauth``). Returns a reason instead when ``pluginOrder`` lists ``jwt``
    before ``extauth`` while ``jwtStaged``/``jwtProvidersStaged`` configure an
    afterExtAuth stage: the two contradict each other.
    """
    if explicit_order and "extauth" in order and JWT in order:
        jwt_first = order.index(JWT) < order.index("extauth")
        if jwt_first and AFTER in stages and _STAGED & set(map(str, stages[AFTER][1])):
            return ("pluginOrder lists jwt before extauth, but an afterExtAuth JWT stage is configured"
                    " (jwtStaged/jwtProvidersStaged); list jwt after extauth, or use beforeExtAuth")
        if not jwt_first and AFTER not in stages:
            return ("pluginOrder lists jwt after extauth, but the only JWT stage is beforeExtAuth;"
                    " list jwt before extauth, or use afterExtAuth")
    out = [(name, "") for name in order if name != JWT]
    if JWT not in order:
        return out
    at = order.index(JWT)
    if AFTER in stages:
        out.insert(at, (JWT, AFTER))
    if BEFORE in stages:
        if "extauth" in order:
            at = out.index(("extauth", ""))
        out.insert(at, (JWT, BEFORE))
    return out


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
