"""``oauth2.accessTokenValidation``: a bearer access token, checked by
introspection (RFC 7662), as a JWT (remote or local key set, with the JWT
plugin's parser, key rules and key-set cache from :mod:`twistgw_jwt.verify`), and optionally against the
userinfo endpoint.

Results are cached per token for ``cacheTimeout`` (Gloo's default 10
minutes), negative ones too, and never past the token's ``exp``. A
provider that cannot be asked is an error (503), never cached.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from types import MappingProxyType
from typing import Any, Mapping
from urllib.parse import quote

import attrs
from twisted.internet.defer import Deferred

from twistgw.sdk import NO_TRACER, NotChecked, RequestContext, Tracer
from twistgw_extauth import AuthDeny
from twistgw_jwt.verify import Failure as TokenFailure
from twistgw_jwt.verify import VerifyKey, candidate_keys, check_claims, claim_text, parse_token, verify_signature
from twistgw_oidc._flow import make_allow
from twistgw_oidc._http import CallFailed
from twistgw_oidc._options import AccessTokenSpec
from twistgw_oidc._provider import UrlKeySet
from twistgw_oidc._runtime import Runtime

CACHE_SIZE = 10_000
_INVALID = "invalid_token"


class ResultCache:
    """token → (until, claims or None for "not active")."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[float, dict[str, Any] | None]] = OrderedDict()

    def get(self, token: str, now: float) -> tuple[bool, dict[str, Any] | None]:
        entry = self.entry(token, now)
        return (False, None) if entry is None else (True, entry[1])

    def entry(self, token: str, now: float) -> tuple[float, dict[str, Any] | None] | None:
        """(until when, claims or None for "not active"), or None: not cached (or no longer)."""
        entry = self._entries.get(token)
        if entry is None:
            return None
        if entry[0] <= now:
            del self._entries[token]
            return None
        return entry

    def put(self, token: str, claims: dict[str, Any] | None, now: float, timeout: float,
            exp: Any = None) -> None:
        until = now + timeout
        if isinstance(exp, (int, float)) and not isinstance(exp, bool):
            until = min(until, float(exp))
        if timeout <= 0 or until <= now:
            return
        self._entries[token] = (until, claims)
        if len(self._entries) > CACHE_SIZE:
            self._entries.popitem(last=False)


def _challenge(error: str | None = None) -> tuple[tuple[bytes, bytes], ...]:
    value = 'Bearer realm="twistgw"' + (f', error="{error}"' if error else "")
    return ((b"www-authenticate", value.encode("ascii")),)


@attrs.frozen(eq=False)
class AccessTokenChecker:
    spec: AccessTokenSpec
    runtime: Runtime = attrs.field(repr=False)
    local_keys: tuple[VerifyKey, ...] | None
    remote_keys: UrlKeySet | None
    owned_request_headers: tuple[bytes, ...]
    description: str
    credential_headers: tuple[bytes, ...] = (b"authorization",)
    cache: ResultCache = attrs.field(factory=ResultCache, repr=False)
    #: ``Authorization`` value -> (until, the decision): the warm path of
    #: :meth:`check`, never past the cached answer's expiry
    decisions: dict[bytes, tuple[float, Any]] = attrs.field(factory=dict, repr=False)

    def check(self, ctx: RequestContext) -> Any:
        values = ctx.headers.get_canonical(b"Authorization") or []
        if len(values) == 1:  # a token seen lately: one lookup, the expiry, the decision made then
            known = self.decisions.get(values[0])
            if known is not None:
                if self.runtime.now() < known[0]:
                    return known[1]
                del self.decisions[values[0]]
        tokens = [v[7:].strip() for v in values if v[:7].lower() == b"bearer "]
        if len(values) > 1 or len(tokens) != 1 or not tokens[0]:
            return AuthDeny(401, b"Access token missing", headers=_challenge(None if not values else _INVALID),
                            reason="oauth2: no single bearer token")
        token = tokens[0].decode("latin-1")
        entry = self.cache.entry(token, self.runtime.now())
        if entry is not None:
            decision = self.decide(entry[1], cached=True)
            self.remember(values[0], entry[0], decision)
            return decision
        return Deferred.fromCoroutine(self._validate(token, ctx.tracer))

    def remember(self, header: bytes, until: float, decision: Any) -> None:
        """The decision for a cached token, by the exact ``Authorization``
        value, until its cache entry expires (a pure function of the cached
        answer and this config, so made once)."""
        decisions = self.decisions
        decisions[header] = (until, decision)
        if len(decisions) > CACHE_SIZE:
            del decisions[next(iter(decisions))]

    def dry_run(self, ctx: RequestContext) -> Any:
        """``twistgw explain``: a missing token or a cached result decides; else say what would be asked."""
        decision = self.check(ctx) if not ctx.headers.hasHeader(b"authorization") else None
        if decision is not None:
            return decision
        values = ctx.headers.getRawHeaders(b"authorization") or []
        tokens = [v[7:].strip() for v in values if v[:7].lower() == b"bearer "]
        if len(values) == 1 and len(tokens) == 1 and tokens[0]:
            hit, claims = self.cache.get(tokens[0].decode("latin-1"), self.runtime.now())
            if hit:
                return self.decide(claims, cached=True)
            where = self.spec.introspection_url or (self.spec.jwt.remote_url if self.spec.jwt else None) or "local keys"
            return NotChecked(f"would validate the access token at {where}")
        return self.check(ctx)

    async def _validate(self, token: str, tracer: Tracer = NO_TRACER) -> Any:
        spec = self.spec
        # the wait for the provider (introspection, key set, userinfo) as a child span; never the token
        span = tracer.child("oauth2.introspection" if spec.jwt is None else "oauth2.jwt_validation")
        try:
            claims = await (self._jwt(token) if spec.jwt is not None else self._introspect(token))
            if claims is not None and spec.userinfo_url:
                claims = await self._userinfo(token, claims)
        except CallFailed as exc:
            span.end(error=exc)
            return AuthDeny.failure(f"oauth2: token validation unavailable: {exc}", 503)
        span.set("oauth2.active", claims is not None)
        span.end()
        self.cache.put(token, claims, self.runtime.now(), spec.cache_timeout,
                       claims.get("exp") if claims is not None else None)
        return self.decide(claims, cached=False)

    def decide(self, claims: dict[str, Any] | None, cached: bool) -> Any:
        spec = self.spec
        if claims is None:
            return AuthDeny(401, b"Access token not valid", headers=_challenge(_INVALID),
                            reason="oauth2: token not active" + (" (cached)" if cached else ""))
        if spec.required_scopes:
            scope = claims.get("scope")
            have = set(scope.split()) if isinstance(scope, str) else set(claims.get("scp") or ())
            if not spec.required_scopes <= have:
                return AuthDeny(403, b"Access token lacks a required scope", headers=_challenge("insufficient_scope"),
                                reason=f"oauth2: scopes {sorted(spec.required_scopes - have)} missing")
        principal = None
        if spec.user_id_attribute:
            value = claims.get(spec.user_id_attribute)
            if not isinstance(value, str) or not value:
                return AuthDeny(401, b"Access token not valid", headers=_challenge(_INVALID),
                                reason=f"oauth2: no {spec.user_id_attribute!r} in the introspection answer")
            principal = value
        elif isinstance(claims.get("sub"), str):
            principal = claims["sub"]
        headers = []
        for ch in spec.claims_to_headers:
            data = claim_text(claims.get(ch.claim))
            if data is not None:
                headers.append((ch.header, data))
        # Gloo's AuthorizationRequest state: a JWT access token's claims under "jwtAccessToken"
        # (extauth.proto, JwtValidation); "claims" for any access token (twistgw's)
        state = {"claims": claims, "jwtAccessToken": claims} if spec.jwt is not None else {"claims": claims}
        return make_allow(principal=principal, headers=tuple(headers), state=MappingProxyType(state),
                          reason="oauth2: access token valid" + (" (cached)" if cached else ""),
                          claims=dict(claims), claims_provider=spec.source)

    async def _introspect(self, token: str) -> dict[str, Any] | None:
        spec = self.spec
        assert spec.introspection_url is not None
        headers: dict[bytes, bytes] = {}
        form = {"token": token, "token_type_hint": "access_token"}
        if spec.client_id and spec.client_secret is not None:
            pair = f"{quote(spec.client_id, safe='')}:{quote(spec.client_secret.decode('utf-8'), safe='')}"
            headers[b"Authorization"] = b"Basic " + base64.b64encode(pair.encode("utf-8"))
        elif spec.client_id:
            form["client_id"] = spec.client_id
        answer = await self.runtime.client().call("POST", spec.introspection_url, spec.timeout, form=form,
                                                  headers=headers)
        doc = answer.json() if answer.status == 200 else None
        if doc is None:
            raise CallFailed(f"introspection answered {answer.status}")
        if doc.get("active") is not True:
            return None
        exp = doc.get("exp")
        if isinstance(exp, (int, float)) and not isinstance(exp, bool) and exp <= self.runtime.now():
            return None
        return dict(doc)

    async def _jwt(self, token: str) -> dict[str, Any] | None:
        jwt = self.spec.jwt
        assert jwt is not None
        parsed = parse_token(token)
        if isinstance(parsed, TokenFailure):
            return None
        if self.remote_keys is not None:
            keys = await self.remote_keys.get_keys()
            if keys is None:
                raise CallFailed(f"key set {jwt.remote_url}: {self.remote_keys.last_error}")
        else:
            keys = self.local_keys or ()
        candidates = candidate_keys(keys, parsed)
        if not candidates and self.remote_keys is not None:
            candidates = candidate_keys(await self.remote_keys.refetch_unknown() or (), parsed)
        if not any(verify_signature(k, parsed) for k in candidates):
            return None
        payload = dict(parsed.payload)
        if jwt.issuer is not None and payload.get("iss") != jwt.issuer:
            return None
        if check_claims(payload, self.runtime.now(), 60, jwt.audiences) is not None:
            return None
        return payload

    async def _userinfo(self, token: str, claims: Mapping[str, Any]) -> dict[str, Any] | None:
        assert self.spec.userinfo_url is not None
        answer = await self.runtime.client().call("GET", self.spec.userinfo_url, self.spec.timeout,
                                                  headers={b"Authorization": b"Bearer " + token.encode("latin-1")})
        if answer.status in (401, 403):
            return None
        info = answer.json() if answer.status == 200 else None
        if info is None:
            raise CallFailed(f"userinfo answered {answer.status}")
        return {**info, **claims}
