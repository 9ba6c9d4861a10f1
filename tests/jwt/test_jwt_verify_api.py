"""``twistgw_jwt.verify``: the JWT plugin's verification as another plugin
uses it (docs/jwt.md, "Using the JWT verification from another plugin").
The same code as the plugin's own, with the same strictness."""

from __future__ import annotations

import json
from typing import Any

from jwt_helpers import ISSUER, b64, jwks, now, public_pem, raw_token, resign, token
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from twistgw_jwt import _authn, _keys, _remote, _token, verify

from support.trial import TestCase


class Documents(verify.RemoteKeySet):
    """A key set fetched from a list of canned answers (bytes, or a reason to fail)."""

    def __init__(self, answers: list[bytes | str], clock: Clock) -> None:
        spec = verify.RemoteSpec(addresses=(("memory", 0),), path=b"", host_header=None, upstream="memory",
                                 url="memory:keys", cache_duration=300.0, timeout=5.0, refetch_interval=10.0)
        super().__init__(spec, lambda: clock, clock.seconds)
        self.answers = answers
        self.asked = 0

    async def fetch_document(self, reactor: Any, host: str, port: int) -> bytes:
        self.asked += 1
        answer = self.answers.pop(0)
        if isinstance(answer, str):
            raise verify.FetchError(answer)
        return answer


def _run(coroutine: Any) -> Any:
    d = Deferred.fromCoroutine(coroutine)
    results: list[Any] = []
    d.addBoth(results.append)
    assert len(results) == 1, "the in-memory fetch finished at once"
    if hasattr(results[0], "raiseException"):
        results[0].raiseException()
    return results[0]


class PublicApiTests(TestCase):
    def test_the_names_are_the_plugins_own_code(self) -> None:
        assert verify.parse_token is _token.parse_token
        assert verify.verify_signature is _token.verify_signature
        assert verify.check_claims is _token.check_claims
        assert verify.parse_local_key is _keys.parse_local_key
        assert verify.RemoteKeySet is _remote.RemoteKeySet
        assert verify.claim_text is _authn.claim_text
        assert all(hasattr(verify, name) for name in verify.__all__)

    def test_a_token_verifies_with_its_key_and_not_with_another(self) -> None:
        keys = verify.parse_local_key(public_pem("rsa", 0)).keys
        others = verify.parse_local_key(public_pem("rsa", 1)).keys
        parsed = verify.parse_token(token("rsa", 0))
        assert isinstance(parsed, verify.ParsedToken)
        assert parsed.iss == ISSUER
        assert verify.verifies(parsed, keys)
        assert not verify.verifies(parsed, others)
        assert not verify.verifies(parsed, ())

    def test_the_key_decides_the_algorithm(self) -> None:
        keys = verify.parse_local_key(public_pem("rsa", 0)).keys
        assert all(k.algorithms <= verify.SUPPORTED_ALGS for k in keys)
        for alg in ("none", "HS256"):
            failure = verify.parse_token(raw_token({"alg": alg}, {"iss": ISSUER}, b""))
            assert isinstance(failure, verify.Failure)
            assert (failure.code, failure.status) == ("alg_not_supported", 401)
        ps = verify.parse_token(resign(token("rsa", 0), header={"alg": "PS256"}, alg="PS256"))
        assert isinstance(ps, verify.ParsedToken) and verify.verifies(ps, keys)  # an RSA key allows PS256
        ec = verify.parse_token(resign(token("rsa", 0), header={"alg": "ES256"}, alg="ES256", kind="ec256"))
        assert isinstance(ec, verify.ParsedToken)
        assert verify.candidate_keys(keys, ec) == [] and not verify.verifies(ec, keys)

    def test_parsing_is_strict(self) -> None:
        good = token("rsa", 0)
        h, p, s = good.split(".")
        twice = b64('{"iss": 1, "iss": 2}')
        for bad, code in [
            (f"{h}.{p}", "bad_format"),
            (f"{h}=.{p}.{s}", "header_bad_base64"),
            (f"{b64({'alg': 'RS256', 'crit': ['exp']})}.{p}.{s}", "verification_fails"),
            (f"{h}.{twice}.{s}", "payload_bad_json"),
            ("x" * (16 * 1024 + 1), "bad_format"),
        ]:
            failure = verify.parse_token(bad)
            assert isinstance(failure, verify.Failure), bad[:40]
            assert failure.code == code

    def test_claims_with_skew_and_audience(self) -> None:
        t = now()
        assert verify.check_claims({"exp": t - 30}, t, 60, None) is None
        expired = verify.check_claims({"exp": t - 61}, t, 60, None)
        assert expired is not None and expired.code == "expired"
        wrong = verify.check_claims({"aud": ["b"]}, t, 0, frozenset({"a"}))
        assert wrong is not None and (wrong.code, wrong.status) == ("audience_not_allowed", 403)
        assert verify.check_claims({"aud": ["b", "a"]}, t, 0, frozenset({"a"})) is None

    def test_claim_text(self) -> None:
        assert verify.claim_text("alice") == b"alice"
        assert verify.claim_text(True) == b"true"
        assert verify.claim_text(3) == b"3"
        assert verify.claim_text(["a", 1, None]) == b"a,1"
        assert verify.claim_text({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()
        assert verify.claim_text(None) is None
        assert verify.claim_text("x\r\nSet-Cookie: y") is None

    def test_a_bad_key_says_why(self) -> None:
        with self.assertRaises(verify.KeyProblem) as caught:
            verify.parse_local_key(public_pem("rsa1024", 0), "inlineString")
        assert "2048" in str(caught.exception)


class RemoteKeySetTests(TestCase):
    def test_fetched_once_then_cached_and_refetched_at_most_once_per_interval(self) -> None:
        clock = Clock()
        clock.advance(1000)
        first = json.dumps(jwks(("rsa", 0, "k0"))).encode()
        both = json.dumps(jwks(("rsa", 0, "k0"), ("rsa", 1, "k1"))).encode()
        keys = Documents([first, both], clock)
        got = _run(keys.get_keys())
        assert [k.kid for k in got] == ["k0"] and keys.asked == 1
        assert _run(keys.get_keys()) == got and keys.asked == 1
        rotated = verify.parse_token(token("rsa", 1, kid="k1"))
        assert isinstance(rotated, verify.ParsedToken) and not verify.verifies(rotated, got)
        clock.advance(10)
        generation = keys.generation
        fresh = _run(keys.refetch_unknown())
        assert keys.asked == 2 and keys.generation == generation + 1
        assert verify.verifies(rotated, fresh)
        assert _run(keys.refetch_unknown()) == fresh and keys.asked == 2  # within refetch_interval

    def test_a_failed_fetch_keeps_the_last_keys_and_backs_off(self) -> None:
        clock = Clock()
        clock.advance(1000)
        keys = Documents([json.dumps(jwks(("rsa", 0, "k0"))).encode(), "HTTP status 500"], clock)
        good = _run(keys.get_keys())
        clock.advance(301)  # past cache_duration: a background refresh, which fails
        assert keys.keys_now() == good
        assert keys.asked == 2 and keys.last_error == "memory:0: HTTP status 500"
        assert keys.keys_now() == good and not keys.may_refetch_unknown()  # backing off

    def test_no_document_at_all_is_none_with_the_reason(self) -> None:
        clock = Clock()
        keys = Documents([b"{not json"], clock)
        assert _run(keys.get_keys()) is None
        assert keys.last_error is not None and keys.last_error.startswith("memory:0:")
