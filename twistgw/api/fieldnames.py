"""A field's two spellings: protobuf's JSON mapping, which Gloo reads its
resources with, takes a field's proto name (``retriable_status_codes``) as
well as its lowerCamelCase JSON name (``retriableStatusCodes``).
:meth:`twistgw.api.fields.FieldReader.mapping` reads both; these helpers
find where a field is written and how a problem names it.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Collection, Iterable, Mapping

from twistgw.api.types import path_text

__all__ = ["named", "proto_name", "refused_removed", "unknown_field", "written_field", "written_path"]

Path = tuple[str | int, ...]


def unknown_field(key: object, allowed: Iterable[str]) -> str:
    """The one wording of an unknown-field problem, shared by the core and
    the plugins: ``unknown field 'colour'; expected one of: name, options``."""
    return f"unknown field {str(key)!r}; expected one of: {', '.join(allowed)}"

_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


@functools.lru_cache(maxsize=4096)
def proto_name(name: str) -> str:
    """A field's proto name from its JSON (lowerCamelCase) name, the other
    spelling protobuf's JSON mapping accepts: ``retriableStatusCodes`` →
    ``retriable_status_codes``, ``http2ProtocolOptions`` →
    ``http2_protocol_options`` (a run of capitals is one word: ``startTLS`` →
    ``start_tls``)."""
    return _WORD.sub("_", name).lower()


def written_path(lines: Collection[Path], path: Path) -> Path:
    """``path`` as a document writes it: each camelCase field the document
    spells as its proto name (``retriable_status_codes``) replaced by that
    spelling, so its line is found. ``lines`` holds the paths written."""
    out: Path = ()
    for part in path:
        here = out + (part,)
        if isinstance(part, str) and here not in lines:
            other = out + (proto_name(part),)
            if other in lines:
                here = other
        out = here
    return out


def written_field(lines: Collection[Path], path: Path) -> str:
    """The field as a problem names it: ``spec.retries.retriableStatusCodes``,
    and the spelling written where it differs
    (``spec.retries.retriableStatusCodes (written retriable_status_codes)``)."""
    text = path_text(path)
    written = written_path(lines, path)
    if written == path:
        return text
    spelled = ", ".join(str(w) for p, w in zip(path, written, strict=True) if p != w)
    return f"{text} (written {spelled})"


def refused_removed(value: Mapping[str, Any], path: Path, refused: Mapping[str, str], proto_names: bool,
                    issue: Callable[[Path, str], None]) -> Mapping[str, Any]:
    """``value`` without the fields of ``refused`` (either spelling), each one
    written (not null) reported: ``is not supported by twistgw: REASON``."""
    aliases = {proto_name(k): k for k in refused} if proto_names else {}
    if not any(key in refused or key in aliases for key in value):
        return value
    out = {}
    for key, item in value.items():
        name = key if key in refused else aliases.get(key)
        if name is None:
            out[key] = item
        elif item is not None:
            issue(path + (name,), f"is not supported by twistgw: {refused[name]}")
    return out


def named(value: Mapping[str, Any], path: Path, known: Collection[str], proto_names: bool,
          issue: Callable[[Path, str], None], strict: bool) -> dict[str, Any]:
    """``value`` with each field under its name in ``known``; other keys
    kept as written (and, when ``strict``, recorded as unknown)."""
    aliases = {proto_name(k): k for k in known} if proto_names else {}
    out: dict[str, Any] = {}
    written: dict[str, str] = {}
    for key, item in value.items():
        name = key if key in known else aliases.get(key)
        if name is None:
            if strict:  # the fields in the order given, or sorted when given as a set
                listed = known if isinstance(known, (tuple, list)) else sorted(known)
                issue(path + (key,), unknown_field(key, listed))
            name = key
        if name in written:
            issue(path + (name,), f"is written twice, as {written[name]!r} and {key!r}: the proto name"
                  " and the JSON name of one field; keep one")
        written[name] = key
        out[name] = item
    return out
