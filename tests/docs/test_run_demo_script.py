"""``run-demo.sh`` runs pip only when ``.venv`` is missing or the project
changed (issue 23, item 26): a second start needs no network.

The script runs for real (bash, find, sha256sum) on a copy of the project;
the Python it is given (``PYTHON``) and the venv's ``python`` and ``twist``
are stand-ins that record how they were called, so the test sees every pip
run without installing anything.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
# stands for python3: "-m venv DIR" makes a venv whose python and twist record their calls
if [ "$1" = "--version" ]; then echo "Python 3.11.2"; exit 0; fi
if [ "$1 $2" = "-m venv" ]; then
    mkdir -p "$3/bin"
    printf '#!/usr/bin/env bash\\necho "python $*" >> "$CALLS"\\n' > "$3/bin/python"
    printf '#!/usr/bin/env bash\\necho "twist $*" >> "$CALLS"\\n' > "$3/bin/twist"
    chmod +x "$3/bin/python" "$3/bin/twist"
    echo "venv $3" >> "$CALLS"
    exit 0
fi
exit 9
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "twistgw"
    copy.mkdir()
    for name in ("pyproject.toml", "run-demo.sh", "README.md"):
        shutil.copy2(ROOT / name, copy / name)
    for name in ("twistgw", "plugins", "twisted", "etc"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return copy


def _start(project: Path) -> list[str]:
    """Run the script; the calls it made (venv, pip, twist)."""
    calls = project.parent / "calls.log"
    calls.unlink(missing_ok=True)
    env = {**os.environ, "PYTHON": str(project.parent / "python3"), "CALLS": str(calls)}
    out = subprocess.run(["bash", str(project / "run-demo.sh"), "--admin", "none"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return calls.read_text().splitlines()


def _pip_runs(calls: list[str]) -> int:
    return sum(" -m pip install" in call for call in calls)


def test_the_first_start_installs_and_the_second_does_not(project: Path) -> None:
    first = _start(project)
    assert first[0] == "venv .venv"
    assert _pip_runs(first) == 2
    assert first[-1] == "twist --log-format=text twistgw --config etc/ --admin none"
    second = _start(project)
    assert second == ["twist --log-format=text twistgw --config etc/ --admin none"]


def test_a_changed_source_or_pyproject_installs_again(project: Path) -> None:
    _start(project)
    with open(project / "plugins" / "twistgw_jwt" / "_remote.py", "a") as f:
        f.write("\n# edited\n")
    assert _pip_runs(_start(project)) == 2
    assert _pip_runs(_start(project)) == 0
    with open(project / "pyproject.toml", "a") as f:
        f.write("\n# edited\n")
    assert _pip_runs(_start(project)) == 2
    (project / "twistgw" / "new_module.py").write_text("x = 1\n")
    assert _pip_runs(_start(project)) == 2


def test_configuration_and_docs_edits_do_not_install(project: Path) -> None:
    _start(project)
    with open(project / "etc" / "gateway.yaml", "a") as f:
        f.write("\n# edited\n")
    with open(project / "README.md", "a") as f:
        f.write("\nedited\n")
    assert _pip_runs(_start(project)) == 0


def test_a_missing_venv_is_made_and_installed(project: Path) -> None:
    _start(project)
    shutil.rmtree(project / ".venv")
    again = _start(project)
    assert again[0] == "venv .venv" and _pip_runs(again) == 2


def test_a_failed_install_is_tried_again_next_time(project: Path, tmp_path: Path) -> None:
    """The stamp is written only after pip succeeded."""
    _start(project)
    (project / ".venv" / "twistgw-demo.stamp").unlink()
    python = project / ".venv" / "bin" / "python"
    python.write_text('#!/usr/bin/env bash\necho "python $*" >> "$CALLS"\nexit 1\n')
    env = {**os.environ, "PYTHON": str(tmp_path / "python3"), "CALLS": str(tmp_path / "calls.log")}
    out = subprocess.run(["bash", str(project / "run-demo.sh")], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0
    assert not (project / ".venv" / "twistgw-demo.stamp").exists()
