"""An Upstream's passive and connection policy, read as Gloo writes it:
``outlierDetection`` (Envoy's cluster.OutlierDetection) and
``connectionConfig`` (Gloo's ConnectionConfig). What twistgw does not do
is refused by name with the reason; see docs/traffic.md.
"""

from __future__ import annotations

import math
from typing import Any

from twistgw.api.fields import FieldReader, Path
from twistgw.api.upstreampolicy import ConnectionConfig, OutlierDetection, TcpKeepalive

__all__ = ["read_connection_config", "read_outlier_detection"]

#: Envoy's success-rate and failure-percentage families and the split of
#: local-origin errors: refused by name (not built).
_OUTLIER_REFUSED = {
    **{key: "is not supported by twistgw: success-rate outlier detection (it needs per-interval request"
            " statistics across endpoints); use consecutive5xx or consecutiveGatewayFailure"
       for key in ("enforcingSuccessRate", "successRateMinimumHosts", "successRateRequestVolume",
                   "successRateStdevFactor", "enforcingLocalOriginSuccessRate")},
    **{key: "is not supported by twistgw: failure-percentage outlier detection; use consecutive5xx or"
            " consecutiveGatewayFailure"
       for key in ("failurePercentageThreshold", "enforcingFailurePercentage",
                   "enforcingFailurePercentageLocalOrigin", "failurePercentageMinimumHosts",
                   "failurePercentageRequestVolume")},
    **{key: "is not supported by twistgw: local-origin errors (connect failure, reset, timeout) always count"
            " as 5xx and gateway failures (Envoy's default, splitExternalLocalOriginErrors: false)"
       for key in ("consecutiveLocalOriginFailure", "enforcingConsecutiveLocalOriginFailure")},
}

_OUTLIER_COUNTS = {"consecutive5xx": "consecutive_5xx", "consecutiveGatewayFailure": "consecutive_gateway_failure"}
_OUTLIER_PERCENTS = {"enforcingConsecutive5xx": "enforcing_consecutive_5xx",
                     "enforcingConsecutiveGatewayFailure": "enforcing_consecutive_gateway_failure",
                     "maxEjectionPercent": "max_ejection_percent"}
_OUTLIER_TIMES = {"interval": "interval", "baseEjectionTime": "base_ejection_time",
                  "maxEjectionTime": "max_ejection_time"}


def _uint(r: FieldReader, value: Any, path: Path, lo: int, hi: int) -> int:
    """A proto UInt32Value as YAML writes it: an integer, or digits in a string."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return r.integer(value, path, lo, hi)


def read_outlier_detection(r: FieldReader, value: Any, path: Path) -> OutlierDetection:
    """``outlierDetection``: the consecutive 5xx and gateway-failure families,
    each with its enforcing percentage, Envoy's defaults for what is unset."""
    m = dict(r.mapping(value or {}, path))
    for key, reason in _OUTLIER_REFUSED.items():
        if m.pop(key, None) is not None:
            r.issue(path + (key,), reason)
    split = m.pop("splitExternalLocalOriginErrors", None)
    if split is not None and r.boolean(split, path + ("splitExternalLocalOriginErrors",)):
        r.issue(path + ("splitExternalLocalOriginErrors",), _OUTLIER_REFUSED["consecutiveLocalOriginFailure"])
    m = r.mapping(m, path, set(_OUTLIER_COUNTS) | set(_OUTLIER_PERCENTS) | set(_OUTLIER_TIMES))
    found: dict[str, Any] = {}
    for key, attr in _OUTLIER_COUNTS.items():
        if m.get(key) is not None:
            with r.part():
                found[attr] = _uint(r, m[key], path + (key,), 1, 1 << 31)
    for key, attr in _OUTLIER_PERCENTS.items():
        if m.get(key) is not None:
            with r.part():
                found[attr] = _uint(r, m[key], path + (key,), 0, 100)
    for key, attr in _OUTLIER_TIMES.items():
        if m.get(key) is not None:
            with r.part():
                found[attr] = r.duration(m[key], path + (key,))
    return OutlierDetection(**found)


_CONNECTION_REFUSED = {
    "perConnectionBufferLimitBytes": "is not supported by twistgw: the engine streams with back-pressure at"
                                     " its fixed buffer sizes (64 KiB each way), not a per-upstream limit",
    "http1ProtocolOptions": "is not supported by twistgw: header case and trailers follow the engine's"
                            " HTTP/1.1 rules",
}
_HTTP_OPTIONS = ("idleTimeout", "maxHeadersCount", "headersWithUnderscoresAction")
_UNDERSCORES = ("ALLOW", "REJECT_REQUEST", "DROP_HEADER")


def read_connection_config(r: FieldReader, value: Any, path: Path) -> ConnectionConfig:
    """``connectionConfig`` (Gloo's ConnectionConfig)."""
    m = dict(r.mapping(value or {}, path))
    for key, reason in _CONNECTION_REFUSED.items():
        if m.pop(key, None) is not None:
            r.issue(path + (key,), reason)
    m = r.mapping(m, path, {"maxRequestsPerConnection", "connectTimeout", "tcpKeepalive",
                            "commonHttpProtocolOptions"})
    found: dict[str, Any] = {}
    with r.part():
        if m.get("maxRequestsPerConnection") is not None:
            found["max_requests"] = _uint(r, m["maxRequestsPerConnection"], path + ("maxRequestsPerConnection",),
                                          0, 1 << 31)
    with r.part():
        if m.get("connectTimeout") is not None:
            found["connect_timeout"] = r.duration(m["connectTimeout"], path + ("connectTimeout",))
    with r.part():
        if m.get("tcpKeepalive") is not None:
            found["tcp_keepalive"] = _keepalive(r, m["tcpKeepalive"], path + ("tcpKeepalive",))
    with r.part():
        if m.get("commonHttpProtocolOptions") is not None:
            found.update(_http_options(r, m["commonHttpProtocolOptions"], path + ("commonHttpProtocolOptions",)))
    return ConnectionConfig(**found)


def _keepalive(r: FieldReader, value: Any, path: Path) -> TcpKeepalive:
    """``tcpKeepalive``: times rounded up to the second, as Envoy does."""
    k = r.mapping(value or {}, path, {"keepaliveProbes", "keepaliveTime", "keepaliveInterval"})
    probes = time = interval = None
    with r.part():
        if k.get("keepaliveProbes") is not None:
            probes = _uint(r, k["keepaliveProbes"], path + ("keepaliveProbes",), 1, 127)
    with r.part():
        if k.get("keepaliveTime") is not None:
            time = max(1, math.ceil(r.duration(k["keepaliveTime"], path + ("keepaliveTime",))))
    with r.part():
        if k.get("keepaliveInterval") is not None:
            interval = max(1, math.ceil(r.duration(k["keepaliveInterval"], path + ("keepaliveInterval",))))
    return TcpKeepalive(probes, time, interval)


def _http_options(r: FieldReader, value: Any, path: Path) -> dict[str, Any]:
    """``commonHttpProtocolOptions``: ``idleTimeout`` and ``maxHeadersCount``
    act on the engine; ``headersWithUnderscoresAction`` has no effect on an
    upstream in Envoy (upstream responses are not affected), so only its
    default, ALLOW, is accepted; ``maxStreamDuration`` is refused."""
    h = dict(r.mapping(value or {}, path))
    if h.pop("maxStreamDuration", None) is not None:
        r.issue(path + ("maxStreamDuration",), "is not supported by twistgw: use the route's timeout (the time"
                " to the response head) and the engine's idle timeouts")
    h = r.mapping(h, path, set(_HTTP_OPTIONS))
    found: dict[str, Any] = {}
    with r.part():
        if h.get("idleTimeout") is not None:
            found["idle_timeout"] = r.duration(h["idleTimeout"], path + ("idleTimeout",), lo=0)
    with r.part():
        if h.get("maxHeadersCount") is not None:
            found["max_headers"] = _uint(r, h["maxHeadersCount"], path + ("maxHeadersCount",), 0, 1 << 16)
    with r.part():
        if h.get("headersWithUnderscoresAction") is not None:
            ap = path + ("headersWithUnderscoresAction",)
            action = r.choice(h["headersWithUnderscoresAction"], ap, _UNDERSCORES, "action")
            if action != "ALLOW":
                r.issue(ap, f"is not supported by twistgw: {action} has no effect on an Upstream (in Envoy it acts"
                        " on client requests; upstream responses are not affected): remove it, or write ALLOW")
    return found
