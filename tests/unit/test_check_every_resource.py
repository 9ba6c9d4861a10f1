"""`twistgw check` validates every resource, used or not, as Gloo's
validation webhook does (issue 23 item 25): the core hands each resource to
the plugins' ``twistgw_check_resource``; the extauth plugin compiles every
AuthConfig with today's LDAP config type."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from twistgw import sdk
from twistgw.sdk import testing as sdk_testing
import twistgw_ldap
from twistgw.config.loader import ConfigError, load_text
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.sdk.testing import ChainTester

from support.trial import TestCase

VS = """\
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: vs}
spec:
  virtualHost:
    routes:
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200, body: ok}
"""


def auth_config(name: str, ldap: str) -> str:
    return textwrap.dedent(f"""\
        ---
        apiVersion: enterprise.gateway.vendor.io/v1
        kind: AuthConfig
        metadata: {{name: {name}, namespace: default}}
        spec:
          configs:
          - ldap: {ldap}
        """)


GOOD = ("{address: 'ldap://127.0.0.1:389', userDnTemplate: 'uid=%s,ou=people,dc=example,dc=org',"
        " allowedGroups: ['cn=managers,ou=groups,dc=example,dc=org']}")
BAD = GOOD.replace("ldap://", "ftp://")


def issues(text: str, plugins: list[tuple[str, Any]]) -> list[sdk_testing.ConfigIssue]:
    with pytest.raises(ConfigError) as info:
        ChainTester.from_yaml(text, plugins=plugins, load_entry_points=False)
    return info.value.issues


class CheckEveryResourceTests(TestCase):
    def test_an_unreferenced_auth_config_is_checked(self):
        # no VirtualService names it: it used to pass check
        plugins = [("extauth", twistgw_ldap.ExtAuthPlugin)]
        found = issues(VS + auth_config("unused", BAD), plugins)
        assert [i.resource for i in found] == ["AuthConfig default/unused"]
        assert found[0].field == "spec.configs[0].ldap.address" and found[0].line == 15
        assert "scheme must be ldap:// or ldaps://" in found[0].reason
        ChainTester.from_yaml(VS + auth_config("unused", GOOD), plugins=plugins, load_entry_points=False)

    def test_a_referenced_bad_auth_config_is_reported_once(self):
        text = VS.replace("    routes:", "    options: {extauth: {configRef: {name: used}}}\n    routes:")
        found = issues(text + auth_config("used", BAD), [("extauth", twistgw_ldap.ExtAuthPlugin)])
        assert len(found) == 1 and found[0].resource == "AuthConfig default/used"

    def test_every_resource_of_every_kind_reaches_the_hook_once(self):
        seen: list[tuple[str, str]] = []

        class Checker:
            @sdk.hookimpl
            def twistgw_check_resource(self, kind: str, resource: object, scope: sdk.OptionsScope) -> None:
                seen.append((kind, scope.namespace))
                if kind == "Secret":
                    raise sdk.OptionsError(("stringData", "token"), "is too short")

        text = VS + "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: team}\n" \
                    "stringData: {token: x}\n"
        host = PluginHost.create([("checker", Checker())], load_entry_points=False)
        with pytest.raises(ConfigError) as info:
            build_snapshot(load_text(text, "c.yaml"), host)
        (issue,) = info.value.issues
        assert (issue.resource, issue.field, issue.line) == ("Secret team/s", "stringData.token", 13)
        assert sorted(seen) == [("Secret", "team"), ("VirtualService", "default")]

    def test_an_unused_route_table_is_checked(self):
        import twistgw_jwt

        table = textwrap.dedent("""\
            ---
            apiVersion: gateway.solo.io/v1
            kind: RouteTable
            metadata: {name: spare, namespace: default}
            spec:
              routes:
              - matchers: [{prefix: /x}]
                directResponseAction: {status: 200}
                options:
                  jwt: {providers: {m: {issuer: 7}}}
                  jwtt: {}
            """)
        found = issues(VS + table, [("jwt", twistgw_jwt.JwtPlugin)])
        assert {(i.resource, i.field) for i in found} >= {
            ("RouteTable default/spare", "spec.routes[0].options.jwt.providers.m.issuer"),
            ("RouteTable default/spare", "spec.routes[0].options.jwtt")}, found
        assert all(i.line is not None and i.line > 9 for i in found)
