"""Property tests (hypothesis) for hostile credentials: arbitrary bytes as a
JWT, and arbitrary ``Authorization: Basic`` values, are refused with 401 and
never crash (500), never admit, and never reach the directory unless the
name and password are usable."""

from __future__ import annotations

import base64
import re
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.web.http_headers import Headers

import twistgw_ldap
import twistgw_ldap._flow as flow
from twistgw.sdk import RequestContext
from twistgw_extauth import AuthDeny
from twistgw.sdk.testing import ChainTester
from twistgw_ldap._client import DirectoryFault
from twistgw_ldap._dn import clean_username

from support.trial import TestCase

_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
_PUB = _KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                      serialization.PublicFormat.SubjectPublicKeyInfo).decode()
_JWT_CONFIG = """
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: p}
spec:
  virtualHost:
    domains: ["*"]
    routes:
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200, body: admitted}
      options:
        jwt:
          providers:
            p:
              issuer: https://issuer.test
              jwks:
                local:
                  key: |
%s""" % "".join(" " * 20 + line + "\n" for line in _PUB.splitlines())

_tester = ChainTester.from_yaml(_JWT_CONFIG, ["jwt"])
_HEADER_BYTES = st.binary(max_size=400).filter(lambda b: not set(b) & {0, 10, 13})


def _now(coro: Any) -> Any:
    d = Deferred.fromCoroutine(coro)
    out: list[Any] = []
    d.addBoth(out.append)
    assert out, "the jwt plugin with a local key answers synchronously"
    return out[0]


_LDAP_CONFIG = """
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: l}
spec:
  virtualHost:
    domains: ["*"]
    options: {extauth: {configRef: {name: l}}}
    routes:
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200, body: admitted}
---
apiVersion: enterprise.gateway.vendor.io/v1
kind: AuthConfig
metadata: {name: l, namespace: default}
spec:
  configs:
  - ldap: {address: "ldap://127.0.0.1:1", userDnTemplate: "uid=%s,ou=people,dc=example,dc=org",
           disableGroupChecking: true, cacheTtl: 0s, realm: t}
"""
_ldap_checker = ChainTester.from_yaml(_LDAP_CONFIG, [("extauth", twistgw_ldap.ExtAuthPlugin)]) \
    .snapshot.plugin_compiled["extauth"][0].entries[0].checker


class PropertiesTests(TestCase):
    @settings(max_examples=300, deadline=None)
    @given(_HEADER_BYTES)
    def test_arbitrary_bearer_bytes_are_401(self, token: bytes) -> None:
        r = _now(_tester.request("GET", "http://x/", headers=[("Authorization", b"Bearer " + token)]))
        assert r.status == 401, (token, r.status, r.body)

    @settings(max_examples=200, deadline=None)
    @given(st.text(max_size=300))
    def test_arbitrary_access_token_query_is_401(self, token: str) -> None:
        from urllib.parse import quote

        r = _now(_tester.request("GET", "http://x/?access_token=" + quote(token, safe="")))
        assert r.status == 401, (token, r.status, r.body)

    @settings(max_examples=300, deadline=None)
    @given(st.one_of(
        _HEADER_BYTES.map(lambda b: b"Basic " + b),
        st.tuples(st.binary(max_size=60), st.binary(max_size=60)).map(
            lambda up: b"Basic " + base64.b64encode(up[0] + b":" + up[1])),
        st.tuples(st.text(max_size=40), st.text(max_size=40)).map(
            lambda up: b"bAsIc " + base64.b64encode(f"{up[0]}:{up[1]}".encode())),
    ))
    def test_basic_header_refused_or_bound_only_with_usable_credentials(self, value: bytes) -> None:
        reached: list[tuple[str, bytes]] = []

        async def fake_directory(cfg: Any, pool: Any, user: str, password: bytes, reactor: Any,
                                 tracer: Any = None) -> Any:
            # stands in for the directory (tested for real against slapd in tests/ldap)
            reached.append((user, password))
            raise DirectoryFault("test directory")

        # cacheTtl 0: no decision cache, so every usable credential goes to the directory
        headers = Headers({b"authorization": [value]})
        ctx = RequestContext("GET", "/", headers=headers)
        original = flow.against_directory
        flow.against_directory = fake_directory
        try:
            outcome = _ldap_checker.check(ctx)
            out: list[Any] = []
            if isinstance(outcome, Deferred):
                outcome.addBoth(out.append)
            else:
                out.append(outcome)
        finally:
            flow.against_directory = original
        result = out[0]
        assert isinstance(result, AuthDeny), result
        if reached:
            (user, password), = reached
            assert user and password
            assert user == clean_username(user)
            assert not set(user) & set(',+"\\<>;=#\x00')
            assert result.status == 503
        else:
            assert result.status == 401 and result.body == b""


def _b64url_reference(segment: bytes) -> bytes:
    """The plain definition of strict base64url (RFC 7515 §2, RFC 4648 §5):
    only the URL-safe alphabet, no padding, and decoding then encoding again
    gives the same text (canonical trailing bits)."""
    if re.fullmatch(rb"[A-Za-z0-9_-]*", segment) is None or len(segment) % 4 == 1:
        raise ValueError("not base64url")
    raw = base64.urlsafe_b64decode(segment + b"=" * (-len(segment) % 4))
    if base64.urlsafe_b64encode(raw).rstrip(b"=") != segment:
        raise ValueError("non-canonical")
    return raw


_B64URL_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


class Base64urlTests(TestCase):
    """The JWT plugin's fast decoder accepts and decodes exactly what the
    plain definition does, for any bytes (mostly alphabet, some not)."""

    @settings(max_examples=2000, deadline=None)
    @given(st.one_of(
        st.lists(st.sampled_from(list(_B64URL_ALPHABET)), max_size=40).map(bytes),
        st.lists(st.sampled_from(list(_B64URL_ALPHABET + b"=+/ .\n\r\t\x00\xff!")), max_size=40).map(bytes),
        st.binary(max_size=40),
    ))
    def test_fast_decoder_matches_the_definition(self, segment: bytes) -> None:
        from twistgw_jwt._token import b64url_decode

        try:
            expected: object = _b64url_reference(segment)
        except ValueError:
            expected = ValueError
        try:
            got: object = b64url_decode(segment)
        except ValueError:
            got = ValueError
        assert got == expected, (segment, got, expected)
