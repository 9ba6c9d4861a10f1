"""Compiling plugin options outside the serving routes, and the helpers the
snapshot builder shares with it: every resource through the plugins'
``twistgw_check_resource``, the options of RouteTables no virtual service
uses, a plugin's options compiled, the headers compiled options own, and
problems located at the resource they are about.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from twistgw.api.headers import InvalidHeaderName, canonical_name
from twistgw.api.plugin import StagedOptions
from twistgw.api.types import InvalidResource, OptionsError, OptionsScope, ResourceView, path_text
from twistgw.config.errors import ConfigIssue
from twistgw.config.gloo import CORE_OPTION_KEYS
from twistgw.config.routeoptions import LOCAL_LIMIT_KEY, NESTED_LOCAL_LIMIT
from twistgw.config.resolution import Config
from twistgw.core import stages
from twistgw.core.plugins import PluginHost

__all__ = ["about_invalid_resource", "check_resources", "check_unused_route_tables", "compile_plugin",
           "owned_headers", "plugin_options", "resource_problems", "written_on_host"]


def check_resources(config: Config, host: PluginHost, view: ResourceView, issues: list[ConfigIssue]) -> None:
    """Every resource read, used or not, through each plugin's
    ``twistgw_check_resource`` (the extauth plugin checks every AuthConfig)."""
    for name in host.infos:
        fn = host.impl(name, "twistgw_check_resource")
        if fn is None:
            continue
        for kind, found in config.resources.items():
            for (ns, rname), resource in found.items():
                key = (kind, ns, rname)
                if key in config.invalid:
                    continue
                try:
                    fn(kind=kind, resource=resource, scope=OptionsScope(ns, "", None, view))
                except OptionsError as exc:
                    resource_problems(config, exc, key, issues)
                except Exception as exc:  # a plugin bug: reject, never serve what it could not check
                    problem = OptionsError((), f"plugin {name!r} failed checking it: {exc!r}")
                    resource_problems(config, problem, key, issues)


def resource_problems(config: Config, exc: OptionsError, resource: tuple[str, str, str],
                      issues: list[ConfigIssue]) -> None:
    """Each problem of ``exc`` at the resource it names (``resource`` when none)."""
    for p in exc.problems:
        if about_invalid_resource(p):
            continue
        kind, ns, name = p.resource or resource
        source = config.sources.get((kind, ns, name))
        issues.append(ConfigIssue(
            p.reason, file=source.file if source else "", document=source.document if source else None,
            line=source.line_of(p.path) if source else None, resource=f"{kind} {ns}/{name}",
            field=source.field_of(p.path) if source else path_text(p.path)))


def check_unused_route_tables(config: Config, host: PluginHost, view: ResourceView,
                              staged: Mapping[str, StagedOptions], issues: list[ConfigIssue]) -> None:
    """The plugin options of RouteTables no virtual service delegates to are
    checked too (compiled, not served): a table is checked when it is
    applied, not when it is first used."""
    staged_keys = frozenset(key for decl in staged.values() for key in decl.keys)
    for key, table in sorted(config.route_tables.items()):
        if key in config.route_tables_used or ("RouteTable",) + key in config.invalid:
            continue
        for route in table.routes:
            at = route.path + ("options",)
            entries = [(name, raw, at + (name,)) for name, (raw, _) in
                       plugin_options(route.options, at, staged_keys).items()]
            for name, decl in staged.items():
                entries += [(name, raw, at + (k, stage)) for k in decl.keys
                            if isinstance(route.options.get(k), Mapping)
                            for stage, raw in route.options[k].items()]
            for name, raw, where in entries:
                if stages.is_disabled(raw):
                    continue
                if name not in host.infos:
                    problem = OptionsError(where, host.missing(name))
                else:
                    try:
                        compile_plugin(host, name, raw, OptionsScope(table.namespace, "", route.name, view))
                        continue
                    except OptionsError as exc:
                        problem = OptionsError.several([OptionsError(where + p.path, p.reason, p.resource)
                                                        if p.resource is None else p for p in exc.problems])
                    except Exception as exc:
                        problem = OptionsError(where, f"plugin {name!r} failed compiling its options: {exc!r}")
                resource_problems(config, problem, ("RouteTable",) + key, issues)


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


def written_on_host(options: Mapping[str, Any], path: stages.Where,
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


def plugin_options(options: Mapping[str, Any], path: stages.Where,
                    staged_keys: frozenset[str]) -> dict[str, tuple[Any, stages.Where]]:
    """The plugins' entries of an ``options`` mapping at ``path``:
    ``{plugin: (raw options, where)}`` (staged keys are read by :mod:`stages`).

    Gloo's ``ratelimit: {localRatelimit: {...}, rateLimits: [...]}`` is two
    entries: the bucket for the ``localRatelimit`` plugin (at
    ``ratelimit.localRatelimit``), the rest for ``ratelimit``, left out when
    there is no rest (a route then inherits the virtual host's ``ratelimit``,
    as Envoy does for a route without rate limits)."""
    out = {k: (v, path + (k,)) for k, v in options.items() if k not in CORE_OPTION_KEYS and k not in staged_keys}
    for key in NESTED_LOCAL_LIMIT:
        found = out.get(key)
        if found is None or not isinstance(found[0], Mapping) or LOCAL_LIMIT_KEY not in found[0]:
            continue
        raw = found[0]
        out.setdefault(LOCAL_LIMIT_KEY, (raw[LOCAL_LIMIT_KEY], path + (key, LOCAL_LIMIT_KEY)))
        rest = {k: v for k, v in raw.items() if k != LOCAL_LIMIT_KEY}
        if rest:
            out[key] = (rest, path + (key,))
        else:
            del out[key]
    return out


def compile_plugin(host: PluginHost, name: str, raw: Any, scope: OptionsScope) -> Any:
    fn = host.impl(name, "twistgw_compile_options")
    if fn is None:
        return raw
    if not isinstance(raw, Mapping):
        raise OptionsError((), f"must be a mapping, got {type(raw).__name__}")
    return fn(options=raw, scope=scope)


def about_invalid_resource(error: BaseException) -> bool:
    """Whether a plugin's OptionsError comes from looking up a resource that
    is itself invalid (already reported where it is written)."""
    seen = 0
    cause: BaseException | None = error
    while cause is not None and seen < 10:
        if isinstance(cause, InvalidResource):
            return True
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return False
