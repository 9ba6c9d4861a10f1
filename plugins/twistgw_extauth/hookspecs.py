"""The hooks the ``extauth`` plugin adds to the gateway's: what a plugin
implements to give it AuthConfig config types.

The extauth plugin adds this module with ``twistgw_addhooks`` when it is
registered (as a pytest plugin adds its hooks with ``pytest_addhooks``), so
the core carries no hook of a plugin. The contract the types implement
(:class:`ExtAuthConfigType`, :class:`ConfigScope`, :class:`AuthAllow`,
:class:`AuthDeny`...) is exported by :mod:`twistgw_extauth`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from twistgw.sdk import hookspec

if TYPE_CHECKING:
    from twistgw_extauth._contract import ExtAuthConfigType

__all__ = ["twistgw_extauth_config_types"]


@hookspec
def twistgw_extauth_config_types() -> Sequence[ExtAuthConfigType]:
    """AuthConfig config types this plugin adds to the ``extauth`` plugin
    (broadcast: the ``extauth`` plugin collects every plugin's answer the
    first time it needs them, once per gateway).

    A config type is the YAML key of one entry of an AuthConfig's
    ``spec.configs`` (``ldap``, ``apiKeyAuth``, ``basicAuth``, ``opaAuth``,
    ``passThroughAuth``, ``oauth2``, or your own ``myAuth``), with its
    validation and its check. The shipped ``ldap`` type is provided through
    this hook by the ``twistgw_ldap`` plugin, exactly as yours would be::

        class MyAuthPlugin:                    # [project.entry-points."twistgw.plugins"]
            @sdk.hookimpl(optionalhook=True)   # myauth = "my_pkg:MyAuthPlugin"
            def twistgw_extauth_config_types(self):
                return [MyAuth()]              # a twistgw_extauth.ExtAuthConfigType

    ``optionalhook=True`` (pluggy's, as pytest plugins mark the hooks of
    plugins that may be absent) lets the gateway start when the ``extauth``
    plugin is not installed: the hook is then never called. Without it, a
    gateway without the extauth plugin refuses to load your plugin
    (``unknown hook 'twistgw_extauth_config_types'``).

    How the ``extauth`` plugin uses them, per AuthConfig entry
    ``spec.configs[i].<name>: raw``:

    * when the configuration loads: ``type.compile(raw, scope)`` with a
      :class:`ConfigScope` (the AuthConfig's namespace, Secrets,
      ConfigMaps, ``Settings.spec.extauth``, the configuration directory).
      It returns a checker (:class:`ExtAuthChecker`) or raises
      :class:`sdk.OptionsError` with paths **relative to the entry**;
      the problem is reported at ``spec.configs[i].<name>.<path>`` with the
      AuthConfig's file and line. ``type.check_settings`` checks the type's
      ``settings_fields`` of ``Settings.spec.extauth`` at every load;
    * on each request: ``checker.check(ctx)`` returns (or resolves to)
      :class:`AuthAllow` (principal, request headers to set) or
      :class:`AuthDeny` (the answer; ``error=True`` for an outage or
      a misconfiguration, to which ``Settings.spec.extauth``'s
      ``failureModeAllow`` / ``statusOnError`` apply). The configs run in
      order and all must admit, or as the AuthConfig's ``booleanExpr``
      says; the first denial's answer is returned. Under ``twistgw
      explain`` without ``--live`` it calls ``checker.dry_run(ctx)``
      instead, which contacts nothing;
    * lifecycle: ``type.configure(gateway)`` at start-up,
      ``type.config_loaded(checkers, settings)`` when a configuration
      serves (each checker of this type in it: warm pools, drop stale
      state), ``type.unconfigure()`` at shutdown.

    A plugin that only provides config types needs no other hook; it
    declares that it reads no options and no Settings section
    (``PluginInfo(options=(), settings=())``), so ``options.<its name>``
    is refused with its description, as the shipped ``ldap``, ``authtypes``
    and ``oidc`` plugins do.

    :return: a sequence of config type objects (:class:`ExtAuthConfigType`
        instances). Two plugins providing the same ``name`` are a
        configuration error naming both.
    """
    return ()
