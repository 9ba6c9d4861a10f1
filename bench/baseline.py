"""bench/run --baseline REV: the gateway of another commit, measured beside this one.

REV (any git revision: ``fe20652``, ``main~3``, a tag) is checked out into a
temporary git worktree outside the repository and pip-installed, non-editable,
into a virtualenv of its own made by the harness's Python (so both builds run on
the same CPython). The dependencies are pinned to the versions installed beside
the current build (``pip freeze`` as a constraints file), so the two rows differ
in twistgw's code only. The worktree is removed as soon as the install is done
(the installed copy is what runs); the virtualenv is kept in
``bench/results/.baseline/SHA-KEY`` (KEY: a hash of the Python version and the
constraints) and reused by the next run of the same commit, which then takes
about a second. ``rm -rf bench/results/.baseline`` drops every cached one.

The baseline gateway is started by that virtualenv's Python, from a directory
with no Python packages in it, without ``PYTHONPATH`` (and with
``PYTHONSAFEPATH=1``): nothing of the current tree can be imported by it.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CACHE = os.path.join(HERE, "results", ".baseline")


class BaselineError(Exception):
    """The baseline cannot be built; the message says why."""


@dataclass
class Baseline:
    rev: str  # as given on the command line: the suffix of the scenario names
    sha: str
    subject: str
    python: str  # the baseline virtualenv's interpreter

    def describe(self) -> str:
        venv = os.path.relpath(os.path.dirname(os.path.dirname(self.python)), ROOT)
        return f"`{self.rev}` = {self.sha[:12]} ({self.subject}), installed in {venv}"

    def env(self) -> dict[str, str]:
        """The environment of a baseline gateway: nothing that points at the current tree."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PYTHONSAFEPATH"] = "1"  # -m does not put the working directory on sys.path
        return env


def _git(*args: str) -> str:
    out = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise BaselineError(f"git {' '.join(args)}: {(out.stderr or out.stdout).strip()[:300]}")
    return out.stdout.strip()


def _constraints() -> str:
    """The current build's dependency versions, for the baseline's install."""
    out = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise BaselineError(f"pip freeze failed: {out.stderr.strip()[:300]}")
    keep = [ln for ln in out.stdout.splitlines()
            if ln and not ln.startswith(("#", "-")) and " @ " not in ln
            and not ln.lower().startswith("twistgw")]
    return "\n".join(sorted(keep)) + "\n"


def _imports_from(python: str, venv: str, cwd: str) -> str:
    """Empty if the baseline's twistgw and its plugins import from ``venv``, else the reason."""
    probe = ("import twistgw, twistgw_jwt, twistgw_rbac, twisted.plugins.twistgw_dropin as d;"
             "print(twistgw.__file__); print(twistgw_jwt.__file__); print(d.__file__)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONSAFEPATH"] = "1"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=cwd, env=env)
    if out.returncode != 0:
        return f"the baseline does not import: {out.stderr.strip().splitlines()[-1:]}"
    stray = [p for p in out.stdout.split() if not os.path.realpath(p).startswith(os.path.realpath(venv) + os.sep)]
    return f"imports from outside its virtualenv: {stray}" if stray else ""


def prepare(rev: str) -> Baseline:
    """Resolve REV, and build (or reuse) its virtualenv."""
    try:
        sha = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except BaselineError:
        raise BaselineError(f"{rev!r} is not a commit of this repository") from None
    subject = _git("log", "-1", "--format=%s", sha)
    if len(subject) > 60:
        subject = subject[:57] + "..."
    constraints = _constraints()
    key = hashlib.sha256((platform.python_version() + "\n" + constraints).encode()).hexdigest()[:10]
    venv = os.path.join(CACHE, f"{sha}-{key}")
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, ".installed")
    scratch = tempfile.mkdtemp(prefix="twistgw-baseline-")
    try:
        if os.path.exists(marker) and not _imports_from(python, venv, scratch):
            print(f"baseline {rev} = {sha[:12]}: reusing {os.path.relpath(venv)}", flush=True)
            return Baseline(rev, sha, subject, python)
        print(f"baseline {rev} = {sha[:12]}: installing into {os.path.relpath(venv)} (once per commit) ...",
              flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        _build(sha, venv, scratch, constraints)
        problem = _imports_from(python, venv, scratch)
        if problem:
            raise BaselineError(problem)
        with open(marker, "w") as f:
            f.write(sha + "\n")
        return Baseline(rev, sha, subject, python)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _build(sha: str, venv: str, scratch: str, constraints: str) -> None:
    """A temporary worktree of ``sha`` in ``scratch``, pip-installed into a new ``venv``."""
    tree = os.path.join(scratch, "src")
    _git("worktree", "add", "--detach", "--quiet", tree, sha)
    try:
        cons = os.path.join(scratch, "constraints.txt")
        with open(cons, "w") as f:
            f.write(constraints)
        os.makedirs(os.path.dirname(venv), exist_ok=True)
        for argv in ([sys.executable, "-m", "venv", venv],
                     [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", "-c", cons, tree]):
            out = subprocess.run(argv, capture_output=True, text=True, cwd=scratch)
            if out.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                tail = " / ".join((out.stderr or out.stdout).strip().splitlines()[-3:])
                raise BaselineError(f"{' '.join(argv[-3:])} failed: {tail[:400]}")
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], capture_output=True)
