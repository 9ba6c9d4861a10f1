"""Full-match regular expressions with RE2, the engine Envoy and Gloo use.

Used by the core's route matchers (``regex`` paths, header and query
parameter values) and by the rbac plugin's REGEX_MATCH claims; public so a
third-party plugin can offer the same guarantee::

    from twistgw.regex import SafeRegex, UnsafePattern

Python's ``re`` backtracks: ``(a+)+$``, ``(a|a)*b`` or even ``.*.*.*.*x``
take exponential or high-polynomial time on a crafted claim. RE2 (the
``google-re2`` binding) never backtracks: its time is linear in the subject,
for subjects of any length, so a matcher never has to give up (and so never
fails open). The syntax is RE2's, exactly as in Gloo and Envoy
configurations: ``(?i)``, ``\\b`` and anchors anywhere are accepted;
backreferences and lookaround (which no linear-time engine can run) are
refused. ``\\d``, ``\\w`` and ``\\s`` are ASCII classes, as in RE2.

Linear is not free: the cost per character grows with the compiled
program's size, so, as Envoy does (``re2.max_program_size.error_level``,
default 100), a pattern whose **program size** is over a limit is refused at
configuration time (:data:`DEFAULT_MAX_PROGRAM_SIZE`; the core's limit is
``Settings.spec.gateway.regexMaxProgramSize``, like Gloo's
``gloo.regexMaxProgramSize``). RE2's own memory budget per pattern
(:data:`MAX_MEM`) bounds the compiled program and the DFA cache.
"""

from __future__ import annotations

from typing import Any, Mapping

import re2

__all__ = ["DEFAULT_MAX_PROGRAM_SIZE", "MAX_MEM", "RewriteRegex", "SafeRegex", "UnsafePattern", "max_program_size",
           "too_large"]

#: Envoy's default ``re2.max_program_size.error_level``.
DEFAULT_MAX_PROGRAM_SIZE = 100
#: RE2's memory budget per pattern, compiled program and DFA cache (RE2's
#: and Envoy's default): over it the DFA falls back to the NFA, still linear.
MAX_MEM = 8 << 20


class UnsafePattern(ValueError):
    """The pattern is invalid or too large; the message says why."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # the error is raised (and reported located), not logged
    options.max_mem = MAX_MEM
    return options


class SafeRegex:
    """A compiled pattern; :meth:`fullmatch` runs in time linear in the subject.

    :param max_program_size: refuse a pattern whose RE2 program is larger
        (None: only RE2's memory budget limits it; the caller checks
        :attr:`program_size` itself, as the configuration loader does
        against ``Settings``).
    """

    __slots__ = ("pattern", "program_size", "_fullmatch")

    def __init__(self, pattern: str, max_program_size: int | None = DEFAULT_MAX_PROGRAM_SIZE) -> None:
        if not isinstance(pattern, str):
            raise UnsafePattern("the pattern must be a string")
        try:
            # Compiled and matched as UTF-8 bytes: the binding's str path maps
            # every match offset back to characters (20 us a match, 6 us so).
            compiled = re2.compile(pattern.encode("utf-8", "surrogatepass"), _options())
        except re2.error as exc:
            reason = exc.args[0] if exc.args else exc
            if isinstance(reason, bytes):
                reason = reason.decode("utf-8", "replace")
            raise UnsafePattern(f"invalid regular expression: {reason}{_hint(str(reason))}") from None
        self.pattern = pattern
        #: RE2's estimate of the cost of the compiled pattern (Envoy's "program size")
        self.program_size: int = compiled.programsize
        if max_program_size is not None and self.program_size > max_program_size:
            raise UnsafePattern(too_large(self.program_size, max_program_size))
        self._fullmatch = compiled.fullmatch

    def fullmatch(self, subject: str) -> bool:
        """Whether the whole of ``subject`` matches (any length). A lone
        surrogate is passed as its (invalid UTF-8) bytes: never an error."""
        return self._fullmatch(subject.encode("utf-8", "surrogatepass")) is not None

    def __repr__(self) -> str:
        return f"SafeRegex({self.pattern!r})"


#: What RE2's terse errors mean for someone who wrote Python or PCRE syntax.
_HINTS = (
    ("invalid escape sequence: \\", "backreferences (\\1) are not RE2 syntax"),
    ("invalid perl operator: (?=", "lookahead/lookbehind assertions are not RE2 syntax"),
    ("invalid perl operator: (?!", "lookahead/lookbehind assertions are not RE2 syntax"),
    ("invalid perl operator: (?<", "lookahead/lookbehind assertions are not RE2 syntax"),
    ("invalid perl operator: (?P", "backreferences ((?P=name)) are not RE2 syntax"),
    ("invalid perl operator: (?(", "conditional groups are not RE2 syntax"),
    ("invalid perl operator: (?>", "atomic groups are not RE2 syntax"),
    ("bad repetition operator: *+", "possessive quantifiers are not RE2 syntax"),
    ("bad repetition operator: ++", "possessive quantifiers are not RE2 syntax"),
    ("invalid repetition size", "RE2 allows at most 1000 repetitions"),
)


def _hint(reason: str) -> str:
    for start, hint in _HINTS:
        if reason.startswith(start) and (start != _HINTS[0][0] or reason[-1:].isdigit()):
            return f" ({hint}: no linear-time engine runs them)" if "not RE2" in hint else f" ({hint})"
    return ""


def too_large(size: int, limit: int) -> str:
    """The one wording of a pattern over the program-size limit."""
    return (f"the pattern is too complex: its RE2 program size is {size}, over the limit of {limit}"
            " (as Envoy's re2.max_program_size; simplify it, e.g. fewer or smaller {n} repeats,"
            " or raise Settings spec.gateway.regexMaxProgramSize)")


def max_program_size(gateway_settings: Mapping[str, Any] | None) -> int:
    """The program-size limit set in ``Settings.spec.gateway`` (a plugin
    reads that section with ``scope.resources.settings("gateway")``), else
    :data:`DEFAULT_MAX_PROGRAM_SIZE`. The loader has checked the value."""
    value = gateway_settings.get("regexMaxProgramSize") if isinstance(gateway_settings, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_MAX_PROGRAM_SIZE


class RewriteRegex(SafeRegex):
    """A pattern that also substitutes: :meth:`sub` replaces every
    non-overlapping match (Envoy's ``regex_rewrite``, RE2's GlobalReplace),
    ``\\1`` in the substitution naming a capture group. Linear time too."""

    __slots__ = ("_sub",)

    def __init__(self, pattern: str, max_program_size: int | None = DEFAULT_MAX_PROGRAM_SIZE) -> None:
        super().__init__(pattern, max_program_size)
        self._sub = re2.compile(pattern, _options()).sub

    def sub(self, substitution: str, subject: str) -> str:
        """``subject`` with every match of the pattern replaced."""
        result: str = self._sub(substitution, subject)
        return result
