"""The ``options`` of a virtual host, a route, a weighted destination, a
``VirtualHostOption`` or a ``RouteOption``: the core's own keys checked here
(the traffic ones read into models by :mod:`twistgw.config.traffic`), Gloo's
options twistgw does not implement refused by name, and every other key left
to the plugin it names (checked when the snapshot is built).
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from twistgw.api.fields import FieldReader, Path
from twistgw.config.tracing import read_route_tracing
from twistgw.config.traffic import CORE_ROUTE_ONLY, CORE_TRAFFIC_KEYS, read_header_manipulation, read_traffic_option

__all__ = ["GLOO_PLUGIN_KEYS", "KNOWN_OPTION_KEYS", "LOCAL_LIMIT_KEY", "NESTED_LOCAL_LIMIT", "OPTION_NAMES", "Timeout",
           "UNSUPPORTED_OPTIONS", "Upgrades", "read_destination_options", "read_options", "route_values",
           "websocket_enabled"]

#: Gloo options that an add-on (a twistgw plugin) reads: when none is
#: installed under the name, the route is refused as unprotected.
GLOO_PLUGIN_KEYS = frozenset({
    "extauth", "jwt", "jwtStaged", "jwtProvidersStaged", "rbac", "ratelimit", "ratelimitBasic",
    "ratelimitEarly", "ratelimitRegular", "ratelimitEarlyBasic", "ratelimitRegularBasic", "rateLimitConfigs",
    "rateLimitEarlyConfigs", "rateLimitRegularConfigs",
})

#: the options key of the local token bucket (the ``localRatelimit`` plugin)
LOCAL_LIMIT_KEY = "localRatelimit"
#: Gloo writes a virtual host's or route's local token bucket inside its
#: rate-limit extension (``RateLimitVhostExtension.local_ratelimit``,
#: ``RateLimitRouteExtension.local_ratelimit``: ``ratelimit: {localRatelimit:
#: {...}}``, as Gloo's local rate limiting guide does); the bucket is the
#: ``localRatelimit`` plugin's, the rest of the extension the counted plugin's
#: (see :func:`twistgw.core.compiling.plugin_options`).
NESTED_LOCAL_LIMIT = ("ratelimit", "ratelimitEarly", "ratelimitRegular")

_LATER = "not supported by twistgw yet (upstream-side traffic policy); remove it, or keep it on Gloo"
_OUT = "out of twistgw's scope"

#: Gloo route and virtual-host options twistgw refuses, with the reason.
UNSUPPORTED_OPTIONS: dict[str, str] = {
    "transformations": f"transformations are {_OUT}: set headers with headerManipulation, rewrite paths"
                       " with prefixRewrite or regexRewrite",
    "stagedTransformations": f"transformations are {_OUT}: set headers with headerManipulation, rewrite"
                             " paths with prefixRewrite or regexRewrite",
    "dlp": f"data loss prevention (DLP) is {_OUT}",
    "waf": f"the web application firewall (WAF) is {_OUT}",
    "extProc": f"external processing (extProc) is {_OUT}",
    "extProcEarly": f"external processing (extProc) is {_OUT}",
    "extProcLate": f"external processing (extProc) is {_OUT}",
    "ai": f"the AI gateway is {_OUT}",
    "envoyMetadata": "Envoy metadata has no meaning in twistgw (there is no Envoy)",
    "maxStreamDuration": "maxStreamDuration is not supported: use timeout",
    "idleTimeout": "a per-route idle timeout is not supported: use timeout",
    "closeConnection": "closeConnection is not supported",
    "hostRewritePathRegex": "hostRewritePathRegex is not supported: use hostRewrite",
    "hostRewriteHeader": "hostRewriteHeader is not supported: use hostRewrite",
    "appendXForwardedHost": "appendXForwardedHost is not supported",
    "stats": "virtual cluster statistics are not supported (twistgw's metrics are per route)",
    "includeRequestAttemptCount": "retry attempt count headers are not supported",
    "includeAttemptCountInResponse": "retry attempt count headers are not supported",
    "corsPolicyMergeSettings": "corsPolicyMergeSettings is not supported: a route's cors replaces the"
                               " virtual host's whole",
    "extensions": "Gloo's extensions field is not supported",
}

#: Core keys besides the traffic ones.
_CORE = ("pluginOrder", "prefixRewrite", "timeout", "tracing", "upgrades")
#: Every key the core knows (for "unknown field" messages).
KNOWN_OPTION_KEYS = tuple(sorted(set(_CORE) | CORE_TRAFFIC_KEYS))
#: The options keys Gloo names (the core's, the refused, the add-ons'):
#: their proto spellings (``header_manipulation``) read as these; other keys
#: name plugins as written.
OPTION_NAMES = frozenset(KNOWN_OPTION_KEYS) | UNSUPPORTED_OPTIONS.keys() | GLOO_PLUGIN_KEYS | {LOCAL_LIMIT_KEY}


@attrs.frozen
class Timeout:
    """``timeout``, read once: the route's response timeout in seconds."""

    seconds: float


@attrs.frozen
class Upgrades:
    """``upgrades``, read once: whether WebSocket upgrades are forwarded."""

    websocket: bool = True


def route_values(options: Mapping[str, Any]) -> tuple[str | None, float | None, bool]:
    """(``prefixRewrite``, ``timeout`` in seconds, WebSocket upgrades) of
    options :func:`read_options` read (merged ones too: delegation, delegated
    options): the values the :class:`~twistgw.config.model.Route` carries."""
    timeout = options.get("timeout")
    upgrades = options.get("upgrades")
    return (options.get("prefixRewrite"), timeout.seconds if isinstance(timeout, Timeout) else None,
            upgrades.websocket if isinstance(upgrades, Upgrades) else True)


def read_options(r: FieldReader, value: Any, path: Path, ns: str = "default",
                 on_route: bool | None = None) -> dict[str, Any]:
    """An ``options`` mapping: the core's keys checked (traffic ones
    replaced by their models), Gloo's unimplemented ones refused, plugin
    keys kept raw for their plugins.

    :param on_route: whether these are a route's options (default: read
        from the path: a virtual host's are at ``spec.virtualHost.options``).
    """
    if value is None:
        return {}
    options = dict(r.mapping(value, path, names=OPTION_NAMES))
    bad = r.count()
    route = ("routes" in path) if on_route is None else on_route
    for key in options:
        if key in UNSUPPORTED_OPTIONS:
            r.issue(path + (key,), f"is not supported by twistgw: {UNSUPPORTED_OPTIONS[key]}")
    if not route:
        for key in ("prefixRewrite", "timeout", "tracing", "upgrades", *sorted(CORE_ROUTE_ONLY)):
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
    if "upgrades" in options:
        with r.part():
            options["upgrades"] = Upgrades(websocket_enabled(r, options["upgrades"], path + ("upgrades",)))
    if "tracing" in options:
        with r.part():
            options["tracing"] = read_route_tracing(r, options["tracing"], path + ("tracing",))
    if "timeout" in options:
        with r.part():
            options["timeout"] = Timeout(r.duration(options["timeout"], path + ("timeout",)))
    rewrites = [k for k in ("prefixRewrite", "regexRewrite") if k in options]
    if len(rewrites) > 1:
        r.issue(path + ("regexRewrite",), "set prefixRewrite or regexRewrite, not both (as in Gloo)")
    hosts = [k for k in ("hostRewrite", "autoHostRewrite") if k in options]
    if len(hosts) > 1:
        r.issue(path + ("autoHostRewrite",), "set hostRewrite or autoHostRewrite, not both (as in Gloo)")
    for key in CORE_TRAFFIC_KEYS & options.keys():
        if options[key] is None:
            del options[key]
            continue
        with r.part():
            options[key] = read_traffic_option(r, key, options[key], path + (key,), ns)
    _one_local_bucket(r, options, path)
    if r.count() > bad:
        raise r.invalid()
    return {k: v for k, v in options.items() if k not in UNSUPPORTED_OPTIONS}


def _one_local_bucket(r: FieldReader, options: dict[str, Any], path: Path) -> None:
    """At most one local token bucket per ``options``: twistgw's
    ``localRatelimit`` or Gloo's ``ratelimit.localRatelimit`` (or
    ``ratelimitEarly`` / ``ratelimitRegular``'s)."""
    where: list[tuple[str, ...]] = [(LOCAL_LIMIT_KEY,)] if LOCAL_LIMIT_KEY in options else []
    where += [(k, LOCAL_LIMIT_KEY) for k in NESTED_LOCAL_LIMIT
              if isinstance(options.get(k), dict) and LOCAL_LIMIT_KEY in options[k]]
    if len(where) > 1:
        first = ".".join(where[0])
        for at in where[1:]:
            r.issue(path + at, f"a second local token bucket on the same options ({first} is the first): one"
                    " bucket counts the requests here, write it once")


def read_destination_options(r: FieldReader, value: Any, path: Path, ns: str) -> dict[str, Any]:
    """A weighted destination's ``options`` (Gloo's
    WeightedDestinationOptions): ``headerManipulation`` is served; the rest
    refused by name."""
    m = r.mapping(value, path, optional=True,
                  names=("headerManipulation", "transformations", "stagedTransformations", "extauth", "bufferPerRoute"))
    out: dict[str, Any] = {}
    for key, v in m.items():
        if key == "headerManipulation":
            with r.part():
                out[key] = read_header_manipulation(r, v, path + (key,), ns)
        elif key in ("transformations", "stagedTransformations"):
            r.issue(path + (key,), f"is not supported by twistgw: {UNSUPPORTED_OPTIONS[key]}")
        elif key in ("extauth", "bufferPerRoute"):
            r.issue(path + (key,), f"is not supported by twistgw on a weighted destination: set {key} on the route")
        else:
            r.issue(path + (key,), f"unknown field {key!r}; expected one of: headerManipulation")
    return out


def websocket_enabled(r: FieldReader, value: Any, path: Path) -> bool:
    """Gloo's route option ``upgrades: [{websocket: {enabled: bool}}]``:
    whether WebSocket upgrades are forwarded on the route (``enabled``
    defaults to true, as in Gloo; no entry: true, Gloo's default)."""
    enabled = True
    seen = False
    for i, item in enumerate(r.sequence(value, path)):
        at = path + (i,)
        if "connect" in r.mapping(item, at):
            r.issue(at + ("connect",), "CONNECT is not proxied (a reverse proxy has no tunnel target; answered 501)")
            continue
        if "connectTerminate" in r.mapping(item, at):
            r.issue(at + ("connectTerminate",), "is not supported by twistgw: CONNECT is not proxied (a reverse"
                    " proxy has no tunnel target)")
            continue
        entry = r.mapping(item, at, {"websocket"})
        if len(entry) != 1:
            raise r.fail(at, "set one upgrade type: websocket")
        if "websocket" not in entry:
            raise r.invalid()  # the unknown type is reported already
        if seen:
            raise r.fail(at, "lists websocket twice")
        seen = True
        spec = r.mapping(entry["websocket"] if entry["websocket"] is not None else {}, at + ("websocket",),
                         {"enabled"})
        if "enabled" in spec:
            enabled = r.boolean(spec["enabled"], at + ("websocket", "enabled"))
    return enabled
