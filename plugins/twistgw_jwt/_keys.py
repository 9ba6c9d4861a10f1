"""Public verification keys: parsed once from PEM, a JWK or a JWKS.

Pure: no reactor, no I/O. A :class:`VerifyKey` holds a loaded
``cryptography`` key object and the exact set of JWS algorithms it may verify;
the token's ``alg`` must be in that set, so the key decides the algorithm
(``none`` and HMAC are never accepted: no key ever allows them).
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

import attrs
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

#: Smallest RSA modulus accepted (NIST SP 800-131A).
MIN_RSA_BITS = 2048

RSA_ALGS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
EC_ALGS_BY_CURVE = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
JWK_CURVES = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
#: Every algorithm the plugin can verify. Anything else (``none``, ``HS*``,
#: ``ES256K``, ...) is "not supported".
SUPPORTED_ALGS = RSA_ALGS | frozenset(EC_ALGS_BY_CURVE.values()) | {"EdDSA"}


class KeyProblem(ValueError):
    """A key that cannot be used, with a reason a person can act on."""


@attrs.frozen
class VerifyKey:
    """One public key and the algorithms it verifies."""

    kid: str | None
    kty: str
    algorithms: frozenset[str]
    key: Any = attrs.field(eq=False, repr=False)
    description: str = ""

    def matches(self, kid: str | None, alg: str) -> bool:
        """Envoy's rule: a key with a ``kid`` serves only tokens with that
        ``kid`` (or none); a key without one serves any; ``alg`` must fit."""
        if alg not in self.algorithms:
            return False
        if kid is not None and self.kid is not None and kid != self.kid:
            return False
        return True


@attrs.frozen
class KeyParseResult:
    keys: tuple[VerifyKey, ...]
    #: keys skipped on purpose (``kty: oct``, ``use: enc``, ...), as text for logs
    skipped: tuple[str, ...] = ()


# ---------------------------------------------------------------------------
# From cryptography key objects
# ---------------------------------------------------------------------------


def _from_public_key(pub: Any, kid: str | None, alg: str | None, where: str) -> VerifyKey:
    if isinstance(pub, rsa.RSAPublicKey):
        if pub.key_size < MIN_RSA_BITS:
            raise KeyProblem(
                f"{where}: RSA key of {pub.key_size} bits refused; at least {MIN_RSA_BITS}"
                " bits are required (generate one with `openssl genpkey -algorithm RSA"
                " -pkeyopt rsa_keygen_bits:2048`)")
        algs = RSA_ALGS
        if alg is not None:
            if alg not in RSA_ALGS:
                raise KeyProblem(f"{where}: alg {alg!r} does not fit an RSA key"
                                f" (use one of {', '.join(sorted(RSA_ALGS))})")
            algs = frozenset({alg})
        return VerifyKey(kid, "RSA", algs, pub, f"RSA {pub.key_size} bits")
    if isinstance(pub, ec.EllipticCurvePublicKey):
        fit = EC_ALGS_BY_CURVE.get(pub.curve.name)
        if fit is None:
            raise KeyProblem(f"{where}: EC curve {pub.curve.name} is not supported"
                            " (use P-256, P-384 or P-521)")
        if alg is not None and alg != fit:
            raise KeyProblem(f"{where}: alg {alg!r} does not fit an EC {pub.curve.name} key"
                            f" (it signs {fit})")
        return VerifyKey(kid, "EC", frozenset({fit}), pub, f"EC {pub.curve.name}")
    if isinstance(pub, (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)):
        if alg is not None and alg != "EdDSA":
            raise KeyProblem(f"{where}: alg {alg!r} does not fit an Ed25519/Ed448 key (use EdDSA)")
        name = "Ed25519" if isinstance(pub, ed25519.Ed25519PublicKey) else "Ed448"
        return VerifyKey(kid, "OKP", frozenset({"EdDSA"}), pub, name)
    raise KeyProblem(f"{where}: unsupported key type {type(pub).__name__}"
                    " (use RSA, EC P-256/P-384/P-521 or Ed25519)")


# ---------------------------------------------------------------------------
# PEM
# ---------------------------------------------------------------------------

_PEM_BLOCK = re.compile(
    r"-----BEGIN ([A-Z0-9 ]+)-----\s.*?-----END \1-----", re.DOTALL)


def parse_pem(text: str, where: str = "key") -> KeyParseResult:
    """Every PEM block of ``text``: public keys (SPKI or PKCS#1) and
    certificates. Private keys are refused: give the gateway public keys only."""
    blocks = list(_PEM_BLOCK.finditer(text))
    if not blocks:
        raise KeyProblem(f"{where}: no PEM block found (expected -----BEGIN PUBLIC KEY-----)")
    keys = []
    for i, m in enumerate(blocks):
        label = m.group(1)
        at = where if len(blocks) == 1 else f"{where} (PEM block {i + 1})"
        data = m.group(0).encode("ascii", "replace")
        pub: PublicKeyTypes
        if "PRIVATE" in label:
            raise KeyProblem(f"{at}: this is a private key; configure the public key only"
                            " (`openssl pkey -in private.pem -pubout`)")
        try:
            if label == "CERTIFICATE":
                pub = x509.load_pem_x509_certificate(data).public_key()
            elif label in ("PUBLIC KEY", "RSA PUBLIC KEY"):
                pub = load_pem_public_key(data)
            else:
                raise KeyProblem(f"{at}: unsupported PEM type {label!r}"
                                " (use PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE)")
        except KeyProblem:
            raise
        except Exception as exc:
            raise KeyProblem(f"{at}: cannot read the PEM {label.lower()}: {exc}") from None
        keys.append(_from_public_key(pub, None, None, at))
    return KeyParseResult(tuple(keys))


# ---------------------------------------------------------------------------
# JWK / JWKS
# ---------------------------------------------------------------------------


def parse_jwk(jwk: Mapping[str, Any], where: str = "key") -> VerifyKey | None:
    """One JWK → a key, or None when it is deliberately not usable for
    verification (``kty: oct``, ``use`` other than ``sig``, ``key_ops``
    without ``verify``). Raises :class:`KeyProblem` for a broken key."""
    if not isinstance(jwk, Mapping):
        raise KeyProblem(f"{where}: a JWK must be a JSON object")
    kty = jwk.get("kty")
    if not isinstance(kty, str):
        raise KeyProblem(f"{where}: [kty] is missing or not a string")
    if kty == "oct":
        return None  # symmetric secrets are never used: HMAC is not accepted
    if "d" in jwk:
        raise KeyProblem(f"{where}: this JWK holds a private key; publish the public key only"
                         " (`twistgw keys PUBLIC.pem`)")
    use = jwk.get("use")
    if use is not None and use != "sig":
        return None
    ops = jwk.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        return None
    kid = jwk.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise KeyProblem(f"{where}: [kid] must be a string")
    alg = jwk.get("alg")
    if alg is not None and not isinstance(alg, str):
        raise KeyProblem(f"{where}: [alg] must be a string")
    if alg is not None and alg not in SUPPORTED_ALGS:
        raise KeyProblem(f"{where}: alg {alg!r} is not supported"
                        f" (supported: {', '.join(sorted(SUPPORTED_ALGS))})")
    data = {k: v for k, v in jwk.items() if k in _PUBLIC_MEMBERS.get(kty, ())}
    pub: Any  # PyJWT's from_jwk returns a private or a public key; _from_public_key checks which
    try:
        if kty == "RSA":
            for f in ("n", "e"):
                if not isinstance(data.get(f), str):
                    raise KeyProblem(f"{where}: [{f}] is missing or not a string for an RSA key")
            pub = RSAAlgorithm.from_jwk(data)
        elif kty == "EC":
            crv = data.get("crv")
            if crv not in JWK_CURVES:
                raise KeyProblem(f"{where}: EC [crv] {crv!r} is not supported (use P-256, P-384, P-521)")
            pub = ECAlgorithm.from_jwk(data)
        elif kty == "OKP":
            crv = data.get("crv")
            if crv not in ("Ed25519", "Ed448"):
                raise KeyProblem(f"{where}: OKP [crv] {crv!r} is not supported (use Ed25519)")
            pub = OKPAlgorithm.from_jwk(data)
        else:
            raise KeyProblem(f"{where}: [kty] {kty!r} is not supported (use RSA, EC or OKP)")
    except KeyProblem:
        raise
    except Exception as exc:
        raise KeyProblem(f"{where}: cannot read the {kty} key: {exc}") from None
    return _from_public_key(pub, kid, alg, where)


# only public members reach the parser: private parts (d, p, q, ...) are dropped
_PUBLIC_MEMBERS = {
    "RSA": ("kty", "n", "e"),
    "EC": ("kty", "crv", "x", "y"),
    "OKP": ("kty", "crv", "x"),
}


def parse_jwks_document(doc: Any, where: str = "key", strict: bool = True) -> KeyParseResult:
    """A ``{"keys": [...]}`` document. With ``strict`` a broken key is an
    error (configuration); without, it is skipped (remote sets: one bad key
    must not take the others down)."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("keys"), list):
        raise KeyProblem(f"{where}: a key set must be a JSON object with a [keys] array")
    keys: list[VerifyKey] = []
    skipped: list[str] = []
    for i, jwk in enumerate(doc["keys"]):
        at = f"{where} keys[{i}]"
        try:
            key = parse_jwk(jwk, at)
        except KeyProblem as exc:
            if strict:
                raise
            skipped.append(str(exc))
            continue
        if key is None:
            skipped.append(f"{at}: ignored (symmetric, or not a signature key)")
            continue
        keys.append(key)
    return KeyParseResult(tuple(keys), tuple(skipped))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"duplicate member {k!r}")
            seen.add(k)
    return out


def _bad_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_bad_constant)


#: What may surround a JSON text (RFC 8259 §2); json's own decode() skips it.
_JSON_SPACE = " \t\n\r"


def loads_json(data: bytes | str) -> Any:
    """Strict JSON: UTF-8 only, no duplicate members, no NaN/Infinity."""
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    if data and data[0] not in _JSON_SPACE and data[-1] not in _JSON_SPACE:
        # The usual token segment: the C scanner straight away, without
        # decode()'s two whitespace regex matches; what it leaves unread is
        # refused as decode() refuses it ("Extra data").
        try:
            value, end = _DECODER.scan_once(data, 0)  # type: ignore[attr-defined]  # set by JSONDecoder.__init__
        except StopIteration as exc:
            raise json.JSONDecodeError("Expecting value", data, exc.value) from None
        if end != len(data):
            raise json.JSONDecodeError("Extra data", data, end)
        return value
    return _DECODER.decode(data)


def parse_local_key(text: str, where: str = "key") -> KeyParseResult:
    """The ``jwks.local.key`` value: PEM, a JWK or a JWKS."""
    stripped = text.strip()
    if stripped.startswith("-----BEGIN"):
        return parse_pem(stripped, where)
    if stripped.startswith("{"):
        try:
            doc = loads_json(stripped)
        except (ValueError, RecursionError) as exc:
            raise KeyProblem(f"{where}: not valid JSON: {exc}") from None
        if isinstance(doc, Mapping) and "keys" in doc:
            return parse_jwks_document(doc, where, strict=True)
        key = parse_jwk(doc, where)
        if key is None:
            raise KeyProblem(f"{where}: this JWK is not usable for signature verification"
                            " (kty oct keys are never accepted; use must be sig)")
        return KeyParseResult((key,))
    raise KeyProblem(f"{where}: expected a PEM public key, a JWK or a JWKS"
                    " (text starting with -----BEGIN or {)")


def parse_remote_body(body: bytes) -> KeyParseResult:
    """A fetched key set. Raises :class:`KeyProblem` if nothing usable is in it."""
    try:
        doc = loads_json(body)
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        raise KeyProblem(f"key set is not valid JSON: {exc}") from None
    result = parse_jwks_document(doc, "key set", strict=False)
    if not result.keys:
        raise KeyProblem("key set has no usable public key"
                        + (f" ({'; '.join(result.skipped)})" if result.skipped else ""))
    return result
