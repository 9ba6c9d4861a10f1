"""The plugin host: builds the pluggy manager and runs per-plugin hooks.

pluggy calls hook implementations in one global order and does not await
Deferreds; the gateway needs per-virtual-service order and asynchronous
plugins. So for per-plugin hooks we look up the one implementation of the
plugin concerned and call it ourselves, awaiting whatever it returns.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
from typing import Any, Awaitable, Callable, Iterable, Mapping

import pluggy
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from twistgw.api import hookspecs
from twistgw.api.plugin import DEFAULT_ORDER, GatewayInfo, HookRegistry, OptionMerge, Placement, PluginInfo, hookimpl
from twistgw.core import stages

__all__ = ["DEFAULT_ORDER", "GatewayInfo", "PluginError", "PluginHost", "PluginInfo", "hookimpl", "maybe_await",
           "place"]

ENTRY_POINT_GROUP = "twistgw.plugins"


def place(order: list[str], placements: Mapping[str, Placement]) -> list[str]:
    """``order`` with each named plugin moved just before the first of its
    ``before`` plugins, or just after the last of its ``after`` plugins,
    when it is not there already (plugins not in ``order`` are ignored)."""
    order = list(order)
    for name, placement in placements.items():
        if name not in order:
            continue
        before = [order.index(t) for t in placement.before if t in order and t != name]
        if before and order.index(name) > min(before):
            order.remove(name)
            order.insert(min(before), name)
        after = [order.index(t) for t in placement.after if t in order and t != name]
        if after and order.index(name) < max(after):
            order.remove(name)
            order.insert(max(after), name)
    return order


def _instance(plugin: object, hook: Any) -> object:
    """A plugin class becomes an instance (one per host); anything else is the plugin.

    A class whose constructor takes a ``hook`` keyword gets the host's hook
    relay (pluggy's ``pm.hook``), to call the hooks it defines for other
    plugins (``twistgw_addhooks``; pytest's ``config.hook`` pattern)."""
    if not isinstance(plugin, type):
        return plugin
    try:
        takes_hook = "hook" in inspect.signature(plugin).parameters
    except (TypeError, ValueError):  # a builtin or extension type: no signature to read
        takes_hook = False
    return plugin(hook=hook) if takes_hook else plugin()


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    """pluggy's ``load_setuptools_entrypoints``, instantiating plugin classes."""
    for dist in list(importlib.metadata.distributions()):
        for ep in dist.entry_points:
            if ep.group != ENTRY_POINT_GROUP or pm.get_plugin(ep.name) or pm.is_blocked(ep.name):
                continue
            pm.register(_instance(ep.load(), pm.hook), name=ep.name)


class PluginError(Exception):
    """A plugin could not be loaded or violated the hook API."""


async def maybe_await(result: Any) -> Any:
    """Await a Deferred or coroutine; pass plain values through."""
    if isinstance(result, Deferred):
        return await result
    if inspect.isawaitable(result):
        return await result
    return result


class PluginHost:
    """The registered plugins, by name, and how to call one of them."""

    _log = Logger()

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self._per_plugin: dict[tuple[str, str], Callable[..., Any] | None] = {}
        self.infos: dict[str, PluginInfo] = {}
        #: set when only chosen plugins take part (``twistgw.sdk.testing``: "this
        #: ChainTester's plugins=[...]"): :meth:`missing` then tells an
        #: installed plugin that was left out from one that is not installed.
        self.selection: str | None = None
        for name, plugin in pm.list_name_plugin():
            if name is None or plugin is None or name.startswith("_"):
                continue
            self.infos[name] = self._info_of(name)
        #: options key → the plugin that reads it (``PluginInfo.options``)
        self.option_keys: dict[str, str] = {}
        #: Settings section → the plugins that read it (``PluginInfo.settings``)
        self.sections: dict[str, tuple[str, ...]] = {}
        for name, info in self.infos.items():
            self._declare(name, info)

    def _declare(self, name: str, info: PluginInfo) -> None:
        """Record what the plugin reads; refuse a declaration the core cannot serve."""
        staged = set(info.staged_options.keys) if info.staged_options is not None else set()
        for key in info.options_keys(name):
            if key != name and key not in staged:
                raise PluginError(f"plugin {name!r}: PluginInfo.options may list its own name and its staged"
                                  f" keys, not {key!r}")
            if key in self.option_keys:
                raise PluginError(f"plugins {self.option_keys[key]!r} and {name!r} both read options.{key}")
            self.option_keys[key] = name
        if staged and name not in self.option_keys:
            raise PluginError(f"plugin {name!r} declares staged options but not its own options key")
        for section in info.settings_sections(name):
            self.sections[section] = (*self.sections.get(section, ()), name)

    def option_problem(self, key: str) -> str | None:
        """Why ``key`` of an ``options`` mapping is no installed plugin's
        options key, when a declaration says (a Settings section, a plugin
        that reads no options); None otherwise."""
        if key in self.option_keys:
            return None
        readers = self.sections.get(key)
        if readers:
            return (f"{key} is a Settings section (Settings spec.{key}, read by {', '.join(readers)}),"
                    " not an option of virtual hosts or routes")
        info = self.infos.get(key)
        if info is not None:
            what = f" ({info.description})" if info.description else ""
            return f"plugin {key!r} reads no options of virtual hosts or routes{what}"
        return None

    def reads(self, name: str) -> str:
        """What the plugin reads, for ``twistgw plugins`` and the docs:
        ``options.jwt, options.jwtStaged; Settings spec.jwt``."""
        info = self.infos[name]
        parts = [", ".join(f"options.{k}" for k in info.options_keys(name)),
                 ", ".join(f"Settings spec.{s}" for s in info.settings_sections(name))]
        return "; ".join(p for p in parts if p) or "no options, no Settings section"

    # -- building ----------------------------------------------------------

    @classmethod
    def create(
        cls,
        extra: Iterable[tuple[str, object]] = (),
        load_entry_points: bool = True,
        blocked: Iterable[str] = (),
    ) -> "PluginHost":
        """Build the manager: specs, the core's own hooks, entry points.

        :param extra: ``(name, plugin)`` pairs to register as well (tests,
            embedding applications).
        :param blocked: plugin names not to load.

        A plugin may be a module or object with hook implementations, or a
        class: then each host gets an instance of its own (the plugin's
        state lives in that object, not in module globals), as the shipped
        plugins do (``jwt = "twistgw_jwt:JwtPlugin"``).
        """
        pm = pluggy.PluginManager("twistgw")
        pm.add_hookspecs(hookspecs)
        # Each plugin, as it is registered, adds the hooks it defines for others.
        pm.hook.twistgw_addhooks.call_historic(kwargs={"pluginmanager": HookRegistry(pm.add_hookspecs)})
        for name in blocked:
            pm.set_blocked(name)
        if load_entry_points:
            try:
                _load_entry_points(pm)
            except Exception as exc:  # a broken third-party package
                raise PluginError(
                    f"loading plugins from entry point group {ENTRY_POINT_GROUP!r}"
                    f" failed: {exc!r}"
                ) from exc
        for name, plugin in extra:
            if pm.get_plugin(name) is not None:
                pm.unregister(name=name)
            pm.register(_instance(plugin, pm.hook), name=name)
        pm.check_pending()
        return cls(pm)

    def _info_of(self, name: str) -> PluginInfo:
        fn = self.impl(name, "twistgw_plugin_info")
        if fn is None:
            return PluginInfo()
        info = fn()
        if not isinstance(info, PluginInfo):
            raise PluginError(
                f"plugin {name!r}: twistgw_plugin_info must return sdk.PluginInfo,"
                f" got {info!r}"
            )
        return info

    # -- calling -----------------------------------------------------------

    def plugin(self, name: str) -> object:
        """The registered plugin object (e.g. the shipped plugins' instances,
        for tests that look at their state)."""
        found = self.pm.get_plugin(name)
        if found is None:
            raise KeyError(f"no plugin named {name!r}")
        return found

    def option_merges(self) -> tuple[OptionMerge, ...]:
        """How each plugin's options keys merge under delegation, where it
        declared more than "the child's replaces the parent's" (for the
        loader): a staged plugin's stages, a ``PluginInfo.merge_options``."""
        merges = []
        for name, info in self.infos.items():
            decl = info.staged_options
            if decl is not None:
                merges.append(OptionMerge(frozenset((name, *decl.keys)),
                                          functools.partial(stages.merge_delegated, name, decl)))
            elif info.merge_options is not None:
                merges.append(OptionMerge(frozenset((name,)), functools.partial(_merge_one, name, info.merge_options)))
        return tuple(merges)

    def names(self) -> list[str]:
        return sorted(self.infos)

    def missing(self, name: str, nested: bool = False) -> str:
        """Why no plugin is registered under ``name``, in one phrase:
        ``no plugin named 'jwt' is installed (installed: ...)``, or, on a host
        of chosen plugins (:attr:`selection`), ``plugin 'jwt' is installed
        but not in this ChainTester's plugins=[...]``. ``nested``: for a
        phrase already in parentheses (``...; installed: ...``)."""
        if self.selection is not None and any(
                ep.name == name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)):
            return f"plugin {name!r} is installed but not in {self.selection}"
        installed = ", ".join(self.names()) or "none"
        if nested:
            return f"no plugin named {name!r} is installed; installed: {installed}"
        return f"no plugin named {name!r} is installed (installed: {installed})"

    def impl(self, plugin_name: str, hook_name: str) -> Callable[..., Any] | None:
        """The plugin's implementation of a hook as a plain callable taking
        keyword arguments, or None if it does not implement it (cached)."""
        key = (plugin_name, hook_name)
        try:
            return self._per_plugin[key]
        except KeyError:
            pass
        caller = getattr(self.pm.hook, hook_name)
        found: Callable[..., Any] | None = None
        for impl in caller.get_hookimpls():
            if impl.plugin_name == plugin_name:
                names = tuple(impl.argnames)
                function = impl.function
                spec = caller.spec
                if spec is not None and set(names) == set(spec.argnames) and not impl.kwargnames:
                    # Takes exactly the hook's arguments: call it as it is,
                    # no wrapper on the per-request path.
                    found = function
                    break

                def call(_f: Callable[..., Any] = function, _n: tuple[str, ...] = names, **kw: Any) -> Any:
                    return _f(*[kw[n] for n in _n])

                found = call
                break
        self._per_plugin[key] = found
        return found

    def default_order(self) -> list[str]:
        """Every installed plugin in the order a route enabling all of them runs them."""
        return self.chain_order(self.infos)

    def chain_order(self, enabled: Iterable[str], placements: Mapping[str, Placement] = {}) -> list[str]:
        """The chain of a route that enables ``enabled`` and sets no
        ``pluginOrder``: by ``PluginInfo.order`` (then name), each plugin's
        ``PluginInfo.placement`` applied, then ``placements`` (a staged
        options key's)."""
        by_order = sorted(enabled, key=lambda n: (self.infos[n].order, n))
        order = place(by_order, {n: self.infos[n].placement for n in by_order})
        return place(order, placements) if placements else order

    def configure(self, gateway: GatewayInfo) -> None:
        self.pm.hook.twistgw_configure(gateway=gateway)

    async def unconfigure(self) -> None:
        for result in self.pm.hook.twistgw_unconfigure():
            try:
                await maybe_await(result)
            except Exception:
                self._log.failure("A plugin failed while shutting down")

    def config_loaded(self, compiled_by_plugin: Mapping[str, list[Any]], settings: Mapping[str, Any]) -> None:
        """Tell each plugin a snapshot is serving; log (never raise) failures."""
        for name in self.infos:
            fn = self.impl(name, "twistgw_config_loaded")
            if fn is None:
                continue
            try:
                result = fn(compiled=list(compiled_by_plugin.get(name, [])), settings=settings.get(name) or {})
            except Exception:
                self._log.failure("Plugin {plugin} failed in twistgw_config_loaded", plugin=name)
                continue
            if isinstance(result, Deferred) or inspect.isawaitable(result):
                d = result if isinstance(result, Deferred) else Deferred.fromCoroutine(_awaited(result))
                d.addErrback(self._loaded_failed, name)

    def _loaded_failed(self, failure: Failure, name: str) -> None:
        self._log.failure("Plugin {plugin} failed in twistgw_config_loaded", failure=failure, plugin=name)


def _merge_one(name: str, merge: Callable[[Any, Any], Any], parent: Mapping[str, Any],
               child: Mapping[str, Any]) -> dict[str, Any]:
    """A plugin's ``merge_options`` on its one key (the child's value alone
    when the parent has none)."""
    if name not in parent:
        return {name: child[name]}
    return {name: merge(parent[name], child[name])}


async def _awaited(awaitable: Awaitable[object]) -> object:
    """Any awaitable as a coroutine (``Deferred.fromCoroutine`` takes only those)."""
    return await awaitable
