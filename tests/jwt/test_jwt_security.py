"""Every JWT line of SECURITY-CASES.md, with the exact status and body."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jwt_helpers import (CLOCK,
    ISSUER, URL, KeySetServer, b64, bearer, claims, jwks, private_key,
    public_der, public_pem, raw_token, signed, make_tester, token, local_provider,
)

from twistgw_jwt import _token as T

from support.trial import TestCase, fixture

# Module-level testers: compiling keys once keeps the file fast.
RSA = make_tester({"providers": {"main": local_provider()}})
JWKS_MIXED = make_tester({"providers": {"main": local_provider(json.dumps(jwks(
    ("ec256", 0, None), ("rsa", 0, None), ("rsa", 1, None),
)))}})
JWKS_KIDS = make_tester({"providers": {"main": local_provider(json.dumps(jwks(
    ("rsa", 0, "k0"), ("rsa", 1, "k1"),
)))}})


async def status_body(t, tok, **kw):
    r = await t.request("GET", URL, headers=bearer(tok), **kw)
    return r.status, r.body


def assert_never_500(result):
    assert result.status != 500


def _hs256(secret: bytes, payload, header=None) -> str:
    header = header or {"alg": "HS256", "typ": "JWT"}
    signing_input = f"{b64(header)}.{b64(payload)}".encode()
    sig = hmac.new(secret, signing_input, hashlib.sha256).digest()
    return f"{signing_input.decode()}.{b64(sig)}"


# --------------------------------------------------------------------------
# Malformed tokens
# --------------------------------------------------------------------------

HDR = {"alg": "RS256", "typ": "JWT"}


_P = b64({"iss": ISSUER})
_DUP_ALG = '{"alg":"RS256","alg":"none"}'
_DUP_ISS = '{"iss":"a","iss":"' + ISSUER + '"}'
_DEEP = '{"a":' * 1500 + '1' + '}' * 1500


# --------------------------------------------------------------------------
# Time claims and clock skew
# --------------------------------------------------------------------------

NOW = 2_000_000_000


@fixture
def fixed_clock(monkeypatch):
    monkeypatch.setattr(CLOCK, "now", lambda: NOW)
    return NOW


SKEW0 = make_tester({"providers": {"main": local_provider(clockSkewSeconds=0)}})


def _payload(**kw):
    return {"iss": ISSUER, "sub": "alice", **kw}


class JwtSecurityTests(TestCase):
    # --------------------------------------------------------------------------
    # alg none, HMAC with the public key, alg/key mismatch
    # --------------------------------------------------------------------------


    @pytest.mark.parametrize("alg", ["none", "None", "NONE", "nOnE"])
    async def test_alg_none_is_refused(self, alg):
        for sig in ("", b64(b"x")):
            tok = raw_token({"alg": alg, "typ": "JWT"}, claims(), sig)
            assert await status_body(RSA, tok) == (401, b"Jwt header [alg] is not supported")

    async def test_empty_signature_is_refused(self):
        good = token()
        stripped = good.rsplit(".", 1)[0] + "."
        assert await status_body(RSA, stripped) == (401, b"Jwt verification fails")
        # and without the final dot it is not even a JWS
        assert await status_body(RSA, good.rsplit(".", 1)[0]) == (
            401, b"Jwt is not in the form of Header.Payload.Signature")

    @pytest.mark.parametrize("secret_form", ["pem", "pkcs1", "der", "jwk"])
    async def test_hs256_signed_with_the_public_key_is_refused(self, secret_form):
        secret = {
            "pem": public_pem().encode(),
            "pkcs1": public_pem(fmt="pkcs1").encode(),
            "der": public_der(),
            "jwk": json.dumps(jwks(("rsa", 0, None))["keys"][0]).encode(),
        }[secret_form]
        for t in (RSA, JWKS_MIXED):
            assert await status_body(t, _hs256(secret, claims())) == (
                401, b"Jwt header [alg] is not supported")

    async def test_oct_keys_in_a_key_set_are_ignored(self):
        secret = b"0123456789abcdef0123456789abcdef"
        doc = {"keys": [{"kty": "oct", "k": b64(secret), "kid": "hmac", "alg": "HS256"},
                        *jwks(("rsa", 0, "rsa"))["keys"]]}
        t = make_tester({"providers": {"main": local_provider(json.dumps(doc))}})
        tok = _hs256(secret, claims(), {"alg": "HS256", "kid": "hmac"})
        assert await status_body(t, tok) == (401, b"Jwt header [alg] is not supported")
        assert (await status_body(t, token(kid="rsa")))[0] == 200

    @pytest.mark.parametrize("kind,alg", [("ec256", "ES256"), ("ed25519", "EdDSA")])
    async def test_token_alg_not_matching_the_key_type(self, kind, alg):
        # signed properly by another key type, kid left out: the RSA key never matches
        tok = signed(claims(), kind=kind, kid=None)
        assert await status_body(RSA, tok) == (
            401, b"Jwks doesn't have key to match kid or alg from Jwt")

    async def test_alg_header_lying_about_the_family(self):
        # an RS256 signature relabelled ES256 (and the reverse) against the right keys
        rs = token(kid=None)
        h, p, s = rs.split(".")
        relabelled = f"{b64({'alg': 'ES256', 'typ': 'JWT'})}.{p}.{s}"
        assert (await status_body(JWKS_MIXED, relabelled))[0] == 401
        es = signed(claims(), kind="ec256", kid=None)
        h, p, s = es.split(".")
        relabelled = f"{b64({'alg': 'RS256', 'typ': 'JWT'})}.{p}.{s}"
        assert await status_body(JWKS_MIXED, relabelled) == (401, b"Jwt verification fails")

    async def test_jwk_alg_restricts_the_key_to_that_algorithm(self):
        # PEM RSA keys allow RS* and PS*; a JWK with alg RS256 allows only RS256
        ps = signed(claims(), alg="PS256", kid=None)
        assert (await status_body(RSA, ps))[0] == 200
        doc = jwks(("rsa", 0, None))  # alg RS256
        t = make_tester({"providers": {"main": local_provider(json.dumps(doc))}})
        assert await status_body(t, ps) == (401, b"Jwks doesn't have key to match kid or alg from Jwt")
        assert (await status_body(t, signed(claims(), alg="RS256", kid=None)))[0] == 200

    @pytest.mark.parametrize("kind,alg", [("rsa", "RS384"), ("rsa", "RS512"), ("rsa", "PS384"),
                                          ("rsa", "PS512"), ("ec256", "ES256"), ("ec384", "ES384"),
                                          ("ec521", "ES512"), ("ed25519", "EdDSA")])
    async def test_every_supported_algorithm_verifies(self, kind, alg):
        t = make_tester({"providers": {"main": local_provider(public_pem(kind))}})
        assert (await status_body(t, signed(claims(), kind=kind, alg=alg, kid=None)))[0] == 200
        # and the same token with one signature byte changed does not
        tok = signed(claims(), kind=kind, alg=alg, kid=None)
        h, p, s = tok.split(".")
        sig = bytearray(base64.urlsafe_b64decode(s + "=="))
        sig[len(sig) // 2] ^= 1
        assert await status_body(t, f"{h}.{p}.{b64(bytes(sig))}") == (401, b"Jwt verification fails")

    # --------------------------------------------------------------------------
    # kid is a lookup key only
    # --------------------------------------------------------------------------


    @pytest.mark.parametrize("kid", ["../../etc/passwd", "/dev/null", "' OR 1=1 --",
                                     "http://127.0.0.1:1/keys.json", "k" * 10240, "", "k0 ", "K0"])
    async def test_hostile_kid_values(self, kid):
        # signed by rsa 0, whose kid is "k0"
        tok = signed(claims(), header={"alg": "RS256", "typ": "JWT", "kid": kid})
        assert await status_body(JWKS_KIDS, tok) == (
            401, b"Jwks doesn't have key to match kid or alg from Jwt")

    @pytest.mark.parametrize("kid", [0, 1.5, None, ["k0"], {"k": "k0"}, True])
    async def test_kid_that_is_not_a_string(self, kid):
        tok = signed(claims(), header={"alg": "RS256", "kid": kid})
        assert await status_body(JWKS_KIDS, tok) == (401, b"Jwt header [kid] field is not a string")

    async def test_right_kid_admits(self):
        assert (await status_body(JWKS_KIDS, signed(claims(), n=1, kid="k1")))[0] == 200
        # a valid signature under the wrong kid's key is refused
        assert await status_body(JWKS_KIDS, signed(claims(), n=1, kid="k0")) == (
            401, b"Jwt verification fails")

    # --------------------------------------------------------------------------
    # Header members that carry keys or URLs are ignored
    # --------------------------------------------------------------------------


    async def test_embedded_keys_and_key_urls_are_ignored(self):
        server = KeySetServer()
        try:
            server.resource.set_keys(jwks(("rsa", 2, None)))  # the attacker's key
            attacker_jwk = jwks(("rsa", 2, None))["keys"][0]
            url = f"http://127.0.0.1:{server.port}/attacker.json"
            for extra in ({"jwk": attacker_jwk}, {"jku": url}, {"x5u": url},
                          {"x5c": ["MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA"]},
                          {"jwk": attacker_jwk, "jku": url, "x5u": url}):
                header = {"alg": "RS256", "typ": "JWT", **extra}
                tok = signed(claims(), header=header, n=2)
                for t in (RSA, JWKS_MIXED):
                    assert await status_body(t, tok) == (401, b"Jwt verification fails")
            assert server.count == 0  # no request was ever made to a URL from a token
        finally:
            await server.stop()

    # --------------------------------------------------------------------------
    # ECDSA malleability: CVE-2022-21449 and wrong lengths
    # --------------------------------------------------------------------------


    async def test_ecdsa_zero_and_wrong_length_signatures(self):
        t = make_tester({"providers": {"main": local_provider(public_pem("ec256"))}})
        good = signed(claims(), kind="ec256", kid=None)
        h, p, s = good.split(".")
        raw = base64.urlsafe_b64decode(s + "==")
        assert len(raw) == 64
        for sig in (b"\x00" * 64, b"\x00" * 32, raw[:63], raw + b"\x00", raw * 2, b"\x00",
                    b"\xff" * 64):
            assert await status_body(t, f"{h}.{p}.{b64(sig)}") == (401, b"Jwt verification fails")
        # a DER-encoded signature (what OpenSSL emits) is not a JWS signature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        der = private_key("ec256").sign(f"{h}.{p}".encode(), ec.ECDSA(hashes.SHA256()))
        assert await status_body(t, f"{h}.{p}.{b64(der)}") == (401, b"Jwt verification fails")
        assert (await status_body(t, good))[0] == 200

    async def test_eddsa_wrong_length_signature(self):
        t = make_tester({"providers": {"main": local_provider(public_pem("ed25519"))}})
        good = signed(claims(), kind="ed25519", kid=None)
        h, p, s = good.split(".")
        for sig in (b"", b"\x00" * 64, b"\x00" * 63, b"\x00" * 65):
            assert await status_body(t, f"{h}.{p}.{b64(sig)}") == (401, b"Jwt verification fails")

    # --------------------------------------------------------------------------
    # crit
    # --------------------------------------------------------------------------


    @pytest.mark.parametrize("crit", [["exp"], ["b64"], ["http://example.com/ext"], [], "b64", None])
    async def test_crit_is_refused(self, crit):
        tok = signed(claims(), header={"alg": "RS256", "typ": "JWT", "crit": crit, "b64": True})
        assert await status_body(RSA, tok) == (401, b"Jwt verification fails")

    @pytest.mark.parametrize("tok,body", [
        ("abc", T.BAD_FORMAT),
        ("a.b", T.BAD_FORMAT),
        ("a.b.c.d", T.BAD_FORMAT),
        ("a.b.c.d.e", T.BAD_FORMAT),  # JWE compact serialisation
        ("..", T.HEADER_BAD_JSON),
        ("\u00e9.b.c", T.BAD_FORMAT),
        (b64(HDR) + "=." + _P + ".c2ln", T.HEADER_BAD_BASE64),          # padding
        (b64(HDR) + "." + _P + "==.c2ln", T.PAYLOAD_BAD_BASE64),
        (b64(HDR) + "." + _P + ".c2ln==", T.SIGNATURE_BAD_BASE64),
        ("eyJhbGciOiJSUzI1NiJ9+/." + _P + ".c2ln", T.HEADER_BAD_BASE64),  # standard alphabet
        (b64(HDR) + "." + _P + ".c2l", T.SIGNATURE_BAD_BASE64),          # non-canonical bits
        (b64(HDR) + "." + _P + ".c2k", T.VERIFICATION_FAILS),
        (b64(HDR) + "." + _P + ".c2lu!", T.SIGNATURE_BAD_BASE64),
        (b64(HDR) + "." + _P + ".A", T.SIGNATURE_BAD_BASE64),            # impossible length
        (b64(HDR) + ".e31.c2ln", T.PAYLOAD_BAD_BASE64),                  # non-canonical bits
        (b64("[1,2]") + "." + _P + ".c2ln", T.HEADER_BAD_JSON),
        (b64('"RS256"') + "." + _P + ".c2ln", T.HEADER_BAD_JSON),
        (b64("null") + "." + _P + ".c2ln", T.HEADER_BAD_JSON),
        (b64('{"alg":"RS256"') + "." + _P + ".c2ln", T.HEADER_BAD_JSON),
        (b64(b"\xff\xfe{}") + "." + _P + ".c2ln", T.HEADER_BAD_JSON),    # not UTF-8
        (b64(_DUP_ALG) + "." + _P + ".c2ln", T.HEADER_BAD_JSON),         # duplicate member
        (b64({"typ": "JWT"}) + "." + _P + ".c2ln", T.HEADER_BAD_ALG),
        (b64({"alg": 256}) + "." + _P + ".c2ln", T.HEADER_BAD_ALG),
        (b64({"alg": "HS256"}) + "." + _P + ".c2ln", T.HEADER_ALG_NOT_SUPPORTED),
        (b64({"alg": "ES256K"}) + "." + _P + ".c2ln", T.HEADER_ALG_NOT_SUPPORTED),
        (b64(HDR) + "." + b64("[]") + ".c2ln", T.PAYLOAD_BAD_JSON),
        (b64(HDR) + "." + b64('"x"') + ".c2ln", T.PAYLOAD_BAD_JSON),
        (b64(HDR) + "." + b64('{"exp": NaN}') + ".c2ln", T.PAYLOAD_BAD_JSON),
        (b64(HDR) + "." + b64("[" * 100000 + "]" * 100000) + ".c2ln", T.BAD_FORMAT),  # too long
        (b64(HDR) + "." + b64(_DEEP) + ".c2ln", T.PAYLOAD_BAD_JSON),     # deeply nested
        (b64(HDR) + "." + b64(_DUP_ISS) + ".c2ln", T.PAYLOAD_BAD_JSON),  # duplicate iss
        (b64(HDR) + ".e30.c2ln", T.UNKNOWN_ISSUER),
        ("x" * 20000, T.BAD_FORMAT),
    ])
    async def test_malformed_tokens(self, tok, body):
        r = await RSA.request("GET", URL, headers=bearer(tok))
        assert (r.status, r.body) == (401, body.message.encode())
        assert r.response_headers == ((b"www-authenticate",
                                       b'Bearer realm="http://api.example.com/api/pets", error="invalid_token"'),)

    async def test_deep_nesting_in_a_header_below_the_length_limit(self):
        deep = '{"alg":"RS256","x":' + "[" * 5000 + "]" * 5000 + "}"
        tok = f"{b64(deep)}.{b64(claims())}.c2ln"
        assert len(tok) < T.MAX_TOKEN_LENGTH
        assert await status_body(RSA, tok) == (401, b"Jwt header is an invalid JSON")

    @pytest.mark.parametrize("t,payload,expected", [
        (RSA, _payload(exp=NOW), (200, b"")),
        (RSA, _payload(exp=NOW - 60), (200, b"")),
        (RSA, _payload(exp=NOW - 61), (401, b"Jwt is expired")),
        (RSA, _payload(exp=NOW - 60.5), (401, b"Jwt is expired")),
        (RSA, _payload(exp=0), (401, b"Jwt is expired")),
        (RSA, _payload(nbf=NOW + 60), (200, b"")),
        (RSA, _payload(nbf=NOW + 61), (401, b"Jwt not yet valid")),
        (RSA, _payload(iat=NOW + 60), (200, b"")),
        (RSA, _payload(iat=NOW + 61), (401, b"Jwt not yet valid")),
        (RSA, _payload(nbf=NOW + 61, exp=NOW - 61), (401, b"Jwt is expired")),
        (SKEW0, _payload(exp=NOW), (200, b"")),
        (SKEW0, _payload(exp=NOW - 1), (401, b"Jwt is expired")),
        (SKEW0, _payload(nbf=NOW + 1), (401, b"Jwt not yet valid")),
        (RSA, _payload(exp=str(NOW + 100)), (401, b"Jwt payload [exp] field is not an integer")),
        (RSA, _payload(exp=True), (401, b"Jwt payload [exp] field is not an integer")),
        (RSA, _payload(exp=None), (401, b"Jwt payload [exp] field is not an integer")),
        (RSA, _payload(exp=[NOW]), (401, b"Jwt payload [exp] field is not an integer")),
        (RSA, _payload(exp=1e400), (401, b"Jwt payload is an invalid JSON")),  # "Infinity"
        (RSA, '{"iss":"%s","exp":1e400}' % ISSUER, (401, b"Jwt payload [exp] field is not an integer")),
        (RSA, '{"iss":"%s","exp":%d.5}' % (ISSUER, NOW), (200, b"")),
        (RSA, _payload(exp=2**63), (401, b"Jwt payload [exp] field is not a positive 64 bit integer")),
        (RSA, _payload(exp=-1), (401, b"Jwt payload [exp] field is not a positive 64 bit integer")),
        (RSA, _payload(nbf="0"), (401, b"Jwt payload [nbf] field is not an integer")),
        (RSA, _payload(iat={}), (401, b"Jwt payload [iat] field is not an integer")),
        (RSA, _payload(exp=int("9" * 4000)), (401, b"Jwt payload [exp] field is not a positive 64 bit integer")),
    ])
    async def test_time_claims(self, fixed_clock, t, payload, expected):
        assert await status_body(t, signed(payload, kid=None)) == expected

    # --------------------------------------------------------------------------
    # iss must be the exact string
    # --------------------------------------------------------------------------


    @pytest.mark.parametrize("iss,body", [
        ([ISSUER], b"Jwt payload [iss] field is not a string"),
        (None, b"Jwt payload [iss] field is not a string"),
        (1, b"Jwt payload [iss] field is not a string"),
        ({"iss": ISSUER}, b"Jwt payload [iss] field is not a string"),
        (ISSUER[:-1], b"Jwt issuer is not configured"),
        (ISSUER + "/", b"Jwt issuer is not configured"),
        (ISSUER.upper(), b"Jwt issuer is not configured"),
        (" " + ISSUER, b"Jwt issuer is not configured"),
        ("", b"Jwt issuer is not configured"),
    ])
    async def test_issuer_must_match_exactly(self, iss, body):
        assert await status_body(RSA, signed(claims(iss=iss), kid=None)) == (401, body)

    async def test_missing_iss(self):
        payload = claims()
        del payload["iss"]
        assert await status_body(RSA, signed(payload, kid=None)) == (401, b"Jwt issuer is not configured")

    # --------------------------------------------------------------------------
    # No kid and several keys: only keys of the right type, never just the first
    # --------------------------------------------------------------------------


    async def test_no_kid_tries_every_key_of_the_right_type_only(self, monkeypatch):
        tried = []
        real = T.verify_signature

        def spy(key, tok):
            tried.append(key.kty)
            return real(key, tok)

        monkeypatch.setattr(T, "verify_signature", spy)
        # signed by the second RSA key: the EC key is never tried, both RSA keys are
        tok = signed(claims(), n=1, kid=None)
        assert (await status_body(JWKS_MIXED, tok))[0] == 200
        assert tried == ["RSA", "RSA"]
        tried.clear()
        tok = signed(claims(), kind="ec256", kid=None)
        assert (await status_body(JWKS_MIXED, tok))[0] == 200
        assert tried == ["EC"]
        tried.clear()
        # signed by an unknown RSA key: every RSA key tried, then refused
        assert await status_body(JWKS_MIXED, signed(claims(), n=3, kid=None)) == (
            401, b"Jwt verification fails")
        assert tried == ["RSA", "RSA"]

    # --------------------------------------------------------------------------
    # Two tokens, two Authorization headers
    # --------------------------------------------------------------------------


    async def test_token_in_header_and_a_different_one_in_the_query(self):
        a, b = token(), token(sub="bob")
        r = await RSA.request("GET", URL + f"?access_token={b}", headers=bearer(a))
        assert (r.status, r.body) == (401, b"Found multiple Jwt tokens")

    async def test_two_authorization_headers(self):
        a, b = token(), token(sub="bob")
        for values in ([f"Bearer {a}", f"Bearer {b}"], [f"Bearer {a}", f"Bearer {a}"],
                       [f"Bearer {a}", "Basic YWxpY2U6c2VjcmV0"]):
            r = await RSA.request("GET", URL, headers=[("Authorization", v) for v in values])
            assert (r.status, r.body) == (401, b"Found multiple Jwt tokens"), values

    async def test_two_access_token_parameters(self):
        a, b = token(), token(sub="bob")
        for query in (f"access_token={a}&access_token={b}", f"access_token={a}&access_token={a}"):
            r = await RSA.request("GET", URL + "?" + query)
            assert (r.status, r.body) == (401, b"Found multiple Jwt tokens")

    async def test_same_token_in_header_and_query_is_one_token_and_both_are_stripped(self):
        a = token()
        r = await RSA.request("GET", URL + f"?x=1&access_token={a}&y=2", headers=bearer(a))
        assert r.status == 200
        assert r.ctx.headers.getRawHeaders(b"authorization") is None
        assert r.ctx.query == b"x=1&y=2"

    # --------------------------------------------------------------------------
    # The upstream never sees the token unless configured to
    # --------------------------------------------------------------------------


    async def test_token_is_stripped_after_verification(self):
        a = token()
        r = await RSA.request("GET", URL, headers={**bearer(a), "X-Other": "kept"})
        assert r.status == 200
        assert r.forwarded_headers.getRawHeaders(b"authorization") is None
        assert r.forwarded_headers.getRawHeaders(b"x-other") == [b"kept"]
        r = await RSA.request("GET", URL + f"?access_token={a}")
        assert r.status == 200 and r.ctx.query == b""

    async def test_keep_token(self):
        t = make_tester({"providers": {"main": local_provider(keepToken=True)}})
        a = token()
        r = await t.request("GET", URL + f"?access_token={a}&q=1", headers=bearer(a))
        assert r.status == 200
        assert r.forwarded_headers.getRawHeaders(b"authorization") == [f"Bearer {a}".encode()]
        assert r.ctx.query == f"access_token={a}&q=1".encode()

    # --------------------------------------------------------------------------
    # Fuzz-ish: nothing ever becomes a 500 or an admission
    # --------------------------------------------------------------------------


    async def test_random_garbage_never_admits_or_crashes(self):
        import random

        rng = random.Random(1234)
        good = token()
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ \t%"
        for i in range(300):
            if i % 3 == 0:
                chars = list(good)
                for _ in range(rng.randint(1, 5)):
                    chars[rng.randrange(len(chars))] = rng.choice(alphabet)
                tok = "".join(chars)
            else:
                tok = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300)))
            if tok == good:
                continue
            r = await RSA.request("GET", URL, headers={"Authorization": "Bearer " + tok})
            assert r.status in (401, 403), (tok, r.status, r.body)

    @settings(max_examples=1500, deadline=None)
    @given(st.one_of(
        st.text(alphabet=' \t\n\r{}[]",:0123456789.eE+-truefalsnNaIiy\\u', max_size=40),
        st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                     max_leaves=8).map(json.dumps)))
    @example('{"a": 1, "a": 2}')
    @example('{"a": 1} ')
    @example('{"a": 1}x')
    @example('NaN')
    @example('[1, Infinity]')
    @example('"\ud800"')
    @example(' {"a": 1}')
    def test_strict_json_fast_path_answers_as_the_decoder_does(self, text: str) -> None:
        """loads_json's direct scan gives what the strict decoder's decode()
        gives: the same value, or a ValueError for the same texts."""
        from twistgw_jwt._keys import _DECODER, loads_json

        def outcome(fn: Any) -> Any:
            try:
                return ("ok", fn(text))
            except (ValueError, RecursionError):
                return ("refused", None)

        fast, full = outcome(loads_json), outcome(_DECODER.decode)
        assert fast == full

    def test_base64url_is_strict_and_canonical(self):
        """b64url_decode accepts exactly the segments that are the canonical
        unpadded base64url encoding of their bytes: every 2- and 3-character
        segment over the alphabet, compared with decoding and encoding again."""
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

        def expected(seg: bytes) -> bytes | None:
            raw = base64.urlsafe_b64decode(seg + b"=" * (-len(seg) % 4))
            return raw if base64.urlsafe_b64encode(raw).rstrip(b"=") == seg else None

        def got(seg: bytes) -> bytes | None:
            try:
                return T.b64url_decode(seg)
            except ValueError:
                return None

        segments = [a + b for a in alphabet for b in alphabet]
        segments += ["QU" + c for c in alphabet] + ["QUJD" + c + d for c in "Qh" for d in alphabet]
        rejected = 0
        for text in segments:
            seg = text.encode()
            want = expected(seg)
            rejected += want is None
            assert got(seg) == want, seg
        assert rejected > 3000  # the non-canonical ones exist and are refused
        for bad in (b"QUJD\n", b"QUJD=", b"QU+/", b"QU JD", b"Q", b"QUJDR", b"QUJD\x00"):
            assert got(bad) is None, bad
