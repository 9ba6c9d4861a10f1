"""The kinds twistgw reads: one row each, the table the loader dispatches on.

**Adding a kind** (a ``RateLimitConfig``, a ``ConfigMap``...) is one module
and one row here:

1. write ``twistgw/config/<family>.py`` with
   ``read_<kind>(r: FieldReader, res: Envelope) -> <YourResource>``: check
   ``res.spec`` (or ``res.data``) with the reader's checks, record every
   problem (``r.issue``/``raise r.fail``, ``with r.part():``), return an
   immutable object (attrs frozen);
2. add ``Kind("<Kind>", <api versions>, read_<kind>)`` to :data:`KINDS`
   (the apiVersions: ours first, then Gloo's, from :mod:`twistgw.config.gloo`).

The loader then reads every document of that kind, refuses duplicates, and
keeps the results in ``Config.resources["<Kind>"]`` keyed by ``(namespace,
name)``; plugins look them up with ``ResourceView.resource(kind, name,
namespace)``. See docs/architecture.md, "Adding a kind".
"""

from __future__ import annotations

from typing import Mapping

from twistgw.config import gloo
from twistgw.config.configmaps import read_config_map
from twistgw.config.envelope import Kind
from twistgw.config.gateways import read_gateway
from twistgw.config.ratelimits import read_rate_limit_config
from twistgw.config.optionkinds import read_route_option, read_upstream_group, read_virtual_host_option
from twistgw.config.routetables import read_route_table
from twistgw.config.secrets import read_auth_config, read_secret
from twistgw.config.gloosettings import read_any_settings
from twistgw.config.upstreams import read_endpoints, read_pod, read_service, read_upstream
from twistgw.config.virtualservices import read_virtual_service

__all__ = ["API_VERSIONS", "KINDS", "OUR_GROUPS"]

#: Every kind twistgw reads, by name.
KINDS: Mapping[str, Kind] = {kind.name: kind for kind in (
    Kind("VirtualService", gloo.GATEWAY, read_virtual_service),
    Kind("RouteTable", gloo.GATEWAY, read_route_table),
    Kind("Gateway", gloo.GATEWAY, read_gateway),
    Kind("Upstream", gloo.UPSTREAMS, read_upstream),
    Kind("UpstreamGroup", gloo.UPSTREAMS, read_upstream_group),
    Kind("VirtualHostOption", gloo.GATEWAY, read_virtual_host_option),
    Kind("RouteOption", gloo.GATEWAY, read_route_option),
    Kind("AuthConfig", gloo.ENTERPRISE, read_auth_config),
    Kind("Secret", gloo.CORE_GROUP, read_secret, top_level=frozenset({"data", "stringData", "type", "immutable"}),
         needs_spec=False, proto_names=False),
    Kind("Service", gloo.CORE_GROUP, read_service, proto_names=False),
    Kind("Endpoints", gloo.CORE_GROUP, read_endpoints, top_level=frozenset({"subsets"}), needs_spec=False,
         proto_names=False),
    Kind("Pod", gloo.CORE_GROUP, read_pod, needs_spec=False, proto_names=False),
    Kind("ConfigMap", gloo.CORE_GROUP, read_config_map, top_level=frozenset({"data", "binaryData", "immutable"}),
         needs_spec=False, proto_names=False),
    # twistgw's own Settings, or Gloo's (gloo.solo.io/v1), read into the same sections
    Kind("Settings", gloo.OURS_ONLY + ("gloo.solo.io/v1",), read_any_settings, singleton=True),
    Kind("RateLimitConfig", gloo.RATELIMIT, read_rate_limit_config),
)}

#: kind → the apiVersions it is read under.
API_VERSIONS: Mapping[str, tuple[str, ...]] = {name: kind.api_versions for name, kind in KINDS.items()}

#: API groups the gateway serves: a document of any other group (a
#: Deployment, a ConfigMap, a Gloo Federation resource...) is skipped with a
#: note, as a controller ignores kinds it does not watch. The core group
#: (``v1``) is shared: its kinds other than the ones in :data:`KINDS` are
#: skipped too; an unknown kind in any other of these groups is an error.
OUR_GROUPS = frozenset(v.rsplit("/", 1)[0] for versions in API_VERSIONS.values()
                       for v in versions if "/" in v)
