"""The configuration as a whole (:class:`Config`) and what is resolved across
resources once every document is read: Upstreams to endpoint addresses
(Kubernetes Service → Endpoints → Pod labels), and the references routes
make (dangling ones, subsets, duplicate domains).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import attrs

from twistgw.api.fields import Path
from twistgw.api.types import AuthConfigInfo, Endpoint, SecretInfo, UpstreamInfo, path_text
from twistgw.api.upstreampolicy import Http2Settings
from twistgw.config.errors import ConfigIssue
from twistgw.config.settings import discovery_namespace
from twistgw.config.servertls import resolve_server_tls, tls_chains
from twistgw.config.upstreamtls import resolve_tls
from twistgw.regex import SafeRegex, too_large
from twistgw.config.model import (
    EndpointsResource,
    EndpointSubset,
    GroupRef,
    KubeRef,
    Multi,
    Pod,
    Route,
    RouteTable,
    Service,
    ServicePort,
    Source,
    SubsetSpec,
    UpstreamGroup,
    UpstreamRef,
    UpstreamResource,
    VirtualService,
)

__all__ = ["Config", "Unresolvable", "check_references", "check_regex_sizes", "locate", "resolve_listener_tls",
           "resolve_upstreams"]


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
    settings: Mapping[str, Any] = attrs.field(factory=dict)  # YAML values: each plugin checks its own
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
    #: every resource read, by kind and then (namespace, name): the kinds
    #: above have their own typed fields too; a kind added to
    #: :data:`twistgw.config.kinds.KINDS` is found here
    resources: Mapping[str, Mapping[tuple[str, str], object]] = attrs.field(factory=dict)
    #: (namespace, name) of the RouteTables some virtual service delegates to
    route_tables_used: frozenset[tuple[str, str]] = frozenset()

    def of_kind(self, kind: str) -> Mapping[tuple[str, str], object]:
        """Every resource of ``kind`` read, keyed by (namespace, name)."""
        return self.resources.get(kind, {})

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
            return tuple(ep for ep, lab in zip(info.endpoints, labels, strict=True)
                         if all(lab.get(k, "") == v for k, v in values))

        chosen = pick(subset) if subset else ()
        if not chosen:
            if spec.fallback == "ANY_ENDPOINT":
                chosen = info.endpoints
            elif spec.fallback == "DEFAULT_SUBSET":
                chosen = pick(spec.default)
        return UpstreamInfo(info.namespace, info.name, chosen, subset, info.tls, info.breakers, info.connection,
                            info.http2)

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
        # Gloo's discovery: the port speaks HTTP/2 by its Service's annotation, appProtocol or name
        http2 = Http2Settings() if sport.http2 else None
        return UpstreamInfo(namespace, upstream_name, tuple(found), http2=http2), tuple(labels)


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


class Unresolvable(set[tuple[str, str, str]]):
    """The ``invalid`` set of a configuration some file of which could not be
    parsed: any resource may be in that file, so no reference is reported
    as dangling (the YAML error is; fix it first)."""

    def __contains__(self, item: object) -> bool:
        return True


#: ``issue(source, owner, path, reason)``: record a problem found after
#: reading, at the resource ``source`` points to.
Locate = Callable[[Source | None, str, Path, str], None]


def locate(issues: list[ConfigIssue]) -> Locate:
    """A :data:`Locate` that appends to ``issues``."""
    def issue(source: Source | None, owner: str, path: Path, reason: str) -> None:
        issues.append(ConfigIssue(
            reason, file=source.file if source else "", document=source.document if source else None,
            line=source.line_of(path) if source else None, resource=owner,
            field=source.field_of(path) if source else path_text(path)))
    return issue


@attrs.frozen
class Resolved:
    """What :func:`resolve_upstreams` found."""

    upstreams: dict[tuple[str, str], UpstreamInfo]
    subset_specs: dict[tuple[str, str], SubsetSpec]
    endpoint_labels: dict[tuple[str, str], tuple[Mapping[str, str], ...]]


def resolve_upstreams(config: Config, issue: Locate, invalid: set[tuple[str, str, str]],
                      partial: bool) -> Resolved:
    """Every Upstream's endpoints: discovered ones (each Service port is an
    Upstream ``<ns>-<service>-<port>``, as Gloo's discovery names them, in
    the Service's namespace and in the discovery namespace, ``gloo-system``
    unless Settings say otherwise, where Gloo writes it),
    static hosts, and ``kube`` Upstreams through their Service. Adds the
    Upstreams that cannot be resolved to ``invalid``."""
    found = Resolved({}, {}, {})
    discovery = discovery_namespace(config.settings)
    for (ns, sname), service in config.services.items():
        for sport in service.ports:
            info = config.resolve_kube(sname, ns, sport.port)
            found.upstreams[(ns, info.name)] = info
            # where Gloo's discovery writes it (gloo-system/default-petstore-8080)
            found.upstreams.setdefault((discovery, info.name), info)
    for (ns, uname), res in config.upstream_resources.items():
        if ("Upstream", ns, uname) in invalid:
            continue
        if res.static is not None:
            found.upstreams[(ns, uname)] = UpstreamInfo(ns, uname, res.static)
        elif res.kube is not None and not _resolve_kube_upstream(config, res, found, issue, invalid, partial):
            invalid.add(("Upstream", ns, uname))
            continue
        if res.ssl is not None and not _resolve_tls(config, res, found, issue, invalid, partial):
            del found.upstreams[(ns, uname)]
            invalid.add(("Upstream", ns, uname))
        elif res.breakers is not None or res.connection is not None:
            found.upstreams[(ns, uname)] = attrs.evolve(found.upstreams[(ns, uname)], breakers=res.breakers,
                                                        connection=res.connection)
        if res.http2 is not None and (ns, uname) in found.upstreams:  # useHttp2 (over TLS: ALPN h2)
            found.upstreams[(ns, uname)] = attrs.evolve(found.upstreams[(ns, uname)], http2=res.http2)
    return found


def _resolve_tls(config: Config, res: UpstreamResource, found: Resolved, issue: Locate,
                 invalid: set[tuple[str, str, str]], partial: bool) -> bool:
    """``sslConfig``: the Secret or files read, the PEMs checked."""
    assert res.ssl is not None
    key = (res.namespace, res.name)
    base = os.path.dirname(res.source.file) if res.source is not None else ""
    try:
        tls = resolve_tls(res.ssl, config.secrets, base)
    except LookupError as exc:
        if not partial and ("Secret", *(res.ssl.secret or ("", ""))) not in invalid:
            issue(res.source, f"Upstream {key[0]}/{key[1]}", ("spec", "sslConfig", "secretRef"),
                  f"dangling reference: {exc.args[0]}")
        return False
    except ValueError as exc:
        issue(res.source, f"Upstream {key[0]}/{key[1]}", ("spec", "sslConfig"), str(exc))
        return False
    found.upstreams[key] = attrs.evolve(found.upstreams[key], tls=tls)
    return True


def resolve_listener_tls(config: Config, issue: Locate, invalid: set[tuple[str, str, str]],
                         partial: bool) -> tuple[VirtualService, ...]:
    """Each VirtualService's ``sslConfig`` resolved (its certificate read
    and checked), and two certificates claiming one server name refused."""
    out = []
    for vs in config.virtual_services:
        spec = vs.ssl
        if spec is not None:
            owner, at = f"VirtualService {vs.key}", ("spec", "sslConfig")
            base = os.path.dirname(vs.source.file) if vs.source is not None else config.directory
            try:
                vs = attrs.evolve(vs, tls=resolve_server_tls(spec, config.secrets, base))
            except LookupError as exc:
                if not partial and ("Secret", *(spec.secret or ("", ""))) not in invalid:
                    issue(vs.source, owner, at + ("secretRef",), f"dangling reference: {exc.args[0]}")
            except ValueError as exc:
                field = next((f for f in ("tlsCert", "tlsKey", "rootCa") if f"sslFiles.{f}" in str(exc)), "")
                issue(vs.source, owner, at + (("secretRef",) if spec.secret is not None else
                                              ("sslFiles", field) if field else ()), str(exc))
        out.append(vs)
    by_key = {vs.key: vs for vs in out}

    def conflict(key: str, reason: str, index: int | None) -> None:
        vs = by_key[key]
        issue(vs.source, f"VirtualService {key}", ("spec", "sslConfig") + (("sniDomains", index)
                                                                        if index is not None else ()), reason)

    tls_chains(((vs.key, vs.tls) for vs in out if vs.tls is not None), conflict)
    return tuple(out)


def _resolve_kube_upstream(config: Config, res: UpstreamResource, found: Resolved, issue: Locate,
                           invalid: set[tuple[str, str, str]], partial: bool) -> bool:
    assert res.kube is not None
    ns, uname = res.namespace, res.name
    owner = f"Upstream {ns}/{uname}"
    if ("Service", res.kube.namespace, res.kube.name) in invalid:
        return False
    service = config.services.get((res.kube.namespace, res.kube.name))
    if res.selector is not None and service is not None and res.selector != (service.selector or {}):
        # A narrower selector picks a subset of the pods, which only
        # subsetSpec does here: refuse, never ignore.
        issue(res.source, owner, ("spec", "kube", "selector"),
              f"differs from the selector of Service {service.namespace}/{service.name}"
              f" ({service.selector or {}}); only the Service's own selector (or none) is accepted:"
              " pick pods with subsetSpec and a route's subset, or use a Service per set of pods")
        return False
    try:
        info, labels = config.labelled_kube(res.kube.name, res.kube.namespace, res.kube.port)
    except KeyError as exc:
        if not partial:
            issue(res.source, owner, ("spec", "kube"), exc.args[0])
        return False
    found.upstreams[(ns, uname)] = UpstreamInfo(ns, uname, info.endpoints)
    if res.subset_spec is not None:
        found.subset_specs[(ns, uname)] = res.subset_spec
        found.endpoint_labels[(ns, uname)] = labels
    return True


def check_references(config: Config, issue: Locate, invalid: set[tuple[str, str, str]]) -> None:
    """Cross-checks once routes are flattened: a domain served twice,
    ``prefixRewrite`` on a regex, dangling destinations, subsets."""
    # Per listener kind, as Gloo checks per Gateway: a domain may be served
    # on plain listeners by one virtual service and on TLS ones by another.
    domains: dict[tuple[bool, str], str] = {}
    for vs in config.virtual_services:
        for i, domain in enumerate(vs.domains):
            kind = (vs.ssl is not None, domain)
            if kind in domains and domains[kind] != vs.key:
                issue(vs.source, f"VirtualService {vs.key}", ("spec", "virtualHost", "domains", i),
                      f"domain {domain!r} is already served by VirtualService {domains[kind]}"
                      + (" (both have sslConfig)" if vs.ssl is not None else ""))
            domains.setdefault(kind, vs.key)
        for route in vs.routes:
            where = route.source or vs.source
            owner = route.owner or f"VirtualService {vs.key}"
            if route.prefix_rewrite is not None and any(m.regex is not None for m in route.matchers):
                issue(where, owner, route.path + ("options", "prefixRewrite"),
                      "cannot rewrite the prefix of a regex match (Envoy refuses it too): match by prefix"
                      " or exact, or let the backend see the path as it is")
            for at, dest in _destinations(config, route, invalid, issue, where, owner):
                reason, field = _destination_problem(config, dest, invalid)
                if reason:
                    issue(where, owner, route.path + at + field, reason)


def _destinations(config: Config, route: Route, invalid: set[tuple[str, str, str]], issue: Locate,
                  where: Source | None, owner: str) -> list[tuple[Path, object]]:
    """A route's destinations with the path of each (``routeAction.single``,
    ``routeAction.multi.destinations[i].destination``); a dangling
    UpstreamGroup reported here."""
    action = route.action
    if isinstance(action, Multi):
        return [(("routeAction", "multi", "destinations", i, "destination"), d.destination)
                for i, d in enumerate(action.destinations)]
    if isinstance(action, GroupRef):
        if (action.namespace, action.name) not in config.of_kind("UpstreamGroup"):
            if ("UpstreamGroup", action.namespace, action.name) not in invalid:
                issue(where, owner, route.path + ("routeAction", "upstreamGroup"),
                      f"dangling reference: no UpstreamGroup {action.namespace}/{action.name}")
        return []
    return [(("routeAction", "single"), action)]


def check_upstream_groups(config: Config, issue: Locate, invalid: set[tuple[str, str, str]]) -> None:
    """Each UpstreamGroup's destinations exist (reported where the group is written)."""
    for group in config.of_kind("UpstreamGroup").values():
        assert isinstance(group, UpstreamGroup)
        source = config.sources.get(("UpstreamGroup", group.namespace, group.name))
        for i, d in enumerate(group.destinations):
            reason, field = _destination_problem(config, d.destination, invalid)
            if reason:
                issue(source, f"UpstreamGroup {group.namespace}/{group.name}",
                      ("spec", "destinations", i, "destination") + field, reason)


def _destination_problem(config: Config, action: object,
                         invalid: set[tuple[str, str, str]]) -> tuple[str, Path]:
    """What is wrong with a route's destination ("" when nothing), and the
    field below ``routeAction.single``."""
    if isinstance(action, KubeRef):
        if ("Service", action.namespace, action.name) in invalid:
            return "", ()
        try:
            config.resolve_kube(action.name, action.namespace, action.port)
        except KeyError as exc:
            return f"dangling reference: {exc.args[0]}", ("kube", "ref")
        if action.subset:
            return ("route has a subset config, but the upstream does not (Gloo's rule): a kube"
                    " destination's upstream declares no subsetSpec; route to an Upstream with"
                    " kube.subsetSpec"), ("subset",)
    elif isinstance(action, UpstreamRef):
        ukey = (action.namespace, action.name)
        if ukey not in config.upstreams:
            if ("Upstream", action.namespace, action.name) in invalid:
                return "", ()
            return (f"dangling reference: no Upstream {action.namespace}/{action.name}"
                    " (neither declared nor discovered from a Service)"), ("upstream",)
        if action.subset:
            return _subset_mismatch(action, config.subset_specs.get(ukey)), ("subset", "values")
    return "", ()


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


def check_regex_sizes(config: Config, issue: Locate, limit: int) -> None:
    """Every regular expression of every route (as written, in virtual
    services and route tables) against the program-size limit."""
    owners: list[tuple[str, Source | None, tuple[Route, ...]]] = [
        (f"VirtualService {vs.key}", vs.source, vs.routes) for vs in config.virtual_services]
    owners += [(f"RouteTable {rt.key}", rt.source, rt.routes) for rt in config.route_tables.values()]
    for owner, source, routes in owners:
        for route in routes:
            for j, m in enumerate(route.matchers):
                mp = route.path + ("matchers", j)
                found: list[tuple[Path, SafeRegex | None]] = [(mp + ("regex",), m.regex)]
                found += [(mp + ("headers", k, "value"), h.regex) for k, h in enumerate(m.headers)]
                found += [(mp + ("queryParameters", k, "value"), q.regex) for k, q in enumerate(m.query)]
                for path, rx in found:
                    if rx is not None and rx.program_size > limit:
                        issue(source, owner, path, too_large(rx.program_size, limit))
