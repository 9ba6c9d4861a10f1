"""The ``ldap`` AuthConfig config type, for the ``extauth`` plugin.

An AuthConfig entry ``spec.configs[i].ldap`` binds a request's Basic
credentials against a directory and checks the user's groups (see
``docs/ldap.md``). This plugin provides the type through the
``twistgw_extauth_config_types`` hook, as any third-party type would (see
``docs/plugins.md``); the ``extauth`` plugin (``twistgw_extauth``) runs it.
Written only against the public ``twistgw`` API. The entry point
``ldap = "twistgw_ldap:LdapPlugin"`` names :class:`LdapPlugin`.

Layout, bottom up: ``_model`` (the validated entry), ``_answers``,
``_metrics``, ``_credentials``, ``_cache``, ``_client`` (the directory
protocol and pool), ``_state``, ``_directory`` (one check against the
directory), ``_flow`` (the checker: cache, then directory), ``_options``
(validation), ``_type`` (the config type); ``_devdir`` serves a
development directory, ``secret`` writes service-account Secrets.
"""

from __future__ import annotations

from typing import Any

from twistgw.sdk import Commands, PluginInfo, hookimpl
from twistgw_extauth import ExtAuthConfigType
from twistgw_extauth import ExtAuthPlugin as _ExtAuthPlugin

from twistgw_ldap import secret
from twistgw_ldap._flow import LdapChecker
from twistgw_ldap._model import LdapConfig
from twistgw_ldap._type import LdapConfigType

__all__ = ["ExtAuthPlugin", "LdapChecker", "LdapConfig", "LdapConfigType", "LdapPlugin"]


class LdapPlugin:
    """The plugin: one instance per gateway, holding its config type."""

    def __init__(self) -> None:
        self.config_type = LdapConfigType()

    @hookimpl
    def twistgw_plugin_info(self) -> PluginInfo:
        # No options key and no Settings section of its own: it gives the extauth plugin a config type
        # (written in an AuthConfig's spec.configs[].ldap; its settings are Settings spec.extauth's devDirectory).
        return PluginInfo(description="the 'ldap' AuthConfig config type, run by the extauth plugin: write it in an"
                                      " AuthConfig (spec.configs[].ldap) named by options.extauth.configRef",
                          options=(), settings=())

    @hookimpl(optionalhook=True)  # the extauth plugin's hook: absent without it
    def twistgw_extauth_config_types(self) -> list[ExtAuthConfigType]:
        return [self.config_type]

    @hookimpl
    def twistgw_add_commands(self, commands: Commands) -> None:
        secret.add_commands(commands)


class ExtAuthPlugin(_ExtAuthPlugin):
    """The ``extauth`` plugin with the ``ldap`` type built in: for tests and
    embedding code that register one plugin object (``[("extauth",
    twistgw_ldap.ExtAuthPlugin)]``). Installed, the two entry points
    (``extauth`` and ``ldap``) do the same."""

    def __init__(self, hook: Any = None) -> None:
        super().__init__(hook, [LdapConfigType()])
