"""A field's two spellings: protobuf's JSON mapping, which Gloo reads its
resources with, takes a field's proto name (``retriable_status_codes``) as
well as its lowerCamelCase JSON name (``retriableStatusCodes``).
:meth:`twistgw.api.fields.FieldReader.mapping` reads both; these helpers
find where a field is written and how a problem names it.
"""

from __future__ import annotations

import functools
import re
from typing import Collection

from twistgw.api.types import path_text

__all__ = ["proto_name", "written_field", "written_path"]

Path = tuple[str | int, ...]

_UPPER = re.compile(r"(?<=[^_])([A-Z])")


@functools.lru_cache(maxsize=4096)
def proto_name(name: str) -> str:
    """A field's proto name from its JSON (lowerCamelCase) name, the other
    spelling protobuf's JSON mapping accepts: ``retriableStatusCodes`` →
    ``retriable_status_codes``, ``http2ProtocolOptions`` → ``http2_protocol_options``."""
    return _UPPER.sub(lambda m: "_" + m.group(1).lower(), name)


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
