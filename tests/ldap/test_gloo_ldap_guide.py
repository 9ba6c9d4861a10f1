"""The request/response walkthrough of Gloo Edge's LDAP guide, end to end:
a real gateway on loopback, a real OpenLDAP slapd, and an echo backend found
through a Kubernetes Service.

The resources are written in the guide's shapes with Gloo's own API groups
(``gateway.solo.io/v1``, ``enterprise.gloo.solo.io/v1``, in ``gloo-system``);
the directory is this suite's slapd (``dc=example,dc=org``: alice is a
manager and a developer, bob a developer), not the guide's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import pytest_twisted
import yaml
from ldap_helpers import MANAGERS_DN, basic
from slapd import SERVICE_DN, SERVICE_PW
from support.http import http_request, raw_exchange

import twistgw_ldap
from twistgw import cli

PLUGINS = [("extauth", twistgw_ldap.ExtAuthPlugin)]


def echo_service(backend_port: int) -> list[dict]:
    # the guide's http-echo Service: port 5678, no targetPort (so 5678 too)
    return [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "http-echo", "labels": {"service": "http-echo"}},
         "spec": {"ports": [{"port": 5678, "protocol": "TCP"}], "selector": {"app": "http-echo"}}},
        {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "http-echo"},
         "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": backend_port}]}]},
    ]


def auth_config(address: str, service_account: bool = False) -> dict:
    ldap: dict[str, Any] = {"address": address, "userDnTemplate": "uid=%s,ou=people,dc=example,dc=org",
                            "allowedGroups": [MANAGERS_DN], "searchFilter": "(objectClass=*)"}
    if service_account:
        ldap["groupLookupSettings"] = {"checkGroupsWithServiceAccount": True,
                                       "credentialsSecretRef": {"name": "ldapcredentials", "namespace": "gloo-system"}}
    return {"apiVersion": "enterprise.gloo.solo.io/v1", "kind": "AuthConfig",
            "metadata": {"name": "ldap", "namespace": "gloo-system"}, "spec": {"configs": [{"ldap": ldap}]}}


VIRTUAL_SERVICE = {
    "apiVersion": "gateway.solo.io/v1", "kind": "VirtualService",
    "metadata": {"name": "echo", "namespace": "gloo-system"},
    "spec": {"displayName": "echo", "virtualHost": {
        "domains": ["*"],
        "routes": [{"matchers": [{"prefix": "/echo"}],
                    "routeAction": {"single": {"kube": {"ref": {"name": "http-echo", "namespace": "default"},
                                                        "port": 5678}}}}],
        "options": {"extauth": {"configRef": {"name": "ldap", "namespace": "gloo-system"}}}}},
}


async def exchange(port: int, authorization: str | None) -> Any:
    """GET /echo on a raw socket, to see the response's own framing."""
    auth = f"Authorization: {authorization}\r\n" if authorization else ""
    raw = await raw_exchange(port, f"GET /echo HTTP/1.1\r\nHost: gw\r\n{auth}Connection: close\r\n\r\n".encode())
    (resp,) = raw.responses()
    return resp


def basic_header(user: str, password: str) -> str:
    return basic(user, password)["Authorization"]


async def walkthrough(gw: Any, backend: Any) -> None:
    """Step 4 of the guide: no credentials, an unknown user, a developer, a manager."""
    for authorization, status in ((None, 401), (basic_header("john", "doe"), 401),
                                  (basic_header("bob", "bob-pw"), 403)):
        resp = await exchange(gw.port, authorization)
        assert (resp.status, resp.header(b"content-length"), resp.body) == (status, b"0", b""), authorization
    assert backend.requests == []
    r = await http_request("GET", gw.url("/echo"), headers=basic("alice", "alice-pw"))
    assert r.status == 200 and json.loads(r.body)["uri"] == "/echo"
    assert len(backend.requests) == 1


@pytest_twisted.ensureDeferred
async def test_ldap_guide_user_binding(slapd_open: Any, backend: Any, config_dir: Any, gateway: Any) -> None:
    text = yaml.safe_dump_all([*echo_service(backend.port), auth_config(slapd_open.url), VIRTUAL_SERVICE])
    gw = gateway(config_dir(text), plugins=PLUGINS)
    await walkthrough(gw, backend)


def create_secret(capsys: Any, *namespace: str) -> tuple[str, str]:
    """``twistgw create secret authcredentials`` as the guide runs glooctl's:
    the YAML it prints, and what it says on stderr."""
    args = ["create", "secret", "authcredentials", "--name", "ldapcredentials", *namespace,
            "--username", SERVICE_DN, "--password", SERVICE_PW]
    assert cli.main(args) == 0
    out = capsys.readouterr()
    return out.out, out.err


@pytest_twisted.ensureDeferred
async def test_ldap_guide_service_account(slapd_strict: Any, backend: Any, config_dir: Any, gateway: Any,
                                          capsys: Any) -> None:
    secret, said = create_secret(capsys, "--namespace", "gloo-system")
    assert said.startswith("wrote Secret ldapcredentials in namespace gloo-system to stdout")
    text = yaml.safe_dump_all([*echo_service(backend.port), auth_config(slapd_strict.url, service_account=True),
                               VIRTUAL_SERVICE]) + "---\n" + secret
    directory = config_dir(text)
    gw = gateway(directory, plugins=PLUGINS)
    before = len(slapd_strict.binds())
    await walkthrough(gw, backend)
    # alice's groups were read as the service account (users cannot read memberOf here)
    assert slapd_strict.binds()[before:][-2:] == ["uid=alice,ou=people,dc=example,dc=org", SERVICE_DN]

    # the guide's tip: a wrong service-account password is a 500
    wrong = text.replace(secret, create_secret(capsys, "--namespace", "gloo-system")[0].replace(
        yaml.safe_load(secret)["data"]["password"], "d3Jvbmc="))
    assert wrong != text
    config_dir(wrong, directory=directory)
    assert gw.reload()
    resp = await exchange(gw.port, basic_header("alice", "alice-pw"))
    assert (resp.status, resp.body) == (500, b"")


def test_ldap_guide_secret_without_namespace_says_where_it_went(slapd_strict: Any, capsys: Any,
                                                                 tmp_path: Any) -> None:
    """glooctl writes to gloo-system by default, twistgw to default: the
    command says so, and `twistgw check` names the dangling reference."""
    secret, said = create_secret(capsys)
    assert "in namespace default (the default; pass --namespace to change it)" in said
    assert "credentialsSecretRef: {name: ldapcredentials, namespace: default}" in said
    (tmp_path / "guide.yaml").write_text(yaml.safe_dump_all(
        [*echo_service(9), auth_config(slapd_strict.url, service_account=True), VIRTUAL_SERVICE]) + "---\n" + secret)
    assert cli.main(["check", str(tmp_path)]) == 1
    assert "dangling reference: no Secret gloo-system/ldapcredentials" in capsys.readouterr().out


@pytest.mark.parametrize("group", ["enterprise.gloo.solo.io/v1", "enterprise.gateway.vendor.io/v1"])
def test_both_api_groups_name_the_same_auth_config(group: str, capsys: Any, tmp_path: Any) -> None:
    doc = auth_config("ldap://127.0.0.1:389")
    doc["apiVersion"] = group
    (tmp_path / "guide.yaml").write_text(yaml.safe_dump_all([*echo_service(9), doc, VIRTUAL_SERVICE]))
    assert cli.main(["check", str(tmp_path)]) == 0, capsys.readouterr()
