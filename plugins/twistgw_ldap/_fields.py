"""The LDAP options' field reader: the gateway's located field reader
(:class:`twistgw.options.Problems`, a :class:`twistgw.api.fields.FieldReader`)
with the value kinds LDAP options add (durations, text that is not blank),
and field paths that may be written as text (``"pool.maxSize"``,
``"allowedGroups[0]"``). Problems are located below the entry; the extauth
plugin places them in the AuthConfig."""

from __future__ import annotations

from typing import Any, Iterable

from twistgw.sdk import Path
from twistgw.sdk import Problems, parse_duration


def at(field: str | Path) -> Path:
    """``"allowedGroups[0]"`` → ``("allowedGroups", 0)``; ``"pool.maxSize"``
    → ``("pool", "maxSize")``; a path is returned as it is."""
    if not isinstance(field, str):
        return tuple(field)
    out: list[str | int] = []
    for part in field.split(".") if field else ():
        name, *indexes = part.split("[")
        if name:
            out.append(name)
        out.extend(int(i.rstrip("]")) for i in indexes)
    return tuple(out)


class LdapReader(Problems):
    """Each ``with r.check():`` block records its problems and the next block
    still runs, so ``twistgw check`` lists every problem of an entry."""

    def fail(self, path: str | Path, reason: str) -> Exception:
        return super().fail(at(path), reason)

    def add(self, path: str | Path, reason: str, resource: tuple[str, str, str] | None = None) -> None:
        super().add(at(path), reason, resource)

    def mapping(self, value: Any, path: str | Path, allowed: Iterable[str] | None = None,
                required: tuple[str, ...] = ()) -> dict[str, Any]:
        return super().mapping(value, at(path), allowed, required)

    def string(self, value: Any, path: str | Path, nonempty: bool = True) -> str:
        text = super().string(value, at(path), nonempty)
        if nonempty and not text.strip():
            raise self.fail(path, "must not be empty")
        return text

    def boolean(self, value: Any, path: str | Path) -> bool:
        return super().boolean(value, at(path))

    def integer(self, value: Any, path: str | Path, lo: int | None = None,
                hi: int | None = None) -> int:
        return super().integer(value, at(path), lo, hi)

    def duration(self, value: Any, path: str | Path, lo: float, hi: float) -> float:
        seconds = parse_duration(value)
        if seconds is None:
            raise self.fail(path, f"must be a duration such as '3s' or '500ms', got {value!r}")
        if not lo <= seconds <= hi:
            raise self.fail(path, f"must be between {lo:g}s and {hi:g}s, got {seconds:g}s")
        return seconds
