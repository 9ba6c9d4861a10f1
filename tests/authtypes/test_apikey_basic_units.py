"""``apiKeyAuth`` and ``basicAuth`` in memory: compiling Gloo's shapes, the
verdicts, and the attacks of issue #26 (duplicated, empty, case-variant and
padded key headers, a key in a Secret of another type, Basic passwords with
``:``), with hashes made by ``htpasswd`` and ``openssl passwd -apr1``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twistgw import AuthAllow, AuthDeny, OptionsError
from twistgw.api.types import SecretInfo
from twistgw_authtypes.apikey import ApiKeyAuth, key_digest
from twistgw_authtypes.basic import BasicAuth, VerifiedMemo

from authtypes_helpers import Resources, apikey_secret, basic, htpasswd, openssl_apr1, request, scope
from support.trial import TestCase

INFRA = apikey_secret("infra-apikey", "N2YwMDIxZTEtNGUzNS1jNzgz", user="alice", user_email="alice@example.com")
OPS = apikey_secret("ops-apikey", "b3BzLWtleS0xMjM0NTY3ODk")


def _apikey(raw: dict, secrets: list[SecretInfo] = (INFRA, OPS)) -> object:
    return ApiKeyAuth().compile(raw, scope(Resources(list(secrets))))


def _problems(exc: OptionsError) -> list[str]:
    return [f"{'.'.join(map(str, p.path))}: {p.reason}" for p in exc.problems]


class ApiKeyCompileTests(TestCase):
    def test_refs_and_label_selector(self) -> None:
        labelled = SecretInfo("gloo-system", "team-key", "extauth.solo.io/apikey", {"api-key": b"team-key-1"})
        checker = _apikey({"apiKeySecretRefs": [{"name": "infra-apikey"}]}, [INFRA, labelled])
        self.assertEqual(len(checker.table), 1)
        self.assertEqual(checker.header, b"api-key")
        self.assertEqual(checker.credential_headers, (b"api-key",))

    def test_k8s_secret_apikey_storage_holds_the_sources(self) -> None:
        """Gloo's k8sSecretApikeyStorage: labelSelector and apiKeySecretRefs
        written under it select the Secrets as they do at the top."""
        labelled = SecretInfo("gloo-system", "team-key", "extauth.solo.io/apikey", {"api-key": b"team-key-1"},
                              {"team": "infra"})
        by_ref = _apikey({"k8sSecretApikeyStorage": {"apiKeySecretRefs": [{"name": "ops-apikey"}]}},
                         [INFRA, OPS, labelled])
        self.assertIsInstance(by_ref.check(request(headers=[("api-key", "b3BzLWtleS0xMjM0NTY3ODk")])), AuthAllow)
        self.assertIsInstance(by_ref.check(request(headers=[("api-key", "N2YwMDIxZTEtNGUzNS1jNzgz")])), AuthDeny)
        by_label = _apikey({"k8sSecretApikeyStorage": {"labelSelector": {"team": "infra"}}}, [INFRA, OPS, labelled])
        self.assertEqual([o.secret for o in by_label.table.owners.values()], ["gloo-system/team-key"])
        with pytest.raises(OptionsError) as exc:
            _apikey({"k8sSecretApikeyStorage": {"labelSelector": {"team": "infra"}},
                     "apiKeySecretRefs": [{"name": "ops-apikey"}]}, [INFRA, OPS, labelled])
        self.assertIn("k8sSecretApikeyStorage: write labelSelector and apiKeySecretRefs either here", _problems(exc.value)[0])

    def test_secret_ref_namespace_defaults_to_the_auth_configs(self) -> None:
        elsewhere = apikey_secret("team-key", "dGVhbS1rZXktMQ", namespace="team-a")
        checker = _apikey({"apiKeySecretRefs": [{"name": "team-key", "namespace": "team-a"}]}, [INFRA, elsewhere])
        self.assertEqual([o.secret for o in checker.table.owners.values()], ["team-a/team-key"])
        with pytest.raises(OptionsError) as exc:  # without namespace: the AuthConfig's (gloo-system)
            _apikey({"apiKeySecretRefs": [{"name": "team-key"}]}, [INFRA, elsewhere])
        self.assertIn("dangling reference", str(exc.value))

    def test_skip_metadata_validation_is_refused_unless_false(self) -> None:
        refs = {"apiKeySecretRefs": [{"name": "ops-apikey"}]}
        with pytest.raises(OptionsError) as exc:
            _apikey({**refs, "skipMetadataValidation": True})
        self.assertEqual(_problems(exc.value), ["skipMetadataValidation: is not supported by twistgw: metadata is"
                                                " always checked when the configuration loads"])
        self.assertEqual(len(_apikey({**refs, "skipMetadataValidation": False}).table), 1)

    def test_no_source_of_keys_is_refused(self) -> None:
        with pytest.raises(OptionsError) as exc:
            _apikey({"headerName": "x-key"})
        self.assertIn("set labelSelector (non-empty) or apiKeySecretRefs", str(exc.value))

    def test_a_secret_of_another_type_is_refused(self) -> None:
        opaque = SecretInfo("gloo-system", "plain", "Opaque", {"api-key": b"k"})
        with pytest.raises(OptionsError) as exc:
            _apikey({"apiKeySecretRefs": [{"name": "plain"}]}, [opaque])
        self.assertEqual(_problems(exc.value),
                         ["apiKeySecretRefs.0: Secret gloo-system/plain has type 'Opaque'; API key Secrets have"
                          " type 'extauth.solo.io/apikey'"])

    def test_label_selection_takes_only_apikey_secrets(self) -> None:
        good = SecretInfo("a", "k1", "extauth.solo.io/apikey", {"api-key": b"one"}, {"team": "infra"})
        other_team = SecretInfo("b", "k3", "extauth.solo.io/apikey", {"api-key": b"three"}, {"team": "ops"})
        opaque = SecretInfo("a", "k2", "Opaque", {"api-key": b"two"}, {"team": "infra"})
        checker = ApiKeyAuth().compile({"labelSelector": {"team": "infra"}},
                                       scope(Resources([good, other_team, opaque])))
        self.assertEqual([o.secret for o in checker.table.owners.values()], ["a/k1"])

    def test_two_secrets_with_one_key_are_refused_without_the_key(self) -> None:
        twin = apikey_secret("twin", "N2YwMDIxZTEtNGUzNS1jNzgz")
        with pytest.raises(OptionsError) as exc:
            _apikey({"apiKeySecretRefs": [{"name": "infra-apikey"}, {"name": "twin"}]}, [INFRA, twin])
        self.assertIn("hold the same API key", str(exc.value))
        self.assertNotIn("N2YwMDIx", str(exc.value))

    def test_unsupported_fields_are_refused_by_name(self) -> None:
        with pytest.raises(OptionsError) as exc:
            _apikey({"apiKeySecretRefs": [{"name": "infra-apikey"}], "aerospikeApikeyStorage": {},
                     "headersFromMetadata": {}, "hmac": {}, "colour": 1})
        text = "\n".join(_problems(exc.value))
        for field in ("aerospikeApikeyStorage", "headersFromMetadata", "hmac", "colour"):
            self.assertIn(field, text)

    def test_metadata_header_names_gateway_headers_refused(self) -> None:
        with pytest.raises(OptionsError) as exc:
            _apikey({"apiKeySecretRefs": [{"name": "infra-apikey"}],
                     "headersFromMetadataEntry": {"Host": {"name": "user-email"}}})
        self.assertIn("HTTP or the gateway owns", str(exc.value))

    def test_dangling_reference(self) -> None:
        with pytest.raises(OptionsError) as exc:
            _apikey({"apiKeySecretRefs": [{"name": "gone"}]})
        self.assertIn("dangling reference: no Secret gloo-system/gone", str(exc.value))

    def test_the_table_holds_no_key(self) -> None:
        checker = _apikey({"apiKeySecretRefs": [{"name": "infra-apikey"}]})
        self.assertNotIn(b"N2YwMDIxZTEtNGUzNS1jNzgz", list(checker.table.owners))
        self.assertNotIn("N2YwMDIx", repr(checker))
        self.assertIn(key_digest(b"N2YwMDIxZTEtNGUzNS1jNzgz"), checker.table.owners)


class ApiKeyCheckTests(TestCase):
    def setUp(self) -> None:
        self.checker = _apikey({"apiKeySecretRefs": [{"name": "infra-apikey"}, {"name": "ops-apikey"}],
                                "headersFromMetadataEntry": {"x-user-email": {"name": "user-email"}}})

    def _check(self, *headers: tuple[str, str]) -> AuthAllow | AuthDeny:
        return self.checker.check(request(headers=headers))

    def test_the_owner_is_the_user_entry_or_the_secret_name(self) -> None:
        alice = self._check(("api-key", "N2YwMDIxZTEtNGUzNS1jNzgz"))
        self.assertEqual((alice.principal, alice.headers),
                         ("alice", ((b"x-user-email", b"alice@example.com"),)))
        ops = self._check(("api-key", "b3BzLWtleS0xMjM0NTY3ODk"))
        self.assertEqual((ops.principal, ops.headers), ("ops-apikey", ()))
        self.assertEqual(self.checker.owned_request_headers, (b"x-user-email",))

    @pytest.mark.parametrize("headers", [
        pytest.param((), id="missing"),
        pytest.param((("api-key", ""),), id="empty"),
        pytest.param((("api-key", "wrong"),), id="wrong"),
        pytest.param((("api-key", " N2YwMDIxZTEtNGUzNS1jNzgz"),), id="padded"),
        pytest.param((("api-key", "n2ywmdixztetnguzns1jnzgz"),), id="case-folded-key"),
        pytest.param((("api-key", "N2YwMDIxZTEtNGUzNS1jNzgz"), ("api-key", "N2YwMDIxZTEtNGUzNS1jNzgz")),
                     id="duplicated"),
        pytest.param((("API-Key", "N2YwMDIxZTEtNGUzNS1jNzgz"), ("api-key", "wrong")), id="case-variant-dup"),
        pytest.param((("api-key", "N2YwMDIxZTEtNGUzNS1jNzgz,b3BzLWtleS0xMjM0NTY3ODk"),), id="joined"),
    ])
    def test_refused_with_401(self, headers: tuple) -> None:
        verdict = self._check(*headers)
        self.assertIsInstance(verdict, AuthDeny)
        self.assertEqual((verdict.status, verdict.body, verdict.error), (401, b"", False))

    def test_header_name_in_any_case(self) -> None:
        self.assertEqual(self._check(("API-KEY", "N2YwMDIxZTEtNGUzNS1jNzgz")).principal, "alice")

    def test_required_metadata_missing_refuses_that_key(self) -> None:
        checker = _apikey({"apiKeySecretRefs": [{"name": "infra-apikey"}, {"name": "ops-apikey"}],
                           "headersFromMetadataEntry": {"x-user-email": {"name": "user-email", "required": True}}})
        self.assertIsInstance(checker.check(request(headers=[("api-key", "N2YwMDIxZTEtNGUzNS1jNzgz")])), AuthAllow)
        denied = checker.check(request(headers=[("api-key", "b3BzLWtleS0xMjM0NTY3ODk")]))
        self.assertEqual(denied.status, 401)
        self.assertIn("lacks required metadata user-email", denied.reason)

    def test_no_reason_holds_the_key(self) -> None:
        for value in ("N2YwMDIxZTEtNGUzNS1jNzgz", "secret-guess-123"):
            self.assertNotIn(value, self._check(("api-key", value)).reason)

    def test_keys_are_compared_as_digests_in_constant_time(self) -> None:
        import hmac

        from twistgw_authtypes import apikey

        seen: list[tuple[bytes, bytes]] = []
        real = hmac.compare_digest

        def spy(a: bytes, b: bytes) -> bool:
            seen.append((a, b))
            return real(a, b)

        self.patch(apikey.hmac, "compare_digest", spy)
        self.assertEqual(self._check(("api-key", "N2YwMDIxZTEtNGUzNS1jNzgz")).principal, "alice")
        self.assertEqual(seen, [(key_digest(b"N2YwMDIxZTEtNGUzNS1jNzgz"),) * 2])
        self.assertNotEqual(key_digest(b"N2YwMDIxZTEtNGUzNS1jNzgz"), b"N2YwMDIxZTEtNGUzNS1jNzgz")

    def test_the_digest_is_keyed_blake2b_and_its_template_is_never_fed(self) -> None:
        import hashlib

        from twistgw_authtypes import apikey

        key = b"N2YwMDIxZTEtNGUzNS1jNzgz"
        expected = hashlib.blake2b(key, key=apikey._SALT, digest_size=32).digest()
        self.assertEqual(key_digest(key), expected)
        for guess in (b"x", b"N2YwMDIx", key + b"x", b"\xff" * 300):  # requests copy the keyed template...
            self.assertIsInstance(self._check(("api-key", guess.decode("latin-1"))), AuthDeny)
        self.assertEqual(key_digest(key), expected)  # ...and never change it
        self.assertEqual(apikey._KEYED.digest(), hashlib.blake2b(b"", key=apikey._SALT, digest_size=32).digest())
        self.assertEqual(self._check(("api-key", key.decode())).principal, "alice")

    def test_every_answer_is_made_when_the_configuration_loads(self) -> None:
        checker = _apikey({"apiKeySecretRefs": [{"name": "infra-apikey"}, {"name": "ops-apikey"}],
                           "headersFromMetadataEntry": {"x-user-email": {"name": "user-email", "required": True}}})

        def check(*headers: tuple[str, str]) -> AuthAllow | AuthDeny:
            return checker.check(request(headers=headers))

        alice = ("api-key", "N2YwMDIxZTEtNGUzNS1jNzgz")
        self.assertIs(check(alice), check(alice))
        self.assertEqual(check(alice).state, {"x-user-email": "alice@example.com"})
        with pytest.raises(TypeError):  # shared by every request with this key: read-only
            check(alice).state["x-user-email"] = "changed"  # type: ignore[index]
        lacking = check(("api-key", "b3BzLWtleS0xMjM0NTY3ODk"))
        self.assertIs(lacking, check(("API-Key", "b3BzLWtleS0xMjM0NTY3ODk")))
        self.assertEqual((lacking.status, lacking.reason),
                         (401, "the key of Secret gloo-system/ops-apikey lacks required metadata user-email"))
        self.assertIs(check(("api-key", "wrong")), check(("api-key", "")))
        self.assertEqual(check(("api-key", "wrong")).reason, "the API key matches no key")
        self.assertIs(check(), check())
        self.assertEqual(check().reason, "no api-key header")
        twice = check(alice, ("Api-Key", alice[1]))
        self.assertEqual((twice.status, twice.reason), (401, "2 api-key headers"))

    def test_custom_header_name(self) -> None:
        checker = _apikey({"apiKeySecretRefs": [{"name": "ops-apikey"}], "headerName": "X-Api-Key"})
        self.assertEqual(checker.credential_headers, (b"x-api-key",))
        self.assertIsInstance(checker.check(request(headers=[("x-api-key", "b3BzLWtleS0xMjM0NTY3ODk")])), AuthAllow)
        self.assertIsInstance(checker.check(request(headers=[("api-key", "b3BzLWtleS0xMjM0NTY3ODk")])), AuthDeny)


def _basic(raw: dict) -> object:
    return BasicAuth().compile(raw, scope(type_name="basicAuth"))


class BasicTests(TestCase):
    def test_gloo_guide_apr_users(self) -> None:
        checker = _basic({"apr": {"users": {"user": {"salt": "TYiryv0/", "hashedPassword": "8BvzLUO9IfGPGGsPnAgSu1"}}}})
        ok = checker.check(request(headers=[basic("user", "password")]))
        self.assertEqual((type(ok), ok.principal), (AuthAllow, "user"))
        bad = checker.check(request(headers=[basic("user", "passwordx")]))
        # Gloo's answer without a realm, as its basic auth guide shows it
        self.assertEqual((bad.status, bad.headers), (401, ((b"www-authenticate", b'Basic realm=""'),)))

    def test_gloo_guide_sha1_user_list(self) -> None:
        checker = _basic({"encryption": {"sha1": {}}, "realm": "gloo", "userList": {"users": {"user": {
            "salt": "TYiryv0/", "hashedPassword": "010EB058A59F4AC5BA05639B0263CF91B4345FD6"}}}})
        self.assertIsInstance(checker.check(request(headers=[basic("user", "password")])), AuthAllow)
        denied = checker.check(request(headers=[basic("user", "Password")]))
        self.assertEqual(denied.headers, ((b"www-authenticate", b'Basic realm="gloo"'),))

    def test_htpasswd_and_openssl_hashes_with_colons(self) -> None:
        s1, h1 = htpasswd("ann", "pa:ss:word")
        s2, h2 = openssl_apr1("s3cret")
        checker = _basic({"encryption": {"apr": {}}, "userList": {"users": {
            "ann": {"salt": s1, "hashedPassword": h1}, "bob": {"salt": s2, "hashedPassword": h2}}}})
        self.assertEqual(checker.check(request(headers=[basic("ann", "pa:ss:word")])).principal, "ann")
        self.assertIsInstance(checker.check(request(headers=[basic("ann", "pa")])), AuthDeny)
        self.assertEqual(checker.check(request(headers=[basic("bob", "s3cret")])).principal, "bob")
        self.assertIsInstance(checker.check(request(headers=[basic("bob", "s3cret ")])), AuthDeny)

    @pytest.mark.parametrize("headers", [
        pytest.param((), id="none"),
        pytest.param((("Authorization", "Bearer x"),), id="not-basic"),
        pytest.param((("Authorization", "Basic !!!"),), id="bad-base64"),
        pytest.param((("Authorization", "Basic dXNlcg=="),), id="no-colon"),
        pytest.param((basic("user", "password"), basic("user", "password")), id="two-headers"),
        pytest.param((basic("nobody", "password"),), id="unknown-user"),
        pytest.param((basic("user", ""),), id="empty-password"),
    ])
    def test_refused(self, headers: tuple) -> None:
        checker = _basic({"apr": {"users": {"user": {"salt": "TYiryv0/", "hashedPassword": "8BvzLUO9IfGPGGsPnAgSu1"}}}})
        self.assertEqual(checker.check(request(headers=headers)).status, 401)

    def test_only_the_canonical_base64_is_read(self) -> None:
        """Issue 32 item 21: ``dXNlcjpwYXNzd29yZA==`` is user:password; the
        same with the last character's unused bits set (``...ZB==``..``ZP==``)
        decodes to the same bytes with Python's decoder, and is refused (401)."""
        checker = _basic({"apr": {"users": {"user": {"salt": "TYiryv0/", "hashedPassword": "8BvzLUO9IfGPGGsPnAgSu1"}}}})
        self.assertIsInstance(checker.check(request(headers=[("Authorization", "Basic dXNlcjpwYXNzd29yZA==")])),
                              AuthAllow)
        for twin in "BCDEFGHIJKLMNOP":
            denied = checker.check(request(headers=[("Authorization", f"Basic dXNlcjpwYXNzd29yZ{twin}==")]))
            self.assertEqual(denied.status, 401, twin)
        for bad in ("dXNlcjpwYXNzd29yZA", "dXNlcjpwYXNzd29yZA=", "dXNlcjpwYXNzd29yZA===", "dXNlcjpw-XNzd29yZA=="):
            self.assertEqual(checker.check(request(headers=[("Authorization", f"Basic {bad}")])).status, 401, bad)

    def test_memo_holds_no_password_and_is_bounded(self) -> None:
        checker = _basic({"apr": {"users": {"user": {"salt": "TYiryv0/", "hashedPassword": "8BvzLUO9IfGPGGsPnAgSu1"}}}})
        checker.check(request(headers=[basic("user", "password")]))
        self.assertEqual(len(checker.memo), 1)
        held = repr(list(checker.memo._entries.items())).encode()
        self.assertNotIn(b"password", held)
        self.assertNotIn(basic("user", "password")[1], held)
        again = checker.check(request(headers=[basic("user", "password")]))
        self.assertIs(again, checker.check(request(headers=[basic("user", "password")])))
        self.assertIsInstance(checker.check(request(headers=[basic("user", "passwordx")])), AuthDeny)
        self.assertEqual(len(checker.memo), 1)  # failures are not remembered
        memo = VerifiedMemo(ttl=10, size=2, clock=lambda: 0.0)
        for i in range(3):
            memo.add(memo.key(b"v%d" % i), AuthAllow())
        self.assertEqual((len(memo), memo.get(memo.key(b"v0")), memo.get(memo.key(b"v2"))), (2, None, AuthAllow()))

    def test_memo_expires(self) -> None:
        now = [0.0]
        memo = VerifiedMemo(ttl=10, clock=lambda: now[0])
        memo.add(memo.key(b"v"), AuthAllow())
        now[0] = 10.0
        self.assertIsNone(memo.get(memo.key(b"v")))

    def test_credentials_are_consumed_unless_kept(self) -> None:
        users = {"user": {"salt": "TYiryv0/", "hashedPassword": "8BvzLUO9IfGPGGsPnAgSu1"}}
        self.assertEqual(_basic({"apr": {"users": users}}).credential_headers, (b"authorization",))
        self.assertEqual(_basic({"apr": {"users": users}, "keepCredentials": True}).credential_headers, ())

    @pytest.mark.parametrize("raw, expected", [
        ({"apr": {"users": {"u": {"salt": "s", "hashedPassword": "h"}}}}, "is not an apr1 hash"),
        ({"apr": {"users": {}}, "encryption": {"apr": {}}}, "not both"),
        ({"encryption": {"apr": {}}}, "set apr, or encryption with userList"),
        ({"encryption": {"md5": {}}, "userList": {"users": {}}}, "unknown field 'md5'"),
        ({"encryption": {"sha1": {}}, "userList": {"users": {"u": {"salt": "s", "hashedPassword": "zz"}}}},
         "40 hexadecimal digits"),
        ({"apr": {"users": {"a:b": {"salt": "TYiryv0/", "hashedPassword": "8BvzLUO9IfGPGGsPnAgSu1"}}}}, "without ':'"),
        ({"apr": {"users": {}}}, "lists no users"),
    ])
    def test_refused_configs(self, raw: dict, expected: str) -> None:
        with pytest.raises(OptionsError) as exc:
            _basic(raw)
        self.assertIn(expected, str(exc.value))


_HEADER_VALUE = st.binary(max_size=200).map(lambda b: bytes(c for c in b if c not in b"\r\n\x00"))


class PropertyTests(TestCase):
    """Any header value: a verdict, never an exception; only the exact key or
    the exact credentials admit."""

    @settings(max_examples=300, deadline=None)
    @given(st.lists(_HEADER_VALUE, max_size=3))
    def test_any_api_key_headers(self, values: list[bytes]) -> None:
        checker = _apikey({"apiKeySecretRefs": [{"name": "infra-apikey"}]})
        verdict = checker.check(request(headers=[("api-key", v) for v in values]))
        admitted = values == [b"N2YwMDIxZTEtNGUzNS1jNzgz"]
        self.assertIsInstance(verdict, AuthAllow if admitted else AuthDeny)

    @settings(max_examples=150, deadline=None)
    @given(st.one_of(_HEADER_VALUE, _HEADER_VALUE.map(lambda b: b"Basic " + __import__("base64").b64encode(b))))
    def test_any_authorization_header(self, value: bytes) -> None:
        checker = _basic({"encryption": {"sha1": {}}, "userList": {"users": {"user": {
            "salt": "TYiryv0/", "hashedPassword": "010eb058a59f4ac5ba05639b0263cf91b4345fd6"}}}})
        verdict = checker.check(request(headers=[("Authorization", value)]))
        if isinstance(verdict, AuthAllow):
            self.assertEqual(verdict.principal, "user")
            self.assertTrue(value.split(b" ", 1)[0].lower() == b"basic")
        else:
            self.assertEqual(verdict.status, 401)
