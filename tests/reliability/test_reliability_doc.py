"""docs/reliability.md names tests; every name must exist here (or in
tests/engine), and every test here and there must be named in it (so the
page stays the index of both suites). File names (``test_x.py``) are not
test names."""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[1] / "docs" / "reliability.md"
INDEXED = (HERE, HERE.parent / "engine")
#: named in the page too (its HTTP/2 attack section), not all indexed there
NAMED_FROM = INDEXED + (HERE.parent / "http2",)


def _defined(dirs: tuple[Path, ...] = INDEXED) -> set[str]:
    names: set[str] = set()
    for path in (p for d in dirs for p in d.glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        # module functions (pytest style) and TestCase methods (trial style)
        names |= set(re.findall(r"^(?:    )?(?:async )?def (test_\w+)", path.read_text(), re.M))
    return names


def test_every_test_named_in_the_doc_exists() -> None:
    named = set(re.findall(r"`(?:[\w.]+::)?(test_\w+)\b(?!\.py)", DOC.read_text()))
    missing = named - _defined(NAMED_FROM)
    assert not missing, f"docs/reliability.md names tests that do not exist: {sorted(missing)}"


def test_every_test_is_in_the_doc() -> None:
    named = set(re.findall(r"(test_\w+)\b(?!\.py)", DOC.read_text()))
    undocumented = _defined() - named
    assert not undocumented, f"add these to docs/reliability.md: {sorted(undocumented)}"
