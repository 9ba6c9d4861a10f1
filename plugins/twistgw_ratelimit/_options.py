"""Compiling the options keys the rate-limit plugins own (pure, no I/O):
``ratelimitBasic``, ``ratelimit`` (and its stages ``ratelimitEarly`` /
``ratelimitRegular``), ``rateLimitConfigs`` and ``localRatelimit``.

Each compiles to an immutable object whose ``hits(ctx)`` lists the rules a
request counts against (:class:`~twistgw_ratelimit._descriptors.Hit`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import attrs

from twistgw.api.types import InvalidResource, OptionsError, OptionsScope, RequestContext
from twistgw.options import Problems, type_name

from twistgw_ratelimit._actions import RateLimitActions, parse_rate_limits
from twistgw_ratelimit._descriptors import DescriptorSet, Hit, escape, parse_descriptor_set, resolve
from twistgw_ratelimit._limits import RateLimit, parse_rate_limit
from twistgw_ratelimit._local import BucketSpec, TokenBucket, parse_bucket
from twistgw_ratelimit._settings import (
    DESCRIPTORS_SECTION,
    SERVER_SECTION,
    ServerSettings,
    server_settings,
    server_settings_read,
    service_settings,
)

Producer = Callable[[RequestContext], "list[Hit]"]

#: callers whose ratelimitBasic hits are kept made (per compiled options)
HIT_CACHE = 4096

#: the kind and API group of Gloo's rate-limit policies
CONFIG_KIND = "RateLimitConfig"
CONFIG_API_VERSION = "ratelimit.solo.io/v1alpha1"


@attrs.frozen
class GlobalLimits:
    """Compiled ``ratelimitBasic`` / ``ratelimit`` / ``rateLimitConfigs``:
    rules counted in Redis."""

    plugin: str
    where: str
    hits: Producer = attrs.field(eq=False)
    server: ServerSettings
    summary: str = ""


@attrs.frozen
class LocalLimit:
    """Compiled ``localRatelimit``: a token bucket of this process."""

    where: str
    spec: BucketSpec
    bucket: TokenBucket = attrs.field(eq=False)
    headers: bool = False


def where_of(scope: OptionsScope) -> str:
    return scope.virtual_service + (f" route {scope.route}" if scope.route is not None else "")


def _needs_redis(scope: OptionsScope, key: str) -> ServerSettings:
    server, problems, found = server_settings_read(scope.resources)
    if problems:
        # reported at Settings spec.ratelimitServer; not a second time here
        invalid = InvalidResource(OptionsError.several(problems.errors))
        raise OptionsError((), f"Settings spec.{SERVER_SECTION} is invalid") from invalid
    if found:  # the Secrets it names, which only a configuration's resources hold
        raise OptionsError.several([OptionsError((), f"Settings spec.{SERVER_SECTION}.{p}")
                                    for p in found.errors])
    if server.redis is None:
        raise OptionsError((), f"{key} counts in Redis, shared by every gateway process: say where it is"
                               f" in Settings spec.{SERVER_SECTION}.redis.address (host:port);"
                               " or limit each process alone with localRatelimit")
    return server


def compile_basic(options: Mapping[str, Any], scope: OptionsScope) -> GlobalLimits:
    """``ratelimitBasic: {anonymousLimits, authorizedLimits}``."""
    fields = ("anonymousLimits", "authorizedLimits")
    problems = Problems()
    options = problems.mapping(options, (), fields)
    limits: dict[str, RateLimit | None] = {f: None for f in fields}
    for field in fields:
        if field in options:
            with problems.check():
                limits[field] = parse_rate_limit(options[field], (field,))
    if not problems and not any(limits.values()):
        problems.add((), "set anonymousLimits, authorizedLimits or both")
    problems.raise_if_any()
    server = _needs_redis(scope, "ratelimitBasic")
    anonymous, authorized = limits["anonymousLimits"], limits["authorizedLimits"]
    bucket = f"basic|{escape(scope.virtual_service)}|{escape(scope.route or '')}"
    label = f"basic:{scope.virtual_service}" + (f":{scope.route}" if scope.route is not None else "")

    # the hits of the callers seen lately, made once (bounded: cleared when full)
    seen: dict[tuple[bool, str], list[Hit]] = {}

    def hits(ctx: RequestContext) -> list[Hit]:
        principal = ctx.principal
        who = (True, principal) if principal is not None else (False, ctx.client_address)
        found = seen.get(who)
        if found is not None:
            return found
        if principal is not None:
            found = [Hit(f"{bucket}|user={escape(principal)}", authorized, label + ":authorized")] if authorized else []
        elif anonymous is not None and ctx.client_address:
            found = [Hit(f"{bucket}|ip={escape(ctx.client_address)}", anonymous, label + ":anonymous")]
        else:
            found = []
        if len(seen) >= HIT_CACHE:
            seen.clear()
        seen[who] = found
        return found

    summary = ", ".join(f"{f} {lim.describe()}" for f, lim in limits.items() if lim is not None)
    return GlobalLimits("ratelimitBasic", where_of(scope), hits, server, summary)


def _producer(groups: Sequence[tuple[DescriptorSet, tuple[RateLimitActions, ...]]]) -> Producer:
    def hits(ctx: RequestContext) -> list[Hit]:
        found: list[Hit] = []
        for domain, rate_limits in groups:
            ordered = []
            sets = []
            for entry in rate_limits:
                tup = entry.ordered(ctx)
                if tup is not None:
                    ordered.append(tup)
                members = entry.as_set(ctx)
                if members is not None:
                    sets.append(members)
            if ordered or sets:
                found.extend(resolve(domain, ordered, sets))
        return found
    return hits


def _nothing(ctx: RequestContext) -> list[Hit]:
    return []


def compile_actions(key: str, options: Mapping[str, Any], scope: OptionsScope) -> GlobalLimits:
    """``ratelimit`` (or a stage of it): ``{rateLimits}`` on a virtual host,
    ``{includeVhRateLimits, rateLimits}`` on a route, counted against the
    descriptors of ``Settings spec.ratelimit``. A route's
    ``includeVhRateLimits: true`` with no rules, its own or its virtual
    host's, counts nothing (and needs no Redis), as in Gloo."""
    on_route = scope.route is not None
    problems = Problems()
    options = problems.mapping(options, (), ("includeVhRateLimits", "rateLimits") if on_route else ("rateLimits",))
    include = options.get("includeVhRateLimits", False)
    if not isinstance(include, bool):
        problems.add(("includeVhRateLimits",), f"must be true or false, got {type_name(include)}")
        include = False
    rate_limits = parse_rate_limits(options.get("rateLimits", []), ("rateLimits",), problems)
    if include:
        host = scope.host_options.get(key)
        host_limits = Problems().mapping(host, (), names=("rateLimits",)).get("rateLimits") \
            if isinstance(host, Mapping) else None
        if isinstance(host_limits, list):
            # reported where written, on the virtual host, if broken
            rate_limits += parse_rate_limits(host_limits, ("rateLimits",), Problems())
    if include and not problems and not rate_limits:
        # the virtual host's rules and none of its own, and the host has none: as in Gloo, nothing to count
        return GlobalLimits(key, where_of(scope), _nothing, ServerSettings(),
                            "nothing to count: includeVhRateLimits, and the virtual host has no rateLimits")
    if not problems and not rate_limits:
        problems.add(("rateLimits",), "needs at least one {actions: [...]} or {setActions: [...]}"
                     + (" (or includeVhRateLimits: true with the virtual host's)" if on_route else ""))
    problems.raise_if_any()
    server = _needs_redis(scope, key)
    try:
        domain = service_settings(scope.resources)
    except OptionsError as exc:  # reported at Settings spec.ratelimit
        raise OptionsError((), f"Settings spec.{DESCRIPTORS_SECTION} is invalid") from InvalidResource(exc)
    if domain.empty:
        raise OptionsError(("rateLimits",), "there are no descriptors to count against: write them in"
                                            " Settings spec.ratelimit.descriptors (or setDescriptors)")
    return GlobalLimits(key, where_of(scope), _producer([(domain, rate_limits)]), server,
                        f"{len(rate_limits)} rate limit(s) against Settings descriptors")


def _config(scope: OptionsScope, ref: Any, i: int,
            problems: Problems) -> tuple[DescriptorSet, tuple[RateLimitActions, ...]] | None:
    path = ("refs", i)
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str) or not ref["name"]:
        problems.add(path, f"must be {{name: CONFIG, namespace: NS}}, got {ref!r}")
        return None
    ref = problems.mapping(ref, path, ("name", "namespace"))
    ns = ref.get("namespace", scope.namespace)
    if not isinstance(ns, str) or not ns:
        problems.add(path + ("namespace",), f"must be a namespace, got {type_name(ns)}")
        return None
    try:
        found = scope.resources.resource(CONFIG_KIND, ref["name"], ns)
    except InvalidResource as exc:  # its own problems are reported where it is written
        raise OptionsError(path + ("name",), str(exc)) from exc
    except KeyError as exc:
        problems.add(path + ("name",), f"dangling reference: {exc.args[0] if exc.args else ref['name']}")
        return None
    raw = getattr(found, "raw", None)  # twistgw.config.ratelimits.RateLimitConfig
    return compile_config_spec(raw if isinstance(raw, Mapping) else {}, ns, ref["name"], problems)


def compile_config_spec(raw: Mapping[str, Any], ns: str, name: str,
                        problems: Problems) -> tuple[DescriptorSet, tuple[RateLimitActions, ...]] | None:
    """A ``RateLimitConfig``'s ``spec.raw`` (``descriptors``,
    ``setDescriptors``, ``rateLimits``; its shape was checked when it was
    read); problems located in that resource."""
    resource = (CONFIG_KIND, ns, name)
    inner = Problems()
    domain = parse_descriptor_set(f"config.{ns}.{name}", raw.get("descriptors"), raw.get("setDescriptors"),
                                  ("spec", "raw"), inner)
    rate_limits = parse_rate_limits(raw.get("rateLimits", []), ("spec", "raw", "rateLimits"), inner)
    if not inner and (domain.empty or not rate_limits):
        inner.add(("spec", "raw"), "needs descriptors (or setDescriptors) and rateLimits")
    for error in inner.errors:
        problems.add(error.path, error.reason, resource)
    return None if inner else (domain, rate_limits)


def compile_configs(options: Mapping[str, Any], scope: OptionsScope) -> GlobalLimits:
    """``rateLimitConfigs: {refs: [{name, namespace}]}``: each config's
    actions counted against its own descriptors."""
    problems = Problems()
    options = problems.mapping(options, (), ("refs",))
    refs = options.get("refs")
    if not isinstance(refs, list) or not refs:
        problems.add(("refs",), "must be a non-empty list of {name, namespace}")
        refs = []
    groups = [_config(scope, ref, i, problems) for i, ref in enumerate(refs)]
    problems.raise_if_any()
    server = _needs_redis(scope, "rateLimitConfigs")
    found = [g for g in groups if g is not None]
    return GlobalLimits("rateLimitConfigs", where_of(scope), _producer(found), server,
                        ", ".join(f"{r.get('namespace', scope.namespace)}/{r['name']}" for r in refs))


def compile_local(options: Mapping[str, Any], scope: OptionsScope,
                  bucket_of: Callable[[str, str | None, BucketSpec], TokenBucket]) -> LocalLimit:
    """``localRatelimit: {maxTokens, tokensPerFill, fillInterval}``."""
    spec = parse_bucket(options)
    server = server_settings(scope.resources)
    bucket = bucket_of(scope.virtual_service, scope.route, spec)
    return LocalLimit(where_of(scope), spec, bucket, server.headers)
