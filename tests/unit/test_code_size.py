"""No module in ``twistgw/`` or a shipped plugin package is over 500 lines,
and no function over 60, unless ``docs/architecture.md`` lists it with its
reason (its "Size exceptions" table). Read from the installed packages."""

from __future__ import annotations

import ast
import importlib
import re
from importlib.metadata import distribution
from pathlib import Path

import twistgw

from support.trial import TestCase

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
MAX_MODULE, MAX_FUNCTION = 500, 60


def _packages() -> list[Path]:
    """twistgw and the package of every plugin the twistgw distribution registers."""
    found = {Path(twistgw.__file__).resolve().parent}
    for ep in distribution("twistgw").entry_points:
        if ep.group == "twistgw.plugins":
            module = importlib.import_module(ep.value.split(":")[0].split(".")[0])
            assert module.__file__ is not None
            found.add(Path(module.__file__).resolve().parent)
    return sorted(found)


def _exceptions() -> set[str]:
    """``module`` or ``module:function`` names listed in the doc's table."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Size exceptions", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.M))


def _oversized() -> list[str]:
    found = []
    for package in _packages():
        for path in sorted(package.rglob("*.py")):
            module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
            source = path.read_text(encoding="utf-8")
            if source.count("\n") > MAX_MODULE:
                found.append(module)
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    assert node.end_lineno is not None
                    if node.end_lineno - node.lineno + 1 > MAX_FUNCTION:
                        found.append(f"{module}:{node.name}")
    return found


class CodeSizeTests(TestCase):
    def test_the_packages_are_found(self) -> None:
        names = {p.name for p in _packages()}
        assert {"twistgw", "twistgw_jwt", "twistgw_rbac", "twistgw_ldap", "twistgw_extauth"} <= names

    def test_no_module_over_500_lines_and_no_function_over_60_unless_listed(self) -> None:
        listed = _exceptions()
        unlisted = [name for name in _oversized() if name not in listed]
        assert not unlisted, f"split these, or list them with a reason in docs/architecture.md: {unlisted}"

    def test_every_listed_exception_is_still_oversized(self) -> None:
        stale = _exceptions() - set(_oversized())
        assert not stale, f"no longer oversized: remove from docs/architecture.md's Size exceptions: {stale}"
