"""Test helpers for the rate-limit plugins: YAML builders and a stand-in
for an authentication plugin.

``fakeauth`` (registered under the name ``jwt``, so placements naming
``jwt`` apply to it) reads who the caller is from test headers, as the real
``jwt`` plugin would from a verified token: ``x-test-user`` becomes
``ctx.principal`` (and the ``sub`` claim), ``x-test-claims`` (JSON) the
claims; ``x-test-deny: 1`` refuses with 401. It owns those headers only in
these tests.
"""

from __future__ import annotations

import json
import time
import types
from typing import Any

import yaml

from twistgw import sdk
import twistgw_ratelimit as rl

USER = "x-test-user"
CLAIMS = "x-test-claims"
DENY = "x-test-deny"

#: every rate-limit plugin, as (name, plugin class) for ChainTester / start_gateway
PLUGINS: list[tuple[str, object]] = [
    ("localRatelimit", rl.LocalPlugin), ("ratelimitBasic", rl.BasicPlugin), ("ratelimit", rl.ActionsPlugin),
    ("ratelimitRegular", rl.RegularPlugin), ("ratelimitEarly", rl.EarlyPlugin),
    ("rateLimitConfigs", rl.ConfigsPlugin),
]


def _make_fakeauth() -> types.ModuleType:
    mod = types.ModuleType("rl_fakeauth")

    @sdk.hookimpl
    def twistgw_plugin_info() -> sdk.PluginInfo:
        return sdk.PluginInfo(order=200, description="test stand-in for an auth plugin")

    @sdk.hookimpl
    def twistgw_compile_options(options: Any, scope: Any) -> Any:
        return dict(options)

    @sdk.hookimpl
    def twistgw_authenticate(ctx: sdk.RequestContext, options: Any) -> Any:
        if ctx.header(DENY):
            return sdk.Deny(401, b"Jwt is missing")
        user = ctx.header(USER)
        if user is not None:
            ctx.principal = user
            ctx.claims = {"sub": user, **json.loads(ctx.header(CLAIMS) or "{}")}
        return None

    mod.twistgw_plugin_info = twistgw_plugin_info
    mod.twistgw_compile_options = twistgw_compile_options
    mod.twistgw_authenticate = twistgw_authenticate
    return mod


fakeauth = _make_fakeauth()
WITH_AUTH = PLUGINS + [("jwt", fakeauth)]

def upstream(name: str = "echo-1", namespace: str = "gloo-system") -> dict[str, Any]:
    return {"apiVersion": "gloo.solo.io/v1", "kind": "Upstream", "metadata": {"name": name, "namespace": namespace},
            "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": 9}]}}}


UPSTREAM = upstream()


def route(prefix: str = "/", options: dict[str, Any] | None = None, name: str | None = None,
          upstream: str | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"matchers": [{"prefix": prefix}]}
    if upstream is not None:
        ns, _, up = upstream.partition("/")
        r["routeAction"] = {"single": {"upstream": {"name": up, "namespace": ns}}}
    else:
        r["directResponseAction"] = {"status": 200, "body": "ok"}
    if name is not None:
        r["name"] = name
    if options is not None:
        r["options"] = options
    return r


def config(options: dict[str, Any] | None = None, routes: list[dict[str, Any]] | None = None,
           settings: dict[str, Any] | None = None, redis: str | None = "127.0.0.1:1",
           extra: list[dict[str, Any]] = (), name: str = "vs", namespace: str = "default") -> str:
    """A VirtualService (domains ``*``), a Settings when ``settings`` or
    ``redis`` is given (``redis`` fills ``ratelimitServer.redis.address``),
    and ``extra`` documents."""
    vh: dict[str, Any] = {"domains": ["*"], "routes": routes or [route()]}
    if options:
        vh["options"] = options
    docs: list[dict[str, Any]] = [{
        "apiVersion": "gateway.solo.io/v1", "kind": "VirtualService",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"virtualHost": vh}}]
    spec = dict(settings or {})
    if redis is not None:
        server = dict(spec.get("ratelimitServer") or {})
        server.setdefault("redis", {"address": redis})
        spec["ratelimitServer"] = server
    if spec:
        docs.append({"apiVersion": "gateway.vendor.io/v1", "kind": "Settings",
                     "metadata": {"name": "default", "namespace": "default"}, "spec": spec})
    docs.extend(extra)
    return yaml.safe_dump_all(docs, sort_keys=False)


def rate_limit_config(name: str, raw: dict[str, Any], namespace: str = "gloo-system") -> dict[str, Any]:
    return {"apiVersion": "ratelimit.solo.io/v1alpha1", "kind": "RateLimitConfig",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"raw": raw}}


def per(n: int, unit: str) -> dict[str, Any]:
    return {"requestsPerUnit": n, "unit": unit}


def fresh_window(unit: int = 60, need: float = 8.0) -> None:
    """Blocks until at least ``need`` seconds are left in the current
    window of ``unit`` seconds, so a test's requests share one window."""
    left = unit - time.time() % unit
    if left < need:
        time.sleep(left + 0.05)
