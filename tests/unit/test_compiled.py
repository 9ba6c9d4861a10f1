"""The mypyc build (issue 36; setup.py, twistgw/compiled.py).

``TWISTGW_COMPILE=1 pip install .`` compiles twistgw.compiled.MODULES (opt-in
for now); by default, with ``TWISTGW_PURE=1``, or after a failed build they
are plain Python. ./run-tests.sh says which install it tests with
``TWISTGW_EXPECT_COMPILED`` (1: every hot module compiled, 0: none), and
these tests hold the install to it.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from twistgw import cli, compiled

ROOT = Path(__file__).resolve().parents[2]


def test_every_hot_module_has_a_python_source_that_imports():
    for module in compiled.MODULES:
        top, _, rest = module.partition(".")
        base = ROOT / ("plugins/" + top if top.startswith("twistgw_") else top)
        assert (base / (rest.replace(".", "/") + ".py")).is_file(), module
        assert importlib.import_module(module).__name__ == module


def test_the_install_is_compiled_or_pure_as_the_run_expects():
    done = compiled.compiled_modules()
    expected = os.environ.get("TWISTGW_EXPECT_COMPILED")
    if expected == "1":
        assert done == list(compiled.MODULES), compiled.summary()
    elif expected == "0":
        assert done == [], compiled.summary()
    else:
        # not told: all or nothing (a build compiles every hot module or none)
        assert done in ([], list(compiled.MODULES)), compiled.summary()


def test_a_compiled_module_is_a_shared_library_and_a_pure_one_its_source():
    for module in compiled.MODULES:
        path = importlib.import_module(module).__file__ or ""
        assert path.endswith(".so" if compiled.is_compiled(module) else ".py"), path


def test_version_names_the_build(capsys):
    assert cli.main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("twistgw 0.1.0: ")
    assert compiled.summary() in out
    assert ("pure Python" in out) == (compiled.compiled_modules() == [])


def _wheel(src: Path, tmp_path: Path, **env: str) -> tuple[list[str], str]:
    """Build a wheel of the copied source tree ``src`` (no isolation: this venv has the
    build's requirements); its file names and the build's output."""
    run = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
         "--disable-pip-version-check", "-w", str(tmp_path / "wheel"), str(src)],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900,
        cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("twistgw-*.whl")
    with zipfile.ZipFile(wheel) as z:
        return z.namelist(), run.stdout


def _copy_tree(tmp_path: Path) -> Path:
    """The source tree without its venv and build directory (setuptools
    builds in the tree; the test's build must not share the run's)."""
    src = tmp_path / "src"
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes((ROOT / name).read_bytes())
    return src


@pytest.fixture
def tree(tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("needs the source tree (git ls-files)")
    return _copy_tree(tmp_path)


def test_a_default_build_is_pure(tree, tmp_path):
    names, _ = _wheel(tree, tmp_path, TWISTGW_PURE="", TWISTGW_COMPILE="")
    assert not [n for n in names if n.endswith(".so")]
    assert "twistgw/engine/request.py" in names


def test_twistgw_pure_installs_the_hot_modules_as_python(tree, tmp_path):
    names, err = _wheel(tree, tmp_path, TWISTGW_PURE="1", TWISTGW_COMPILE="1")
    assert "twistgw build: TWISTGW_PURE is set: the hot modules are installed as pure Python" in err
    assert not [n for n in names if n.endswith(".so")]
    assert "twistgw/engine/connection.py" in names and "twistgw_jwt/_authn.py" in names


@pytest.mark.slow
def test_a_failed_c_build_falls_back_to_python_and_says_why(tree, tmp_path):
    names, err = _wheel(tree, tmp_path, CC="false", TWISTGW_PURE="", TWISTGW_COMPILE="1")
    assert "twistgw build: compiling the hot modules failed (" in err
    assert "installing them as pure Python" in err
    assert not [n for n in names if n.endswith(".so")]
    assert "twistgw/core/pipeline.py" in names
