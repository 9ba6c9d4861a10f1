"""Responses, token sources, providers, policies, claims for later plugins,
claimsToHeaders and the verified-token cache (in memory, local keys)."""

from __future__ import annotations

import json

import pytest
import yaml
from jwt_helpers import (ClockedJwtPlugin, CLOCK,
    ISSUER, URL, bearer, claims, config, header, jwks, local_provider, make_tester,
    public_pem, signed, token,
)

from twistgw.sdk.testing import ChainTester
from twistgw_jwt import _cache
from twistgw_jwt import _token as T

from support.trial import TestCase, fixture

RSA = make_tester({"providers": {"main": local_provider()}})
REALM = b'Bearer realm="http://api.example.com/api/pets"'
REALM_INVALID = REALM + b', error="invalid_token"'


# --------------------------------------------------------------------------
# The verified-token cache
# --------------------------------------------------------------------------


@fixture
def clock(monkeypatch):
    state = {"now": 2_000_000_000.0}
    monkeypatch.setattr(CLOCK, "now", lambda: state["now"])
    return state


@fixture
def verifications(monkeypatch):
    calls = []
    real = T.verify_signature

    def spy(key, tok):
        calls.append(tok.raw)
        return real(key, tok)

    monkeypatch.setattr(T, "verify_signature", spy)
    return calls


class JwtBehaviourTests(TestCase):
    # --------------------------------------------------------------------------
    # The exact responses
    # --------------------------------------------------------------------------


    async def test_missing_token(self):
        r = await RSA.request("GET", URL)
        assert (r.status, r.body) == (401, b"Jwt is missing")
        assert len(r.body) == 14
        assert r.deny.content_type == b"text/plain"
        assert r.response_headers == ((b"www-authenticate", REALM),)
        assert r.decided_by == "jwt"

    async def test_failed_token_says_invalid_token(self):
        r = await RSA.request("GET", URL, headers=bearer(token(n=1)))
        assert (r.status, r.body) == (401, b"Jwt verification fails")
        assert r.response_headers == ((b"www-authenticate", REALM_INVALID),)
        assert r.deny.content_type == b"text/plain"

    async def test_realm_keeps_the_host_port_and_never_the_query(self):
        tok = token(n=1)
        r = await RSA.request("GET", "http://api.example.com:8080/api/pets?access_token=" + tok)
        assert r.status == 401
        assert header(r, b"www-authenticate") == (
            b'Bearer realm="http://api.example.com:8080/api/pets", error="invalid_token"')
        assert tok.encode() not in header(r, b"www-authenticate")

    async def test_every_spec_body_is_reachable(self):
        """The SPEC.md list, each produced by a real request."""
        aud = make_tester({"providers": {"main": local_provider(audiences=["api"])}})
        kids = make_tester({"providers": {"main": local_provider(json.dumps(jwks(("rsa", 0, "k0"))))}})
        cases = [
            (RSA, {}, 401, "Jwt is missing"),
            (RSA, bearer(token(n=1)), 401, "Jwt verification fails"),
            (RSA, bearer(token(iss="https://other")), 401, "Jwt issuer is not configured"),
            (RSA, bearer(token(ttl=-3600)), 401, "Jwt is expired"),
            (RSA, bearer(signed(claims(nbf=claims()["iat"] + 3600))), 401, "Jwt not yet valid"),
            (kids, bearer(token(kid="k9")), 401, "Jwks doesn't have key to match kid or alg from Jwt"),
            (RSA, bearer("not-a-jwt"), 401, "Jwt is not in the form of Header.Payload.Signature"),
            (aud, bearer(token(aud="other")), 403, "Audiences in Jwt are not allowed"),
        ]
        for t, headers, status, body in cases:
            r = await t.request("GET", URL, headers=headers)
            assert (r.status, r.body) == (status, body.encode()), body

    # --------------------------------------------------------------------------
    # Token sources
    # --------------------------------------------------------------------------


    @pytest.mark.parametrize("value", ["Bearer {t}", "bearer {t}", "BEARER {t}", "BeArEr   {t}  ",
                                       "  Bearer {t}"])
    async def test_bearer_scheme_is_case_insensitive(self, value):
        r = await RSA.request("GET", URL, headers={"Authorization": value.format(t=token())})
        assert r.status == 200

    @pytest.mark.parametrize("value", ["Basic YWxpY2U6c2VjcmV0", "Bearer", "Bearer ", "Token abc",
                                       "Bearerabc.def.ghi"])
    async def test_other_authorization_values_are_no_token(self, value):
        r = await RSA.request("GET", URL, headers={"Authorization": value})
        assert (r.status, r.body) == (401, b"Jwt is missing")

    async def test_access_token_query_parameter(self):
        r = await RSA.request("GET", URL + "?a=1&access_token=" + token() + "&b=%20x")
        assert r.status == 200
        assert r.ctx.query == b"a=1&b=%20x"  # the rest of the query byte for byte
        assert r.ctx.claims["sub"] == "alice"
        r = await RSA.request("GET", URL + "?access_token=")
        assert (r.status, r.body) == (401, b"Jwt is missing")

    async def test_custom_token_source(self):
        t = make_tester({"providers": {"main": local_provider(tokenSource={
            "headers": [{"header": "X-Jwt", "prefix": "JWT "}, {"header": "x-raw-token"}],
            "queryParams": ["token"]})}})
        tok = token()
        for headers, url in (({"X-Jwt": f"JWT {tok}"}, URL), ({"x-jwt": f"jwt {tok}"}, URL),
                             ({"X-Raw-Token": tok}, URL), ({}, URL + "?token=" + tok)):
            r = await t.request("GET", url, headers=headers)
            assert r.status == 200, headers
            assert r.forwarded_headers.getRawHeaders(b"x-jwt") is None
            assert r.forwarded_headers.getRawHeaders(b"x-raw-token") is None
            assert b"token=" not in r.ctx.query
        # the defaults are replaced, not added to
        for headers, url in ((bearer(tok), URL), ({}, URL + "?access_token=" + tok)):
            r = await t.request("GET", url, headers=headers)
            assert (r.status, r.body) == (401, b"Jwt is missing")
        r = await t.request("GET", URL, headers={"X-Jwt": f"JWT {tok}", "X-Raw-Token": token(sub="bob")})
        assert (r.status, r.body) == (401, b"Found multiple Jwt tokens")

    # --------------------------------------------------------------------------
    # Claims for later plugins; service-account tokens
    # --------------------------------------------------------------------------


    async def test_claims_principal_and_provider_on_the_context(self):
        tok = token(groups=["a", "b"], nested={"x": 1})
        r = await RSA.request("GET", URL, headers=bearer(tok))
        assert r.status == 200
        assert isinstance(r.ctx.claims, dict)
        assert r.ctx.claims["groups"] == ["a", "b"] and r.ctx.claims["nested"] == {"x": 1}
        assert r.ctx.claims["iss"] == ISSUER
        assert r.ctx.claims_provider == "main"
        assert r.ctx.principal == "alice"

    async def test_changing_ctx_claims_does_not_change_the_cached_claims(self):
        tok = token(groups=["a", "b"], nested={"x": [1]})
        r = await RSA.request("GET", URL, headers=bearer(tok))
        assert r.status == 200
        r.ctx.claims["groups"].append("admin")
        r.ctx.claims["nested"]["x"].append(2)
        r.ctx.claims["sub"] = "root"
        r = await RSA.request("GET", URL, headers=bearer(tok))  # from the verified-token cache
        assert r.status == 200
        assert r.ctx.claims["groups"] == ["a", "b"] and r.ctx.claims["nested"] == {"x": [1]}
        assert r.ctx.claims["sub"] == "alice"

    async def test_service_account_tokens(self):
        sa_issuer = "https://kubernetes.default.svc.cluster.local"
        t = make_tester({"providers": {"k8s": local_provider(issuer=sa_issuer)}})
        sub = "system:serviceaccount:payments:billing-worker"
        tok = signed({"iss": sa_issuer, "sub": sub, "aud": ["https://kubernetes.default.svc"],
                      "kubernetes.io": {"namespace": "payments",
                                        "serviceaccount": {"name": "billing-worker", "uid": "0f1e"}},
                      "iat": claims()["iat"], "exp": claims()["exp"]})
        r = await t.request("GET", URL, headers=bearer(tok))
        assert r.status == 200
        assert r.ctx.principal == sub
        assert r.ctx.claims["kubernetes.io"]["namespace"] == "payments"
        assert r.ctx.claims_provider == "k8s"
        # legacy service-account tokens have no exp: still verified like any RS256 token
        legacy = signed({"iss": sa_issuer, "sub": sub,
                         "kubernetes.io/serviceaccount/namespace": "payments"}, kid=None)
        r = await t.request("GET", URL, headers=bearer(legacy))
        assert r.status == 200 and r.ctx.principal == sub
        # the same subject from another issuer is not a service account of this cluster
        r = await t.request("GET", URL, headers=bearer(token(sub=sub)))
        assert (r.status, r.body) == (401, b"Jwt issuer is not configured")

    # --------------------------------------------------------------------------
    # Audiences
    # --------------------------------------------------------------------------


    async def test_audiences(self):
        t = make_tester({"providers": {"main": local_provider(audiences=["api", "web"])}})
        for aud, status in (("api", 200), (["x", "web"], 200), ("API", 403), ("other", 403),
                            ([], 403), (None, 403)):
            tok = token(aud=aud) if aud is not None else token()
            r = await t.request("GET", URL, headers=bearer(tok))
            assert r.status == status, aud
            if status == 403:
                assert r.body == b"Audiences in Jwt are not allowed"
                assert header(r, b"www-authenticate") == REALM_INVALID
        r = await t.request("GET", URL, headers=bearer(signed(claims(aud=["api", 1]))))
        assert (r.status, r.body) == (401, b"Jwt payload [aud] field is not a string or string list")
        # without audiences configured, aud is not checked
        r = await RSA.request("GET", URL, headers=bearer(token(aud="anything")))
        assert r.status == 200

    # --------------------------------------------------------------------------
    # Several providers
    # --------------------------------------------------------------------------


    async def test_any_provider_admits(self):
        t = make_tester({"providers": {
            "corp": local_provider(issuer="https://corp", key=public_pem("rsa", 0)),
            "partner": local_provider(issuer="https://partner", key=public_pem("ec256")),
        }})
        r = await t.request("GET", URL, headers=bearer(token(iss="https://partner", kind="ec256")))
        assert r.status == 200 and r.ctx.claims_provider == "partner"
        r = await t.request("GET", URL, headers=bearer(token(iss="https://corp")))
        assert r.status == 200 and r.ctx.claims_provider == "corp"
        # corp's issuer but the partner's key: the corp provider fails it
        r = await t.request("GET", URL, headers=bearer(token(iss="https://corp", kind="ec256")))
        assert (r.status, r.body) == (401, b"Jwks doesn't have key to match kid or alg from Jwt")
        r = await t.request("GET", URL, headers=bearer(token(iss="https://nobody")))
        assert (r.status, r.body) == (401, b"Jwt issuer is not configured")

    async def test_two_providers_for_one_issuer_during_key_rotation(self):
        t = make_tester({"providers": {
            "old": local_provider(key=public_pem("rsa", 0)),
            "new": local_provider(key=public_pem("rsa", 1)),
        }})
        r = await t.request("GET", URL, headers=bearer(token(n=1)))
        assert r.status == 200 and r.ctx.claims_provider == "new"
        r = await t.request("GET", URL, headers=bearer(token(n=0)))
        assert r.status == 200 and r.ctx.claims_provider == "old"
        r = await t.request("GET", URL, headers=bearer(token(n=2)))
        assert (r.status, r.body) == (401, b"Jwt verification fails")

    async def test_providers_with_different_token_sources(self):
        t = make_tester({"providers": {
            "users": local_provider(issuer="https://users"),
            "machines": local_provider(issuer="https://machines",
                                       tokenSource={"headers": [{"header": "x-machine-token"}]}),
        }})
        r = await t.request("GET", URL, headers={"x-machine-token": token(iss="https://machines")})
        assert r.status == 200 and r.ctx.claims_provider == "machines"
        # a users token in the machines header is not read by the users provider
        r = await t.request("GET", URL, headers={"x-machine-token": token(iss="https://users")})
        assert (r.status, r.body) == (401, b"Jwt issuer is not configured")
        r = await t.request("GET", URL, headers=bearer(token(iss="https://machines")))
        assert (r.status, r.body) == (401, b"Jwt issuer is not configured")

    # --------------------------------------------------------------------------
    # validationPolicy, disable, per-route options, jwtStaged
    # --------------------------------------------------------------------------


    async def test_allow_missing(self):
        t = make_tester({"validationPolicy": "ALLOW_MISSING", "providers": {"main": local_provider()}})
        r = await t.request("GET", URL)
        assert r.status == 200 and r.ctx.claims is None and r.ctx.principal is None
        r = await t.request("GET", URL, headers=bearer(token(n=1)))
        assert (r.status, r.body) == (401, b"Jwt verification fails")
        r = await t.request("GET", URL, headers=bearer(token()))
        assert r.status == 200 and r.ctx.principal == "alice"

    async def test_allow_missing_or_failed(self):
        t = make_tester({"validationPolicy": "ALLOW_MISSING_OR_FAILED", "providers": {"main": local_provider(
            claimsToHeaders=[{"claim": "sub", "header": "x-user"}])}})
        bad = token(n=1)
        r = await t.request("GET", URL, headers={**bearer(bad), "x-user": "admin"})
        assert r.status == 200 and r.ctx.claims is None and r.ctx.principal is None
        assert r.forwarded_headers.getRawHeaders(b"x-user") is None  # a forged identity never passes
        r = await t.request("GET", URL, headers=bearer(token()))
        assert r.status == 200 and r.ctx.claims["sub"] == "alice"

    async def test_route_disable_and_override(self):
        open_route = {"matchers": [{"prefix": "/public"}],
                      "routeAction": {"single": {"upstream": {"name": "backend", "namespace": "default"}}},
                      "options": {"jwt": {"disable": True}}}
        other = {"matchers": [{"prefix": "/partner"}],
                 "routeAction": {"single": {"upstream": {"name": "backend", "namespace": "default"}}},
                 "options": {"jwt": {"providers": {"partner": local_provider(
                     issuer="https://partner", key=public_pem("ec256"))}}}}
        t = make_tester({"providers": {"main": local_provider()}}, extra_routes=[open_route, other])
        r = await t.request("GET", "http://api.example.com/public/x")
        assert r.status == 200 and r.ctx.claims is None
        r = await t.request("GET", "http://api.example.com/partner/x", headers=bearer(token()))
        assert (r.status, r.body) == (401, b"Jwt issuer is not configured")
        r = await t.request("GET", "http://api.example.com/partner/x",
                            headers=bearer(token(iss="https://partner", kind="ec256")))
        assert r.status == 200 and r.ctx.claims_provider == "partner"
        r = await t.request("GET", URL)
        assert (r.status, r.body) == (401, b"Jwt is missing")

    async def test_jwt_staged(self):
        text = config({"providers": {"main": local_provider()}})
        docs = list(yaml.safe_load_all(text))
        vh = docs[-1]["spec"]["virtualHost"]
        vh["options"] = {"jwtStaged": {"afterExtAuth": vh["options"]["jwt"]}}
        t = ChainTester.from_yaml(yaml.safe_dump_all(docs), plugins=[("jwt", ClockedJwtPlugin)],
                                  load_entry_points=False)
        r = await t.request("GET", URL)
        assert (r.status, r.body) == (401, b"Jwt is missing")
        r = await t.request("GET", URL, headers=bearer(token()))
        assert r.status == 200

    async def test_delegated_child_merges_jwt_stage_by_stage(self):
        # issue 23 item 6: the parent's beforeExtAuth stage was dropped when a
        # child disabled only its afterExtAuth stage (no token, 200)
        upstream = {"single": {"upstream": {"name": "backend", "namespace": "default"}}}
        docs = list(yaml.safe_load_all(config({"providers": {"main": local_provider()}})))
        vh = docs[-1]["spec"]["virtualHost"]
        vh["options"] = {}
        vh["routes"] = [{"matchers": [{"prefix": "/team/"}],
                         "delegateAction": {"ref": {"name": "team", "namespace": "default"}},
                         "options": {"jwtProvidersStaged": {"beforeExtAuth": {"providers": {
                             "main": local_provider()}}}}}]
        docs.append({"apiVersion": "gateway.vendor.io/v1", "kind": "RouteTable",
                     "metadata": {"name": "team", "namespace": "default"},
                     "spec": {"routes": [
                         {"matchers": [{"prefix": "/team/a"}], "routeAction": upstream,
                          "options": {"jwtStaged": {"afterExtAuth": {"disable": True}}}},
                         {"matchers": [{"prefix": "/team/b"}], "routeAction": upstream,
                          "options": {"jwt": {"providers": {"partner": local_provider(
                              issuer="https://partner", key=public_pem("ec256"),
                              tokenSource={"headers": [{"header": "x-partner"}]})}}}},
                         {"matchers": [{"prefix": "/team/c"}], "routeAction": upstream,
                          "options": {"jwt": {"disable": True}}},
                     ]}})
        t = ChainTester.from_yaml(yaml.safe_dump_all(docs), plugins=[("jwt", ClockedJwtPlugin)],
                                  load_entry_points=False)
        r = await t.request("GET", "http://api.example.com/team/a")
        assert (r.status, r.body) == (401, b"Jwt is missing")  # the parent's stage still runs
        r = await t.request("GET", "http://api.example.com/team/a", headers=bearer(token()))
        assert r.status == 200
        # a child policy at the other stage is added: both tokens are needed
        partner = {"x-partner": token(iss="https://partner", kind="ec256")}
        r = await t.request("GET", "http://api.example.com/team/b", headers=partner)
        assert (r.status, r.body) == (401, b"Jwt is missing")
        r = await t.request("GET", "http://api.example.com/team/b", headers={**partner, **bearer(token())})
        assert r.status == 200
        r = await t.request("GET", "http://api.example.com/team/c")  # jwt: {disable: true} turns all off
        assert r.status == 200

    # --------------------------------------------------------------------------
    # claimsToHeaders
    # --------------------------------------------------------------------------


    async def test_claims_to_headers_overwrite_forged_client_headers(self):
        t = make_tester({"providers": {"main": local_provider(claimsToHeaders=[
            {"claim": "sub", "header": "x-user"},
            {"claim": "groups", "header": "x-groups"},
            {"claim": "admin", "header": "x-admin"},
            {"claim": "level", "header": "x-level"},
            {"claim": "ratio", "header": "x-ratio"},
            {"claim": "org", "header": "x-org"},
            {"claim": "absent", "header": "x-absent"},
            {"claim": "nothing", "header": "x-nothing"},
            {"claim": "email", "header": "x-ids", "append": True},
            {"claim": "sub", "header": "x-ids", "append": True},
            {"claim": "evil", "header": "x-evil"},
        ])}})
        tok = token(groups=["dev", "ops", 3, True], admin=False, level=3, ratio=0.5,
                    org={"name": "acme", "id": 7}, nothing=None, email="alice@example.com",
                    evil="x\r\nX-Injected: 1")
        forged = {"X-User": "root", "x-groups": "admins", "X-Absent": "forged", "x-ids": "forged",
                  "x-evil": "forged", "x-unrelated": "kept"}
        r = await t.request("GET", URL, headers={**bearer(tok), **forged})
        assert r.status == 200
        h = r.forwarded_headers
        assert h.getRawHeaders(b"x-user") == [b"alice"]
        assert h.getRawHeaders(b"x-groups") == [b"dev,ops,3,true"]
        assert h.getRawHeaders(b"x-admin") == [b"false"]
        assert h.getRawHeaders(b"x-level") == [b"3"]
        assert h.getRawHeaders(b"x-ratio") == [b"0.5"]
        assert h.getRawHeaders(b"x-org") == [b'{"id":7,"name":"acme"}']
        assert h.getRawHeaders(b"x-absent") is None
        assert h.getRawHeaders(b"x-nothing") is None
        assert h.getRawHeaders(b"x-ids") == [b"alice@example.com", b"alice"]
        assert h.getRawHeaders(b"x-evil") is None
        assert h.getRawHeaders(b"x-injected") is None
        assert h.getRawHeaders(b"x-unrelated") == [b"kept"]
        # a failed request leaves no forged value either (it is refused anyway)
        r = await t.request("GET", URL, headers=forged)
        assert r.status == 401 and r.ctx.headers.getRawHeaders(b"x-user") is None

    async def test_claims_to_headers_unicode(self):
        t = make_tester({"providers": {"main": local_provider(claimsToHeaders=[
            {"claim": "name", "header": "x-name"}])}})
        r = await t.request("GET", URL, headers=bearer(token(name="Zoë")))
        assert r.forwarded_headers.getRawHeaders(b"x-name") == ["Zoë".encode()]

    async def test_cache_hit_skips_verification(self, clock, verifications):
        t = make_tester({"providers": {"main": local_provider(claimsToHeaders=[
            {"claim": "sub", "header": "x-user"}])}})
        tok = signed({"iss": ISSUER, "sub": "alice", "exp": clock["now"] + 600, "groups": ["dev"]})
        for _ in range(5):
            r = await t.request("GET", URL, headers={**bearer(tok), "x-user": "forged"})
            assert r.status == 200
            # a hit still strips the token and rewrites the headers
            assert r.forwarded_headers.getRawHeaders(b"authorization") is None
            assert r.forwarded_headers.getRawHeaders(b"x-user") == [b"alice"]
            assert r.ctx.claims["sub"] == "alice" and r.ctx.claims_provider == "main"
            assert r.ctx.claims["groups"] == ["dev"]
            r.ctx.claims["sub"] = "mallory"  # a later plugin scribbling on its copy
            r.ctx.claims["groups"].append("admins")
        assert verifications == [tok]
        step = r.trace[0]
        assert "(cached)" in step[2].reason

    async def test_cache_entry_expires_with_the_token(self, clock, verifications):
        t = make_tester({"providers": {"main": local_provider()}})
        tok = signed({"iss": ISSUER, "sub": "alice", "exp": clock["now"] + 10})
        assert (await t.request("GET", URL, headers=bearer(tok))).status == 200
        clock["now"] += 9
        assert (await t.request("GET", URL, headers=bearer(tok))).status == 200
        assert len(verifications) == 1
        clock["now"] += 62  # past exp + skew
        r = await t.request("GET", URL, headers=bearer(tok))
        assert (r.status, r.body) == (401, b"Jwt is expired")
        assert len(verifications) == 2

    async def test_cache_entry_is_re_verified_at_exp_within_skew(self, clock, verifications):
        t = make_tester({"providers": {"main": local_provider()}})
        tok = signed({"iss": ISSUER, "sub": "alice", "exp": clock["now"] + 10})
        assert (await t.request("GET", URL, headers=bearer(tok))).status == 200
        clock["now"] += 30  # past exp (the entry's end), within the clock skew
        assert (await t.request("GET", URL, headers=bearer(tok))).status == 200
        assert len(verifications) == 2

    async def test_failures_are_not_cached_and_other_providers_do_not_share_entries(self, clock, verifications):
        aud = make_tester({"providers": {"main": local_provider(audiences=["api"])}})
        tok = signed({"iss": ISSUER, "sub": "alice", "exp": clock["now"] + 600})
        for _ in range(2):
            r = await aud.request("GET", URL, headers=bearer(tok))
            assert r.status == 403
        assert len(verifications) == 2
        assert (await RSA.request("GET", URL, headers=bearer(tok))).status == 200

    def test_cache_is_a_bounded_lru(self):
        c = _cache.VerifiedCache(2)
        c.put("p", "a", {"exp": 100}, 0)
        c.put("p", "b", {}, 0)
        assert c.get("p", "a", 1) == {"exp": 100}  # a is now most recent
        c.put("p", "c", {}, 0)
        assert c.get("p", "b", 1) is None and len(c) == 2
        assert c.get("p", "a", 100) is None  # at exp: gone
        assert c.get("q", "c", 1) is None and c.get("p", "c", 1) == {}
        assert c.get("p", "c", _cache.MAX_ENTRY_SECONDS) is None  # bounded lifetime without exp
        c.put("p", "d", {"exp": 5}, 10)  # already expired: not stored
        assert c.get("p", "d", 10) is None
        off = _cache.VerifiedCache(0)
        off.put("p", "a", {}, 0)
        assert off.get("p", "a", 0) is None

    async def test_cache_size_setting(self, verifications):
        text = config({"providers": {"main": local_provider()}}) + yaml.safe_dump_all([{
            "apiVersion": "gateway.vendor.io/v1", "kind": "Settings",
            "metadata": {"name": "settings", "namespace": "default"},
            "spec": {"jwt": {"verifiedTokenCacheSize": 0}}}], explicit_start=True)
        t = ChainTester.from_yaml(text, plugins=[("jwt", ClockedJwtPlugin)], load_entry_points=False)
        tok = token()
        for _ in range(3):
            assert (await t.request("GET", URL, headers=bearer(tok))).status == 200
        assert len(verifications) == 3
