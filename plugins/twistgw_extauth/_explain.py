"""``twistgw explain`` without ``--live``: each config's dry-run verdict
(``checker.dry_run(ctx)``, which contacts nothing), combined as the real
check would combine them, and every verdict shown when the answer is not
certain."""

from __future__ import annotations

from typing import Any

from twistgw import Allow, AuthAllow, AuthDeny, Deny, NotChecked, RequestContext
from twistgw_extauth._expr import value
from twistgw_extauth._flow import admit
from twistgw_extauth._options import CompiledExtAuth, Entry

Verdict = AuthAllow | AuthDeny | NotChecked


def _verdict(entry: Entry, ctx: RequestContext) -> Verdict:
    dry_run = getattr(entry.checker, "dry_run", None)
    if dry_run is None:
        return NotChecked(f"{entry.source} would be checked by its {entry.type_name} config type"
                          " (it has no dry run; --live runs it)")
    answer = dry_run(ctx)
    if not isinstance(answer, (AuthAllow, AuthDeny, NotChecked)):
        raise TypeError(f"{entry.source}: dry_run() must give AuthAllow, AuthDeny or NotChecked, got {answer!r}")
    return answer


def _show(entry: Entry, verdict: Verdict, named: bool) -> str:
    if isinstance(verdict, NotChecked):
        text = verdict.reason
    elif isinstance(verdict, AuthAllow):
        text = f"{entry.source}: ALLOW ({verdict.reason})"
    else:
        text = f"{entry.source}: DENY {verdict.status} ({verdict.reason})"
    return f"{entry.name}: {text}" if named else text


def _deny(deny: AuthDeny) -> Deny:
    return Deny(deny.status, deny.body, deny.headers, deny.content_type, deny.reason)


def dry_run(ctx: RequestContext, compiled: CompiledExtAuth) -> Any:
    """An Allow or Deny when the configs' dry runs settle it, else NotChecked
    listing each config's verdict."""
    if compiled.expression is not None:
        return _expression(ctx, compiled)
    verdicts: list[tuple[Entry, Verdict]] = []
    for entry in compiled.entries:
        verdict = _verdict(entry, ctx)
        if isinstance(verdict, AuthDeny) and all(isinstance(v, AuthAllow) for _, v in verdicts):
            return _deny(verdict)  # the check ends here whatever the others say
        verdicts.append((entry, verdict))
    allowed = [(i, v) for i, (_, v) in enumerate(verdicts) if isinstance(v, AuthAllow)]
    if len(allowed) == len(verdicts):
        return admit(ctx, compiled, allowed, None)
    return NotChecked("; then ".join(_show(e, v, False) for e, v in verdicts),
                      _if_admitted(compiled, verdicts))


def _if_admitted(compiled: CompiledExtAuth, verdicts: list[tuple[Entry, Verdict]]
                 ) -> tuple[tuple[bytes, bytes | None], ...]:
    """The forwarded request's header edits if the AuthConfig admits: its
    consumed credentials removed (what :func:`admit` does on every
    admission, whichever config type consumed them), then each admitting or
    unchecked config's own, in order."""
    edits: list[tuple[bytes, bytes | None]] = [(name, None) for name in compiled.credential_headers]
    for _, verdict in verdicts:
        if not isinstance(verdict, AuthDeny):
            edits += verdict.headers
    return tuple(edits)


def _expression(ctx: RequestContext, compiled: CompiledExtAuth) -> Allow | Deny | NotChecked:
    assert compiled.expression is not None
    verdicts = [(entry, _verdict(entry, ctx)) for entry in compiled.entries]

    def known(index: int) -> bool | None:
        verdict = verdicts[index][1]
        return None if isinstance(verdict, NotChecked) or (isinstance(verdict, AuthDeny) and verdict.error) \
            else isinstance(verdict, AuthAllow)

    result = value(compiled.expression, known)  # settled whatever the unknown configs would say
    if result is True:
        allowed = [(i, v) for i, (_, v) in enumerate(verdicts) if isinstance(v, AuthAllow)]
        refused = next((v.principal for _, v in verdicts if isinstance(v, AuthDeny) and v.principal), None)
        return admit(ctx, compiled, allowed, refused)
    refusals = [v for _, v in verdicts if isinstance(v, AuthDeny)]
    if result is False and refusals:
        return _deny(refusals[-1])
    shown = "; ".join(_show(e, v, True) for e, v in verdicts)
    outcome = {True: "true", False: "false", None: "not known without the network"}[result]
    return NotChecked(f"AuthConfig {compiled.auth_config} booleanExpr {compiled.expression_text!r} is"
                      f" {outcome}: {shown}", _if_admitted(compiled, verdicts))
