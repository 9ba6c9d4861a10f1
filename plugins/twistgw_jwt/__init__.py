"""The ``jwt`` plugin: JSON Web Token verification, as strict as Envoy's.

Enable it with ``options.jwt`` on a virtual host or route (see
``docs/jwt.md``). On success the verified claims are left on the request
context for later plugins (RBAC, third parties):

* ``ctx.claims`` — the token's payload (a ``dict``),
* ``ctx.claims_provider`` — the name of the provider that verified it,
* ``ctx.principal`` — the ``sub`` claim, unless a plugin earlier in the
  chain authenticated the request (``ctx.identities["jwt"]`` is the
  ``sub`` either way).

:class:`JwtPlugin` is the plugin: the entry point ``jwt =
"twistgw_jwt:JwtPlugin"`` names it, and each gateway makes an instance of it
whose ``@twistgw.hookimpl`` methods pluggy calls.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from twisted.internet.defer import Deferred
from twisted.logger import Logger

import twistgw
from twistgw.api.fields import Problems
from twistgw_jwt import _authn
from twistgw_jwt._options import CompiledJwt, compile_options, verified_cache_size
from twistgw_jwt._remote import Registry, RemoteKeySet, RemoteSpec, wait_for_fetch

__all__ = ["CompiledJwt", "JwtPlugin"]

_log = Logger(namespace="twistgw_jwt")


class JwtPlugin:
    """The plugin: one instance per gateway (the entry point names the class,
    and the gateway makes the instance), holding its state: the reactor, the
    remote key sets shared across routes and reloads, and the clock.

    :param now: the wall clock (seconds); tests pass their own, or replace
        the ``now`` attribute of a running instance.
    """

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self.now = now
        self.reactor: Any = None
        #: ``twistgw explain`` without ``--live``: fetch no key set
        self.dry_run = False
        #: remote key sets, shared across routes and reloads while in use
        self.registry = Registry()

    def time(self) -> float:
        """The current time by :attr:`now` (read at each call, so a test may
        move the clock of options already compiled)."""
        return self.now()

    def _reactor(self) -> Any:
        if self.reactor is None:
            from twisted.internet import reactor

            return reactor
        return self.reactor

    def _remote_key_set(self, spec: RemoteSpec) -> RemoteKeySet:
        return self.registry.get(spec, self._reactor, self.time)

    @twistgw.hookimpl
    def twistgw_plugin_info(self) -> twistgw.PluginInfo:
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
    def twistgw_add_commands(self, commands: twistgw.Commands) -> None:
        from twistgw_jwt import _commands

        _commands.add_commands(commands)

    @twistgw.hookimpl
    def twistgw_configure(self, gateway: twistgw.GatewayInfo) -> None:
        self.reactor = gateway.reactor
        self.dry_run = gateway.dry_run

    @twistgw.hookimpl
    def twistgw_unconfigure(self) -> None:
        for key_set in self.registry.all():
            key_set.cancel()

    @twistgw.hookimpl
    def twistgw_default_options(self, settings: Mapping[str, Any]) -> None:
        """No default options; checks ``Settings.spec.jwt``."""
        problems = Problems()
        verified_cache_size(settings, problems)
        problems.raise_if_any()

    @twistgw.hookimpl
    def twistgw_compile_options(self, options: Mapping[str, Any], scope: twistgw.OptionsScope) -> CompiledJwt:
        return compile_options(options, scope, self._remote_key_set, self.time)

    @twistgw.hookimpl
    def twistgw_config_loaded(self, compiled: Sequence[object], settings: Mapping[str, Any]) -> Deferred[None] | None:
        """Prefetch every remote key set that has no keys yet, so the first
        request does not wait. Returns a Deferred firing when all attempts end.
        Nothing in a dry run."""
        if self.dry_run:
            return None
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
                await wait_for_fetch(d)

        return Deferred.fromCoroutine(wait_all())

    @twistgw.hookimpl
    def twistgw_authenticate(self, ctx: twistgw.RequestContext, options: CompiledJwt) -> Any:
        return _authn.authenticate(ctx, options)
