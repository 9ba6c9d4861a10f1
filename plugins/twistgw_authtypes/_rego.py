"""Rego policies on ``regopy`` (the Python binding of rego-cpp, the OPA
project's Rego interpreter in C++): the one module that touches it.

A :class:`Policy` is compiled once per configuration snapshot (the modules
parsed and checked, the query planned into a bundle) and evaluated per
request with a fresh ``input``. Two properties of the engine shape this:

* A call to a function the engine does not have (OPA's ``any()`` and
  ``all()``, removed in OPA 1.0, are the ones Gloo's guides use) parses and
  builds, and at run time makes the enclosing rule *undefined*: a policy
  that loads and then silently denies what its author allowed. So every
  function a module calls is checked when the policy compiles, and one the
  engine lacks refuses the configuration, naming the built-in and, for the
  OPA 0.x built-ins, their OPA 1.0 replacement.
* Built-in errors are made strict (a division by zero, a bad ``to_number``):
  they end the evaluation with an error, which the caller turns into a
  refusal, rather than an undefined that might be negated.

One form the engine does not parse is read all the same, because Gloo's
OPA guide writes it: a destructuring assignment at the top of a module,
``[header, payload, signature] := io.jwt.decode(input.state.jwt)``
(:func:`desugar`). It means what it would inside a rule body: each name is
a rule holding its element, defined when the value is an array of exactly
that length.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import re
import sys
import tempfile
from typing import Any, Callable, Iterator, Mapping, Sequence

import attrs
from regopy import Input, Interpreter

#: OPA 0.x built-ins that OPA 1.0 removed, with what replaces them.
REMOVED_BUILTINS: Mapping[str, str] = {
    "any": "membership, `x in {...}` (or `some x in s; x`)",
    "all": "`every x in s { x }`",
    "re_match": "regex.match",
    "set_diff": "the set difference operator, `s1 - s2`",
    "net.cidr_overlap": "net.cidr_contains",
    "cast_array": "a type check and a comprehension",
    "cast_set": "a set comprehension",
    "cast_string": "is_string",
    "cast_boolean": "is_boolean",
    "cast_null": "is_null",
    "cast_object": "is_object",
}

_KEYWORDS = frozenset({"not", "some", "every", "in", "if", "contains", "else", "with", "as", "default",
                       "package", "import", "set", "true", "false", "null"})
_STRINGS = re.compile(r'"(?:[^"\\\n]|\\.)*"|`[^`]*`')
_COMMENT = re.compile(r"#[^\n]*")
_CALL = re.compile(r"(?<![\w.\]])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*\(")
_IMPORT = re.compile(r"^\s*import\s+([\w.\[\]\"]+)(?:\s+as\s+(\w+))?", re.M)


#: A top-level ``[a, b, _] := expression`` on one line (names and ``_`` only).
_DESTRUCTURE = re.compile(r"^\[\s*((?:[A-Za-z_]\w*\s*,\s*)*[A-Za-z_]\w*)\s*\]\s*:=\s*(\S.*?)\s*$")


def _top_level_lines(text: str) -> list[bool]:
    """For each line of ``text``, whether it starts outside any brace,
    bracket, parenthesis, string or comment (a top-level statement)."""
    starts: list[bool] = []
    depth, quote, comment, escaped = 0, "", False, False
    at_line_start = True
    for ch in text + "\n":
        if at_line_start:
            starts.append(depth == 0 and not quote)
            at_line_start = False
        if ch == "\n":
            comment, at_line_start = False, True
            if quote == '"':
                quote = ""  # an unterminated string: the parser reports it
            continue
        if comment:
            continue
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"`":
            quote = ch
        elif ch == "#":
            comment = True
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth = max(0, depth - 1)
    return starts[:len(text.split("\n"))]


def _without_comment(line: str) -> str:
    """The line up to a ``#`` that is outside strings."""
    quote, escaped = "", False
    for i, ch in enumerate(line):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"`":
            quote = ch
        elif ch == "#":
            return line[:i]
    return line


def desugar(text: str) -> str:
    """The module with each top-level destructuring assignment written as
    rules the engine parses: line ``n``'s ``[a, b, _] := e`` becomes
    ``__twistgw_destructured_n := [..] if { [..] := e }`` on the same line
    (the lines keep their numbers) and ``a := __twistgw_destructured_n[0]``,
    ``b := ...[1]`` at the end."""
    lines = text.split("\n")
    tops = _top_level_lines(text)
    extra: list[str] = []
    for number, (line, top) in enumerate(zip(lines, tops, strict=False), 1):
        m = _DESTRUCTURE.match(_without_comment(line)) if top else None
        if m is None or not all(_top_level_lines(m.group(2) + "\n")[1:]):
            continue  # the expression must end on its own line
        names = [n.strip() for n in m.group(1).split(",")]
        fresh = f"__twistgw_destructured_{number}"
        parts = [f"{fresh}_{i}" for i in range(len(names))]
        pattern = "[" + ", ".join(parts) + "]"
        lines[number - 1] = f"{fresh} := {pattern} if {{ {pattern} := {m.group(2)} }}"
        extra += [f"{name} := {fresh}[{i}]" for i, name in enumerate(names) if name != "_"]
    return "\n".join(lines + extra) + ("\n" if extra else "")


class PolicyError(Exception):
    """A policy that cannot be compiled; the message says why, ``field``
    whether the ``modules`` or the ``query`` is at fault."""

    def __init__(self, message: str, field: str = "modules") -> None:
        super().__init__(message)
        self.field = field


def code_only(text: str) -> str:
    """The module with its strings emptied and its comments removed."""
    text = _STRINGS.sub('""', text)
    return _COMMENT.sub("", text)


def _defined(code: str, name: str) -> bool:
    """Whether ``code`` defines a function (or rule with arguments) ``name``."""
    head = re.compile(r"^\s*" + re.escape(name) + r"\s*\([^()]*\)\s*(?:\{|:=|=(?!=)|if\b|contains\b)", re.M)
    return head.search(code) is not None


def missing_functions(modules: Sequence[tuple[str, str]], engine: Interpreter) -> list[tuple[str, str]]:
    """(module id, function name) for each function the modules call that is
    neither a built-in of the engine nor defined in the modules."""
    codes = [(mid, code_only(text)) for mid, text in modules]
    aliases = set()
    for _, code in codes:
        for m in _IMPORT.finditer(code):
            aliases.add(m.group(2) or m.group(1).split(".")[-1])
    found: list[tuple[str, str]] = []
    for mid, code in codes:
        for m in _CALL.finditer(code):
            name = m.group(1)
            first = name.split(".")[0]
            if first in _KEYWORDS or first in ("data", "input") or first in aliases:
                continue
            if engine.is_builtin(name) or any(_defined(other, name) for _, other in codes):
                continue
            if (mid, name) not in found:
                found.append((mid, name))
    return found


def explain_missing(mid: str, name: str) -> str:
    why = f"module {mid} calls {name}(), which the Rego engine (regopy) does not have"
    if name in REMOVED_BUILTINS:
        why += f": it is an OPA 0.x built-in removed in OPA 1.0; use {REMOVED_BUILTINS[name]} instead"
    return why


# -- the parser's report ------------------------------------------------------
#
# rego-cpp prints its report of a module or query that does not parse
# ("Errors: / this is unclosed / -- policy.rego:2:7 / ...") on the process's
# standard output, through C++'s streams, besides raising it (as an
# S-expression) in RegoError. Unheld, it lands in the gateway's log, or in the
# middle of a test run's output; so it is captured while a policy compiles
# and read for the column the located message gives.

_REPORT = re.compile(r"^Errors:\n(?P<message>[^\n]+)\n-- [^\n]*:(?P<line>\d+):(?P<column>\d+)\n")
_libc: Any = None


def _flush_c_streams() -> None:
    """``fflush(NULL)``: what the C++ library wrote is in the file now."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None)
        _libc.fflush(None)
    except (OSError, AttributeError):  # no C library to ask: nothing buffered there to lose
        pass


@contextlib.contextmanager
def _output_captured() -> Iterator[list[bytes]]:
    """Descriptors 1 and 2 into a temporary file for the block; its bytes in
    the yielded list afterwards."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    captured: list[bytes] = []
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 1)
        os.dup2(held.fileno(), 2)
        try:
            yield captured
        finally:
            _flush_c_streams()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            held.seek(0)
            captured.append(held.read())


def _reports_captured(compile: Callable[..., "Policy"]) -> Callable[..., "Policy"]:
    """``Policy.compile`` with the parser's report held back: a refusal says
    where (line and column) in its located message instead; anything else
    written meanwhile is passed on to standard output as it was meant."""

    @functools.wraps(compile)
    def compiling(cls: type, modules: Sequence[tuple[str, str]], query: str) -> "Policy":
        refused: PolicyError | None = None
        with _output_captured() as captured:
            try:
                policy = compile(cls, modules, query)
            except PolicyError as exc:
                refused = exc
        text = captured[0].decode("utf-8", "replace")
        if text and not text.startswith("Errors:"):
            os.write(1, captured[0])
        if refused is not None:
            raise _with_column(refused, text) from None
        return policy

    return compiling


def _with_column(error: PolicyError, report: str) -> PolicyError:
    """``... this is unclosed at line 2`` → ``... at line 2, column 7`` from
    the report's first location, when it is the same place."""
    m = _REPORT.match(report)
    if m is None:
        return error
    at = f"{m.group('message').strip()} at line {m.group('line')}"
    message = str(error)
    if at not in message:
        return error
    return PolicyError(message.replace(at, f"{at}, column {m.group('column')}", 1), error.field)


@attrs.frozen
class Outcome:
    allowed: bool
    reason: str
    error: bool = False


@attrs.define(eq=False)
class Policy:
    """Modules and a query, compiled; :meth:`evaluate` per request."""

    query: str
    module_ids: tuple[str, ...]
    _bundle: Any  # regopy.Bundle (untyped library)
    _run: Interpreter

    @classmethod
    @_reports_captured
    def compile(cls, modules: Sequence[tuple[str, str]], query: str) -> "Policy":
        builder = Interpreter()
        for mid, text in modules:
            try:
                builder.add_module(mid, desugar(text))
            except Exception as exc:  # regopy raises its RegoError with the parser's report
                raise PolicyError(f"module {mid} does not parse: {_parse_report(exc, text)}") from None
        missing = missing_functions(modules, builder)
        if missing:
            raise PolicyError("; ".join(explain_missing(mid, name) for mid, name in missing))
        try:
            bundle = builder.build(query, [])
        except Exception as exc:
            raise PolicyError(f"the query {query!r} does not compile: {_parse_report(exc, query)}",
                              "query") from None
        run = Interpreter()
        run.strict_built_in_errors = True
        return cls(query, tuple(mid for mid, _ in modules), bundle, run)

    def evaluate(self, document: Mapping[str, Any]) -> Outcome:
        """Gloo's rule: the first expression of the result must be ``true``,
        or an array whose first element is ``true``; anything else (false,
        undefined, another value) denies, and an error denies."""
        try:
            self._run.set_input(Input(document))
            output = self._run.query_bundle(self._bundle)
            text = str(output) if output.ok() else None
        except Exception as exc:  # an evaluation error of any kind fails closed
            return Outcome(False, f"policy error: {_first_line(exc)}", error=True)
        if text is None:
            return Outcome(False, "policy error (a built-in failed)", error=True)
        if text == "undefined":
            return Outcome(False, f"{self.query} is undefined")
        try:
            expressions = json.loads(text).get("expressions") or [None]
        except (ValueError, AttributeError):
            return Outcome(False, "policy error: unreadable result", error=True)
        value = expressions[0]
        if isinstance(value, list) and value:
            value = value[0]
        if value is True:
            return Outcome(True, f"{self.query} is true")
        return Outcome(False, f"{self.query} is {json.dumps(value)[:80]}")


_ERROR = re.compile(r"\(error \d+:[^|]*\|(\d+)\|\d+\s*\(errormsg \d+:([^)]*)\)")


def _parse_report(exc: BaseException, text: str) -> str:
    """The parser's first message and line from regopy's S-expression report."""
    m = _ERROR.search(str(exc))
    if m is None:
        return _first_line(exc)
    line = text.count("\n", 0, int(m.group(1))) + 1
    return f"{m.group(2).strip()} at line {line}"


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300]
