"""The one duration parser of the gateway: every duration a configuration
holds (Gloo's ``google.protobuf.Duration`` fields, the plugins' own) is read
by :func:`parse_duration`, through :meth:`twistgw.api.fields.FieldReader.duration`.

Gloo reads a Duration with the Go protobuf library's JSON mapping, which
parses it with Go's ``time.ParseDuration``: ``15s``, ``1.5s``, ``100ms``,
``2m``, ``1h``, ``1h30m``, ``250us``, ``10ns``. twistgw reads the same forms,
and also a plain number of seconds (``7``, ``0.5``, as a YAML number or a
string) and spaces around a term (``" 5 s "``), as it always has.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

__all__ = ["DURATION_UNITS", "duration_problem", "duration_text", "parse_duration"]

#: Seconds per unit of a duration: Go's (``time.ParseDuration``, Gloo's parser).
DURATION_UNITS: Mapping[str, float] = {
    "ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 0.001, "s": 1, "m": 60, "h": 3600,
}

_NUMBER = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*")
_TERM = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([^\s\d.]+)\s*")


def parse_duration(value: Any, units: Mapping[str, float] = DURATION_UNITS) -> float | None:
    """Seconds of a duration, or None when ``value`` is not one (or is
    negative): a number of seconds (``3``, ``0.5``, ``"7"``), or terms of a
    number and a unit of ``units`` (``15s``, ``1.5s``, ``250ms``, ``1h30m``).
    Units are case-sensitive (``5S`` is not a duration). The caller reports a
    None with its own field path (:meth:`~twistgw.api.fields.FieldReader.duration`)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value >= 0 and math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    text = value[1:] if value.startswith("+") else value
    plain = _NUMBER.fullmatch(text)
    if plain:
        return float(plain.group(1))
    total, pos = 0.0, 0
    while pos < len(text):
        term = _TERM.match(text, pos)
        if term is None or term.group(2) not in units:
            return None
        total += float(term.group(1)) * units[term.group(2)]
        pos = term.end()
    return total if pos and math.isfinite(total) else None


def duration_text(seconds: float) -> str:
    """A bound as a message writes it: ``1ms``, ``60s``, ``0.5s``."""
    if 0 < seconds < 1 and seconds * 1000 == int(seconds * 1000):
        return f"{int(seconds * 1000)}ms"
    return f"{seconds:g}s"


def duration_problem(value: Any, lo: float | None, hi: float | None) -> str:
    """The one wording of a value that is not a duration in ``[lo, hi]``
    (``lo`` None: above zero): ``must be a duration from 1ms to 60s such as
    '5s' or '250ms', got '2m'``."""
    if lo is None:
        bounds = " above zero" if hi is None else f" above zero and at most {duration_text(hi)}"
    elif hi is not None:
        bounds = f" from {duration_text(lo)} to {duration_text(hi)}"
    else:
        bounds = f" of at least {duration_text(lo)}" if lo > 0 else ""
    return f"must be a duration{bounds} such as '5s' or '250ms', got {value!r}"
