"""Every auth plugin behaves the same over HTTP/2 (issue 33, item 1): curl
``--http2-prior-knowledge`` (h2c) and curl ``--http2`` over TLS (ALPN
``h2``) against one ``twist twistgw`` process, through JWT + RBAC, an API
key (extauth ``apiKeyAuth``), a local rate limit and an extauth
pass-through HTTP service; each answer as over HTTP/1.1 (the same requests
with ``--http1.1`` beside). LDAP over HTTP/2: tests/ldap/test_ldap_http2.py.
The HTTP/2 upstream side (gRPC services behind these plugins) is the
``h2up`` branch's.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Any

import jwt as pyjwt
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from h2support import Backend, curl, self_signed
from support.ports import free_port
from support.process import TwistGateway

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PUBLIC = KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                       serialization.PublicFormat.SubjectPublicKeyInfo).decode()
ISSUER = "https://issuer.example.com"
API_KEY = "N2YwMDIxZTEtNGUzNS1jNzgzLTRkYjAtYjE2YzRkZGVmNjcy"


def token(**claims: Any) -> str:
    now = int(time.time())
    return pyjwt.encode({"iss": ISSUER, "sub": "alice", "iat": now, "exp": now + 600, **claims}, KEY,
                        algorithm="RS256")


class _Auth(http.server.BaseHTTPRequestHandler):
    """A pass-through auth service: 200 (with x-user-id) for ``authorization: let me in``, else 401."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        ok = self.headers.get("authorization") == "let me in"
        self.send_response(200 if ok else 401)
        if ok:
            self.send_header("x-user-id", "42")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST

    def log_message(self, *args: Any) -> None:
        pass


#: how each test reaches the gateway: h2c, ALPN h2 over TLS, and HTTP/1.1 for comparison
CLIENTS = {"h2c": ("--http2-prior-knowledge", "http", "2"), "alpn-h2": ("--http2", "https", "2"),
           "http1.1": ("--http1.1", "http", "1.1")}


def route(prefix: str, options: dict[str, Any]) -> dict[str, Any]:
    return {"matchers": [{"prefix": prefix}], "options": options,
            "routeAction": {"single": {"upstream": {"name": "backend", "namespace": "default"}}}}


def resources(backend_port: int, auth_port: int) -> list[dict[str, Any]]:
    rbac = {"policies": {"admins": {"principals": [{"jwtPrincipal": {"claims": {"role": "admin"}}}]}}}
    jwt_options = {"providers": {"example": {"issuer": ISSUER, "jwks": {"local": {"key": PUBLIC}}}}}
    return [
        {"apiVersion": "gloo.solo.io/v1", "kind": "Upstream", "metadata": {"name": "backend", "namespace": "default"},
         "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": backend_port}]}}},
        {"apiVersion": "v1", "kind": "Secret", "type": "extauth.solo.io/apikey",
         "metadata": {"name": "infra-apikey", "namespace": "default", "labels": {"team": "infrastructure"}},
         "stringData": {"api-key": API_KEY, "user": "alice"}},
        {"apiVersion": "enterprise.gloo.solo.io/v1", "kind": "AuthConfig",
         "metadata": {"name": "apikeys", "namespace": "default"},
         "spec": {"configs": [{"apiKeyAuth": {"headerName": "api-key", "labelSelector": {"team": "infrastructure"}}}]}},
        {"apiVersion": "enterprise.gloo.solo.io/v1", "kind": "AuthConfig",
         "metadata": {"name": "passthrough", "namespace": "default"},
         "spec": {"configs": [{"passThroughAuth": {"http": {
             "url": f"http://127.0.0.1:{auth_port}/auth",
             "request": {"allowedHeaders": ["authorization"]},
             "response": {"allowedUpstreamHeaders": ["x-user-id"]}}}}]}},
        {"apiVersion": "gateway.solo.io/v1", "kind": "VirtualService", "metadata": {"name": "api", "namespace": "default"},
         "spec": {"virtualHost": {"domains": ["*"], "routes": [
             route("/jwt", {"jwt": jwt_options, "rbac": rbac}),
             route("/apikey", {"extauth": {"configRef": {"name": "apikeys", "namespace": "default"}}}),
             *(route(f"/limited-{c}", {"localRatelimit": {"maxTokens": 2, "tokensPerFill": 2, "fillInterval": "100s"}})
               for c in CLIENTS),
             route("/passthrough", {"extauth": {"configRef": {"name": "passthrough", "namespace": "default"}}}),
         ]}}},
    ]


@pytest.fixture(scope="module")
def gw(tmp_path_factory: Any) -> Any:
    tmp = tmp_path_factory.mktemp("auth")
    backend = Backend()
    auth = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Auth)
    threading.Thread(target=auth.serve_forever, daemon=True).start()
    key, cert = self_signed(tmp / "certs")
    (tmp / "cfg").mkdir()
    (tmp / "cfg" / "config.yaml").write_text(yaml.safe_dump_all(resources(backend.port, auth.server_address[1])))
    tls = free_port()
    with TwistGateway(tmp, str(tmp / "cfg"), args=(
            "--listen", f"ssl:{tls}:privateKey={key}:certKey={cert}:interface=127.0.0.1")) as g:
        g.tls = tls
        g.backend = backend
        yield g
    auth.shutdown()
    backend.close()


def call(gw: Any, client: str, path: str, *headers: str) -> tuple[int, str, dict[str, Any] | None]:
    flag, scheme, _ = CLIENTS[client]
    port = gw.tls if scheme == "https" else gw.port
    args = ["-k", flag, "-w", "\n%{http_code} %{http_version}"]
    for h in headers:
        args += ["-H", h]
    out = curl(*args, f"{scheme}://127.0.0.1:{port}{path}")
    body, tail = out.stdout.rsplit("\n", 1)
    status, version = tail.split()
    assert version == CLIENTS[client][2], (client, out.stderr)
    try:
        seen = json.loads(body)
    except ValueError:
        seen = None
    return int(status), body, seen


@pytest.mark.parametrize("client", list(CLIENTS))
def test_jwt_and_rbac(gw: Any, client: str) -> None:
    assert call(gw, client, "/jwt")[0] == 401
    assert call(gw, client, "/jwt", "Authorization: Bearer not-a-token")[0] == 401
    assert call(gw, client, "/jwt", f"Authorization: Bearer {token(role='viewer')}")[0] == 403
    status, _, seen = call(gw, client, "/jwt/pets", f"Authorization: Bearer {token(role='admin')}")
    assert status == 200 and seen is not None and seen["path"] == "/jwt/pets"


@pytest.mark.parametrize("client", list(CLIENTS))
def test_api_key(gw: Any, client: str) -> None:
    assert call(gw, client, "/apikey")[0] == 401
    assert call(gw, client, "/apikey", "api-key: wrong")[0] == 401
    status, _, seen = call(gw, client, "/apikey", f"api-key: {API_KEY}")
    assert status == 200 and seen is not None and "Api-Key" not in seen["headers"]  # the key is not forwarded


@pytest.mark.parametrize("client", list(CLIENTS))
def test_local_rate_limit(gw: Any, client: str) -> None:
    statuses = [call(gw, client, f"/limited-{client}")[0] for _ in range(3)]  # a bucket of 2 per route
    assert statuses == [200, 200, 429]


@pytest.mark.parametrize("client", list(CLIENTS))
def test_extauth_pass_through_http_service(gw: Any, client: str) -> None:
    assert call(gw, client, "/passthrough")[0] == 401
    status, _, seen = call(gw, client, "/passthrough", "Authorization: let me in")
    assert status == 200 and seen is not None
    assert {k.lower(): v for k, v in seen["headers"].items()}["x-user-id"] == "42"


def test_the_backend_saw_http11_whatever_the_client_spoke(gw: Any) -> None:
    seen = [p for _, p, _, _ in gw.backend.seen]
    assert "/jwt/pets" in seen and "/apikey" in seen
