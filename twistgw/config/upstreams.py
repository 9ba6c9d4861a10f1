"""Where traffic goes: ``Upstream`` (static hosts or a Kubernetes Service
port, with Gloo's ``subsetSpec``) and the Kubernetes kinds an Upstream is
resolved through (``Service``, ``Endpoints``, ``Pod``). Resolution itself
(Service port → endpoint addresses) is in :mod:`twistgw.config.resolution`.
"""

from __future__ import annotations

from typing import Any

from twistgw.api.fields import FieldReader, Path
from twistgw.api.types import Endpoint
from twistgw.config.envelope import Envelope
from twistgw.config.gloo import unsupported
from twistgw.config.model import (
    EndpointsResource,
    EndpointSubset,
    KubeRef,
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


def _tcp_protocol(r: FieldReader, p: dict[str, Any], pp: Path) -> None:
    """``protocol`` and ``appProtocol`` of a Service or Endpoints port: the
    gateway speaks HTTP/1.1 over TCP to endpoints, so nothing else is accepted."""
    with r.part():
        if r.string(p.get("protocol", "TCP"), pp + ("protocol",)) != "TCP":
            raise r.fail(pp + ("protocol",), f"must be TCP: twistgw proxies HTTP over TCP, got {p['protocol']!r}")
    with r.part():
        app = r.string(p.get("appProtocol", "http"), pp + ("appProtocol",))
        if app not in ("http", "kubernetes.io/http"):
            raise r.fail(pp + ("appProtocol",), f"must be http: twistgw speaks HTTP/1.1 to endpoints, got {app!r}")


def read_service(r: FieldReader, res: Envelope) -> Service:
    """A ``v1 Service``: its ports (and selector, compared with an Upstream's)."""
    ns, name, source = res.namespace, res.name, res.source
    spec = r.mapping(res.spec, ("spec",), {"ports", "externalName"} | SERVICE_INFORMATIONAL)
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


def read_upstream(r: FieldReader, res: Envelope) -> UpstreamResource:
    """An ``Upstream``: static hosts, or a Kubernetes Service port (with subsets)."""
    ns, name, source = res.namespace, res.name, res.source
    spec = r.mapping(res.spec, ("spec",))
    spec = r.mapping(unsupported(r, spec, ("spec",), "upstreamSpec"), ("spec",), {"kube", "static"})
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
    k = r.mapping(unsupported(r, k, kp, "upstreamSpec"), kp,
                  {"serviceName", "serviceNamespace", "servicePort", "selector", "subsetSpec"},
                  required=("serviceName", "servicePort"))
    sname = r.string(k["serviceName"], kp + ("serviceName",))
    sns = r.string(k.get("serviceNamespace", ns), kp + ("serviceNamespace",))
    port = r.port(k["servicePort"], kp + ("servicePort",))
    selector = r.labels(k["selector"], kp + ("selector",)) if "selector" in k else None
    subset_spec = read_subset_spec(r, k["subsetSpec"], kp + ("subsetSpec",)) if "subsetSpec" in k else None
    return UpstreamResource(ns, name, kube=KubeRef(sname, sns, port), source=source, selector=selector,
                            subset_spec=subset_spec)
