"""The ``rbac`` plugin: role-based access control on verified JWT claims.

Options key ``rbac`` (SPEC.md §3, docs/rbac.md). Runs after the ``jwt``
plugin (order 300 vs 200), which leaves the verified claims in
``ctx.claims`` and the verifying provider's name in ``ctx.claims_provider``.

Written only against the public hook API, exactly as a third-party plugin
would be. The policy language lives in :mod:`twistgw_rbac._policy` (pure);
this module is the thin hook layer: compile, authorize, log and count.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

from twisted.logger import Logger

import twistgw
from twistgw.regex import max_program_size
from twistgw_rbac._policy import REQUIRED_BY_SETTINGS, PolicySet, compile_options, require_rbac, settings_problem

__all__ = ["DENY_BODY", "PolicySet"]

_log = Logger(namespace="twistgw.rbac")

DENY_BODY = b"RBAC: access denied"

# Defined once, at import, on the default registry (SPEC: many gateways may
# be built in one process; registering twice would raise).
# twistgw.counter: an increment is an integer addition, not a lock (per request).
DECISIONS = twistgw.counter(
    "twistgw_rbac_decisions_total",
    "RBAC decisions enforced, by outcome.",
    ["decision"],
)
SHADOW_DECISIONS = twistgw.counter(
    "twistgw_rbac_shadow_decisions_total",
    "Would-be decisions of RBAC policy sets in shadow mode (never enforced).",
    ["decision"],
)


# Labelled children resolved once: .labels() takes a lock and a dict lookup.
_ALLOW_COUNT = DECISIONS.labels("allow")
_DENY_COUNT = DECISIONS.labels("deny")


@functools.lru_cache(maxsize=1024)
def _allow(reason: str) -> twistgw.Allow:
    """One (immutable) Allow per verdict reason, i.e. per configured policy
    principal: an admitted request allocates nothing."""
    return twistgw.Allow(reason=reason)


@twistgw.hookimpl
def twistgw_plugin_info() -> twistgw.PluginInfo:
    return twistgw.PluginInfo(
        order=300, description="Role-based access control on verified JWT claims")


@twistgw.hookimpl
def twistgw_default_options(settings: Mapping[str, Any]) -> Mapping[str, Any] | None:
    problem = settings_problem(settings)
    if problem is not None:
        # This hook cannot raise a field error itself; hand the compiler
        # options that fail with the precise path below Settings.spec.rbac.
        return {"_settingsError": problem}
    if require_rbac(settings):
        return {"policies": {}, "_requiredBySettings": REQUIRED_BY_SETTINGS}
    return None


@twistgw.hookimpl
def twistgw_compile_options(options: Mapping[str, Any], scope: twistgw.OptionsScope) -> PolicySet:
    problem = options.get("_settingsError")
    if isinstance(problem, tuple):  # only ever from twistgw_default_options (YAML has no tuples)
        path, reason = problem
        raise twistgw.OptionsError(path, reason)
    invalid = settings_problem(scope.resources.settings("rbac"))
    if invalid is not None:
        path, reason = invalid
        dotted = ".".join(str(p) for p in path)
        raise twistgw.OptionsError((), f"the gateway-wide Settings spec.rbac.{dotted} is"
                                       f" invalid: {reason}")
    return compile_options(options, max_program_size(scope.resources.settings("gateway")))


@twistgw.hookimpl
def twistgw_authorize(ctx: twistgw.RequestContext, options: PolicySet) -> twistgw.Decision:
    verdict = options.evaluate(ctx.method, ctx.path, ctx.claims, ctx.claims_provider)
    if options.shadow:
        decision = "allow" if verdict.allowed else "deny"
        SHADOW_DECISIONS.labels(decision).inc()
        _log.info(
            "RBAC shadow mode: would {decision} {method} {path} (virtual service {vs},"
            " route {route}): {reason}",
            decision=decision, method=ctx.method, path=ctx.path, vs=ctx.virtual_service,
            route=ctx.route, reason=verdict.reason,
        )
        return twistgw.Allow(reason=f"shadow mode, not enforced; would {decision}:"
                                    f" {verdict.reason}")
    if verdict.allowed:
        _ALLOW_COUNT.inc()
        return _allow(verdict.reason)
    _DENY_COUNT.inc()
    return twistgw.Deny(403, DENY_BODY, reason=verdict.reason)
