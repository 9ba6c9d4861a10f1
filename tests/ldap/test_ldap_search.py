"""Directories as they are shaped, against a real slapd: search-then-bind
(``userSearch``), groups found by search (``groupSearch``), nested groups and
a membership cycle, the groups and user headers sent upstream, and the
Authorization header kept at the gateway (``keepCredentials``)."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from ldap_helpers import PLUGINS, SA_SETTINGS, basic, ldap_config, ldap_state, make_tester
from slapd import ALL_STAFF, CONTRACTORS, DEVELOPERS, ENGINEERING, LOOP_A, LOOP_B, MANAGERS, SERVICE_DN
from twisted.internet import reactor, task

from twistgw_ldap import _credentials


URL = "http://api.example.com/pets"
SUFFIX = "dc=example,dc=org"
ALICE_DN = f"uid=alice,ou=people,{SUFFIX}"
BOB_DN = f"uid=bob,ou=people,{SUFFIX}"
DAVE_DN = f"uid=dave,ou=contractors,{SUFFIX}"
SA_REF = {"name": "ldap-sa", "namespace": "default"}
#: both OUs, one filter
EVERYONE = {"baseDn": SUFFIX, "filter": "(&(objectClass=inetOrgPerson)(uid=%s))"}
GROUPS = {"baseDn": f"ou=groups,{SUFFIX}"}


def sleep(seconds: float) -> Any:
    return task.deferLater(reactor, seconds, lambda: None)


def searches(server: Any, since: int) -> list[str]:
    """The filters of every search slapd logged after ``since`` characters of its log."""
    return re.findall(r'SRCH base="[^"]*" scope=\d deref=\d filter="([^"]*)"', server.log_text()[since:])


def log_mark(server: Any) -> int:
    return len(server.log_text())


def assert_status(result: Any, status: int) -> None:
    assert result.status == status, (result.status, result.deny)
    if status != 200:
        assert result.body == b""


# ---------------------------------------------------------------------------
# userSearch
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_one_user_search_finds_users_in_both_ous(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, userSearch=EVERYONE,
                                     allowedGroups=[MANAGERS, f"cn=contractors,ou=groups,{SUFFIX}"]))
    before, mark = len(slapd_open.binds()), log_mark(slapd_open)
    alice = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
    dave = await tester.request("GET", URL, headers=basic("dave", CONTRACTORS["dave"][0]))
    assert_status(alice, 200)
    assert_status(dave, 200)
    assert alice.ctx.principal == "alice" and dave.ctx.principal == "dave"
    await sleep(0.05)
    # anonymous search, then the bind as the DN found
    assert slapd_open.binds()[before:] == ["", ALICE_DN, "", DAVE_DN]
    assert searches(slapd_open, mark)[::2] == ["(&(objectClass=inetOrgPerson)(uid=alice))",
                                               "(&(objectClass=inetOrgPerson)(uid=dave))"]


@pytest_twisted.ensureDeferred
async def test_wrong_password_unknown_user_and_ambiguous_match_are_401(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, userSearch=EVERYONE))
    before = len(slapd_open.binds())
    wrong = await tester.request("GET", URL, headers=basic("alice", "wrong"))
    unknown = await tester.request("GET", URL, headers=basic("mallory", "x"))
    # sam is in ou=people and in ou=contractors: which one? Neither.
    ambiguous = await tester.request("GET", URL, headers=basic("sam", "sam-pw"))
    for result in (wrong, unknown, ambiguous):
        assert_status(result, 401)
        assert (b"www-authenticate", b'Basic realm="twistgw", charset="UTF-8"') in result.response_headers
    assert "no entry matches userSearch (&(objectClass=inetOrgPerson)(uid=mallory))" in unknown.deny.reason
    assert "several entries match" in ambiguous.deny.reason
    await sleep(0.05)
    # only alice's DN was ever bound with a user's password
    assert [b for b in slapd_open.binds()[before:] if b] == [ALICE_DN]


@pytest_twisted.ensureDeferred
async def test_scope_one_and_the_base_decide_where_users_are(slapd_open: Any) -> None:
    people_only = {"baseDn": f"ou=people,{SUFFIX}", "filter": "(uid=%s)", "scope": "one"}
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, userSearch=people_only,
                                     disableGroupChecking=True, allowedGroups=[]))
    assert_status(await tester.request("GET", URL, headers=basic("sam", "sam-pw")), 200)  # unique here
    assert_status(await tester.request("GET", URL, headers=basic("dave", "dave-pw")), 401)  # not under the base
    # scope one sees the children of the base only, not the base's grandchildren
    whole = {"baseDn": SUFFIX, "filter": "(uid=%s)", "scope": "one"}
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, userSearch=whole,
                                     disableGroupChecking=True, allowedGroups=[]))
    assert_status(await tester.request("GET", URL, headers=basic("alice", "alice-pw")), 401)


@pytest.mark.parametrize("user", ["al*", "*", "a*e", "*)(uid=*", "al\\2a", "al\x00*", "(uid=alice)", "alice)(|(uid=*"])
@pytest_twisted.ensureDeferred
async def test_filter_metacharacters_never_widen_the_match(slapd_open: Any, user: str) -> None:
    """Each of these would find alice (or everyone) if it reached the filter
    unescaped; with alice's password it would then be admitted."""
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, userSearch=EVERYONE,
                                     disableGroupChecking=True, allowedGroups=[]))
    before, mark = len(slapd_open.binds()), log_mark(slapd_open)
    result = await tester.request("GET", URL, headers=basic(user, "alice-pw"))
    assert_status(result, 401)
    await sleep(0.05)
    assert ALICE_DN not in slapd_open.binds()[before:]
    for text in searches(slapd_open, mark):
        # the value slapd searched for holds no wildcard and no extra clause
        value = text[len("(&(objectClass=inetOrgPerson)(uid="):-2]
        assert "*" not in value and "(" not in value and ")" not in value, text


@pytest_twisted.ensureDeferred
async def test_search_account_sees_what_anonymous_cannot(slapd_strict: Any) -> None:
    # the strict directory hides ou=contractors from anonymous searches
    anonymous = make_tester(ldap_config(slapd_strict.url, cacheTtl=0, userSearch=EVERYONE,
                                        disableGroupChecking=True, allowedGroups=[]))
    assert_status(await anonymous.request("GET", URL, headers=basic("dave", "dave-pw")), 401)
    with_account = make_tester(ldap_config(slapd_strict.url, cacheTtl=0,
                                           userSearch={**EVERYONE, "credentialsSecretRef": SA_REF},
                                           disableGroupChecking=True, allowedGroups=[]))
    before = len(slapd_strict.binds())
    assert_status(await with_account.request("GET", URL, headers=basic("dave", "dave-pw")), 200)
    await sleep(0.05)
    assert slapd_strict.binds()[before:] == [SERVICE_DN, DAVE_DN]


@pytest_twisted.ensureDeferred
async def test_search_account_that_cannot_bind_is_500(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, secret_password="not-it",
                                     userSearch={**EVERYONE, "credentialsSecretRef": SA_REF}))
    result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
    assert_status(result, 500)
    assert "could not bind for the user search" in result.deny.reason and "not-it" not in result.deny.reason


@pytest_twisted.ensureDeferred
async def test_user_search_base_that_does_not_exist_is_500(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0,
                                     userSearch={"baseDn": f"ou=nowhere,{SUFFIX}", "filter": "(uid=%s)"}))
    result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
    assert_status(result, 500)
    assert "base DN does not exist" in result.deny.reason


# ---------------------------------------------------------------------------
# groupSearch
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_group_search_where_users_cannot_read_member_of(slapd_strict: Any) -> None:
    # memberOf is hidden from alice (test_ldap_slapd: 403 without a service
    # account); the groups themselves are readable, so a search finds them.
    hidden = make_tester(ldap_config(slapd_strict.url, cacheTtl=0))
    assert_status(await hidden.request("GET", URL, headers=basic("alice", "alice-pw")), 403)
    tester = make_tester(ldap_config(slapd_strict.url, cacheTtl=0, groupSearch=GROUPS))
    before, mark = len(slapd_strict.binds()), log_mark(slapd_strict)
    assert_status(await tester.request("GET", URL, headers=basic("alice", "alice-pw")), 200)
    bob = await tester.request("GET", URL, headers=basic("bob", "bob-pw"))
    assert_status(bob, 403)
    assert f"groups by groupSearch: {DEVELOPERS}, {LOOP_A}" in bob.deny.reason
    await sleep(0.05)
    assert slapd_strict.binds()[before:] == [ALICE_DN, BOB_DN]  # searched as the users themselves
    assert searches(slapd_strict, mark) == [f"(member={ALICE_DN})", f"(member={BOB_DN})"]


@pytest_twisted.ensureDeferred
async def test_group_search_as_the_service_account(slapd_strict: Any) -> None:
    tester = make_tester(ldap_config(slapd_strict.url, cacheTtl=0, groupSearch=GROUPS,
                                     groupLookupSettings=SA_SETTINGS))
    before = len(slapd_strict.binds())
    assert_status(await tester.request("GET", URL, headers=basic("alice", "alice-pw")), 200)
    await sleep(0.05)
    assert slapd_strict.binds()[before:] == [ALICE_DN, SERVICE_DN]


@pytest_twisted.ensureDeferred
async def test_nested_groups_admit_only_with_nested_true(slapd_open: Any) -> None:
    flat = make_tester(ldap_config(slapd_open.url, cacheTtl=0, userSearch=EVERYONE,
                                   groupSearch=GROUPS, allowedGroups=[ENGINEERING]))
    nested = make_tester(ldap_config(slapd_open.url, cacheTtl=0, userSearch=EVERYONE,
                                     groupSearch={**GROUPS, "nested": True}, allowedGroups=[ENGINEERING]))
    for user, password in (("bob", "bob-pw"), ("dave", "dave-pw")):
        assert_status(await flat.request("GET", URL, headers=basic(user, password)), 403)
        result = await nested.request("GET", URL, headers=basic(user, password))
        assert_status(result, 200)
        assert f"allowed group matched: {ENGINEERING}" in result.trace[-1][2].reason
    assert_status(await nested.request("GET", URL, headers=basic("carol", "carol-pw")), 403)


@pytest_twisted.ensureDeferred
async def test_max_depth_bounds_the_levels(slapd_open: Any) -> None:
    # bob -> developers -> engineering (nested level 2) -> all-staff (level 3)
    for depth, status in ((1, 403), (2, 200)):
        tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, allowedGroups=[ALL_STAFF],
                                         groupSearch={**GROUPS, "nested": True, "maxDepth": depth}))
        assert_status(await tester.request("GET", URL, headers=basic("bob", "bob-pw")), status)


@pytest_twisted.ensureDeferred
async def test_a_membership_cycle_terminates(slapd_open: Any) -> None:
    # loop-a lists bob and loop-b; loop-b lists loop-a
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, allowedGroups=[LOOP_B], groupsHeader="X-Groups",
                                     groupSearch={**GROUPS, "nested": True, "maxDepth": 64}))
    mark = log_mark(slapd_open)
    result = await tester.request("GET", URL, headers=basic("bob", "bob-pw"))
    assert_status(result, 200)
    assert result.forwarded_headers.getRawHeaders(b"x-groups") == [b"all-staff,developers,engineering,loop-a,loop-b"]
    await sleep(0.05)
    # one search per level until a level finds nothing new: far fewer than 64
    assert len(searches(slapd_open, mark)) == 4
    assert f"{LOOP_B} (nested, level 2)" in result.trace[-1][2].reason


# ---------------------------------------------------------------------------
# What the backend sees
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_backend_sees_trustworthy_headers_and_never_the_password(slapd_open: Any, backend: Any,
                                                                       gateway: Any, tmp_path: Path) -> None:
    from support.http import http_request

    def serve(**fields: Any) -> Any:
        directory = tmp_path / f"config{len(list(tmp_path.iterdir()))}"
        directory.mkdir()
        text = ldap_config(slapd_open.url, cacheTtl=0, groupsHeader="X-Auth-Groups", userHeader="X-Auth-User",
                           userSearch=EVERYONE, groupSearch={**GROUPS, "nested": True},
                           allowedGroups=[ENGINEERING], **fields)
        (directory / "config.yaml").write_text(text.replace("port: 9}", f"port: {backend.port}}}"))
        return gateway(str(directory), plugins=PLUGINS)

    forged = {"X-Auth-Groups": "admins", "x-auth-user": "root"}
    gw = serve()
    response = await http_request("GET", gw.url("/pets"), headers={**basic("dave", "dave-pw"), **forged})
    assert response.status == 200
    seen = backend.requests[-1]
    assert seen.header(b"x-auth-groups") == [b"all-staff,contractors,engineering"]
    assert seen.header(b"x-auth-user") == [b"dave"]
    assert seen.header(b"authorization") is None
    # refused requests never reach the backend, forged headers or not
    count = len(backend.requests)
    assert (await http_request("GET", gw.url("/pets"), headers={**basic("carol", "carol-pw"), **forged})).status == 403
    assert len(backend.requests) == count
    # keepCredentials: true forwards the Authorization header as the client sent it
    gw = serve(keepCredentials=True)
    response = await http_request("GET", gw.url("/pets"), headers={**basic("dave", "dave-pw"), **forged})
    assert response.status == 200
    assert backend.requests[-1].header(b"authorization") == [basic("dave", "dave-pw")["Authorization"].encode()]
    assert backend.requests[-1].header(b"x-auth-groups") == [b"all-staff,contractors,engineering"]


@pytest_twisted.ensureDeferred
async def test_groups_header_from_the_membership_attribute(slapd_open: Any) -> None:
    # without groupSearch the names are the first RDN values of memberOf's DNs
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, groupsHeader="X-Groups", userHeader="X-User"))
    result = await tester.request("GET", URL, headers={**basic("alice", "alice-pw"), "X-Groups": "root"})
    assert_status(result, 200)
    assert result.forwarded_headers.getRawHeaders(b"x-groups") == [b"developers,managers"]
    assert result.forwarded_headers.getRawHeaders(b"x-user") == [b"alice"]
    assert not result.forwarded_headers.hasHeader(b"authorization")


@pytest_twisted.ensureDeferred
async def test_user_without_groups_gets_no_groups_header(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, groupsHeader="X-Groups", groupSearch=GROUPS,
                                     disableGroupChecking=True, allowedGroups=[]))
    result = await tester.request("GET", URL, headers={**basic("carol", "carol-pw"), "X-Groups": "managers"})
    assert_status(result, 200)
    assert not result.forwarded_headers.hasHeader(b"x-groups")


@pytest_twisted.ensureDeferred
async def test_cache_hit_carries_the_groups_and_keys_on_the_password(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=60, groupsHeader="X-Groups",
                                     userSearch=EVERYONE, groupSearch={**GROUPS, "nested": True},
                                     allowedGroups=[ENGINEERING]))
    first = await tester.request("GET", URL, headers=basic("dave", "dave-pw"))
    await sleep(0.05)
    binds = slapd_open.bind_count()
    second = await tester.request("GET", URL, headers={**basic("dave", "dave-pw"), "X-Groups": "admins"})
    assert first.status == second.status == 200
    assert second.forwarded_headers.getRawHeaders(b"x-groups") == [b"all-staff,contractors,engineering"]
    assert "(cached)" in second.trace[-1][2].reason and "found by userSearch" in second.trace[-1][2].reason
    assert_status(await tester.request("GET", URL, headers=basic("dave", "dave-pw2")), 401)
    await sleep(0.05)
    assert slapd_open.bind_count() == binds + 2  # the wrong password went to the directory (search + bind)
    (cache,) = [c for c in ldap_state(tester).caches.values() if len(c)]
    assert b"dave-pw" not in repr(cache._entries).encode()


# ---------------------------------------------------------------------------
# twistgw explain
# ---------------------------------------------------------------------------


def test_explain_shows_the_search_that_found_the_user_and_the_groups(slapd_open: Any, tmp_path: Path) -> None:
    text = ldap_config(slapd_open.url, cacheTtl=0, userSearch=EVERYONE, groupSearch={**GROUPS, "nested": True},
                       allowedGroups=[ENGINEERING])
    (tmp_path / "config.yaml").write_text(text)
    auth = base64.b64encode(b"dave:dave-pw").decode()
    out = subprocess.run([sys.executable, "-m", "twistgw", "explain", str(tmp_path), "GET", URL,
                          "-H", f"Authorization: Basic {auth}", "--live"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(x for x in out.stdout.splitlines() if "extauth.authenticate" in x)
    assert "allow" in line
    assert (f"dave is {DAVE_DN} (found by userSearch (&(objectClass=inetOrgPerson)(uid=dave))"
            f" under {SUFFIX} (scope sub))") in line
    assert f"cn=contractors,ou=groups,{SUFFIX}, {ENGINEERING} (nested, level 2)" in line
    assert f"allowed group matched: {ENGINEERING}" in line
    assert "dave-pw" not in out.stdout and auth not in out.stdout


@pytest.mark.parametrize("value", ["al*", "*", "*)(uid=*", "a*c*", "al\x00*", "a*e"])
@pytest_twisted.ensureDeferred
async def test_escaping_reaches_the_directory_as_a_literal_value(slapd_open: Any, value: str) -> None:
    """Below the user-name cleaning: the filter template itself, sent to
    slapd, matches the value literally, where the same text pasted into the
    filter unescaped would match alice."""
    from twistgw_ldap._ldaptor import parse_filter

    from twistgw_ldap._client import bind, connect, search
    from twistgw_ldap._filter import compile_filter
    from twistgw_ldap._model import Target

    client = await connect(reactor, Target("127.0.0.1", slapd_open.port, "ldap"), 2)
    try:
        assert await bind(client, "", b"", 2, reactor) == 0
        template = compile_filter("(&(objectClass=inetOrgPerson)(uid=%s))")
        code, escaped = await search(client, SUFFIX, template.encode(value), ["1.1"], 2, reactor, scope=2)
        assert (code, escaped) == (0, [])
        raw = parse_filter(f"(&(objectClass=inetOrgPerson)(uid={value.replace(chr(0), '')}))")
        code, pasted = await search(client, SUFFIX, raw.toWire(), ["1.1"], 2, reactor, scope=2, size_limit=0)
        assert ALICE_DN.encode() in [e.objectName for e in pasted], value
    finally:
        client.abort()


# ---------------------------------------------------------------------------
# Read as an outside tester would (issue 16 review): names the directory has
# never seen, group DNs spelled differently, the cache across a reload
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_non_ascii_names_are_searched_literally(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, userSearch=EVERYONE,
                                     disableGroupChecking=True, allowedGroups=[]))
    mark = len(slapd_open.log_text())
    for user in ("ålice", "alice\u00e9", "\u0430lice"):  # å, é, a Cyrillic a
        result = await tester.request("GET", URL, headers=basic(user, "alice-pw"))
        assert result.status == 401, user
    await sleep(0.05)
    sent = searches(slapd_open, mark)
    assert len(sent) == 3 and all("lice" in f for f in sent), sent
    assert ALICE_DN not in slapd_open.binds()[-3:]


@pytest_twisted.ensureDeferred
async def test_long_names_up_to_the_limit_are_asked_longer_ones_refused_without_asking(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, userSearch=EVERYONE,
                                     disableGroupChecking=True, allowedGroups=[]))
    mark = len(slapd_open.log_text())
    at_limit = await tester.request("GET", URL, headers=basic("a" * _credentials.MAX_USERNAME, "x"))
    assert at_limit.status == 401 and "no entry matches" in at_limit.deny.reason
    await sleep(0.05)
    assert len(searches(slapd_open, mark)) == 1
    mark = len(slapd_open.log_text())
    for user in ("a" * (_credentials.MAX_USERNAME + 1), "é" * 200 + "a" * 100, "a" * 10_000):
        result = await tester.request("GET", URL, headers=basic(user, "x"))
        assert result.status == 401 and result.body == b"", user
    await sleep(0.05)
    assert searches(slapd_open, mark) == []


@pytest_twisted.ensureDeferred
async def test_allowed_groups_compare_as_dns_against_searched_groups(slapd_open: Any) -> None:
    spelled = " CN=Managers , OU=Groups,DC=Example,  DC=ORG "
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, groupSearch=GROUPS, allowedGroups=[spelled]))
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    assert (await tester.request("GET", URL, headers=basic("bob", "bob-pw"))).status == 403


@pytest_twisted.ensureDeferred
async def test_a_reload_never_serves_a_decision_cached_under_the_old_configuration(
        slapd_open: Any, backend: Any, gateway: Any, tmp_path: Path) -> None:
    from support.http import http_request

    def write(**fields: Any) -> None:
        text = ldap_config(slapd_open.url, cacheTtl="5m", groupsHeader="X-Groups", **fields)
        (tmp_path / "config.yaml").write_text(text.replace("port: 9}", f"port: {backend.port}}}"))

    async def status(user: str, password: str) -> int:
        return (await http_request("GET", gw.url("/pets"), headers=basic(user, password))).status

    write(allowedGroups=[MANAGERS])
    gw = gateway(str(tmp_path), plugins=PLUGINS)
    assert (await status("alice", "alice-pw"), await status("bob", "bob-pw")) == (200, 403)
    assert (await status("alice", "alice-pw"), await status("bob", "bob-pw")) == (200, 403)  # cached
    binds = slapd_open.bind_count()
    assert await status("alice", "wrong-pw") == 401  # a changed password is asked, never a hit
    await sleep(0.05)
    assert slapd_open.bind_count() == binds + 1

    write(allowedGroups=[DEVELOPERS], userHeader="X-User")  # bob in, alice still in (developers)
    assert gw.reload()
    assert (await status("bob", "bob-pw"), await status("alice", "alice-pw")) == (200, 200)
    assert backend.requests[-1].header(b"x-user") == [b"alice"]  # the new config's headers, not the cached ones

    write(allowedGroups=[ENGINEERING])  # nobody directly: both refused at once
    assert gw.reload()
    assert (await status("alice", "alice-pw"), await status("bob", "bob-pw")) == (403, 403)
