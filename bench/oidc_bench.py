"""Material for the oauth2 benchmark scenarios (bench/harness.py):

* ``oidc-cookie``: a request with a valid OIDC session in the cookie store;
* ``oidc-redis``: the same with the session in Redis (a private redis-server);
* ``oauth2-introspect``: an opaque access token, its introspection cached.

No identity provider takes part in the measured requests: a valid session
never asks it. The sessions are made as the gateway makes them at a login
(``twistgw_oidc._session``: sealed with the configured key, or written to
Redis under the hashed id), so the bench needs no browser. The issuer URL
points at a port nobody serves (discovery fails in the background, which a
valid session never needs); the introspection endpoint is a tiny local
server that counts calls, so the check can prove the cache is warm.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "plugins"))

SCENARIOS = ["oidc-cookie", "oidc-redis", "oauth2-introspect"]
DESCRIPTIONS = {
    "oidc-cookie": "twistgw, OIDC login session in the cookie store (AES-GCM sealed), valid",
    "oidc-redis": "twistgw, OIDC login session in Redis (one GET a request), valid",
    "oauth2-introspect": "twistgw, opaque access token, introspection result cached",
}
KEY = b"bench key: 32 bytes, not secret"[:31] + b"!"
TOKEN = "bench-opaque-access-token"
UNSERVED_ISSUER = "http://127.0.0.1:9"  # discard port: nothing answers


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def session_bytes() -> bytes:
    """A session as the callback stores it, valid for a day."""
    from twistgw_oidc._session import Session

    now = time.time()
    claims = {"iss": UNSERVED_ISSUER, "aud": "bench", "sub": "alice", "email": "alice@example.org",
              "exp": int(now + 86400), "iat": int(now)}
    id_token = f"{_b64(b'{}')}.{_b64(json.dumps(claims).encode())}.c2ln"
    return Session(binding(), id_token, "bench-access", None, now + 86400, now, claims).to_bytes()


def binding() -> str:
    from twistgw_oidc._options import binding_of

    return binding_of(UNSERVED_ISSUER, "bench", "http://127.0.0.1", "/callback")


def cookie_header() -> str:
    from twistgw_oidc._cookies import Sealer

    return f"Cookie: __session={Sealer(KEY).seal('__session', session_bytes())}"


def redis_session(port: int) -> str:
    """Stores a session in Redis; returns the Cookie header naming it."""
    session_id = "bench-session-id-0123456789abcdefghijklmnopq"
    key = "bench:session:" + hashlib.sha256(session_id.encode()).hexdigest()
    subprocess.run(["redis-cli", "-p", str(port), "SET", key, session_bytes().decode()], check=True,
                   capture_output=True, timeout=10)
    return f"Cookie: __session={session_id}"


def redis_argv(port: int, prefix: str) -> list[str]:
    return ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", prefix]


class Introspection:
    """An RFC 7662 endpoint that knows one token; counts its calls."""

    def __init__(self) -> None:
        owner = self
        self.calls = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                owner.calls += 1
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                active = f"token={TOKEN}".encode() in body
                doc = {"active": active, "sub": "svc", "scope": "read", "exp": int(time.time()) + 86400} \
                    if active else {"active": False}
                data = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _auth_config(body: str) -> str:
    return f"""---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: bench-oauth2, namespace: default}}
spec:
  configs:
  - oauth2:
{body}---
apiVersion: v1
kind: Secret
metadata: {{name: bench-oauth, namespace: default}}
type: extauth.solo.io/oauth
stringData: {{client-secret: bench-secret}}
---
apiVersion: v1
kind: Secret
metadata: {{name: bench-key, namespace: default}}
type: Opaque
data: {{key: {base64.b64encode(KEY).decode()}}}
"""


OPTIONS = """    options:
      extauth: {configRef: {name: bench-oauth2, namespace: default}}
"""


def options(name: str, redis_port: int = 0, introspection_port: int = 0) -> tuple[str, str]:
    """(virtual host options, extra resources) for a scenario."""
    if name == "oauth2-introspect":
        return OPTIONS, _auth_config(f"""      accessTokenValidation:
        introspection:
          introspectionUrl: http://127.0.0.1:{introspection_port}/introspect
          clientId: bench
          clientSecretRef: {{name: bench-oauth, namespace: default}}
        cacheTimeout: 1h
""")
    store = f"redis: {{options: {{host: '127.0.0.1:{redis_port}'}}, keyPrefix: 'bench:'}}" if name == "oidc-redis" \
        else "cookie: {}\n          cipherConfig: {keyRef: {name: bench-key, namespace: default}}"
    return OPTIONS, _auth_config(f"""      oidcAuthorizationCode:
        issuerUrl: {UNSERVED_ISSUER}
        clientId: bench
        clientSecretRef: {{name: bench-oauth, namespace: default}}
        appUrl: http://127.0.0.1
        callbackPath: /callback
        session:
          cookieOptions: {{notSecure: true}}
          {store}
""")
