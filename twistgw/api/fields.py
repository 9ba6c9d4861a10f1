"""The located field reader: one way to read a configuration shape and report
what is wrong with it, shared by the core and every plugin.

A :class:`FieldReader` checks one value at a time (``mapping``, ``string``,
``integer``, ``sequence``...) at a **field path** (``("spec", "routes", 0,
"matchers")``), records each problem it finds with that path, and goes on,
so ``twistgw check`` lists every problem of a configuration at once. Where
a problem goes is the reader's *sink*:

* the configuration loader (``twistgw.config``) turns each problem into a
  :class:`~twistgw.config.errors.ConfigIssue` with file, line, resource and
  field;
* a plugin uses :class:`sdk.Problems` (a ``FieldReader`` whose
  sink collects :class:`~twistgw.api.types.OptionsError` s); the core then
  locates them below the plugin's options key, in the same format.

Reading a part::

    r = Problems()
    with r.part():                                  # a problem inside is recorded,
        m = r.mapping(raw, ("ldap",), {"address", "userDnTemplate"},
                      required=("address",))        # and reading goes on after the block
        address = r.string(m["address"], ("ldap", "address"))
    r.raise_if_any()

A check that fails records its problem and raises :meth:`FieldReader.fail`'s
exception, which ends the innermost :meth:`FieldReader.part`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator, Mapping

__all__ = ["FieldReader", "Invalid", "Path", "type_name", "unknown_field"]

#: A field path: mapping keys and list indexes from the top of a resource
#: (or of a plugin's options), e.g. ``("spec", "virtualHost", "routes", 0)``.
Path = tuple[str | int, ...]


def type_name(value: object) -> str:
    """``a string``, ``an integer``, ``a list``, ``null``... for error messages."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


def unknown_field(key: object, allowed: Iterable[str]) -> str:
    """The one wording of an unknown-field problem, shared by the core and
    the plugins: ``unknown field 'colour'; expected one of: name, options``."""
    return f"unknown field {str(key)!r}; expected one of: {', '.join(allowed)}"


class Invalid(Exception):
    """Give up on the current part: its problems are already recorded."""


class FieldReader:
    """Typed checks of configuration values that record located problems.

    :param report: ``report(path, reason)`` receives each problem.

    Every check takes the value and its path; it returns the value (typed)
    or records the problem and raises the exception :meth:`fail` makes.
    Values from YAML are ``Any`` by nature: the checks are what narrows them.
    """

    def __init__(self, report: Callable[[Path, str], None]) -> None:
        self._report = report
        self._count = 0

    # -- recording ----------------------------------------------------------

    def issue(self, path: Path, reason: str) -> None:
        """Record a problem at ``path`` and go on."""
        self._count += 1
        self._report(tuple(path), reason)

    def fail(self, path: Path, reason: str) -> Exception:
        """Record a problem and return the exception that gives up on the
        current part: ``raise r.fail(path, "must start with '/'")``."""
        self.issue(path, reason)
        return self.invalid()

    def invalid(self) -> Exception:
        """The exception that gives up on the current part, whose problems
        are recorded already."""
        return Invalid()

    def count(self) -> int:
        """Problems recorded so far (compare before and after a part)."""
        return self._count

    @contextlib.contextmanager
    def part(self) -> Iterator[None]:
        """Check one independent part: a problem in it is recorded and
        checking goes on after the block, so every problem is reported."""
        try:
            yield
        except Invalid:
            pass

    # -- checks -------------------------------------------------------------

    def mapping(self, value: Any, path: Path, allowed: Iterable[str] | None = None,
                required: tuple[str, ...] = ()) -> dict[str, Any]:
        """A mapping with string keys; records every unknown and every
        missing field, and gives up only when it is not a mapping or misses
        a required field."""
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be a mapping, got {type_name(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.fail(path, f"keys must be strings, got {key!r}")
        if allowed is not None:
            known = frozenset(allowed)
            for key in value:
                if key not in known:
                    self.issue(path + (key,), unknown_field(key, sorted(known)))
        missing = [key for key in required if key not in value]
        for key in missing:
            self.issue(path + (key,), "is required")
        if missing:
            raise self.invalid()
        return dict(value) if not isinstance(value, dict) else value

    def boolean(self, value: Any, path: Path) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"must be true or false, got {type_name(value)}")
        return value

    def string(self, value: Any, path: Path, nonempty: bool = True) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, got {type_name(value)}")
        if nonempty and not value:
            raise self.fail(path, "must not be empty")
        return value

    def integer(self, value: Any, path: Path, lo: int | None = None, hi: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, got {type_name(value)}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise self.fail(path, f"must be between {lo} and {hi}, got {value}")
        return value

    def port(self, value: Any, path: Path) -> int:
        """A TCP port, 1 to 65535."""
        return self.integer(value, path, 1, 65535)

    def sequence(self, value: Any, path: Path, nonempty: bool = False) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, got {type_name(value)}")
        if nonempty and not value:
            raise self.fail(path, "must not be empty")
        return value

    def choice(self, value: Any, path: Path, choices: Iterable[str], what: str = "value") -> str:
        """A string that is one of ``choices``."""
        text = self.string(value, path)
        options = tuple(choices)
        if text not in options:
            raise self.fail(path, f"unknown {what} {text!r} (expected one of: {', '.join(options)})")
        return text

    def labels(self, value: Any, path: Path) -> dict[str, str]:
        """A string → string mapping (Kubernetes labels, a subset's
        values); null reads as empty."""
        m = self.mapping(value or {}, path)
        for key, v in m.items():
            self.string(v, path + (key,), nonempty=False)
        return dict(m)
