"""Gloo's ``booleanExpr`` over named LDAP configs of one AuthConfig, against
a real slapd: &&, ||, !, parentheses, short-circuiting, errors that stop the
evaluation, and every malformed expression refused when the config loads."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
import yaml
from ldap_helpers import MANAGERS_DN, basic, ldap_config, make_tester
from slapd import free_port

from twistgw.sdk.testing import ConfigError

URL = "http://api.example.com/pets"
DEVELOPERS_DN = "cn=developers,ou=groups,dc=example,dc=org"


def expr_config(address: str, expr: str | None, names: tuple[str, ...] = ("managers", "developers"),
                down: str | None = None, **spec: Any) -> str:
    """An AuthConfig whose configs are named: ``managers`` (allowedGroups
    managers), ``developers``, and, when ``down`` names one, a config whose
    directory refuses connections."""
    docs = list(yaml.safe_load_all(ldap_config(address, cacheTtl=0)))
    auth = next(d for d in docs if d["kind"] == "AuthConfig")
    base = auth["spec"]["configs"][0]["ldap"]
    groups = {"managers": MANAGERS_DN, "developers": DEVELOPERS_DN, "down": MANAGERS_DN}
    configs = []
    for name in names:
        ldap = {**base, "allowedGroups": [groups.get(name, MANAGERS_DN)]}
        if name == down:
            ldap["address"] = f"ldap://127.0.0.1:{free_port()}"
        configs.append({"name": name, "ldap": ldap})
    auth["spec"] = {"configs": configs, **spec}
    if expr is not None:
        auth["spec"]["booleanExpr"] = expr
    return yaml.safe_dump_all(docs)


async def status(tester: Any, user: str | None, password: str = "") -> int:
    headers = basic(user, password) if user is not None else {}
    return (await tester.request("GET", URL, headers=headers)).status


PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}


@pytest.mark.parametrize("expr, expected", [
    # alice: managers and developers; bob: developers; carol: neither
    ("managers || developers", {"alice": 200, "bob": 200, "carol": 403}),
    ("managers && developers", {"alice": 200, "bob": 403, "carol": 403}),
    ("developers && !managers", {"alice": 403, "bob": 200, "carol": 403}),
    ("!(managers || developers)", {"alice": 403, "bob": 403, "carol": 200}),
    ("(managers) || (developers && !managers)", {"alice": 200, "bob": 200, "carol": 403}),
])
@pytest_twisted.ensureDeferred
async def test_expressions_combine_the_named_configs(slapd_open: Any, expr: str, expected: dict) -> None:
    tester = make_tester(expr_config(slapd_open.url, expr))
    for user, code in expected.items():
        assert await status(tester, user, PASSWORDS[user]) == code, (expr, user)
    # a wrong password is a refusal of every config (401 where the result is false)
    if expected["carol"] == 403:
        assert await status(tester, "alice", "wrong") == 401
        assert await status(tester, None) == 401


@pytest_twisted.ensureDeferred
async def test_admission_names_the_user_and_short_circuits(slapd_open: Any) -> None:
    tester = make_tester(expr_config(slapd_open.url, "managers || developers"))
    before = len(slapd_open.binds())
    result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
    assert result.status == 200 and result.ctx.principal == "alice"
    # managers admitted: developers was never asked (one user bind, not two)
    assert slapd_open.binds()[before:] == ["uid=alice,ou=people,dc=example,dc=org"]
    before = len(slapd_open.binds())
    assert await status(tester, "bob", "bob-pw") == 200
    assert slapd_open.binds()[before:] == ["uid=bob,ou=people,dc=example,dc=org"] * 2


@pytest_twisted.ensureDeferred
async def test_a_directory_error_stops_the_evaluation(slapd_open: Any) -> None:
    """An error is never "false": ``!down`` must not admit when ``down``
    cannot be asked, and ``down || managers`` answers the error."""
    names = ("managers", "down")
    assert await status(make_tester(expr_config(slapd_open.url, "managers || down", names, down="down")),
                        "alice", "alice-pw") == 200  # short-circuit: down never asked
    for expr in ("down || managers", "!down && managers", "managers && !down"):
        tester = make_tester(expr_config(slapd_open.url, expr, names, down="down"))
        result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
        assert (result.status, result.body) == (503, b""), expr


@pytest.mark.parametrize("expr, spec, reason", [
    ("managers || admins", {}, "names 'admins', which is not a config of this AuthConfig"),
    ("managers ||", {}, "ends where a config name"),
    ("(managers || developers", {}, "has a '(' without its ')'"),
    ("managers developers", {}, "unexpected 'developers' after a complete expression"),
    ("managers | developers", {}, "unexpected '| developers'"),
    ("managers", {}, "does not use the config(s) developers"),
    ("", {}, "must not be empty"),
    (None, {"failOnRedirect": True}, "failOnRedirect: applies to OAuth2/OIDC redirects"),
])
def test_malformed_expressions_are_configuration_errors(expr: str | None, spec: dict, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_tester(expr_config("ldap://127.0.0.1:1", expr, **spec))
    assert len([i for i in info.value.issues if reason in str(i)]) == 1, info.value.issues


def test_config_names_must_be_unique_and_well_formed() -> None:
    for names, reason in ((("managers", "managers"), "'managers' is also the name of spec.configs[0]"),
                          (("managers", "two words"), "must be a name of letters")):
        with pytest.raises(ConfigError) as info:
            make_tester(expr_config("ldap://127.0.0.1:1", "managers", names))
        assert reason in info.value.issues[0].reason


@pytest_twisted.ensureDeferred
async def test_unnamed_configs_are_config_0_1_and_without_expr_all_must_admit(slapd_open: Any) -> None:
    docs = list(yaml.safe_load_all(expr_config(slapd_open.url, "config_0 || config_1")))
    for c in next(d for d in docs if d["kind"] == "AuthConfig")["spec"]["configs"]:
        del c["name"]
    tester = make_tester(yaml.safe_dump_all(docs))
    assert await status(tester, "bob", "bob-pw") == 200
    # names are allowed without booleanExpr: then every config must admit, in order
    plain = make_tester(expr_config(slapd_open.url, None))
    assert await status(plain, "alice", "alice-pw") == 200
    assert await status(plain, "bob", "bob-pw") == 403
