"""The LDAP options' located field reader: problems at their field path
below the entry, collected so ``twistgw check`` lists every one.

(To be replaced by the core's public field reader.)
"""

from __future__ import annotations

from typing import Any, Mapping

from twistgw.options import Problems, parse_duration, type_name, unknown_field

from twistgw import OptionsError

_type_name = type_name


class FieldChecker:
    """Makes OptionsErrors located in the AuthConfig itself (its file, line
    and field, e.g. ``spec.configs[0].ldap.address``), and collects them in a
    :class:`twistgw.options.Problems`: each ``with c.checking():`` block
    records its first problem and the next block still runs, so
    ``twistgw check`` lists (and counts) every problem of an AuthConfig."""

    def __init__(self, resource: tuple[str, str, str] | None, base: tuple[str | int, ...] = ()) -> None:
        self.resource = resource
        self.base = base
        self.problems = Problems()
        self.checking = self.problems.check

    def raise_problems(self) -> None:
        """One OptionsError carrying everything recorded."""
        self.problems.raise_if_any()

    def fail(self, field: str | tuple[str | int, ...], reason: str) -> OptionsError:
        """The problem at ``field`` below this checker's base (``"pool.maxSize"``,
        ``"allowedGroups[0]"``, or a path tuple)."""
        return OptionsError(self.base + (_field_path(field) if isinstance(field, str) else field), reason,
                            self.resource)

    def record(self, field: str | tuple[str | int, ...], reason: str) -> None:
        self.problems.errors.append(self.fail(field, reason))

    def mapping(self, value: Any, field: str, allowed: set[str]) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(field, f"must be a mapping, got {_type_name(value)}")
        unknown = [self.fail(_field_path(field) + (str(key),), unknown_field(key, sorted(allowed)))
                   for key in value if key not in allowed]
        if unknown:
            raise OptionsError.several(unknown)
        return value

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str):
            raise self.fail(field, f"must be a string, got {_type_name(value)}")
        if not value.strip():
            raise self.fail(field, "must not be empty")
        return value

    def boolean(self, value: Any, field: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(field, f"must be true or false, got {value!r}")
        return value

    def integer(self, value: Any, field: str, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(field, f"must be an integer, got {_type_name(value)}")
        if not lo <= value <= hi:
            raise self.fail(field, f"must be between {lo} and {hi}, got {value}")
        return value

    def duration(self, value: Any, field: str, lo: float, hi: float) -> float:
        seconds = parse_duration(value)
        if seconds is None:
            raise self.fail(field, f"must be a duration such as '3s' or '500ms', got {value!r}")
        if not lo <= seconds <= hi:
            raise self.fail(field, f"must be between {lo:g}s and {hi:g}s, got {seconds:g}s")
        return seconds


def _field_path(field: str) -> tuple[str | int, ...]:
    """``"allowedGroups[0]"`` → ``("allowedGroups", 0)``; ``"pool.maxSize"`` → ``("pool", "maxSize")``."""
    out: list[str | int] = []
    for part in field.split(".") if field else ():
        name, *indexes = part.split("[")
        if name:
            out.append(name)
        out.extend(int(i.rstrip("]")) for i in indexes)
    return tuple(out)
