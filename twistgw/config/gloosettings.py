"""Gloo's own ``Settings`` (``gloo.solo.io/v1``), read into twistgw's
gateway-wide sections: what twistgw serves is applied, Gloo's control-plane
plumbing (where Gloo itself reads its resources, its xDS addresses) is
informational, and the rest is refused by name.

Served: ``gloo.regexMaxProgramSize`` (twistgw's
``spec.gateway.regexMaxProgramSize``), ``discoveryNamespace`` (twistgw's
``spec.gateway.discoveryNamespace``: where the Upstreams discovered from
Services are also found), and the add-on sections ``extauth``,
``rbac``, ``ratelimit`` and ``ratelimitServer``, handed to the plugin of that
name exactly as a twistgw ``Settings`` section (the plugin checks them; with
no such plugin installed they are refused).
"""

from __future__ import annotations

from typing import Any

from twistgw.api.fields import FieldReader
from twistgw.config.envelope import Envelope
from twistgw.config.settings import MAX_PROGRAM_SIZE_LIMIT, read_settings

__all__ = ["CONTROL_PLANE", "GLOO_SETTINGS_SECTIONS", "read_any_settings", "read_gloo_settings"]

#: Gloo's control plane: how Gloo finds and serves its configuration. They
#: mean nothing to a gateway that reads a directory; accepted as written.
CONTROL_PLANE = frozenset({
    "watchNamespaces", "watchNamespaceSelectors", "kubernetesConfigSource",
    "directoryConfigSource", "kubernetesSecretSource", "directorySecretSource", "kubernetesArtifactSource",
    "directoryArtifactSource", "secretOptions", "refreshRate", "devMode", "discovery", "kubernetes", "consoleOptions",
    "observabilityOptions",
})
_GLOO_CONTROL = frozenset({"xdsBindAddr", "restXdsBindAddr", "validationBindAddr", "proxyDebugBindAddr",
                           "enableRestEds", "disableProxyGarbageCollection", "removeUnusedFunctions"})
_GATEWAY_CONTROL = frozenset({"validation", "readGatewaysFromAllNamespaces", "compressedProxySpec"})
#: Sections handed to the plugin of the same name.
GLOO_SETTINGS_SECTIONS = ("extauth", "rbac", "ratelimit", "ratelimitServer")


def read_any_settings(r: FieldReader, res: Envelope) -> dict[str, Any]:
    """twistgw's ``Settings``, or Gloo's when written as ``gloo.solo.io/v1``."""
    if str(res.data.get("apiVersion", "")).startswith("gloo.solo.io/"):
        return read_gloo_settings(r, res)
    return read_settings(r, res)


def read_gloo_settings(r: FieldReader, res: Envelope) -> dict[str, Any]:
    spec = r.mapping(res.spec, ("spec",), names=CONTROL_PLANE | {"discoveryNamespace", "gloo", "gateway",
                                                                  *GLOO_SETTINGS_SECTIONS})
    out: dict[str, Any] = {}
    for key, value in spec.items():
        path = ("spec", key)
        if key in CONTROL_PLANE:
            continue
        if key == "discoveryNamespace":
            with r.part():
                out.setdefault("gateway", {})["discoveryNamespace"] = r.string(value, path)
            continue
        if key in GLOO_SETTINGS_SECTIONS:
            with r.part():
                out[key] = r.mapping(value, path)
        elif key == "gloo":
            with r.part():
                limit = _gloo_section(r, r.mapping(value, path))
                if limit is not None:
                    out.setdefault("gateway", {})["regexMaxProgramSize"] = limit
        elif key == "gateway":
            with r.part():
                for k in r.mapping(value, path):
                    if k not in _GATEWAY_CONTROL:
                        r.issue(path + (k,), "is not supported by twistgw (Gloo's gateway controller setting)")
        else:
            r.issue(path, f"is not supported by twistgw (Gloo Settings; twistgw serves: gloo.regexMaxProgramSize,"
                    f" {', '.join(GLOO_SETTINGS_SECTIONS)}; Gloo's control-plane fields are informational)")
    return out


def _gloo_section(r: FieldReader, g: dict[str, Any]) -> int | None:
    limit = None
    for k, v in g.items():
        path = ("spec", "gloo", k)
        if k == "regexMaxProgramSize":
            with r.part():
                limit = r.integer(v, path, 1, MAX_PROGRAM_SIZE_LIMIT)
        elif k not in _GLOO_CONTROL:
            r.issue(path, "is not supported by twistgw (Gloo Settings spec.gloo; served: regexMaxProgramSize)")
    return limit
