"""Running a route's plugin chain: the one place plugins are called per request.

A route's chain is compiled once per snapshot (:func:`flatten_chain`) into
a tuple of :data:`Call`\\ s, each callable taking ``(ctx, options)``
positionally, so that running a plugin per request is one tuple unpacking,
one call and one test of the result (:func:`start_calls`).

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
from twisted.python.failure import Failure

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


#: One call of a compiled chain: (the step, ``"authenticate"`` or
#: ``"authorize"``, the callable taking ``(ctx, options)`` positionally).
Call = tuple[ChainStep, str, Callable[[RequestContext, Any], Any]]


def flatten_chain(steps: tuple[ChainStep, ...]) -> tuple[Call, ...]:
    """Each plugin's authenticate then authorize, in chain order, as
    :data:`Call`\\ s (once per route per snapshot)."""
    out: list[Call] = []
    for step in steps:
        if step.authenticate is not None:
            out.append((step, "authenticate", positional(step.authenticate)))
        if step.authorize is not None:
            out.append((step, "authorize", positional(step.authorize)))
    return tuple(out)


def positional(fn: Callable[..., Any]) -> Callable[[RequestContext, Any], Any]:
    """``fn`` itself when it takes exactly ``(ctx, options)`` in that order
    (a hook implementation written like the hook spec: called positionally,
    which is cheaper than by keyword), else a wrapper calling it by keyword
    (an implementation that takes the arguments in another order, or a
    subset of them)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    if [(p.name, p.kind) for p in params] == [("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                                               ("options", inspect.Parameter.POSITIONAL_OR_KEYWORD)]:
        return fn

    def by_keyword(ctx: RequestContext, options: Any) -> Any:
        return fn(ctx=ctx, options=options)

    return by_keyword


def _failed(step: ChainStep, phase: str, exc: BaseException, ctx: RequestContext, trace: Trace | None,
            failure: Failure | None = None) -> Deny:
    """A plugin raised (or its Deferred failed: ``failure``): 500."""
    _log.failure(
        "Plugin {plugin} failed in {phase} for {method} {path}"
        " (virtual service {vs}, route {route}); refusing with 500",
        failure, plugin=step.plugin, phase=phase, method=ctx.method, path=ctx.path,
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
        # a dry run goes on as if the plugin admitted (explain shows what was
        # not checked), with the header edits it says admitting would make
        for name, value in result.headers:
            if value is None:
                ctx.headers.removeHeader(name)
            else:
                ctx.headers.setRawHeaders(name, [value])
        return None
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
    chain compiled once per snapshot): what the gateway runs per request.

    Returns the first Deny (and sets ``ctx.decided_by``), None to admit, or
    a Deferred firing with one of those once an asynchronous plugin answers.
    Any exception, or a result that is not Allow/Deny/None, fails closed (500).
    """
    if trace is not None:
        return _run_traced(calls, 0, ctx, trace)
    i = 0
    for step, phase, fn in calls:
        try:
            result = fn(ctx, step.options)
        except Exception as exc:
            return _failed(step, phase, exc, ctx, None)
        if result is not None and result.__class__ is not Allow:  # the common case: one test, by type
            return _settle(calls, i, result, ctx, None)
        i += 1
    return None


def _settle(calls: tuple[Call, ...], i: int, result: Any, ctx: RequestContext,
            trace: Trace | None) -> Deny | None | Deferred[Deny | None]:
    """Call ``i`` answered something other than None or Allow: a Deny, an
    awaitable (the rest of the chain runs once it fires), or something to
    judge; returns what :func:`start_calls` does."""
    if isinstance(result, Deferred):
        return _then(result, calls, i, ctx, trace)
    if inspect.isawaitable(result):
        return Deferred.fromCoroutine(_resume(calls, i, result, ctx, trace))
    step, phase, _ = calls[i]
    deny = _judge(step, phase, result, ctx, trace)
    if deny is not None:
        return deny
    return _run_traced(calls, i + 1, ctx, trace)


def _run_traced(calls: tuple[Call, ...], start: int, ctx: RequestContext,
                trace: Trace | None) -> Deny | None | Deferred[Deny | None]:
    """:func:`start_calls` from call ``start``, every outcome judged (and
    traced when ``trace`` is given)."""
    for i in range(start, len(calls)):
        step, phase, fn = calls[i]
        try:
            result = fn(ctx, step.options)
        except Exception as exc:
            return _failed(step, phase, exc, ctx, trace)
        if isinstance(result, Deferred):
            return _then(result, calls, i, ctx, trace)
        if inspect.isawaitable(result):
            return Deferred.fromCoroutine(_resume(calls, i, result, ctx, trace))
        deny = _judge(step, phase, result, ctx, trace)
        if deny is not None:
            return deny
    return None


def _then(pending: Deferred[Any], calls: tuple[Call, ...], i: int, ctx: RequestContext,
          trace: Trace | None) -> Deferred[Deny | None]:
    """Call ``i`` returned a Deferred: the rest of the chain runs as its
    callbacks (two callbacks on the plugin's own Deferred, which the chain
    now owns, as an ``await`` would; no coroutine per request)."""
    args = (calls, i, ctx, trace)
    return pending.addCallbacks(_answered, _raised, callbackArgs=args, errbackArgs=args)


def _answered(result: Any, calls: tuple[Call, ...], i: int, ctx: RequestContext,
              trace: Trace | None) -> Deny | None | Deferred[Deny | None]:
    step, phase, _ = calls[i]
    deny = _judge(step, phase, result, ctx, trace)
    if deny is not None:
        return deny
    return _run_traced(calls, i + 1, ctx, trace)  # a Deferred is chained by the caller's Deferred


def _raised(failure: Failure, calls: tuple[Call, ...], i: int, ctx: RequestContext, trace: Trace | None) -> Deny:
    step, phase, _ = calls[i]
    return _failed(step, phase, failure.value, ctx, trace, failure)


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
    rest = _run_traced(calls, i + 1, ctx, trace)
    if isinstance(rest, Deferred):
        later: Deny | None = await rest
        return later
    return rest
