"""Reading YAML files into documents, hardened and with line numbers.

Every ``*.yaml``/``*.yml`` file of a directory, each document with a map
from field path to line. Hardened against what a configuration directory
should never hold: duplicate keys (refused: a classic silent mistake), alias
bombs ("billion laughs", :data:`MAX_EXPANDED_NODES`) and deep flow nesting
(:data:`MAX_FLOW_NESTING`, where PyYAML turns quadratic). Pure: no Twisted.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import attrs
import yaml

from twistgw.api.fields import written_field, written_path
from twistgw.config.errors import ConfigIssue
from twistgw.config.names import is_yaml_file

__all__ = ["Document", "MAX_EXPANDED_NODES", "MAX_FLOW_NESTING", "parse_yaml_text", "read_documents"]


@attrs.frozen
class Document:
    """One YAML document of a file."""

    file: str
    #: its position in the file (0 for the first)
    index: int
    #: what it holds, as PyYAML builds it (a YAML value: ``Any`` by nature)
    data: Any
    #: field path → line (1-based) where it is written
    lines: Mapping[tuple[str | int, ...], int]

    def field_of(self, path: tuple[str | int, ...]) -> str:
        """``path`` as a problem names it (:func:`~twistgw.api.fields.written_field`)."""
        return written_field(self.lines.keys(), path)

    def line_of(self, path: tuple[str | int, ...]) -> int | None:
        """The line of ``path`` (a field may be written with its proto name:
        :func:`~twistgw.api.fields.written_path`), or of its nearest written parent."""
        path = written_path(self.lines.keys(), path)
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = path[:-1]


#: Most nodes a document may expand to once aliases are followed ("billion laughs").
MAX_EXPANDED_NODES = 200_000


def _expanded_size(node: yaml.Node) -> int:
    """Nodes in the document once every alias is expanded (memoised, so an
    alias bomb is measured without being expanded)."""
    sizes: dict[int, int] = {}

    def size(n: yaml.Node) -> int:
        known = sizes.get(id(n))
        if known is not None:
            return known
        sizes[id(n)] = 1  # a recursive alias counts once
        total = 1
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                total += size(k) + size(v)
        elif isinstance(n, yaml.SequenceNode):
            for v in n.value:
                total += size(v)
        total = min(total, MAX_EXPANDED_NODES + 1)
        sizes[id(n)] = total
        return total

    return size(node)


def _line_map(node: yaml.Node) -> dict[tuple[str | int, ...], int]:
    out: dict[tuple[str | int, ...], int] = {}
    seen: set[int] = set()

    def walk(n: yaml.Node, path: tuple[str | int, ...]) -> None:
        out[path] = n.start_mark.line + 1
        if id(n) in seen:  # an alias: its lines were recorded where it was defined
            return
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode):
                    out[path + (k.value,)] = k.start_mark.line + 1
                    walk(v, path + (k.value,))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, path + (i,))

    walk(node, ())
    return out


class _SafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (a classic silent mistake)."""


def _construct_mapping(loader: _SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            ) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    mapping: dict[Any, Any] = yaml.SafeLoader.construct_mapping(loader, node, deep=deep)
    return mapping


_SafeLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping
)


def read_documents(directory: str) -> tuple[list[Document], list[ConfigIssue]]:
    """Every YAML document of every ``*.yaml``/``*.yml`` file, sorted by name."""
    docs: list[Document] = []
    issues: list[ConfigIssue] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        return [], [ConfigIssue(f"cannot read the configuration directory: {exc.strerror}", file=directory)]
    for name in names:
        if not is_yaml_file(name):
            continue
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as f:
                text = f.read().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            issues.append(ConfigIssue(f"cannot read file: {exc}", file=path))
            continue
        docs_here, issues_here = parse_yaml_text(text, path)
        docs.extend(docs_here)
        issues.extend(issues_here)
    return docs, issues


#: PyYAML's parser slows down quadratically with flow-collection nesting
#: (3,000 levels of ``[`` take seconds); no real configuration nests this deep.
MAX_FLOW_NESTING = 100


def _flow_nesting(text: str) -> int:
    """Deepest ``[``/``{`` nesting outside quoted scalars and comments (approximate)."""
    depth = deepest = 0
    quote = ""
    prev = "\n"
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "\"'" and (prev in " \t\n[{,:" or depth):
            quote = c
        elif c == "#" and prev in " \t\n":
            j = text.find("\n", i)
            i = n if j == -1 else j
            prev = "\n"
            continue
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
        prev = c
        i += 1
    return deepest


def parse_yaml_text(text: str, filename: str = "<string>") -> tuple[list[Document], list[ConfigIssue]]:
    """Every document of ``text``, or no document and the problem that
    stopped the parser (a file is read whole or not at all)."""
    docs: list[Document] = []
    if _flow_nesting(text) > MAX_FLOW_NESTING:
        return [], [ConfigIssue(f"invalid YAML: brackets nested deeper than {MAX_FLOW_NESTING} levels",
                                file=filename)]
    try:
        loader = _SafeLoader(text)
        try:
            index = 0
            while loader.check_node():
                node = loader.get_node()
                if node is None:
                    continue
                if _expanded_size(node) > MAX_EXPANDED_NODES:
                    return [], [ConfigIssue(
                        f"document {index + 1} expands to more than {MAX_EXPANDED_NODES} nodes"
                        " through aliases; refusing it (an alias bomb?)",
                        file=filename, document=index, line=node.start_mark.line + 1)]
                data = loader.construct_document(node)
                if data is not None:
                    docs.append(Document(filename, index, data, _line_map(node)))
                index += 1
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        return [], [ConfigIssue(f"invalid YAML: {problem}", file=filename, line=line, document=None)]
    except RecursionError:
        return [], [ConfigIssue("invalid YAML: nested too deeply", file=filename)]
    return docs, []
