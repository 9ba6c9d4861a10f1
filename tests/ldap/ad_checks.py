"""The LDAP config type against a real Active Directory (Samba's, started by
:mod:`samba_ad` in a network namespace of its own). :func:`run` makes each
request below through the extauth plugin in memory (``ChainTester``, the
real LDAP client, the real directory) and reports what came of it;
``test_ldap_active_directory.py`` holds the expectations.

Two rounds: :func:`own_certificate_checks` while Samba serves the
certificate it made itself (no subjectAltName: refused), then, once Samba
serves the test CA's certificate, :func:`checks`, which verify it by name
like any directory (``tls.caFile``; the address 127.0.0.1 is in its
subjectAltName)."""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path
from typing import Any, Callable

from samba_ad import BASE, DC_NAME, DOMAIN, PASSWORDS, REALM, TEST_TLS, USERS_DN
from twisted.internet import defer, task, threads
from twisted.logger import formatEvent, globalLogPublisher

import twistgw_ldap
from twistgw.testing import ChainTester

URL = "http://ad.example.com/x"
SEARCH = {"baseDn": USERS_DN, "filter": "(sAMAccountName=%s)"}
STAFF = f"CN=staff,{USERS_DN}"
DOMAIN_USERS = f"CN=Domain Users,{USERS_DN}"
LDAPS = "ldaps://127.0.0.1:636"
Check = tuple[dict[str, Any], str, str, str]


def config(ldap: dict[str, Any], account: str = "") -> str:
    """A VirtualService protected by an AuthConfig with the one ldap entry
    ``ldap``, and the Secret ``svc`` whose username is ``account``."""
    secret = {"username": base64.b64encode(account.encode()).decode(),
              "password": base64.b64encode(PASSWORDS["svc-reader"].encode()).decode()}
    return textwrap.dedent(f"""\
        apiVersion: gateway.vendor.io/v1
        kind: VirtualService
        metadata: {{name: vs}}
        spec:
          virtualHost:
            domains: ["*"]
            options: {{extauth: {{configRef: {{name: ad}}}}}}
            routes:
            - matchers: [{{prefix: /}}]
              directResponseAction: {{status: 200, body: admitted}}
        ---
        apiVersion: enterprise.gateway.vendor.io/v1
        kind: AuthConfig
        metadata: {{name: ad, namespace: default}}
        spec:
          configs: [{json.dumps({"ldap": {"connectTimeout": "5s", "requestTimeout": "5s", "cacheTtl": "0s",
                                           **ldap}})}]
        ---
        apiVersion: v1
        kind: Secret
        metadata: {{name: svc, namespace: default}}
        type: extauth.vendor.io/accountcredentials
        data: {json.dumps(secret)}
        """)


def ref() -> dict[str, str]:
    return {"name": "svc"}


def docs_member_of_example(tls: dict[str, Any]) -> dict[str, Any]:
    """docs/ldap.md's Active Directory ``memberOf`` example, its ldap entry as
    written, with this domain's address, names and reader Secret."""
    import re

    import yaml

    text = (Path(__file__).resolve().parents[2] / "docs" / "ldap.md").read_text()
    start = text.index("<!-- example: ldap-active-directory-memberof")
    block = re.search(r"```yaml\n(.*?)```", text[start:], re.S)
    assert block is not None
    ldap = yaml.safe_load(block.group(1))["spec"]["configs"][0]["ldap"]
    assert ldap["address"] == "ldaps://dc1.corp.example.com:636" and "groupSearch" not in ldap
    ldap.update(address=LDAPS, tls=tls, allowedGroups=[STAFF])
    ldap["userSearch"].update(baseDn=BASE, credentialsSecretRef=ref())
    return dict(ldap)


def own_certificate_checks(directory: Path) -> dict[str, Check]:
    """While Samba serves the certificate it made itself: name -> (ldap
    entry, service account name, user, password)."""
    # 17: Samba's own CA is trusted, its certificate carries only a CN: refused for ldaps and StartTLS
    ca = str(directory / "private" / "tls" / "ca.pem")
    with_account = {**SEARCH, "credentialsSecretRef": ref()}
    backslash = f"{DOMAIN}\\svc-reader"
    return {
        "ldaps_cert_without_san": ({"address": LDAPS, "tls": {"caFile": ca, "serverName": DC_NAME},
                                    "userSearch": with_account, "disableGroupChecking": True},
                                   backslash, "alice", PASSWORDS["alice"]),
        "starttls_cert_without_san": ({"address": "ldap://127.0.0.1:389", "startTLS": True,
                                       "tls": {"caFile": ca, "serverName": DC_NAME},
                                       "userSearch": with_account, "disableGroupChecking": True},
                                      backslash, "alice", PASSWORDS["alice"]),
    }


def checks(directory: Path) -> dict[str, Check]:
    """Once Samba serves the test CA's certificate: name -> (ldap entry,
    service account name, user, password)."""
    verified = {"caFile": str(directory / TEST_TLS / "ca.pem")}
    backslash, upn = f"{DOMAIN}\\svc-reader", f"svc-reader@{REALM.lower()}"
    with_account = {**SEARCH, "credentialsSecretRef": ref()}
    member_of = {"address": LDAPS, "tls": verified, "userSearch": with_account}
    return {
        # 18: AD accepts the anonymous bind, then refuses the anonymous search (operationsError)
        "anonymous_search": ({"address": LDAPS, "tls": verified, "userSearch": SEARCH,
                              "disableGroupChecking": True}, "", "alice", PASSWORDS["alice"]),
        # 19: Samba's default refuses simple binds on plain LDAP (strongAuthRequired)
        "plain_ldap_user_bind": ({"address": "ldap://127.0.0.1:389",
                                  "userDnTemplate": f"CN=%s,{USERS_DN}", "disableGroupChecking": True},
                                 "", "alice", PASSWORDS["alice"]),
        "plain_ldap_service_bind": ({"address": "ldap://127.0.0.1:389", "disableGroupChecking": True,
                                     "userSearch": with_account}, backslash, "alice", PASSWORDS["alice"]),
        # 21: service-account names need not be DNs
        "account_backslash": ({"address": LDAPS, "tls": verified, "userSearch": with_account,
                               "disableGroupChecking": True, "userHeader": "X-User"},
                              backslash, "ALICE", PASSWORDS["alice"]),
        "account_upn": ({"address": LDAPS, "tls": verified, "userSearch": with_account,
                         "disableGroupChecking": True}, upn, "alice", PASSWORDS["alice"]),
        "wrong_password": ({"address": LDAPS, "tls": verified, "userSearch": with_account,
                            "disableGroupChecking": True}, backslash, "alice", "not-it"),
        # issue 32 item 11: memberOf with the default searchFilter, (objectClass=*), admits a direct member...
        "member_of_default_filter": ({**member_of, "allowedGroups": [STAFF]}, backslash,
                                     "alice", PASSWORDS["alice"]),
        # ...as docs/ldap.md's Active Directory memberOf example writes it (a user whose CN is not his name)
        "member_of_docs_example": (docs_member_of_example(verified), backslash, "jdoe", PASSWORDS["jdoe"]),
        # ...Gloo's default, (uid=*), matches no AD user (they have no uid): every member got 401
        "member_of_uid_filter": ({**member_of, "allowedGroups": [STAFF], "searchFilter": "(uid=*)"}, backslash,
                                 "alice", PASSWORDS["alice"]),
        # ...(objectClass=user) does
        "member_of_user_filter": ({**member_of, "allowedGroups": [STAFF], "searchFilter": "(objectClass=user)"},
                                  backslash, "alice", PASSWORDS["alice"]),
        "member_of_not_member": ({**member_of, "allowedGroups": [STAFF], "searchFilter": "(objectClass=user)"},
                                 backslash, "bob", PASSWORDS["bob"]),
        # 21: the primary group is in neither memberOf nor member
        "primary_group": ({**member_of, "allowedGroups": [DOMAIN_USERS], "searchFilter": "(objectClass=user)"},
                          backslash, "alice", PASSWORDS["alice"]),
        # nested groups by groupSearch: engineering lists the group staff
        "nested_group_search": ({**member_of, "allowedGroups": [f"CN=engineering,{USERS_DN}"],
                                 "groupSearch": {"baseDn": BASE, "nested": True}},
                                backslash, "alice", PASSWORDS["alice"]),
        # AD's own transitive walk (LDAP_MATCHING_RULE_IN_CHAIN), as docs/ldap.md advises
        "in_chain_filter": ({**member_of, "allowedGroups": [f"CN=engineering,{USERS_DN}"],
                             "groupSearch": {"baseDn": BASE, "filter": "(member:1.2.840.113556.1.4.1941:=%s)"}},
                            backslash, "alice", PASSWORDS["alice"]),
        # 20: legal AD names with filter specials
        "name_with_parentheses": ({**member_of, "disableGroupChecking": True, "userHeader": "X-User"},
                                  backslash, "qa(lead)", PASSWORDS["qa(lead)"]),
        "name_with_hash": ({**member_of, "disableGroupChecking": True}, backslash, "ops#1", PASSWORDS["ops#1"]),
        # the certificate verified by its DNS name (tls.serverName), over StartTLS
        "starttls_by_dns_name": ({"address": "ldap://127.0.0.1:389", "startTLS": True,
                                  "tls": {**verified, "serverName": DC_NAME},
                                  "userSearch": with_account, "disableGroupChecking": True},
                                 backslash, "alice", PASSWORDS["alice"]),
        # a trusted certificate for another name is refused
        "ldaps_wrong_name": ({**member_of, "tls": {**verified, "serverName": "evil.example.org"},
                              "disableGroupChecking": True}, backslash, "alice", PASSWORDS["alice"]),
    }


async def _one(ldap: dict[str, Any], account: str, user: str, password: str) -> dict[str, Any]:
    try:
        tester = ChainTester.from_yaml(config(ldap, account), [("extauth", twistgw_ldap.ExtAuthPlugin)])
    except Exception as exc:  # a configuration the plugin refuses is a result too
        return {"config_error": str(exc)}
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    logged: list[str] = []

    def observer(event: dict[str, Any]) -> None:
        logged.append(formatEvent(event) or "")

    globalLogPublisher.addObserver(observer)
    try:
        result = await tester.request("GET", URL, headers={"Authorization": f"Basic {auth}"})
        headers = result.forwarded_headers
        return {"status": result.status, "principal": result.ctx.principal,
                "reason": result.deny.reason if result.deny is not None else str(result.trace[-1][2]),
                "x_user": [v.decode() for v in (headers.getRawHeaders(b"x-user") or [])] if headers else [],
                "log": [line for line in logged if "unavailable" in line]}
    finally:
        globalLogPublisher.removeObserver(observer)
        await tester.host.unconfigure()


def run(directory: Path, restart_with_test_ca: Callable[[], None]) -> dict[str, Any]:
    """Every check, ``restart_with_test_ca`` (blocking, in a thread) between the two rounds."""
    report: dict[str, Any] = {}

    async def main(_reactor: Any) -> None:
        for name, (ldap, account, user, password) in own_certificate_checks(directory).items():
            report[name] = await _one(ldap, account, user, password)
        await threads.deferToThread(restart_with_test_ca)
        for name, (ldap, account, user, password) in checks(directory).items():
            report[name] = await _one(ldap, account, user, password)

    try:
        task.react(lambda reactor: defer.ensureDeferred(main(reactor)))
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            raise
    return report
