"""Fast paths against ldaptor's in-memory directory (the development
directory of Settings ``spec.extauth.devDirectory``), the shipped demo
configuration, and end-to-end requests through the real proxy."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from ldap_helpers import PLUGINS, basic, ldap_config
from slapd import free_port
from twisted.internet import defer, reactor, task

from twistgw.config.loader import load_directory
from twistgw.core.snapshot import build_snapshot
from twistgw.sdk.testing import ConfigError
from twistgw.sdk.testing import ChainTester

REPO = Path(__file__).resolve().parents[2]
URL = "http://api.example.com/pets"

LDIF = """\
dn: dc=example,dc=org
objectClass: dcObject
objectClass: organization
dc: example
o: Example

dn: ou=people,dc=example,dc=org
objectClass: organizationalUnit
ou: people

dn: uid=alice,ou=people,dc=example,dc=org
objectClass: inetOrgPerson
uid: alice
cn: Alice
sn: A
userPassword: alice-pw
memberOf: CN=Managers, OU=Groups, DC=example, DC=org

dn: uid=bob,ou=people,dc=example,dc=org
objectClass: inetOrgPerson
uid: bob
cn: Bob
sn: B
userPassword: bob-pw
memberOf: cn=developers,ou=groups,dc=example,dc=org
"""


def sleep(seconds: float) -> defer.Deferred:
    return task.deferLater(reactor, seconds, lambda: None)


async def wait_for(predicate: Any, timeout: float = 3.0) -> None:
    deadline = reactor.seconds() + timeout
    while not predicate():
        assert reactor.seconds() < deadline, "timed out"
        await sleep(0.01)


def reloaded(tester: ChainTester, directory: Path) -> ChainTester:
    """The directory read again for the same plugins, as a reload does.
    (Every tester's plugins are shut down after each test by
    ``tests/ldap/conftest.py``, dev directories included.)"""
    return ChainTester(build_snapshot(load_directory(str(directory)), tester.host), tester.host)


def dev_directory(tester: Any) -> Any:
    """The ldap config type's development directory in a tester or gateway."""
    host = tester.host if hasattr(tester, "host") else tester.service.plugins
    return host.plugin("extauth").registry.types()["ldap"].dev_directory


def settings_yaml(ldif: str, port: int) -> str:
    return textwrap.dedent(f"""\
        ---
        apiVersion: gateway.vendor.io/v1
        kind: Settings
        metadata: {{name: settings}}
        spec:
          extauth:
            devDirectory: {{ldif: {ldif}, listen: "tcp:{port}:interface=127.0.0.1"}}
        """)


@pytest.fixture
def memory_dir(tmp_path: Path) -> Any:
    """A config directory with a dev directory on a free port; returns (dir, port)."""
    port = free_port()
    (tmp_path / "users.ldif").write_text(LDIF)
    (tmp_path / "config.yaml").write_text(
        ldap_config(f"ldap://127.0.0.1:{port}", cacheTtl=0) + settings_yaml("users.ldif", port))
    return tmp_path, port


async def started_tester(directory: Path) -> ChainTester:
    tester = ChainTester.from_directory(str(directory), plugins=PLUGINS, load_entry_points=False)
    await wait_for(lambda: dev_directory(tester).port is not None)
    return tester


@pytest_twisted.ensureDeferred
async def test_flow_against_in_memory_directory(memory_dir: Any) -> None:
    directory, port = memory_dir
    tester = await started_tester(directory)
    assert dev_directory(tester).port.getHost().port == port
    result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
    assert result.status == 200 and result.ctx.principal == "alice"
    assert (await tester.request("GET", URL, headers=basic("bob", "bob-pw"))).status == 403
    assert (await tester.request("GET", URL, headers=basic("alice", "nope"))).status == 401
    assert (await tester.request("GET", URL, headers=basic("zed", "x"))).status == 401
    assert (await tester.request("GET", URL, headers=basic("alice", ""))).status == 401


@pytest_twisted.ensureDeferred
async def test_dev_directory_restarts_when_ldif_changes_and_stops_when_removed(memory_dir: Any) -> None:
    directory, port = memory_dir
    tester = await started_tester(directory)
    assert (await tester.request("GET", URL, headers=basic("bob", "bob-pw"))).status == 403
    (directory / "users.ldif").write_text(LDIF.replace("cn=developers,ou=groups", "cn=managers,ou=groups"))
    first = dev_directory(tester).port
    tester = reloaded(tester, directory)
    await wait_for(lambda: dev_directory(tester).port not in (None, first))
    assert (await tester.request("GET", URL, headers=basic("bob", "bob-pw"))).status == 200
    text = (directory / "config.yaml").read_text()
    (directory / "config.yaml").write_text(text.split("---\napiVersion: gateway.vendor.io/v1\nkind: Settings")[0])
    tester = reloaded(tester, directory)
    await wait_for(lambda: dev_directory(tester).port is None)
    assert (await tester.request("GET", URL, headers=basic("bob", "bob-pw"))).status == 503


@pytest_twisted.ensureDeferred
async def test_dev_directory_refuses_a_public_listen_address(tmp_path: Path) -> None:
    (tmp_path / "users.ldif").write_text(LDIF)
    text = ldap_config("ldap://127.0.0.1:1", cacheTtl=0) + settings_yaml("users.ldif", 0).replace(
        ":interface=127.0.0.1", "")
    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:  # refused when the configuration loads
        ChainTester.from_directory(str(tmp_path), plugins=PLUGINS, load_entry_points=False)
    (issue,) = info.value.issues
    assert issue.field == "spec.extauth.devDirectory.listen" and "only listens on loopback" in issue.reason


# ---------------------------------------------------------------------------
# The shipped demo (etc/) and the real proxy
# ---------------------------------------------------------------------------


@pytest.fixture
def demo_dir(tmp_path: Path) -> Any:
    """etc/ copied with its fixed ports (3389 directory, 8081 echo) moved to free ones."""
    target = tmp_path / "etc"
    shutil.copytree(REPO / "etc", target)
    ldap_port, echo_port = free_port(), free_port()
    for path in target.glob("*.yaml"):
        text = path.read_text().replace("3389", str(ldap_port)).replace("8081", str(echo_port))
        path.write_text(text)
    return target


def demo_creds() -> dict[str, tuple[str, str]]:
    ldif = (REPO / "etc" / "demo-users.ldif").read_text()
    users = dict(re.findall(r"^dn: uid=(\w+),.*?^userPassword: (\S+)", ldif, re.M | re.S))
    return users


@pytest_twisted.ensureDeferred
async def test_shipped_demo_serves_ldap_with_nothing_else_installed(demo_dir: Path) -> None:
    users = demo_creds()
    assert {"alice", "bob"} <= set(users)
    tester = ChainTester.from_directory(str(demo_dir), [], load_entry_points=True)  # as `twist twistgw`
    await wait_for(lambda: dev_directory(tester).port is not None)
    url = "http://localhost/ldap/hello"
    assert (await tester.request("GET", url, headers=basic("alice", users["alice"]))).status == 200
    assert (await tester.request("GET", url, headers=basic("bob", users["bob"]))).status == 403
    assert (await tester.request("GET", url, headers=basic("alice", "wrong"))).status == 401
    assert (await tester.request("GET", url)).status == 401


async def raw_get(port: int, path: str, headers: dict[str, str]) -> Any:
    from support.http import raw_exchange

    lines = [f"GET {path} HTTP/1.1", "Host: demo.local", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    result = await raw_exchange(port, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    (response,) = result.responses()
    return response


@pytest_twisted.ensureDeferred
async def test_end_to_end_through_the_proxy(demo_dir: Path, gateway: Any) -> None:
    users = demo_creds()
    gw = gateway(str(demo_dir), load_entry_points=True)
    await wait_for(lambda: dev_directory(gw).port is not None)
    ok = await raw_get(gw.port, "/ldap/x", {**basic("alice", users["alice"]), "X-Auth-Groups": "admins"})
    assert ok.status == 200
    # what the demo's echo upstream received: the directory's groups and user, not the password
    seen = json.loads(ok.body)["headers"]
    assert seen["X-Auth-Groups"] == ["developers"] and seen["X-Auth-User"] == ["alice"]
    assert not any(name.lower() == "authorization" for name in seen)
    challenge = b'Basic realm="twistgw", charset="UTF-8"'
    for headers, status in ((basic("bob", users["bob"]), 403), (basic("alice", "bad"), 401), ({}, 401),
                            (basic("alice", ""), 401), ({"Authorization": "Basic %%%"}, 401)):
        r = await raw_get(gw.port, "/ldap/x", headers)
        assert (r.status, r.body, r.header(b"content-length")) == (status, b"", b"0")
        assert r.header(b"content-type") is None
        assert r.header(b"www-authenticate") == (challenge if status == 401 else None)
    # the directory goes away: 503 with an empty body; other routes unaffected;
    # alice's recent success is still served from the decision cache (60 s)
    await dev_directory(gw).stop()
    r = await raw_get(gw.port, "/ldap/x", basic("alice", "not-cached"))
    assert (r.status, r.body, r.header(b"content-length")) == (503, b"", b"0")
    assert (await raw_get(gw.port, "/ldap/x", basic("alice", users["alice"]))).status == 200
    assert (await raw_get(gw.port, "/", {})).status == 200


@pytest.mark.parametrize("ldif_text, reason", [
    (None, "cannot read"),
    ("dn: uid=alice,ou=people,dc=example,dc=org\nthis is not ldif\n", "is not valid LDIF"),
])
def test_check_refuses_a_dev_directory_it_could_not_serve(tmp_path: Path, ldif_text: str | None,
                                                          reason: str) -> None:
    """A devDirectory LDIF that is missing or unreadable is a configuration
    error at load time (``twistgw check``), not a 503 at run time."""
    if ldif_text is not None:
        (tmp_path / "users.ldif").write_text(ldif_text)
    (tmp_path / "config.yaml").write_text(
        ldap_config("ldap://127.0.0.1:1", cacheTtl=0) + settings_yaml("users.ldif", free_port()))
    with pytest.raises(ConfigError) as info:
        ChainTester.from_directory(str(tmp_path), plugins=PLUGINS, load_entry_points=False)
    (issue,) = info.value.issues
    assert issue.resource == "Settings" and issue.field == "spec.extauth.devDirectory.ldif"
    assert reason in issue.reason and str(tmp_path / "users.ldif") in issue.reason
    lines = (tmp_path / "config.yaml").read_text().splitlines()
    assert lines[issue.line - 1].strip().startswith("devDirectory:")
    (tmp_path / "users.ldif").write_text(LDIF)
    ChainTester.from_directory(str(tmp_path), plugins=PLUGINS, load_entry_points=False)  # now fine
