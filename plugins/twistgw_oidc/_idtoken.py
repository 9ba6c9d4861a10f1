"""Validating an ID token (OpenID Connect Core 3.1.3.7) with the JWT
plugin's parser and signature check (its public :mod:`twistgw_jwt.verify`): the key decides the algorithm (never
``none``, never HMAC), ``crit`` refused, ``jku``/``x5u``/``jwk`` ignored,
strict base64url and JSON. Then ``iss`` (exact), ``aud`` (holds the client;
``azp`` when there are several), ``exp`` and ``iat`` (required, 60 s skew),
``nonce`` (exactly the one sent) and ``sub``.
"""

from __future__ import annotations

import hmac
from typing import Any, Mapping

from twistgw_jwt.verify import RemoteKeySet, candidate_keys, parse_token, verifies, verify_signature
from twistgw_jwt.verify import Failure as TokenFailure

SKEW = 60.0


class Invalid(Exception):
    """The ID token is not accepted; the message says why (for logs)."""


class KeysUnavailable(Exception):
    """The provider's key set could not be fetched (the provider is down)."""


async def validate(raw: Any, keys: RemoteKeySet, issuer: str, client_id: str, nonce: str | None,
                   now: float) -> dict[str, Any]:
    """The verified claims of ``raw``.

    :param nonce: the nonce sent with the login; None on a refresh (the
        provider may then leave it out, but one present must not be new).
    :raise Invalid: the token is not accepted.
    :raise KeysUnavailable: no key set could be had to check it.
    """
    if not isinstance(raw, str):
        raise Invalid("no id_token in the token endpoint's answer")
    parsed = parse_token(raw)
    if isinstance(parsed, TokenFailure):
        raise Invalid(parsed.message)
    known = await keys.get_keys()
    if known is None:
        raise KeysUnavailable(keys.last_error or "no keys")
    if not verifies(parsed, known):
        generation = keys.generation
        fresh = await keys.refetch_unknown()  # a rotated key: at most once per refetch interval
        candidates = candidate_keys(fresh or (), parsed) if keys.generation != generation else []
        if not any(verify_signature(k, parsed) for k in candidates):
            raise Invalid("the ID token's signature does not verify with the provider's keys"
                          f" (alg {parsed.alg}, kid {parsed.kid!r})")
    claims = dict(parsed.payload)
    check_claims(claims, issuer, client_id, nonce, now)
    return claims


def check_claims(claims: Mapping[str, Any], issuer: str, client_id: str, nonce: str | None, now: float) -> None:
    if claims.get("iss") != issuer:
        raise Invalid(f"iss {claims.get('iss')!r} is not the provider's issuer {issuer!r}")
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if client_id not in audiences:
        raise Invalid(f"aud {aud!r} does not hold the client id {client_id!r}")
    if len(audiences) > 1 and claims.get("azp") != client_id:
        raise Invalid("several audiences and azp is not the client id")
    if "azp" in claims and claims["azp"] != client_id:
        raise Invalid(f"azp {claims['azp']!r} is not the client id")
    for name in ("exp", "iat"):
        if name not in claims:
            raise Invalid(f"the ID token has no {name}")
    if now > claims["exp"] + SKEW:
        raise Invalid("the ID token has expired")
    if claims["iat"] > now + SKEW:
        raise Invalid("the ID token was issued in the future (iat)")
    if "nbf" in claims and claims["nbf"] > now + SKEW:
        raise Invalid("the ID token is not valid yet (nbf)")
    if not isinstance(claims.get("sub"), str) or not claims["sub"]:
        raise Invalid("the ID token has no sub")
    got = claims.get("nonce")
    if nonce is not None:
        if not isinstance(got, str) or not hmac.compare_digest(got.encode(), nonce.encode()):
            raise Invalid("the ID token's nonce is not the one sent with the login")
    elif got is not None and not isinstance(got, str):
        raise Invalid("the ID token's nonce is not a string")
