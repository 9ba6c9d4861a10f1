"""Running a route's plugin chain: the one place plugins are called per request.

Plugins that answer synchronously are called synchronously: no coroutine
and no Deferred per request unless a plugin actually returns something to
await (a Deferred or a coroutine), from which point the rest of the chain
runs asynchronously.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import attrs

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twistgw.api.types import Allow, Deny, NotChecked, RequestContext

_log = Logger(namespace="twistgw.chain")

PLUGIN_FAILED = Deny(500, b"Internal Server Error", reason="a plugin failed")

#: ``trace(plugin, phase, decision)`` receives every step's outcome.
Trace = Callable[[str, str, Any], None]

@attrs.frozen
class ChainStep:
    """One plugin in a route's chain, with its compiled options."""

    plugin: str
    options: Any
    authenticate: Callable[..., Any] | None
    authorize: Callable[..., Any] | None
    #: ``beforeExtAuth``/``afterExtAuth`` when a route runs two JWT stages
    stage: str = ""

    @property
    def label(self) -> str:
        """The plugin's name, with its stage when it runs twice (``jwt[beforeExtAuth]``)."""
        return f"{self.plugin}[{self.stage}]" if self.stage else self.plugin


def flatten_chain(steps: tuple[ChainStep, ...]) -> tuple[Call, ...]:
    """Each plugin's authenticate then authorize, in chain order, as
    (step, phase, callable)."""
    out: list[Call] = []
    for step in steps:
        if step.authenticate is not None:
            out.append((step, "authenticate", step.authenticate))
        if step.authorize is not None:
            out.append((step, "authorize", step.authorize))
    return tuple(out)




#: One call of a flattened chain: (step, "authenticate" or "authorize", the callable).
Call = tuple[ChainStep, str, Callable[..., Any]]


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
    if isinstance(result, NotChecked) and ctx.dry_run:
        return None  # a dry run goes on; explain shows what was not checked
    _log.error(
        "Plugin {plugin} returned {result!r} from {phase}; expected Allow, Deny"
        " or None{dry}. Refusing with 500.", plugin=step.plugin, result=result, phase=phase,
        dry=" (NotChecked only in a dry run)" if isinstance(result, NotChecked) else "",
    )
    ctx.decided_by = step.plugin
    return PLUGIN_FAILED


def start_calls(calls: tuple[Call, ...], ctx: RequestContext,
                trace: Trace | None = None) -> Deny | None | Deferred[Deny | None]:
    """Call each step's callable in order (:attr:`RouteRuntime.calls`, the
    chain flattened once per snapshot): what the gateway runs per request.

    Returns the first Deny (and sets ``ctx.decided_by``), None to admit, or
    a Deferred firing with one of those once an asynchronous plugin answers.
    Any exception, or a result that is not Allow/Deny/None, fails closed (500).
    """
    return _run(calls, 0, ctx, trace)


def _run(calls: tuple[Call, ...], start: int, ctx: RequestContext,
         trace: Trace | None) -> Deny | None | Deferred[Deny | None]:
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


async def _resume(calls: tuple[Call, ...], i: int, pending: Any, ctx: RequestContext,
                  trace: Trace | None) -> Deny | None:
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
        later: Deny | None = await rest
        return later
    return rest
