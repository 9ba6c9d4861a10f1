"""One OIDC test stack, shared by the tests of a module: a real Redis, the
OpenID provider (two issuers), the token-endpoint attacker in front of
issuer ``a``, an echo backend, and the gateway as its own process
(``twist twistgw``) with one configuration holding every case:

=================  ======================================================
``/cookie/``       issuer a, client ``app``, cookie store (key ``c``)
``/admin/``        the same AuthConfig, plus RBAC: group ``admins``
``/redis/``        issuer a, client ``app``, Redis store (``r_session``)
``/b/``            issuer b, client ``app-b``, cookie store (key ``b``); issuer
                   b offers only ``client_secret_post``, its token requests
                   go through a recorder (``token_b``), with extra query
                   parameters for both endpoints
``/short/``        issuer a, client ``short-app`` (2 s tokens), Redis store
                   (database 1, ``poolSize: 2``)
``/cshort/``       the same client, cookie store, refreshing allowed
``/api/``          access tokens by introspection at issuer a
``/jwtapi/``       access tokens as JWTs, issuer a's JWKS
``/rev/``          issuer a, client ``app``, cookie store (key ``rv``), its
                   ``discoveryOverride.revocationEndpoint`` the
                   :class:`Revoker` (forwards, fails or hangs)
``/opa/``          issuer a, client ``app``, cookie store (key ``o``), then
``/owners/``       ``opaAuth`` with Gloo's OPA-over-OIDC guide policy verbatim
``/jwtopa/``       ``accessTokenValidation.jwt`` (issuer a), then ``opaAuth``
                   reading ``input.state``
=================  ======================================================

Blocking helpers: use them in plain tests and fixtures.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from oidc_support import Browser, Idp, TokenTamperer, client
from support.process import TwistGateway
from support.redis import RedisServer


class EchoBackend:
    """Answers every request with JSON: method, path and headers received."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("content-length", "0") or 0)
                if length:
                    self.rfile.read(length)
                body = json.dumps({"method": self.command, "path": self.path,
                                   "headers": [[k.lower(), v] for k, v in self.headers.items()]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815 (http.server's names)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Revoker:
    """A revocation endpoint in front of issuer a's: records each request
    (form and headers), then forwards it (``mode = "forward"``), answers
    500 (``"fail"``) or never answers (``"hang"``, until :meth:`close`)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.mode = "forward"
        self.seen: list[dict[str, Any]] = []
        self.released = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                from urllib.parse import parse_qsl

                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                owner.seen.append({"headers": dict(self.headers), "form": dict(parse_qsl(body.decode()))})
                if owner.mode == "hang":
                    owner.released.wait(60)
                    return
                status, data = (500, b"{}") if owner.mode == "fail" else owner._forward(body, dict(self.headers))
                self.send_response(status)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/revoke"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _forward(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(self.endpoint)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        keep = {k: v for k, v in headers.items() if k.lower() in ("authorization", "content-type")}
        conn.request("POST", parts.path, body=body, headers=keep)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, data

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


#: Gloo's OPA guide ("Validate JWTs with Open Policy Agent", check-jwt.rego), verbatim.
GLOO_OPA_OIDC_POLICY = """package test

default allow = false
[header, payload, signature] := io.jwt.decode(input.state.jwt)

allow {
    payload["email"] == "admin@example.com"
}
allow {
    payload["email"] == "user@example.com"
    not startswith(input.http_request.path, "/owners")
}
"""

#: After accessTokenValidation.jwt: Gloo's state key for its claims, and no input.state.jwt.
JWT_ACCESS_OPA_POLICY = """package test

default allow = false
allow {
    input.state.jwtAccessToken.sub == "svc-1"
    input.state.claims.sub == "svc-1"
    not input.state.jwt
}
"""


def _indented(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in text.splitlines())


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _oidc(issuer: str, client_id: str, prefix: str, gw: str, session: str, extra: str = "") -> str:
    return f"""
        issuerUrl: {issuer}
        clientId: {client_id}
        clientSecretRef: {{name: {client_id}-secret, namespace: default}}
        appUrl: {gw}
        callbackPath: /{prefix}/callback
        logoutPath: /{prefix}/logout
        afterLogoutUrl: {gw}/bye
        frontChannelLogout: {{path: /{prefix}/fcl}}
        scopes: [email, groups, offline_access]
        headers: {{idTokenHeader: x-id-token, accessTokenHeader: x-access-token}}
        identityToken: {{claimsToHeaders: [{{claim: email, header: x-user-email}}]}}
        session:
          cookieOptions: {{notSecure: true}}
{session}{extra}"""


def _auth_config(name: str, body: str) -> str:
    return f"""---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: {name}, namespace: default}}
spec:
  configs:
  - oauth2:
      oidcAuthorizationCode:{body}
"""


def app_head(backend: int) -> str:
    """The start of the test stack's configuration: the ``backend`` Upstream
    (the echo backend's port) and the ``app`` VirtualService up to its
    ``/bye`` route (where logouts land); its other routes follow
    (:func:`_route`)."""
    return f"""apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: backend, namespace: default}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {backend}}}]}}}}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: app, namespace: default}}
spec:
  virtualHost:
    domains: ["*"]
    routes:
    - matchers: [{{exact: /bye}}]
      directResponseAction: {{status: 200, body: "bye"}}
"""


def _route(prefix: str, auth: str, extra: str = "") -> str:
    return f"""    - matchers: [{{prefix: /{prefix}/}}]
      routeAction: {{single: {{upstream: {{name: backend, namespace: default}}}}}}
      options:
        extauth: {{configRef: {{name: {auth}, namespace: default}}}}
{extra}"""


def config_yaml(gw: str, issuers: dict[str, str], tamper_url: str, backend: int, redis: str, key: bytes,
                introspect_url: str, token_b_url: str, revoker_url: str = "http://127.0.0.1:9/revoke") -> str:
    cookie = """          cookie: {keyPrefix: %s, allowRefreshing: true}
          cipherConfig: {keyRef: {name: session-key, namespace: default}}
"""
    redis_session = """          redis: {options: {host: '%s'}, cookieName: %s, keyPrefix: 'twistgw-test:'}
"""
    rbac = """        rbac:
          policies:
            admins:
              principals:
              - jwtPrincipal: {claims: {groups: admins}, matcher: LIST_CONTAINS}
"""
    a, b = issuers["a"], issuers["b"]
    docs = [app_head(backend) + _route("cookie", "oidc-cookie") + _route("admin", "oidc-cookie", rbac) + _route("redis", "oidc-redis")
        + _route("b", "oidc-b") + _route("short", "oidc-short") + _route("cshort", "oidc-cshort")
        + _route("api", "atv-introspection") + _route("jwtapi", "atv-jwt") + _route("rev", "oidc-rev")
        + _route("opa", "oidc-opa") + _route("owners", "oidc-opa") + _route("jwtopa", "atv-jwt-opa")]
    docs.append(_auth_config("oidc-cookie", _oidc(a, "app", "cookie", gw, cookie % "c",
                                                  f"        discoveryOverride: {{tokenEndpoint: '{tamper_url}'}}\n")))
    docs.append(_auth_config("oidc-redis", _oidc(a, "app", "redis", gw, redis_session % (redis, "r_session"))))
    docs.append(_auth_config("oidc-b", _oidc(b, "app-b", "b", gw, cookie % "b",
                                             f"        discoveryOverride: {{tokenEndpoint: '{token_b_url}'}}\n"
                                             "        authEndpointQueryParams: {ui_locales: en}\n"
                                             "        tokenEndpointQueryParams: {x_gateway: twistgw}\n")))
    # in database 1 of the same Redis, over at most two connections per gateway process
    docs.append(_auth_config("oidc-short", _oidc(a, "short-app", "short", gw, (
        "          redis: {options: {host: '%s', db: 1, poolSize: 2}, cookieName: s_session,"
        " keyPrefix: 'twistgw-short:', preExpiryBuffer: 0s}\n") % redis)))
    docs.append(_auth_config("oidc-cshort", _oidc(a, "short-app", "cshort", gw, cookie % "cs")))
    docs.append(_auth_config("oidc-rev", _oidc(a, "app", "rev", gw, cookie % "rv",
                                               f"        discoveryOverride: {{revocationEndpoint: '{revoker_url}'}}\n")))
    docs.append(_auth_config("oidc-opa", _oidc(a, "app", "opa", gw, cookie % "o")) + """  - opaAuth:
      modules: [{name: allow-jwt, namespace: default}]
      query: "data.test.allow == true"
---
apiVersion: v1
kind: ConfigMap
metadata: {name: allow-jwt, namespace: default}
data:
  check-jwt.rego: |
""" + _indented(GLOO_OPA_OIDC_POLICY, 4) + """---
apiVersion: v1
kind: ConfigMap
metadata: {name: jwt-access-opa, namespace: default}
data:
  policy.rego: |
""" + _indented(JWT_ACCESS_OPA_POLICY, 4))
    docs.append(f"""---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: atv-introspection, namespace: default}}
spec:
  configs:
  - oauth2:
      accessTokenValidation:
        introspection:
          introspectionUrl: {introspect_url}
          clientId: app
          clientSecretRef: {{name: app-secret, namespace: default}}
          userIdAttributeName: sub
        userinfoUrl: {a}/me
        cacheTimeout: 30s
        requiredScopes: {{scope: [email]}}
        dynamicMetadataFromClaims: {{x-token-sub: sub, x-token-email: email}}
---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: atv-jwt, namespace: default}}
spec:
  configs:
  - oauth2:
      accessTokenValidation:
        jwt: {{remoteJwks: {{url: '{a}/jwks'}}, issuer: '{a}', audiences: [api]}}
        requiredScopes: {{scope: [read]}}
        claimsToHeaders: [{{claim: sub, header: x-token-sub}}]
---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: atv-jwt-opa, namespace: default}}
spec:
  configs:
  - oauth2:
      accessTokenValidation:
        jwt: {{remoteJwks: {{url: '{a}/jwks'}}, issuer: '{a}', audiences: [api]}}
  - opaAuth:
      modules: [{{name: jwt-access-opa, namespace: default}}]
      query: "data.test.allow == true"
""")
    for name, secret in (("app", b"app-secret-1"), ("app-b", b"app-b-secret-1"), ("short-app", b"short-secret-1")):
        docs.append(f"""---
apiVersion: v1
kind: Secret
metadata: {{name: {name}-secret, namespace: default}}
type: extauth.solo.io/oauth
data: {{client-secret: {b64(secret)}}}
""")
    docs.append(f"""---
apiVersion: v1
kind: Secret
metadata: {{name: session-key, namespace: default}}
type: Opaque
data: {{key: {b64(key)}}}
""")
    return "".join(docs)


class Stack:
    def __init__(self, tmp: Path, workers: int = 0) -> None:
        self.tmp = tmp
        self.redis = RedisServer(tmp / "redis").start()
        self.backend = EchoBackend()
        self.config_dir = tmp / "config"
        self.config_dir.mkdir()
        args = ("--workers", str(workers)) if workers else ()
        self.gateway = TwistGateway(tmp, str(self.config_dir), args=args)
        self.gw = f"http://localhost:{self.gateway.port}"
        self.host = f"localhost:{self.gateway.port}"
        cb = [f"{self.gw}/{p}/callback" for p in ("cookie", "redis", "short", "cshort")]
        app_cb = cb[:2] + [f"{self.gw}/{p}/callback" for p in ("rev", "opa")]
        self.idp = Idp(tmp, [
            ("a", [client("app", "app-secret-1", app_cb, [f"{self.gw}/bye"]),
                   client("short-app", "short-secret-1", cb[2:], [f"{self.gw}/bye"])]),
            ("b", [client("app-b", "app-b-secret-1", [f"{self.gw}/b/callback"], [f"{self.gw}/bye"],
                          auth_method="client_secret_post")]),
        ], auth_methods={"b": ["client_secret_post"]}).start()
        self.tamperer = TokenTamperer(self.idp.issuers["a"] + "/token")
        #: counts introspection requests on their way to the provider
        self.introspection = TokenTamperer(self.idp.issuers["a"] + "/token/introspection")
        #: records issuer b's token requests (client_secret_post, tokenEndpointQueryParams)
        self.token_b = TokenTamperer(self.idp.issuers["b"] + "/token")
        #: issuer a's revocation endpoint behind a switch (the /rev/ route's revocationEndpoint)
        self.revoker = Revoker(self.idp.issuers["a"] + "/token/revocation")
        self.key = os.urandom(32)
        (self.config_dir / "config.yaml").write_text(config_yaml(
            self.gw, self.idp.issuers, self.tamperer.url, self.backend.port, self.redis.address, self.key,
            self.introspection.url, self.token_b.url, self.revoker.url))
        self.gateway.__enter__()

    def url(self, path: str) -> str:
        return self.gw + path

    def browser(self) -> Browser:
        return Browser()

    def active(self, token: str, hint: str, issuer: str = "a") -> bool:
        """What issuer ``issuer``'s introspection endpoint says of ``token`` (asked as client app)."""
        import http.client
        from urllib.parse import urlencode, urlsplit

        parts = urlsplit(self.idp.issuers[issuer])
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        auth = "Basic " + b64(b"app:app-secret-1") if issuer == "a" else None
        form = {"token": token, "token_type_hint": hint}
        if auth is None:
            form.update(client_id="app-b", client_secret="app-b-secret-1")
        conn.request("POST", "/token/introspection", body=urlencode(form),
                     headers={"Content-Type": "application/x-www-form-urlencoded",
                              **({"Authorization": auth} if auth else {})})
        r = conn.getresponse()
        doc = json.loads(r.read())
        conn.close()
        assert r.status == 200, doc
        return bool(doc.get("active"))

    def sealed_tokens(self, name: str, jar: dict[str, str]) -> tuple[str, str]:
        """(access token, refresh token) of the cookie-store session ``name`` in ``jar``."""
        from twistgw_oidc._cookies import Sealer, joined_value

        sealed = Sealer(self.key).open(name, joined_value(jar, name) or "")
        assert sealed is not None, f"no session {name} in {sorted(jar)}"
        doc = json.loads(sealed)
        return doc["a"], doc["r"]

    def redis_tokens(self, session_id: str) -> tuple[str, str]:
        """(access token, refresh token) of the Redis session ``session_id`` (the /redis/ route's)."""
        import hashlib

        doc = json.loads(self.redis.command("GET", "twistgw-test:session:" + hashlib.sha256(
            session_id.encode()).hexdigest()))
        return doc["a"], doc["r"]

    def restart_gateway(self) -> None:
        self.gateway.__exit__(None, None, None)
        self.gateway.__enter__()

    def close(self) -> None:
        for step in (lambda: self.gateway.__exit__(None, None, None), self.idp.stop, self.tamperer.close,
                     self.introspection.close, self.token_b.close, self.revoker.close, self.backend.close,
                     self.redis.stop):
            try:
                step()
            except Exception:  # noqa: BLE001 (teardown goes on)
                pass
