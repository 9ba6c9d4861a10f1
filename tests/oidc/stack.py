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


def _route(prefix: str, auth: str, extra: str = "") -> str:
    return f"""    - matchers: [{{prefix: /{prefix}/}}]
      routeAction: {{single: {{upstream: {{name: backend, namespace: default}}}}}}
      options:
        extauth: {{configRef: {{name: {auth}, namespace: default}}}}
{extra}"""


def config_yaml(gw: str, issuers: dict[str, str], tamper_url: str, backend: int, redis: str, key: bytes,
                introspect_url: str, token_b_url: str) -> str:
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
    docs = [f"""apiVersion: gloo.solo.io/v1
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
""" + _route("cookie", "oidc-cookie") + _route("admin", "oidc-cookie", rbac) + _route("redis", "oidc-redis")
        + _route("b", "oidc-b") + _route("short", "oidc-short") + _route("cshort", "oidc-cshort")
        + _route("api", "atv-introspection") + _route("jwtapi", "atv-jwt")]
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
        self.idp = Idp(tmp, [
            ("a", [client("app", "app-secret-1", cb[:2], [f"{self.gw}/bye"]),
                   client("short-app", "short-secret-1", cb[2:], [f"{self.gw}/bye"])]),
            ("b", [client("app-b", "app-b-secret-1", [f"{self.gw}/b/callback"], [f"{self.gw}/bye"],
                          auth_method="client_secret_post")]),
        ], auth_methods={"b": ["client_secret_post"]}).start()
        self.tamperer = TokenTamperer(self.idp.issuers["a"] + "/token")
        #: counts introspection requests on their way to the provider
        self.introspection = TokenTamperer(self.idp.issuers["a"] + "/token/introspection")
        #: records issuer b's token requests (client_secret_post, tokenEndpointQueryParams)
        self.token_b = TokenTamperer(self.idp.issuers["b"] + "/token")
        self.key = os.urandom(32)
        (self.config_dir / "config.yaml").write_text(config_yaml(
            self.gw, self.idp.issuers, self.tamperer.url, self.backend.port, self.redis.address, self.key,
            self.introspection.url, self.token_b.url))
        self.gateway.__enter__()

    def url(self, path: str) -> str:
        return self.gw + path

    def browser(self) -> Browser:
        return Browser()

    def restart_gateway(self) -> None:
        self.gateway.__exit__(None, None, None)
        self.gateway.__enter__()

    def close(self) -> None:
        for step in (lambda: self.gateway.__exit__(None, None, None), self.idp.stop, self.tamperer.close,
                     self.introspection.close, self.token_b.close, self.backend.close, self.redis.stop):
            try:
                step()
            except Exception:  # noqa: BLE001 (teardown goes on)
                pass
