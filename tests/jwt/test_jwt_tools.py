"""``twistgw_jwt.tools``: minting tokens and publishing key sets, checked
against the plugin itself and against PyJWT."""

from __future__ import annotations

import base64
import hashlib
import json
import time

import jwt as pyjwt
import pytest
from jwt_helpers import ISSUER, URL, bearer, local_provider, make_tester, private_key, private_pem, public_pem

from twistgw_jwt import tools

from support.trial import TestCase


def _header(tok: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(tok.split(".")[0] + "=="))


class JwtToolsTests(TestCase):
    @pytest.mark.parametrize("kind,alg,kty", [("rsa", "RS256", "RSA"), ("ec256", "ES256", "EC"),
                                              ("ec384", "ES384", "EC"), ("ec521", "ES512", "EC"),
                                              ("ed25519", "EdDSA", "OKP")])
    async def test_mint_and_publish_round_trip(self, kind, alg, kty):
        doc = tools.jwks_from_public_key(public_pem(kind).encode())
        (jwk,) = doc["keys"]
        assert jwk["kty"] == kty and jwk["alg"] == alg and jwk["use"] == "sig"
        assert jwk["kid"] == tools.thumbprint(private_key(kind).public_key())
        assert "d" not in jwk
        if kty == "RSA":
            assert set(jwk) == {"kty", "use", "alg", "kid", "n", "e"}
        elif kty == "EC":
            assert set(jwk) == {"kty", "use", "alg", "kid", "crv", "x", "y"}
        else:
            assert set(jwk) == {"kty", "use", "alg", "kid", "crv", "x"}

        before = int(time.time())
        tok = tools.mint_token(private_pem(kind), ISSUER, "system:serviceaccount:ns:sa",
                               {"role": "admin", "iss": "ignored", "exp": 1}, 600)
        header = _header(tok)
        assert header["alg"] == alg and header["kid"] == jwk["kid"] and header["typ"] == "JWT"
        claims = pyjwt.decode(tok, pyjwt.PyJWK(jwk).key, algorithms=[alg])
        assert claims["iss"] == ISSUER and claims["sub"] == "system:serviceaccount:ns:sa"
        assert claims["role"] == "admin"
        assert before <= claims["iat"] <= int(time.time())
        assert claims["exp"] == claims["iat"] + 600

        # and the gateway admits it with the published key set
        t = make_tester({"providers": {"m": local_provider(key=json.dumps(doc))}})
        r = await t.request("GET", URL, headers=bearer(tok))
        assert r.status == 200 and r.ctx.principal == "system:serviceaccount:ns:sa"

    def test_thumbprint_is_rfc7638(self):
        # RFC 7638 §3.1 example key and thumbprint
        jwk = {"kty": "RSA", "e": "AQAB", "n": (
            "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECP"
            "ebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY"
            "368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0f"
            "M4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw")}
        public = pyjwt.algorithms.RSAAlgorithm.from_jwk(jwk)
        assert tools.thumbprint(public) == "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"

    def test_kid_and_algorithm_choices(self):
        tok = tools.mint_token(private_pem(), ISSUER, "a", {}, 60, kid="my-key")
        assert _header(tok)["kid"] == "my-key"
        tok = tools.mint_token(private_pem(), ISSUER, "a", {}, 60, kid="")
        assert "kid" not in _header(tok)
        tok = tools.mint_token(private_pem(), ISSUER, "a", {}, 60, algorithm="PS384")
        assert _header(tok)["alg"] == "PS384"
        doc = tools.jwks_from_public_key(public_pem().encode(), kid="k1")
        assert doc["keys"][0]["kid"] == "k1"
        # a private key or a PKCS#1 public key is accepted; only the public part is written
        assert tools.jwks_from_public_key(private_pem()) == tools.jwks_from_public_key(public_pem().encode())
        assert tools.jwks_from_public_key(public_pem(fmt="pkcs1").encode()) == \
            tools.jwks_from_public_key(public_pem().encode())
        # an expired token can be minted on purpose (negative ttl), for tests
        tok = tools.mint_token(private_pem(), ISSUER, "a", {}, -10, kid="")
        with pytest.raises(pyjwt.ExpiredSignatureError):
            pyjwt.decode(tok, private_key("rsa").public_key(), algorithms=["RS256"])

    @pytest.mark.parametrize("call,message", [
        (lambda: tools.mint_token(private_pem(), ISSUER, "a", {}, 60, algorithm="HS256"),
         "not for public-key tokens"),
        (lambda: tools.mint_token(private_pem(), ISSUER, "a", {}, 60, algorithm="none"),
         "not for public-key tokens"),
        (lambda: tools.mint_token(private_pem(), ISSUER, "a", {}, 60, algorithm="ES256"),
         "does not fit an RSA key"),
        (lambda: tools.mint_token(private_pem("ec256"), ISSUER, "a", {}, 60, algorithm="ES384"),
         "does not fit this key (it signs ES256)"),
        (lambda: tools.mint_token(private_pem("rsa1024"), ISSUER, "a", {}, 60),
         "at least 2048"),
        (lambda: tools.mint_token(public_pem().encode(), ISSUER, "a", {}, 60),
         "not an unencrypted PEM private key"),
        (lambda: tools.mint_token(private_pem(), ISSUER, "a", {}, "60"), "whole number"),
        (lambda: tools.jwks_from_public_key(b"garbage"), "not a PEM public key"),
        (lambda: tools.jwks_from_public_key(public_pem("rsa1024").encode()), "at least 2048"),
    ])
    def test_errors_are_value_errors_with_a_reason(self, call, message):
        with pytest.raises(ValueError) as info:
            call()
        assert message in str(info.value)

    def test_cli_token_and_keys(self, tmp_path, capsys):
        """The ``twistgw token`` / ``twistgw keys`` commands call these helpers."""
        cli = pytest.importorskip("twistgw.cli")
        key = tmp_path / "private.pem"
        key.write_bytes(private_pem("ec256"))
        pub = tmp_path / "public.pem"
        pub.write_text(public_pem("ec256"))
        assert cli.main(["keys", "--public", str(pub)]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["keys"][0]["alg"] == "ES256"
        assert cli.main(["token", "--key", str(key), "--iss", ISSUER, "--sub", "bob", "--ttl", "5m"]) == 0
        tok = capsys.readouterr().out.strip()
        claims = pyjwt.decode(tok, pyjwt.PyJWK(doc["keys"][0]).key, algorithms=["ES256"])
        assert claims["sub"] == "bob" and claims["exp"] - claims["iat"] == 300
        assert hashlib.sha256(tok.encode()).hexdigest()  # printed one token, nothing else
