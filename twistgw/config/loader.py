"""Read a configuration directory into resources, with errors a person can act on.

Pure: reads files, builds frozen objects, never touches the reactor.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
from typing import Any, Iterator, Mapping

import attrs
import yaml

from twistgw.api.types import AuthConfigInfo, Endpoint, SecretInfo, UpstreamInfo, path_text
from twistgw.config.matchers import Matcher, parse_matcher
from twistgw.config.names import host_without_port, is_loopback_endpoint, is_yaml_file
from twistgw.options import is_kubernetes_name, parse_duration, unknown_field
from twistgw.options import type_name as _type_name
from twistgw.config.model import (
    Delegate,
    DirectResponse,
    EndpointsResource,
    EndpointSubset,
    Pod,
    KubeRef,
    Route,
    RouteTable,
    Selector,
    Service,
    ServicePort,
    Source,
    SubsetSpec,
    UpstreamRef,
    UpstreamResource,
    VirtualService,
)
from twistgw.config.routetables import OPERATORS, Flattener

#: kind → the apiVersions it is read under: ours first, then Gloo Edge's own
#: group as an alias, so Gloo manifests load unchanged.
API_VERSIONS: dict[str, tuple[str, ...]] = {
    "VirtualService": ("gateway.vendor.io/v1", "gateway.solo.io/v1"),
    "RouteTable": ("gateway.vendor.io/v1", "gateway.solo.io/v1"),
    "Upstream": ("core.vendor.io/v1", "gloo.solo.io/v1"),
    "AuthConfig": ("enterprise.gateway.vendor.io/v1", "enterprise.gloo.solo.io/v1"),
    "Secret": ("v1",),
    "Service": ("v1",),
    "Endpoints": ("v1",),
    "Pod": ("v1",),
    "Settings": ("gateway.vendor.io/v1",),
}

#: API groups the gateway serves: a document of any other group (a
#: Deployment, a ConfigMap, a ratelimit.solo.io resource...) is skipped with a
#: note, as a controller ignores kinds it does not watch. The core group
#: (``v1``) is shared: its kinds other than Secret, Service, Endpoints and Pod are
#: skipped too; an unknown kind in any other of these groups is an error.
OUR_GROUPS = frozenset(v.rsplit("/", 1)[0] for versions in API_VERSIONS.values()
                       for v in versions if "/" in v)

#: Options keys the core itself reads; every other key names a plugin.
CORE_OPTION_KEYS = frozenset({"pluginOrder", "prefixRewrite", "timeout"})



@attrs.frozen
class ConfigIssue:
    """One thing wrong with a configuration, located as precisely as known."""

    reason: str
    file: str = ""
    document: int | None = None
    line: int | None = None
    resource: str = ""
    field: str = ""

    def __str__(self) -> str:
        parts = []
        if self.file:
            where = self.file
            if self.document is not None:
                where += f": document {self.document + 1}"
            if self.line is not None:
                where += f", line {self.line}"
            parts.append(where)
        if self.resource:
            parts.append(self.resource)
        if self.field:
            parts.append(self.field)
        parts.append(self.reason)
        return ": ".join(parts)


class ConfigError(Exception):
    """The configuration was rejected; ``issues`` says every reason found."""

    def __init__(self, issues: list[ConfigIssue] | tuple[ConfigIssue, ...]) -> None:
        # Each problem once, in file and line order (a problem without a
        # file, such as a plugin's settings, first).
        unique = list(dict.fromkeys(issues))
        unique.sort(key=lambda i: (i.file, -1 if i.document is None else i.document, i.line or 0))
        self.issues = unique
        super().__init__("\n".join(str(i) for i in unique))


# ---------------------------------------------------------------------------
# Reading YAML with line numbers
# ---------------------------------------------------------------------------


@attrs.frozen
class Document:
    file: str
    index: int
    data: Any
    lines: Mapping[tuple[str | int, ...], int]

    def line_of(self, path: tuple[str | int, ...]) -> int | None:
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


def _construct_mapping(loader: _SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            )
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


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


# ---------------------------------------------------------------------------
# A small typed reader that records located issues
# ---------------------------------------------------------------------------


class _Invalid(Exception):
    pass


class _Reader:
    def __init__(self, doc: Document, resource: str, issues: list[ConfigIssue]) -> None:
        self.doc = doc
        self.resource = resource
        self.issues = issues

    def issue(self, path: tuple[str | int, ...], reason: str) -> None:
        self.issues.append(
            ConfigIssue(
                reason,
                file=self.doc.file,
                document=self.doc.index,
                line=self.doc.line_of(path),
                resource=self.resource,
                field=path_text(path),
            )
        )

    def fail(self, path: tuple[str | int, ...], reason: str) -> _Invalid:
        self.issue(path, reason)
        return _Invalid()

    def invalid(self) -> _Invalid:
        """Give up on the current part; its problems are already recorded."""
        return _Invalid()

    def count(self) -> int:
        """Problems recorded so far (compare before and after a part)."""
        return len(self.issues)

    @contextlib.contextmanager
    def part(self) -> Iterator[None]:
        """Check one independent part of a resource: a problem in it is
        recorded and checking goes on with the next part, so ``check``
        reports every problem of a resource at once."""
        try:
            yield
        except _Invalid:
            pass

    def mapping(self, value: Any, path: tuple[str | int, ...], allowed: set[str] | frozenset[str] | None = None,
                required: tuple[str, ...] = ()) -> dict:
        """A mapping; records every unknown and every missing field, and
        gives up (raises) only when it is not a mapping or misses a field."""
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a mapping, got {_type_name(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.fail(path, f"keys must be strings, got {key!r}")
        if allowed is not None:
            for key in value:
                if key not in allowed:
                    self.issue(path + (key,), unknown_field(key, sorted(allowed)))
        missing = [key for key in required if key not in value]
        for key in missing:
            self.issue(path + (key,), "is required")
        if missing:
            raise _Invalid()
        return value

    def boolean(self, value: Any, path: tuple[str | int, ...]) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"must be true or false, got {_type_name(value)}")
        return value

    def string(self, value: Any, path: tuple[str | int, ...], nonempty: bool = True) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, got {_type_name(value)}")
        if nonempty and not value:
            raise self.fail(path, "must not be empty")
        return value

    def integer(self, value: Any, path: tuple[str | int, ...], lo: int | None = None, hi: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, got {_type_name(value)}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise self.fail(path, f"must be between {lo} and {hi}, got {value}")
        return value

    def port(self, value: Any, path: tuple[str | int, ...]) -> int:
        return self.integer(value, path, 1, 65535)

    def sequence(self, value: Any, path: tuple[str | int, ...], nonempty: bool = False) -> list:
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, got {_type_name(value)}")
        if nonempty and not value:
            raise self.fail(path, "must not be empty")
        return value




# ---------------------------------------------------------------------------
# Resources
# ---------------------------------------------------------------------------


@attrs.frozen
class Config:
    """All resources of one configuration directory, cross-checked."""

    virtual_services: tuple[VirtualService, ...]
    services: Mapping[tuple[str, str], Service]
    endpoints: Mapping[tuple[str, str], EndpointsResource]
    upstream_resources: Mapping[tuple[str, str], UpstreamResource]
    secrets: Mapping[tuple[str, str], SecretInfo]
    auth_configs: Mapping[tuple[str, str], AuthConfigInfo]
    upstreams: Mapping[tuple[str, str], UpstreamInfo]
    #: ``Settings.spec``: gateway-wide sections keyed by plugin name.
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    settings_source: Source | None = None
    #: the directory the configuration was read from ("" for text)
    directory: str = ""
    route_tables: Mapping[tuple[str, str], RouteTable] = attrs.field(factory=dict)
    #: documents skipped because the gateway does not serve their API group
    skipped: tuple[str, ...] = ()
    #: problems found (only when loaded with ``keep_going``; otherwise raised)
    issues: tuple[ConfigIssue, ...] = ()
    #: (kind, namespace, name) of resources declared but invalid (an
    #: :class:`Unresolvable` when some file could not be parsed)
    invalid: frozenset[tuple[str, str, str]] | set[tuple[str, str, str]] = frozenset()
    #: (kind, namespace, name) → where each resource was read (for locating
    #: a plugin's problems inside a resource its options refer to)
    sources: Mapping[tuple[str, str, str], Source] = attrs.field(factory=dict)
    pods: Mapping[tuple[str, str], Pod] = attrs.field(factory=dict)
    #: (namespace, name) of an Upstream with ``kube.subsetSpec`` → the spec,
    #: and the pod labels of each of its endpoints (in ``upstreams`` order)
    subset_specs: Mapping[tuple[str, str], SubsetSpec] = attrs.field(factory=dict)
    endpoint_labels: Mapping[tuple[str, str], tuple[Mapping[str, str], ...]] = attrs.field(factory=dict)

    def select(self, key: tuple[str, str], subset: tuple[tuple[str, str], ...]) -> UpstreamInfo:
        """The endpoints of Upstream ``key`` a route with ``subset`` sends to,
        as Envoy's subset load balancer picks them: those whose pod labels
        carry every value (a missing label counts as ""); when none does,
        or the route names no subset, the spec's fallback (every endpoint,
        none, or the default subset)."""
        info = self.upstreams[key]
        spec = self.subset_specs.get(key)
        if spec is None:
            return info
        labels = self.endpoint_labels[key]

        def pick(values: tuple[tuple[str, str], ...]) -> tuple[Endpoint, ...]:
            return tuple(ep for ep, lab in zip(info.endpoints, labels)
                         if all(lab.get(k, "") == v for k, v in values))

        chosen = pick(subset) if subset else ()
        if not chosen:
            if spec.fallback == "ANY_ENDPOINT":
                chosen = info.endpoints
            elif spec.fallback == "DEFAULT_SUBSET":
                chosen = pick(spec.default)
        return UpstreamInfo(info.namespace, info.name, chosen, subset)

    def resolve_kube(self, name: str, namespace: str, port: int) -> UpstreamInfo:
        """A Service port → the Endpoints addresses on the target port."""
        info, _ = self.labelled_kube(name, namespace, port)
        return info

    def labelled_kube(self, name: str, namespace: str,
                      port: int) -> tuple[UpstreamInfo, tuple[Mapping[str, str], ...]]:
        """:meth:`resolve_kube`, with the labels of each endpoint's pod (its
        ``targetRef`` Pod, else the Pod with its IP; {} when neither is here)."""
        service = self.services.get((namespace, name))
        if service is None:
            raise KeyError(f"no Service {namespace}/{name}")
        sport = next((p for p in service.ports if p.port == port), None)
        if sport is None:
            known = ", ".join(str(p.port) for p in service.ports)
            raise KeyError(f"Service {namespace}/{name} has no port {port} (ports: {known})")
        upstream_name = KubeRef(name, namespace, port).upstream_key()[1]
        eps = self.endpoints.get((namespace, name))
        found: list[Endpoint] = []
        labels: list[Mapping[str, str]] = []
        by_ip = {p.ip: p for p in self.pods.values() if p.ip and p.namespace == namespace}
        if eps is not None:
            for subset in eps.subsets:
                target = _subset_port(subset, sport)
                if target is None:
                    continue
                for i, addr in enumerate(subset.addresses):
                    ref = subset.pods[i] if i < len(subset.pods) else None
                    pod = self.pods.get(ref) if ref is not None else by_ip.get(addr)
                    found.append(Endpoint(addr, target))
                    labels.append(pod.labels if pod is not None else {})
        return UpstreamInfo(namespace, upstream_name, tuple(found)), tuple(labels)


def _subset_port(subset: EndpointSubset, sport: ServicePort) -> int | None:
    # Kubernetes names each Endpoints port after the Service port it serves.
    for pname, pnum in subset.ports:
        if pname == sport.name:
            return pnum
    if len(subset.ports) == 1 and not subset.ports[0][0]:
        return subset.ports[0][1]
    if isinstance(sport.target_port, int):
        for _, pnum in subset.ports:
            if pnum == sport.target_port:
                return pnum
    return None


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


class Unresolvable(set):
    """The ``invalid`` set of a configuration some file of which could not be
    parsed: any resource may be in that file, so no reference is reported
    as dangling (the YAML error is; fix it first)."""

    def __contains__(self, item: object) -> bool:
        return True


def build_config(docs: list[Document], keep_going: bool = False, partial: bool = False) -> Config:
    """Every resource of ``docs``, cross-checked. Raises ConfigError listing
    every problem (or, with ``keep_going``, returns them in ``issues``).

    :param partial: some documents could not be read (invalid YAML), so
        references are not checked: what they name may be in those.
    """
    issues: list[ConfigIssue] = []
    vss: list[VirtualService] = []
    services: dict[tuple[str, str], Service] = {}
    endpoints: dict[tuple[str, str], EndpointsResource] = {}
    upstream_res: dict[tuple[str, str], UpstreamResource] = {}
    secrets: dict[tuple[str, str], SecretInfo] = {}
    auth_configs: dict[tuple[str, str], AuthConfigInfo] = {}
    tables: dict[tuple[str, str], RouteTable] = {}
    pods: dict[tuple[str, str], Pod] = {}
    seen: dict[tuple[str, str, str], Source] = {}
    #: (kind, namespace, name) of resources declared but rejected: references
    #: to them are not reported a second time as dangling.
    invalid: set[tuple[str, str, str]] = Unresolvable() if partial else set()
    settings: dict[str, Any] = {}
    settings_source: Source | None = None
    skipped: list[str] = []

    for doc in docs:
        reader = _Reader(doc, "", issues)
        try:
            kind, namespace, name = _envelope(reader, doc.data)
        except _Skipped as exc:
            skipped.append(f"{doc.file}: document {doc.index + 1} (line {doc.line_of(())}):"
                           f" skipped {exc.args[0]}: not an API group twistgw serves")
            continue
        except _Invalid:
            data = doc.data if isinstance(doc.data, dict) else {}
            meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
            if isinstance(data.get("kind"), str) and isinstance(meta.get("name"), str):
                ns_ = meta.get("namespace", "default")
                invalid.add((data["kind"], ns_ if isinstance(ns_, str) else "", meta["name"]))
            continue
        reader.resource = f"{kind} {namespace}/{name}"
        source = Source(doc.file, doc.index, doc.line_of(()), doc.lines)
        key3 = (kind, namespace, name)
        if key3 in seen:
            reader.issue(("metadata", "name"), f"duplicate resource: also defined at {seen[key3]}")
            continue
        seen[key3] = source
        spec = doc.data.get("spec")
        before = reader.count()
        try:
            if kind == "VirtualService":
                vss.append(_virtual_service(reader, namespace, name, spec, source))
            elif kind == "RouteTable":
                labels = doc.data["metadata"].get("labels") or {}
                tables[(namespace, name)] = _route_table(reader, namespace, name, spec, labels, source)
            elif kind == "Service":
                services[(namespace, name)] = _service(reader, namespace, name, spec, source)
            elif kind == "Endpoints":
                endpoints[(namespace, name)] = _endpoints(reader, namespace, name, doc.data, source)
            elif kind == "Pod":
                pods[(namespace, name)] = _pod(reader, namespace, name, doc.data)
            elif kind == "Upstream":
                upstream_res[(namespace, name)] = _upstream(reader, namespace, name, spec, source)
            elif kind == "Secret":
                secrets[(namespace, name)] = _secret(reader, namespace, name, doc.data)
            elif kind == "AuthConfig":
                auth_configs[(namespace, name)] = _auth_config(reader, namespace, name, spec)
            elif kind == "Settings":
                if settings_source is not None:
                    raise reader.fail((), f"only one Settings resource is allowed; another is at {settings_source}")
                for key, value in reader.mapping(spec, ("spec",)).items():
                    with reader.part():
                        reader.mapping(value, ("spec", key))
                _gateway_settings(reader, spec.get("gateway"))
                settings, settings_source = dict(spec), source
        except _Invalid:
            invalid.add(key3)
            continue
        if reader.count() > before:
            invalid.add(key3)

    config = Config(tuple(vss), services, endpoints, upstream_res, secrets, auth_configs, {},
                    settings, settings_source, route_tables=tables, skipped=tuple(skipped), sources=seen,
                    pods=pods)
    upstreams: dict[tuple[str, str], UpstreamInfo] = {}
    subset_specs: dict[tuple[str, str], SubsetSpec] = {}
    endpoint_labels: dict[tuple[str, str], tuple[Mapping[str, str], ...]] = {}
    # Discovery: every Service port yields <ns>-<service>-<port>.
    for (ns, sname), service in services.items():
        for sport in service.ports:
            info = config.resolve_kube(sname, ns, sport.port)
            upstreams[(ns, info.name)] = info
    for (ns, uname), res in upstream_res.items():
        if ("Upstream", ns, uname) in invalid:
            continue
        if res.static is not None:
            upstreams[(ns, uname)] = UpstreamInfo(ns, uname, res.static)
        elif res.kube is not None:
            if ("Service", res.kube.namespace, res.kube.name) in invalid:
                invalid.add(("Upstream", ns, uname))
                continue
            service = services.get((res.kube.namespace, res.kube.name))
            if res.selector is not None and service is not None and res.selector != (service.selector or {}):
                # A narrower selector picks a subset of the pods, which only
                # subsetSpec does here: refuse, never ignore.
                r = _Reader(_doc_for(docs, res.source), f"Upstream {ns}/{uname}", issues)
                r.issue(("spec", "kube", "selector"),
                        f"differs from the selector of Service {service.namespace}/{service.name}"
                        f" ({service.selector or {}}); only the Service's own selector (or none) is accepted:"
                        " pick pods with subsetSpec and a route's subset, or use a Service per set of pods")
                invalid.add(("Upstream", ns, uname))
                continue
            try:
                info, labels = config.labelled_kube(res.kube.name, res.kube.namespace, res.kube.port)
            except KeyError as exc:
                if not partial:
                    r = _Reader(_doc_for(docs, res.source), f"Upstream {ns}/{uname}", issues)
                    r.issue(("spec", "kube"), exc.args[0])
                invalid.add(("Upstream", ns, uname))
                continue
            upstreams[(ns, uname)] = UpstreamInfo(ns, uname, info.endpoints)
            if res.subset_spec is not None:
                subset_specs[(ns, uname)] = res.subset_spec
                endpoint_labels[(ns, uname)] = labels

    # Delegation: each virtual service's route tree, flattened.
    def issue(source: Source | None, owner: str, path: tuple[str | int, ...], reason: str) -> None:
        issues.append(ConfigIssue(
            reason, file=source.file if source else "", document=source.document if source else None,
            line=source.line_of(path) if source else None, resource=owner, field=path_text(path)))

    flattener = Flattener(tables, {(n, m) for k, n, m in invalid if k == "RouteTable"}, issue, partial)
    vss = [attrs.evolve(vs, routes=flattener.flatten(vs)) for vs in vss]
    config = attrs.evolve(config, virtual_services=tuple(vss), upstreams=upstreams,
                          subset_specs=subset_specs, endpoint_labels=endpoint_labels)

    # Cross-checks: references and duplicate domains.
    domains: dict[str, str] = {}
    for vs in vss:
        for i, domain in enumerate(vs.domains):
            if domain in domains and domains[domain] != vs.key:
                issue(vs.source, f"VirtualService {vs.key}", ("spec", "virtualHost", "domains", i),
                      f"domain {domain!r} is already served by VirtualService {domains[domain]}")
            domains.setdefault(domain, vs.key)
        for route in vs.routes:
            path = route.path + ("routeAction", "single")
            where = route.source or vs.source
            owner = route.owner or f"VirtualService {vs.key}"
            if route.prefix_rewrite is not None and any(m.regex is not None for m in route.matchers):
                issue(where, owner, route.path + ("options", "prefixRewrite"),
                      "cannot rewrite the prefix of a regex match (Envoy refuses it too): match by prefix"
                      " or exact, or let the backend see the path as it is")
            action = route.action
            if isinstance(action, KubeRef):
                if ("Service", action.namespace, action.name) in invalid:
                    continue
                try:
                    config.resolve_kube(action.name, action.namespace, action.port)
                except KeyError as exc:
                    issue(where, owner, path + ("kube", "ref"), f"dangling reference: {exc.args[0]}")
                    continue
                if action.subset:
                    issue(where, owner, path + ("subset",),
                          "route has a subset config, but the upstream does not (Gloo's rule): a kube"
                          " destination's upstream declares no subsetSpec; route to an Upstream with"
                          " kube.subsetSpec")
            elif isinstance(action, UpstreamRef):
                ukey = (action.namespace, action.name)
                if ukey not in upstreams:
                    if ("Upstream", action.namespace, action.name) not in invalid:
                        issue(where, owner, path + ("upstream",),
                              f"dangling reference: no Upstream {action.namespace}/{action.name}"
                              " (neither declared nor discovered from a Service)")
                    continue
                if action.subset:
                    reason = _subset_mismatch(action, subset_specs.get(ukey))
                    if reason:
                        issue(where, owner, path + ("subset", "values"), reason)
    if issues and not keep_going:
        raise ConfigError(issues)
    return attrs.evolve(config, issues=tuple(issues),
                        invalid=invalid if partial else frozenset(invalid))


def _subset_mismatch(action: UpstreamRef, spec: SubsetSpec | None) -> str:
    """Gloo's check of a route's subset against its Upstream: the subset's
    keys must be exactly the keys of one of the Upstream's selectors."""
    where = f"Upstream {action.namespace}/{action.name}"
    if spec is None:
        return (f"route has a subset config, but the upstream does not (Gloo's rule): {where} declares"
                " no kube.subsetSpec")
    keys = frozenset(k for k, _ in action.subset)
    if keys in spec.selectors:
        return ""
    known = "; ".join("[" + ", ".join(sorted(sel)) + "]" for sel in spec.selectors)
    return (f"route has a subset config, but none of the subsets in the upstream match it (Gloo's rule):"
            f" keys [{', '.join(sorted(keys))}] are not one of {where}'s selectors ({known})")


def _doc_for(docs: list[Document], source: Source | None) -> Document:
    for d in docs:
        if source is not None and d.file == source.file and d.index == source.document:
            return d
    return Document("", 0, None, {})


class _Skipped(Exception):
    """A document of an API group the gateway does not serve."""


def _envelope(r: _Reader, data: Any) -> tuple[str, str, str]:
    if not isinstance(data, dict):
        raise r.fail((), f"a resource must be a mapping, got {_type_name(data)}")
    kind = data.get("kind")
    api = data.get("apiVersion")
    if not isinstance(api, str) or not api:
        raise r.fail(("apiVersion",), f"is required (a string such as 'gateway.vendor.io/v1'), got {api!r}")
    group = api.rsplit("/", 1)[0] if "/" in api else ""
    if not isinstance(kind, str) or not kind:
        raise r.fail(("kind",), f"is required (a string such as 'VirtualService'), got {kind!r}")
    if group not in OUR_GROUPS and not (group == "" and kind in API_VERSIONS):
        raise _Skipped(f"{kind} ({api})")
    if kind not in API_VERSIONS:
        ours = sorted(k for k, versions in API_VERSIONS.items() if any(v.startswith(group + "/") or v == api
                                                                      for v in versions))
        raise r.fail(("kind",), f"unknown kind {kind!r} in {api!r} (twistgw reads: {', '.join(ours)})")
    meta = data.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        ns_guess = meta.get("namespace", "default")
        r.resource = f"{kind} {ns_guess if isinstance(ns_guess, str) else '?'}/{meta['name']}"
    if api not in API_VERSIONS[kind]:
        raise r.fail(("apiVersion",), f"{kind} needs apiVersion {' or '.join(repr(v) for v in API_VERSIONS[kind])},"
                     f" got {api!r}")
    bad = r.count()
    meta = r.mapping(data.get("metadata"), ("metadata",), required=("name",))
    name = r.string(meta["name"], ("metadata", "name"))
    namespace = meta.get("namespace", "default")
    namespace = r.string(namespace, ("metadata", "namespace"))
    for value, field in ((name, "name"), (namespace, "namespace")):
        if not is_kubernetes_name(value):
            r.issue(("metadata", field), f"{value!r} is not a valid Kubernetes name (lower-case letters, digits, '-', '.')")
    with r.part():
        _labels(r, meta.get("labels"), ("metadata", "labels"))
    allowed_top = {"apiVersion", "kind", "metadata", "spec", "status"}
    if kind == "Secret":
        allowed_top |= {"data", "stringData", "type", "immutable"}
    if kind == "Endpoints":
        allowed_top |= {"subsets"}
    for key in data:
        if key not in allowed_top:
            r.issue((key,), unknown_field(key, sorted(allowed_top)))
    if kind not in ("Secret", "Endpoints", "Pod") and "spec" not in data:
        r.issue(("spec",), "is required")
    if r.count() > bad:
        raise r.invalid()
    return kind, namespace, name


def _ref(r: _Reader, value: Any, path: tuple[str | int, ...], default_ns: str, with_port: bool = False) -> tuple[str, str, int]:
    allowed = {"name", "namespace"} | ({"port"} if with_port else set())
    m = r.mapping(value, path, allowed, required=("name",))
    name = r.string(m["name"], path + ("name",))
    ns = r.string(m.get("namespace", default_ns), path + ("namespace",))
    port = r.port(m["port"], path + ("port",)) if with_port and "port" in m else 0
    return name, ns, port


#: Gloo Edge fields twistgw does not implement, by where they are written,
#: with the reason given instead of a bare "unknown field".
GLOO_UNSUPPORTED: dict[str, dict[str, str]] = {
    "spec": {"sslConfig": "TLS is terminated by the --listen endpoint (e.g. 'ssl:8443:...'), not per virtual service"},
    "route": {
        "redirectAction": "redirects are not supported; use a directResponseAction or let the backend redirect",
        "graphqlApiRef": "GraphQL is not supported",
    },
    "routeAction": {
        "multi": "weighted destinations are not supported; route to one upstream (or one Service with several endpoints)",
        "upstreamGroup": "UpstreamGroups are not supported; route to one upstream",
        "clusterHeader": "routing by a cluster header is not supported",
        "dynamicForwardProxy": "the dynamic forward proxy is not supported",
    },
    "single": {
        "destinationSpec": "destination specs (REST/gRPC function routing) are not supported",
        "consul": "Consul destinations are not supported",
    },
    "upstreamSpec": {
        "sslConfig": "TLS to upstreams is not supported",
        "healthChecks": "active health checks are not supported",
        "loadBalancerConfig": "load balancer settings are not supported: endpoints are used round robin",
        "connectionConfig": "connection settings are not supported",
        "circuitBreakers": "circuit breakers are not supported",
        "outlierDetection": "outlier detection is not supported",
        "useHttp2": "HTTP/2 to upstreams is not supported",
        "discoveryMetadata": "discovery metadata is not supported",
        "aws": "AWS Lambda upstreams are not supported",
        "azure": "Azure upstreams are not supported",
        "consul": "Consul upstreams are not supported",
        "pipe": "unix-socket upstreams are not supported",
        "awsEc2": "EC2 upstreams are not supported",
    },
}


def _unsupported(r: _Reader, m: dict, path: tuple[str | int, ...], where: str) -> dict:
    """Report Gloo fields written here that twistgw does not implement;
    return the mapping without them (so they are reported once)."""
    known = GLOO_UNSUPPORTED[where]
    for key in m:
        if key in known:
            r.issue(path + (key,), f"is not supported by twistgw: {known[key]}")
    return {k: v for k, v in m.items() if k not in known}


def _virtual_service(r: _Reader, ns: str, name: str, spec: Any, source: Source) -> VirtualService:
    spec = r.mapping(spec, ("spec",))
    spec = r.mapping(_unsupported(r, spec, ("spec",), "spec"), ("spec",), {"displayName", "virtualHost"},
                     required=("virtualHost",))
    display = ""
    with r.part():
        display = r.string(spec.get("displayName", ""), ("spec", "displayName"), nonempty=False)
    vh_path: tuple[str | int, ...] = ("spec", "virtualHost")
    vh = r.mapping(spec["virtualHost"], vh_path, {"domains", "options", "routes"})
    domains: list[str] = []
    with r.part():
        for i, d in enumerate(r.sequence(vh.get("domains", ["*"]), vh_path + ("domains",), nonempty=True)):
            with r.part():
                d = host_without_port(r.string(d, vh_path + ("domains", i)).strip().lower())
                if d in domains:
                    raise r.fail(vh_path + ("domains", i), f"domain {d!r} is listed twice")
                domains.append(d)
    options: dict = {}
    with r.part():
        options = _options(r, vh.get("options", {}), vh_path + ("options",))
    routes = _routes(r, ns, vh, vh_path, "routes")
    # Kept even with problems (they are recorded and reject the
    # configuration) so the plugins still check its options: every problem
    # is reported at once.
    return VirtualService(ns, name, tuple(domains), routes, options, display, source)


def _routes(r: _Reader, ns: str, parent: dict, path: tuple[str | int, ...], key: str) -> tuple[Route, ...]:
    """``routes`` of a virtual host or route table: every route checked."""
    if key not in parent:
        r.issue(path + (key,), "is required")
        return ()
    routes = []
    with r.part():
        for i, raw in enumerate(r.sequence(parent[key], path + (key,))):
            with r.part():
                routes.append(_route(r, ns, i, raw, path + (key, i)))
    return tuple(routes)


def _options(r: _Reader, value: Any, path: tuple[str | int, ...]) -> dict:
    if value is None:
        return {}
    options = r.mapping(value, path)
    bad = r.count()
    if "routes" not in path:  # a virtual host's options
        for key in ("prefixRewrite", "timeout"):
            if key in options:
                r.issue(path + (key,), "is a route option (as in Gloo): write it under the routes' options")
    if "pluginOrder" in options:
        with r.part():
            order = r.sequence(options["pluginOrder"], path + ("pluginOrder",))
            for i, n in enumerate(order):
                r.string(n, path + ("pluginOrder", i))
            if len(set(order)) != len(order):
                raise r.fail(path + ("pluginOrder",), "lists a plugin twice")
    if "prefixRewrite" in options:
        with r.part():
            rw = r.string(options["prefixRewrite"], path + ("prefixRewrite",), nonempty=False)
            if rw and not rw.startswith("/"):
                raise r.fail(path + ("prefixRewrite",), "must start with '/'")
    if "timeout" in options and not parse_duration(options["timeout"]):
        r.issue(path + ("timeout",), f"must be a duration above zero such as '15s' or '500ms',"
                f" got {options['timeout']!r}")
    if r.count() > bad:
        raise r.invalid()
    return options


_ACTIONS = ("routeAction", "directResponseAction", "delegateAction")


def _route(r: _Reader, ns: str, index: int, raw: Any, path: tuple[str | int, ...]) -> Route:
    m = r.mapping(raw, path)
    m = r.mapping(_unsupported(r, m, path, "route"), path,
                  {"name", "matchers", "options", "inheritableMatchers", "inheritablePathMatchers"} | set(_ACTIONS))
    inherit: dict[str, bool | None] = {}
    for key in ("inheritableMatchers", "inheritablePathMatchers"):
        inherit[key] = None
        with r.part():
            if m.get(key) is not None:
                inherit[key] = r.boolean(m[key], path + (key,))
    name = f"routes[{index}]"
    with r.part():
        if "name" in m:
            name = r.string(m["name"], path + ("name",))
    matchers: list[Matcher] = []
    with r.part():
        for j, mm in enumerate(r.sequence(m.get("matchers", []), path + ("matchers",))):
            with r.part():
                matchers.append(parse_matcher(r, mm, path + ("matchers", j)))
    actions = [a for a in _ACTIONS if a in m]
    action: KubeRef | UpstreamRef | DirectResponse | Delegate | None = None
    if len(actions) != 1:
        r.issue(path, f"set exactly one of {', '.join(_ACTIONS)}"
                + (f" (got {' and '.join(actions)})" if actions else ""))
    else:
        with r.part():
            action = _action(r, ns, actions[0], m[actions[0]], path + (actions[0],))
    options: dict = {}
    with r.part():
        options = _options(r, m.get("options", {}), path + ("options",))
    if action is None:
        raise r.invalid()
    rewrite = options.get("prefixRewrite")
    timeout = parse_duration(options["timeout"]) if "timeout" in options else None
    return Route(name, index, tuple(matchers), action, options, rewrite, timeout, path=path,
                 inherit_matchers=inherit["inheritableMatchers"],
                 inherit_path_matchers=inherit["inheritablePathMatchers"])


def _action(r: _Reader, ns: str, kind: str, value: Any,
            ap: tuple[str | int, ...]) -> KubeRef | UpstreamRef | DirectResponse | Delegate:
    if kind == "directResponseAction":
        d = r.mapping(value, ap, {"status", "body"}, required=("status",))
        status = r.integer(d["status"], ap + ("status",), 200, 599)
        body = r.string(d.get("body", ""), ap + ("body",), nonempty=False)
        return DirectResponse(status, body.encode("utf-8"))
    if kind == "delegateAction":
        return _delegate(r, ns, value, ap)
    ra = r.mapping(value, ap)
    ra = r.mapping(_unsupported(r, ra, ap, "routeAction"), ap, {"single"}, required=("single",))
    sp = ap + ("single",)
    single = r.mapping(ra["single"], sp)
    single = r.mapping(_unsupported(r, single, sp, "single"), sp, {"kube", "upstream", "subset"})
    if len([k for k in single if k in ("kube", "upstream")]) != 1:
        raise r.fail(sp, "set exactly one of kube or upstream")
    subset: tuple[tuple[str, str], ...] = ()
    if "subset" in single:
        sub = r.mapping(single["subset"], sp + ("subset",), {"values"}, required=("values",))
        subset = tuple(sorted(_labels(r, sub["values"], sp + ("subset", "values")).items()))
    if "kube" in single:
        # Gloo writes the port beside the ref; the seed format inside it. Both are read.
        kp = sp + ("kube",)
        kube = r.mapping(single["kube"], kp, {"ref", "port"}, required=("ref",))
        name_, ns_, inner = _ref(r, kube["ref"], kp + ("ref",), ns, with_port=True)
        outer = r.port(kube["port"], kp + ("port",)) if "port" in kube else 0
        if inner and outer and inner != outer:
            raise r.fail(kp + ("port",), f"differs from ref.port ({inner}); write the port once")
        if not (inner or outer):
            raise r.fail(kp + ("port",), "is required (the Service port, beside ref as Gloo writes it)")
        return KubeRef(name_, ns_, inner or outer, subset)
    name_, ns_, _ = _ref(r, single["upstream"], sp + ("upstream",), ns)
    return UpstreamRef(name_, ns_, subset)


def _delegate(r: _Reader, ns: str, value: Any, dp: tuple[str | int, ...]) -> Delegate:
    d = r.mapping(value, dp, {"ref", "selector", "name", "namespace"})
    forms = [k for k in ("ref", "selector") if k in d] + (["name"] if "name" in d else [])
    if len(forms) != 1:
        raise r.fail(dp, "set exactly one of ref or selector")
    if "namespace" in d and "name" not in d:
        raise r.fail(dp + ("namespace",), "goes with name (or write ref: {name, namespace})")
    if "selector" not in d:
        # ``delegateAction: {name, namespace}`` is Gloo's older spelling of ref.
        name_, ns_, _ = _ref(r, d.get("ref", {k: d[k] for k in ("name", "namespace") if k in d}),
                             dp + (("ref",) if "ref" in d else ()), ns)
        return Delegate(ref=(ns_, name_))
    sp = dp + ("selector",)
    sel = r.mapping(d["selector"], sp, {"labels", "expressions", "namespaces"})
    if "labels" in sel and "expressions" in sel:
        raise r.fail(sp, "set labels or expressions, not both (as in Gloo)")
    labels = _labels(r, sel.get("labels"), sp + ("labels",))
    expressions = []
    for i, e in enumerate(r.sequence(sel.get("expressions", []) or [], sp + ("expressions",))):
        ep = sp + ("expressions", i)
        e = r.mapping(e, ep, {"key", "operator", "values"}, required=("key", "operator"))
        key = r.string(e["key"], ep + ("key",))
        op = r.string(e["operator"], ep + ("operator",))
        if op not in OPERATORS:
            raise r.fail(ep + ("operator",), f"unknown operator {op!r} (expected one of: {', '.join(OPERATORS)})")
        values = tuple(r.string(v, ep + ("values", j), nonempty=False)
                       for j, v in enumerate(r.sequence(e.get("values", []) or [], ep + ("values",))))
        if op in ("Exists", "DoesNotExist") and values:
            raise r.fail(ep + ("values",), f"must be empty for {op}")
        if op not in ("Exists", "DoesNotExist") and not values:
            raise r.fail(ep + ("values",), f"{op} needs values")
        if op in ("GreaterThan", "LessThan") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
            raise r.fail(ep + ("values",), f"{op} needs exactly one integer value")
        expressions.append((key, op, values))
    namespaces = tuple(r.string(n, sp + ("namespaces", j))
                       for j, n in enumerate(r.sequence(sel.get("namespaces", []) or [], sp + ("namespaces",))))
    return Delegate(selector=Selector(dict(labels), tuple(expressions), namespaces))


def _route_table(r: _Reader, ns: str, name: str, spec: Any, labels: Mapping[str, str],
                 source: Source) -> RouteTable:
    spec = r.mapping(spec, ("spec",), {"routes", "weight"})
    weight = 0
    with r.part():
        weight = r.integer(spec.get("weight", 0), ("spec", "weight"), -(2**31), 2**31 - 1)
    routes = _routes(r, ns, spec, ("spec",), "routes")
    routes = tuple(attrs.evolve(rt, source=source, owner=f"RouteTable {ns}/{name}",
                                name=rt.name if not rt.name.startswith("routes[") else
                                f"RouteTable {ns}/{name} {rt.name}") for rt in routes)
    return RouteTable(ns, name, routes, dict(labels), weight, source)


#: ServiceSpec fields that describe the cluster, not what the gateway does:
#: read for compatibility with real manifests and otherwise ignored (the
#: Endpoints documents say where traffic goes). See docs/configuration.md.
SERVICE_INFORMATIONAL = frozenset({
    "selector", "type", "clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "sessionAffinity",
    "sessionAffinityConfig", "externalTrafficPolicy", "internalTrafficPolicy", "publishNotReadyAddresses",
    "allocateLoadBalancerNodePorts", "loadBalancerClass", "healthCheckNodePort", "externalIPs",
    "loadBalancerSourceRanges", "trafficDistribution",
})


def _labels(r: _Reader, value: Any, path: tuple[str | int, ...]) -> dict[str, str]:
    m = r.mapping(value or {}, path)
    for k, v in m.items():
        r.string(v, path + (k,), nonempty=False)
    return dict(m)


def _tcp_protocol(r: _Reader, p: dict, pp: tuple[str | int, ...]) -> None:
    """``protocol`` and ``appProtocol`` of a Service or Endpoints port: the
    gateway speaks HTTP/1.1 over TCP to endpoints, so nothing else is accepted."""
    with r.part():
        if r.string(p.get("protocol", "TCP"), pp + ("protocol",)) != "TCP":
            raise r.fail(pp + ("protocol",), f"must be TCP: twistgw proxies HTTP over TCP, got {p['protocol']!r}")
    with r.part():
        app = r.string(p.get("appProtocol", "http"), pp + ("appProtocol",))
        if app not in ("http", "kubernetes.io/http"):
            raise r.fail(pp + ("appProtocol",), f"must be http: twistgw speaks HTTP/1.1 to endpoints, got {app!r}")


def _service(r: _Reader, ns: str, name: str, spec: Any, source: Source) -> Service:
    spec = r.mapping(spec, ("spec",), {"ports", "externalName"} | SERVICE_INFORMATIONAL)
    if spec.get("type") == "ExternalName" or "externalName" in spec:
        r.issue(("spec", "type"), "ExternalName Services are not supported: declare an Upstream with static hosts")
    ports = []
    for i, p in enumerate(r.sequence(spec.get("ports", []), ("spec", "ports"))):
        pp = ("spec", "ports", i)
        p = r.mapping(p, pp, {"name", "port", "targetPort", "protocol", "nodePort", "appProtocol"}, required=("port",))
        _tcp_protocol(r, p, pp)
        port = r.port(p["port"], pp + ("port",))
        target = p.get("targetPort", port)
        if isinstance(target, str):
            r.string(target, pp + ("targetPort",))
        else:
            target = r.port(target, pp + ("targetPort",))
        pname = r.string(p.get("name", ""), pp + ("name",), nonempty=False)
        ports.append(ServicePort(port, target, pname))
    selector = None
    with r.part():
        if "selector" in spec:
            selector = _labels(r, spec["selector"], ("spec", "selector"))
    return Service(ns, name, tuple(ports), source, selector)


def _endpoints(r: _Reader, ns: str, name: str, data: dict, source: Source) -> EndpointsResource:
    subsets = []
    for i, s in enumerate(r.sequence(data.get("subsets", []) or [], ("subsets",))):
        sp = ("subsets", i)
        s = r.mapping(s, sp, {"addresses", "ports", "notReadyAddresses"})
        addrs = []
        pods: list[tuple[str, str] | None] = []
        for j, a in enumerate(r.sequence(s.get("addresses", []), sp + ("addresses",))):
            a = r.mapping(a, sp + ("addresses", j), {"ip", "hostname", "nodeName", "targetRef"}, required=("ip",))
            addrs.append(r.string(a["ip"], sp + ("addresses", j, "ip")))
            pods.append(_pod_ref(r, a.get("targetRef"), sp + ("addresses", j, "targetRef"), ns))
        ports = []
        for j, p in enumerate(r.sequence(s.get("ports", []), sp + ("ports",))):
            pp = sp + ("ports", j)
            p = r.mapping(p, pp, {"name", "port", "protocol", "appProtocol"}, required=("port",))
            _tcp_protocol(r, p, pp)
            ports.append((r.string(p.get("name", ""), pp + ("name",), nonempty=False), r.port(p["port"], pp + ("port",))))
        subsets.append(EndpointSubset(tuple(addrs), tuple(ports), tuple(pods)))
    return EndpointsResource(ns, name, tuple(subsets), source)


def _pod_ref(r: _Reader, value: Any, path: tuple[str | int, ...], ns: str) -> tuple[str, str] | None:
    """An endpoint address's ``targetRef``: the (namespace, name) of a Pod,
    whose labels place the endpoint in subsets; other kinds say nothing."""
    if value is None:
        return None
    ref = r.mapping(value, path)
    if ref.get("kind") != "Pod" or not isinstance(ref.get("name"), str):
        return None
    return (r.string(ref.get("namespace", ns), path + ("namespace",)), ref["name"])


def _pod(r: _Reader, ns: str, name: str, data: dict) -> Pod:
    """A ``v1 Pod``: its labels (read by the envelope) and ``status.podIP``;
    the rest describes the cluster (informational)."""
    r.mapping(data.get("spec") or {}, ("spec",))
    status = r.mapping(data.get("status") or {}, ("status",))
    ip = r.string(status["podIP"], ("status", "podIP")) if status.get("podIP") is not None else ""
    labels = data["metadata"].get("labels") or {}
    return Pod(ns, name, dict(labels), ip)


#: Gloo's ``SubsetSpec.fallbackPolicy`` values (Envoy's LbSubsetFallbackPolicy).
FALLBACK_POLICIES = ("ANY_ENDPOINT", "NO_FALLBACK", "DEFAULT_SUBSET")


def _subset_spec(r: _Reader, value: Any, path: tuple[str | int, ...]) -> SubsetSpec:
    """``kube.subsetSpec``, checked as Gloo's proto defines it."""
    spec = r.mapping(value, path, {"selectors", "fallbackPolicy", "defaultSubset"}, required=("selectors",))
    selectors: list[frozenset[str]] = []
    for i, sel in enumerate(r.sequence(spec["selectors"], path + ("selectors",), nonempty=True)):
        sp = path + ("selectors", i)
        with r.part():
            sel = r.mapping(sel, sp, {"keys", "singleHostPerSubset"}, required=("keys",))
            if "singleHostPerSubset" in sel and r.boolean(sel["singleHostPerSubset"], sp + ("singleHostPerSubset",)):
                r.issue(sp + ("singleHostPerSubset",), "is not supported by twistgw: every endpoint of a subset"
                        " takes traffic (round robin); leave it false")
            keys = [r.string(k, sp + ("keys", j))
                    for j, k in enumerate(r.sequence(sel["keys"], sp + ("keys",), nonempty=True))]
            if len(set(keys)) != len(keys):
                raise r.fail(sp + ("keys",), f"repeats a key: {keys}")
            if frozenset(keys) in selectors:
                raise r.fail(sp + ("keys",), f"the same keys as an earlier selector: {sorted(keys)}")
            selectors.append(frozenset(keys))
    fallback = "ANY_ENDPOINT"
    with r.part():
        if "fallbackPolicy" in spec:
            fallback = r.string(spec["fallbackPolicy"], path + ("fallbackPolicy",))
            if fallback not in FALLBACK_POLICIES:
                raise r.fail(path + ("fallbackPolicy",), f"unknown fallback policy {fallback!r}"
                             f" (expected one of: {', '.join(FALLBACK_POLICIES)})")
    default: tuple[tuple[str, str], ...] = ()
    with r.part():
        if "defaultSubset" in spec:
            if fallback != "DEFAULT_SUBSET":
                raise r.fail(path + ("defaultSubset",), "is used only with fallbackPolicy: DEFAULT_SUBSET")
            dp = path + ("defaultSubset",)
            d = r.mapping(spec["defaultSubset"], dp, {"values"}, required=("values",))
            default = tuple(sorted(_labels(r, d["values"], dp + ("values",)).items()))
        elif fallback == "DEFAULT_SUBSET":
            raise r.fail(path + ("fallbackPolicy",), "DEFAULT_SUBSET needs defaultSubset: {values: {...}}")
    return SubsetSpec(tuple(selectors), fallback, default)


def _upstream(r: _Reader, ns: str, name: str, spec: Any, source: Source) -> UpstreamResource:
    spec = r.mapping(spec, ("spec",))
    spec = r.mapping(_unsupported(r, spec, ("spec",), "upstreamSpec"), ("spec",), {"kube", "static"})
    if len([k for k in spec if k in ("kube", "static")]) != 1:
        raise r.fail(("spec",), "set exactly one of kube or static")
    if "static" in spec:
        st = r.mapping(spec["static"], ("spec", "static"), {"hosts", "useTls", "autoSniRewrite"}, required=("hosts",))
        for key in ("useTls", "autoSniRewrite"):
            if st.get(key):
                r.issue(("spec", "static", key), "is not supported by twistgw: TLS to upstreams is not supported")
        hosts = []
        for i, h in enumerate(r.sequence(st["hosts"], ("spec", "static", "hosts"), nonempty=True)):
            hp = ("spec", "static", "hosts", i)
            h = r.mapping(h, hp, {"addr", "port"}, required=("addr", "port"))
            hosts.append(Endpoint(r.string(h["addr"], hp + ("addr",)), r.port(h["port"], hp + ("port",))))
        return UpstreamResource(ns, name, static=tuple(hosts), source=source)
    kp = ("spec", "kube")
    k = r.mapping(spec["kube"], kp)
    k = r.mapping(_unsupported(r, k, kp, "upstreamSpec"), kp,
                  {"serviceName", "serviceNamespace", "servicePort", "selector", "subsetSpec"},
                  required=("serviceName", "servicePort"))
    sname = r.string(k["serviceName"], kp + ("serviceName",))
    sns = r.string(k.get("serviceNamespace", ns), kp + ("serviceNamespace",))
    port = r.port(k["servicePort"], kp + ("servicePort",))
    selector = _labels(r, k["selector"], kp + ("selector",)) if "selector" in k else None
    subset_spec = _subset_spec(r, k["subsetSpec"], kp + ("subsetSpec",)) if "subsetSpec" in k else None
    return UpstreamResource(ns, name, kube=KubeRef(sname, sns, port), source=source, selector=selector,
                            subset_spec=subset_spec)


def _secret(r: _Reader, ns: str, name: str, data: dict) -> SecretInfo:
    values: dict[str, bytes] = {}
    raw = data.get("data") or {}
    r.mapping(raw, ("data",))
    for key, value in raw.items():
        if not isinstance(value, str):
            raise r.fail(("data", key), f"must be a base64 string, got {_type_name(value)}")
        try:
            values[key] = base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise r.fail(("data", key), "is not valid base64 (use stringData for plain text)") from None
    sd = data.get("stringData") or {}
    r.mapping(sd, ("stringData",))
    for key, value in sd.items():
        values[key] = r.string(value, ("stringData", key), nonempty=False).encode("utf-8")
    stype = data.get("type", "Opaque")
    r.string(stype, ("type",))
    return SecretInfo(ns, name, stype, values)


def _gateway_settings(r: _Reader, value: Any) -> None:
    """``Settings.spec.gateway``: the core's own gateway-wide settings."""
    if value is None:
        return
    path: tuple[str | int, ...] = ("spec", "gateway")
    g = r.mapping(value, path, {"echoServer"})
    if "echoServer" in g:
        e = r.mapping(g["echoServer"], path + ("echoServer",), {"listen"}, required=("listen",))
        listen = r.string(e["listen"], path + ("echoServer", "listen"))
        if not is_loopback_endpoint(listen):
            raise r.fail(path + ("echoServer", "listen"),
                         "the development echo server only listens on loopback, e.g. 'tcp:8081:interface=127.0.0.1'")


def _auth_config(r: _Reader, ns: str, name: str, spec: Any) -> AuthConfigInfo:
    spec = r.mapping(spec, ("spec",), {"configs", "booleanExpr", "failOnRedirect"}, required=("configs",))
    configs = r.sequence(spec["configs"], ("spec", "configs"), nonempty=True)
    for i, c in enumerate(configs):
        c = r.mapping(c, ("spec", "configs", i))
        if not c:
            raise r.fail(("spec", "configs", i), "an auth config entry must name its kind (e.g. ldap)")
    expr = r.string(spec["booleanExpr"], ("spec", "booleanExpr")) if "booleanExpr" in spec else None
    redirect = spec.get("failOnRedirect")
    if redirect is not None and not isinstance(redirect, bool):
        raise r.fail(("spec", "failOnRedirect"), f"must be true or false, got {redirect!r}")
    return AuthConfigInfo(ns, name, tuple(configs), expr, redirect)

