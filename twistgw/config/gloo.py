"""Gloo Edge's tables: the API groups and kinds twistgw reads, the option
keys the core reads itself, and the Gloo fields it does not implement.

The kinds themselves (which reader reads each) are listed in
:mod:`twistgw.config.kinds`; this module holds only data, so every resource
reader may import it.
"""

from __future__ import annotations

from typing import Any

from twistgw.api.fields import FieldReader, Path
from twistgw.config.traffic import CORE_TRAFFIC_KEYS

__all__ = ["CORE_GROUP", "CORE_OPTION_KEYS", "ENTERPRISE", "GATEWAY", "GLOO_UNSUPPORTED", "OURS_ONLY",
           "RATELIMIT", "SOLO_GROUPS", "UPSTREAMS", "unsupported"]

# The apiVersions each family of kinds is read under: ours first, then Gloo
# Edge's own group as an alias, so Gloo manifests load unchanged.

#: VirtualService, RouteTable (Gloo: ``gateway.solo.io/v1``)
GATEWAY = ("gateway.vendor.io/v1", "gateway.solo.io/v1")
#: Upstream (Gloo: ``gloo.solo.io/v1``)
UPSTREAMS = ("core.vendor.io/v1", "gloo.solo.io/v1")
#: AuthConfig (Gloo Enterprise: ``enterprise.gloo.solo.io/v1``)
ENTERPRISE = ("enterprise.gateway.vendor.io/v1", "enterprise.gloo.solo.io/v1")
#: RateLimitConfig (Gloo Enterprise's rate-limit server: ``ratelimit.solo.io/v1alpha1``)
RATELIMIT = ("ratelimit.vendor.io/v1alpha1", "ratelimit.solo.io/v1alpha1")
#: Kubernetes' core group: Secret, Service, Endpoints, Pod
CORE_GROUP = ("v1",)
#: twistgw's own kinds with no Gloo twin (Settings: Gloo's Settings is a
#: different resource, read by Gloo's control plane)
OURS_ONLY = ("gateway.vendor.io/v1",)

#: Gloo's API groups (solo.io), read or not: a document of one of them is a
#: Gloo resource, so a near-miss of one of their names is a typo.
SOLO_GROUPS = frozenset({
    "gateway.solo.io", "gloo.solo.io", "enterprise.gloo.solo.io", "ratelimit.solo.io",
    "graphql.gloo.solo.io", "fed.solo.io", "fed.gateway.solo.io", "fed.gloo.solo.io",
})

#: Options keys the core itself reads; every other key names a plugin.
CORE_OPTION_KEYS = frozenset({"pluginOrder", "prefixRewrite", "timeout", "tracing", "upgrades"}) | CORE_TRAFFIC_KEYS


#: Gloo Edge fields twistgw does not implement, by where they are written,
#: with the reason given instead of a bare "unknown field".
GLOO_UNSUPPORTED: dict[str, dict[str, str]] = {
    "spec": {},
    "route": {
        "graphqlApiRef": "GraphQL is out of twistgw's scope",
    },
    "routeAction": {
        "clusterHeader": "routing by a cluster header is not supported",
        "dynamicForwardProxy": "the dynamic forward proxy is out of twistgw's scope (it forwards to any host a"
                               " client names; route to declared upstreams)",
    },
    "single": {
        "destinationSpec": "destination specs (REST/gRPC function routing) are not supported",
        "consul": "Consul destinations are not supported",
    },
    "upstreamSpec": {
        "aws": "AWS Lambda upstreams are out of twistgw's scope (cloud functions)",
        "azure": "Azure function upstreams are out of twistgw's scope (cloud functions)",
        "gcp": "Google Cloud upstreams are out of twistgw's scope (cloud functions)",
        "consul": "Consul upstreams are out of twistgw's scope: list the hosts in a static upstream",
        "pipe": "unix-socket upstreams are not supported",
        "awsEc2": "EC2 upstreams are out of twistgw's scope: list the hosts in a static upstream",
        "grpcJsonTranscoder": "gRPC-JSON transcoding is out of twistgw's scope",
        "httpProxyHostname": "tunnelling to upstreams through an HTTP proxy is not supported",
        "proxyProtocolVersion": "the PROXY protocol to upstreams is not supported",
    },
}


def unsupported(r: FieldReader, m: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    """Report Gloo fields written here that twistgw does not implement;
    return the mapping without them (so they are reported once)."""
    return r.mapping(m, path, refused=GLOO_UNSUPPORTED[where])
