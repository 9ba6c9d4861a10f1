"""docs/ldap.md's worked example, run as written against a real slapd whose
ACL hides memberOf from users (only the service account reads it)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest_twisted
import yaml
from ldap_helpers import basic, ldap_configs, make_tester
from slapd import SERVICE_DN, SERVICE_PW

from twistgw_ldap.secret import secret_yaml

DOC = Path(__file__).resolve().parents[2] / "docs" / "ldap.md"
URL = "http://reports.example.org"


def example_blocks() -> tuple[str, str, str]:
    text = DOC.read_text()
    section = text.split("## Worked example", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    start = section.index("<!-- example: ldap-worked-example")
    secret, config = re.findall(r"```yaml\n(.*?)```", section[start:], re.S)[:2]
    return command, secret, config


def test_documented_secret_is_what_the_utility_writes() -> None:
    command, secret, _ = example_blocks()
    args = shlex.split(command.replace("\\\n", " ").split(">")[0])
    assert args[:4] == ["twistgw", "create", "secret", "authcredentials"]
    opts = dict(zip(args[4::2], args[5::2], strict=True))
    assert opts["--username"] == SERVICE_DN and opts["--password"] == SERVICE_PW
    assert secret == secret_yaml(opts["--name"], opts["--namespace"], opts["--username"], opts["--password"])


@pytest_twisted.ensureDeferred
async def test_worked_example_against_slapd(slapd_strict: Any) -> None:
    _, secret, config = example_blocks()
    assert "ldap://ldap.example.org:389" in config
    text = secret + "---\n" + config.replace("ldap://ldap.example.org:389", slapd_strict.url)
    assert len(list(yaml.safe_load_all(text))) == 4
    tester = make_tester(text)
    before = len(slapd_strict.binds())
    ok = await tester.request("GET", URL + "/reports", headers=basic("alice", "alice-pw"))
    assert ok.status == 200 and ok.ctx.principal == "alice"
    assert slapd_strict.binds()[before:] == ["uid=alice,ou=people,dc=example,dc=org", SERVICE_DN]
    for headers, status in ((basic("bob", "bob-pw"), 403), (basic("alice", "wrong"), 401), (None, 401),
                            (basic("alice", ""), 401)):
        result = await tester.request("GET", URL + "/reports", headers=headers)
        assert (result.status, result.body) == (status, b"")
    assert (await tester.request("GET", URL + "/healthz")).status == 200
    # the Secret's password wrong → 500
    bad = text.replace(secret_yaml("ldap-reader", "default", SERVICE_DN, SERVICE_PW),
                       secret_yaml("ldap-reader", "default", SERVICE_DN, "not-it"))
    assert bad != text
    result = await make_tester(bad).request("GET", URL + "/reports", headers=basic("alice", "alice-pw"))
    assert (result.status, result.body) == (500, b"")


def test_dev_directory_settings_block_parses() -> None:
    text = DOC.read_text().split("## The development directory", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    doc = yaml.safe_load(block)
    assert doc["kind"] == "Settings"
    assert doc["spec"]["extauth"]["devDirectory"] == {"ldif": "demo-users.ldif",
                                                      "listen": "tcp:3389:interface=127.0.0.1"}


def test_documented_command_through_the_cli(capsys: Any) -> None:
    from twistgw import cli

    command, secret, _ = example_blocks()
    args = shlex.split(command.replace("\\\n", " ").split(">")[0])
    assert cli.main(args[1:]) == 0
    assert capsys.readouterr().out == secret


# ---------------------------------------------------------------------------
# The userSearch / groupSearch examples
# ---------------------------------------------------------------------------


def marked_block(marker: str) -> str:
    text = DOC.read_text()
    start = text.index(f"<!-- example: {marker}")
    return re.search(r"```yaml\n(.*?)```", text[start:], re.S).group(1)


def openldap_example(address: str) -> str:
    config = marked_block("ldap-openldap-search")
    assert "ldap://ldap.example.org:389" in config
    return config.replace("ldap://ldap.example.org:389", address)


@pytest_twisted.ensureDeferred
async def test_openldap_search_example_against_slapd(slapd_open: Any) -> None:
    tester = make_tester(openldap_example(slapd_open.url))
    wiki = "http://wiki.example.org/"
    for user, password, groups in (("bob", "bob-pw", b"all-staff,developers,engineering,loop-a,loop-b"),
                                   ("dave", "dave-pw", b"all-staff,contractors,engineering")):
        result = await tester.request("GET", wiki, headers={**basic(user, password), "X-Auth-Groups": "admins"})
        assert result.status == 200, result.deny
        sent = result.forwarded_headers
        assert sent.getRawHeaders(b"x-auth-user") == [user.encode()]
        assert sent.getRawHeaders(b"x-auth-groups") == [groups]
        assert not sent.hasHeader(b"authorization")
    for user, password, status in (("carol", "carol-pw", 403), ("sam", "sam-pw", 401), ("al*", "alice-pw", 401)):
        result = await tester.request("GET", wiki, headers=basic(user, password))
        assert (result.status, result.body) == (status, b""), user


def test_documented_explain_line_is_what_explain_prints(slapd_open: Any, tmp_path: Path) -> None:
    import base64
    import subprocess
    import sys

    text = DOC.read_text()
    section = text.split("## Worked example: OpenLDAP", 1)[1].split("\n## ", 1)[0]
    documented = re.search(r"```\n(\s*extauth\.authenticate: .*?)\n```", section, re.S).group(1).strip()
    (tmp_path / "config.yaml").write_text(openldap_example(slapd_open.url))
    auth = base64.b64encode(b"dave:dave-pw").decode()
    out = subprocess.run([sys.executable, "-m", "twistgw", "explain", str(tmp_path), "GET",
                          "http://wiki.example.org/", "-H", f"Authorization: Basic {auth}", "--live"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert documented in [line.strip() for line in out.stdout.splitlines()], out.stdout


def test_active_directory_member_of_example_loads() -> None:
    """The memberOf variant (run against Samba's AD in test_ldap_active_directory.py)."""
    reader = secret_yaml("ad-reader", "default", "CN=Gateway Reader,OU=Service Accounts,DC=corp,DC=example,DC=com",
                         "reader-pw")
    vs = ("apiVersion: gateway.vendor.io/v1\nkind: VirtualService\nmetadata: {name: intranet}\nspec:\n"
          "  virtualHost:\n    domains: ['*']\n    options: {extauth: {configRef: {name: corp-ad-memberof}}}\n"
          "    routes: [{matchers: [{prefix: /}], directResponseAction: {status: 200}}]\n")
    tester = make_tester(marked_block("ldap-active-directory-memberof") + "---\n" + reader + "---\n" + vs)
    (cfg,) = ldap_configs(tester)
    assert cfg.group_search is None and cfg.membership_attribute == "memberOf"
    assert cfg.search_filter == "(objectClass=*)"


def test_active_directory_example_loads_and_sends_the_in_chain_filter() -> None:
    from twistgw_ldap._ldaptor import parse_filter
    from ldaptor.protocols import pureldap

    reader = secret_yaml("ad-reader", "default", "CN=Gateway Reader,OU=Service Accounts,DC=corp,DC=example,DC=com",
                         "reader-pw")
    vs = ("apiVersion: gateway.vendor.io/v1\nkind: VirtualService\nmetadata: {name: intranet}\nspec:\n"
          "  virtualHost:\n    domains: ['*']\n    options: {extauth: {configRef: {name: corp-ad}}}\n"
          "    routes: [{matchers: [{prefix: /}], directResponseAction: {status: 200}}]\n")
    tester = make_tester(marked_block("ldap-active-directory") + "---\n" + reader + "---\n" + vs)
    (cfg,) = ldap_configs(tester)
    assert cfg.target.scheme == "ldaps" and cfg.user_search.account is not None
    assert not cfg.group_search.nested
    user_dn = "CN=Doe\\, John (IT),OU=Staff,DC=corp,DC=example,DC=com"
    expected = parse_filter(f"(member:1.2.840.113556.1.4.1941:={pureldap.escape(user_dn)})").toWire()
    assert cfg.group_search.filter.encode(user_dn) == expected
    assert expected[0] == 0xA9  # an extensible match, as Active Directory expects
    assert cfg.user_search.filter.show("jdoe") == \
        "(&(objectCategory=person)(objectClass=user)(sAMAccountName=jdoe))"
