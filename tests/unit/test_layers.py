"""The layer rule of ``twistgw/``, read from the import graph of the source.

    api  →  config  →  core  →  engine  →  runtime  →  public surface

Each layer imports only itself and the layers before it; there is no import
cycle anywhere (imports inside functions count; only ``if TYPE_CHECKING:``
blocks, which never run, do not). ``config/`` imports no Twisted at all;
``core/`` nothing from ``twisted.web`` and never the reactor. Twisted's
private modules and attributes are read only in ``engine/``.
See ``docs/architecture.md``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import twistgw

from support.trial import TestCase

PACKAGE = Path(twistgw.__file__).resolve().parent

#: In order; a module may import its own layer and the ones before it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("api", ("twistgw.api", "twistgw.hookspecs", "twistgw.options", "twistgw.regex", "twistgw.tls")),
    ("config", ("twistgw.config",)),
    ("core", ("twistgw.core",)),
    ("engine", ("twistgw.engine",)),
    ("runtime", ("twistgw.runtime",)),
    ("surface", ("twistgw", "twistgw.__main__", "twistgw.cli", "twistgw.tap", "twistgw.testing")),
]

#: Attributes of Twisted objects that are not Twisted's public API.
TWISTED_PRIVATE_NAMES = {
    "_HTTPChannel__first_line", "_QUEUED_SENTINEL", "_disconnected", "_rawHeaders",
    "_HTTP11ClientFactory", "_factory", "_interface", "_backlog", "_quiescentCallback",
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        out[_module_name(path)] = ast.parse(path.read_text(), str(path))
    return out


SOURCES = _sources()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk_runtime(tree: ast.AST):
    """Every node that can run: skips ``if TYPE_CHECKING:`` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _imports(module: str, tree: ast.Module) -> list[tuple[str, int]]:
    """(imported module, line) for every import that runs, resolved to modules."""
    out = []
    is_package = (PACKAGE.parent / Path(*module.split("."))).is_dir()
    for node in _walk_runtime(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                out.append((candidate if candidate in SOURCES else base, node.lineno))
    return out


def _layer(module: str) -> int:
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def _graph() -> dict[str, set[str]]:
    return {m: {i for i, _ in _imports(m, t) if i in SOURCES and i != m} for m, t in SOURCES.items()}


def _third_party(prefix: str) -> list[tuple[str, str, int]]:
    return [(m, i, line) for m, t in SOURCES.items() if m.startswith(prefix)
            for i, line in _imports(m, t) if not i.startswith("twistgw")]


class LayersTests(TestCase):
    def test_every_module_has_a_layer(self) -> None:
        assert len(SOURCES) > 20
        missing = sorted(m for m in SOURCES if _layer(m) < 0)
        assert not missing, f"modules outside every layer (add them to LAYERS and docs/architecture.md): {missing}"

    def test_layers_import_only_earlier_layers(self) -> None:
        wrong = []
        for module, tree in SOURCES.items():
            mine = _layer(module)
            for imported, line in _imports(module, tree):
                if imported in SOURCES and _layer(imported) > mine:
                    wrong.append(f"{module}:{line} ({LAYERS[mine][0]}) imports {imported}"
                                 f" ({LAYERS[_layer(imported)][0]})")
        assert not wrong, "\n".join(wrong)

    def test_no_import_cycles(self) -> None:
        graph = _graph()
        cycles = []
        state: dict[str, int] = {}  # 1 on the stack, 2 done
        stack: list[str] = []

        def visit(node: str) -> None:
            state[node] = 1
            stack.append(node)
            for nxt in sorted(graph[node]):
                if state.get(nxt) == 1:
                    cycles.append(stack[stack.index(nxt):] + [nxt])
                elif nxt not in state:
                    visit(nxt)
            stack.pop()
            state[node] = 2

        for node in sorted(graph):
            if node not in state:
                visit(node)
        assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)

    def test_the_cycle_check_finds_a_cycle(self) -> None:
        """The checker itself: a function-level import back is a cycle."""
        a = ast.parse("from twistgw.core import chain\n")
        b = ast.parse("def f():\n    from twistgw.core import snapshot\n")
        assert _imports("twistgw.core.snapshot", a) == [("twistgw.core.chain", 1)]
        assert _imports("twistgw.core.chain", b) == [("twistgw.core.snapshot", 2)]
        skipped = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import twistgw.cli\n")
        assert _imports("twistgw.core.chain", skipped) == [("typing", 1)]

    def test_config_imports_no_twisted(self) -> None:
        found = [f"{m}:{line} imports {i}" for m, i, line in _third_party("twistgw.config")
                 if i == "twisted" or i.startswith("twisted.")]
        assert not found, "\n".join(found)

    def test_core_imports_no_twisted_web_and_no_reactor(self) -> None:
        found = [f"{m}:{line} imports {i}" for m, i, line in _third_party("twistgw.core")
                 if i.startswith("twisted.web") or i == "twisted.internet.reactor"]
        assert not found, "\n".join(found)

    def test_the_engine_data_path_has_no_twisted_web(self) -> None:
        # issue 13: the engine is httptools on Twisted protocols; twisted.web
        # stays only for the admin endpoint and the dev servers (runtime/).
        found = [f"{m}:{line} imports {i}" for m, i, line in _third_party("twistgw.engine")
                 if i.startswith("twisted.web")]
        assert not found, "\n".join(found)
        assert any(i == "httptools" for _m, i, _l in _third_party("twistgw.engine.server"))
        assert any(i == "httptools" for _m, i, _l in _third_party("twistgw.engine.upstream"))

    def test_twisted_private_internals_only_in_engine(self) -> None:
        found = []
        for module, tree in SOURCES.items():
            if module.startswith("twistgw.engine"):
                continue
            for imported, line in _imports(module, tree):
                if imported.startswith("twisted") and any(p.startswith("_") for p in imported.split(".")):
                    found.append(f"{module}:{line} imports {imported}")
            for node in _walk_runtime(tree):
                if isinstance(node, ast.Attribute) and node.attr in TWISTED_PRIVATE_NAMES:
                    found.append(f"{module}:{node.lineno} reads .{node.attr}")
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                        and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                        and node.args[1].value in TWISTED_PRIVATE_NAMES):
                    found.append(f"{module}:{node.lineno} reads .{node.args[1].value}")
        assert not found, "\n".join(found)

    @pytest.mark.parametrize("module, banned", [
        ("twistgw.config.loader", ("twisted",)),
        ("twistgw.core.pipeline", ("twisted.web", "twisted.internet.reactor")),
    ])
    def test_importing_a_layer_loads_nothing_it_may_not_use(self, module: str, banned: tuple[str, ...]) -> None:
        """At run time too (the package ``__init__`` files included)."""
        code = (f"import sys, {module}\n"
                f"bad = sorted(m for m in sys.modules if m.startswith({banned!r}))\n"
                "print(bad)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": ""})
        assert out.stdout.strip() == "[]", out.stdout
