"""The ``extauth`` plugin: Gloo's external auth, inside the gateway.

A virtual host or route enables it with::

    options:
      extauth: {configRef: {name: ldap, namespace: default}}

naming an ``AuthConfig`` whose ``spec.configs`` entries are checked in
order (all must admit), or as its ``booleanExpr`` says. Each entry's config
type (``ldap``, ``apiKeyAuth``, a team's ``myAuth``) comes from an installed
plugin through the ``twistgw_extauth_config_types`` hook; this plugin knows
none of them by name. Written only against the public ``twistgw`` API;
:class:`ExtAuthPlugin` is the plugin (the entry point
``extauth = "twistgw_extauth:ExtAuthPlugin"`` names it). See
``docs/plugins.md``, "AuthConfig config types".
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from twistgw import (
    AuthAllow,
    AuthConfigInfo,
    ExtAuthConfigType,
    GatewayInfo,
    OptionsError,
    OptionsScope,
    PluginInfo,
    RequestContext,
    hookimpl,
)
from twistgw.api.fields import Problems
from twistgw_extauth import _explain, _flow
from twistgw_extauth._flow import admit_one
from twistgw_extauth._options import CompiledExtAuth, compile_options
from twistgw_extauth._settings import NO_POLICY, ErrorPolicy, read_policy, read_section
from twistgw_extauth._types import Registry, TypeProblem

__all__ = ["CompiledExtAuth", "ExtAuthPlugin"]

NAME = "extauth"
_log = Logger(namespace="twistgw_extauth")


class ExtAuthPlugin:
    """The plugin: one instance per gateway.

    :param hook: the host's hook relay, through which the config types are
        collected (the host passes it).
    :param types: config types this instance serves besides the installed
        ones (for embedding and tests).
    """

    def __init__(self, hook: Any = None, types: Iterable[ExtAuthConfigType] = ()) -> None:
        self.registry = Registry(hook, types)
        self.reactor: Any = None
        #: ``twistgw explain`` without ``--live``: config types start nothing
        self.dry_run = False
        #: (the Settings section, its error policy, the section read): the last load's
        self._read: tuple[Mapping[str, Any], ErrorPolicy, Mapping[str, Any]] | None = None

    def get_reactor(self, ctx: RequestContext) -> Any:
        if self.reactor is not None:
            return self.reactor
        if ctx.reactor is not None:
            return ctx.reactor
        from twisted.internet import reactor

        return reactor

    @hookimpl
    def twistgw_plugin_info(self) -> PluginInfo:
        return PluginInfo(order=100, description="external auth: the configs of an AuthConfig (ldap and every"
                                                 " other installed config type), Gloo's extauth")

    @hookimpl
    def twistgw_configure(self, gateway: GatewayInfo) -> None:
        self.reactor, self.dry_run = gateway.reactor, gateway.dry_run
        for kind in self.registry.usable().values():
            kind.configure(gateway)

    @hookimpl
    def twistgw_unconfigure(self) -> Any:
        return _each(self.registry.usable(), "unconfigure", lambda kind: kind.unconfigure())

    def _type_fields(self) -> set[str]:
        return {f for kind in self.registry.usable().values() for f in getattr(kind, "settings_fields", ())}

    @hookimpl
    def twistgw_default_options(self, settings: Mapping[str, Any], config_dir: str) -> None:
        """No default options; checks ``Settings.spec.extauth`` (the error
        policy and each config type's own fields) and the installed config
        types at every load, so ``twistgw check`` reports their problems."""
        try:
            self.registry.types()
        except TypeProblem as exc:
            raise OptionsError((), str(exc)) from None
        problems = []
        try:
            read_policy(settings, self._type_fields())
        except OptionsError as exc:
            problems.append(exc)
        section = read_section(settings, self._type_fields(), Problems())  # its problems: read_policy's
        for kind in self.registry.usable().values():
            try:
                kind.check_settings({k: v for k, v in section.items() if k in kind.settings_fields}, config_dir)
            except OptionsError as exc:
                problems.append(exc)
        if problems:
            raise OptionsError.several(problems)
        return None

    @hookimpl
    def twistgw_compile_options(self, options: Mapping[str, Any], scope: OptionsScope) -> CompiledExtAuth:
        policy, section = self._settings(scope.resources.settings(NAME))
        return compile_options(options, scope, self.registry, policy, section)

    def _settings(self, settings: Mapping[str, Any]) -> tuple[ErrorPolicy, Mapping[str, Any]]:
        """``Settings.spec.extauth`` read once per load (the same section
        object for every route), not once per route."""
        if self._read is None or self._read[0] is not settings:
            try:
                policy = read_policy(settings, self._type_fields())
            except OptionsError:  # already reported against Settings by twistgw_default_options
                policy = NO_POLICY
            self._read = (settings, policy, read_section(settings, self._type_fields(), Problems()))
        return self._read[1], self._read[2]

    @hookimpl(optionalhook=True)
    def twistgw_check_resource(self, kind: str, resource: object, scope: OptionsScope) -> None:
        """Every AuthConfig, referred to or not, compiled as a route would
        compile it: ``twistgw check`` reports one the gateway cannot serve
        (its problems are located in the AuthConfig). (The hook is the
        core's ``twistgw_check_resource``, issue 23 item 25; optional here
        until the core that calls it is merged.)"""
        if kind == "AuthConfig" and isinstance(resource, AuthConfigInfo):
            self.twistgw_compile_options({"configRef": {"name": resource.name, "namespace": resource.namespace}},
                                         scope)

    @hookimpl
    def twistgw_config_loaded(self, compiled: Sequence[object], settings: Mapping[str, Any]) -> Any:
        if self.dry_run:
            return None  # no connection pools, nothing started
        by_type: dict[str, list[Any]] = {}
        for c in compiled:
            if isinstance(c, CompiledExtAuth):
                for entry in c.entries:
                    by_type.setdefault(entry.type_name, []).append(entry.checker)
        return _each(self.registry.usable(), "config_loaded", lambda kind: kind.config_loaded(
            by_type.get(kind.name, []), {k: v for k, v in settings.items() if k in kind.settings_fields}))

    @hookimpl
    def twistgw_authenticate(self, ctx: RequestContext, options: CompiledExtAuth) -> Any:
        # The common case inline (one config, no booleanExpr, an answer at
        # once): one call into the config type, then the admission.
        check = options.single
        if check is not None and not ctx.dry_run:
            answer = check(ctx)
            if answer.__class__ is AuthAllow:
                return admit_one(ctx, options, answer)
            return _flow.answered(ctx, options, answer, self.get_reactor)
        if ctx.dry_run:
            return _explain.dry_run(ctx, options)
        return _flow.authenticate(ctx, options, self.get_reactor)



def _each(kinds: Mapping[str, ExtAuthConfigType], what: str, call: Any) -> Any:
    """``call(kind)`` for every config type; a failure (raised, or a failed
    Deferred) is logged with the type's name and does not stop the others."""
    results = []
    for name, kind in kinds.items():
        d = defer.maybeDeferred(call, kind)
        d.addErrback(_log_failure, name, what)
        results.append(d)
    return defer.gatherResults(results) if results else None


def _log_failure(failure: Failure, name: str, what: str) -> None:
    _log.failure("extauth config type {name} failed in {what}", failure=failure, name=name, what=what)
