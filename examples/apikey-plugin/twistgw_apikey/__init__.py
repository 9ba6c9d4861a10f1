"""An API-key check for twistgw, written only against the public hook API.

Options (under ``options.apikey`` of a virtual host or route)::

    apikey:
      header: X-Api-Key            # default X-Api-Key
      keysSecretRef: {name: api-keys, namespace: default}   # each data value is a key

A request without the header gets 401; a wrong key gets 403. The header is
removed before the request is forwarded, and the key's name in the Secret
is the identity this plugin authenticated (``ctx.identities["apikey"]``,
and ``ctx.principal`` unless a plugin earlier in the chain set it).
"""

from __future__ import annotations

import hmac
from typing import Any, Mapping

import attrs

from twistgw import sdk


@attrs.frozen
class Compiled:
    header: str
    keys: tuple[tuple[str, bytes], ...]  # (name, key)


@sdk.hookimpl
def twistgw_plugin_info() -> sdk.PluginInfo:
    # After extauth (100), jwt (200) and rbac (300).
    return sdk.PluginInfo(order=400, description="API keys in a request header")


@sdk.hookimpl
def twistgw_compile_options(options: Mapping[str, Any], scope: sdk.OptionsScope) -> Compiled:
    unknown = set(options) - {"header", "keysSecretRef"}
    if unknown:
        raise sdk.OptionsError(sorted(unknown)[0], "unknown field (expected header, keysSecretRef)")
    header = options.get("header", "X-Api-Key")
    if not isinstance(header, str) or not header:
        raise sdk.OptionsError("header", "must be a non-empty string")
    ref = options.get("keysSecretRef")
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str):
        raise sdk.OptionsError("keysSecretRef", "is required: {name: SECRET, namespace: NS}")
    try:
        secret = scope.resources.secret(ref["name"], ref.get("namespace", scope.namespace))
    except KeyError as exc:
        raise sdk.OptionsError(("keysSecretRef", "name"), f"dangling reference: {exc.args[0]}") from None
    if not secret.data:
        raise sdk.OptionsError("keysSecretRef", "the Secret holds no keys")
    return Compiled(header, tuple(sorted(secret.data.items())))


@sdk.hookimpl
def twistgw_authenticate(ctx: sdk.RequestContext, options: Compiled) -> sdk.Decision:
    values = ctx.header_values(options.header)
    if not values:
        return sdk.Deny(401, b"API key is missing", reason=f"no {options.header} header")
    if len(values) > 1:
        return sdk.Deny(401, b"API key is ambiguous", reason=f"{len(values)} {options.header} headers")
    presented = values[0].encode("latin-1")
    for name, key in options.keys:
        if hmac.compare_digest(presented, key):
            ctx.authenticated("apikey", name)  # ctx.identities["apikey"]; ctx.principal unless set earlier
            ctx.headers.removeHeader(options.header.encode("ascii"))
            return sdk.Allow(f"key {name!r}")
    return sdk.Deny(403, b"API key is not valid", reason="no key matches")
