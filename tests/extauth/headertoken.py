"""A third-party AuthConfig config type, ``headerToken``: a request header
must carry one of the tokens of a Secret; the token's key in the Secret is
the principal. ``docs/plugins.md`` shows this file; the extauth tests use it."""

from __future__ import annotations

import hmac
from typing import Any

import attrs

from twistgw import sdk
from twistgw_extauth import AuthAllow, AuthDecision, AuthDeny, ConfigScope, ExtAuthConfigType


@attrs.frozen
class TokenChecker:
    header: bytes
    tokens: tuple[tuple[str, bytes], ...] = attrs.field(repr=False)
    credential_headers: tuple[bytes, ...]  # removed before forwarding when the check admits

    def check(self, ctx: sdk.RequestContext) -> AuthDecision:
        values = ctx.headers.getRawHeaders(self.header) or []
        if len(values) != 1:
            return AuthDeny(401, b"token required", reason=f"{len(values)} {self.header.decode()} headers")
        for owner, token in self.tokens:  # every token compared, in constant time
            if hmac.compare_digest(values[0], token):
                return AuthAllow(principal=owner, reason=f"token of {owner}")
        return AuthDeny(403, b"token refused", reason="no token matches")

    def dry_run(self, ctx: sdk.RequestContext) -> AuthDecision:
        return self.check(ctx)  # nothing to contact: the real answer


class HeaderToken(ExtAuthConfigType):
    name = "headerToken"  # spec.configs[i].headerToken

    def compile(self, raw: Any, scope: ConfigScope) -> TokenChecker:
        spec = sdk.require_mapping(raw, (), "headerToken")  # OptionsError: located by the extauth plugin
        sdk.check_fields(spec, ("header", "secretRef", "keepToken"), ())
        problems = sdk.Problems()  # report every problem at once
        header = spec.get("header", "x-token")
        if not isinstance(header, str) or not header:
            problems.add(("header",), "must be a header name")
        ref = spec.get("secretRef")
        secret = None
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
            problems.add(("secretRef",), "is required: {name: SECRET}")
        else:
            try:
                secret = scope.secret(ref["name"], ref.get("namespace"))
            except KeyError as exc:
                problems.add(("secretRef", "name"), f"dangling reference: {exc.args[0]}")
        problems.raise_if_any()
        assert secret is not None
        name = header.lower().encode("ascii")
        return TokenChecker(name, tuple(sorted(secret.data.items())), () if spec.get("keepToken") else (name,))


class HeaderTokenPlugin:  # entry point: headertoken = "my_package:HeaderTokenPlugin"
    @sdk.hookimpl
    def twistgw_plugin_info(self) -> sdk.PluginInfo:  # no options key, no Settings section of its own
        return sdk.PluginInfo(description="the headerToken AuthConfig config type", options=(), settings=())

    @sdk.hookimpl(optionalhook=True)  # the extauth plugin's hook: absent without it
    def twistgw_extauth_config_types(self) -> list[ExtAuthConfigType]:
        return [HeaderToken()]
