"""The located field reader of configuration files: :class:`twistgw.api.fields.FieldReader`
with a sink that turns each problem into a :class:`ConfigIssue` carrying
the file, document, line, resource and field.

The resource readers (``virtualservices``, ``routetables``, ``upstreams``,
``secrets``, ``settings``) and the matchers all read through it; plugins
read their options through the same checks (:class:`twistgw.options.Problems`).
"""

from __future__ import annotations

from typing import Any

from twistgw.api.fields import FieldReader, Path
from twistgw.config.errors import ConfigIssue
from twistgw.config.model import Source
from twistgw.config.yamlfiles import Document

__all__ = ["ResourceReader", "document_of", "reference"]


class ResourceReader(FieldReader):
    """Reads one document; each problem becomes a located :class:`ConfigIssue`.

    :param resource: ``Kind namespace/name``, for messages ("" until the
        envelope is read).
    :param issues: where problems are appended (shared by every reader of
        one load, so they are reported together).
    """

    def __init__(self, doc: Document, resource: str, issues: list[ConfigIssue]) -> None:
        super().__init__(self._record)
        self.doc = doc
        self.resource = resource
        self.issues = issues

    def _record(self, path: Path, reason: str) -> None:
        self.issues.append(ConfigIssue(
            reason, file=self.doc.file, document=self.doc.index, line=self.doc.line_of(path),
            resource=self.resource, field=self.doc.field_of(path)))


def document_of(docs: list[Document], source: Source | None) -> Document:
    """The document ``source`` points at (an empty one when unknown), to
    report a problem found after reading (a dangling reference)."""
    for d in docs:
        if source is not None and d.file == source.file and d.index == source.document:
            return d
    return Document("", 0, None, {})


def reference(r: FieldReader, value: Any, path: Path, default_ns: str,
              with_port: bool = False) -> tuple[str, str, int]:
    """A ``{name, namespace}`` reference (``port`` too when ``with_port``):
    (name, namespace, port or 0); the namespace defaults to the referring
    resource's."""
    if not with_port:
        name, ns = r.reference(value, path, default_ns)
        return name, ns, 0
    m = r.mapping(value, path, ("name", "namespace", "port"), required=("name",))
    name = r.string(m["name"], path + ("name",))
    ns = r.string(m["namespace"], path + ("namespace",)) if m.get("namespace") is not None else default_ns
    return name, ns, r.port(m["port"], path + ("port",)) if "port" in m else 0
