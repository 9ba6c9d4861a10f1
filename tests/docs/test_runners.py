"""trial and pytest run the in-memory suite alike: the README's ``trial``
command (``tests/inmemory.py``) and ``pytest`` count the same, non-zero,
number of tests in every one of its modules, and no test module of the
suite collects zero tests under pytest."""

from __future__ import annotations

import ast
import collections
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
BIN = pathlib.Path(sys.executable).parent

sys.path.insert(0, str(TESTS))
from inmemory import MODULES  # noqa: E402


def _run(*cmd: str) -> str:
    out = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def trial_counts(scratch: pathlib.Path) -> dict[str, int]:
    """Tests per module under ``trial tests/inmemory.py`` (listed, not run)."""
    text = _run(str(BIN / "trial"), "--dry-run", "--reporter=bwverbose", "--temp-directory",
                str(scratch / "_trial_temp"), "tests/inmemory.py")
    counts = collections.Counter(m.group(1) for m in re.finditer(r"^(\w+)\.\w+\.\w+ \.\.\. \[OK\]$", text, re.M))
    total = int(re.search(r"^Ran (\d+) tests", text, re.M).group(1))
    assert sum(counts.values()) == total, text[-2000:]
    return dict(counts)


def pytest_counts(*paths: str) -> dict[str, int]:
    """Tests per file (``tests/unit/test_x.py``) as pytest collects them."""
    text = _run(str(BIN / "pytest"), "--collect-only", "-q", "-p", "no:cacheprovider", *paths)
    return dict(collections.Counter(line.split("::", 1)[0] for line in text.splitlines() if "::" in line))


def _is_trial_style(path: pathlib.Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(node, ast.ClassDef) and any(
        (isinstance(b, ast.Name) and b.id.endswith("TestCase")) or
        (isinstance(b, ast.Attribute) and b.attr.endswith("TestCase")) for b in node.bases)
        for node in tree.body)


def test_both_runners_count_the_same_in_every_in_memory_module(tmp_path):
    trial = trial_counts(tmp_path)
    pytest_ = pytest_counts(*(f"tests/{m}" for m in MODULES))
    by_module = {pathlib.Path(m).stem: f"tests/{m}" for m in MODULES}
    assert sorted(trial) == sorted(by_module), "trial did not load every listed module"
    for module, path in by_module.items():
        assert trial[module] > 0, f"{path}: trial runs no test"
        assert trial[module] == pytest_.get(path), f"{path}: trial {trial[module]}, pytest {pytest_.get(path)}"
    assert sum(trial.values()) > 700


def test_no_module_collects_zero_tests_and_trial_style_modules_are_listed():
    collected = pytest_counts("tests")
    for path in sorted(TESTS.rglob("test_*.py")):
        rel = str(path.relative_to(ROOT))
        assert collected.get(rel, 0) > 0, f"{rel}: pytest collects no test"
        if _is_trial_style(path):
            assert str(path.relative_to(TESTS)) in MODULES, (
                f"{rel} is written for trial too: list it in tests/inmemory.py")
