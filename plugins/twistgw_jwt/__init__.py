"""The ``jwt`` plugin: JSON Web Token verification, as strict as Envoy's.

Enable it with ``options.jwt`` on a virtual host or route (see
``docs/jwt.md``). On success the verified claims are left on the request
context for later plugins (RBAC, third parties):

* ``ctx.claims`` — the token's payload (a ``dict``),
* ``ctx.claims_provider`` — the name of the provider that verified it,
* ``ctx.principal`` — the ``sub`` claim.

This module is the plugin: pluggy registers it under the entry point
``jwt = "twistgw_jwt"`` and calls the ``@twistgw.hookimpl`` functions below.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from twisted.internet.defer import Deferred
from twisted.logger import Logger

import twistgw
from twistgw_jwt import _authn
from twistgw_jwt._options import CompiledJwt, compile_options
from twistgw_jwt._remote import Registry, RemoteKeySet, RemoteSpec

__all__ = ["CompiledJwt"]

_log = Logger(namespace="twistgw_jwt")


class _State:
    reactor: Any = None


_state = _State()
#: remote key sets, shared across routes and reloads while in use
registry = Registry()


def _reactor() -> Any:
    if _state.reactor is None:
        from twisted.internet import reactor

        return reactor
    return _state.reactor


def _remote_key_set(spec: RemoteSpec) -> RemoteKeySet:
    return registry.get(spec, _reactor, lambda: _authn.clock.now())


@twistgw.hookimpl
def twistgw_plugin_info() -> twistgw.PluginInfo:
    return twistgw.PluginInfo(
        order=200,
        description="JWT verification: local or remote key sets, claims for later plugins",
        # Gloo's JWT stages: jwtStaged: {beforeExtAuth: {...}, afterExtAuth: {...}}
        # on hosts and routes, jwtProvidersStaged on routes (docs/jwt.md, "Stages").
        staged_options=twistgw.StagedOptions(
            "extauth", "beforeExtAuth", "afterExtAuth", ("jwtStaged", "jwtProvidersStaged"),
            route_only=("jwtProvidersStaged",)),
    )


@twistgw.hookimpl
def twistgw_add_commands(commands: twistgw.Commands) -> None:
    from twistgw_jwt import _commands

    _commands.add_commands(commands)


@twistgw.hookimpl
def twistgw_configure(gateway: twistgw.GatewayInfo) -> None:
    _state.reactor = gateway.reactor


@twistgw.hookimpl
def twistgw_unconfigure() -> None:
    for key_set in registry.all():
        key_set.cancel()


@twistgw.hookimpl
def twistgw_compile_options(options: Mapping[str, Any], scope: twistgw.OptionsScope) -> CompiledJwt:
    return compile_options(options, scope, _remote_key_set)


@twistgw.hookimpl
def twistgw_config_loaded(compiled: Sequence[object], settings: Mapping[str, Any]) -> Deferred[None] | None:
    """Prefetch every remote key set that has no keys yet, so the first
    request does not wait. Returns a Deferred firing when all attempts end."""
    pending: list[Deferred[bool]] = []
    seen: set[int] = set()
    for opts in compiled:
        if not isinstance(opts, CompiledJwt):
            continue
        for key_set in opts.remote_key_sets():
            if id(key_set) in seen:
                continue
            seen.add(id(key_set))
            d = key_set.prefetch()
            if d is not None:
                pending.append(d)
    if not pending:
        return None

    async def wait_all() -> None:
        for d in pending:
            await RemoteKeySet._wait(d)

    return Deferred.fromCoroutine(wait_all())


@twistgw.hookimpl
def twistgw_authenticate(ctx: twistgw.RequestContext, options: CompiledJwt) -> Any:
    return _authn.authenticate(ctx, options)
