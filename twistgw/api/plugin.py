"""What a plugin says about itself, what it is handed, and its hook marker."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

import attrs
import pluggy

if TYPE_CHECKING:
    from twisted.logger import Logger

DEFAULT_ORDER = 1000

hookimpl = pluggy.HookimplMarker("twistgw")


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
    """A second options key for the plugin whose one entry names a stage and
    holds the plugin's options, e.g. Gloo's
    ``jwtStaged: {beforeExtAuth: {...jwt options...}}``.

    :ivar key: the options key (``jwtStaged``).
    :ivar stages: each stage's name and where it puts the plugin
        (``{"beforeExtAuth": Placement(before=("extauth",)), ...}``).
    """

    key: str
    stages: Mapping[str, Placement] = attrs.field(converter=lambda m: MappingProxyType(dict(m)))


@attrs.frozen
class PluginInfo:
    """What a plugin says about itself (``twistgw_plugin_info``).

    :ivar order: default position in the chain; lower runs first. The shipped
        plugins use ``extauth`` 100, ``jwt`` 200, ``rbac`` 300.
    :ivar description: one line, shown by ``twistgw plugins``.
    :ivar placement: ordering constraints against other plugins by name
        (:class:`Placement`), applied to the default order.
    :ivar staged_options: a staged options key (:class:`StagedOptions`), or None.
    """

    order: int = DEFAULT_ORDER
    description: str = ""
    placement: Placement = Placement()
    staged_options: StagedOptions | None = None


@attrs.frozen
class GatewayInfo:
    """Handed to ``twistgw_configure``."""

    reactor: Any
    metrics_registry: Any
    log: Logger
