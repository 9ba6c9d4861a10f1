"""The envelope every resource shares (``apiVersion``, ``kind``,
``metadata``), and :class:`Kind`, one row of the table of kinds twistgw
reads (:mod:`twistgw.config.kinds`).
"""

from __future__ import annotations

import difflib
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
    :ivar proto_names: whether its fields may be written with their proto
        names too (``num_retries``), as Gloo's resources may (protobuf's JSON
        mapping); not Kubernetes' own kinds (one spelling: Go's JSON tags).
    """

    name: str
    api_versions: tuple[str, ...]
    read: Callable[[ResourceReader, Envelope], object]
    top_level: frozenset[str] = frozenset()
    needs_spec: bool = True
    singleton: bool = False
    proto_names: bool = True


#: API groups of other projects that define kinds with the names of ours
#: (Istio's VirtualService, Knative's Service and Route): such a document is
#: someone else's resource, skipped with a note like any other group's.
FOREIGN_TWINS = frozenset({"networking.istio.io", "serving.knative.dev"})

#: Gloo's own kinds in the groups twistgw reads that it does not implement,
#: each with why (not an "unknown kind": Gloo users write them)
GLOO_KINDS_REFUSED = {
    "MatchableHttpGateway": "hybrid gateways are not supported; use one Gateway with httpGateway per listener",
    "MatchableTcpGateway": "TCP proxying is out of twistgw's scope (an HTTP gateway)",
    "HttpListenerOption": "options attached to listeners by targetRefs are not supported; write them in the"
                          " Gateway's httpGateway.options (httpConnectionManagerSettings, httpLocalRatelimit)",
    "ListenerOption": "options attached to listeners by targetRefs are not supported; write them in the Gateway's"
                      " spec.options (accessLoggingService)",
    "Proxy": "Gloo's generated Proxy is not read; twistgw serves the Gateways and VirtualServices themselves",
}


def _foreign_group(kind: str, api: str, versions: tuple[str, ...]) -> str:
    """Why a kind twistgw reads, under an API group it does not, is an error
    (a typo: the gateway would otherwise serve without it), with the
    nearest apiVersion it reads."""
    close = difflib.get_close_matches(api, versions, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    return (f"{api!r} is not an API group twistgw reads, and {kind} is a kind it reads: {hint}(twistgw reads"
            f" {kind} as {' or '.join(versions)}; a {kind} of another project's group is skipped only for"
            f" {', '.join(sorted(FOREIGN_TWINS))})")


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
        if kind in kinds and group not in FOREIGN_TWINS:
            raise r.fail(("apiVersion",), _foreign_group(kind, api, kinds[kind].api_versions))
        raise Skipped(f"{kind} ({api})")
    if kind not in kinds:
        if kind in GLOO_KINDS_REFUSED:
            raise r.fail(("kind",), f"Gloo's {kind} is not supported by twistgw: {GLOO_KINDS_REFUSED[kind]}")
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
