"""twistgw: a plugin-based HTTP gateway on Twisted.

Plugin authors need only what is exported here; see :mod:`twistgw.hookspecs`
for the hooks and ``docs/plugins.md`` for a complete example.
"""

from twistgw._api import (
    Allow,
    AuthConfigInfo,
    Decision,
    Deny,
    Endpoint,
    NotChecked,
    OptionsError,
    OptionsScope,
    RequestContext,
    ResourceView,
    SecretInfo,
    UpstreamInfo,
)
from twistgw._config import ConfigError
from twistgw._plugins import GatewayInfo, PluginInfo, hookimpl

__version__ = "0.1.0"

__all__ = [
    "Allow",
    "AuthConfigInfo",
    "ConfigError",
    "Decision",
    "Deny",
    "Endpoint",
    "GatewayInfo",
    "NotChecked",
    "OptionsError",
    "OptionsScope",
    "PluginInfo",
    "RequestContext",
    "ResourceView",
    "SecretInfo",
    "UpstreamInfo",
    "__version__",
    "hookimpl",
]
