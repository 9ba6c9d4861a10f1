"""The verified claims of a request: the ``jwt`` plugin's state on the
request context, and the documented way other plugins read it.

When a token verifies, the jwt plugin leaves its payload and the provider
that verified it in ``ctx.state`` under :data:`CLAIMS` (an
``sdk.StateKey``); RBAC (``jwtPrincipal``), the OPA type
(``input.state.jwt``), rate-limit actions (``metadata`` of
``envoy.filters.http.jwt_authn``) and ``claimsToHeaders`` read them here. A
plugin that verifies a token of its own and wants those to work on it (the
extauth plugin, for an OIDC ID token's claims, ``AuthAllow.claims``) leaves
them with :func:`set_verified_claims`::

    from twistgw_jwt.claims import verified_claims

    found = verified_claims(ctx)         # None: no token was verified
    if found is not None and found.claims.get("tenant") == "acme":
        ...
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from twistgw.sdk import RequestContext, StateKey

__all__ = ["CLAIMS", "VerifiedClaims", "claims_of", "set_verified_claims", "verified_claims"]


class VerifiedClaims(NamedTuple):
    """A verified token's claims (a named pair: ``claims, provider =
    found`` unpacks it; one is made per verified request, so it is a tuple,
    the cheapest immutable object to make).

    :ivar claims: the payload, the request's own copy (a plugin changing
        it changes nothing cached, nor another request's).
    :ivar provider: the name of the provider that verified it (a jwt
        provider's key in ``options.jwt.providers``, or the issuer for an ID
        token verified by the extauth plugin), or None.
    """

    claims: dict[str, Any]
    provider: str | None = None


#: Where the jwt plugin keeps the request's verified claims.
CLAIMS: StateKey[VerifiedClaims] = StateKey("jwt", "claims")


def verified_claims(ctx: RequestContext) -> VerifiedClaims | None:
    """The request's verified claims, or None when no token verified."""
    return ctx.state.get(CLAIMS)


def claims_of(ctx: RequestContext) -> dict[str, Any] | None:
    """The verified payload alone, or None."""
    found: VerifiedClaims | None = ctx.state.get(CLAIMS)
    return None if found is None else found.claims


def set_verified_claims(ctx: RequestContext, claims: Mapping[str, Any] | None, provider: str | None) -> None:
    """Leave verified claims on the request (replacing any); ``claims``
    None removes them. Only for claims your plugin verified: every plugin
    after it trusts them."""
    if claims is None:
        ctx.state.pop(CLAIMS, None)
        return
    ctx.state[CLAIMS] = VerifiedClaims(claims if isinstance(claims, dict) else dict(claims), provider)
