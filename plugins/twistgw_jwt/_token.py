"""Parsing and checking one compact JWS, with Envoy's failure statuses.

Pure: no reactor, no I/O. The signature itself is checked with PyJWT's
algorithm implementations on key objects loaded once (see :mod:`._keys`).
"""

from __future__ import annotations

import binascii
import functools
import math
from typing import Any, Iterable, Mapping

import attrs
from jwt.algorithms import get_default_algorithms
from twistgw.api.b64 import b64decode_strict

from twistgw_jwt._keys import SUPPORTED_ALGS, VerifyKey, loads_json

# ---------------------------------------------------------------------------
# Failures: Envoy's (google/jwt_verify_lib) status strings
# ---------------------------------------------------------------------------


@attrs.frozen
class Failure:
    """Why a token was not accepted: the client-facing body and status."""

    code: str
    message: str
    status: int = 401

    def __str__(self) -> str:
        return self.message


def _f(code: str, message: str, status: int = 401) -> Failure:
    return Failure(code, message, status)


MISSING = _f("missing", "Jwt is missing")
BAD_FORMAT = _f("bad_format", "Jwt is not in the form of Header.Payload.Signature")
HEADER_BAD_BASE64 = _f("header_bad_base64", "Jwt header is an invalid Base64url encoded")
HEADER_BAD_JSON = _f("header_bad_json", "Jwt header is an invalid JSON")
HEADER_BAD_ALG = _f("header_bad_alg", "Jwt header [alg] field is required and must be a string")
HEADER_ALG_NOT_SUPPORTED = _f("alg_not_supported", "Jwt header [alg] is not supported")
HEADER_BAD_KID = _f("header_bad_kid", "Jwt header [kid] field is not a string")
PAYLOAD_BAD_BASE64 = _f("payload_bad_base64", "Jwt payload is an invalid Base64url encoded")
PAYLOAD_BAD_JSON = _f("payload_bad_json", "Jwt payload is an invalid JSON")
ISS_NOT_STRING = _f("iss_not_string", "Jwt payload [iss] field is not a string")
SUB_NOT_STRING = _f("sub_not_string", "Jwt payload [sub] field is not a string")
AUD_NOT_STRING = _f("aud_not_string", "Jwt payload [aud] field is not a string or string list")
SIGNATURE_BAD_BASE64 = _f("signature_bad_base64", "Jwt signature is an invalid Base64url encoded")
UNKNOWN_ISSUER = _f("unknown_issuer", "Jwt issuer is not configured")
EXPIRED = _f("expired", "Jwt is expired")
NOT_YET_VALID = _f("not_yet_valid", "Jwt not yet valid")
AUDIENCE_NOT_ALLOWED = _f("audience_not_allowed", "Audiences in Jwt are not allowed", 403)
VERIFICATION_FAILS = _f("verification_fails", "Jwt verification fails")
KID_ALG_MISMATCH = _f("kid_alg_mismatch", "Jwks doesn't have key to match kid or alg from Jwt")
JWKS_FETCH_FAILED = _f("jwks_fetch_failed", "Jwks remote fetch is failed")
MULTIPLE_TOKENS = _f("multiple_tokens", "Found multiple Jwt tokens")


def _time_claim_failures(name: str) -> tuple[Failure, Failure]:
    return (_f(f"{name}_not_integer", f"Jwt payload [{name}] field is not an integer"),
            _f(f"{name}_out_of_range",
               f"Jwt payload [{name}] field is not a positive 64 bit integer"))


TIME_CLAIM_FAILURES = {n: _time_claim_failures(n) for n in ("exp", "nbf", "iat")}

#: Tokens longer than this are refused before any decoding (a header block is
#: bounded anyway; this bounds the work one request can cause).
MAX_TOKEN_LENGTH = 16 * 1024

# ---------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------

def b64url_decode(segment: bytes) -> bytes:
    """Strict base64url: the URL-safe alphabet, no padding, canonical
    trailing bits (the gateway's one strict decoder). Raises ValueError otherwise."""
    return b64decode_strict(segment, urlsafe=True, padded=False)


class ParsedToken:
    """A token split and decoded, not yet verified. A plain slotted class
    (one is made per unseen token; an attrs frozen class's ``__init__``
    costs a ``object.__setattr__`` per field)."""

    __slots__ = ("raw", "header", "payload", "signing_input", "signature", "alg", "kid", "iss")

    def __init__(self, raw: str, header: Mapping[str, Any], payload: Mapping[str, Any], signing_input: bytes,
                 signature: bytes) -> None:
        self.raw = raw
        self.header = header
        self.payload = payload
        self.signing_input = signing_input
        self.signature = signature
        self.alg: str = header["alg"]
        self.kid: str | None = header.get("kid")
        self.iss: str | None = payload.get("iss")

    def __repr__(self) -> str:
        return f"ParsedToken(alg={self.alg!r}, kid={self.kid!r}, iss={self.iss!r})"  # never the token


def _json_object(segment: bytes, bad_b64: Failure, bad_json: Failure) -> Mapping[str, Any] | Failure:
    try:
        raw = b64url_decode(segment)
    except (ValueError, binascii.Error):
        return bad_b64
    try:
        value = loads_json(raw)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return bad_json
    if not isinstance(value, dict):
        return bad_json
    return value


def _check_time_claim(payload: Mapping[str, Any], name: str) -> Failure | None:
    if name not in payload:
        return None
    value = payload[name]
    not_int, out_of_range = TIME_CLAIM_FAILURES[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return not_int
    if isinstance(value, float) and not math.isfinite(value):
        return not_int
    if value < 0 or value >= 2**63:
        return out_of_range
    return None


@functools.lru_cache(maxsize=64)  # at most 64 x 16 KiB of an attacker's headers
def _header(segment: bytes) -> Mapping[str, Any] | Failure:
    """The checked JOSE header of a token, from its first segment.

    An issuer signs every token with the same few headers (``alg``, ``kid``,
    ``typ``), so the result is remembered per segment (the same bytes always
    give the same answer; nothing changes the dict it returns)."""
    header = _json_object(segment, HEADER_BAD_BASE64, HEADER_BAD_JSON)
    if isinstance(header, Failure):
        return header
    alg = header.get("alg")
    if not isinstance(alg, str):
        return HEADER_BAD_ALG
    if alg not in SUPPORTED_ALGS:
        return HEADER_ALG_NOT_SUPPORTED
    if "kid" in header and not isinstance(header["kid"], str):
        return HEADER_BAD_KID
    # RFC 7515 §4.1.11: a recipient must reject a token whose "crit" lists an
    # extension it does not implement. We implement none.
    if "crit" in header:
        return VERIFICATION_FAILS
    return header


def parse_token(token: str) -> ParsedToken | Failure:
    """Split and decode a compact JWS; check the shape of every member we read.

    No signature check here. The header members ``jku``, ``x5u``, ``jwk`` and
    ``x5c`` are never read: keys come from configuration only.
    """
    if len(token) > MAX_TOKEN_LENGTH:
        return BAD_FORMAT
    try:
        data = token.encode("ascii")
    except UnicodeEncodeError:
        return BAD_FORMAT
    parts = data.split(b".")
    if len(parts) != 3:  # a JWE has 5 parts; neither it nor an unsigned JWT is accepted
        return BAD_FORMAT
    h_seg, p_seg, s_seg = parts
    header = _header(h_seg)
    if isinstance(header, Failure):
        return header
    payload = _json_object(p_seg, PAYLOAD_BAD_BASE64, PAYLOAD_BAD_JSON)
    if isinstance(payload, Failure):
        return payload
    if "iss" in payload and not isinstance(payload["iss"], str):
        return ISS_NOT_STRING
    if "sub" in payload and not isinstance(payload["sub"], str):
        return SUB_NOT_STRING
    if "aud" in payload:
        aud = payload["aud"]
        if not isinstance(aud, str) and not (
                isinstance(aud, list) and all(isinstance(a, str) for a in aud)):
            return AUD_NOT_STRING
    for name in ("exp", "nbf", "iat"):
        problem = _check_time_claim(payload, name)
        if problem is not None:
            return problem
    try:
        signature = b64url_decode(s_seg)
    except (ValueError, binascii.Error):
        return SIGNATURE_BAD_BASE64
    return ParsedToken(token, header, payload, h_seg + b"." + p_seg, signature)


# ---------------------------------------------------------------------------
# Checking
# ---------------------------------------------------------------------------

_ALGORITHMS = {name: impl for name, impl in get_default_algorithms().items() if name in SUPPORTED_ALGS}


def candidate_keys(keys: Iterable[VerifyKey], token: ParsedToken) -> list[VerifyKey]:
    """Keys that may verify this token: the token's ``alg`` must be one the
    key allows, and a ``kid`` on both sides must be equal. Without a ``kid``
    every key of the right type is tried, never just "the first key"."""
    alg, kid = token.alg, token.kid
    return [k for k in keys if k.matches(kid, alg)]


def verify_signature(key: VerifyKey, token: ParsedToken) -> bool:
    """True only when the signature verifies under ``key`` with the token's alg."""
    if token.alg not in key.algorithms:
        return False
    impl = _ALGORITHMS[token.alg]
    try:
        return bool(impl.verify(token.signing_input, key.key, token.signature))
    except Exception:  # a malformed signature must never become a 500
        return False


def check_claims(payload: Mapping[str, Any], now: float, skew: float,
                 audiences: frozenset[str] | None) -> Failure | None:
    """Time claims with clock skew, then the audience. Shapes were already
    checked by :func:`parse_token`."""
    exp = payload.get("exp")
    if exp is not None and now > exp + skew:
        return EXPIRED
    nbf = payload.get("nbf")
    if nbf is not None and nbf > now + skew:
        return NOT_YET_VALID
    iat = payload.get("iat")
    if iat is not None and iat > now + skew:
        return NOT_YET_VALID
    if audiences:
        aud = payload.get("aud")
        values = [aud] if isinstance(aud, str) else (aud or [])
        if not any(a in audiences for a in values):
            return AUDIENCE_NOT_ALLOWED
    return None
