"""Issue 23's LDAP items, against a real slapd: a booleanExpr never names a
principal who did not authenticate (8), a fail-open admission forwards no
credentials (9), statusOnError must be a final status with a body (13), the
directory's own name for a user is the identity (15), a certificate with no
subjectAltName is refused (17), and legal names with filter specials log in
with userSearch (20). Items 17 to 21 against Active Directory:
test_ldap_active_directory.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from ldap_helpers import basic, ldap_config, ldap_state, make_tester
from slapd import SUFFIX, free_port
from twisted.internet import reactor, task

from twistgw.sdk.testing import ConfigError

URL = "http://api.example.com/pets"
PEOPLE = {"baseDn": f"ou=people,{SUFFIX}", "filter": "(uid=%s)"}
DEVELOPERS = f"cn=developers,ou=groups,{SUFFIX}"


def with_settings(text: str, **extauth: Any) -> str:
    return text + ("---\napiVersion: gateway.vendor.io/v1\nkind: Settings\nmetadata: {name: settings}\n"
                   f"spec: {{extauth: {json.dumps(extauth)}}}\n")


def expression(text: str, expr: str) -> str:
    """``text``'s AuthConfig with its two configs named managers and staff
    (developers) and the booleanExpr ``expr``."""
    named = 'booleanExpr: "' + expr + '"\n  configs: [{"name": "managers", "ldap":'
    text = text.replace('configs: [{"ldap":', named, 1)
    return text.replace('}, {"ldap":', '}, {"name": "staff", "ldap":', 1)


# -- 8: booleanExpr never names an unauthenticated principal ---------------


@pytest_twisted.ensureDeferred
async def test_not_expression_admits_a_wrong_password_without_naming_anyone(slapd_open: Any) -> None:
    text = expression(ldap_config(slapd_open.url, {"allowedGroups": [DEVELOPERS]}, cacheTtl=0),
                      "!staff || managers")
    with pytest.warns(Warning, match="admits requests that no config authenticated"):
        tester = make_tester(text)
    # bob's bind fails: staff is false, so !staff admits (Gloo's semantics)...
    wrong = await tester.request("GET", URL, headers=basic("bob", "wrong"))
    assert wrong.status == 200
    # ...but nobody authenticated: no principal, in the context or the access log
    assert wrong.ctx.principal is None and wrong.ctx.state["extauth"]["user"] is None
    # carol's password is right and she is not staff: she authenticated, so she is named
    carol = await tester.request("GET", URL, headers=basic("carol", "carol-pw"))
    assert carol.status == 200 and carol.ctx.principal == "carol"
    # bob is staff and not a manager: the expression is false
    assert (await tester.request("GET", URL, headers=basic("bob", "bob-pw"))).status == 403
    # alice is both: admitted by managers, and named
    alice = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
    assert alice.status == 200 and alice.ctx.principal == "alice"


def test_check_warns_about_an_expression_that_admits_unauthenticated_requests(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(expression(ldap_config("ldap://127.0.0.1:1", {}), "managers || !staff"))
    out = subprocess.run([sys.executable, "-m", "twistgw", "check", str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "warning: AuthConfig default/ldap: spec.booleanExpr 'managers || !staff' is true when every config" \
           " refuses" in out.stdout + out.stderr
    (tmp_path / "c.yaml").write_text(expression(ldap_config("ldap://127.0.0.1:1", {}), "managers || staff"))
    quiet = subprocess.run([sys.executable, "-m", "twistgw", "check", str(tmp_path)], capture_output=True,
                           text=True, timeout=120)
    assert quiet.returncode == 0 and "warning" not in quiet.stdout + quiet.stderr


# -- 9: fail-open admission forwards no credentials --------------------------


@pytest.mark.parametrize("keep", [False, True])
@pytest_twisted.ensureDeferred
async def test_failure_mode_allow_forwards_authorization_only_when_kept(keep: bool) -> None:
    down = f"ldap://127.0.0.1:{free_port()}"
    tester = make_tester(with_settings(ldap_config(down, cacheTtl=0, keepCredentials=keep), failureModeAllow=True))
    result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
    assert result.status == 200 and result.ctx.principal is None  # admitted by failureModeAllow
    assert result.forwarded_headers.hasHeader(b"authorization") is keep


# -- 13: statusOnError must end the exchange ---------------------------------


@pytest.mark.parametrize("status, reason", [
    (100, "is not a final status"), (101, "is not a final status"), (103, "is not a final status"),
    (204, "204 No Content is a status without a body"), (205, "205 Reset Content"), (304, "304 Not Modified"),
])
def test_status_on_error_must_be_final_with_a_body(status: int, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_tester(with_settings(ldap_config("ldap://127.0.0.1:1"), statusOnError=status))
    (issue,) = info.value.issues
    assert (issue.resource, issue.field) == ("Settings", "spec.extauth.statusOnError")
    assert reason in issue.reason


# -- 15: the directory's name is the identity -------------------------------


@pytest_twisted.ensureDeferred
async def test_user_search_forwards_and_caches_the_directory_name(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, userSearch=PEOPLE, disableGroupChecking=True,
                                     allowedGroups=[], userHeader="X-User", cacheTtl=60))
    for typed in ("carol", "CAROL", "Carol", "\uff43arol"):  # the last starts with a fullwidth c
        result = await tester.request("GET", URL, headers=basic(typed, "carol-pw"))
        assert result.status == 200, (typed, result.status)
        assert result.ctx.principal == "carol", typed
        assert result.forwarded_headers.getRawHeaders(b"x-user") == [b"carol"], typed
    # one identity, so one verdict in the decision cache (keyed by the directory's name)
    (cache,) = [c for c in ldap_state(tester).caches.values() if len(c)]
    assert [user for user, _ in cache._entries] == ["carol"]
    binds = len(slapd_open.binds())
    again = await tester.request("GET", URL, headers=basic("CAROL", "carol-pw"))
    assert again.status == 200 and "(cached)" in again.trace[-1][2].reason
    assert len(slapd_open.binds()) == binds
    assert (await tester.request("GET", URL, headers=basic("CAROL", "wrong"))).status == 401


@pytest_twisted.ensureDeferred
async def test_username_attribute_names_the_attribute(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, userSearch={**PEOPLE, "usernameAttribute": "cn"},
                                     disableGroupChecking=True, allowedGroups=[], userHeader="X-User", cacheTtl=0))
    result = await tester.request("GET", URL, headers=basic("CAROL", "carol-pw"))
    assert result.status == 200 and result.ctx.principal == "Carol"  # cn: Carol
    missing = make_tester(ldap_config(slapd_open.url, userSearch={**PEOPLE, "usernameAttribute": "mail"},
                                      disableGroupChecking=True, allowedGroups=[], cacheTtl=0))
    refused = await missing.request("GET", URL, headers=basic("carol", "carol-pw"))
    assert refused.status == 500 and "set userSearch.usernameAttribute" in refused.deny.reason


# -- 20: legal names with specials log in with userSearch -------------------


@pytest.mark.parametrize("user, password", [("qa(lead)", "qa-pw"), ("ops#1", "ops-pw"), ("x,y=z", "xyz-pw")])
@pytest_twisted.ensureDeferred
async def test_user_search_escapes_legal_names_instead_of_stripping(slapd_open: Any, user: str,
                                                                    password: str) -> None:
    tester = make_tester(ldap_config(slapd_open.url, userSearch=PEOPLE, disableGroupChecking=True,
                                     allowedGroups=[], userHeader="X-User", cacheTtl=0))
    result = await tester.request("GET", URL, headers=basic(user, password))
    assert result.status == 200, result.deny
    assert result.ctx.principal == user
    # a DN template still strips what would change the DN's structure: no such entry
    template = make_tester(ldap_config(slapd_open.url, disableGroupChecking=True, allowedGroups=[], cacheTtl=0))
    assert (await template.request("GET", URL, headers=basic(user, password))).status == 401
    await task.deferLater(reactor, 0, lambda: None)


# -- 17: a certificate without subjectAltName is refused ---------------------


@pytest_twisted.ensureDeferred
async def test_a_certificate_without_subject_alt_name_is_refused(slapd_factory: Any) -> None:
    from twisted.logger import globalLogPublisher

    server = slapd_factory(tls=True, san=False)  # the trusted CA's certificate names localhost by CN only
    ca = str(server.directory / "ca.pem")
    logged: list[str] = []

    def observer(event: dict[str, Any]) -> None:
        from twisted.logger import formatEvent

        logged.append(formatEvent(event))

    globalLogPublisher.addObserver(observer)
    try:
        for address, extra in ((f"ldaps://127.0.0.1:{server.tls_port}", {}), (server.url, {"startTLS": True})):
            tester = make_tester(ldap_config(address, cacheTtl=0, tls={"caFile": ca, "serverName": "localhost"},
                                             **extra))
            binds = len(server.binds())
            result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
            assert (result.status, result.body) == (503, b""), address
            assert "subjectAltName" in result.deny.reason, result.deny.reason
            assert len(server.binds()) == binds  # the password was never sent
    finally:
        globalLogPublisher.removeObserver(observer)
    assert sum("unavailable" in line and "subjectAltName" in line for line in logged) == 2, logged
