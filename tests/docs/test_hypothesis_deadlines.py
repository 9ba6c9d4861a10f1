"""Every hypothesis test in ``tests/`` turns the per-example deadline off.

Hypothesis fails an example that takes longer than ``deadline`` (200 ms by
default) of wall-clock time, and calls the test flaky when the example is
fast on its replay. In the in-memory suite under trial (one process, about
600,000 objects by the end) a full garbage collection takes up to 0.7 s and
runs a few times per run, wherever the allocations happen to cross the
threshold: inside an example, it failed a property test that checks no
timing at all. The tests here check correctness; the ones that do bound a
cost measure it themselves. So each ``@given`` test says ``deadline=None``
in its ``@settings(...)`` (directly or through a module-level ``dict``
spread into it, as ``test_engine_properties.py`` does)."""

from __future__ import annotations

import ast
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]


def _name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def _no_deadline(call: ast.Call, dicts: dict[str, ast.expr]) -> bool:
    for kw in call.keywords:
        value = kw.value
        if kw.arg is None and isinstance(value, ast.Name):  # settings(**SETTINGS)
            value = dicts.get(value.id)
            if isinstance(value, ast.Call) and _name(value) == "dict":
                if _no_deadline(value, dicts):
                    return True
        elif kw.arg == "deadline" and isinstance(value, ast.Constant) and value.value is None:
            return True
    return False


def hypothesis_tests_with_a_deadline() -> list[str]:
    found = []
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        dicts = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            names = [_name(d) for d in node.decorator_list]
            if "given" not in names:
                continue
            settings = [d for d in node.decorator_list if isinstance(d, ast.Call) and _name(d) == "settings"]
            if not any(_no_deadline(s, dicts) for s in settings):
                found.append(f"{path.relative_to(TESTS)}:{node.lineno} {node.name}")
    return found


def test_every_given_test_has_no_deadline() -> None:
    assert hypothesis_tests_with_a_deadline() == []


def test_the_check_sees_given_tests() -> None:
    """The control: the check finds the property tests, and a test without
    ``deadline=None`` would be listed."""
    source = "from hypothesis import given, settings\n@given(1)\ndef test_a(x): pass\n" \
             "@settings(max_examples=5)\n@given(1)\ndef test_b(x): pass\n" \
             "@settings(deadline=None)\n@given(1)\ndef test_c(x): pass\n"
    tree = ast.parse(source)
    missing = [f.name for f in tree.body if isinstance(f, ast.FunctionDef)
               and not any(isinstance(d, ast.Call) and _name(d) == "settings" and _no_deadline(d, {})
                           for d in f.decorator_list)]
    assert missing == ["test_a", "test_b"]
    assert sum(1 for p in TESTS.rglob("test_*.py") if "@given" in p.read_text()) > 10
