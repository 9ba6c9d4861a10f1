"""Running a route's plugin chain: the one place plugins are called per request.

Plugins that answer synchronously are called synchronously: no coroutine
and no Deferred per request unless a plugin actually returns something to
await (a Deferred or a coroutine), from which point the rest of the chain
runs asynchronously.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twistgw.api.types import Allow, Deny, RequestContext
from twistgw.core.snapshot import ChainStep, flatten_chain

_log = Logger(namespace="twistgw.chain")

PLUGIN_FAILED = Deny(500, b"Internal Server Error", reason="a plugin failed")

#: ``trace(plugin, phase, decision)`` receives every step's outcome.
Trace = Callable[[str, str, Any], None]

_Call = tuple[ChainStep, str, Callable[..., Any]]


def _failed(step: ChainStep, phase: str, exc: BaseException, ctx: RequestContext, trace: Trace | None) -> Deny:
    _log.failure(
        "Plugin {plugin} failed in {phase} for {method} {path}"
        " (virtual service {vs}, route {route}); refusing with 500",
        plugin=step.plugin, phase=phase, method=ctx.method, path=ctx.path,
        vs=ctx.virtual_service, route=ctx.route,
    )
    ctx.decided_by = step.plugin
    if trace is not None:
        trace(step.label, phase, Deny(500, reason=f"plugin raised {exc!r}"))
    return PLUGIN_FAILED


def _judge(step: ChainStep, phase: str, result: Any, ctx: RequestContext, trace: Trace | None) -> Deny | None:
    if trace is not None:
        trace(step.label, phase, result)
    if result is None or isinstance(result, Allow):
        return None
    if isinstance(result, Deny):
        ctx.decided_by = step.plugin
        return result
    _log.error(
        "Plugin {plugin} returned {result!r} from {phase}; expected Allow, Deny"
        " or None. Refusing with 500.", plugin=step.plugin, result=result, phase=phase,
    )
    ctx.decided_by = step.plugin
    return PLUGIN_FAILED


def start_chain(steps: tuple[ChainStep, ...], ctx: RequestContext,
                trace: Trace | None = None) -> Deny | None | Deferred:
    """Call each plugin's authenticate then authorize, in order.

    Returns the first Deny (and sets ``ctx.decided_by``), None to admit, or
    a Deferred firing with one of those once an asynchronous plugin answers.
    Any exception, or a result that is not Allow/Deny/None, fails closed (500).
    """
    return start_calls(flatten_chain(steps), ctx, trace)


def start_calls(calls: tuple[_Call, ...], ctx: RequestContext,
                trace: Trace | None = None) -> Deny | None | Deferred:
    """:func:`start_chain` over a chain already flattened
    (:attr:`RouteRuntime.calls`): what the gateway runs per request."""
    return _run(calls, 0, ctx, trace)


def _run(calls: tuple[_Call, ...], start: int, ctx: RequestContext, trace: Trace | None) -> Deny | None | Deferred:
    for i in range(start, len(calls)):
        step, phase, fn = calls[i]
        try:
            result = fn(ctx=ctx, options=step.options)
        except Exception as exc:
            return _failed(step, phase, exc, ctx, trace)
        if trace is None and (result is None or type(result) is Allow):
            continue  # the common case, by type: no isinstance or isawaitable
        if isinstance(result, Deferred) or inspect.isawaitable(result):
            return Deferred.fromCoroutine(_resume(calls, i, result, ctx, trace))
        deny = _judge(step, phase, result, ctx, trace)
        if deny is not None:
            return deny
    return None


async def _resume(calls: tuple[_Call, ...], i: int, pending: Any, ctx: RequestContext, trace: Trace | None) -> Deny | None:
    step, phase, _ = calls[i]
    try:
        result = await pending
    except Exception as exc:
        return _failed(step, phase, exc, ctx, trace)
    deny = _judge(step, phase, result, ctx, trace)
    if deny is not None:
        return deny
    rest = _run(calls, i + 1, ctx, trace)
    if isinstance(rest, Deferred):
        return await rest
    return rest


async def run_chain(steps: tuple[ChainStep, ...], ctx: RequestContext, trace: Trace | None = None) -> Deny | None:
    """:func:`start_chain`, awaited (for ``explain`` and tests)."""
    return await run_calls(flatten_chain(steps), ctx, trace)


async def run_calls(calls: tuple[_Call, ...], ctx: RequestContext, trace: Trace | None = None) -> Deny | None:
    """:func:`start_calls`, awaited."""
    result = start_calls(calls, ctx, trace)
    if isinstance(result, Deferred):
        return await result
    return result
