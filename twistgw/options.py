"""Helpers for validating a plugin's options in ``twistgw_compile_options``.

They raise :class:`twistgw.OptionsError` with the field path, so the
gateway reports file, line, resource and field like its own errors::

    from twistgw.options import check_fields, require_mapping

    def twistgw_compile_options(options, scope):
        check_fields(options, ("header", "keysSecretRef"), ())
        ref = require_mapping(options.get("keysSecretRef"), ("keysSecretRef",), "keysSecretRef")
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from twistgw.api.types import OptionsError

Path = tuple[str | int, ...]

__all__ = ["Path", "check_fields", "require_mapping", "type_name"]


def type_name(value: Any) -> str:
    """``a string``, ``an integer``, ``a list``, ``null``... for error messages."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


def require_mapping(value: Any, path: Path, what: str = "this field") -> Mapping[str, Any]:
    """``value`` if it is a mapping, else OptionsError at ``path``."""
    if not isinstance(value, Mapping):
        raise OptionsError(path, f"{what} must be a mapping, got {type_name(value)}")
    return value


def check_fields(value: Mapping[str, Any], allowed: Iterable[str], path: Path) -> None:
    """OptionsError at the first key of ``value`` not in ``allowed``."""
    allowed = tuple(allowed)
    for key in value:
        if key not in allowed:
            raise OptionsError(path + (str(key),),
                               f"unknown field {key!r}; expected one of: {', '.join(allowed)}")
