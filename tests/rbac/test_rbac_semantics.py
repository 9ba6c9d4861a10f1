"""RBAC evaluation through the in-memory chain (fake jwt stand-in + real rbac)."""

from __future__ import annotations

from typing import Any

import pytest
from rbac_helpers import claims_headers, config, make_tester, policy, route

from support.trial import TestCase

DENIED = b"RBAC: access denied"


async def status(t: Any, claims: Any, method: str = "GET", path: str = "/api/pets",
                 provider: str | None = None) -> int:
    headers = claims_headers(claims, provider) if claims is not None else {}
    result = await t.request(method, "http://api.example.com" + path, headers=headers)
    return result.status


def only(claims: dict[str, Any], **kw: Any) -> Any:
    return make_tester(config({"policies": {"p": policy(claims, **kw)}}))


class RbacSemanticsTests(TestCase):
    # -- the deny response --------------------------------------------------------


    async def test_deny_response_is_exact(self) -> None:
        t = only({"sub": "alice"})
        r = await t.request("GET", "http://gw.test/api", headers=claims_headers({"sub": "bob"}))
        assert r.status == 403
        assert r.body == b"RBAC: access denied"
        assert len(r.body) == 19
        assert r.deny is not None and r.deny.content_type == b"text/plain"
        assert r.decided_by == "rbac"
        assert "principals[0] claim 'sub' does not match" in r.deny.reason
        assert "bob" not in r.deny.reason  # claim values are not echoed into reasons

    async def test_allow_reason_names_policy_and_principal(self) -> None:
        t = only({"sub": "alice"})
        r = await t.request("GET", "http://gw.test/api", headers=claims_headers({"sub": "alice"}))
        assert r.status == 200
        assert r.trace[-1][0:2] == ("rbac", "authorize")
        assert r.trace[-1][2].reason == "policy 'p' principals[0] matched"

    async def test_no_claims_is_403_when_jwt_allows_missing(self) -> None:
        t = only({"sub": "alice"})
        r = await t.request("GET", "http://gw.test/api")
        assert (r.status, r.body) == (403, DENIED)
        assert "no verified JWT claims" in r.deny.reason

    async def test_jwt_401_comes_before_rbac_403(self) -> None:
        t = make_tester(config({"policies": {"p": policy({"sub": "alice"})}}, jwt={}))
        r = await t.request("GET", "http://gw.test/api")
        assert (r.status, r.body, r.decided_by) == (401, b"Jwt is missing", "fakejwt")
        assert [step[0] for step in r.trace] == ["fakejwt"]

    # -- exact-string semantics ---------------------------------------------------


    @pytest.mark.parametrize("value", [
        "admin ", " admin", "ADMIN", "Admin", "admi", "adminx", None, 1, True, ["admin"],
        {"admin": "admin"}, "", "admin\n", "ad\u200bmin",
    ])
    async def test_exact_string_rejects_near_misses(self, value: Any) -> None:
        t = only({"role": "admin"})
        assert await status(t, {"role": value}) == 403
        assert await status(t, {"role": "admin"}) == 200

    async def test_exact_string_number_and_boolean_never_equal_their_text(self) -> None:
        t = make_tester(config({"policies": {
            "n": policy({"level": "1"}), "b": policy({"flag": "true"})}}))
        assert await status(t, {"level": 1}) == 403
        assert await status(t, {"level": 1.0}) == 403
        assert await status(t, {"level": "1"}) == 200
        assert await status(t, {"flag": True}) == 403
        assert await status(t, {"flag": "true"}) == 200

    async def test_missing_claim_does_not_match(self) -> None:
        t = only({"role": "admin"})
        assert await status(t, {}) == 403
        assert await status(t, {"sub": "admin"}) == 403

    async def test_without_delimiter_dotted_name_is_a_top_level_claim(self) -> None:
        t = only({"realm.role": "admin"})
        assert await status(t, {"realm": {"role": "admin"}}) == 403
        assert await status(t, {"realm.role": "admin"}) == 200

    # -- composition ----------------------------------------------------------------


    async def test_policies_or_principals_or_claims_and(self) -> None:
        rbac = {"policies": {
            "readers": {
                "permissions": {"methods": ["GET"], "pathPrefix": "/api/"},
                "principals": [
                    {"jwtPrincipal": {"claims": {"team": "dev", "env": "prod"}}},
                    {"jwtPrincipal": {"claims": {"sub": "auditor"}}},
                ],
            },
            "writers": {
                "permissions": {"methods": ["POST"], "pathPrefix": "/api/"},
                "principals": [{"jwtPrincipal": {"claims": {"team": "dev", "role": "writer"}}}],
            },
        }}
        t = make_tester(config(rbac))
        # principal 0 needs both claims (AND)
        assert await status(t, {"team": "dev", "env": "prod"}) == 200
        assert await status(t, {"team": "dev"}) == 403
        assert await status(t, {"env": "prod"}) == 403
        assert await status(t, {"team": "dev", "env": "staging"}) == 403
        # principal 1 alone is enough (OR)
        assert await status(t, {"sub": "auditor"}) == 200
        # policies OR: POST is only in writers
        assert await status(t, {"team": "dev", "role": "writer"}, "POST") == 200
        assert await status(t, {"team": "dev", "env": "prod"}, "POST") == 403
        # a writer is not a reader
        assert await status(t, {"team": "dev", "role": "writer"}, "GET") == 403
        # a permission alone admits nobody: the principal must match the same policy
        assert await status(t, {"sub": "auditor"}, "POST") == 403

    async def test_principal_with_no_claims_matches_nothing(self) -> None:
        rbac = {"policies": {"p": {"principals": [{"jwtPrincipal": {"claims": {}}},
                                                  {"jwtPrincipal": {}}]}}}
        t = make_tester(config(rbac))
        assert await status(t, {"sub": "anyone"}) == 403
        assert await status(t, {}) == 403

    async def test_policy_without_principals_and_empty_policies_deny(self) -> None:
        for rbac in ({"policies": {"p": {"permissions": {"methods": ["GET"]}}}},
                     {"policies": {}}, {}):
            t = make_tester(config(rbac))
            assert await status(t, {"sub": "x"}) == 403, rbac

    # -- methods ---------------------------------------------------------------------


    @pytest.mark.parametrize("method,expected", [
        ("GET", 200), ("get", 403), ("GeT", 403), ("Get", 403), ("HEAD", 403),
        ("POST", 403), ("OPTIONS", 403), ("BREW", 403), ("GET2", 403),
    ])
    async def test_methods_are_exact_and_case_sensitive(self, method: str, expected: int) -> None:
        t = only({"sub": "alice"}, methods=["GET"])
        assert await status(t, {"sub": "alice"}, method) == expected

    async def test_head_needs_its_own_permission(self) -> None:
        t = only({"sub": "alice"}, methods=["GET", "HEAD"])
        assert await status(t, {"sub": "alice"}, "HEAD") == 200
        assert await status(t, {"sub": "alice"}, "GET") == 200

    async def test_absent_methods_means_any(self) -> None:
        t = only({"sub": "alice"}, prefix="/api/")
        for m in ("GET", "DELETE", "get", "BREW"):
            assert await status(t, {"sub": "alice"}, m) == 200

    # -- paths (through the core's normaliser) ---------------------------------------


    @pytest.mark.parametrize("raw,expected", [
        ("/api/pets", 200),
        ("/api/pets/1", 200),
        ("/api/pets/../users", 403),        # -> /api/users
        ("/api/pets/%2e%2e/users", 403),
        ("/api/pets/%2E%2E/users", 403),
        ("/api/pets/.%2e/users", 403),
        ("/api/pets/..%2fusers", 403),      # %2f decoded then dot segment removed
        ("/api/pets/..%2Fusers", 403),
        ("/api//pets", 200),                # merged to /api/pets
        ("//api/pets", 200),
        ("/api/./pets", 200),
        ("/x/../api/pets", 200),
        ("/api/users/../pets", 200),
        ("/api/petsX", 200),                # string prefix, documented
        ("/api/pets;x=1", 200),
        ("/api/pet", 403),
        ("/API/pets", 403),
        ("/api/%70ets", 200),               # %70 = p, unreserved, decoded
    ])
    async def test_path_prefix_on_normalised_path(self, raw: str, expected: int) -> None:
        t = only({"sub": "alice"}, prefix="/api/pets")
        r = await t.request("GET", "http://gw.test" + raw, headers=claims_headers({"sub": "alice"}))
        assert r.status == expected, (raw, r.ctx.path if r.ctx else None)
        if expected == 200:
            assert r.ctx is not None and r.ctx.path.startswith("/api/pets")

    @pytest.mark.parametrize("raw", [
        "/api/pets/..;/users", "/api/pets/%5c..%5cusers", "/api/pets\\..\\users",
        "/api/pets/%00", "/api/pets#frag",
    ])
    async def test_dangerous_paths_are_refused_before_rbac(self, raw: str) -> None:
        t = only({"sub": "alice"}, prefix="/api/pets")
        r = await t.request("GET", "http://gw.test" + raw, headers=claims_headers({"sub": "alice"}))
        assert r.status == 400
        assert r.trace == []  # refused before any plugin ran

    async def test_dot_dot_escape_from_allowed_prefix_is_denied_with_prefix_reason(self) -> None:
        t = only({"sub": "alice"}, prefix="/api/pets")
        r = await t.request("GET", "http://gw.test/api/pets/%2e%2e/admin", headers=claims_headers({"sub": "alice"}))
        assert r.status == 403
        assert r.ctx.path == "/api/admin"
        assert "path does not start with '/api/pets'" in r.deny.reason

    # -- matchers ----------------------------------------------------------------------


    async def test_boolean_matcher(self) -> None:
        t_true = only({"email_verified": True}, matcher="BOOLEAN")
        t_text = only({"email_verified": "true"}, matcher="BOOLEAN")
        t_false = only({"email_verified": False}, matcher="BOOLEAN")
        for t in (t_true, t_text):
            assert await status(t, {"email_verified": True}) == 200
            for v in ("true", "True", 1, None, [True], False):
                assert await status(t, {"email_verified": v}) == 403, v
            assert await status(t, {}) == 403
        assert await status(t_false, {"email_verified": False}) == 200
        assert await status(t_false, {"email_verified": 0}) == 403
        assert await status(t_false, {"email_verified": None}) == 403
        assert await status(t_false, {}) == 403

    async def test_list_contains_matcher(self) -> None:
        t = only({"roles": "super_user"}, matcher="LIST_CONTAINS")
        assert await status(t, {"roles": ["view", "super_user"]}) == 200
        assert await status(t, {"roles": ["super_user"]}) == 200
        assert await status(t, {"roles": "super_user"}) == 200          # a one-item string list
        assert await status(t, {"roles": "view super_user admin"}) == 200
        for v in (["Super_user"], ["super_user "], ["view"], [], [["super_user"]],
                  [{"super_user": 1}], "super_user_x", "view,super_user", "", None, 1,
                  {"super_user": True}):
            assert await status(t, {"roles": v}) == 403, v
        assert await status(t, {}) == 403

    async def test_list_contains_on_oauth_scope(self) -> None:
        t = only({"scope": "pets:write"}, matcher="LIST_CONTAINS")
        assert await status(t, {"scope": "openid pets:read pets:write"}) == 200
        assert await status(t, {"scope": "openid  pets:write"}) == 200
        assert await status(t, {"scope": "openid pets:read"}) == 403
        assert await status(t, {"scope": "pets:writer"}) == 403

    async def test_regex_matcher_is_a_full_match(self) -> None:
        t = only({"sub": "system:serviceaccount:team-[a-z]+:.+"}, matcher="REGEX_MATCH")
        assert await status(t, {"sub": "system:serviceaccount:team-a:builder"}) == 200
        for v in ("xsystem:serviceaccount:team-a:builder", "system:serviceaccount:team-A:b",
                  "system:serviceaccount:team-a:", "system:serviceaccount:team-a:b\n",
                  ["system:serviceaccount:team-a:b"], None, 5):
            assert await status(t, {"sub": v}) == 403, v

    async def test_regex_matcher_reads_a_claim_of_any_length(self) -> None:
        # RE2 is linear: no cut-off, so a long claim is judged like a short one
        t = only({"name": "a.*"}, matcher="REGEX_MATCH")
        assert await status(t, {"name": "a" * 4096}) == 200
        assert await status(t, {"name": "a" * 40_000}) == 200
        assert await status(t, {"name": "b" + "a" * 40_000}) == 403

    async def test_matcher_applies_to_every_claim_of_the_principal(self) -> None:
        t = only({"roles": "admin", "groups": "ops"}, matcher="LIST_CONTAINS")
        assert await status(t, {"roles": ["admin"], "groups": ["ops", "dev"]}) == 200
        assert await status(t, {"roles": ["admin"], "groups": ["dev"]}) == 403

    # -- nested claims -------------------------------------------------------------------


    async def test_nested_claims_with_delimiter(self) -> None:
        t = only({"metadata.auth.role": "user"}, delimiter=".")
        assert await status(t, {"metadata": {"auth": {"role": "user"}}}) == 200
        for c in ({"metadata.auth.role": "user"}, {"metadata": {"auth": {"role": "User"}}},
                  {"metadata": {"auth": "role"}}, {"metadata": {"auth": ["role"]}},
                  {"metadata": {"auth": {"role": ["user"]}}}, {"metadata": None}, {}):
            assert await status(t, c) == 403, c

    async def test_nested_claims_with_other_delimiter_and_list_matcher(self) -> None:
        t = only({"realm_access/roles": "manager"}, delimiter="/", matcher="LIST_CONTAINS")
        assert await status(t, {"realm_access": {"roles": ["manager", "x"]}}) == 200
        assert await status(t, {"realm_access": {"roles": ["x"]}}) == 403

    async def test_delimiter_is_per_policy(self) -> None:
        rbac = {"policies": {
            "nested": policy({"a.b": "1"}, delimiter=".", prefix="/n"),
            "flat": policy({"a.b": "1"}, prefix="/f"),
        }}
        t = make_tester(config(rbac))
        assert await status(t, {"a": {"b": "1"}}, path="/n") == 200
        assert await status(t, {"a": {"b": "1"}}, path="/f") == 403
        assert await status(t, {"a.b": "1"}, path="/f") == 200

    # -- provider restriction ------------------------------------------------------------


    async def test_provider_restricts_principal(self) -> None:
        t = only({"sub": "alice"}, provider="corp")
        assert await status(t, {"sub": "alice"}, provider="corp") == 200
        assert await status(t, {"sub": "alice"}, provider="partner") == 403
        assert await status(t, {"sub": "alice"}, provider="Corp") == 403
        r = await t.request("GET", "http://gw.test/", headers=claims_headers({"sub": "alice"}, "partner"))
        assert "requires provider 'corp'" in r.deny.reason

    async def test_route_level_rbac_replaces_virtual_host(self) -> None:
        vh = {"policies": {"vh": policy({"sub": "alice"})}}
        routes = [
            route("/admin", {"rbac": {"policies": {"admins": policy({"sub": "root"})}}}),
            route("/open", {"rbac": {"disable": True}}),
            route("/"),
        ]
        t = make_tester(config(vh, routes=routes))
        assert await status(t, {"sub": "root"}, path="/admin") == 200
        assert await status(t, {"sub": "alice"}, path="/admin") == 403  # not merged with vh
        assert await status(t, {"sub": "alice"}, path="/other") == 200
        assert await status(t, {"sub": "root"}, path="/other") == 403
        assert await status(t, {"sub": "nobody"}, path="/open") == 200
        assert await status(t, None, path="/open") == 200
        r = await t.request("GET", "http://gw.test/open")
        assert [s[0] for s in r.trace] == ["fakejwt"]
