"""Gloo's ``booleanExpr``: named configs of one AuthConfig combined with
``&&``, ``||``, ``!`` and parentheses, e.g. ``managers || (staff && !contractors)``.

Pure parsing (done when the configuration loads) and a small evaluator:
left to right, ``!`` binds tighter than ``&&``, which binds tighter than
``||``, with short-circuiting, so a config whose answer cannot change the
result is never asked.
"""

from __future__ import annotations

import re
from typing import Any, Awaitable, Callable, Union

import attrs
from twistgw import Allow, Deny

#: A config name as Gloo writes them (``ldap-managers``, ``config_0``, ``basic1``).
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_TOKEN = re.compile(r"\s*(?:(&&|\|\||!|\(|\))|([A-Za-z_][A-Za-z0-9_.-]*))")
MAX_LENGTH = 4096


@attrs.frozen
class Ref:
    index: int


@attrs.frozen
class Not:
    operand: "Node"


@attrs.frozen
class And:
    left: "Node"
    right: "Node"


@attrs.frozen
class Or:
    left: "Node"
    right: "Node"


Node = Union[Ref, Not, And, Or]


class ExprError(ValueError):
    pass


def parse(text: str, names: dict[str, int]) -> Node:
    """The expression as a tree of config indexes.

    :param names: config name → index in ``spec.configs``.
    :raise ExprError: with a reason a person can act on.
    """
    if len(text) > MAX_LENGTH:
        raise ExprError(f"is longer than {MAX_LENGTH} characters")
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ExprError(f"unexpected {text[pos:].strip()[:20]!r} at character {pos + 1}"
                            " (use config names, &&, ||, ! and parentheses)")
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
    if not tokens:
        raise ExprError("is empty")
    parser = _Parser(tokens, names)
    node = parser.disjunction(0)
    if parser.i != len(tokens):
        raise ExprError(f"unexpected {tokens[parser.i]!r} after a complete expression")
    return node


class _Parser:
    def __init__(self, tokens: list[str], names: dict[str, int]) -> None:
        self.tokens = tokens
        self.names = names
        self.i = 0

    def _peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def disjunction(self, depth: int) -> Node:
        return self._left_to_right(depth, "||", Or, self.conjunction)

    def conjunction(self, depth: int) -> Node:
        return self._left_to_right(depth, "&&", And, self.unary)

    def _left_to_right(self, depth: int, op: str, make: Callable[[Node, Node], Node],
                       operand: Callable[[int], Node]) -> Node:
        node = operand(depth)
        while self._peek() == op:
            self.i += 1
            node = make(node, operand(depth))
        return node

    def unary(self, depth: int) -> Node:
        if depth > 50:
            raise ExprError("is nested too deeply")
        token = self._peek()
        if token is None:
            raise ExprError("ends where a config name, ! or ( is expected")
        self.i += 1
        if token == "!":
            return Not(self.unary(depth + 1))
        if token == "(":
            node = self.disjunction(depth + 1)
            if self._peek() != ")":
                raise ExprError("has a '(' without its ')'")
            self.i += 1
            return node
        if token in ("&&", "||", ")"):
            raise ExprError(f"has {token!r} where a config name, ! or ( is expected")
        if token not in self.names:
            raise ExprError(f"names {token!r}, which is not a config of this AuthConfig"
                            f" (names: {', '.join(sorted(self.names))})")
        return Ref(self.names[token])


def references(node: Node) -> set[int]:
    if isinstance(node, Ref):
        return {node.index}
    if isinstance(node, Not):
        return references(node.operand)
    return references(node.left) | references(node.right)


class Abort(Exception):
    """A config ended in an error (not a decision): the evaluation stops."""

    def __init__(self, result: Any) -> None:
        super().__init__(result)
        self.result = result


async def evaluate(node: Node, check: Callable[[int], Awaitable[tuple[bool, Any]]]) -> bool:
    """``check(index)`` → (admitted, its refusal or None); it raises
    :class:`Abort` for an error, which ends the evaluation."""
    if isinstance(node, Ref):
        return (await check(node.index))[0]
    if isinstance(node, Not):
        return not await evaluate(node.operand, check)
    if isinstance(node, And):
        return await evaluate(node.left, check) and await evaluate(node.right, check)
    return await evaluate(node.left, check) or await evaluate(node.right, check)


# ---------------------------------------------------------------------------
# The extauth check of an AuthConfig with a booleanExpr
# ---------------------------------------------------------------------------


async def check_expression(ctx: Any, compiled: Any) -> Any:
    """Evaluate ``compiled.expression`` over its LDAP configs for this request.

    Each config asked is a full LDAP check (bind, group search, its decision
    cache). Its 401/403 is "false"; an error (5xx: the directory, the service
    account) stops the evaluation and is the answer, so a failing directory
    never makes ``!config`` true. When the expression is false the answer is
    the last refusal seen (or 403 when a ``!`` made it false).
    """
    from twistgw_ldap import _flow

    creds = _flow.credentials(ctx, compiled.configs[0].realm)
    refusals: list[Any] = []
    admissions: list[Any] = []  # the verdicts of the configs that admitted (their headers apply)

    async def check(index: int) -> tuple[bool, Any]:
        if isinstance(creds, tuple):
            result = await _flow.check_one(compiled.state, compiled.configs[index], ctx, *creds)
        else:
            result = creds  # no usable credentials: every config refuses (401)
        if not isinstance(result, Deny):
            admissions.append(result)
            return True, None
        if result.status >= 500:
            raise Abort(result)
        refusals.append(result)
        return False, result

    try:
        admitted = await evaluate(compiled.expression, check)
    except Abort as abort:
        return abort.result
    if not admitted:
        return refusals[-1] if refusals else _flow.forbidden(
            f"AuthConfig {compiled.auth_config}: booleanExpr is false")
    if isinstance(creds, tuple):
        return _flow._admit(ctx, compiled, creds[0], admissions, False)
    return Allow(f"LDAP: AuthConfig {compiled.auth_config} booleanExpr is true without credentials")
