"""The ``extauth`` plugin: LDAP authentication and group authorization.

A virtual host or route enables it with::

    options:
      extauth: {configRef: {name: ldap, namespace: default}}

naming an ``AuthConfig`` whose ``spec.configs[*].ldap`` entries are checked
in order (see ``docs/ldap.md``). Written only against the public ``twistgw``
API; :class:`ExtAuthPlugin` is the plugin (the entry point
``extauth = "twistgw_ldap:ExtAuthPlugin"`` names it).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from twisted.internet import defer
import attrs
from twistgw import (
    Allow,
    AuthConfigInfo,
    Commands,
    GatewayInfo,
    OptionsError,
    OptionsScope,
    PluginInfo,
    RequestContext,
    hookimpl,
)

from twistgw_ldap import _flow
from twistgw_ldap._devdir import DevDirectory, DevDirectoryError, check_settings
from twistgw_ldap._expr import check_expression
from twistgw_ldap._options import CompiledExtAuth, LdapConfig, compile_options
from twistgw_ldap._settings import NO_POLICY, guard, read_policy

__all__ = ["CompiledExtAuth", "ExtAuthPlugin", "LdapConfig"]

NAME = "extauth"

class ExtAuthPlugin:
    """The plugin: one instance per gateway (the entry point names the class,
    and the gateway makes the instance), holding its state: the directory
    connection pools and decision caches (``state``, kept across reloads),
    the development directory and the configuration directory it reads.
    """

    def __init__(self) -> None:
        self.state = _flow.State()
        self.dev_directory = DevDirectory()
        #: the configuration directory seen at the last compile (for devDirectory.ldif)
        self.config_dir = ""
        #: ``twistgw explain`` without ``--live``: no connection pools, bind nothing
        self.dry_run = False
        #: False under ``twistgw explain``: never start the development directory
        self.may_listen = True

    @hookimpl
    def twistgw_plugin_info(self) -> PluginInfo:
        return PluginInfo(order=100, description="LDAP: Basic credentials bound against a directory,"
                                                 " group membership authorization (AuthConfig)")

    @hookimpl
    def twistgw_add_commands(self, commands: Commands) -> None:
        from twistgw_ldap import secret

        secret.add_commands(commands)

    @hookimpl
    def twistgw_configure(self, gateway: GatewayInfo) -> None:
        self.state.reactor = gateway.reactor
        self.dry_run, self.may_listen = gateway.dry_run, gateway.may_listen

    @hookimpl
    def twistgw_unconfigure(self) -> Any:
        self.state.close()
        return defer.Deferred.fromCoroutine(self.dev_directory.stop())

    @hookimpl
    def twistgw_default_options(self, settings: Mapping[str, Any], config_dir: str) -> None:
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
    def twistgw_compile_options(self, options: Mapping[str, Any], scope: OptionsScope) -> CompiledExtAuth:
        if scope.resources.config_dir:
            self.config_dir = scope.resources.config_dir
        compiled = compile_options(options, scope)
        try:
            policy = read_policy(scope.resources.settings(NAME))
        except OptionsError:  # already reported against Settings by twistgw_default_options
            policy = NO_POLICY
        return attrs.evolve(compiled, on_error=policy, state=self.state)

    @hookimpl
    def twistgw_check_resource(self, kind: str, resource: object, scope: OptionsScope) -> None:
        """Every AuthConfig, referred to or not, compiled as a route would
        compile it: ``twistgw check`` reports one the gateway cannot serve
        (its problems are located in the AuthConfig)."""
        if kind == "AuthConfig" and isinstance(resource, AuthConfigInfo):
            compile_options({"configRef": {"name": resource.name, "namespace": resource.namespace}}, scope)

    @hookimpl
    def twistgw_config_loaded(self, compiled: Sequence[object], settings: Mapping[str, Any]) -> Any:
        if self.dry_run:
            return None  # no connection pools, no development directory
        self.state.config_loaded(list(compiled))
        if not self.may_listen:
            return None
        return defer.Deferred.fromCoroutine(
            self.dev_directory.apply(self.state.get_reactor(), settings, self.config_dir))

    @hookimpl
    def twistgw_authenticate(self, ctx: RequestContext, options: CompiledExtAuth) -> Any:
        if ctx.dry_run:
            return _flow.dry_run(ctx, options)
        if options.expression is not None:
            result = defer.Deferred.fromCoroutine(check_expression(ctx, options))
        else:
            result = _flow.authenticate(ctx, options)
            if result.__class__ is Allow:
                return result  # the error policy acts only on errors
        return guard(result, options.on_error, ctx, self.state.get_reactor(ctx))
