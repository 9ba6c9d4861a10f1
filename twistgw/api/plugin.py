"""What a plugin says about itself, what it is handed, and its hook marker."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Protocol, runtime_checkable

import attrs
import pluggy

if TYPE_CHECKING:
    from twisted.logger import Logger

DEFAULT_ORDER = 1000

#: Marks a plugin's hook implementations (``@sdk.hookimpl``).
hookimpl = pluggy.HookimplMarker("twistgw")
#: Marks hook specifications: the gateway's own (``twistgw.sdk.hookspecs``)
#: and those a plugin adds for other plugins (``twistgw_addhooks``).
hookspec = pluggy.HookspecMarker("twistgw")


class HookRegistry:
    """What ``twistgw_addhooks`` is handed: the place a plugin adds the hook
    specifications it defines for other plugins (pluggy's
    ``add_hookspecs``), as a pytest plugin adds its own in
    ``pytest_addhooks``. The ``extauth`` plugin adds
    ``twistgw_extauth.hookspecs`` (its config types) this way."""

    def __init__(self, add: Callable[[Any], None]) -> None:
        self._add = add
        self._added: list[object] = []

    def add_hookspecs(self, namespace: ModuleType | type) -> None:
        """Add the functions of ``namespace`` (a module or class) marked
        ``@sdk.hookspec`` to the gateway's hooks; adding the same namespace
        again does nothing."""
        if any(namespace is seen for seen in self._added):
            return
        self._add(namespace)
        self._added.append(namespace)


@attrs.frozen
class Placement:
    """Where a plugin runs relative to others, when the route does not set
    ``pluginOrder``: just before the first of ``before`` (if it would
    otherwise run later), or just after the last of ``after`` (if it would
    otherwise run earlier). Names of plugins not enabled on the route are
    ignored."""

    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


@attrs.frozen
class StagedOptions:
    """Staged options keys, as Gloo's ``jwtStaged``: the plugin's checks may
    run in a stage just before another plugin and in one after it, and a
    request must pass both. The shipped ``jwt`` plugin declares
    ``StagedOptions("extauth", "beforeExtAuth", "afterExtAuth",
    ("jwtStaged", "jwtProvidersStaged"), route_only=("jwtProvidersStaged",))``.
    The rules (what a route inherits, replaces or turns off) are in
    ``docs/jwt.md``, "Stages".

    :ivar around: the plugin the stages are placed around.
    :ivar before: the name of the stage that runs just before ``around``.
    :ivar after: the name of the stage that runs after it; the plugin's own
        options key configures this stage.
    :ivar keys: the options keys holding ``{before: {...}, after: {...}}``.
    :ivar route_only: those of ``keys`` allowed only on a route; they replace
        the stages they name, options and all.
    """

    around: str
    before: str
    after: str
    keys: tuple[str, ...]
    route_only: tuple[str, ...] = ()


@attrs.frozen
class OptionMerge:
    """How a plugin's options keys combine when a RouteTable route inherits
    the options of the route delegating to it, where that is more than
    "a key the child sets replaces the parent's" (the loader applies it;
    the core builds it from the plugin's declarations: its
    ``StagedOptions``, or ``PluginInfo.merge_options``).

    :ivar keys: the options keys merged together.
    :ivar merge: ``merge(parent options, child options)`` → the entries of
        ``keys`` of the child's effective options; called when both set one
        of ``keys``.
    """

    keys: frozenset[str]
    merge: Callable[[Mapping[str, Any], Mapping[str, Any]], Mapping[str, Any]]


@attrs.frozen
class PluginInfo:
    """What a plugin says about itself (``twistgw_plugin_info``).

    :ivar order: default position in the chain; lower runs first. The shipped
        plugins use ``extauth`` 100, ``jwt`` 200, ``rbac`` 300.
    :ivar description: one line, shown by ``twistgw plugins``.
    :ivar placement: ordering constraints against other plugins by name
        (:class:`Placement`), applied to the default order.
    :ivar staged_options: a staged options key (:class:`StagedOptions`), or None.
    :ivar options: the options keys of virtual hosts and routes the plugin
        reads: None (the default) is its own name, with its staged keys
        (``staged_options``); ``()`` for a plugin that reads none (one that
        gives another plugin something, such as AuthConfig config types, or
        adds commands). ``options.<its name>`` is then refused, naming the
        plugin and its description. An options key is the plugin's name or
        one of its staged keys.
    :ivar settings: the ``Settings`` sections it reads (``spec.<section>``):
        None (the default) is its own name; ``()`` none. Sections are
        checked where they are read: its own by ``twistgw_default_options``,
        the others (a section several plugins share, such as the rate-limit
        plugins' ``ratelimitServer``) by ``twistgw_check_settings``. A
        section no installed plugin reads is refused, and a key that is only
        a section is refused as an option (``... is a Settings section``).
    :ivar merge_options: how a RouteTable route's value of the plugin's
        options key combines with the value of the route delegating to it:
        ``merge_options(parent value, child value)`` → the child's value
        (called when both set the key; ``{disable: true}`` included). None:
        the child's replaces the parent's, as Gloo does. (A staged plugin's
        keys merge stage by stage, from ``staged_options``.)
    """

    order: int = DEFAULT_ORDER
    description: str = ""
    placement: Placement = Placement()
    staged_options: StagedOptions | None = None
    merge_options: Callable[[Any, Any], Any] | None = None
    options: tuple[str, ...] | None = None
    settings: tuple[str, ...] | None = None

    def options_keys(self, name: str) -> tuple[str, ...]:
        """The options keys the plugin registered as ``name`` reads."""
        if self.options is not None:
            return self.options
        return (name, *(self.staged_options.keys if self.staged_options is not None else ()))

    def settings_sections(self, name: str) -> tuple[str, ...]:
        """The ``Settings`` sections the plugin registered as ``name`` reads."""
        return (name,) if self.settings is None else self.settings


@runtime_checkable
class OwnsRequestHeaders(Protocol):
    """Compiled options (what ``twistgw_compile_options`` returns) that name
    request headers only their plugin may set, such as the LDAP plugin's
    ``groupsHeader``/``userHeader`` or the JWT plugin's ``claimsToHeaders``.

    The gateway removes the client's copies of these headers from **every
    request to every virtual service**, whether or not the plugin runs on the
    request's route (a route with ``{disable: true}``, a route without the
    plugin, another virtual service), before routing and before any plugin
    runs: no route matcher, no plugin and no backend ever sees a forged copy.
    The plugin then writes the header itself when it admits a request. See
    ``docs/plugins.md``, "Headers your plugin sets".

    :ivar owned_request_headers: header names (``str`` or ``bytes``, any
        case); each must be an HTTP token and must not be ``Host``.
    """

    owned_request_headers: Collection[str | bytes]


@attrs.frozen
class GatewayInfo:
    """Handed to ``twistgw_configure``.

    :ivar reactor: the reactor, for I/O.
    :ivar metrics_registry: the prometheus-client registry for your metrics.
    :ivar log: a ``twisted.logger.Logger`` for the plugin.
    :ivar dry_run: ``True`` under ``twistgw explain`` (without ``--live``):
        the plugin must contact nothing and listen on nothing. In
        ``twistgw_config_loaded`` start no server and fetch nothing; in
        ``twistgw_authenticate``/``twistgw_authorize``, where the answer
        would need the network, return :class:`sdk.NotChecked` saying
        what would be done.
    :ivar may_listen: ``False`` under ``twistgw explain``, even with
        ``--live``: start no server of your own (such as a development
        directory); contacting existing servers is allowed unless
        ``dry_run``.
    """

    reactor: Any
    metrics_registry: Any
    log: Logger
    dry_run: bool = False
    may_listen: bool = True
