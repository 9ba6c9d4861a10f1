"""Where traffic goes: ``Upstream`` (static hosts or a Kubernetes Service
port, with Gloo's ``subsetSpec``) and the Kubernetes kinds an Upstream is
resolved through (``Service``, ``Endpoints``, ``Pod``). Resolution itself
(Service port → endpoint addresses) is in :mod:`twistgw.config.resolution`.
"""

from __future__ import annotations

from typing import Any

import attrs

from twistgw.api.fields import FieldReader, Path
from twistgw.api.types import Endpoint
from twistgw.api.upstreampolicy import CircuitBreakers
from twistgw.config.envelope import Envelope
from twistgw.config.gloo import unsupported
from twistgw.config.http2 import H2_APP_PROTOCOLS, H2_FIELDS, read_http2, read_service_spec, service_annotations, \
    speaks_http2
from twistgw.config.upstreampolicy import read_connection_config, read_outlier_detection
from twistgw.config.upstreamtls import SslSpec, read_ssl_config
from twistgw.config.model import (
    EndpointsResource,
    EndpointSubset,
    HealthCheck,
    KubeRef,
    LoadBalancer,
    Pod,
    Service,
    ServicePort,
    SubsetSpec,
    UpstreamResource,
)

__all__ = ["FALLBACK_POLICIES", "SERVICE_INFORMATIONAL", "read_endpoints", "read_pod", "read_service",
           "read_subset_spec", "read_upstream"]


#: ServiceSpec fields that describe the cluster, not what the gateway does:
#: read for compatibility with real manifests and otherwise ignored (the
#: Endpoints documents say where traffic goes). See docs/configuration.md.
SERVICE_INFORMATIONAL = frozenset({
    "selector", "type", "clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "sessionAffinity",
    "sessionAffinityConfig", "externalTrafficPolicy", "internalTrafficPolicy", "publishNotReadyAddresses",
    "allocateLoadBalancerNodePorts", "loadBalancerClass", "healthCheckNodePort", "externalIPs",
    "loadBalancerSourceRanges", "trafficDistribution",
})


def _tcp_protocol(r: FieldReader, p: dict[str, Any], pp: Path) -> str | None:
    """``protocol`` and ``appProtocol`` of a Service or Endpoints port: the
    gateway speaks HTTP/1.1 or HTTP/2 over TCP to endpoints, so nothing else
    is accepted. Returns the ``appProtocol`` as written (None: not written)."""
    with r.part():
        if r.string(p.get("protocol", "TCP"), pp + ("protocol",)) != "TCP":
            raise r.fail(pp + ("protocol",), f"must be TCP: twistgw proxies HTTP over TCP, got {p['protocol']!r}")
    app = None
    with r.part():
        if "appProtocol" in p:
            app = r.string(p["appProtocol"], pp + ("appProtocol",))
            if app not in ("http", "kubernetes.io/http") and app not in H2_APP_PROTOCOLS:
                raise r.fail(pp + ("appProtocol",), "must be http, or one of Gloo's HTTP/2 protocols ("
                             f"{', '.join(sorted(H2_APP_PROTOCOLS))}): twistgw speaks HTTP/1.1 and HTTP/2 to"
                             f" endpoints, got {app!r}")
    return app


def read_service(r: FieldReader, res: Envelope) -> Service:
    """A ``v1 Service``: its ports (and selector, compared with an Upstream's)."""
    ns, name, source = res.namespace, res.name, res.source
    spec = r.mapping(res.spec, ("spec",), {"ports", "externalName"} | SERVICE_INFORMATIONAL)
    if spec.get("type") == "ExternalName" or "externalName" in spec:
        r.issue(("spec", "type"), "ExternalName Services are not supported: declare an Upstream with static hosts")
    ports = []
    h2 = service_annotations(r, res.data)
    for i, p in enumerate(r.sequence(spec.get("ports", []), ("spec", "ports"))):
        pp = ("spec", "ports", i)
        p = r.mapping(p, pp, {"name", "port", "targetPort", "protocol", "nodePort", "appProtocol"}, required=("port",))
        app = _tcp_protocol(r, p, pp)
        port = r.port(p["port"], pp + ("port",))
        target = p.get("targetPort", port)
        if isinstance(target, str):
            r.string(target, pp + ("targetPort",))
        else:
            target = r.port(target, pp + ("targetPort",))
        pname = r.string(p.get("name", ""), pp + ("name",), nonempty=False)
        ports.append(ServicePort(port, target, pname, speaks_http2(h2, pname, app)))
    selector = None
    with r.part():
        if "selector" in spec:
            selector = r.labels(spec["selector"], ("spec", "selector"))
    return Service(ns, name, tuple(ports), source, selector)


def read_endpoints(r: FieldReader, res: Envelope) -> EndpointsResource:
    """A ``v1 Endpoints``: the addresses and ports behind a Service."""
    ns, name, source, data = res.namespace, res.name, res.source, res.data
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
            pname = r.string(p.get("name", ""), pp + ("name",), nonempty=False)
            ports.append((pname, r.port(p["port"], pp + ("port",))))
        subsets.append(EndpointSubset(tuple(addrs), tuple(ports), tuple(pods)))
    return EndpointsResource(ns, name, tuple(subsets), source)


def _pod_ref(r: FieldReader, value: Any, path: Path, ns: str) -> tuple[str, str] | None:
    """An endpoint address's ``targetRef``: the (namespace, name) of a Pod,
    whose labels place the endpoint in subsets; other kinds say nothing."""
    if value is None:
        return None
    ref = r.mapping(value, path)
    if ref.get("kind") != "Pod" or not isinstance(ref.get("name"), str):
        return None
    return (r.string(ref.get("namespace", ns), path + ("namespace",)), ref["name"])


def read_pod(r: FieldReader, res: Envelope) -> Pod:
    """A ``v1 Pod``: its labels (read by the envelope) and ``status.podIP``;
    the rest describes the cluster (informational)."""
    ns, name, data = res.namespace, res.name, res.data
    r.mapping(data.get("spec") or {}, ("spec",))
    status = r.mapping(data.get("status") or {}, ("status",))
    ip = r.string(status["podIP"], ("status", "podIP")) if status.get("podIP") is not None else ""
    return Pod(ns, name, dict(res.labels), ip)


#: Gloo's ``SubsetSpec.fallbackPolicy`` values (Envoy's LbSubsetFallbackPolicy).
FALLBACK_POLICIES = ("ANY_ENDPOINT", "NO_FALLBACK", "DEFAULT_SUBSET")


def read_subset_spec(r: FieldReader, value: Any, path: Path) -> SubsetSpec:
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
            default = tuple(sorted(r.labels(d["values"], dp + ("values",)).items()))
        elif fallback == "DEFAULT_SUBSET":
            raise r.fail(path + ("fallbackPolicy",), "DEFAULT_SUBSET needs defaultSubset: {values: {...}}")
    return SubsetSpec(tuple(selectors), fallback, default)


#: Gloo's upstream types twistgw refuses (config/gloo.py says why)
_REFUSED_TYPES = ("aws", "azure", "gcp", "consul", "pipe", "awsEc2")


def _one_type(r: FieldReader, spec: dict[str, Any], refused_type: bool) -> None:
    """``kube`` or ``static``, exactly one; not said again when the
    Upstream's type is one twistgw refuses (aws, consul...: already reported)."""
    given = [k for k in spec if k in ("kube", "static")]
    if len(given) != 1:
        if refused_type and not given:
            raise r.invalid()
        raise r.fail(("spec",), "set exactly one of kube or static")


def read_upstream(r: FieldReader, res: Envelope) -> UpstreamResource:
    """An ``Upstream``: static hosts, or a Kubernetes Service port (with subsets)."""
    ns, name, source = res.namespace, res.name, res.source
    spec = r.mapping(res.spec, ("spec",))
    refused_type = any(k in spec for k in _REFUSED_TYPES)
    spec = r.mapping(unsupported(r, spec, ("spec",), "upstreamSpec"), ("spec",),
                     {"kube", "static", "discoveryMetadata", "loadBalancerConfig", "healthChecks", "sslConfig",
                      "circuitBreakers", "outlierDetection", "connectionConfig"} | H2_FIELDS)
    lb = hc = ssl = breakers = None
    policy = _read_policy(r, spec)
    if spec.get("circuitBreakers") is not None:
        with r.part():
            breakers = read_circuit_breakers(r, spec["circuitBreakers"], ("spec", "circuitBreakers"))
    if spec.get("healthChecks") is not None:
        with r.part():
            hc = read_health_checks(r, spec["healthChecks"], ("spec", "healthChecks"))
    if spec.get("loadBalancerConfig") is not None:
        with r.part():
            lb = read_load_balancer(r, spec["loadBalancerConfig"], ("spec", "loadBalancerConfig"))
    if spec.get("sslConfig") is not None:
        with r.part():
            ssl = read_ssl_config(r, spec["sslConfig"], ("spec", "sslConfig"), ns)
    if spec.get("discoveryMetadata") is not None:
        # What Gloo's discovery wrote (labels of the Service): kept as
        # metadata only, as Gloo does; routing never reads it.
        with r.part():
            dm = r.mapping(spec["discoveryMetadata"], ("spec", "discoveryMetadata"), {"labels"})
            r.labels(dm.get("labels"), ("spec", "discoveryMetadata", "labels"))
    _one_type(r, spec, refused_type)
    if "static" in spec:
        hosts, ssl = _read_static(r, spec["static"], ssl)
    if ssl is not None and hc is not None:
        r.issue(("spec", "healthChecks"), "is not supported by twistgw on a TLS upstream yet (the checks speak"
                " plain HTTP): remove healthChecks or the TLS settings")
    if "static" in spec:
        return UpstreamResource(ns, name, static=hosts, source=source, load_balancer=lb, health_check=hc, ssl=ssl,
                                breakers=breakers, **policy)
    kp = ("spec", "kube")
    k = r.mapping(spec["kube"], kp)
    k = r.mapping(unsupported(r, k, kp, "upstreamSpec"), kp,
                  {"serviceName", "serviceNamespace", "servicePort", "selector", "subsetSpec", "serviceSpec"},
                  required=("serviceName", "servicePort"))
    sname = r.string(k["serviceName"], kp + ("serviceName",))
    sns = r.string(k.get("serviceNamespace", ns), kp + ("serviceNamespace",))
    port = r.port(k["servicePort"], kp + ("servicePort",))
    selector = r.labels(k["selector"], kp + ("selector",)) if "selector" in k else None
    subset_spec = read_subset_spec(r, k["subsetSpec"], kp + ("subsetSpec",)) if "subsetSpec" in k else None
    return UpstreamResource(ns, name, kube=KubeRef(sname, sns, port), source=source, selector=selector,
                            subset_spec=subset_spec, load_balancer=lb, health_check=hc, ssl=ssl,
                            breakers=breakers, **policy)


def _read_policy(r: FieldReader, spec: dict[str, Any]) -> dict[str, Any]:
    """An Upstream's HTTP/2 (``useHttp2``, a gRPC ``serviceSpec``),
    ``outlierDetection`` and ``connectionConfig``, as UpstreamResource's fields."""
    policy: dict[str, Any] = {}
    with r.part():
        kind = spec.get("kube") if "kube" in spec else spec.get("static")
        where = ("spec", "kube" if "kube" in spec else "static", "serviceSpec")
        grpc = isinstance(kind, dict) and kind.get("serviceSpec") is not None and \
            read_service_spec(r, kind["serviceSpec"], where)
        http2 = read_http2(r, spec, ("spec",), grpc)
        if http2 is not None:
            policy["http2"] = http2
    if spec.get("outlierDetection") is not None:
        with r.part():
            policy["outlier"] = read_outlier_detection(r, spec["outlierDetection"], ("spec", "outlierDetection"))
    if spec.get("connectionConfig") is not None:
        with r.part():
            policy["connection"] = read_connection_config(r, spec["connectionConfig"], ("spec", "connectionConfig"))
    return policy


def read_circuit_breakers(r: FieldReader, value: Any, path: Path) -> CircuitBreakers:
    """``circuitBreakers`` (Gloo's CircuitBreakerConfig); an unset threshold
    is Envoy's default."""
    m = dict(r.mapping(value or {}, path))
    if m.pop("trackRemaining", None) is not None:
        r.issue(path + ("trackRemaining",), "is not supported by twistgw (there are no Envoy stats)")
    m = r.mapping(m, path, {"maxConnections", "maxPendingRequests", "maxRequests", "maxRetries"})
    d = CircuitBreakers()
    values = {key: r.integer(m[key], path + (key,), 0, 1 << 31) if m.get(key) is not None else default
              for key, default in (("maxConnections", d.max_connections), ("maxPendingRequests", d.max_pending),
                                   ("maxRequests", d.max_requests), ("maxRetries", d.max_retries))}
    if values["maxConnections"] == 0 or values["maxRequests"] == 0:
        raise r.fail(path, "maxConnections and maxRequests must be at least 1 (0 would refuse every request)")
    return CircuitBreakers(values["maxConnections"], values["maxPendingRequests"], values["maxRequests"],
                           values["maxRetries"])


def _read_static(r: FieldReader, value: Any, ssl: SslSpec | None) -> tuple[tuple[Endpoint, ...], SslSpec | None]:
    """``static``: its hosts (with ``sniAddr``), and TLS when ``useTls`` or
    ``sslConfig`` asks for it (Gloo: ``useTls`` without ``sslConfig`` is TLS
    with default settings; here the system's CAs, verified by name)."""
    sp = ("spec", "static")
    st = r.mapping(value, sp, {"hosts", "useTls", "autoSniRewrite", "serviceSpec"}, required=("hosts",))
    use_tls = r.boolean(st["useTls"], sp + ("useTls",)) if st.get("useTls") is not None else None
    if use_tls is False and ssl is not None:
        r.issue(sp + ("useTls",), "is false while sslConfig is set: remove one (twistgw never sends plain"
                " HTTP to an upstream that has sslConfig)")
    hosts = []
    sni: list[tuple[str, str]] = []
    for i, h in enumerate(r.sequence(st["hosts"], sp + ("hosts",), nonempty=True)):
        hp = sp + ("hosts", i)
        h = r.mapping(h, hp, {"addr", "port", "sniAddr"}, required=("addr", "port"))
        ep = Endpoint(r.string(h["addr"], hp + ("addr",)), r.port(h["port"], hp + ("port",)))
        hosts.append(ep)
        if h.get("sniAddr") is not None:
            sni.append((ep.host, r.string(h["sniAddr"], hp + ("sniAddr",))))
    if use_tls and ssl is None:
        ssl = SslSpec()
    auto_sni = st.get("autoSniRewrite")
    if auto_sni is not None and not r.boolean(auto_sni, sp + ("autoSniRewrite",)) and ssl is not None:
        r.issue(sp + ("autoSniRewrite",), "false is not supported by twistgw on a TLS upstream: the name verified"
                " is always sent as SNI (sslConfig.sni, else the host's sniAddr, else its addr)")
    if ssl is not None and sni:
        ssl = attrs.evolve(ssl, host_sni=tuple(sni))
    elif sni:
        r.issue(sp + ("hosts",), "sniAddr is set but the upstream is plain HTTP: set useTls or sslConfig")
    return tuple(hosts), ssl


_LB_LATER = "is not supported by twistgw"
_LB_KINDS = ("roundRobin", "leastRequest", "random", "ringHash", "maglev")


def read_load_balancer(r: FieldReader, value: Any, path: Path) -> LoadBalancer:
    """``loadBalancerConfig`` (Gloo's LoadBalancerConfig, Envoy's lb_policy)."""
    m = dict(r.mapping(value, path))
    for key, why in (("localityWeightedLbConfig", " (endpoints have no locality)"),
                     ("updateMergeWindow", " (a configuration change applies at once)"),
                     ("slowStartConfig", " (a new endpoint takes its full share at once)")):
        if m.pop(key, None) is not None:
            r.issue(path + (key,), _LB_LATER + why)
    m = r.mapping(m, path, set(_LB_KINDS) | {"healthyPanicThreshold"})
    panic = 50.0
    with r.part():
        if m.get("healthyPanicThreshold") is not None:
            panic = _percent(r, m["healthyPanicThreshold"], path + ("healthyPanicThreshold",))
    kinds = [k for k in _LB_KINDS if k in m]
    if len(kinds) > 1:
        raise r.fail(path, "set one of " + ", ".join(_LB_KINDS))
    if not kinds:
        return LoadBalancer(panic_threshold=panic)
    kind = kinds[0]
    body = dict(r.mapping(m[kind] or {}, path + (kind,)))
    if kind in ("roundRobin", "leastRequest") and body.pop("slowStartConfig", None) is not None:
        r.issue(path + (kind, "slowStartConfig"), _LB_LATER + " (endpoints take their full share at once)")
    allowed = {"ringHash": {"ringHashConfig", "useHostnameForHashing"}, "maglev": {"useHostnameForHashing"},
               "leastRequest": {"choiceCount"}}
    body = r.mapping(body, path + (kind,), allowed.get(kind, set()))
    choices = 2
    if body.get("choiceCount") is not None:
        choices = r.integer(body["choiceCount"], path + (kind, "choiceCount"), 2, 100)
    by_hostname = False
    if body.get("useHostnameForHashing") is not None:
        by_hostname = r.boolean(body["useHostnameForHashing"], path + (kind, "useHostnameForHashing"))
    lo, hi = 1024, 8 * 1024 * 1024
    if body.get("ringHashConfig") is not None:
        cp = path + (kind, "ringHashConfig")
        c = r.mapping(body["ringHashConfig"], cp, {"minimumRingSize", "maximumRingSize"})
        lo = _ring_size(r, c.get("minimumRingSize", lo), cp + ("minimumRingSize",))
        hi = _ring_size(r, c.get("maximumRingSize", hi), cp + ("maximumRingSize",))
        if lo > hi:
            raise r.fail(cp, "minimumRingSize is above maximumRingSize")
    return LoadBalancer(kind, lo, hi, by_hostname, choices, panic)


def _percent(r: FieldReader, value: Any, path: Path) -> float:
    """A percentage as Gloo writes it (a DoubleValue, 0 to 100)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise r.fail(path, f"must be a percentage from 0 to 100, got {value!r}")
    return float(value)


def _ring_size(r: FieldReader, value: Any, path: Path) -> int:
    """A uint64 as Gloo writes it: an integer, or digits in a string (proto JSON)."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return r.integer(value, path, 1, 8 * 1024 * 1024)


_HC_LATER = "is not supported by twistgw: active checks are HTTP (httpHealthCheck)"


def read_health_checks(r: FieldReader, value: Any, path: Path) -> HealthCheck | None:
    """``healthChecks``: one active HTTP check (Envoy's HealthCheck as Gloo writes it)."""
    checks = r.sequence(value, path)
    if not checks:
        return None
    if len(checks) > 1:
        raise r.fail(path, "twistgw runs one health check per upstream: list one")
    p = path + (0,)
    later = _HC_LATER.removeprefix("is not supported by twistgw: ")
    kept = "the check runs every interval, or noTrafficInterval before any traffic, on a kept-alive connection"
    refused = {**dict.fromkeys(("tcpHealthCheck", "grpcHealthCheck", "customHealthCheck"), later),
               **dict.fromkeys(("unhealthyInterval", "unhealthyEdgeInterval", "healthyEdgeInterval",
                                "initialJitter", "intervalJitter", "intervalJitterPercent", "eventLogPath",
                                "alwaysLogHealthCheckFailures", "reuseConnection", "tlsOptions",
                                "transportSocketMatchCriteria"), kept)}
    m = r.mapping(checks[0], p, {"timeout", "interval", "unhealthyThreshold", "healthyThreshold", "httpHealthCheck",
                                 "noTrafficInterval"},
                  required=("timeout", "interval", "unhealthyThreshold", "healthyThreshold", "httpHealthCheck"),
                  refused=refused)
    timeout = r.duration(m["timeout"], p + ("timeout",))
    interval = r.duration(m["interval"], p + ("interval",))
    quiet = 60.0 if m.get("noTrafficInterval") is None else \
        r.duration(m["noTrafficInterval"], p + ("noTrafficInterval",))
    unhealthy = r.integer(m["unhealthyThreshold"], p + ("unhealthyThreshold",), 1, 1000)
    healthy = r.integer(m["healthyThreshold"], p + ("healthyThreshold",), 1, 1000)
    hp = p + ("httpHealthCheck",)
    h = r.mapping(m["httpHealthCheck"], hp, {"path", "host", "expectedStatuses"}, required=("path",))
    hpath = r.string(h["path"], hp + ("path",))
    if not hpath.startswith("/"):
        raise r.fail(hp + ("path",), "must start with '/'")
    host = r.string(h["host"], hp + ("host",)) if "host" in h else ""
    statuses: list[tuple[int, int]] = []
    for i, rng in enumerate(r.sequence(h.get("expectedStatuses") or [], hp + ("expectedStatuses",))):
        rp = hp + ("expectedStatuses", i)
        rr = r.mapping(rng, rp, {"start", "end"}, required=("start", "end"))
        lo, hi = r.integer(rr["start"], rp + ("start",), 100, 599), r.integer(rr["end"], rp + ("end",), 101, 600)
        if lo >= hi:
            raise r.fail(rp, "start must be below end (the range is [start, end))")
        statuses.append((lo, hi))
    return HealthCheck(interval, timeout, unhealthy, healthy, hpath, host, tuple(statuses) or ((200, 201),), quiet)
