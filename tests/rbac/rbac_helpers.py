"""Test helpers for the rbac plugin: a stand-in for the jwt plugin and YAML builders.

``fakejwt`` reads the claims a real jwt plugin would have verified from a test
header (base64url JSON), so RBAC semantics can be tested without signing
tokens. It sits at order 200, where the real ``jwt`` plugin runs.
"""

from __future__ import annotations

import base64
import json
import types
from typing import Any

import yaml

from twistgw import sdk
import twistgw_rbac
from twistgw.sdk.testing import ChainTester

CLAIMS_HEADER = "x-test-claims"
PROVIDER_HEADER = "x-test-provider"


def _make_fakejwt() -> types.ModuleType:
    mod = types.ModuleType("rbac_fakejwt")

    @sdk.hookimpl
    def twistgw_plugin_info() -> sdk.PluginInfo:
        return sdk.PluginInfo(order=200, description="test stand-in for jwt")

    @sdk.hookimpl
    def twistgw_compile_options(options: Any, scope: Any) -> Any:
        return dict(options)

    @sdk.hookimpl
    def twistgw_authenticate(ctx: sdk.RequestContext, options: Any) -> Any:
        raw = ctx.header(CLAIMS_HEADER)
        if raw is None:
            if options.get("allowMissing"):
                return None
            return sdk.Deny(401, b"Jwt is missing")
        ctx.claims = json.loads(base64.urlsafe_b64decode(raw))
        ctx.claims_provider = ctx.header(PROVIDER_HEADER) or "default"
        return None

    mod.twistgw_plugin_info = twistgw_plugin_info
    mod.twistgw_compile_options = twistgw_compile_options
    mod.twistgw_authenticate = twistgw_authenticate
    return mod


fakejwt = _make_fakejwt()


def claims_headers(claims: Any, provider: str | None = None) -> dict[str, str]:
    out = {CLAIMS_HEADER: base64.urlsafe_b64encode(json.dumps(claims).encode()).decode()}
    if provider is not None:
        out[PROVIDER_HEADER] = provider
    return out


UPSTREAM = {
    "apiVersion": "core.vendor.io/v1",
    "kind": "Upstream",
    "metadata": {"name": "backend", "namespace": "default"},
    "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": 9}]}},
}


def route(prefix: str = "/", options: dict[str, Any] | None = None, name: str | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {
        "matchers": [{"prefix": prefix}],
        "routeAction": {"single": {"upstream": {"name": "backend", "namespace": "default"}}},
    }
    if name is not None:
        r["name"] = name
    if options is not None:
        r["options"] = options
    return r


def config(rbac: Any = None, routes: list[dict[str, Any]] | None = None,
           jwt: Any = None, settings: dict[str, Any] | None = None,
           extra_vh_options: dict[str, Any] | None = None) -> str:
    """A VirtualService for ``*`` with ``fakejwt`` (allow-missing unless given)
    and the given rbac options on the virtual host."""
    options: dict[str, Any] = {"fakejwt": jwt if jwt is not None else {"allowMissing": True}}
    if rbac is not None:
        options["rbac"] = rbac
    options.update(extra_vh_options or {})
    docs: list[dict[str, Any]] = [UPSTREAM, {
        "apiVersion": "gateway.vendor.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "vs", "namespace": "default"},
        "spec": {"virtualHost": {"domains": ["*"], "options": options,
                                 "routes": routes if routes is not None else [route()]}},
    }]
    if settings is not None:
        docs.append({"apiVersion": "gateway.vendor.io/v1", "kind": "Settings",
                     "metadata": {"name": "settings", "namespace": "default"}, "spec": settings})
    return yaml.safe_dump_all(docs, sort_keys=False)


def make_tester(text: str) -> ChainTester:
    return ChainTester.from_yaml(
        text, plugins=[("fakejwt", fakejwt), ("rbac", twistgw_rbac)], load_entry_points=False)


def policy(claims: dict[str, Any], methods: list[str] | None = None, prefix: str | None = None,
           matcher: str | None = None, provider: str | None = None,
           delimiter: str | None = None) -> dict[str, Any]:
    jwt: dict[str, Any] = {"claims": claims}
    if matcher is not None:
        jwt["matcher"] = matcher
    if provider is not None:
        jwt["provider"] = provider
    p: dict[str, Any] = {"principals": [{"jwtPrincipal": jwt}]}
    perms: dict[str, Any] = {}
    if methods is not None:
        perms["methods"] = methods
    if prefix is not None:
        perms["pathPrefix"] = prefix
    if perms:
        p["permissions"] = perms
    if delimiter is not None:
        p["nestedClaimDelimiter"] = delimiter
    return p
