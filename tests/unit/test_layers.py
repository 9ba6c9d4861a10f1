"""The layer rule of ``twistgw/``, read from the import graph of the source.

    api  →  tracing  →  config  →  core  →  engine  →  runtime  →  public surface

Each layer imports only itself and the layers before it; there is no import
cycle anywhere (imports inside functions count; only ``if TYPE_CHECKING:``
blocks, which never run, do not). ``config/`` imports no Twisted at all;
``core/`` nothing from ``twisted.web`` and never the reactor;
``tracing/`` (its exporter's thread does I/O with the standard library and
grpcio) imports no Twisted itself, and importing it loads none (nor grpcio,
until a gRPC collector is used), so the core may import it. Twisted's
private modules and attributes are read only in ``engine/``.

The same cycle rule holds inside each plugin package under ``plugins/``.
And no module, in ``twistgw/`` or ``plugins/``, reaches into another
module's private names, nor imports another package's private modules
(``twistgw_oidc`` uses ``twistgw_jwt.verify``, never ``twistgw_jwt._token``): ``obj._name`` (read, written, or through
``getattr``) is only for names the module itself defines (``self._x = ...``,
``def _x``, ``_X = ...``), and ``from m import _name`` only for modules.
``engine/``'s use of Twisted's privates is the one exception, listed name by
name with the reason in :data:`TWISTED_PRIVATE`.
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
    ("api", ("twistgw.api", "twistgw.regex", "twistgw.tls", "twistgw.stdtls", "twistgw.servertls", "twistgw.redis",
             "twistgw.redisslots", "twistgw.rediscluster")),
    ("tracing", ("twistgw.tracing",)),
    ("config", ("twistgw.config",)),
    ("core", ("twistgw.core",)),
    ("engine", ("twistgw.engine",)),
    ("runtime", ("twistgw.runtime",)),
    ("surface", ("twistgw", "twistgw.__main__", "twistgw.cli", "twistgw.tap", "twistgw._testing", "twistgw.sdk")),
]

#: Attributes of Twisted objects that ``engine/`` reads although they are
#: not Twisted's public API, each with its reason. Nothing else may read them.
TWISTED_PRIVATE: dict[str, str] = {
    "_interface": "engine/listening.py: the --workers supervisor binds the socket of a parsed"
                  " tcp:/tcp6: server endpoint itself (interface, port and backlog)",
    "_port": "engine/listening.py: as _interface",
    "_backlog": "engine/listening.py: as _interface",
    "_sslContextFactory": "engine/listening.py: an ssl: --listen endpoint's own certificate (Twisted's"
                          " parser reads it) becomes the default of an SNI listener over the same port",
    "_tempDataBuffer": "engine/wire.py: a write goes straight to the socket only when the TCP"
                       " transport buffers nothing (Twisted keeps unflushed small writes there)",
    "_tempDataLen": "engine/wire.py: as _tempDataBuffer (its byte count)",
    "_twistgw_streamlined": "engine/reactor.py: its own mark on the epoll reactor whose poll it"
                            " replaced, so that it is replaced once",
    "_NO_FILEDESC": "engine/reactor.py: the reason Twisted's own poll loop gives a selectable"
                    " whose descriptor is gone; the streamlined loop must disconnect it the same way",
}
TWISTED_PRIVATE_NAMES = set(TWISTED_PRIVATE)

#: Private names of the standard library that are its documented API.
STDLIB_PRIVATE: dict[tuple[str, str], str] = {
    ("os", "_exit"): "runtime/listeners.py: leave with a status after the reactor stopped,"
                     " when twist itself would exit 0 (documented in the os module)",
}

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


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


def _plugin_sources() -> dict[str, dict[str, ast.Module]]:
    """Each plugin package under ``plugins/`` (the source tree): its modules."""
    out: dict[str, dict[str, ast.Module]] = {}
    for package in sorted(p for p in PLUGINS.iterdir() if (p / "__init__.py").is_file()):
        modules = {}
        for path in sorted(package.rglob("*.py")):
            if "build" in path.relative_to(package).parts:
                continue
            parts = list(path.relative_to(PLUGINS).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = ast.parse(path.read_text(), str(path))
        out[package.name] = modules
    return out


PLUGIN_SOURCES = _plugin_sources()


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


def _imports(module: str, tree: ast.Module, sources: dict[str, ast.Module] | None = None,
             root: Path | None = None) -> list[tuple[str, int]]:
    """(imported module, line) for every import that runs, resolved to modules
    (``sources`` and ``root``: the tree the modules come from, ``twistgw/``'s
    by default)."""
    sources = SOURCES if sources is None else sources
    root = PACKAGE.parent if root is None else root
    out = []
    is_package = (root / Path(*module.split("."))).is_dir()
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
                out.append((candidate if candidate in sources else base, node.lineno))
    return out


def _layer(module: str) -> int:
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def _graph(sources: dict[str, ast.Module] | None = None, root: Path | None = None) -> dict[str, set[str]]:
    sources = SOURCES if sources is None else sources
    return {m: {i for i, _ in _imports(m, t, sources, root) if i in sources and i != m}
            for m, t in sources.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
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
    return cycles


def _defined_private_names(tree: ast.Module) -> set[str]:
    """The private names a module defines: its functions, classes and
    assignments at any level, and the attributes it sets on ``self``/``cls``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            names.add(node.attr)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                for t in node.targets):
            names.update(c.value for c in ast.walk(node.value)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _is_module(name: str) -> bool:
    """Whether ``name`` is an importable module outside our trees (``re._parser``)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _reach_ins(module: str, tree: ast.Module, sources: dict[str, ast.Module],
               root: Path | None = None) -> list[str]:
    """``module:line obj._name`` for every private name of another module it touches."""
    own = _defined_private_names(tree)
    engine = module.startswith("twistgw.engine")
    found = []
    for node in _walk_runtime(tree):
        name, target = None, None
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            name, target = node.attr, node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _is_private(node.args[1].value)):
            name, target = node.args[1].value, node.args[0]
        if name is None or target is None:
            continue
        if isinstance(target, ast.Name) and (target.id in ("self", "cls")
                                             or (target.id, name) in STDLIB_PRIVATE):
            continue
        if name in own or (engine and name in TWISTED_PRIVATE):
            continue
        found.append(f"{module}:{node.lineno} {ast.unparse(target)}.{name}")
    for node in _walk_runtime(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                if not _is_private(alias.name):
                    continue
                resolved = dict(_imports(module, ast.Module(body=[ast.ImportFrom(
                    module=node.module, names=[alias], level=node.level, lineno=node.lineno)],
                    type_ignores=[]), sources, root))
                if any(i.endswith("." + alias.name) for i in resolved) or _is_module(
                        f"{node.module}.{alias.name}"):
                    continue  # a module is fine: private to its package, not to a module
                if engine and (node.module or "").startswith("twisted") and alias.name in TWISTED_PRIVATE:
                    continue
                found.append(f"{module}:{node.lineno} from {node.module or '.'} import {alias.name}")
    found += _foreign_private_modules(module, tree)
    return list(dict.fromkeys(found))


def _foreign_private_modules(module: str, tree: ast.Module) -> list[str]:
    """``module:line import m`` for every import of a private module (a
    ``_``-part in its dotted name) of another of our packages: ``twistgw``
    or a plugin package. A package's ``_``-modules are its own; another
    package uses what it made public (``twistgw_jwt.verify``)."""
    own = module.split(".")[0]
    ours = {"twistgw"} | set(PLUGIN_SOURCES)
    found = []
    for node in _walk_runtime(tree):
        if isinstance(node, ast.Import):
            names = [(alias.name, f"import {alias.name}") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [(f"{node.module}.{alias.name}", f"from {node.module} import {alias.name}")
                     for alias in node.names]
        else:
            continue  # relative imports stay inside their own package
        for dotted, text in names:
            parts = dotted.split(".")
            if parts[0] != own and parts[0] in ours and any(_is_private(p) for p in parts[1:]):
                found.append(f"{module}:{node.lineno} {text}")
    return found


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
        cycles = _cycles(_graph())
        assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)

    def test_no_import_cycles_inside_a_plugin(self) -> None:
        """Each package under plugins/, function-level imports included."""
        assert {"twistgw_jwt", "twistgw_ldap", "twistgw_rbac"} <= set(PLUGIN_SOURCES)
        cycles = []
        for modules in PLUGIN_SOURCES.values():
            cycles += _cycles(_graph(modules, PLUGINS))
        assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)

    def test_the_plugin_cycle_check_finds_a_cycle(self) -> None:
        modules = {"p": ast.parse(""), "p._a": ast.parse("from p import _b\n"),
                   "p._b": ast.parse("def f():\n    from p._a import x\n")}
        assert _cycles(_graph(modules, PLUGINS / "nowhere")) == [["p._a", "p._b", "p._a"]]

    def test_no_private_reach_ins_across_modules(self) -> None:
        found = []
        for module, tree in SOURCES.items():
            found += _reach_ins(module, tree, SOURCES)
        for modules in PLUGIN_SOURCES.values():
            for module, tree in modules.items():
                found += _reach_ins(module, tree, modules, PLUGINS)
        assert not found, "private names of another module:\n" + "\n".join(found)

    def test_the_reach_in_check(self) -> None:
        """What counts: another module's private attribute, read or written,
        directly or by getattr, and a private name imported from a module."""
        tree = ast.parse(
            "import os\nfrom twistgw.core import _shared, pipeline\nfrom twistgw import _helpers\n"
            "class C:\n    __slots__ = ('_slot',)\n    def __init__(self):\n        self._mine = 1\n"
            "    def f(self, other, proto):\n        other._mine, other._slot = self._x, cls_of._y\n"
            "        proto._deadline = 1\n        getattr(proto, '_peer')\n        os._exit(3)\n"
            "        return other.__class__, _local()\n"
            "def _local():\n    pass\n")
        sources = {"twistgw.core.x": tree, "twistgw.core.pipeline": tree, "twistgw._helpers": tree}
        assert sorted(f.split(" ", 1)[1] for f in _reach_ins("twistgw.core.x", tree, sources)) == [
            "cls_of._y", "from twistgw.core import _shared", "proto._deadline", "proto._peer"]

    def test_the_reach_in_check_across_packages(self) -> None:
        """Another package's private module, however imported, is a reach-in;
        its public modules and one's own private modules are not."""
        tree = ast.parse(
            "from twistgw_jwt import _token as T\nfrom twistgw_jwt._remote import RemoteKeySet\n"
            "import twistgw_jwt._keys\nfrom twistgw._private import x\n"
            "from twistgw_jwt.verify import parse_token\nimport twistgw_jwt\n"
            "from twistgw_oidc._http import Client\nfrom . import _flow\n"
            "def f():\n    from twistgw_jwt._authn import claim_text\n")
        sources = {"twistgw_oidc._x": tree, "twistgw_oidc._flow": tree}
        found = _reach_ins("twistgw_oidc._x", tree, sources, PLUGINS)
        assert sorted(f.split(" ", 1)[1] for f in found) == [
            "from twistgw._private import x", "from twistgw_jwt import _token",
            "from twistgw_jwt._authn import claim_text", "from twistgw_jwt._remote import RemoteKeySet",
            "import twistgw_jwt._keys"]

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
        assert any(i == "httptools" for _m, i, _l in _third_party("twistgw.engine.connection"))
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
                if (isinstance(node, ast.Attribute) and node.attr in TWISTED_PRIVATE_NAMES
                        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                    found.append(f"{module}:{node.lineno} reads .{node.attr}")
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                        and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                        and node.args[1].value in TWISTED_PRIVATE_NAMES):
                    found.append(f"{module}:{node.lineno} reads .{node.args[1].value}")
        assert not found, "\n".join(found)

    def test_tracing_imports_no_twisted(self) -> None:
        found = [f"{m}:{line} imports {i}" for m, i, line in _third_party("twistgw.tracing")
                 if i == "twisted" or i.startswith("twisted.")]
        assert not found, "\n".join(found)

    @pytest.mark.parametrize("module, banned", [
        ("twistgw.config.loader", ("twisted",)),
        ("twistgw.tracing.span", ("twisted",)),
        ("twistgw.tracing.export", ("twisted", "grpc")),
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
