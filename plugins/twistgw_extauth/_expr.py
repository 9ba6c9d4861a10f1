"""Gloo's ``booleanExpr``: named configs of one AuthConfig combined with
``&&``, ``||``, ``!`` and parentheses, e.g. ``managers || (staff && !contractors)``.

Pure parsing, done when the configuration loads: ``!`` binds tighter than
``&&``, which binds tighter than ``||``; both are read left to right. The
evaluation (short-circuiting, so a config whose answer cannot change the
result is never asked) is in :mod:`twistgw_extauth._flow`.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, Union

import attrs

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


def parse(text: str, names: Mapping[str, int]) -> Node:
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
    def __init__(self, tokens: list[str], names: Mapping[str, int]) -> None:
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


def value(node: Node, known: Callable[[int], bool | None]) -> bool | None:
    """The expression's value when each config's is ``known(index)``
    (True, False, or None for "not known"): Kleene's three-valued logic, so
    ``a || b`` is True when a is, whatever b is."""
    if isinstance(node, Ref):
        return known(node.index)
    if isinstance(node, Not):
        inner = value(node.operand, known)
        return None if inner is None else not inner
    left, right = value(node.left, known), value(node.right, known)
    if isinstance(node, And):
        if left is False or right is False:
            return False
        return None if left is None or right is None else True
    if left is True or right is True:
        return True
    return None if left is None or right is None else False


def admits_with_no_config_admitting(node: Node) -> bool:
    """Whether the expression is true when every config refuses (``!staff``,
    ``a || !b``): a request no config authenticated can then pass."""
    return value(node, lambda _index: False) is True
