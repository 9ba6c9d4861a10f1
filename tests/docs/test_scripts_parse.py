"""The shell scripts a newcomer runs first parse (``bash -n``): a merge that
leaves a stray ``fi`` would otherwise only show when CI runs them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["run-tests.sh", "run-demo.sh", ".ci/run", "bench/run"])
def test_script_parses(script: str) -> None:
    path = ROOT / script
    assert path.exists(), script
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
