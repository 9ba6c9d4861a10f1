"""Helpers behind ``twistgw token`` and ``twistgw keys``: mint a token from a
private key, and publish a public key as a key set.

Both pick the algorithm from the key: RSA → RS256, EC P-256/P-384/P-521 →
ES256/ES384/ES512, Ed25519/Ed448 → EdDSA. By default both use the key's
RFC 7638 thumbprint as ``kid``, so a token minted with a private key is
matched to the key set made from its public key without further setup.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from twistgw_jwt._keys import EC_ALGS_BY_CURVE, MIN_RSA_BITS, RSA_ALGS

__all__ = ["jwks_from_public_key", "mint_token", "thumbprint"]

_REGISTERED = ("iss", "sub", "iat", "exp")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _default_alg(key: Any) -> str:
    if isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)):
        return "RS256"
    if isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        alg = EC_ALGS_BY_CURVE.get(key.curve.name)
        if alg is None:
            raise ValueError(f"EC curve {key.curve.name} is not supported (use P-256, P-384, P-521)")
        return alg
    if isinstance(key, (ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey,
                        ed448.Ed448PrivateKey, ed448.Ed448PublicKey)):
        return "EdDSA"
    raise ValueError(f"unsupported key type {type(key).__name__} (use RSA, EC or Ed25519)")


def _public_jwk(public: Any) -> dict[str, Any]:
    if isinstance(public, rsa.RSAPublicKey):
        if public.key_size < MIN_RSA_BITS:
            raise ValueError(f"RSA key of {public.key_size} bits; at least {MIN_RSA_BITS} are required")
        return RSAAlgorithm.to_jwk(public, as_dict=True)
    if isinstance(public, ec.EllipticCurvePublicKey):
        return ECAlgorithm.to_jwk(public, as_dict=True)
    if isinstance(public, (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)):
        return OKPAlgorithm.to_jwk(public, as_dict=True)
    raise ValueError(f"unsupported key type {type(public).__name__} (use RSA, EC or Ed25519)")


def thumbprint(public: Any) -> str:
    """RFC 7638 JWK thumbprint (SHA-256, base64url) of a public key object."""
    jwk = _public_jwk(public)
    members = {"RSA": ("e", "kty", "n"), "EC": ("crv", "kty", "x", "y"),
               "OKP": ("crv", "kty", "x")}[jwk["kty"]]
    canonical = json.dumps({m: jwk[m] for m in members}, separators=(",", ":"), sort_keys=True)
    return _b64(hashlib.sha256(canonical.encode("ascii")).digest())


def _load_private(pem: bytes) -> Any:
    try:
        return serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not an unencrypted PEM private key: {exc}") from None


def _load_public(pem: bytes) -> Any:
    """A PEM public key, certificate or (for convenience) private key → public key."""
    if b"PRIVATE KEY" in pem:
        return _load_private(pem).public_key()
    if b"CERTIFICATE" in pem:
        from cryptography import x509

        return x509.load_pem_x509_certificate(pem).public_key()
    try:
        return serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a PEM public key: {exc}") from None


def mint_token(private_key_pem: bytes, issuer: str, subject: str, claims: dict[str, Any],
               ttl_seconds: int, kid: str | None = None, algorithm: str | None = None) -> str:
    """Sign a JWT with ``iss``, ``sub``, ``iat`` (now), ``exp`` (now + ttl) and
    the extra ``claims``.

    :param kid: the ``kid`` header; None uses the key's RFC 7638 thumbprint
        (what :func:`jwks_from_public_key` publishes by default); ``""`` sends
        no ``kid``.
    :param algorithm: defaults from the key type (RS256, ES256/384/512, EdDSA).
        HMAC and ``none`` are refused.
    """
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int):
        raise ValueError("ttl_seconds must be a whole number of seconds")
    key = _load_private(private_key_pem)
    default = _default_alg(key)
    alg = algorithm or default
    if alg.startswith("HS") or alg.lower() == "none":
        raise ValueError(f"algorithm {alg} is not for public-key tokens")
    if isinstance(key, rsa.RSAPrivateKey) and alg not in RSA_ALGS:
        raise ValueError(f"algorithm {alg} does not fit an RSA key (use one of {', '.join(sorted(RSA_ALGS))})")
    if not isinstance(key, rsa.RSAPrivateKey) and alg != default:
        raise ValueError(f"algorithm {alg} does not fit this key (it signs {default})")
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size < MIN_RSA_BITS:
        raise ValueError(f"RSA key of {key.key_size} bits; at least {MIN_RSA_BITS} are required")
    now = int(time.time())
    payload = {k: v for k, v in claims.items() if k not in _REGISTERED}
    payload.update({"iss": issuer, "sub": subject, "iat": now, "exp": now + ttl_seconds})
    headers: dict[str, Any] = {"typ": "JWT"}
    if kid is None:
        kid = thumbprint(key.public_key())
    if kid:
        headers["kid"] = kid
    return jwt.encode(payload, key, algorithm=alg, headers=headers)


def jwks_from_public_key(public_pem: bytes, kid: str | None = None) -> dict[str, Any]:
    """A ``{"keys": [jwk]}`` document for a PEM public key (a certificate or
    private key is accepted too; only public members are written).

    :param kid: defaults to the RFC 7638 thumbprint of the key.
    """
    public = _load_public(public_pem)
    jwk = _public_jwk(public)
    jwk["alg"] = _default_alg(public)
    jwk["use"] = "sig"
    jwk["kid"] = kid if kid else thumbprint(public)
    order = ("kty", "use", "alg", "kid", "crv", "n", "e", "x", "y")
    return {"keys": [{k: jwk[k] for k in order if k in jwk}]}
