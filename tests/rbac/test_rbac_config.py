"""Invalid RBAC options and settings are configuration errors with precise paths."""

from __future__ import annotations

from typing import Any

import pytest
from rbac_helpers import claims_headers, config, make_tester, policy, route

from twistgw.sdk.testing import ConfigError

from support.trial import TestCase

VH = "VirtualService default/vs: spec.virtualHost.options.rbac"


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        make_tester(text)
    assert len(info.value.issues) == 1, str(info.value)
    return str(info.value)


def jp(**jwt: Any) -> dict[str, Any]:
    return {"policies": {"p": {"principals": [{"jwtPrincipal": jwt}]}}}


class RbacConfigTests(TestCase):
    @pytest.mark.parametrize("rbac,field,reason", [
        ("yes", "", "must be a mapping"),
        ({"policy": {}}, ".policy", "unknown field 'policy'; expected one of: policies, shadow, disable"),
        ({"shadow": "true"}, ".shadow", "must be true or false, got a string"),
        ({"disable": "yes"}, ".disable", "must be true or false"),
        ({"policies": []}, ".policies", "must be a mapping, got a list"),
        ({"policies": {"p": "x"}}, ".policies.p", "a policy must be a mapping"),
        ({"policies": {"p": {"principal": []}}}, ".policies.p.principal", "unknown field 'principal'"),
        ({"policies": {"p": {"principals": {}}}}, ".policies.p.principals", "must be a list, got a mapping"),
        ({"policies": {"p": {"principals": [{"jwt": {}}]}}}, ".policies.p.principals[0].jwt",
         "unknown field 'jwt'; expected one of: jwtPrincipal"),
        ({"policies": {"p": {"principals": [{}]}}}, ".policies.p.principals[0].jwtPrincipal",
         "a principal needs a jwtPrincipal"),
        (jp(claims={"a": "b"}, matcher="EXACT"), ".policies.p.principals[0].jwtPrincipal.matcher",
         "unknown matcher 'EXACT'; expected one of: EXACT_STRING, BOOLEAN, LIST_CONTAINS, REGEX_MATCH"),
        (jp(claims={"a": "b"}, matcher="exact_string"), ".policies.p.principals[0].jwtPrincipal.matcher",
         "unknown matcher 'exact_string'"),
        (jp(claims={"v": "yes"}, matcher="BOOLEAN"), ".policies.p.principals[0].jwtPrincipal.claims.v",
         "the BOOLEAN matcher needs true or false, got 'yes'"),
        (jp(claims={"v": 1}, matcher="BOOLEAN"), ".policies.p.principals[0].jwtPrincipal.claims.v",
         "the BOOLEAN matcher needs true or false, got 1"),
        (jp(claims={"level": 1}), ".policies.p.principals[0].jwtPrincipal.claims.level",
         "must be a string, got an integer 1; claims are compared as text under EXACT_STRING"),
        (jp(claims={"admin": True}), ".policies.p.principals[0].jwtPrincipal.claims.admin",
         "must be a string, got a boolean True"),
        (jp(claims={"sub": None}), ".policies.p.principals[0].jwtPrincipal.claims.sub",
         "must be a string, got null"),
        (jp(claims={"roles": ["a"]}, matcher="LIST_CONTAINS"),
         ".policies.p.principals[0].jwtPrincipal.claims.roles", "must be a string, got a list"),
        (jp(claims={"roles": ""}, matcher="LIST_CONTAINS"),
         ".policies.p.principals[0].jwtPrincipal.claims.roles", "must be a non-empty list item"),
        (jp(claims={"sub": "(a"}, matcher="REGEX_MATCH"), ".policies.p.principals[0].jwtPrincipal.claims.sub",
         "REGEX_MATCH pattern '(a' refused: invalid regular expression: missing )"),
        (jp(claims={"sub": r"(a)\1"}, matcher="REGEX_MATCH"),
         ".policies.p.principals[0].jwtPrincipal.claims.sub", "backreferences"),
        (jp(claims={"sub": "(?=admin).*"}, matcher="REGEX_MATCH"),
         ".policies.p.principals[0].jwtPrincipal.claims.sub", "lookahead/lookbehind"),
        (jp(claims={"sub": ""}, provider=""), ".policies.p.principals[0].jwtPrincipal.provider",
         "must be the name of a jwt provider"),
        (jp(claims="sub"), ".policies.p.principals[0].jwtPrincipal.claims", "must be a mapping, got a string"),
        (jp(claims={"a": "b"}, extra=1), ".policies.p.principals[0].jwtPrincipal.extra",
         "unknown field 'extra'; expected one of: claims, provider, matcher"),
        ({"policies": {"p": {"nestedClaimDelimiter": 1}}}, ".policies.p.nestedClaimDelimiter",
         "must be a string such as '.'"),
        ({"policies": {"p": {"nestedClaimDelimiter": ".", "principals": [
            {"jwtPrincipal": {"claims": {"a..b": "x"}}}]}}},
         ".policies.p.principals[0].jwtPrincipal.claims.a..b", "has an empty part"),
        ({"policies": {"p": {"permissions": {"methods": "GET"}}}}, ".policies.p.permissions.methods",
         "must be a list of method names, got a string"),
        ({"policies": {"p": {"permissions": {"methods": []}}}}, ".policies.p.permissions.methods",
         "an empty list would match no method; omit 'methods' to allow every method"),
        ({"policies": {"p": {"permissions": {"methods": ["GET", "GE T"]}}}},
         ".policies.p.permissions.methods[1]", "must be an HTTP method name"),
        ({"policies": {"p": {"permissions": {"pathPrefix": "api"}}}}, ".policies.p.permissions.pathPrefix",
         "must start with '/'"),
        ({"policies": {"p": {"permissions": {"pathPrefix": "/api/../admin"}}}},
         ".policies.p.permissions.pathPrefix", "contains a '.' or '..' segment"),
        ({"policies": {"p": {"permissions": {"pathPrefix": "/api%2fx"}}}},
         ".policies.p.permissions.pathPrefix", "is not a normalised path"),
        ({"policies": {"p": {"permissions": {"pathPrefix": "//api"}}}},
         ".policies.p.permissions.pathPrefix", "is not a normalised path"),
        ({"policies": {"p": {"permissions": {"paths": ["/api"]}}}}, ".policies.p.permissions.paths",
         "unknown field 'paths'; expected one of: methods, pathPrefix"),
    ])
    def test_invalid_options_are_rejected_with_field_path(self, rbac: Any, field: str, reason: str) -> None:
        message = error_of(config(rbac))
        assert f"{VH}{field}: " in message, message
        assert reason in message.split(f"{VH}{field}: ", 1)[1], message

    def test_route_level_error_names_the_route_field(self) -> None:
        text = config({"policies": {}}, routes=[
            route("/a"), route("/b", {"rbac": jp(claims={"x": "y"}, matcher="NOPE")})])
        message = error_of(text)
        assert ("spec.virtualHost.routes[1].options.rbac.policies.p.principals[0]"
                ".jwtPrincipal.matcher: unknown matcher 'NOPE'") in message

    def test_valid_options_compile(self) -> None:
        rbac = {"shadow": False, "disable": False, "policies": {
            "p": {"nestedClaimDelimiter": "", "permissions": {"methods": ["GET", "M-SEARCH"],
                                                              "pathPrefix": "/"},
                  "principals": [{"jwtPrincipal": {"claims": {"a": "true"}, "matcher": "BOOLEAN",
                                                   "provider": "corp"}}]}}}
        make_tester(config(rbac))

    # -- requireRbac ------------------------------------------------------------------


    async def test_require_rbac_denies_routes_without_policy(self) -> None:
        text = config(None, settings={"rbac": {"requireRbac": True}}, routes=[
            route("/covered", {"rbac": {"policies": {"p": policy({"sub": "alice"})}}}),
            route("/public", {"rbac": {"disable": True}}),
            route("/"),
        ])
        t = make_tester(text)
        hdrs = claims_headers({"sub": "alice"})
        r = await t.request("GET", "http://gw.test/other", headers=hdrs)
        assert (r.status, r.body) == (403, b"RBAC: access denied")
        assert r.deny.reason == "requireRbac is set gateway-wide and this route has no RBAC policy"
        assert (await t.request("GET", "http://gw.test/covered", headers=hdrs)).status == 200
        assert (await t.request("GET", "http://gw.test/covered",
                                headers=claims_headers({"sub": "bob"}))).status == 403
        assert (await t.request("GET", "http://gw.test/public")).status == 200

    async def test_require_rbac_virtual_host_policy_covers_its_routes(self) -> None:
        text = config({"policies": {"p": policy({"sub": "alice"})}},
                      settings={"rbac": {"requireRbac": True}})
        t = make_tester(text)
        assert (await t.request("GET", "http://gw.test/x", headers=claims_headers({"sub": "alice"}))).status == 200

    async def test_require_rbac_false_and_absent_leave_routes_open(self) -> None:
        for settings in ({"rbac": {"requireRbac": False}}, {"rbac": {}}, None):
            t = make_tester(config(None, settings=settings))
            assert (await t.request("GET", "http://gw.test/x")).status == 200, settings

    @pytest.mark.parametrize("settings,field,reason", [
        ({"requireRbac": "true"}, "requireRbac", "must be true or false, got a string 'true'"),
        ({"requireRBAC": True}, "requireRBAC", "unknown field 'requireRBAC'; expected one of: requireRbac"),
    ])
    def test_invalid_settings_are_rejected(self, settings: Any, field: str, reason: str) -> None:
        # Reported at Settings.spec.rbac.<field> when a route falls back to the default ...
        message = error_of(config(None, settings={"rbac": settings}))
        assert f"Settings.spec.rbac.{field}: {reason}" in message, message
        # ... and on the rbac options when every route has its own.
        message = error_of(config({"policies": {}}, settings={"rbac": settings}))
        assert f"{VH}: the gateway-wide Settings spec.rbac.{field} is invalid: {reason}" in message, message

    def test_internal_keys_cannot_be_forged_from_yaml(self) -> None:
        message = error_of(config({"_settingsError": ["x", "y"], "policies": {}}))
        assert f"{VH}._settingsError: unknown field '_settingsError'" in message, message

    def test_the_internal_required_marker_cannot_be_written_in_yaml(self):
        """``requireRbac`` marks its default options with an object YAML cannot
    write; a configuration that writes the key itself is refused."""
        from twistgw.sdk import OptionsError
        from twistgw_rbac._policy import compile_options

        with pytest.raises(OptionsError) as info:
            compile_options({"policies": {}, "_requiredBySettings": True})
        assert info.value.path == ("_requiredBySettings",)
