"""Running a route's plugin chain: the one place plugins are called per request."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twistgw._api import Allow, Deny, RequestContext
from twistgw._snapshot import ChainStep

_log = Logger(namespace="twistgw.chain")

PLUGIN_FAILED = Deny(500, b"Internal Server Error", reason="a plugin failed")

#: ``trace(plugin, phase, decision)`` receives every step's outcome.
Trace = Callable[[str, str, Any], None]


async def run_chain(steps: tuple[ChainStep, ...], ctx: RequestContext, trace: Trace | None = None) -> Deny | None:
    """Call each plugin's authenticate then authorize, in order, awaiting each.

    Returns the first Deny (and sets ``ctx.decided_by``), or None to admit.
    Any exception, or a result that is not Allow/Deny/None, fails closed (500).
    """
    for step in steps:
        for phase, fn in (("authenticate", step.authenticate), ("authorize", step.authorize)):
            if fn is None:
                continue
            try:
                result = fn(ctx=ctx, options=step.options)
                if isinstance(result, Deferred) or inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                _log.failure(
                    "Plugin {plugin} failed in {phase} for {method} {path}"
                    " (virtual service {vs}, route {route}); refusing with 500",
                    plugin=step.plugin, phase=phase, method=ctx.method, path=ctx.path,
                    vs=ctx.virtual_service, route=ctx.route,
                )
                ctx.decided_by = step.plugin
                if trace is not None:
                    trace(step.plugin, phase, Deny(500, reason=f"plugin raised {exc!r}"))
                return PLUGIN_FAILED
            if trace is not None:
                trace(step.plugin, phase, result)
            if result is None or isinstance(result, Allow):
                continue
            if isinstance(result, Deny):
                ctx.decided_by = step.plugin
                return result
            _log.error(
                "Plugin {plugin} returned {result!r} from {phase}; expected Allow, Deny"
                " or None. Refusing with 500.", plugin=step.plugin, result=result, phase=phase,
            )
            ctx.decided_by = step.plugin
            return PLUGIN_FAILED
    return None
