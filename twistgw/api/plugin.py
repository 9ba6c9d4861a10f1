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
    """Handed to ``twistgw_configure``.

    :ivar reactor: the reactor, for I/O.
    :ivar metrics_registry: the prometheus-client registry for your metrics.
    :ivar log: a ``twisted.logger.Logger`` for the plugin.
    :ivar dry_run: ``True`` under ``twistgw explain`` (without ``--live``):
        the plugin must contact nothing and listen on nothing. In
        ``twistgw_config_loaded`` start no server and fetch nothing; in
        ``twistgw_authenticate``/``twistgw_authorize``, where the answer
        would need the network, return :class:`twistgw.NotChecked` saying
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
