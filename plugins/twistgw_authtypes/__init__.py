"""AuthConfig config types beside ``ldap``: Gloo's ``apiKeyAuth``,
``basicAuth``, ``opaAuth``, ``passThroughAuth`` and the inline
``customAuth``, added to the ``extauth`` plugin through the public
``twistgw_extauth_config_types`` hook, exactly as a third party's type is.

One module per type (``apikey``, ``basic``, ``opa``, ``passthrough``,
``custom``); ``_http`` is the HTTP client ``passThroughAuth`` and
``customAuth`` share, ``_rego`` and ``_passwords`` wrap the libraries
(regopy, passlib). See ``docs/extauth.md``.
"""

from __future__ import annotations

from twistgw.sdk import Commands, PluginInfo, hookimpl
from twistgw_extauth import ExtAuthConfigType

from twistgw_authtypes.apikey import ApiKeyAuth
from twistgw_authtypes.basic import BasicAuth
from twistgw_authtypes.custom import CustomAuth
from twistgw_authtypes.opa import OpaAuth
from twistgw_authtypes.passthrough import PassThroughAuth

__all__ = ["ApiKeyAuth", "AuthTypesPlugin", "BasicAuth", "CustomAuth", "OpaAuth", "PassThroughAuth"]


class AuthTypesPlugin:
    """The plugin (entry point ``authtypes = "twistgw_authtypes:AuthTypesPlugin"``):
    one instance per gateway, holding one instance of each config type (their
    HTTP connection pools live there, across reloads)."""

    def __init__(self) -> None:
        self.types: list[ExtAuthConfigType] = [ApiKeyAuth(), BasicAuth(), OpaAuth(), PassThroughAuth(),
                                               CustomAuth()]

    @hookimpl
    def twistgw_plugin_info(self) -> PluginInfo:
        return PluginInfo(order=1000, description="AuthConfig types apiKeyAuth, basicAuth, opaAuth,"
                                                  " passThroughAuth and customAuth, run by the extauth plugin: name an"
                                                  " AuthConfig in options.extauth (configRef), or write"
                                                  " options.extauth.customAuth", options=(), settings=())

    @hookimpl(optionalhook=True)  # the extauth plugin's hook: absent without it
    def twistgw_extauth_config_types(self) -> list[ExtAuthConfigType]:
        return self.types

    @hookimpl
    def twistgw_add_commands(self, commands: Commands) -> None:
        from twistgw_authtypes import _commands

        _commands.add_commands(commands)
