"""JWT stages around a real LDAP check, through the real gateway: the
``beforeExtAuth`` stage answers before slapd is asked, the ``afterExtAuth``
stage after it, and a route replacing one stage keeps the other."""

from __future__ import annotations

from typing import Any

import pytest_twisted
import yaml
from ldap_helpers import MANAGERS_DN, basic
from support.http import http_request

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

import twistgw_jwt
import twistgw_ldap
from twistgw_jwt import tools

PLUGINS = [("extauth", twistgw_ldap.ExtAuthPlugin), ("jwt", twistgw_jwt.JwtPlugin)]
#: three signing keys: the edge's, the application's, the reports route's
KEYS = [rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(3)]


def public_pem(n: int) -> str:
    return KEYS[n].public_key().public_bytes(serialization.Encoding.PEM,
                                             serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def provider(n: int, header: str) -> dict:
    return {"issuer": "https://idp.example.com", "tokenSource": {"headers": [{"header": header}]},
            "jwks": {"local": {"key": public_pem(n=n)}}}


def token(n: int) -> str:
    pem = KEYS[n].private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return tools.mint_token(pem, "https://idp.example.com", f"svc-{n}", {}, 3600)


def config(ldap_url: str, backend_port: int) -> str:
    route = {"routeAction": {"single": {"upstream": {"name": "backend"}}}}
    return yaml.safe_dump_all([
        {"apiVersion": "core.vendor.io/v1", "kind": "Upstream", "metadata": {"name": "backend"},
         "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": backend_port}]}}},
        {"apiVersion": "enterprise.gateway.vendor.io/v1", "kind": "AuthConfig", "metadata": {"name": "ldap"},
         "spec": {"configs": [{"ldap": {"address": ldap_url, "userDnTemplate": "uid=%s,ou=people,dc=example,dc=org",
                                        "allowedGroups": [MANAGERS_DN]}}]}},
        {"apiVersion": "gateway.vendor.io/v1", "kind": "VirtualService", "metadata": {"name": "vs"},
         "spec": {"virtualHost": {
             "options": {"extauth": {"configRef": {"name": "ldap"}},
                         "jwtStaged": {"beforeExtAuth": {"providers": {"edge": provider(0, "x-edge-token")}},
                                       "afterExtAuth": {"providers": {"app": provider(1, "x-app-token")}}}},
             "routes": [
                 {"name": "reports", "matchers": [{"prefix": "/reports"}], **route, "options": {
                     "jwtProvidersStaged": {"afterExtAuth": {"providers": {"reports": provider(2, "x-app-token")}}}}},
                 {"name": "health", "matchers": [{"prefix": "/health"}], **route, "options": {
                     "jwtStaged": {"beforeExtAuth": {"disable": True}}}},
                 {"matchers": [{"prefix": "/"}], **route}]}}},
    ])


async def call(gw: Any, path: str, edge: int | None = None, app: int | None = None,
               user: tuple[str, str] | None = None) -> tuple[int, bytes]:
    headers: dict[str, str] = {}
    if edge is not None:
        headers["x-edge-token"] = token(edge)
    if app is not None:
        headers["x-app-token"] = token(app)
    if user is not None:
        headers.update(basic(*user))
    r = await http_request("GET", gw.url(path), headers=headers)
    return r.status, r.body if r.status != 200 else b""


@pytest_twisted.ensureDeferred
async def test_stages_run_before_and_after_the_ldap_check(slapd_open: Any, backend: Any, config_dir: Any,
                                                          gateway: Any) -> None:
    gw = gateway(config_dir(config(slapd_open.url, backend.port)), plugins=PLUGINS)
    alice, bob = ("alice", "alice-pw"), ("bob", "bob-pw")
    binds = len(slapd_open.binds())
    # the before stage answers first: slapd is not asked
    assert await call(gw, "/pets", user=alice, app=1) == (401, b"Jwt is missing")
    assert await call(gw, "/pets", edge=1, user=alice, app=1) == (401, b"Jwt verification fails")
    assert len(slapd_open.binds()) == binds
    # then LDAP (empty bodies), then the after stage
    assert await call(gw, "/pets", edge=0, app=1) == (401, b"")
    assert await call(gw, "/pets", edge=0, user=bob, app=1) == (403, b"")
    assert await call(gw, "/pets", edge=0, user=alice) == (401, b"Jwt is missing")
    assert await call(gw, "/pets", edge=0, user=alice, app=1) == (200, b"")
    seen = backend.requests[-1]
    assert seen.header(b"x-edge-token") is None and seen.header(b"x-app-token") is None
    assert seen.header(b"authorization") is None

    # a route replacing the after stage keeps the host's before stage
    assert await call(gw, "/reports", user=alice, app=2) == (401, b"Jwt is missing")
    assert await call(gw, "/reports", edge=0, user=alice, app=1) == (401, b"Jwt verification fails")
    assert await call(gw, "/reports", edge=0, user=alice, app=2) == (200, b"")
    # a route turning the before stage off keeps LDAP and the after stage
    assert await call(gw, "/health", user=alice, app=1) == (200, b"")
    assert await call(gw, "/health", user=alice) == (401, b"Jwt is missing")
    assert await call(gw, "/health", app=1) == (401, b"")
