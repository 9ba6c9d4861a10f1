"""A third-party AuthConfig config type, ``headerToken``: a request header
must carry one of the tokens of a Secret; the token's key in the Secret is
the principal. ``docs/plugins.md`` shows this file; the extauth tests use it."""

from __future__ import annotations

import hmac
from typing import Any

import attrs

import twistgw
from twistgw.options import Problems


@attrs.frozen
class TokenChecker:
    header: bytes
    tokens: tuple[tuple[str, bytes], ...] = attrs.field(repr=False)
    credential_headers: tuple[bytes, ...]  # removed before forwarding when the check admits

    def check(self, ctx: twistgw.RequestContext) -> twistgw.AuthDecision:
        values = ctx.headers.getRawHeaders(self.header) or []
        if len(values) != 1:
            return twistgw.AuthDeny(401, b"token required", reason=f"{len(values)} {self.header.decode()} headers")
        for owner, token in self.tokens:  # every token compared, in constant time
            if hmac.compare_digest(values[0], token):
                return twistgw.AuthAllow(principal=owner, reason=f"token of {owner}")
        return twistgw.AuthDeny(403, b"token refused", reason="no token matches")

    def dry_run(self, ctx: twistgw.RequestContext) -> twistgw.AuthDecision:
        return self.check(ctx)  # nothing to contact: the real answer


class HeaderToken(twistgw.ExtAuthConfigType):
    name = "headerToken"  # spec.configs[i].headerToken

    def compile(self, raw: Any, scope: twistgw.ConfigScope) -> TokenChecker:
        problems = Problems()  # the gateway's field reader: every problem at once
        spec = problems.fields(raw, (), ("header", "secretRef", "keepToken"))
        header = spec.header_name("header", "x-token")
        ref = spec.reference("secretRef", scope.namespace)  # {name, namespace}
        keep = spec.boolean("keepToken", False)
        secret = None
        if ref is not None:
            try:
                secret = scope.secret(ref.name, ref.namespace)
            except KeyError as exc:
                spec.issue(("secretRef", "name"), f"dangling reference: {exc.args[0]}")
        problems.raise_if_any()  # paths relative to the entry: the extauth plugin locates them
        assert secret is not None and header is not None
        name = header.lower().encode("ascii")
        return TokenChecker(name, tuple(sorted(secret.data.items())), () if keep else (name,))


class HeaderTokenPlugin:  # entry point: headertoken = "my_package:HeaderTokenPlugin"
    @twistgw.hookimpl
    def twistgw_extauth_config_types(self) -> list[twistgw.ExtAuthConfigType]:
        return [HeaderToken()]
