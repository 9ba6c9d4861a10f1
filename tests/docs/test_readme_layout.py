"""The README's first screen (issue 32, item 15): the two commands a
newcomer runs come first, the feature list after them, and the detail
only contributors need lives in docs/contributing.md."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FIRST_SCREEN = 25  # lines


def test_the_two_commands_are_on_the_first_screen():
    first = "\n".join(README.splitlines()[:FIRST_SCREEN])
    assert "./run-demo.sh" in first and "./run-tests.sh" in first, first


def test_the_feature_list_comes_after_them():
    features = README.index("- **JWT** verification")
    assert README.index("./run-demo.sh") < features and README.index("./run-tests.sh") < features
    assert features > len("\n".join(README.splitlines()[:FIRST_SCREEN]))


def test_contributor_detail_is_in_the_contributor_docs():
    contributing = (ROOT / "docs" / "contributing.md").read_text()
    for detail in ("garbage collection", "deadline=None", "seeded generator", "test_runners.py",
                   "rather than sleeping"):
        assert detail not in README, detail
        assert detail in contributing, detail
    assert "](docs/contributing.md)" in README
    assert "](contributing.md)" in (ROOT / "docs" / "architecture.md").read_text()
