"""The system tools the suite runs (issue 32, item 18): ``run-tests.sh``
checks every one when it starts and names the missing ones with the one
``apt-get`` line that installs them all; that line is the same list as
``.ci/run``'s ``PACKAGES`` and the README's."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = (ROOT / "run-tests.sh").read_text()


def _quoted(text: str, name: str) -> list[str]:
    m = re.search(rf'^{name}="([^"]*)"', text, re.M)
    assert m, f"no {name}=... in the script"
    return m.group(1).split()


def packages() -> dict[str, list[str]]:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- packages:start -->", 1)[1].split("<!-- packages:end -->", 1)[0]
    line = re.search(r"sudo apt-get install (.*)", block).group(1)
    return {"run-tests.sh": _quoted(SCRIPT, "PACKAGES"), ".ci/run": _quoted((ROOT / ".ci" / "run").read_text(), "PACKAGES"),
            "README.md": line.split()}


def test_the_three_package_lists_are_one():
    lists = packages()
    assert lists["run-tests.sh"] == lists[".ci/run"] == lists["README.md"], lists
    for needed in ("nginx", "apache2-utils", "haproxy", "wrk", "openssl", "nghttp2-client", "python3-venv"):
        assert needed in lists["run-tests.sh"], needed


def test_every_package_has_a_tool_checked_at_the_start():
    tools = dict(t.split(":", 1)[::-1] for t in _quoted(SCRIPT, "TOOLS"))  # package -> command
    checked = set(tools) | {"python3-venv"}  # python3-venv: "python3 -m venv" is tried
    assert checked == set(_quoted(SCRIPT, "PACKAGES")), checked ^ set(_quoted(SCRIPT, "PACKAGES"))
    assert tools["nghttp2-client"] == "h2load" and tools["apache2-utils"] == "htpasswd"
    # before anything is installed or run
    assert SCRIPT.index("missing=$(missing_tools)") < SCRIPT.index("-m venv .venv") < SCRIPT.index(".venv/bin/pytest")


def test_missing_tools_are_named_with_the_one_install_line(tmp_path):
    """The script runs for real, on a copy of the project, with only some
    tools installed (stand-ins in a directory of their own) and no apt-get:
    it names every missing one and exits before making a venv."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy2(ROOT / "run-tests.sh", project / "run-tests.sh")
    tools = tmp_path / "tools"
    tools.mkdir()
    present = {"slapd", "ldapadd", "samba-tool", "smbclient", "ldbsearch", "ip", "redis-server", "chromium",
               "chromedriver", "ps", "curl"}
    for name in present:
        (tools / name).write_text("#!/bin/sh\n")
        (tools / name).chmod(0o755)
    bin_ = tmp_path / "bin"  # the shell's own commands only: no apt-get, no tools
    bin_.mkdir()
    for name in ("bash", "sed", "id", "dirname", "env"):
        os.symlink(shutil.which(name), bin_ / name)
    env = {"PATH": str(bin_), "TWISTGW_TOOL_PATH": str(tools), "PYTHON": "python3-not-here", "HOME": str(tmp_path)}
    out = subprocess.run([str(bin_ / "bash"), str(project / "run-tests.sh")], cwd=str(project), env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    first, second = out.stderr.splitlines()[:2]
    for tool, package in (("nginx", "nginx"), ("htpasswd", "apache2-utils"), ("haproxy", "haproxy"),
                          ("wrk", "wrk"), ("openssl", "openssl"), ("h2load", "nghttp2-client"),
                          ("python3-not-here -m venv", "python3-venv")):
        assert f"{tool} ({package})" in first, first
    for tool in present:
        assert f"{tool} (" not in first, first
    assert second == "run-tests: install everything the suite needs with: sudo apt-get install " + " ".join(
        packages()["README.md"])
    assert not (project / ".venv").exists()
