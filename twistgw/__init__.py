"""twistgw: a plugin-based HTTP gateway on Twisted.

Plugin authors need only what is exported here; see :mod:`twistgw.hookspecs`
for the hooks and ``docs/plugins.md`` for a complete example.
"""

from twistgw.api.commands import Commands
from twistgw.api.counters import counter
from twistgw.api.extauth import (
    AuthAllow,
    AuthDecision,
    AuthDeny,
    ConfigScope,
    ConfigWarning,
    ExtAuthChecker,
    ExtAuthConfigType,
)
from twistgw.api.basic import read_basic_credentials
from twistgw.api.bodies import BodyTooLarge, BoundedBody
from twistgw.api.headers import Headers
from twistgw.api.plugin import GatewayInfo, OwnsRequestHeaders, Placement, PluginInfo, StagedOptions, hookimpl
from twistgw.api.types import (
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
from twistgw.config.loader import ConfigError, ConfigIssue
from twistgw.config.model import Route, VirtualService

__version__ = "0.1.0"

__all__ = [
    "Allow",
    "AuthAllow",
    "AuthConfigInfo",
    "AuthDecision",
    "AuthDeny",
    "BodyTooLarge",
    "BoundedBody",
    "Commands",
    "ConfigError",
    "ConfigIssue",
    "ConfigScope",
    "ConfigWarning",
    "Decision",
    "Deny",
    "Endpoint",
    "ExtAuthChecker",
    "ExtAuthConfigType",
    "GatewayInfo",
    "Headers",
    "NotChecked",
    "OptionsError",
    "OptionsScope",
    "OwnsRequestHeaders",
    "Placement",
    "PluginInfo",
    "RequestContext",
    "ResourceView",
    "Route",
    "SecretInfo",
    "StagedOptions",
    "UpstreamInfo",
    "VirtualService",
    "__version__",
    "counter",
    "hookimpl",
    "read_basic_credentials",
]
