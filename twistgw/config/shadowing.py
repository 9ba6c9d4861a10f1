"""The ``shadowing`` route option (Gloo's ``RouteShadowing``, Envoy's
``request_mirror_policies``), read into a :class:`Shadowing`: a copy of the
route's requests goes to another Upstream, fire and forget. The core picks
the shadow's endpoint and rolls the percentage
(:mod:`twistgw.core.traffic`); the engine sends the copy
(:mod:`twistgw.engine.upstream.shadow`).
"""

from __future__ import annotations

from typing import Any

import attrs

from twistgw.api.fields import FieldReader, Path

__all__ = ["SHADOW_BODY_LIMIT", "SHADOW_MAX_INFLIGHT", "Shadowing", "read_shadowing"]

#: The largest request body a shadow gets a copy of (bytes). A request with
#: a bigger body (declared, or a chunked one that grows past it) is not
#: shadowed at all, and counted; the primary request never waits for it.
SHADOW_BODY_LIMIT = 64 * 1024
#: Shadow requests in flight at once, per gateway process (waiting for
#: their request body, connecting, or waiting for the shadow's answer);
#: above it a shadow is dropped and counted.
SHADOW_MAX_INFLIGHT = 100


@attrs.frozen
class Shadowing:
    """A route's ``shadowing``: the Upstream that gets the copies and the
    percentage of requests copied (0 to 100)."""

    namespace: str
    name: str
    percentage: float

    def upstream_key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


#: Gloo's shadowing fields twistgw refuses, and why
_REFUSED = {
    "disableShadowHostSuffixAppend": "the shadow's Host always gets Envoy's -shadow suffix",
    "hostRewriteLiteral": "the shadow's Host is the request's with the -shadow suffix; it is not rewritten",
}


def read_shadowing(r: FieldReader, value: Any, path: Path, ns: str) -> Shadowing:
    """Gloo's fields: ``upstream`` (a resource reference, its namespace the
    route's by default) and ``percentage`` (0 to 100, required here: Gloo's
    default of 0 shadows nothing, which a reader would not guess)."""
    m = dict(r.mapping(value, path))
    for key, why in _REFUSED.items():
        if m.pop(key, None) is not None:
            r.issue(path + (key,), f"is not supported by twistgw: {why}")
    m = r.mapping(m, path, {"upstream", "percentage"}, required=("upstream", "percentage"))
    ref = r.mapping(m["upstream"], path + ("upstream",), {"name", "namespace"}, required=("name",))
    name = r.string(ref["name"], path + ("upstream", "name"))
    namespace = r.string(ref.get("namespace", ns), path + ("upstream", "namespace"))
    pct = m["percentage"]
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 <= pct <= 100:
        raise r.fail(path + ("percentage",), f"must be a percentage from 0 to 100, got {pct!r}")
    return Shadowing(namespace, name, float(pct))
