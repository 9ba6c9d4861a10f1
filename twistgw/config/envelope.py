"""The envelope every resource shares (``apiVersion``, ``kind``,
``metadata``), and :class:`Kind`, one row of the table of kinds twistgw
reads (:mod:`twistgw.config.kinds`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

from twistgw.api.fields import type_name, unknown_field
from twistgw.config.model import Source
from twistgw.config.reader import ResourceReader
from twistgw.options import is_kubernetes_name

__all__ = ["Envelope", "Kind", "Skipped", "TOP_LEVEL", "read_envelope"]

#: Top-level fields of every kind.
TOP_LEVEL = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})


@attrs.frozen
class Envelope:
    """A resource's identity and where it is written, read and checked
    before its kind's reader sees it."""

    kind: str
    namespace: str
    name: str
    #: the whole document (a mapping; its values are YAML, ``Any`` by nature)
    data: Mapping[str, Any]
    labels: Mapping[str, str]
    source: Source

    @property
    def spec(self) -> Any:
        """``spec`` as written (unchecked: the kind's reader checks it)."""
        return self.data.get("spec")

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@attrs.frozen
class Kind:
    """One kind twistgw reads: under which apiVersions, and by which reader.

    :ivar read: ``read(reader, envelope)`` → the resource (an immutable
        object), recording every problem on the reader.
    :ivar top_level: top-level fields besides ``apiVersion``, ``kind``,
        ``metadata``, ``spec`` and ``status`` (a Secret's ``data``...).
    :ivar needs_spec: whether ``spec`` is required.
    :ivar singleton: at most one resource of this kind (``Settings``).
    """

    name: str
    api_versions: tuple[str, ...]
    read: Callable[[ResourceReader, Envelope], object]
    top_level: frozenset[str] = frozenset()
    needs_spec: bool = True
    singleton: bool = False


class Skipped(Exception):
    """A document of an API group the gateway does not serve (the argument
    says what it is, for the note ``check`` prints)."""


def group_of(api: str) -> str:
    """``gateway.solo.io`` of ``gateway.solo.io/v1``; "" for the core ``v1``."""
    return api.rsplit("/", 1)[0] if "/" in api else ""


def read_envelope(r: ResourceReader, data: Any, kinds: Mapping[str, Kind],
                  groups: frozenset[str]) -> Envelope:
    """Check a document's envelope; sets ``r.resource``. Raises
    :class:`Skipped` for a kind twistgw does not read, or the reader's
    exception when the envelope is wrong (its problems are recorded).

    :param groups: the API groups the gateway serves.
    """
    if not isinstance(data, dict):
        raise r.fail((), f"a resource must be a mapping, got {type_name(data)}")
    kind = data.get("kind")
    api = data.get("apiVersion")
    if not isinstance(api, str) or not api:
        raise r.fail(("apiVersion",), f"is required (a string such as 'gateway.vendor.io/v1'), got {api!r}")
    group = group_of(api)
    if not isinstance(kind, str) or not kind:
        raise r.fail(("kind",), f"is required (a string such as 'VirtualService'), got {kind!r}")
    if group not in groups and not (group == "" and kind in kinds):
        raise Skipped(f"{kind} ({api})")
    if kind not in kinds:
        ours = sorted(k.name for k in kinds.values()
                      if any(v.startswith(group + "/") or v == api for v in k.api_versions))
        raise r.fail(("kind",), f"unknown kind {kind!r} in {api!r} (twistgw reads: {', '.join(ours)})")
    spec = kinds[kind]
    meta = data.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        ns_guess = meta.get("namespace", "default")
        r.resource = f"{kind} {ns_guess if isinstance(ns_guess, str) else '?'}/{meta['name']}"
    if api not in spec.api_versions:
        raise r.fail(("apiVersion",), f"{kind} needs apiVersion {' or '.join(repr(v) for v in spec.api_versions)},"
                     f" got {api!r}")
    bad = r.count()
    meta = r.mapping(data.get("metadata"), ("metadata",), required=("name",))
    name = r.string(meta["name"], ("metadata", "name"))
    namespace = r.string(meta.get("namespace", "default"), ("metadata", "namespace"))
    for value, field in ((name, "name"), (namespace, "namespace")):
        if not is_kubernetes_name(value):
            r.issue(("metadata", field),
                    f"{value!r} is not a valid Kubernetes name (lower-case letters, digits, '-', '.')")
    labels: dict[str, str] = {}
    with r.part():
        labels = r.labels(meta.get("labels"), ("metadata", "labels"))
    allowed_top = TOP_LEVEL | spec.top_level
    for key in data:
        if key not in allowed_top:
            r.issue((key,), unknown_field(key, sorted(allowed_top)))
    if spec.needs_spec and "spec" not in data:
        r.issue(("spec",), "is required")
    if r.count() > bad:
        raise r.invalid()
    r.resource = f"{kind} {namespace}/{name}"
    doc = r.doc
    return Envelope(kind, namespace, name, data, labels, Source(doc.file, doc.index, doc.line_of(()), doc.lines))
