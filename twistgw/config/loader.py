"""Read a configuration directory into resources, with errors a person can act on.

Pure: reads files, builds frozen objects, never touches the reactor.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from typing import Any, Mapping

import attrs
import yaml

from twistgw.api.types import AuthConfigInfo, Endpoint, SecretInfo, UpstreamInfo
from twistgw.config.names import host_without_port, is_loopback_endpoint
from twistgw.options import type_name as _type_name
from twistgw.config.model import (
    DirectResponse,
    EndpointsResource,
    EndpointSubset,
    KubeRef,
    Matcher,
    Route,
    Service,
    ServicePort,
    Source,
    UpstreamRef,
    UpstreamResource,
    VirtualService,
)

API_VERSIONS = {
    "VirtualService": "gateway.vendor.io/v1",
    "Upstream": "core.vendor.io/v1",
    "AuthConfig": "enterprise.gateway.vendor.io/v1",
    "Secret": "v1",
    "Service": "v1",
    "Endpoints": "v1",
    "Settings": "gateway.vendor.io/v1",
}

#: Options keys the core itself reads; every other key names a plugin.
CORE_OPTION_KEYS = frozenset({"pluginOrder", "jwtStaged", "jwtProvidersStaged", "prefixRewrite", "timeout"})

_DNS_LABELS = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


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

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


def path_text(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


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
        if not name.endswith((".yaml", ".yml")) or name.startswith("."):
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

    def mapping(self, value: Any, path: tuple[str | int, ...], allowed: set[str] | None = None,
                required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a mapping, got {_type_name(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.fail(path, f"keys must be strings, got {key!r}")
        if allowed is not None:
            for key in value:
                if key not in allowed:
                    raise self.fail(path + (key,), f"unknown field (expected one of: {', '.join(sorted(allowed))})")
        for key in required:
            if key not in value:
                raise self.fail(path + (key,), "is required")
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




def parse_duration(value: Any) -> float | None:
    """``15s``, ``1.5s``, ``200ms``, ``2m``, ``1h`` or a number of seconds."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value >= 0 else None
    if not isinstance(value, str):
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", value)
    if not m:
        return None
    number = float(m.group(1))
    return number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


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

    def resolve_kube(self, name: str, namespace: str, port: int) -> UpstreamInfo:
        """A Service port → the Endpoints addresses on the target port."""
        service = self.services.get((namespace, name))
        if service is None:
            raise KeyError(f"no Service {namespace}/{name}")
        sport = next((p for p in service.ports if p.port == port), None)
        if sport is None:
            known = ", ".join(str(p.port) for p in service.ports)
            raise KeyError(f"Service {namespace}/{name} has no port {port} (ports: {known})")
        upstream_name = f"{namespace}-{name}-{port}"
        eps = self.endpoints.get((namespace, name))
        found: list[Endpoint] = []
        if eps is not None:
            for subset in eps.subsets:
                target = _subset_port(subset, sport)
                if target is None:
                    continue
                found.extend(Endpoint(addr, target) for addr in subset.addresses)
        return UpstreamInfo(namespace, upstream_name, tuple(found))


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


def load_directory(directory: str) -> Config:
    docs, issues = read_documents(directory)
    if issues:
        raise ConfigError(issues)
    if not any(n.endswith((".yaml", ".yml")) and not n.startswith(".") for n in os.listdir(directory)):
        # Almost always an accident (a failed copy, a ConfigMap mount in
        # flux); serving "nothing" would turn every route into a 404.
        raise ConfigError([ConfigIssue(
            "the configuration directory has no *.yaml or *.yml files", file=directory)])
    return attrs.evolve(build_config(docs), directory=os.path.abspath(directory))


def load_text(text: str, filename: str = "<string>") -> Config:
    docs, issues = parse_yaml_text(text, filename)
    if issues:
        raise ConfigError(issues)
    return build_config(docs)


def build_config(docs: list[Document]) -> Config:
    issues: list[ConfigIssue] = []
    vss: list[VirtualService] = []
    services: dict[tuple[str, str], Service] = {}
    endpoints: dict[tuple[str, str], EndpointsResource] = {}
    upstream_res: dict[tuple[str, str], UpstreamResource] = {}
    secrets: dict[tuple[str, str], SecretInfo] = {}
    auth_configs: dict[tuple[str, str], AuthConfigInfo] = {}
    seen: dict[tuple[str, str, str], Source] = {}
    vs_readers: dict[tuple[str, str], _Reader] = {}
    settings: dict[str, Any] = {}
    settings_source: Source | None = None

    for doc in docs:
        reader = _Reader(doc, "", issues)
        try:
            kind, namespace, name = _envelope(reader, doc.data)
        except _Invalid:
            continue
        reader.resource = f"{kind} {namespace}/{name}"
        source = Source(doc.file, doc.index, doc.line_of(()), doc.lines)
        key3 = (kind, namespace, name)
        if key3 in seen:
            reader.issue(("metadata", "name"), f"duplicate resource: also defined at {seen[key3]}")
            continue
        seen[key3] = source
        spec = doc.data.get("spec")
        try:
            if kind == "VirtualService":
                vss.append(_virtual_service(reader, namespace, name, spec, source))
                vs_readers[(namespace, name)] = reader
            elif kind == "Service":
                services[(namespace, name)] = _service(reader, namespace, name, spec, source)
            elif kind == "Endpoints":
                endpoints[(namespace, name)] = _endpoints(reader, namespace, name, doc.data, source)
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
                    reader.mapping(value, ("spec", key))
                _gateway_settings(reader, spec.get("gateway"))
                settings, settings_source = dict(spec), source
        except _Invalid:
            continue

    config = Config(tuple(vss), services, endpoints, upstream_res, secrets, auth_configs, {},
                    settings, settings_source)
    upstreams: dict[tuple[str, str], UpstreamInfo] = {}
    # Discovery: every Service port yields <ns>-<service>-<port>.
    for (ns, sname), service in services.items():
        for sport in service.ports:
            info = config.resolve_kube(sname, ns, sport.port)
            upstreams[(ns, info.name)] = info
    for (ns, uname), res in upstream_res.items():
        if res.static is not None:
            upstreams[(ns, uname)] = UpstreamInfo(ns, uname, res.static)
        elif res.kube is not None:
            try:
                info = config.resolve_kube(res.kube.name, res.kube.namespace, res.kube.port)
            except KeyError as exc:
                r = _Reader(_doc_for(docs, res.source), f"Upstream {ns}/{uname}", issues)
                r.issue(("spec", "kube"), exc.args[0])
                continue
            upstreams[(ns, uname)] = UpstreamInfo(ns, uname, info.endpoints)
    config = attrs.evolve(config, upstreams=upstreams)

    # Cross-checks: references and duplicate domains.
    domains: dict[str, str] = {}
    for vs in vss:
        reader = vs_readers[(vs.namespace, vs.name)]
        for i, domain in enumerate(vs.domains):
            if domain in domains and domains[domain] != vs.key:
                reader.issue(("spec", "virtualHost", "domains", i),
                             f"domain {domain!r} is already served by VirtualService {domains[domain]}")
            domains.setdefault(domain, vs.key)
        for route in vs.routes:
            path = ("spec", "virtualHost", "routes", route.index, "routeAction", "single")
            action = route.action
            if isinstance(action, KubeRef):
                try:
                    config.resolve_kube(action.name, action.namespace, action.port)
                except KeyError as exc:
                    reader.issue(path + ("kube", "ref"), f"dangling reference: {exc.args[0]}")
            elif isinstance(action, UpstreamRef):
                if (action.namespace, action.name) not in upstreams:
                    reader.issue(path + ("upstream",),
                                 f"dangling reference: no Upstream {action.namespace}/{action.name}"
                                 " (neither declared nor discovered from a Service)")
    if issues:
        raise ConfigError(issues)
    return config


def _doc_for(docs: list[Document], source: Source | None) -> Document:
    for d in docs:
        if source is not None and d.file == source.file and d.index == source.document:
            return d
    return Document("", 0, None, {})


def _envelope(r: _Reader, data: Any) -> tuple[str, str, str]:
    if not isinstance(data, dict):
        raise r.fail((), f"a resource must be a mapping, got {_type_name(data)}")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in API_VERSIONS:
        raise r.fail(("kind",), f"unknown kind {kind!r} (expected one of: {', '.join(sorted(API_VERSIONS))})")
    meta = data.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        ns_guess = meta.get("namespace", "default")
        r.resource = f"{kind} {ns_guess if isinstance(ns_guess, str) else '?'}/{meta['name']}"
    api = data.get("apiVersion")
    if api != API_VERSIONS[kind]:
        raise r.fail(("apiVersion",), f"{kind} needs apiVersion {API_VERSIONS[kind]!r}, got {api!r}")
    meta = r.mapping(data.get("metadata"), ("metadata",), required=("name",))
    name = r.string(meta["name"], ("metadata", "name"))
    namespace = meta.get("namespace", "default")
    namespace = r.string(namespace, ("metadata", "namespace"))
    for value, field in ((name, "name"), (namespace, "namespace")):
        if not _DNS_LABELS.match(value) or len(value) > 253:
            raise r.fail(("metadata", field), f"{value!r} is not a valid Kubernetes name (lower-case letters, digits, '-', '.')")
    allowed_top = {"apiVersion", "kind", "metadata", "spec", "status"}
    if kind == "Secret":
        allowed_top |= {"data", "stringData", "type", "immutable"}
    if kind == "Endpoints":
        allowed_top |= {"subsets"}
    for key in data:
        if key not in allowed_top:
            raise r.fail((key,), f"unknown field (expected one of: {', '.join(sorted(allowed_top))})")
    if kind not in ("Secret", "Endpoints") and "spec" not in data:
        raise r.fail(("spec",), "is required")
    return kind, namespace, name


def _ref(r: _Reader, value: Any, path: tuple[str | int, ...], default_ns: str, with_port: bool = False) -> tuple[str, str, int]:
    allowed = {"name", "namespace"} | ({"port"} if with_port else set())
    m = r.mapping(value, path, allowed, required=("name", "port") if with_port else ("name",))
    name = r.string(m["name"], path + ("name",))
    ns = r.string(m.get("namespace", default_ns), path + ("namespace",))
    port = r.port(m["port"], path + ("port",)) if with_port else 0
    return name, ns, port


def _virtual_service(r: _Reader, ns: str, name: str, spec: Any, source: Source) -> VirtualService:
    spec = r.mapping(spec, ("spec",), {"displayName", "virtualHost"}, required=("virtualHost",))
    display = spec.get("displayName", "")
    if display:
        r.string(display, ("spec", "displayName"))
    vh_path = ("spec", "virtualHost")
    vh = r.mapping(spec["virtualHost"], vh_path, {"domains", "options", "routes"}, required=("routes",))
    domains_raw = r.sequence(vh.get("domains", ["*"]), vh_path + ("domains",), nonempty=True)
    domains = []
    for i, d in enumerate(domains_raw):
        d = r.string(d, vh_path + ("domains", i)).strip().lower()
        d = host_without_port(d)
        if d in domains:
            raise r.fail(vh_path + ("domains", i), f"domain {d!r} is listed twice")
        domains.append(d)
    options = _options(r, vh.get("options", {}), vh_path + ("options",))
    routes = []
    for i, raw in enumerate(r.sequence(vh["routes"], vh_path + ("routes",))):
        routes.append(_route(r, ns, i, raw, vh_path + ("routes", i)))
    return VirtualService(ns, name, tuple(domains), tuple(routes), options, display, source)



def _options(r: _Reader, value: Any, path: tuple[str | int, ...]) -> dict:
    if value is None:
        return {}
    options = r.mapping(value, path)
    if "pluginOrder" in options:
        order = r.sequence(options["pluginOrder"], path + ("pluginOrder",))
        for i, n in enumerate(order):
            r.string(n, path + ("pluginOrder", i))
        if len(set(order)) != len(order):
            raise r.fail(path + ("pluginOrder",), "lists a plugin twice")
    if "prefixRewrite" in options:
        rw = r.string(options["prefixRewrite"], path + ("prefixRewrite",), nonempty=False)
        if rw and not rw.startswith("/"):
            raise r.fail(path + ("prefixRewrite",), "must start with '/'")
    if "timeout" in options and parse_duration(options["timeout"]) is None:
        raise r.fail(path + ("timeout",), f"must be a duration such as '15s' or '500ms', got {options['timeout']!r}")
    _jwt_staging(r, options, path)
    return options


def _jwt_staging(r: _Reader, options: dict, path: tuple[str | int, ...]) -> None:
    """``jwtStaged`` / ``jwtProvidersStaged``: their shape (what they mean is
    in ``_snapshot.jwt_stages``). Gloo allows one of ``jwt``, ``jwtStaged``
    (and, on a route, ``jwtProvidersStaged``) at each level."""
    on_route = "routes" in path
    if "jwtProvidersStaged" in options and not on_route:
        raise r.fail(path + ("jwtProvidersStaged",), "is a route option; on a virtual host write"
                     " jwtStaged: {beforeExtAuth: {providers: ...}} (or afterExtAuth)")
    used = [k for k in ("jwt", "jwtStaged", "jwtProvidersStaged") if k in options]
    if len(used) > 1 and ("jwtStaged" in used or "jwtProvidersStaged" in used):
        raise r.fail(path + (used[1],), f"use either {used[0]} or {used[1]}, not both")
    for key in ("jwtStaged", "jwtProvidersStaged"):
        if key not in options:
            continue
        staged = r.mapping(options[key], path + (key,), {"beforeExtAuth", "afterExtAuth"})
        if not staged:
            raise r.fail(path + (key,), "set beforeExtAuth, afterExtAuth or both")
        for stage, value in staged.items():
            stage_path = path + (key, stage)
            r.mapping(value, stage_path)
            if "disable" in value and not isinstance(value["disable"], bool):
                raise r.fail(stage_path + ("disable",), f"must be true or false, got {value['disable']!r}")
            if value.get("disable") is True and (len(value) > 1 or not on_route):
                raise r.fail(stage_path + ("disable",), "disable: true turns a stage off on a route;"
                             " it takes no other fields" if on_route else
                             "is a route option (a virtual host simply leaves the stage out)")


def _route(r: _Reader, ns: str, index: int, raw: Any, path: tuple[str | int, ...]) -> Route:
    m = r.mapping(raw, path, {"name", "matchers", "routeAction", "directResponseAction", "options"})
    name = r.string(m["name"], path + ("name",)) if "name" in m else f"routes[{index}]"
    matchers = []
    for j, mm in enumerate(r.sequence(m.get("matchers", [{"prefix": "/"}]), path + ("matchers",), nonempty=True)):
        mp = path + ("matchers", j)
        mm = r.mapping(mm, mp, {"prefix", "exact", "methods"})
        if "prefix" in mm and "exact" in mm:
            raise r.fail(mp, "set prefix or exact, not both")
        prefix = exact = None
        if "exact" in mm:
            exact = r.string(mm["exact"], mp + ("exact",))
            if not exact.startswith("/"):
                raise r.fail(mp + ("exact",), "must start with '/'")
        else:
            prefix = r.string(mm.get("prefix", "/"), mp + ("prefix",))
            if not prefix.startswith("/"):
                raise r.fail(mp + ("prefix",), "must start with '/'")
        methods = tuple(r.string(x, mp + ("methods", k)) for k, x in enumerate(r.sequence(mm.get("methods", []), mp + ("methods",))))
        matchers.append(Matcher(prefix, exact, methods))
    has_route = "routeAction" in m
    has_direct = "directResponseAction" in m
    if has_route == has_direct:
        raise r.fail(path, "set exactly one of routeAction or directResponseAction")
    action: KubeRef | UpstreamRef | DirectResponse
    if has_direct:
        dp = path + ("directResponseAction",)
        d = r.mapping(m["directResponseAction"], dp, {"status", "body"}, required=("status",))
        status = r.integer(d["status"], dp + ("status",), 200, 599)
        body = r.string(d.get("body", ""), dp + ("body",), nonempty=False)
        action = DirectResponse(status, body.encode("utf-8"))
    else:
        ap = path + ("routeAction",)
        ra = r.mapping(m["routeAction"], ap, {"single"}, required=("single",))
        sp = ap + ("single",)
        single = r.mapping(ra["single"], sp, {"kube", "upstream"})
        if len(single) != 1:
            raise r.fail(sp, "set exactly one of kube or upstream")
        if "kube" in single:
            kube = r.mapping(single["kube"], sp + ("kube",), {"ref"}, required=("ref",))
            name_, ns_, port = _ref(r, kube["ref"], sp + ("kube", "ref"), ns, with_port=True)
            action = KubeRef(name_, ns_, port)
        else:
            name_, ns_, _ = _ref(r, single["upstream"], sp + ("upstream",), ns)
            action = UpstreamRef(name_, ns_)
    options = _options(r, m.get("options", {}), path + ("options",))
    rewrite = options.get("prefixRewrite")
    timeout = parse_duration(options["timeout"]) if "timeout" in options else None
    return Route(name, index, tuple(matchers), action, options, rewrite, timeout)


def _service(r: _Reader, ns: str, name: str, spec: Any, source: Source) -> Service:
    spec = r.mapping(spec, ("spec",))
    ports = []
    for i, p in enumerate(r.sequence(spec.get("ports", []), ("spec", "ports"))):
        pp = ("spec", "ports", i)
        p = r.mapping(p, pp, {"name", "port", "targetPort", "protocol", "nodePort", "appProtocol"}, required=("port",))
        port = r.port(p["port"], pp + ("port",))
        target = p.get("targetPort", port)
        if isinstance(target, str):
            r.string(target, pp + ("targetPort",))
        else:
            target = r.port(target, pp + ("targetPort",))
        pname = r.string(p.get("name", ""), pp + ("name",), nonempty=False)
        ports.append(ServicePort(port, target, pname))
    return Service(ns, name, tuple(ports), source)


def _endpoints(r: _Reader, ns: str, name: str, data: dict, source: Source) -> EndpointsResource:
    subsets = []
    for i, s in enumerate(r.sequence(data.get("subsets", []) or [], ("subsets",))):
        sp = ("subsets", i)
        s = r.mapping(s, sp, {"addresses", "ports", "notReadyAddresses"})
        addrs = []
        for j, a in enumerate(r.sequence(s.get("addresses", []), sp + ("addresses",))):
            a = r.mapping(a, sp + ("addresses", j), {"ip", "hostname", "nodeName", "targetRef"}, required=("ip",))
            addrs.append(r.string(a["ip"], sp + ("addresses", j, "ip")))
        ports = []
        for j, p in enumerate(r.sequence(s.get("ports", []), sp + ("ports",))):
            pp = sp + ("ports", j)
            p = r.mapping(p, pp, {"name", "port", "protocol", "appProtocol"}, required=("port",))
            ports.append((r.string(p.get("name", ""), pp + ("name",), nonempty=False), r.port(p["port"], pp + ("port",))))
        subsets.append(EndpointSubset(tuple(addrs), tuple(ports)))
    return EndpointsResource(ns, name, tuple(subsets), source)


def _upstream(r: _Reader, ns: str, name: str, spec: Any, source: Source) -> UpstreamResource:
    spec = r.mapping(spec, ("spec",), {"kube", "static"})
    if len(spec) != 1:
        raise r.fail(("spec",), "set exactly one of kube or static")
    if "static" in spec:
        st = r.mapping(spec["static"], ("spec", "static"), {"hosts"}, required=("hosts",))
        hosts = []
        for i, h in enumerate(r.sequence(st["hosts"], ("spec", "static", "hosts"), nonempty=True)):
            hp = ("spec", "static", "hosts", i)
            h = r.mapping(h, hp, {"addr", "port"}, required=("addr", "port"))
            hosts.append(Endpoint(r.string(h["addr"], hp + ("addr",)), r.port(h["port"], hp + ("port",))))
        return UpstreamResource(ns, name, static=tuple(hosts), source=source)
    kp = ("spec", "kube")
    k = r.mapping(spec["kube"], kp, {"selector", "serviceName", "serviceNamespace", "servicePort"},
                  required=("serviceName", "servicePort"))
    if "selector" in k:
        r.mapping(k["selector"], kp + ("selector",))
    sname = r.string(k["serviceName"], kp + ("serviceName",))
    sns = r.string(k.get("serviceNamespace", ns), kp + ("serviceNamespace",))
    port = r.port(k["servicePort"], kp + ("servicePort",))
    return UpstreamResource(ns, name, kube=KubeRef(sname, sns, port), source=source)


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

