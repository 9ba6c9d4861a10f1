"""The one check of a mapping's field names in the rate-limit plugins.

Every mapping they read (options, ``Settings`` sections, ``RateLimitConfig``
rules, actions, descriptors, limits) has its keys checked here, so that an
unknown field is refused with the same wording everywhere and so that
``tests/unit/test_field_walk.py`` sees every field these plugins accept.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from twistgw.sdk import Path, Problems, unknown_field


def check(raw: Mapping[str, Any], allowed: Sequence[str], path: Path, problems: Problems) -> None:
    """Record a problem at ``path + (key,)`` for each key of ``raw`` not in ``allowed``."""
    for key in raw:
        if key not in allowed:
            problems.add(path + (str(key),), unknown_field(key, allowed))
