"""Writes docs/sdk.md, the plugin SDK's reference, from the installed
package: ``twistgw.sdk``'s sections (``SECTIONS``, every name of its
``__all__``) and docstrings, its hooks (``twistgw.sdk.hookspecs``), its test
helpers (``twistgw.sdk.testing``) and the extension points shipped plugins
export for other plugins (the ``extauth`` plugin's config types).

    python docs/sdk_reference.py          # rewrite docs/sdk.md
    python docs/sdk_reference.py --check  # exit 1 when docs/sdk.md is stale

``tests/docs/test_sdk_reference.py`` runs the check.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re
import sys
import typing
from pathlib import Path
from typing import Any, Iterable

TARGET = Path(__file__).resolve().parent / "sdk.md"

#: Extension points of shipped plugins: (package, title, what it is, its hook
#: specification module or None, the names of its contract).
EXTENSIONS: list[tuple[str, str, str, str | None, str]] = [
    ("twistgw_extauth", "The extauth plugin's config types",
     "The `extauth` plugin defines a hook of its own, `twistgw_extauth_config_types` (in"
     " `twistgw_extauth.hookspecs`, added with `twistgw_addhooks`), and exports its contract from"
     " `twistgw_extauth`: `from twistgw_extauth import ExtAuthConfigType, AuthAllow, AuthDeny, ...`. Not part of"
     " `twistgw.sdk`: a plugin that adds AuthConfig config types depends on the extauth plugin, as a pytest plugin"
     " that implements another plugin's hooks depends on that plugin. The guide is"
     " [plugins.md](plugins.md#authconfig-config-types).",
     "twistgw_extauth.hookspecs", "CONTRACT"),
]

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`~?([^`]+)`")
_MACHINERY = re.compile(r"\btwistgw\.(?:api|config|core|engine|runtime|_testing|_recording)\.(?:\w+\.)*")


def _dedent(doc: str) -> str:
    """A docstring without its source indentation: the closing line's, when
    the docstring ends on a line of its own (so that a literal block that is
    the only indented part keeps its indentation), else ``cleandoc``'s."""
    lines = doc.expandtabs().split("\n")
    if len(lines) > 1 and not lines[-1].strip():
        base = len(lines[-1])
        body = [line[base:] if line[:base].strip() == "" else line.lstrip() for line in lines[1:]]
        return "\n".join([lines[0].strip(), *body]).strip()
    return inspect.cleandoc(doc)


_FIELD = re.compile(r"^:(?:ivar|param|cvar|var|type) (\w+):\s*(.*)$|^:(returns?|raises?(?: [\w.]+)?):\s*(.*)$")


def _fields(text: str) -> str:
    """reST field lists (``:param x:``, ``:ivar x:``, ``:return:``,
    ``:raise E:``) as Markdown bullets, continuation lines joined."""
    out: list[str] = []
    in_field = False
    for line in text.split("\n"):
        m = _FIELD.match(line)
        if m:
            if m.group(1):
                out.append(f"* `{m.group(1)}`: {m.group(2)}")
            else:
                what = m.group(3).split(" ", 1)
                label = "returns" if what[0].startswith("return") else f"raises `{what[1]}`" if len(what) > 1 \
                    else "raises"
                out.append(f"* {label}: {m.group(4)}")
            in_field = True
        elif in_field and line.startswith(" ") and line.strip():
            out[-1] += " " + line.strip()
        else:
            in_field = False
            out.append(line)
    return "\n".join(out)


def _text(doc: str | None) -> str:
    """A docstring as Markdown: dedented, reST roles and double backquotes
    made code, field lists made bullets, literal blocks fenced."""
    if not doc:
        return "*(no description)*"
    text = _dedent(doc)
    text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    text = text.replace("``", "`")
    text = re.sub(r"^(\s*)::\s*$", "", text, flags=re.M)
    text = re.sub(r"::$", ":", text, flags=re.M)
    return _fields(_indented_blocks(text))


def _indented_blocks(text: str) -> str:
    """reST literal blocks (indented after a line ending in ``:``) as fenced code."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        if line.rstrip().endswith(":") and i + 2 < len(lines) and lines[i + 1] == "" \
                and lines[i + 2].startswith("    ") and not lines[i + 2].lstrip().startswith((":", "*")):
            block = []
            i += 2
            while i < len(lines) and (lines[i].startswith("    ") or lines[i] == ""):
                block.append(lines[i][4:])
                i += 1
            while block and not block[-1]:
                block.pop()
            out += ["", "```python", *block, "```", ""]
            continue
        i += 1
    return "\n".join(out).strip()


def _clean(text: str) -> str:
    return _MACHINERY.sub("", text)


def _signature(obj: Any) -> str:
    """``(a: int = 1, *, b: str) -> bool``, annotations as written."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    params = []
    star = False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            params.append("*")
            star = True
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name  # type: ignore[call-overload]
        if p.kind is p.VAR_POSITIONAL:
            star = True
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {_value(p.default)}"
        params.append(text)
    out = f"({', '.join(params)})"
    if sig.return_annotation is not sig.empty and sig.return_annotation not in ("None", None):
        out += f" -> {_annotation(sig.return_annotation)}"
    return _clean(out)


def _annotation(annotation: Any) -> str:
    if isinstance(annotation, typing.ForwardRef):  # a NamedTuple's fields under postponed annotations
        return annotation.__forward_arg__
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def _value(value: Any) -> str:
    if isinstance(value, (frozenset, set)):
        return "{" + ", ".join(sorted(repr(v) for v in value)) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    text = repr(value)
    if " at 0x" in text:  # an object without a repr of its own: its type
        return f"{type(value).__name__}(...)"
    return _clean(text)


def _members(cls: type) -> Iterable[tuple[str, Any]]:
    """Public methods and properties a twistgw class defines itself."""
    if not cls.__module__.startswith(("twistgw", "twistgw_")) or issubclass(cls, BaseException):
        return
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            yield name, member.__func__
        elif inspect.isfunction(member) or isinstance(member, property):
            yield name, member


def _entry(name: str, obj: Any, owner: str) -> list[str]:
    out = [f"### `{name}`", ""]
    if inspect.isclass(obj):
        bases = [b.__name__ for b in obj.__bases__ if b is not object and not b.__name__.startswith("_")]
        base = f"({', '.join(bases)})" if bases and issubclass(obj, BaseException) else ""
        head = f"class {name}{base}" + ("" if base else _signature(obj))
        out += ["```python", head, "```", "", _text(obj.__doc__), ""]
        for member_name, member in _members(obj):
            if isinstance(member, property):
                out += [f"* `{name}.{member_name}` (property): {_first(member.__doc__)}"]
            else:
                doc = member.__doc__ or _twin(obj, member_name)
                out += [f"* `{name}.{member_name}{_signature(member)}`: {_first(doc)}"]
        if out[-1].startswith("* "):
            out.append("")
    elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
        out += ["```python", f"def {name}{_signature(obj)}", "```", "", _text(obj.__doc__), ""]
    else:
        out += ["```python", f"{name} = {_value(obj)}", "```", ""]
        comment = _comment_of(name)
        if comment:
            out += [_text(comment), ""]
        elif " at 0x" in repr(obj) and type(obj).__doc__:
            out += [_text(type(obj).__doc__), ""]
    return out


def _comment_of(name: str) -> str | None:
    """The ``#:`` comment above ``NAME = ...`` (or ``NAME: T = ...``) in the
    gateway module that defines a value the SDK exports."""
    pattern = re.compile(rf"^((?:#:.*\n)+){re.escape(name)}\s*[:=]", re.M)
    for module_name, module in sorted(sys.modules.items()):
        if not module_name.startswith("twistgw.") or module_name.startswith("twistgw.sdk") or module is None:
            continue
        try:
            found = pattern.search(inspect.getsource(module))
        except (OSError, TypeError):
            continue
        if found:
            return "\n".join(line[2:].strip() for line in found.group(1).splitlines())
    return None


def _twin(cls: type, member_name: str) -> str | None:
    """For a method without a docstring: the docstring of the same-named
    method of another documented class of its module (``Fields.string``
    reads a field by name as ``FieldReader.string`` reads a value)."""
    module = sys.modules.get(cls.__module__)
    for other_name, other in sorted(vars(module).items()) if module else ():
        if inspect.isclass(other) and other is not cls and other.__module__ == cls.__module__:
            method = vars(other).get(member_name)
            if inspect.isfunction(method) and method.__doc__:
                return f"As `{other_name}.{member_name}`, for the field named `name`: {_first(method.__doc__)}"
    return None


def _first(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line."""
    if not doc:
        return "*(no description)*"
    first = inspect.cleandoc(doc).split("\n\n")[0].replace("\n", " ")
    return _ROLE.sub(lambda m: f"`{m.group(1)}`", first).replace("``", "`")


def _anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")


def render() -> str:
    sdk = importlib.import_module("twistgw.sdk")
    hookspecs = importlib.import_module("twistgw.sdk.hookspecs")
    testing = importlib.import_module("twistgw.sdk.testing")
    sections: dict[str, tuple[str, ...]] = sdk.SECTIONS
    listed = [n for names in sections.values() for n in names]
    missing = sorted(set(sdk.__all__) - set(listed) - {"__version__"})
    if missing or len(listed) != len(set(listed)):
        raise SystemExit(f"twistgw.sdk.SECTIONS must list each name of __all__ once; not listed: {missing}")
    parts = ["# The plugin SDK: reference", "",
             "<!-- Generated from the installed twistgw.sdk by docs/sdk_reference.py: do not edit by hand;"
             " run `python docs/sdk_reference.py` (tests/docs/test_sdk_reference.py fails when this is"
             " stale). -->", "",
             _text(sdk.__doc__), "",
             "Everything below is importable as `from twistgw.sdk import NAME`, or `sdk.NAME` after"
             " `from twistgw import sdk`, except the hooks (implemented by name, specified in"
             " `twistgw.sdk.hookspecs`) and the test helpers (`twistgw.sdk.testing`). A guide that builds a"
             " plugin with them is [plugins.md](plugins.md).", "", "## Contents", ""]
    titles = list(sections) + ["Hooks", "Test helpers"] + [e[1] for e in EXTENSIONS] + [SHIPPED]
    parts += [f"* [{t}](#{_anchor(t)})" for t in titles] + [""]
    for title, names in sections.items():
        parts += [f"## {title}", ""]
        for name in names:
            parts += _entry(name, getattr(sdk, name), "twistgw.sdk")
    parts += ["## Hooks", "", "`twistgw.sdk.hookspecs`: " + _text(hookspecs.__doc__), "",
              _text(hookspecs.HOW_HOOKS_ARE_CALLED), ""]
    for name in hookspecs.__all__:
        spec = getattr(hookspecs, name)
        opts = getattr(spec, "twistgw_spec", {}) or {}
        flags = [k for k in ("firstresult", "historic") if opts.get(k)]
        parts += [f"### `{name}`" + (f" ({', '.join(flags)})" if flags else ""), "",
                  "```python", f"def {name}{_signature(spec)}", "```", "", _text(spec.__doc__), ""]
    parts += ["## Test helpers", "", "`twistgw.sdk.testing`: " + _text(testing.__doc__), ""]
    for name in testing.__all__:
        parts += _entry(name, getattr(testing, name), "twistgw.sdk.testing")
    for package, title, what, spec_module, contract in EXTENSIONS:
        module = importlib.import_module(package)
        parts += [f"## {title}", "", what, ""]
        if spec_module is not None:
            specs = importlib.import_module(spec_module)
            for name in specs.__all__:
                spec = getattr(specs, name)
                parts += [f"### `{name}` (hook)", "", "```python", f"def {name}{_signature(spec)}", "```", "",
                          _text(spec.__doc__), ""]
        for name in getattr(module, contract):
            parts += _entry(name, getattr(module, name), package)
    parts += _shipped()
    text = "\n".join(parts)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.rstrip() + "\n"


SHIPPED = "What the shipped plugins read"


def _shipped() -> list[str]:
    """The table of the shipped plugins' declarations (``PluginInfo``
    options and settings), from the installed entry points."""
    from importlib.metadata import entry_points

    plugins = importlib.import_module("twistgw.core.plugins")
    host = plugins.PluginHost.create(load_entry_points=True)
    shipped = {ep.name for ep in entry_points(group="twistgw.plugins") if ep.dist is not None
               and ep.dist.name == "twistgw"}
    out = [f"## {SHIPPED}", "",
           "Each plugin declares the options keys and `Settings` sections it reads (`PluginInfo.options`,"
           " `PluginInfo.settings`); the loader refuses any other key or section, `twistgw plugins` prints"
           " them, and this table is made from them (default chain order):", "",
           "| plugin | order | reads | what it is |", "|---|---|---|---|"]
    for name in host.default_order():
        if name in shipped:
            info = host.infos[name]
            out.append(f"| `{name}` | {info.order} | {host.reads(name)} | {info.description} |")
    return out + [""]


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET} is stale: run python docs/sdk_reference.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
