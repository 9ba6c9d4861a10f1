"""docs/sdk.md is the SDK's reference, generated from the installed
``twistgw.sdk`` (its ``SECTIONS``, ``__all__`` and docstrings) by
``docs/sdk_reference.py``: it must be what the generator writes now."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import twistgw.sdk

ROOT = Path(__file__).resolve().parents[2]


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("sdk_reference", ROOT / "docs" / "sdk_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_name_of_the_sdk_is_in_one_section() -> None:
    listed = [name for names in twistgw.sdk.SECTIONS.values() for name in names]
    assert len(listed) == len(set(listed)), "a name is in two sections"
    assert sorted(listed) == sorted(set(twistgw.sdk.__all__) - {"__version__"})


def test_docs_sdk_md_is_up_to_date() -> None:
    expected = _generator().render()
    actual = (ROOT / "docs" / "sdk.md").read_text(encoding="utf-8")
    assert actual == expected, "docs/sdk.md is stale: run .venv/bin/python docs/sdk_reference.py"


def test_every_sdk_name_is_documented() -> None:
    text = (ROOT / "docs" / "sdk.md").read_text(encoding="utf-8")
    missing = [name for name in twistgw.sdk.__all__ if name != "__version__" and f"### `{name}`" not in text]
    assert not missing, missing


def test_the_check_mode_fails_on_a_stale_file(tmp_path: Path) -> None:
    """The script's --check exits 1 when the file differs (and 0 as it is)."""
    ok = subprocess.run([sys.executable, str(ROOT / "docs" / "sdk_reference.py"), "--check"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    gen = _generator()
    gen.TARGET = tmp_path / "sdk.md"
    gen.TARGET.write_text("stale\n", encoding="utf-8")
    assert gen.main(["--check"]) == 1
