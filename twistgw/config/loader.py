"""Read a configuration directory into resources, with errors a person can act on.

The dispatcher: YAML files (:mod:`~twistgw.config.yamlfiles`) → each
document's envelope (:mod:`~twistgw.config.envelope`) → its kind's reader
(the table in :mod:`~twistgw.config.kinds`) → resolution across resources
(:mod:`~twistgw.config.resolution`, delegation in
:mod:`~twistgw.config.routetables`). Pure: reads files, builds frozen
objects, never touches the reactor.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from twistgw.api.fields import Invalid
from twistgw.api.types import AuthConfigInfo, SecretInfo
from twistgw.config.envelope import Envelope, Skipped, read_envelope
from twistgw.config.errors import ConfigError, ConfigIssue
from twistgw.config.gloo import CORE_OPTION_KEYS, GLOO_UNSUPPORTED
from twistgw.config.kinds import API_VERSIONS, KINDS, OUR_GROUPS
from twistgw.config.model import (
    EndpointsResource,
    Pod,
    RouteTable,
    Service,
    Source,
    UpstreamResource,
    VirtualService,
)
from twistgw.config.names import is_yaml_file
from twistgw.config.reader import ResourceReader
from twistgw.config.resolution import (
    Config,
    Unresolvable,
    check_references,
    resolve_listener_tls,
    check_upstream_groups,
    check_regex_sizes,
    locate,
    resolve_upstreams,
)
from twistgw.config.routetables import Flattener
from twistgw.config.optionkinds import merge_delegated_options
from twistgw.config.settings import regex_max_program_size
from twistgw.config.yamlfiles import MAX_FLOW_NESTING, Document, parse_yaml_text, read_documents

__all__ = [
    "API_VERSIONS", "CORE_OPTION_KEYS", "Config", "ConfigError", "ConfigIssue", "Document", "GLOO_UNSUPPORTED",
    "MAX_FLOW_NESTING", "OUR_GROUPS", "build_config", "load_directory", "load_text", "parse_yaml_text",
    "read_documents",
]


def load_directory(directory: str, keep_going: bool = False) -> Config:
    """Read and cross-check a configuration directory.

    :param keep_going: return what could be read, with every problem in
        ``Config.issues``, instead of raising; :func:`twistgw.core.snapshot.build_snapshot`
        then adds the plugins' problems and raises them all at once.
    """
    docs, issues = read_documents(directory)
    if issues and not keep_going:
        raise ConfigError(issues)
    if not issues and not any(is_yaml_file(n) for n in os.listdir(directory)):
        # Almost always an accident (a failed copy, a ConfigMap mount in
        # flux); serving "nothing" would turn every route into a 404.
        raise ConfigError([ConfigIssue(
            "the configuration directory has no *.yaml or *.yml files", file=directory)])
    config = build_config(docs, keep_going=keep_going, partial=bool(issues))
    return attrs.evolve(config, directory=os.path.abspath(directory), issues=tuple(issues) + config.issues)


def load_text(text: str, filename: str = "<string>", keep_going: bool = False) -> Config:
    docs, issues = parse_yaml_text(text, filename)
    if issues and not keep_going:
        raise ConfigError(issues)
    config = build_config(docs, keep_going=keep_going, partial=bool(issues))
    return attrs.evolve(config, issues=tuple(issues) + config.issues)


@attrs.define
class _Read:
    """Every document read, before resolution."""

    partial: bool
    #: kind → (namespace, name) → the resource its reader returned
    by_kind: dict[str, dict[tuple[str, str], object]] = attrs.field(factory=dict)
    #: (kind, namespace, name) → where it is written (a duplicate is refused)
    sources: dict[tuple[str, str, str], Source] = attrs.field(factory=dict)
    #: (kind, namespace, name) of resources declared but rejected: references
    #: to them are not reported a second time as dangling
    invalid: set[tuple[str, str, str]] = attrs.field(factory=set)
    skipped: list[str] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        if self.partial:
            self.invalid = Unresolvable()


def build_config(docs: list[Document], keep_going: bool = False, partial: bool = False) -> Config:
    """Every resource of ``docs``, cross-checked. Raises ConfigError listing
    every problem (or, with ``keep_going``, returns them in ``issues``).

    :param partial: some documents could not be read (invalid YAML), so
        references are not checked: what they name may be in those.
    """
    issues: list[ConfigIssue] = []
    read = _Read(partial)
    for doc in docs:
        _read_document(doc, read, issues)
    config = _assemble(read)
    issue = locate(issues)
    resolved = resolve_upstreams(config, issue, read.invalid, partial)
    config = attrs.evolve(config, upstreams=resolved.upstreams, subset_specs=resolved.subset_specs,
                          endpoint_labels=resolved.endpoint_labels)
    check_regex_sizes(config, issue, regex_max_program_size(config.settings))  # routes as written
    # Gloo's delegated options (VirtualHostOption, RouteOption), before delegation.
    merged_vs, merged_tables = merge_delegated_options(config.virtual_services, config.route_tables,
                                                       config.resources, read.invalid, issue, partial)
    config = attrs.evolve(config, virtual_services=merged_vs, route_tables=merged_tables)
    # Delegation: each virtual service's route tree, flattened.
    flattener = Flattener(config.route_tables, {(n, m) for k, n, m in read.invalid if k == "RouteTable"},
                          issue, partial)
    config = attrs.evolve(config, virtual_services=tuple(
        attrs.evolve(vs, routes=flattener.flatten(vs)) for vs in config.virtual_services))
    config = attrs.evolve(config, route_tables_used=frozenset(flattener.used))
    config = attrs.evolve(config, virtual_services=resolve_listener_tls(config, issue, read.invalid, partial))
    check_references(config, issue, read.invalid)
    check_upstream_groups(config, issue, read.invalid)
    if issues and not keep_going:
        raise ConfigError(issues)
    return attrs.evolve(config, issues=tuple(issues),
                        invalid=read.invalid if partial else frozenset(read.invalid))


def _read_document(doc: Document, read: _Read, issues: list[ConfigIssue]) -> None:
    """One document: its envelope, then its kind's reader."""
    reader = ResourceReader(doc, "", issues)
    try:
        res = read_envelope(reader, doc.data, KINDS, OUR_GROUPS)
    except Skipped as exc:
        read.skipped.append(f"{doc.file}: document {doc.index + 1} (line {doc.line_of(())}):"
                            f" skipped {exc.args[0]}: not an API group twistgw serves")
        return
    except Invalid:  # the envelope's problems are recorded
        _mark_invalid(doc.data, read)
        return
    kind = KINDS[res.kind]
    reader.proto_names = kind.proto_names
    key3 = (res.kind, res.namespace, res.name)
    if key3 in read.sources:
        reader.issue(("metadata", "name"), f"duplicate resource: also defined at {read.sources[key3]}")
        return
    read.sources[key3] = res.source
    same_kind = read.by_kind.setdefault(res.kind, {})
    before = reader.count()
    try:
        if kind.singleton and same_kind:
            other = read.sources[(res.kind,) + next(iter(same_kind))]
            raise reader.fail((), f"only one {res.kind} resource is allowed; another is at {other}")
        same_kind[res.key] = kind.read(reader, res)
    except Invalid:
        read.invalid.add(key3)
        return
    if reader.count() > before:
        read.invalid.add(key3)


def _mark_invalid(data: Any, read: _Read) -> None:
    """A resource whose envelope is wrong: remember what it claims to be,
    so references to it are not reported again as dangling."""
    data = data if isinstance(data, dict) else {}
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    if isinstance(data.get("kind"), str) and isinstance(meta.get("name"), str):
        ns = meta.get("namespace", "default")
        read.invalid.add((data["kind"], ns if isinstance(ns, str) else "", meta["name"]))


def _assemble(read: _Read) -> Config:
    """The :class:`Config` of what was read (nothing resolved yet)."""
    by = read.by_kind

    def of(kind: str, cls: type[Any]) -> dict[tuple[str, str], Any]:
        found = by.get(kind, {})
        assert all(isinstance(v, cls) for v in found.values())
        return found

    settings: dict[str, Any] = {}
    settings_source = None
    for key, value in by.get("Settings", {}).items():
        assert isinstance(value, dict)
        settings, settings_source = value, read.sources[("Settings",) + key]
    return Config(
        tuple(of("VirtualService", VirtualService).values()), of("Service", Service),
        of("Endpoints", EndpointsResource), of("Upstream", UpstreamResource), of("Secret", SecretInfo),
        of("AuthConfig", AuthConfigInfo), {}, settings, settings_source,
        route_tables=of("RouteTable", RouteTable), skipped=tuple(read.skipped), sources=read.sources,
        pods=of("Pod", Pod), resources={k: dict(v) for k, v in by.items()},
    )


__all__ += ["Envelope", "Unresolvable"]
