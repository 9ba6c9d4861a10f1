"""Builds twistgw's hot modules with mypyc (issue 36); everything else is in
pyproject.toml.

With ``TWISTGW_COMPILE=1`` (opt-in for now), the modules of
twistgw/compiled.py's MODULES are compiled to C extensions with the
machine's C compiler. Their sources stay plain Python: by default, with
``TWISTGW_PURE=1``, or when mypyc or the C compiler fails, the build says
why in one line and installs the same modules as pure Python, which run
unchanged (docs/contributing.md, docs/decisions.md).
"""

from __future__ import annotations

import ast
import os
import sys
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIRS = {"twistgw_jwt": "plugins/twistgw_jwt", "twistgw_rbac": "plugins/twistgw_rbac"}


def say(message: str) -> None:
    print(f"twistgw build: {message}", file=sys.stderr, flush=True)


def hot_modules() -> list[str]:
    """MODULES from twistgw/compiled.py, read without importing twistgw."""
    with open(os.path.join(HERE, "twistgw", "compiled.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "MODULES":
            return list(ast.literal_eval(node.value))  # type: ignore[arg-type]
    raise RuntimeError("twistgw/compiled.py has no MODULES")


def source(module: str) -> str:
    top, _, rest = module.partition(".")
    base = PACKAGE_DIRS.get(top, top)
    return os.path.join(base, *rest.split(".")) + ".py" if rest else os.path.join(base, "__init__.py")


class FallbackBuildExt(build_ext):
    """build_ext that installs the pure modules when the C build fails."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any failure: the pure modules are there
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            say(f"compiling the hot modules failed ({why[:200]}); installing them as pure Python")
            self.extensions = []

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            raise RuntimeError(f"{ext.name}: {exc}") from exc


def ext_modules() -> list[Any]:
    if os.environ.get("TWISTGW_PURE", "") not in ("", "0"):
        say("TWISTGW_PURE is set: the hot modules are installed as pure Python")
        return []
    if os.environ.get("TWISTGW_COMPILE", "") in ("", "0"):
        # opt-in until the whole suite passes compiled (docs/contributing.md)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        say(f"mypyc is not available ({exc}); installing the hot modules as pure Python")
        return []
    cwd = os.getcwd()
    os.chdir(HERE)
    try:
        return list(mypycify([source(m) for m in hot_modules()], opt_level="3"))
    except BaseException as exc:  # noqa: BLE001 - mypyc exits on a type error
        say(f"mypyc could not compile the hot modules ({type(exc).__name__}: {exc}); "
            "installing them as pure Python")
        return []
    finally:
        os.chdir(cwd)


setup(ext_modules=ext_modules(), cmdclass={"build_ext": FallbackBuildExt})
