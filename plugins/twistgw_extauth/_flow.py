"""One extauth check: the configs of an AuthConfig in order (all must admit,
Gloo's rule) or its ``booleanExpr``; the admission (principal, headers,
consumed credentials removed); ``Settings.spec.extauth``'s error policy.

Each config answers with a :class:`twistgw.AuthAllow` or
:class:`twistgw.AuthDeny`, at once or through a Deferred. When every config
answers at once (a warm decision cache), the check makes no Deferred.
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable

import attrs
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twistgw import Allow, AuthAllow, AuthDeny, Deny, RequestContext
from twistgw_extauth._expr import And, Node, Not, Ref
from twistgw_extauth._options import CompiledExtAuth
from twistgw_extauth._settings import ErrorPolicy

_log = Logger(namespace="twistgw_extauth")

#: What a check ends with: the admitting configs' answers (config index,
#: answer) and the principal of a refused config that authenticated one;
#: or the refusal.
Admitted = tuple[list[tuple[int, AuthAllow]], "str | None"]


def authenticate(ctx: RequestContext, compiled: CompiledExtAuth,
                 reactor: Callable[[RequestContext], Any]) -> Allow | Deny | Deferred[Any]:
    """The check of ``compiled`` for ``ctx``: synchronous when every config
    answers at once. ``reactor(ctx)`` gives the reactor for timeouts (asked
    only when a config answers later)."""
    if compiled.expression is not None:
        return _guard(Deferred.fromCoroutine(_expression(ctx, compiled, compiled.expression)), ctx, compiled,
                      reactor)
    entries = compiled.entries
    if len(entries) == 1:  # the common case, kept short: no list, no loop
        answer = entries[0].check(ctx)
        if answer.__class__ is AuthAllow:
            return admit_one(ctx, compiled, answer)
        return answered(ctx, compiled, answer, reactor)
    admitted: list[tuple[int, AuthAllow]] = []
    for index, entry in enumerate(entries):
        answer = entry.check(ctx)
        cls = answer.__class__
        if cls is AuthAllow:
            admitted.append((index, answer))
            if answer.state is not None:
                share(ctx, compiled, index, answer)
        elif cls is AuthDeny:
            return _refused(ctx, compiled, answer)
        else:
            pending = Deferred.fromCoroutine(_sequence(ctx, compiled, admitted, index, answer))
            return _guard(pending, ctx, compiled, reactor)
    return admit(ctx, compiled, admitted, None)


def answered(ctx: RequestContext, compiled: CompiledExtAuth, answer: Any,
             reactor: Callable[[RequestContext], Any]) -> Allow | Deny | Deferred[Any]:
    """The check of a one-config AuthConfig once its config answered with
    anything but an :class:`AuthAllow`: a refusal, or an answer to come."""
    if answer.__class__ is AuthDeny:
        return _refused(ctx, compiled, answer)
    return _guard(Deferred.fromCoroutine(_sequence(ctx, compiled, [], 0, answer)), ctx, compiled, reactor)


async def _resolve(answer: Any) -> Any:
    if isinstance(answer, Deferred) or inspect.isawaitable(answer):
        return await answer
    return answer


def _answer(answer: Any, where: str) -> AuthAllow | AuthDeny:
    if isinstance(answer, (AuthAllow, AuthDeny)):
        return answer
    raise TypeError(f"{where}: check() must give twistgw.AuthAllow or twistgw.AuthDeny, got {answer!r}")


async def _sequence(ctx: RequestContext, compiled: CompiledExtAuth, admitted: list[tuple[int, AuthAllow]],
                    index: int, pending: Any) -> Admitted | AuthDeny:
    """The configs from ``index`` (whose answer is ``pending``) on."""
    entries = compiled.entries
    while True:
        answer = _answer(await _resolve(pending), entries[index].source)
        if isinstance(answer, AuthDeny):
            return answer
        admitted.append((index, answer))
        if answer.state is not None:
            share(ctx, compiled, index, answer)
        index += 1
        if index == len(entries):
            return admitted, None
        pending = entries[index].check(ctx)


class _Abort(Exception):
    """A config ended in an error (not a decision): the evaluation stops."""

    def __init__(self, deny: AuthDeny) -> None:
        super().__init__(deny.reason)
        self.deny = deny


async def evaluate(node: Node, ask: Callable[[int], Awaitable[bool]]) -> bool:
    """The expression, left to right with short-circuiting: a config whose
    answer cannot change the result is never asked."""
    if isinstance(node, Ref):
        return await ask(node.index)
    if isinstance(node, Not):
        return not await evaluate(node.operand, ask)
    if isinstance(node, And):
        return await evaluate(node.left, ask) and await evaluate(node.right, ask)
    return await evaluate(node.left, ask) or await evaluate(node.right, ask)


async def _expression(ctx: RequestContext, compiled: CompiledExtAuth, expression: Node) -> Admitted | AuthDeny:
    """``booleanExpr``: each config asked at most once; its decision (401,
    403) is "false"; an error stops the evaluation and is the answer, so a
    failing dependency never makes ``!config`` true. When the expression is
    false the answer is the last refusal seen (403 when a ``!`` made it
    false). Only a config that authenticated someone names the principal."""
    answers: dict[int, AuthAllow | AuthDeny] = {}

    async def ask(index: int) -> bool:
        if index not in answers:
            entry = compiled.entries[index]
            answer = answers[index] = _answer(await _resolve(entry.check(ctx)), entry.source)
            if isinstance(answer, AuthDeny) and answer.error:
                raise _Abort(answer)
            if isinstance(answer, AuthAllow) and answer.state is not None:
                share(ctx, compiled, index, answer)
        return answers[index].__class__ is AuthAllow

    try:
        admitted = await evaluate(expression, ask)
    except _Abort as abort:
        return abort.deny
    refusals = [a for a in answers.values() if isinstance(a, AuthDeny)]
    if not admitted:
        return refusals[-1] if refusals else AuthDeny(
            403, b"", content_type=b"", reason=f"AuthConfig {compiled.auth_config}: booleanExpr is false")
    allowed = [(i, a) for i, a in answers.items() if isinstance(a, AuthAllow)]
    refused_principal = next((a.principal for a in refusals if a.principal), None)
    return allowed, refused_principal


def _guard(pending: Deferred[Any], ctx: RequestContext, compiled: CompiledExtAuth,
           reactor: Callable[[RequestContext], Any]) -> Deferred[Any]:
    policy = compiled.on_error
    if policy.timeout is not None:
        pending.addTimeout(policy.timeout, reactor(ctx), onTimeoutCancel=lambda _r, _t: _timed_out(policy))
    return pending.addCallback(_finish, ctx, compiled)


def _timed_out(policy: ErrorPolicy) -> AuthDeny:
    return AuthDeny.failure(f"extauth: no decision within Settings spec.extauth.requestTimeout {policy.timeout:g}s")


def _finish(outcome: Admitted | AuthDeny, ctx: RequestContext, compiled: CompiledExtAuth) -> Allow | Deny:
    if isinstance(outcome, AuthDeny):
        return _refused(ctx, compiled, outcome)
    return admit(ctx, compiled, *outcome)


def _refused(ctx: RequestContext, compiled: CompiledExtAuth, deny: AuthDeny) -> Allow | Deny:
    """The client's answer for a refusal; an error goes through the policy."""
    policy = compiled.on_error
    if deny.error and policy.failure_mode_allow:
        _log.warn("extauth failed ({reason}); admitting {method} {path} WITHOUT authentication because"
                  " Settings spec.extauth.failureModeAllow is true", reason=deny.reason,
                  method=ctx.method, path=ctx.path)
        _remove(ctx, compiled.credential_headers)
        return Allow(f"failureModeAllow: admitted despite an extauth error ({deny.reason})")
    if deny.error and policy.status_on_error is not None:
        deny = attrs.evolve(deny, status=policy.status_on_error,
                            reason=f"{deny.reason} (statusOnError {policy.status_on_error})")
    return Deny(deny.status, deny.body, deny.headers, deny.content_type, deny.reason)


def _remove(ctx: RequestContext, names: tuple[bytes, ...]) -> None:
    headers = ctx.headers
    for name in names:
        headers.removeHeader(name)


def admit(ctx: RequestContext, compiled: CompiledExtAuth, admitted: list[tuple[int, AuthAllow]],
          refused_principal: str | None) -> Allow | Deny:
    """Apply the admitting configs' answers, in the order they ran: the
    first principal named is the request's, the first claims are
    ``ctx.claims``; consumed credentials go."""
    headers = ctx.headers
    for name in compiled.credential_headers:
        headers.removeHeader(name)
    if len(admitted) == 1 and refused_principal is None and admitted[0][0] == 0 and len(compiled.entries) == 1:
        return admit_one(ctx, compiled, admitted[0][1], False)
    principal = _apply_all(ctx, compiled, admitted) or refused_principal
    if principal is not None:
        ctx.authenticated("extauth", principal)
        if compiled.on_error.user_id_header is not None and not write_user_id(ctx, compiled, principal):
            return _unwritable(principal)
    ctx.state["extauth"]["user"] = principal
    if not admitted:
        return _allow(f"extauth: AuthConfig {compiled.auth_config} booleanExpr is true with no config admitting")
    return _allow(" | ".join(answer.reason for _, answer in admitted))


def admit_one(ctx: RequestContext, compiled: CompiledExtAuth, answer: AuthAllow,
              remove: bool = True) -> Allow | Deny:
    """:func:`admit` for an AuthConfig of one config (``remove``: the
    consumed credentials are still there). The per-request path of the
    common case: nothing is built that the answer does not ask for."""
    headers = ctx.headers
    if remove:
        for credential in compiled.credential_canonical:
            headers.remove_canonical(credential)
    if answer.headers:
        for header, value in answer.headers:
            if value is None:
                headers.removeHeader(header)
            else:
                headers.setRawHeaders(header, [value])
    if answer.response_headers:
        for header, value in answer.response_headers:
            ctx.add_response_header(header, value)
    principal = answer.principal
    state = answer.state
    if principal is not None:
        ctx.authenticated("extauth", principal)
        if compiled.on_error.user_id_header is not None and not write_user_id(ctx, compiled, principal):
            return _unwritable(principal)
    if answer.claims is not None:
        ctx.claims, ctx.claims_provider = dict(answer.claims), answer.claims_provider
    name = compiled.first_name
    ctx.state["extauth"] = {"user": principal, "authConfig": compiled.auth_config,
                            "identities": {} if principal is None else {name: principal},
                            "state": {} if state is None else {name: state}}
    reason = answer.reason
    allow = _ALLOWS.get(reason)
    return allow if allow is not None else _allow(reason)


def write_user_id(ctx: RequestContext, compiled: CompiledExtAuth, principal: str) -> bool:
    """``Settings.spec.extauth.userIdHeader``: the principal on the admitted
    request (UTF-8), as Gloo's auth server sets ``UserInfo.UserID``; False
    when it holds a control character no header may carry."""
    header = compiled.on_error.user_id_header
    assert header is not None
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in principal):
        return False
    ctx.headers.setRawHeaders(header, [principal.encode("utf-8")])
    return True


def _unwritable(principal: str) -> Deny:
    # fail closed: admitted, the request would reach the rate limits and the upstream as nobody's
    return Deny(500, b"", (), b"", f"extauth: the user id {principal!r} cannot be written into"
                                   " Settings spec.extauth.userIdHeader (a control character)")


def _apply_all(ctx: RequestContext, compiled: CompiledExtAuth, admitted: list[tuple[int, AuthAllow]]) -> str | None:
    """Every admitting config's headers, identity and claims, in order; the
    first principal named."""
    headers = ctx.headers
    principal = None
    identities: dict[str, str] = {}
    claimed = False
    for index, answer in admitted:
        for name, value in answer.headers:
            if value is None:
                headers.removeHeader(name)
            else:
                headers.setRawHeaders(name, [value])
        for name, value in answer.response_headers:
            ctx.add_response_header(name, value)
        if answer.principal is not None:
            identities[compiled.entries[index].name] = answer.principal
            principal = answer.principal if principal is None else principal
        if answer.claims is not None and not claimed:
            ctx.claims, ctx.claims_provider, claimed = dict(answer.claims), answer.claims_provider, True
    _record(ctx, compiled, principal, identities)
    return principal


def _record(ctx: RequestContext, compiled: CompiledExtAuth, principal: str | None, identities: dict[str, str]) -> None:
    """``ctx.state["extauth"]``, keeping the state the configs shared on the way."""
    shared = ctx.state.get("extauth")
    state = shared["state"] if shared is not None and shared.get("authConfig") == compiled.auth_config else {}
    ctx.state["extauth"] = {"user": principal, "authConfig": compiled.auth_config, "identities": identities,
                            "state": state}


def share(ctx: RequestContext, compiled: CompiledExtAuth, index: int, answer: AuthAllow) -> None:
    """An admitting config's ``state``, visible at once to the configs that
    run after it in this check (Gloo's shared state), under
    ``ctx.state["extauth"]["state"][config name]``."""
    shared = ctx.state.get("extauth")
    if shared is None or shared.get("authConfig") != compiled.auth_config:
        shared = ctx.state["extauth"] = {"user": None, "authConfig": compiled.auth_config, "identities": {},
                                         "state": {}}
    shared["state"][compiled.entries[index].name] = answer.state


#: One Allow per reason (config types keep their admissions' reasons with
#: their cached answers), not one per request: reason -> Allow, at most
#: _ALLOWS_MAX (then emptied: a reason per user or per token cannot grow it
#: without bound). A dict read, cheaper than functools.lru_cache's bookkeeping.
_ALLOWS: dict[str, Allow] = {}
_ALLOWS_MAX = 1024


def _allow(reason: str) -> Allow:
    allow = _ALLOWS.get(reason)
    if allow is None:
        if len(_ALLOWS) >= _ALLOWS_MAX:
            _ALLOWS.clear()
        allow = _ALLOWS[reason] = Allow(reason)
    return allow
