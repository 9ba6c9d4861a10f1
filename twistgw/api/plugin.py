"""What a plugin says about itself, what it is handed, and its hook marker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import pluggy

if TYPE_CHECKING:
    from twisted.logger import Logger

DEFAULT_ORDER = 1000

hookimpl = pluggy.HookimplMarker("twistgw")


@attrs.frozen
class PluginInfo:
    """What a plugin says about itself (``twistgw_plugin_info``).

    :ivar order: default position in the chain; lower runs first. The shipped
        plugins use ``extauth`` 100, ``jwt`` 200, ``rbac`` 300.
    :ivar description: one line, shown by ``twistgw plugins``.
    """

    order: int = DEFAULT_ORDER
    description: str = ""


@attrs.frozen
class GatewayInfo:
    """Handed to ``twistgw_configure``."""

    reactor: Any
    metrics_registry: Any
    log: Logger
