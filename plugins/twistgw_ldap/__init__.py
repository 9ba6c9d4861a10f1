"""The ``extauth`` plugin: LDAP authentication and group authorization.

A virtual host or route enables it with::

    options:
      extauth: {configRef: {name: ldap, namespace: default}}

naming an ``AuthConfig`` whose ``spec.configs[*].ldap`` entries are checked
in order (see ``docs/ldap.md``). Written only against the public ``twistgw``
API; the module itself is the plugin (registered by the entry point
``extauth = "twistgw_ldap"``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from twisted.internet import defer
import attrs
from twistgw import Commands, GatewayInfo, OptionsError, OptionsScope, PluginInfo, RequestContext, hookimpl

from twistgw_ldap import _flow
from twistgw_ldap._devdir import DevDirectory, DevDirectoryError, check_settings
from twistgw_ldap._expr import check_expression
from twistgw_ldap._options import CompiledExtAuth, LdapConfig, compile_options
from twistgw_ldap._settings import NO_POLICY, guard, read_policy

__all__ = ["CompiledExtAuth", "LdapConfig"]

NAME = "extauth"

_dev_directory = DevDirectory()
#: The configuration directory seen at the last compile (for devDirectory.ldif).
_config_dir = ""


@hookimpl
def twistgw_plugin_info() -> PluginInfo:
    return PluginInfo(order=100, description="LDAP: Basic credentials bound against a directory,"
                                             " group membership authorization (AuthConfig)")


@hookimpl
def twistgw_add_commands(commands: Commands) -> None:
    from twistgw_ldap import secret

    secret.add_commands(commands)


@hookimpl
def twistgw_configure(gateway: GatewayInfo) -> None:
    _flow.STATE.reactor = gateway.reactor


@hookimpl
def twistgw_unconfigure() -> Any:
    _flow.STATE.close()
    return defer.Deferred.fromCoroutine(_dev_directory.stop())


@hookimpl
def twistgw_default_options(settings: Mapping[str, Any], config_dir: str) -> None:
    """No default options; checks ``Settings.spec.extauth`` when the
    configuration loads, so ``twistgw check`` reports its mistakes, including
    a development directory it could not serve (a missing LDIF file)."""
    read_policy(settings)
    try:
        check_settings(settings, config_dir)
    except DevDirectoryError as exc:
        raise OptionsError(exc.path, str(exc)) from None
    return None


@hookimpl
def twistgw_compile_options(options: Mapping[str, Any], scope: OptionsScope) -> CompiledExtAuth:
    global _config_dir
    if scope.resources.config_dir:
        _config_dir = scope.resources.config_dir
    compiled = compile_options(options, scope)
    try:
        policy = read_policy(scope.resources.settings(NAME))
    except OptionsError:  # already reported against Settings by twistgw_default_options
        policy = NO_POLICY
    return attrs.evolve(compiled, on_error=policy)


@hookimpl
def twistgw_config_loaded(compiled: Sequence[object], settings: Mapping[str, Any]) -> Any:
    _flow.STATE.config_loaded(list(compiled))
    return defer.Deferred.fromCoroutine(
        _dev_directory.apply(_flow.STATE.get_reactor(), settings, _config_dir))


@hookimpl
def twistgw_authenticate(ctx: RequestContext, options: CompiledExtAuth) -> Any:
    if options.expression is not None:
        result = defer.Deferred.fromCoroutine(check_expression(ctx, options))
    else:
        result = _flow.authenticate(ctx, options)
    return guard(result, options.on_error, ctx, _flow.STATE.get_reactor(ctx))
