"""Helpers shared by the LDAP tests: configurations and credentials."""

from __future__ import annotations

import base64
import json
import textwrap
from typing import Any

import twistgw_ldap
from slapd import SERVICE_DN, SERVICE_PW
from twistgw.config.loader import load_text
from twistgw.core.snapshot import build_snapshot
from twistgw.sdk.testing import ChainTester
from twistgw_ldap._state import State

PLUGINS = [("extauth", twistgw_ldap.ExtAuthPlugin)]
MANAGERS_DN = "cn=managers,ou=groups,dc=example,dc=org"


def basic(user: str | bytes, password: str | bytes) -> dict[str, str]:
    u = user.encode("utf-8") if isinstance(user, str) else user
    p = password.encode("utf-8") if isinstance(password, str) else password
    return {"Authorization": "Basic " + base64.b64encode(u + b":" + p).decode("ascii")}


def _yaml_value(value: Any) -> str:
    return json.dumps(value)


def ldap_config(address: str, *extra_configs: dict[str, Any], secret_password: str = SERVICE_PW,
                route_options: str = "", **fields: Any) -> str:
    """A VirtualService (``/`` protected, ``/open`` with extauth disabled),
    an AuthConfig ``ldap`` and a service-account Secret ``ldap-sa``."""
    ldap: dict[str, Any] = {
        "address": address,
        "userDnTemplate": "uid=%s,ou=people,dc=example,dc=org",
        "allowedGroups": [MANAGERS_DN],
        "connectTimeout": "1s",
        "requestTimeout": "1s",
    }
    ldap.update(fields)
    if "userSearch" in fields and "userDnTemplate" not in fields:
        del ldap["userDnTemplate"]
    configs = [{"ldap": ldap}] + [{"ldap": {**ldap, **c}} for c in extra_configs]
    secret = {
        "username": base64.b64encode(SERVICE_DN.encode()).decode(),
        "password": base64.b64encode(secret_password.encode()).decode(),
    }
    return textwrap.dedent(f"""\
        apiVersion: core.vendor.io/v1
        kind: Upstream
        metadata: {{name: backend}}
        spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: 9}}]}}}}
        ---
        apiVersion: gateway.vendor.io/v1
        kind: VirtualService
        metadata: {{name: vs}}
        spec:
          virtualHost:
            domains: ["*"]
            options:
              extauth: {{configRef: {{name: ldap, namespace: default}}}}
            routes:
            - matchers: [{{prefix: /open}}]
              routeAction: {{single: {{upstream: {{name: backend}}}}}}
              options: {{extauth: {{disable: true}}}}
            - matchers: [{{prefix: /}}]
              routeAction: {{single: {{upstream: {{name: backend}}}}}}
              {"options: " + route_options if route_options else ""}
        ---
        apiVersion: enterprise.gateway.vendor.io/v1
        kind: AuthConfig
        metadata: {{name: ldap, namespace: default}}
        spec:
          configs: {json.dumps(configs)}
        ---
        apiVersion: v1
        kind: Secret
        metadata: {{name: ldap-sa, namespace: default}}
        type: extauth.vendor.io/accountcredentials
        data: {json.dumps(secret)}
        """)


def make_tester(text: str) -> ChainTester:
    return ChainTester.from_yaml(text, plugins=PLUGINS, load_entry_points=False)


SA_SETTINGS = {"checkGroupsWithServiceAccount": True,
               "credentialsSecretRef": {"name": "ldap-sa", "namespace": "default"}}


def ldap_state(tester: ChainTester) -> State:
    """The ldap config type's connection pools and decision caches in ``tester``."""
    return tester.host.plugin("extauth").registry.types()["ldap"].state  # type: ignore[attr-defined, no-any-return]


def ldap_configs(tester: ChainTester) -> tuple[Any, ...]:
    """The compiled LdapConfigs of the first ``options.extauth`` in ``tester``."""
    return tuple(e.checker.cfg for e in tester.snapshot.plugin_compiled["extauth"][0].entries)


def reloaded(tester: ChainTester, text: str) -> ChainTester:
    """``text`` compiled for the same plugins, as a reload of a running
    gateway does (pools and caches carry over, resized or dropped)."""
    return ChainTester(build_snapshot(load_text(text), tester.host), tester.host)
