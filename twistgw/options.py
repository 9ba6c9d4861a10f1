"""Helpers for validating a plugin's options in ``twistgw_compile_options``.

They raise :class:`twistgw.OptionsError` with the field path, so the
gateway reports file, line, resource and field like its own errors;
:class:`Problems` collects several so ``twistgw check`` lists them all::

    from twistgw.options import check_fields, require_mapping

    def twistgw_compile_options(options, scope):
        check_fields(options, ("header", "keysSecretRef"), ())
        ref = require_mapping(options.get("keysSecretRef"), ("keysSecretRef",), "keysSecretRef")
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterable, Iterator, Mapping

from twistgw.api.types import OptionsError

Path = tuple[str | int, ...]

__all__ = ["Path", "Problems", "check_fields", "require_mapping", "type_name", "unknown_field"]


def type_name(value: Any) -> str:
    """``a string``, ``an integer``, ``a list``, ``null``... for error messages."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


def unknown_field(key: Any, allowed: Iterable[str]) -> str:
    """The one wording of an unknown-field problem, shared by the core and
    the plugins: ``unknown field 'colour'; expected one of: name, options``."""
    return f"unknown field {str(key)!r}; expected one of: {', '.join(allowed)}"


def require_mapping(value: Any, path: Path, what: str = "this field") -> Mapping[str, Any]:
    """``value`` if it is a mapping, else OptionsError at ``path``."""
    if not isinstance(value, Mapping):
        raise OptionsError(path, f"{what} must be a mapping, got {type_name(value)}")
    return value


def check_fields(value: Mapping[str, Any], allowed: Iterable[str], path: Path) -> None:
    """OptionsError naming every key of ``value`` not in ``allowed``."""
    allowed = tuple(allowed)
    errors = [OptionsError(path + (str(key),), unknown_field(key, allowed))
              for key in value if key not in allowed]
    if errors:
        raise OptionsError.several(errors)


class Problems:
    """Collects a plugin's option problems so all of them are reported::

        problems = Problems()
        for name, raw in options["providers"].items():
            with problems.check():      # an OptionsError inside is kept, and
                compile_provider(raw)   # checking goes on with the next one
        problems.add(("mode",), "must be strict or lenient")
        problems.raise_if_any()         # one OptionsError carrying them all
    """

    def __init__(self) -> None:
        self.errors: list[OptionsError] = []

    def add(self, path: Path | str, reason: str) -> None:
        self.errors.append(OptionsError(path, reason))

    @contextlib.contextmanager
    def check(self) -> Iterator[None]:
        try:
            yield
        except OptionsError as exc:
            self.errors.extend(exc.problems)

    def __bool__(self) -> bool:
        return bool(self.errors)

    def raise_if_any(self) -> None:
        if self.errors:
            raise OptionsError.several(self.errors)
