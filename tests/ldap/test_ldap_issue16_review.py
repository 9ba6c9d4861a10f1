"""Issue 16 read as an outside tester would, against the real gateway and a
real slapd: names the directory has never seen (non-ASCII, at and over the
length limit), group DNs spelled differently in allowedGroups, and the
decision cache across a configuration reload and a changed password."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest_twisted
from ldap_helpers import PLUGINS, basic, ldap_config, make_tester
from slapd import DEVELOPERS, ENGINEERING, MANAGERS
from twisted.internet import reactor, task

from twistgw_ldap import _flow

URL = "http://api.example.com/pets"
SUFFIX = "dc=example,dc=org"
ALICE_DN = f"uid=alice,ou=people,{SUFFIX}"
EVERYONE = {"baseDn": SUFFIX, "filter": "(&(objectClass=inetOrgPerson)(uid=%s))"}
GROUPS = {"baseDn": f"ou=groups,{SUFFIX}"}


def sleep(seconds: float) -> Any:
    return task.deferLater(reactor, seconds, lambda: None)


def searches(server: Any, since: int) -> list[str]:
    return re.findall(r'SRCH base="[^"]*" scope=\d deref=\d filter="([^"]*)"', server.log_text()[since:])


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
    at_limit = await tester.request("GET", URL, headers=basic("a" * _flow.MAX_USERNAME, "x"))
    assert at_limit.status == 401 and "no entry matches" in at_limit.deny.reason
    await sleep(0.05)
    assert len(searches(slapd_open, mark)) == 1
    mark = len(slapd_open.log_text())
    for user in ("a" * (_flow.MAX_USERNAME + 1), "é" * 200 + "a" * 100, "a" * 10_000):
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
