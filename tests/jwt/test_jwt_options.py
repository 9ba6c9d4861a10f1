"""Compile-time validation of ``options.jwt`` and the accepted key formats."""

from __future__ import annotations

import datetime
import json

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID
from jwt.algorithms import RSAAlgorithm
from jwt_helpers import (ClockedJwtPlugin,
    ISSUER, URL, bearer, config, jwks, local_provider, make_tester, private_key, private_pem,
    public_pem, token,
)

import twistgw_jwt
from twistgw import ConfigError
from twistgw.testing import ChainTester

from support.trial import TestCase

VH = "spec.virtualHost.options.jwt"


def compile_error(jwt_options, **kw) -> tuple[str, str]:
    with pytest.raises(ConfigError) as info:
        make_tester(jwt_options, **kw)
    issues = info.value.issues
    assert len(issues) >= 1
    return issues[0].field, issues[0].reason


def remote(**fields):
    r = {"upstreamRef": {"name": "jwks", "namespace": "default"}, "url": "http://auth/keys"}
    r.update(fields)
    return {"issuer": ISSUER, "jwks": {"remote": {k: v for k, v in r.items() if v is not None}}}


# --------------------------------------------------------------------------
# Accepted forms
# --------------------------------------------------------------------------


def _certificate_pem() -> str:
    key = private_key("rsa")
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "issuer.example.com")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


class JwtOptionsTests(TestCase):
    # --------------------------------------------------------------------------
    # Errors name the field and say what to do
    # --------------------------------------------------------------------------


    @pytest.mark.parametrize("options,field,reason", [
        ({}, "providers", "required"),
        ({"providers": None}, "providers", "required"),
        ({"providers": []}, "providers", "must be a mapping, got a list"),
        ({"providers": {}}, "providers", "at least one provider"),
        ({"provider": {}}, "provider", "unknown field 'provider'; expected one of: providers, validationPolicy"),
        ({"providers": {"m": local_provider()}, "validationPolicy": "ALLOW_ALL"}, "validationPolicy",
         "must be one of REQUIRE_VALID, ALLOW_MISSING, ALLOW_MISSING_OR_FAILED"),
        ({"providers": {"m": "x"}}, "providers.m", "provider 'm' must be a mapping"),
        ({"providers": {"m": {"jwks": {"local": {"key": "x"}}}}}, "providers.m.issuer", "required"),
        ({"providers": {"m": local_provider(issuer="")}}, "providers.m.issuer", "must not be empty"),
        ({"providers": {"m": local_provider(issuer=["a"])}}, "providers.m.issuer", "must be a string, got a list"),
        ({"providers": {"m": local_provider(issuers="x")}}, "providers.m.issuers", "unknown field"),
        ({"providers": {"m": local_provider(audiences=[])}}, "providers.m.audiences", "non-empty list"),
        ({"providers": {"m": local_provider(audiences="api")}}, "providers.m.audiences", "non-empty list"),
        ({"providers": {"m": local_provider(audiences=["a", 1])}}, "providers.m.audiences[1]",
         "must be a string"),
        ({"providers": {"m": {"issuer": ISSUER}}}, "providers.m.jwks", "jwks (required) must be a mapping"),
        ({"providers": {"m": {"issuer": ISSUER, "jwks": {}}}}, "providers.m.jwks", "exactly one of"),
        ({"providers": {"m": {"issuer": ISSUER, "jwks": {"local": {"key": "k"}, "remote": {}}}}},
         "providers.m.jwks", "exactly one of"),
        ({"providers": {"m": {"issuer": ISSUER, "jwks": {"local": {}}}}}, "providers.m.jwks.local",
         "set exactly one of key (the PEM, JWK or JWKS text) or keyFile"),
        ({"providers": {"m": {"issuer": ISSUER, "jwks": {"local": {"key": 5}}}}}, "providers.m.jwks.local.key",
         "must be a string"),
        ({"providers": {"m": local_provider(key="hello")}}, "providers.m.jwks.local.key",
         "expected a PEM public key, a JWK or a JWKS"),
        ({"providers": {"m": local_provider(key="-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")}},
         "providers.m.jwks.local.key", "cannot read the PEM public key"),
        ({"providers": {"m": local_provider(key=private_pem().decode())}}, "providers.m.jwks.local.key",
         "this is a private key; configure the public key only"),
        ({"providers": {"m": local_provider(key=public_pem("rsa1024"))}}, "providers.m.jwks.local.key",
         "RSA key of 1024 bits refused; at least 2048 bits are required"),
        ({"providers": {"m": local_provider(key=json.dumps(
            {**RSAAlgorithm.to_jwk(private_key("rsa1024").public_key(), as_dict=True), "kid": "w"}))}},
         "providers.m.jwks.local.key", "RSA key of 1024 bits refused"),
        ({"providers": {"m": local_provider(key='{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}')}},
         "providers.m.jwks.local.key", "no usable public key: kty oct (HMAC) keys are never accepted"),
        ({"providers": {"m": local_provider(key=json.dumps(
            {**RSAAlgorithm.to_jwk(private_key("rsa"), as_dict=True), "key_ops": ["verify"]}))}},
         "providers.m.jwks.local.key", "this JWK holds a private key; publish the public key only"),
        ({"providers": {"m": local_provider(key='{"kty": "oct", "k": "c2VjcmV0"}')}},
         "providers.m.jwks.local.key", "kty oct keys are never accepted"),
        ({"providers": {"m": local_provider(key=json.dumps({**jwks(("rsa", 0, "a"))["keys"][0], "alg": "ES256"}))}},
         "providers.m.jwks.local.key", "alg 'ES256' does not fit an RSA key"),
        ({"providers": {"m": local_provider(key=json.dumps({**jwks(("rsa", 0, "a"))["keys"][0], "alg": "HS256"}))}},
         "providers.m.jwks.local.key", "alg 'HS256' is not supported"),
        ({"providers": {"m": local_provider(key='{"kty": "RSA", "n": "AQAB"}')}},
         "providers.m.jwks.local.key", "[e] is missing"),
        ({"providers": {"m": local_provider(key='{"keys": {}}')}}, "providers.m.jwks.local.key",
         "a key set must be a JSON object with a [keys] array"),
        ({"providers": {"m": local_provider(key='{"keys": [1]}')}}, "providers.m.jwks.local.key",
         "a JWK must be a JSON object"),
        ({"providers": {"m": local_provider(key='{"kty": "EC", "crv": "secp256k1", "x": "a", "y": "b"}')}},
         "providers.m.jwks.local.key", "EC [crv] 'secp256k1' is not supported"),
        ({"providers": {"m": local_provider(key="{not json")}}, "providers.m.jwks.local.key", "not valid JSON"),
        ({"providers": {"m": remote(upstreamRef=None)}}, "providers.m.jwks.remote.upstreamRef",
         "upstreamRef (required: {name, namespace}) must be a mapping"),
        ({"providers": {"m": remote(upstreamRef={"name": "nope", "namespace": "default"})}},
         "providers.m.jwks.remote.upstreamRef", "no Upstream default/nope"),
        ({"providers": {"m": remote(upstreamRef={"name": "jwks", "namespace": "other"})}},
         "providers.m.jwks.remote.upstreamRef", "no Upstream other/jwks"),
        ({"providers": {"m": remote(url=None)}}, "providers.m.jwks.remote.url", "must be a string"),
        ({"providers": {"m": remote(url="ftp://auth/keys")}}, "providers.m.jwks.remote.url",
         "must be an absolute http(s) URL"),
        ({"providers": {"m": remote(url="http:///keys")}}, "providers.m.jwks.remote.url",
         "must be an absolute http(s) URL"),
        ({"providers": {"m": remote(url="http://auth/a b")}}, "providers.m.jwks.remote.url",
         "without spaces"),
        ({"providers": {"m": remote(url="http://user:pw@auth/keys")}}, "providers.m.jwks.remote.url",
         "must not contain credentials"),
        ({"providers": {"m": remote(cacheDuration="5 minutes")}}, "providers.m.jwks.remote.cacheDuration",
         "must be a duration above zero such as '5s' or '250ms', got '5 minutes'"),
        ({"providers": {"m": remote(cacheDuration=0)}}, "providers.m.jwks.remote.cacheDuration",
         "must be a duration above zero"),
        ({"providers": {"m": remote(timeout=True)}}, "providers.m.jwks.remote.timeout",
         "must be a duration above zero such as '5s' or '250ms', got True"),
        ({"providers": {"m": remote(refetchInterval="-1s")}}, "providers.m.jwks.remote.refetchInterval",
         "must be a duration"),
        ({"providers": {"m": remote(cache="5m")}}, "providers.m.jwks.remote.cache", "unknown field"),
        ({"providers": {"m": local_provider(tokenSource={})}}, "providers.m.tokenSource",
         "lists no header and no query parameter"),
        ({"providers": {"m": local_provider(tokenSource={"headers": "authorization"})}},
         "providers.m.tokenSource.headers", "must be a list"),
        ({"providers": {"m": local_provider(tokenSource={"headers": [{"header": "x y"}]})}},
         "providers.m.tokenSource.headers[0].header", "is not a valid HTTP header name"),
        ({"providers": {"m": local_provider(tokenSource={"headers": [{"name": "x"}]})}},
         "providers.m.tokenSource.headers[0].name", "unknown field"),
        ({"providers": {"m": local_provider(tokenSource={"queryParams": [1]})}},
         "providers.m.tokenSource.queryParams[0]", "must be a string"),
        ({"providers": {"m": local_provider(keepToken="yes")}}, "providers.m.keepToken",
         "must be true or false"),
        ({"providers": {"m": local_provider(claimsToHeaders={"sub": "x-user"})}},
         "providers.m.claimsToHeaders", "must be a list"),
        ({"providers": {"m": local_provider(claimsToHeaders=[{"claim": "sub", "header": "Host"}])}},
         "providers.m.claimsToHeaders[0].header", "may not be copied into 'host'"),
        ({"providers": {"m": local_provider(claimsToHeaders=[{"claim": "sub", "header": "x:y"}])}},
         "providers.m.claimsToHeaders[0].header", "not a valid HTTP header name"),
        ({"providers": {"m": local_provider(claimsToHeaders=[{"header": "x-user"}])}},
         "providers.m.claimsToHeaders[0].claim", "must be a string"),
        ({"providers": {"m": local_provider(claimsToHeaders=[{"claim": "s", "header": "x", "append": 1}])}},
         "providers.m.claimsToHeaders[0].append", "must be true or false"),
        ({"providers": {"m": local_provider(clockSkewSeconds=-1)}}, "providers.m.clockSkewSeconds",
         "whole number of seconds from 0 to 86400"),
        ({"providers": {"m": local_provider(clockSkewSeconds="60")}}, "providers.m.clockSkewSeconds",
         "whole number"),
        ({"providers": {"m": local_provider(clockSkewSeconds=True)}}, "providers.m.clockSkewSeconds",
         "whole number"),
        ({"providers": {"m": local_provider()}, "disable": "no"}, "disable", "must be true or false"),
    ])
    def test_invalid_options(self, options, field, reason):
        got_field, got_reason = compile_error(options, upstreams={"jwks": 1})
        assert got_field == f"{VH}.{field}" if field else VH
        assert reason in got_reason

    def test_disable_with_providers_is_refused(self):
        # issue 23 item 14: the providers were accepted and ignored
        field, reason = compile_error({"disable": True, "providers": {"m": local_provider()}})
        assert field == f"{VH}.disable"
        assert "providers would be ignored" in reason
        bad_route = {"matchers": [{"prefix": "/x"}],
                     "routeAction": {"single": {"upstream": {"name": "backend", "namespace": "default"}}},
                     "options": {"jwt": {"disable": True, "providers": {"m": local_provider()}}}}
        field, reason = compile_error({"providers": {"m": local_provider()}}, extra_routes=[bad_route])
        assert field == "spec.virtualHost.routes[0].options.jwt.disable"
        make_tester({"providers": {"m": local_provider()}},
                    extra_routes=[{**bad_route, "options": {"jwt": {"disable": True}}}])  # alone: fine

    def test_route_level_error_names_the_route(self):
        bad_route = {"matchers": [{"prefix": "/x"}],
                     "routeAction": {"single": {"upstream": {"name": "backend", "namespace": "default"}}},
                     "options": {"jwt": {"providers": {"m": local_provider(issuer=7)}}}}
        field, reason = compile_error({"providers": {"m": local_provider()}}, extra_routes=[bad_route])
        assert field == "spec.virtualHost.routes[0].options.jwt.providers.m.issuer"
        assert "must be a string, got an integer" in reason

    def test_settings_cache_size_must_be_a_count(self):
        text = config({"providers": {"m": local_provider()}}) + yaml.safe_dump_all([{
            "apiVersion": "gateway.vendor.io/v1", "kind": "Settings",
            "metadata": {"name": "settings", "namespace": "default"},
            "spec": {"jwt": {"verifiedTokenCacheSize": -5}}}], explicit_start=True)
        with pytest.raises(ConfigError) as info:
            ChainTester.from_yaml(text, plugins=[("jwt", ClockedJwtPlugin)], load_entry_points=False)
        assert "Settings: spec.jwt.verifiedTokenCacheSize: must be a whole number >= 0" in str(info.value)

    def test_settings_fields_are_checked_where_they_are_written(self):
        """Settings spec.jwt: an unknown field was accepted and ignored; the
        proto name of the one field is read."""
        def settings(jwt):
            return config({"providers": {"m": local_provider()}}) + yaml.safe_dump_all([{
                "apiVersion": "gateway.vendor.io/v1", "kind": "Settings",
                "metadata": {"name": "settings", "namespace": "default"}, "spec": {"jwt": jwt}}],
                explicit_start=True)
        with pytest.raises(ConfigError) as info:
            ChainTester.from_yaml(settings({"verifiedTokenCachesize": 8}), plugins=[("jwt", ClockedJwtPlugin)],
                                  load_entry_points=False)
        [issue] = info.value.issues
        assert (issue.resource, issue.field) == ("Settings", "spec.jwt.verifiedTokenCachesize")
        assert issue.reason == "unknown field 'verifiedTokenCachesize'; expected one of: verifiedTokenCacheSize"
        tester = ChainTester.from_yaml(settings({"verified_token_cache_size": 0}),
                                       plugins=[("jwt", ClockedJwtPlugin)], load_entry_points=False)
        assert [c.cache.size for c in tester.snapshot.plugin_compiled["jwt"]] == [0]

    def test_every_issue_is_reported_and_nothing_half_applies(self):
        with pytest.raises(ConfigError) as info:
            make_tester({"providers": {"a": local_provider(issuer=""), "b": local_provider(keepToken=1)}})
        assert info.value.issues[0].field.endswith("providers.a.issuer")

    @pytest.mark.parametrize("form", ["spki", "pkcs1", "certificate", "jwk", "jwks", "two_pems",
                                      "enc_key_ignored", "indented"])
    async def test_accepted_key_forms(self, form):
        rsa_jwk = jwks(("rsa", 0, None))["keys"][0]
        key = {
            "spki": public_pem(),
            "pkcs1": public_pem(fmt="pkcs1"),
            "certificate": _certificate_pem(),
            "jwk": json.dumps(rsa_jwk),
            "jwks": json.dumps(jwks(("ec256", 0, "e"), ("rsa", 0, None))),
            "two_pems": public_pem("ec256") + "\n" + public_pem(),
            "enc_key_ignored": json.dumps({"keys": [{**jwks(("rsa", 1, None))["keys"][0], "use": "enc"},
                                                    rsa_jwk]}),
            "indented": "\n   " + public_pem().replace("\n", "\n   "),
        }[form]
        t = make_tester({"providers": {"m": local_provider(key=key)}})
        r = await t.request("GET", URL, headers=bearer(token(kid=None)))
        assert r.status == 200, r.body
        r = await t.request("GET", URL, headers=bearer(token(n=1, kid=None)))
        assert r.status == 401

    def test_keys_are_loaded_once_as_public_key_objects(self):
        from cryptography.hazmat.primitives.asymmetric import rsa

        t = make_tester({"providers": {"m": local_provider()}})
        (compiled,) = t.snapshot.plugin_compiled["jwt"]
        (key,) = compiled.providers[0].local.keys
        assert isinstance(key.key, rsa.RSAPublicKey)
        assert key.algorithms == frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})

    async def test_upstream_without_endpoints_fails_closed_at_request_time(self):
        docs = list(yaml.safe_load_all(config({"providers": {"m": remote()}})))
        docs.insert(0, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "auth", "namespace": "default"},
                        "spec": {"ports": [{"port": 80}]}})
        docs[-1]["spec"]["virtualHost"]["options"]["jwt"]["providers"]["m"]["jwks"]["remote"]["upstreamRef"] = {
            "name": "default-auth-80", "namespace": "default"}
        t = ChainTester.from_yaml(yaml.safe_dump_all(docs), plugins=[("jwt", ClockedJwtPlugin)],
                                  load_entry_points=False)
        r = await t.request("GET", URL, headers=bearer(token()))
        assert (r.status, r.body) == (401, b"Jwks remote fetch is failed")

    def test_plugin_info_and_entry_point(self):
        from twistgw.core.plugins import PluginHost

        info = twistgw_jwt.JwtPlugin().twistgw_plugin_info()
        assert info.order == 200 and info.description
        host = PluginHost.create()
        assert host.infos["jwt"].order == 200
        # the entry point names the class: each host has an instance of its own
        assert isinstance(host.plugin("jwt"), twistgw_jwt.JwtPlugin)
        assert host.plugin("jwt") is not PluginHost.create().plugin("jwt")
        assert host.default_order().index("jwt") > host.default_order().index("extauth")
