"""docs/first-plugin.md (issue 32, item 14): a first plugin on two screens,
run exactly as the page says.

The page's files are written into a fresh directory beside a copy of
twistgw (the page's ``../twistgw``), and its shell lines run there one after
another in one bash: a new venv, the page's install line (twistgw, pytest,
pytest-twisted), the plugin installed, its test under trial and under
pytest, and explain. Each line's ``# expect:`` is checked.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil

import pytest

from doc_shell import check_outcomes, run_lines, shell_lines

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "first-plugin.md"
REFERENCE = ROOT / "docs" / "plugins.md"
FILE = re.compile(r"<!-- file: examples/first-plugin/(?P<path>[^ ]+) -->\n```[a-z]*\n(?P<body>.*?)```", re.S)


def _page() -> str:
    return PAGE.read_text()


def test_the_page_fits_on_two_screens_and_has_every_part():
    text = _page()
    assert len(text.splitlines()) <= 120, len(text.splitlines())
    files = {m.group("path") for m in FILE.finditer(text)}
    assert files == {"pyproject.toml", "twistgw_team/__init__.py", "example/reports.yaml", "tests/test_team.py"}
    assert '[project.entry-points."twistgw.plugins"]' in text and "@twistgw.hookimpl" in text
    install = [line for line in shell_lines(text) if " install " in line and "pytest" in line]
    assert install and "pytest-twisted" in install[0], install


def test_the_reference_comes_after_it_and_they_link_both_ways():
    assert "](plugins.md" in _page()
    intro = REFERENCE.read_text().split("\n## ", 1)[0]
    assert "](first-plugin.md)" in intro
    readme = (ROOT / "README.md").read_text()
    assert readme.index("docs/first-plugin.md") < readme.index("docs/plugins.md):")


def _twistgw_copy(where: pathlib.Path) -> None:
    """The project as a clone has it (what pip installs), without build/ or .venv/."""
    where.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, where / name)
    for name in ("twistgw", "plugins", "twisted"):
        shutil.copytree(ROOT / name, where / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


@pytest.mark.slow
def test_the_pages_steps_run_as_written(tmp_path):
    _twistgw_copy(tmp_path / "twistgw")
    plugin = tmp_path / "team"
    for m in FILE.finditer(_page()):
        target = plugin / m.group("path")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(m.group("body"))
    lines = shell_lines(_page(), "<!-- first-plugin:start -->", "<!-- first-plugin:end -->")
    assert lines[0] == "python3 -m venv .venv"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    outcomes, log = run_lines(lines, str(plugin), env, timeout=900)
    assert len(outcomes) == 3, log
    check_outcomes(outcomes, log)
    assert (plugin / ".venv" / "bin" / "pytest").exists()  # in the plugin's own venv
