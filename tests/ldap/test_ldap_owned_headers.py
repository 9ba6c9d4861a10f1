"""Headers the plugins vouch for, end to end through a running gateway, a real
slapd and a real backend: the client's copies of LDAP ``groupsHeader`` /
``userHeader`` and JWT ``claimsToHeaders`` never reach a backend, a plugin or
a route matcher, on routes where the plugin runs, on routes that turn it off,
and in another virtual service (twistgw.OwnsRequestHeaders; docs/plugins.md,
"Headers your plugin sets")."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt as pyjwt
import pytest
import pytest_twisted
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from ldap_helpers import MANAGERS_DN, basic
from support.http import static_upstream_yaml, vs_yaml

import twistgw_jwt
import twistgw_ldap

ISSUER = "https://issuer.example.com"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PUBLIC_PEM = KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
PLUGINS = [("extauth", twistgw_ldap.ExtAuthPlugin), ("jwt", twistgw_jwt.JwtPlugin)]
#: what a client forges: every owned header, in other cases and repeated
FORGED = [("X-Auth-Groups", "admins"), ("x-auth-groups", "root"), ("X-AUTH-USER", "root"),
          ("X-Jwt-Role", "admin"), ("X-Custom", "kept")]
OWNED = (b"x-auth-groups", b"x-auth-user", b"x-jwt-role")


def bearer(role: str) -> str:
    now = int(time.time())
    tok = pyjwt.encode({"iss": ISSUER, "sub": "alice", "role": role, "iat": now, "exp": now + 600},
                       KEY, algorithm="RS256")
    return f"Bearer {tok}"


def route(prefix: str, options: str = "", matchers: str = "") -> str:
    """One route to the Upstream ``backend`` (YAML, indented for vs_yaml)."""
    text = (f"    - matchers: [{{prefix: {prefix}{matchers}}}]\n"
            "      routeAction: {single: {upstream: {name: backend}}}\n")
    return text + (f"      options: {options}\n" if options else "")


def config(ldap_url: str, backend_port: int) -> str:
    """``app`` (LDAP, ``/open`` turns it off), ``api`` (JWT, ``/public`` turns
    it off) and ``other`` (no auth; a route matching a forged X-Auth-User)."""
    ldap = {"address": ldap_url, "userDnTemplate": "uid=%s,ou=people,dc=example,dc=org",
            "allowedGroups": [MANAGERS_DN], "groupsHeader": "X-Auth-Groups", "userHeader": "X-Auth-User",
            "cacheTtl": "0s", "connectTimeout": "1s", "requestTimeout": "1s"}
    jwt = {"providers": {"main": {"issuer": ISSUER, "jwks": {"local": {"key": PUBLIC_PEM}},
                                  "claimsToHeaders": [{"claim": "role", "header": "X-Jwt-Role"}]}}}
    auth_config = ("apiVersion: enterprise.gateway.vendor.io/v1\nkind: AuthConfig\nmetadata: {name: ldap}\n"
                   f"spec: {{configs: [{{ldap: {json.dumps(ldap)}}}]}}\n")
    forged_route = ("    - matchers: [{prefix: /, headers: [{name: X-Auth-User, value: root}]}]\n"
                    "      directResponseAction: {status: 418, body: a forged header chose this route}\n")
    return "---\n".join([
        static_upstream_yaml("backend", [backend_port]),
        auth_config,
        vs_yaml("app", domains=["app.example.com"], options="{extauth: {configRef: {name: ldap}}}",
                routes=route("/open", "{extauth: {disable: true}}") + route("/")),
        vs_yaml("api", domains=["api.example.com"], options=f"{{jwt: {json.dumps(jwt)}}}",
                routes=route("/public", "{jwt: {disable: true}}") + route("/")),
        vs_yaml("other", domains=["other.example.com"], routes=forged_route + route("/")),
    ])


@pytest.fixture
def served(slapd_open: Any, backend: Any, gateway: Any, tmp_path: Path) -> Any:
    (tmp_path / "config.yaml").write_text(config(slapd_open.url, backend.port))
    return gateway(str(tmp_path), plugins=PLUGINS)


async def send(gw: Any, backend: Any, host: str, path: str, extra: list[tuple[str, str]] = ()) -> Any:
    from support.http import http_request

    count = len(backend.requests)
    response = await http_request("GET", gw.url(path), headers=[("Host", host)] + FORGED + list(extra))
    assert response.status == 200, (host, path, response.status, response.body)
    assert len(backend.requests) == count + 1
    return backend.requests[-1]


def assert_no_forged_copy(seen: Any) -> None:
    for name in OWNED:
        assert seen.header(name) is None, (name, seen.header(name))
    assert seen.header(b"x-custom") == [b"kept"]  # other client headers still pass


@pytest.mark.parametrize("host,path", [("app.example.com", "/open/x"), ("api.example.com", "/public/x"),
                                       ("other.example.com", "/x")])
@pytest_twisted.ensureDeferred
async def test_forged_copies_never_reach_a_backend_where_no_plugin_runs(served: Any, backend: Any,
                                                                       host: str, path: str) -> None:
    # a route that turns the plugin off, and a virtual service without it
    # (which must not pick the route matching the forged X-Auth-User either)
    assert_no_forged_copy(await send(served, backend, host, path))


@pytest_twisted.ensureDeferred
async def test_where_ldap_runs_the_backend_sees_the_directory_values_only(served: Any, backend: Any) -> None:
    seen = await send(served, backend, "app.example.com", "/x",
                      [("Authorization", basic("alice", "alice-pw")["Authorization"])])
    assert seen.header(b"x-auth-groups") == [b"developers,managers"]
    assert seen.header(b"x-auth-user") == [b"alice"]
    assert seen.header(b"x-jwt-role") is None
    assert seen.header(b"authorization") is None


@pytest_twisted.ensureDeferred
async def test_where_jwt_runs_the_backend_sees_the_claim_only(served: Any, backend: Any) -> None:
    seen = await send(served, backend, "api.example.com", "/x", [("Authorization", bearer("viewer"))])
    assert seen.header(b"x-jwt-role") == [b"viewer"]
    assert seen.header(b"x-auth-groups") is None and seen.header(b"x-auth-user") is None


def test_explain_names_the_removed_headers(slapd_open: Any, tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "config.yaml").write_text(config(slapd_open.url, 9))
    out = subprocess.run([sys.executable, "-m", "twistgw", "explain", str(tmp_path), "GET",
                          "http://app.example.com/open/x", "-H", "x-auth-groups: admins", "-H", "X-Custom: 1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Removed from the request (set only by plugins): X-Auth-Groups\n" in out.stdout
    sent = out.stdout.split("Headers sent upstream:")[1]
    assert "X-Custom: 1" in sent and "admins" not in sent
