"""docs/reliability.md names tests; every name must exist here, and every
test here must be named there (so the page stays the index of this suite)."""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[1] / "docs" / "reliability.md"


def _defined() -> set[str]:
    names: set[str] = set()
    for path in HERE.glob("test_*.py"):
        if path.name == Path(__file__).name:
            continue
        # module functions (pytest style) and TestCase methods (trial style)
        names |= set(re.findall(r"^(?:    )?(?:async )?def (test_\w+)", path.read_text(), re.M))
    return names


def test_every_test_named_in_the_doc_exists() -> None:
    named = set(re.findall(r"`(?:[\w.]+::)?(test_\w+)", DOC.read_text()))
    missing = named - _defined()
    assert not missing, f"docs/reliability.md names tests that do not exist: {sorted(missing)}"


def test_every_test_is_in_the_doc() -> None:
    named = set(re.findall(r"(test_\w+)", DOC.read_text()))
    undocumented = _defined() - named
    assert not undocumented, f"add these to docs/reliability.md: {sorted(undocumented)}"
