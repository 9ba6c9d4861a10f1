"""The JWT plugin's token verification, for other plugins.

Everything another plugin may use of ``twistgw_jwt`` is named here; the
package's ``_``-modules are its own and may change at any time. With these a
plugin verifies a compact JWS exactly as the ``jwt`` plugin does (the OIDC
plugin checks ID tokens and access tokens with them). See ``docs/jwt.md``,
"Using the JWT verification from another plugin".

* :func:`parse_token` splits and decodes a compact token strictly (base64url
  without padding and with canonical trailing bits, JSON without duplicate
  members, ``crit`` refused, ``jku``/``x5u``/``jwk``/``x5c`` never read,
  at most 16 KiB). It returns a :class:`ParsedToken` or a :class:`Failure`.
* Keys are :class:`VerifyKey` objects, each allowing an exact set of
  algorithms (``none`` and HMAC never): from configuration text with
  :func:`parse_local_key` (PEM, a JWK or a JWKS; :class:`KeyProblem` says
  what is wrong), or from a :class:`RemoteKeySet`.
* :func:`verifies` (or :func:`candidate_keys` and :func:`verify_signature`)
  checks the signature: the token's ``alg`` must be one its key allows and
  a ``kid`` on both sides must be equal.
* :func:`check_claims` checks ``exp``/``nbf``/``iat`` with a clock skew and
  the audience.
* :class:`RemoteKeySet` is the key-set cache: fetched on first use, kept for
  ``cache_duration`` then refreshed in the background, the last good keys
  kept when a fetch fails, exponential backoff, and at most one refetch per
  ``refetch_interval`` for a token naming an unknown key. A plugin fetching
  its document elsewhere subclasses it and overrides
  :meth:`RemoteKeySet.fetch_document` (raising :class:`FetchError`).
* :func:`claim_text` turns a claim's value into a header value the way
  ``claimsToHeaders`` does.

Pure except :class:`RemoteKeySet`, which fetches with the reactor it is given.
"""

from __future__ import annotations

from typing import Iterable

from twistgw_jwt._authn import claim_text
from twistgw_jwt._keys import SUPPORTED_ALGS, KeyParseResult, KeyProblem, VerifyKey, parse_local_key
from twistgw_jwt._remote import FetchError, RemoteKeySet, RemoteSpec
from twistgw_jwt._token import Failure, ParsedToken, candidate_keys, check_claims, parse_token, verify_signature

__all__ = [
    "SUPPORTED_ALGS",
    "FetchError",
    "Failure",
    "KeyParseResult",
    "KeyProblem",
    "ParsedToken",
    "RemoteKeySet",
    "RemoteSpec",
    "VerifyKey",
    "candidate_keys",
    "check_claims",
    "claim_text",
    "parse_local_key",
    "parse_token",
    "verifies",
    "verify_signature",
]


def verifies(token: ParsedToken, keys: Iterable[VerifyKey]) -> bool:
    """Whether one of ``keys`` that may serve ``token`` (:func:`candidate_keys`)
    verifies its signature (:func:`verify_signature`)."""
    return any(verify_signature(k, token) for k in candidate_keys(keys, token))
