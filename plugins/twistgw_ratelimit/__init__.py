"""Rate limiting as Gloo configures it (``docs/ratelimit.md``).

One package, one plugin per options key it owns (a plugin's name is its
options key), all on the public hook API:

=====================  ==========================================================
``localRatelimit``     a token bucket per gateway process; needs nothing else
``ratelimitBasic``     ``anonymousLimits`` by client address, ``authorizedLimits``
                       by authenticated principal; counted in Redis
``ratelimit``          Envoy-style ``rateLimits`` actions against the descriptors
                       of ``Settings spec.ratelimit``; counted in Redis
``ratelimitRegular``   the same, Gloo's name for the regular stage
``ratelimitEarly``     the same, always before authentication (Gloo's early stage)
``rateLimitConfigs``   ``RateLimitConfig`` resources by reference; counted in Redis
=====================  ==========================================================

Every one of them reads ``Settings spec.ratelimitServer`` (Redis, timeouts,
``denyOnFail``, ``rateLimitBeforeAuth``, headers, shadow mode), and says so
in its ``PluginInfo.settings``; the ``ratelimit`` stages also read
``Settings spec.ratelimit`` (the descriptors). Each checks the sections it
reads (``twistgw_check_settings``); no plugin exists for a section alone.

The counted plugins run after authentication (``extauth``, ``jwt``,
``rbac``) so that ``authorizedLimits`` and claim actions see who the caller
is; ``rateLimitBeforeAuth: true`` moves them before it (each configuration
load asks ``twistgw_placement``).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from twisted.internet import defer
from twisted.logger import Logger

from twistgw import sdk
from twistgw.sdk import RedisConfig

from twistgw_ratelimit import _limiter, _options
from twistgw_ratelimit._local import Buckets
from twistgw_ratelimit._options import GlobalLimits, LocalLimit
from twistgw_ratelimit._redis import RedisCounters
from twistgw_ratelimit._settings import (
    AUTH_PLUGINS,
    DESCRIPTORS_SECTION,
    SERVER_SECTION,
    ServerSettings,
    parse_server_settings,
    parse_service_settings,
    server_settings,
)

__all__ = ["ActionsPlugin", "BasicPlugin", "ConfigsPlugin", "EarlyPlugin", "LocalPlugin", "RegularPlugin"]

_log = Logger(namespace="twistgw_ratelimit")

#: the place of the counted plugins: after authentication and authorization
ORDER = 350
#: localRatelimit and ratelimitEarly: before every other plugin
EARLY_ORDER = 50
BEFORE_AUTH = sdk.Placement(before=AUTH_PLUGINS)


#: The last check of each section: (the mapping checked, its problem or None).
_checked: dict[str, tuple[Mapping[str, Any], sdk.OptionsError | None]] = {}


def check_settings(section: str, settings: Mapping[str, Any]) -> None:
    """The ``Settings`` sections the rate-limit plugins read, checked for each
    plugin that reads them but parsed once per load: the six plugins are
    handed the same mapping (the load's), so the first check's answer is
    the others' (the core reports a problem once)."""
    last = _checked.get(section)
    if last is not None and last[0] is settings:
        if last[1] is not None:
            raise last[1]
        return
    try:
        if section == SERVER_SECTION:
            parse_server_settings(settings)
        elif section == DESCRIPTORS_SECTION:
            parse_service_settings(settings)
    except sdk.OptionsError as exc:
        _checked[section] = (settings, exc)
        raise
    _checked[section] = (settings, None)


class _Counted:
    """What the plugins counting in Redis share: the reactor, the clock and
    their Redis clients (one per address, reused across reloads)."""

    key = ""
    description = ""
    #: runs before authentication whatever rateLimitBeforeAuth says (early stage)
    always_early = False
    #: the Settings sections it reads (PluginInfo.settings)
    sections: tuple[str, ...] = (SERVER_SECTION,)

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self.now = now
        self.reactor: Any = None
        self.dry_run = False
        self.stores: dict[tuple[RedisConfig, float], RedisCounters] = {}

    def store(self, server: ServerSettings, reactor: Any = None) -> RedisCounters:
        """The Redis client of ``server`` (made on first use, on the gateway's
        reactor, else ``reactor``, else the global one)."""
        assert server.redis is not None  # compile refused options without Redis
        key = (server.redis, server.timeout)
        found = self.stores.get(key)
        if found is None:
            reactor = self.reactor or reactor
            if reactor is None:
                from twisted.internet import reactor
            found = self.stores[key] = RedisCounters(reactor, server.redis, server.timeout)
        return found

    @sdk.hookimpl
    def twistgw_plugin_info(self) -> sdk.PluginInfo:
        if self.always_early:
            return sdk.PluginInfo(order=EARLY_ORDER, description=self.description, placement=BEFORE_AUTH,
                                  settings=self.sections)
        return sdk.PluginInfo(order=ORDER, description=self.description, settings=self.sections)

    @sdk.hookimpl
    def twistgw_check_settings(self, section: str, settings: Mapping[str, Any]) -> None:
        check_settings(section, settings)

    @sdk.hookimpl
    def twistgw_placement(self, resources: Any) -> sdk.Placement | None:
        if not self.always_early and server_settings(resources).before_auth:
            return BEFORE_AUTH
        return None

    @sdk.hookimpl
    def twistgw_configure(self, gateway: sdk.GatewayInfo) -> None:
        self.reactor = gateway.reactor
        self.dry_run = gateway.dry_run

    @sdk.hookimpl
    def twistgw_config_loaded(self, compiled: Sequence[object], settings: Mapping[str, Any]) -> None:
        """Close the Redis clients the new configuration no longer uses."""
        used = {(o.server.redis, o.server.timeout) for o in compiled if isinstance(o, GlobalLimits)}
        for key in [k for k in self.stores if k not in used]:
            self.stores.pop(key).close()

    @sdk.hookimpl
    def twistgw_unconfigure(self) -> Any:
        stores, self.stores = list(self.stores.values()), {}
        if stores:
            return defer.gatherResults([s.close() for s in stores], consumeErrors=True)
        return None

    @sdk.hookimpl
    def twistgw_authorize(self, ctx: sdk.RequestContext, options: GlobalLimits) -> Any:
        if options.server.redis is None:  # nothing to count (includeVhRateLimits, no rules anywhere)
            return None
        if ctx.dry_run:
            hits = options.hits(ctx)
            if not hits:
                return None
            assert options.server.redis is not None
            rules = ", ".join(f"{h.label} ({h.limit.describe()})" for h in hits)
            return sdk.NotChecked(f"would count {rules} in Redis at {options.server.redis.address}")
        return _limiter.check_global(ctx, options, self.store(options.server, ctx.reactor), self.now)


class BasicPlugin(_Counted):
    """``ratelimitBasic``."""

    key = "ratelimitBasic"
    description = "Gloo's ratelimitBasic: anonymous limits by address, authorized limits by principal (Redis)"

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Mapping[str, Any], scope: sdk.OptionsScope) -> GlobalLimits:
        return _options.compile_basic(options, scope)


class ActionsPlugin(_Counted):
    """``ratelimit``: Envoy-style actions against ``Settings spec.ratelimit``."""

    key = "ratelimit"
    description = "Envoy-style rate-limit actions against Settings descriptors (Redis)"
    sections = (DESCRIPTORS_SECTION, SERVER_SECTION)

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Mapping[str, Any], scope: sdk.OptionsScope) -> GlobalLimits:
        return _options.compile_actions(self.key, options, scope)

    @sdk.hookimpl
    def twistgw_default_options(self, settings: Mapping[str, Any]) -> None:
        if self.key == DESCRIPTORS_SECTION:
            check_settings(DESCRIPTORS_SECTION, settings)  # its own section, Settings spec.ratelimit: reported there
        return None


class RegularPlugin(ActionsPlugin):
    """``ratelimitRegular``: Gloo's explicit name for the regular stage."""

    key = "ratelimitRegular"
    description = "Gloo's regular rate-limit stage (as ratelimit)"


class EarlyPlugin(ActionsPlugin):
    """``ratelimitEarly``: Gloo's early stage, always before authentication."""

    key = "ratelimitEarly"
    description = "Gloo's early rate-limit stage: actions counted before authentication (Redis)"
    always_early = True


class ConfigsPlugin(_Counted):
    """``rateLimitConfigs``: ``RateLimitConfig`` resources by reference."""

    key = "rateLimitConfigs"
    description = "RateLimitConfig resources (ratelimit.solo.io/v1alpha1) by reference (Redis)"

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Mapping[str, Any], scope: sdk.OptionsScope) -> GlobalLimits:
        return _options.compile_configs(options, scope)


class LocalPlugin:
    """``localRatelimit``: a token bucket per process, before every other plugin."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self.now = now
        self.buckets = Buckets(lambda: self.now())

    @sdk.hookimpl
    def twistgw_plugin_info(self) -> sdk.PluginInfo:
        return sdk.PluginInfo(order=EARLY_ORDER, placement=BEFORE_AUTH, settings=(SERVER_SECTION,),
                                  description="Envoy's local token bucket, per gateway process (no dependencies)")

    @sdk.hookimpl
    def twistgw_check_settings(self, section: str, settings: Mapping[str, Any]) -> None:
        check_settings(section, settings)

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Mapping[str, Any], scope: sdk.OptionsScope) -> LocalLimit:
        return _options.compile_local(options, scope, self.buckets.get)

    @sdk.hookimpl
    def twistgw_config_loaded(self, compiled: Sequence[object], settings: Mapping[str, Any]) -> None:
        self.buckets.keep_only({id(o.bucket) for o in compiled if isinstance(o, LocalLimit)})

    @sdk.hookimpl
    def twistgw_authorize(self, ctx: sdk.RequestContext, options: LocalLimit) -> Any:
        if ctx.dry_run:
            return sdk.NotChecked(f"would take a token from the local bucket of {options.where}"
                                      f" ({options.spec.describe()})")
        # On every request of the route: one clock read and the bucket's take.
        now = self.now()
        if options.bucket.take(now):
            if options.headers:
                _limiter.add_headers(ctx, _limiter.local_headers(options, now))
            return None
        return _limiter.refuse_local(options, now)
