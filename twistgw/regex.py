"""Linear-time full-match regular expressions (pure, no I/O).

Used by the core's route matchers (``regex`` paths, header and query
parameter values) and by the rbac plugin's REGEX_MATCH claims; public so a
third-party plugin can offer the same guarantee::

    from twistgw.regex import SafeRegex, UnsafePattern

Python's ``re`` backtracks: ``(a+)+$``, ``(a|a)*b`` or even ``.*.*.*.*x``
take exponential or high-polynomial time on a crafted claim. Envoy and Gloo
use RE2, which never backtracks. We get the same guarantee without a native
dependency:

* the pattern is parsed with Python's own regex parser (so the syntax and the
  set of strings a pattern accepts are exactly Python's);
* everything that is not a regular language, or that RE2 refuses, is rejected
  at configuration time: backreferences, lookahead/lookbehind, conditionals,
  atomic groups, possessive quantifiers, inline flags, ``\\b``/``\\B`` and
  anchors anywhere but the very start (``^``/``\\A``) or end (``$``/``\\Z``);
* the rest becomes a Thompson NFA, simulated as a lazily built DFA whose
  transitions are memoised: one dictionary lookup per character of the claim
  once warm, never more than ``O(len(claim) * states)`` work when cold.

Limits (all refused at configuration time, with the reason): pattern length
1,000 characters, NFA size 5,000 states (``{m,n}`` repeats are expanded).
At request time a subject (claim, path, header value) longer than
:data:`MAX_SUBJECT` characters does not match.
"""

from __future__ import annotations

import re
from typing import Any, Callable

try:  # Python 3.11+
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

MAX_PATTERN = 1000
MAX_STATES = 5000
#: subjects longer than this never match (a claim, a path, a header value).
MAX_SUBJECT = 4096
#: memoised DFA transitions per pattern before the cache is dropped.
MAX_CACHE = 20000


class UnsafePattern(ValueError):
    """The pattern is invalid or outside the safe subset; the message says why."""


_CATEGORY_RE = {
    _c.CATEGORY_DIGIT: re.compile(r"\d"),
    _c.CATEGORY_NOT_DIGIT: re.compile(r"\D"),
    _c.CATEGORY_SPACE: re.compile(r"\s"),
    _c.CATEGORY_NOT_SPACE: re.compile(r"\S"),
    _c.CATEGORY_WORD: re.compile(r"\w"),
    _c.CATEGORY_NOT_WORD: re.compile(r"\W"),
}

_REFUSED = {
    "GROUPREF": "backreferences (\\1, (?P=name)) are not allowed",
    "GROUPREF_EXISTS": "conditional groups (?(1)...) are not allowed",
    "ASSERT": "lookahead/lookbehind assertions are not allowed",
    "ASSERT_NOT": "negative lookahead/lookbehind assertions are not allowed",
    "ATOMIC_GROUP": "atomic groups (?>...) are not allowed",
    "POSSESSIVE_REPEAT": "possessive quantifiers (*+, ++, ?+) are not allowed",
}

Pred = Callable[[str], bool]


def _in_predicate(items: list[tuple[Any, Any]]) -> Pred:
    negate = False
    chars: set[str] = set()
    ranges: list[tuple[int, int]] = []
    cats: list[re.Pattern[str]] = []
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            chars.add(chr(av))
        elif name == "RANGE":
            ranges.append((av[0], av[1]))
        elif name == "CATEGORY" and av in _CATEGORY_RE:
            cats.append(_CATEGORY_RE[av])
        else:
            raise UnsafePattern(f"unsupported item in a character class: {name}")

    def pred(ch: str) -> bool:
        hit = (
            ch in chars
            or any(lo <= ord(ch) <= hi for lo, hi in ranges)
            or any(c.fullmatch(ch) for c in cats)
        )
        return hit != negate

    return pred


class _Builder:
    """Thompson construction: states with epsilon edges and at most one
    character edge each."""

    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.edge: list[tuple[int, int] | None] = []
        self.preds: list[Pred] = []

    def new(self) -> int:
        if len(self.eps) >= MAX_STATES:
            raise UnsafePattern(
                f"the pattern is too large (over {MAX_STATES} automaton states;"
                " large {m,n} repeats are expanded)")
        self.eps.append([])
        self.edge.append(None)
        return len(self.eps) - 1

    def atom(self, start: int, pred: Pred) -> int:
        self.preds.append(pred)
        s, e = self.new(), self.new()
        self.eps[start].append(s)
        self.edge[s] = (len(self.preds) - 1, e)
        return e

    def seq(self, nodes: Any, start: int) -> int:
        cur = start
        for op, av in nodes:
            cur = self.node(op, av, cur)
        return cur

    def node(self, op: Any, av: Any, cur: int) -> int:
        name = str(op)
        if name in _REFUSED:
            raise UnsafePattern(_REFUSED[name])
        if name == "LITERAL":
            ch = chr(av)
            return self.atom(cur, lambda c, ch=ch: c == ch)
        if name == "NOT_LITERAL":
            ch = chr(av)
            return self.atom(cur, lambda c, ch=ch: c != ch)
        if name == "ANY":
            return self.atom(cur, lambda c: c != "\n")
        if name == "IN":
            return self.atom(cur, _in_predicate(av))
        if name == "SUBPATTERN":
            _group, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                raise UnsafePattern("inline flags such as (?i:...) are not allowed")
            return self.seq(sub, cur)
        if name == "BRANCH":
            end = self.new()
            for alt in av[1]:
                a = self.new()
                self.eps[cur].append(a)
                self.eps[self.seq(alt, a)].append(end)
            return end
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            lo, hi, sub = av
            for _ in range(lo):
                cur = self.seq(sub, cur)
            if hi == _c.MAXREPEAT:
                loop = self.new()
                self.eps[cur].append(loop)
                self.eps[self.seq(sub, loop)].append(loop)
                return loop
            end = self.new()
            for _ in range(hi - lo):
                self.eps[cur].append(end)
                cur = self.seq(sub, cur)
            self.eps[cur].append(end)
            return end
        if name == "AT":
            raise UnsafePattern(
                "anchors and word boundaries (^ $ \\A \\Z \\b \\B) are only allowed"
                " at the very start (^, \\A) or end ($, \\Z); the whole claim must"
                " match anyway")
        raise UnsafePattern(f"unsupported regular expression construct: {name}")


class SafeRegex:
    """A compiled pattern; :meth:`fullmatch` runs in time linear in the subject."""

    def __init__(self, pattern: str) -> None:
        if not isinstance(pattern, str):
            raise UnsafePattern("the pattern must be a string")
        if len(pattern) > MAX_PATTERN:
            raise UnsafePattern(f"the pattern is longer than {MAX_PATTERN} characters")
        try:
            re.compile(pattern)
            parsed = _sre_parse.parse(pattern)
        except re.error as exc:
            raise UnsafePattern(f"invalid regular expression: {exc}") from None
        if parsed.state.flags & ~_c.SRE_FLAG_UNICODE:
            raise UnsafePattern("inline flags such as (?i) are not allowed")
        nodes = list(parsed)
        if nodes and str(nodes[0][0]) == "AT" and str(nodes[0][1]) in (
                "AT_BEGINNING", "AT_BEGINNING_STRING"):
            nodes = nodes[1:]
        if nodes and str(nodes[-1][0]) == "AT" and str(nodes[-1][1]) in (
                "AT_END", "AT_END_STRING"):
            # Dropping a final ``$`` keeps the language: under full match ``$``
            # can only sit at the end of the subject.
            nodes = nodes[:-1]
        b = _Builder()
        start = b.new()
        self._accept = b.seq(nodes, start)
        self.pattern = pattern
        self._eps = b.eps
        self._edge = b.edge
        self._preds = b.preds
        self._ids: dict[frozenset[int], int] = {}
        self._sets: list[frozenset[int]] = []
        self._accepting: list[bool] = []
        self._moves: dict[tuple[int, str], int] = {}
        self._start_set = self._closure([start])
        self._start = self._intern(self._start_set)

    def _closure(self, states: list[int]) -> frozenset[int]:
        seen = set(states)
        stack = list(states)
        while stack:
            for n in self._eps[stack.pop()]:
                if n not in seen:
                    seen.add(n)
                    stack.append(n)
        return frozenset(seen)

    def _intern(self, states: frozenset[int]) -> int:
        found = self._ids.get(states)
        if found is None:
            found = self._ids[states] = len(self._sets)
            self._sets.append(states)
            self._accepting.append(self._accept in states)
        return found

    def _step(self, state: int, ch: str) -> int:
        targets = []
        for s in self._sets[state]:
            edge = self._edge[s]
            if edge is not None and self._preds[edge[0]](ch):
                targets.append(edge[1])
        return self._intern(self._closure(targets))

    def _reset(self) -> None:
        self._ids = {}
        self._sets = []
        self._accepting = []
        self._moves = {}
        self._start = self._intern(self._start_set)

    def fullmatch(self, subject: str) -> bool:
        """Whether the whole of ``subject`` matches (False when too long)."""
        if len(subject) > MAX_SUBJECT:
            return False
        moves = self._moves
        state = self._start
        for ch in subject:
            nxt = moves.get((state, ch))
            if nxt is None:
                if len(moves) >= MAX_CACHE or len(self._sets) >= MAX_CACHE:
                    current = self._sets[state]
                    self._reset()
                    moves = self._moves
                    state = self._intern(current)
                nxt = moves[(state, ch)] = self._step(state, ch)
            state = nxt
            if not self._sets[state]:
                return False
        return self._accepting[state]

    def __repr__(self) -> str:
        return f"SafeRegex({self.pattern!r})"
