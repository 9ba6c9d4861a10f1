"""docs/plugins.md: the example third-party plugin, installed from outside the
core with pip, is discovered by entry point and enforced."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "apikey-plugin"
CONFIG = EXAMPLE / "example-config"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
         "--no-build-isolation", "--target", str(target), str(EXAMPLE)],
        check=True, capture_output=True, timeout=180,
    )
    return target


def _twistgw(installed, *args):
    env = dict(os.environ, PYTHONPATH=str(installed))
    return subprocess.run([sys.executable, "-m", "twistgw", *args], env=env, capture_output=True,
                          text=True, timeout=60, cwd=str(installed))


def test_plugin_is_discovered_by_entry_point(installed):
    out = _twistgw(installed, "plugins")
    assert out.returncode == 0, out.stderr
    assert "apikey" in out.stdout and "order=400" in out.stdout


def test_example_config_checks(installed):
    out = _twistgw(installed, "check", str(CONFIG))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OK" in out.stdout


def test_without_the_plugin_the_config_is_refused():
    out = subprocess.run([sys.executable, "-m", "twistgw", "check", str(CONFIG)],
                         capture_output=True, text=True, timeout=60, cwd="/")
    assert out.returncode == 1
    assert "no plugin named 'apikey' is installed" in out.stdout


@pytest.mark.parametrize("headers,status,expect", [
    ([], 1, "DENY 401 'API key is missing'"),
    (["-H", "X-Api-Key: wrong"], 1, "DENY 403 'API key is not valid'"),
    (["-H", "X-Api-Key: acme-key-1234"], 0, "apikey.authenticate: allow — key 'acme'"),
])
def test_explain_runs_the_plugin(installed, headers, status, expect):
    out = _twistgw(installed, "explain", str(CONFIG), "GET", "http://partners.example.com/orders", *headers)
    assert out.returncode == status, out.stdout + out.stderr
    assert expect in out.stdout


def test_disabled_on_status_route(installed):
    out = _twistgw(installed, "explain", str(CONFIG), "GET", "http://partners.example.com/status")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Plugin chain: (none)" in out.stdout
    assert "direct response 200" in out.stdout


# --------------------------------------------------------------------------
# The example's own tests, in both styles, under both runners
# --------------------------------------------------------------------------

BIN = pathlib.Path(sys.executable).parent


def _runner(installed, *cmd):
    env = dict(os.environ, PYTHONPATH=str(installed))
    return subprocess.run([str(BIN / cmd[0]), *cmd[1:]], env=env, capture_output=True, text=True,
                          timeout=300, cwd=str(EXAMPLE))


def _trial_count(out) -> int:
    m = re.search(r"^Ran (\d+) tests? in ", out.stdout, re.M)
    assert m and out.returncode == 0 and "PASSED" in out.stdout, out.stdout + out.stderr
    return int(m.group(1))


def _pytest_count(out) -> int:
    m = re.search(r"^(\d+) passed", out.stdout.splitlines()[-1] if out.stdout else "")
    assert m and out.returncode == 0 and "failed" not in out.stdout.splitlines()[-1], out.stdout + out.stderr
    return int(m.group(1))


def test_trial_style_module_counts_the_same_under_both_runners(installed):
    trial = _trial_count(_runner(installed, "python", "-m", "twisted.trial", "tests"))
    pytest_ = _pytest_count(_runner(installed, "pytest", "-q", "-p", "no:cacheprovider",
                                    "tests/test_apikey_trial.py"))
    assert trial == pytest_ == 9


def test_both_styles_in_one_pytest_session(installed):
    out = _runner(installed, "pytest", "-q", "-p", "no:cacheprovider", "-W", "error::DeprecationWarning",
                  "tests")
    assert _pytest_count(out) == 15  # 9 trial-style + 6 pytest-twisted-style
    assert "warning" not in out.stdout.lower(), out.stdout
