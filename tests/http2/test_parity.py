"""Every route, matcher, traffic option and auth plugin behaves the same over
HTTP/2 as over HTTP/1.1 (issue 33, item 1), table-driven.

Each group below is one configuration, written as users write it (Gloo
YAML: VirtualService, RouteTable, Upstream, UpstreamGroup, Secret,
ConfigMap, AuthConfig, Settings), served by one ``twist twistgw`` process
with a plain and a TLS listener; each case is a list of requests sent in
order over HTTP/1.1 (``h1``), h2c with prior knowledge (``h2c``), TLS with
ALPN ``http/1.1`` (``h1tls``) and TLS with ALPN ``h2`` (``h2tls``), each on
its own connection (:mod:`parity`). For every request:

* the HTTP/1.1 answer is what the row says (its status, the number of
  requests the backends got, headers the backend must or must not have got,
  response headers), so that a case cannot pass by both protocols failing
  alike;
* the HTTP/2 answer equals the HTTP/1.1 answer of the same transport:
  status, body, every end-to-end response header (names compared in lower
  case; ``date`` and the connection's own fields left out);
* what every loopback server got meanwhile (the backend, a shadow, the
  pass-through / customAuth / introspection service) is the same: method,
  target after rewrites, every header after the policy, the body.

``{m}`` in a path or a header value is the mode's own token (``mode-h2c``),
for stateful cases: a rate-limit bucket or a backend that fails the first
request of each path; it is read back as ``MODE`` before comparing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs

import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from passlib.hash import apr_md5_crypt

from h2support import self_signed
from parity import (MODES, PAIRS, TOKENS, Case, Outcome, Recorder, Req, Seen, backend_answer, case, curl_exchange,
                    exchange)
from support.grpc_authz import GrpcAuthServer, denied, header_map, ok
from support.ports import free_port
from support.process import TwistGateway

_LDAP = str(Path(__file__).resolve().parent.parent / "ldap")
if _LDAP not in sys.path:
    sys.path.append(_LDAP)

from slapd import Slapd, SlapdMissing  # noqa: E402  (tests/ldap, put on sys.path above)

NS = "default"
ISSUER = "https://issuer.example.com"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PUBLIC = KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                       serialization.PublicFormat.SubjectPublicKeyInfo).decode()
JWKS = json.dumps({"keys": [dict(json.loads(pyjwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key())),
                                 kid="k1", alg="RS256", use="sig")]})
API_KEY = "N2YwMDIxZTEtNGUzNS1jNzgzLTRkYjAtYjE2YzRkZGVmNjcy"
SALT = "TYiryv0/"
APR = apr_md5_crypt.using(salt=SALT).hash("password").rsplit("$", 1)[1]  # htpasswd -nbm user password
SHA1 = hashlib.sha1(b"s3cret" + SALT.encode()).hexdigest()               # Gloo's salted SHA-1


def token(key: Any = KEY, **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "sub": "alice", "iat": now, "exp": now + 3600, **claims}
    return pyjwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm="RS256",
                        headers={"kid": "k1"})


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


ADMIN, VIEWER = token(role="admin"), token(role="viewer")
EXPIRED, FOREIGN = token(role="admin", exp=int(time.time()) - 600), token(key=OTHER_KEY, role="admin")
ACCESS = token(aud="api", scope="read write", sub="svc-1")
ACCESS_NO_SCOPE = token(aud="api", scope="write", sub="svc-1")


def auth_service(seen: Seen, count: int) -> tuple[int, list[tuple[str, str]], bytes]:
    """The authorization services in one loopback server, by path:
    ``/pass`` (passThroughAuth.http), ``/check/...`` (customAuth),
    ``/introspect`` (RFC 7662)."""
    headers = {n.lower(): v for n, v in seen.headers}
    if seen.target == "/pass":
        if headers.get("authorization") == "let me in":
            return 200, [("x-user-id", "42")], b""
        return 401, [("www-authenticate", 'Custom realm="parity"')], b""
    if seen.target.startswith("/check/"):
        if headers.get("x-custom") == "ok":
            return 200, [("x-custom-user", "bob")], b""
        return 403, [("content-type", "text/plain"), ("x-custom-reason", "nope")], b"custom says no\n"
    if seen.target == "/introspect":
        form = parse_qs(seen.body.decode())
        active = form.get("token") == ["good-opaque"]
        answer = {"active": True, "sub": "svc-2", "scope": "read"} if active else {"active": False}
        return 200, [("content-type", "application/json")], json.dumps(answer).encode()
    return 404, [], b""


def grpc_auth(request: Any) -> Any:
    """The gRPC ext_authz service: admits ``x-grpc-ok: yes`` (setting
    ``x-grpc-user``, removing ``x-grpc-drop``, adding ``x-grpc-resp`` to the
    response), else refuses 401 with a header and a body."""
    if header_map(request).get("x-grpc-ok") == "yes":
        return ok(headers=(("x-grpc-user", "g1"),), remove=("x-grpc-drop",), response_headers=(("x-grpc-resp", "r"),))
    return denied(16, 401, headers=(("x-grpc-why", "no"),), body="grpc says no\n")


class GrpcRecorder:
    """The gRPC service seen as a recorder: each CheckRequest as the method,
    path, headers and body it carries (its ``protocol`` field is the one
    that must differ, and is left out)."""

    def __init__(self, server: GrpcAuthServer) -> None:
        self.server = server
        self.port = server.port

    def count(self) -> int:
        return len(self.server.requests)

    def since(self, n: int) -> list[Seen]:
        out = []
        for r in self.server.requests[n:]:
            http = r.attributes.request.http
            out.append(Seen("grpc-auth", http.method, http.path, sorted(http.headers.items()),
                            http.body.encode()))
        return out

    def close(self) -> None:
        self.server.close()


# -- the configurations -------------------------------------------------------------------------------


def upstreams(ports: dict[str, int]) -> str:
    return HASHED_AND_KUBE.format(ns=NS, backend=ports["backend"], shadow=ports["shadow"]) + "".join(f"""\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: {name}, namespace: {NS}}}
spec:
  static:
    hosts: [{{addr: 127.0.0.1, port: {ports[name]}}}]
---
""" for name in ("backend", "shadow", "auth"))


def route(name: str, matcher: str, options: str = "", action: str = "") -> str:
    """A route (YAML, indented for ``virtualHost.routes``) that says which
    it is in the response header ``x-route``."""
    manip = f"headerManipulation: {{responseHeadersToAdd: [{{header: {{key: x-route, value: {name}}}}}]}}"
    opts = f"{{{manip}{', ' + options if options else ''}}}"
    act = action or f"routeAction: {{single: {{upstream: {{name: backend, namespace: {NS}}}}}}}"
    return f"""\
    - name: {name}
      matchers: [{matcher}]
      {act}
      options: {opts}
"""


def vs(name: str, routes: str, domains: str = '["*"]', options: str = "") -> str:
    return f"""\
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: {name}, namespace: {NS}}}
spec:
  virtualHost:
    domains: {domains}
{f"    options: {options}" if options else ""}
    routes:
{routes}---
"""


#: a ringHash Upstream over the backend and the shadow, and the backend as a Kubernetes Service
HASHED_AND_KUBE = """\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: hashed, namespace: {ns}}}
spec:
  static:
    hosts: [{{addr: 127.0.0.1, port: {backend}}}, {{addr: 127.0.0.1, port: {shadow}}}]
  loadBalancerConfig: {{ringHash: {{}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: pets, namespace: {ns}}}
spec:
  ports: [{{name: http, port: 8080}}]
---
apiVersion: v1
kind: Endpoints
metadata: {{name: pets, namespace: {ns}}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: http, port: {backend}}}]}}]
---
"""

JWT_PROVIDER = (f"providers: {{example: {{issuer: '{ISSUER}', jwks: {{local: {{key: {json.dumps(PUBLIC)}}}}}, "
                "claimsToHeaders: [{claim: sub, header: x-jwt-sub}, {claim: role, header: x-jwt-role}]}}")
RBAC_ADMINS = "rbac: {policies: {admins: {principals: [{jwtPrincipal: {claims: {role: admin}}}]}}}"


def extauth(ref: str) -> str:
    return f"extauth: {{configRef: {{name: {ref}, namespace: {NS}}}}}"


def auth_config(ports: dict[str, int]) -> str:
    limited = "".join(route(f"limited-{TOKENS[mode]}", f"{{prefix: /limited/{TOKENS[mode]}/}}",
                            "localRatelimit: {maxTokens: 2, tokensPerFill: 1, fillInterval: 1000s}")
                      for mode in MODES)
    routes = (
        route("jwt", "{prefix: /jwt}", f"jwt: {{{JWT_PROVIDER}}}, {RBAC_ADMINS}")
        + route("basic-gloo", "{prefix: /basic-gloo}", extauth("basic-gloo"))
        + route("basic-apr", "{prefix: /basic-apr}", extauth("basic-apr"))
        + route("basic-sha1", "{prefix: /basic-sha1}", extauth("basic-sha1"))
        + route("apikey", "{prefix: /apikey}", extauth("apikeys"))
        + route("opa", "{prefix: /opa}", extauth("opa"))
        + route("passthrough", "{prefix: /passthrough}", extauth("passthrough"))
        + route("custom", "{prefix: /custom}", "extauth: {customAuth: {}}")
        + route("grpc-pass", "{prefix: /grpc-pass}", extauth("grpc-pass"))
        + route("pass-down", "{prefix: /pass-down}", extauth("pass-down"))
        + route("pass-down-allowed", "{prefix: /pass-allow}", extauth("pass-down-allowed"))
        + route("atv-jwt", "{prefix: /atv-jwt}", extauth("atv-jwt"))
        + route("atv-introspect", "{prefix: /atv-introspect}", extauth("atv-introspect"))
        + limited
        + route("open", "{prefix: /open}")
    )
    auth = ports["auth"]
    claims = (route("claims-admin", "{prefix: /claims, headers: [{name: x-jwt-role, value: admin}]}")
              + route("claims-other", "{prefix: /claims}"))
    return (upstreams(ports) + vs("auth", routes)
            + vs("claims", claims, domains="[claims.test]", options=f"{{jwt: {{{JWT_PROVIDER}}}}}")) + textwrap.dedent(f"""\
        apiVersion: gateway.vendor.io/v1
        kind: Settings
        metadata: {{name: default, namespace: {NS}}}
        spec:
          extauth:
            extauthzServerRef: {{name: auth, namespace: {NS}}}
            httpService:
              pathPrefix: /check
              request: {{allowedHeaders: [x-custom]}}
              response: {{allowedUpstreamHeaders: [x-custom-user], allowedClientHeaders: [x-custom-reason]}}
            requestTimeout: 5s
        ---
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {{name: basic-gloo, namespace: {NS}}}
        spec:
          configs:
          - basicAuth:
              realm: gloo
              apr:
                users:
                  user: {{salt: "{SALT}", hashedPassword: "{APR}"}}
        ---
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {{name: basic-apr, namespace: {NS}}}
        spec:
          configs:
          - basicAuth:
              encryption: {{apr: {{}}}}
              userList:
                users:
                  user: {{salt: "{SALT}", hashedPassword: "{APR}"}}
        ---
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {{name: basic-sha1, namespace: {NS}}}
        spec:
          configs:
          - basicAuth:
              realm: staff
              encryption: {{sha1: {{}}}}
              userList:
                users:
                  dana: {{salt: "{SALT}", hashedPassword: "{SHA1}"}}
        ---
        apiVersion: v1
        kind: Secret
        type: extauth.solo.io/apikey
        metadata:
          name: infra-apikey
          namespace: {NS}
          labels: {{team: infrastructure}}
        stringData:
          api-key: {API_KEY}
          user: alice
          user-email: alice@example.com
        ---
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {{name: apikeys, namespace: {NS}}}
        spec:
          configs:
          - apiKeyAuth:
              headerName: api-key
              labelSelector: {{team: infrastructure}}
              headersFromMetadataEntry:
                x-user-email: {{name: user-email, required: true}}
        ---
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: parity-policy, namespace: {NS}}}
        data:
          policy.rego: |
            package parity

            default allow = false
            allow {{
                startswith(input.http_request.path, "/opa/allowed")
                input.http_request.method == "GET"
            }}
            allow {{
                input.http_request.method == "POST"
                input.http_request.headers["x-opa"] == "yes"
            }}
        ---
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {{name: opa, namespace: {NS}}}
        spec:
          configs:
          - opaAuth:
              modules: [{{name: parity-policy, namespace: {NS}}}]
              query: "data.parity.allow == true"
        ---
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {{name: passthrough, namespace: {NS}}}
        spec:
          configs:
          - passThroughAuth:
              http:
                url: http://127.0.0.1:{auth}/pass
                request:
                  allowedHeaders: [authorization]
                  headersToAdd: {{x-gateway: twistgw}}
                response:
                  allowedUpstreamHeaders: [x-user-id]
                  allowedClientHeadersOnDenied: [www-authenticate]
        ---
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {{name: grpc-pass, namespace: {NS}}}
        spec:
          configs:
          - passThroughAuth:
              grpc: {{address: "127.0.0.1:{ports["grpc-auth"]}"}}
        ---
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {{name: pass-down, namespace: {NS}}}
        spec:
          configs:
          - passThroughAuth:
              http: {{url: "http://127.0.0.1:{ports["closed"]}/pass"}}
        ---
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {{name: pass-down-allowed, namespace: {NS}}}
        spec:
          configs:
          - passThroughAuth:
              http: {{url: "http://127.0.0.1:{ports["closed"]}/pass"}}
              failureModeAllow: true
        ---
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {{name: atv-jwt, namespace: {NS}}}
        spec:
          configs:
          - oauth2:
              accessTokenValidation:
                jwt: {{localJwks: {{inlineString: '{JWKS}'}}, issuer: '{ISSUER}', audiences: [api]}}
                requiredScopes: {{scope: [read]}}
                claimsToHeaders: [{{claim: sub, header: x-token-sub}}]
        ---
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {{name: atv-introspect, namespace: {NS}}}
        spec:
          configs:
          - oauth2:
              accessTokenValidation:
                introspectionUrl: http://127.0.0.1:{auth}/introspect
                cacheTimeout: 0s
                dynamicMetadataFromClaims: {{x-token-sub: sub}}
        """)


def deny(path: str, status: int, *headers: tuple[str, str], **kw: Any) -> Req:
    """A request refused before any backend."""
    return Req(path, status, headers=headers, upstream=0, **kw)


def allow(path: str, *headers: tuple[str, str], **kw: Any) -> Req:
    return Req(path, kw.pop("status", 200), headers=headers, upstream=kw.pop("upstream", 1), **kw)


AUTH_CASES = [
    case("jwt-missing", deny("/jwt/pets", 401)),
    case("jwt-garbage", deny("/jwt/pets", 401, ("Authorization", "Bearer not-a-token"))),
    case("jwt-expired", deny("/jwt/pets", 401, ("Authorization", f"Bearer {EXPIRED}"))),
    case("jwt-other-key", deny("/jwt/pets", 401, ("Authorization", f"Bearer {FOREIGN}"))),
    case("jwt-rbac-refused", deny("/jwt/pets", 403, ("Authorization", f"Bearer {VIEWER}"))),
    case("jwt-rbac-admitted", allow("/jwt/pets?x=1", ("Authorization", f"Bearer {ADMIN}"),
                                    seen=("x-jwt-sub", "x-jwt-role"), unseen=("authorization",))),
    case("jwt-claims-forged-dropped", allow("/jwt/pets", ("Authorization", f"Bearer {ADMIN}"),
                                            ("X-Jwt-Sub", "mallory"), seen=("x-jwt-sub",))),
    case("claims-route-admin", allow("/claims/a", ("Authorization", f"Bearer {ADMIN}"),
                                     has=(("x-route", "claims-admin"),), authority="claims.test")),
    case("claims-route-viewer", allow("/claims/a", ("Authorization", f"Bearer {VIEWER}"),
                                      has=(("x-route", "claims-other"),), authority="claims.test")),
    case("claims-route-forged-role", allow("/claims/a", ("Authorization", f"Bearer {VIEWER}"),
                                           ("x-jwt-role", "admin"), has=(("x-route", "claims-other"),), authority="claims.test")),
    case("basic-gloo-missing", deny("/basic-gloo", 401, has=(("www-authenticate", 'Basic realm="gloo"'),))),
    case("basic-gloo-wrong", deny("/basic-gloo", 401, ("Authorization", basic("user", "nope")))),
    case("basic-gloo-unknown-user", deny("/basic-gloo", 401, ("Authorization", basic("who", "password")))),
    case("basic-gloo-other-scheme", deny("/basic-gloo", 401, ("Authorization", "Bearer x"))),
    case("basic-gloo-good", allow("/basic-gloo/x", ("Authorization", basic("user", "password")),
                                  unseen=("authorization",))),
    case("basic-apr-wrong", deny("/basic-apr", 401, ("Authorization", basic("user", "password2")),
                                 has=(("www-authenticate", 'Basic realm=""'),))),
    case("basic-apr-good", allow("/basic-apr", ("Authorization", basic("user", "password")),
                                 unseen=("authorization",))),
    case("basic-sha1-wrong", deny("/basic-sha1", 401, ("Authorization", basic("dana", "password")))),
    case("basic-sha1-good", allow("/basic-sha1", ("Authorization", basic("dana", "s3cret")),
                                  unseen=("authorization",))),
    case("apikey-missing", deny("/apikey", 401)),
    case("apikey-wrong", deny("/apikey", 401, ("api-key", "wrong"))),
    case("apikey-two", deny("/apikey", 401, ("api-key", API_KEY), ("Api-Key", API_KEY))),
    case("apikey-good", allow("/apikey", ("api-key", API_KEY), ("x-user-email", "forged@example.com"),
                              seen=("x-user-email",), unseen=("api-key",))),
    case("opa-allowed", allow("/opa/allowed/1")),
    case("opa-refused-path", deny("/opa/other", 403)),
    case("opa-refused-method", deny("/opa/allowed/1", 403, method="DELETE")),
    case("opa-header-post", Req("/opa/x", 200, method="POST", headers=(("x-opa", "yes"),), body=b'{"a": 1}',
                                upstream=1)),
    case("opa-header-case-smuggling", Req("/opa/x", 403, method="POST", headers=(("X-Opa", "no"), ("x-opa", "yes")),
                                          body=b"{}", upstream=0)),
    case("passthrough-missing", deny("/passthrough", 401, has=(("www-authenticate", 'Custom realm="parity"'),))),
    case("passthrough-forged-user", deny("/passthrough", 401, ("x-user-id", "1"))),
    case("passthrough-good", allow("/passthrough/p", ("Authorization", "let me in"), ("x-user-id", "1"),
                                   seen=("x-user-id",))),
    case("grpc-pass-denied", deny("/grpc-pass/x?y=1", 401, has=(("x-grpc-why", "no"),))),
    case("grpc-pass-good", allow("/grpc-pass/x", ("x-grpc-ok", "yes"), ("x-grpc-user", "forged"),
                                 seen=("x-grpc-user",), unseen=("x-grpc-drop",), has=(("x-grpc-resp", "r"),))),
    case("pass-service-down", deny("/pass-down", 503)),
    case("pass-service-down-allowed", allow("/pass-allow")),
    case("custom-refused", deny("/custom/a?q=1", 403, has=(("x-custom-reason", "nope"),))),
    case("custom-good", allow("/custom/a?q=1", ("x-custom", "ok"), seen=("x-custom-user",))),
    case("atv-jwt-missing", deny("/atv-jwt", 401)),
    case("atv-jwt-scope", deny("/atv-jwt", 403, ("Authorization", f"Bearer {ACCESS_NO_SCOPE}"))),
    case("atv-jwt-wrong-audience", deny("/atv-jwt", 401, ("Authorization", f"Bearer {ADMIN}"))),
    case("atv-jwt-good", allow("/atv-jwt", ("Authorization", f"Bearer {ACCESS}"), seen=("x-token-sub",),
                               unseen=("authorization",))),
    case("atv-introspect-inactive", deny("/atv-introspect", 401, ("Authorization", "Bearer bad-opaque"))),
    case("atv-introspect-good", allow("/atv-introspect", ("Authorization", "Bearer good-opaque"),
                                      seen=("x-token-sub",), unseen=("authorization",))),
    case("local-ratelimit", allow("/limited/{m}/"), allow("/limited/{m}/"), deny("/limited/{m}/", 429)),
]


def matcher_config(ports: dict[str, int]) -> str:
    routes = (
        route("exact", "{exact: /m/health}")
        + route("prefix-ci", "{prefix: /m/CI/, caseSensitive: false}")
        + route("exact-ci", "{exact: /m/Exact, caseSensitive: false}")
        + route("regex", "{regex: '/m/v[0-9]+/items'}")
        + route("methods", "{prefix: /m/methods, methods: [POST, PUT]}")
        + route("methods-other", "{prefix: /m/methods}")
        + route("hdr-exact", '{prefix: /m/hdr, headers: [{name: x-version, value: "2"}]}')
        + route("hdr-regex", "{prefix: /m/hdr, headers: [{name: x-version, value: '3\\.[0-9]+', regex: true}]}")
        + route("hdr-present", "{prefix: /m/hdr, headers: [{name: x-beta}]}")
        + route("hdr-joined", '{prefix: /m/hdr, headers: [{name: x-multi, value: "a,b"}]}')
        + route("hdr-invert", "{prefix: /m/hdr, headers: [{name: x-legacy, invertMatch: true}]}")
        + route("hdr-fallback", "{prefix: /m/hdr}")
        + route("query-value", '{prefix: /m/q, queryParameters: [{name: debug, value: "1"}]}')
        + route("query-regex", "{prefix: /m/q, queryParameters: [{name: id, value: '[0-9]+', regex: true}]}")
        + route("query-present", "{prefix: /m/q, queryParameters: [{name: flag}]}")
        + route("pseudo-authority", '{prefix: /m/pseudo, headers: [{name: ":authority", value: "gw.test"}]}')
        + route("pseudo-method", '{prefix: /m/pseudo, headers: [{name: ":method", value: "PATCH"}]}')
        + route("pseudo-other", "{prefix: /m/pseudo}")
        + route("any-of", "{exact: /m/any-a}, {exact: /m/any-b}")
        + route("first-prefix", "{prefix: /m/p1}")
        + route("never", "{exact: /m/p1/x}")
        + route("first-exact", "{exact: /m/p2/x}")
        + route("then-prefix", "{prefix: /m/p2}")
        + route("case-sensitive", "{prefix: /m/Case}")
        + route("team", "{prefix: /m/team/}", action=f"delegateAction: {{ref: {{name: team, namespace: {NS}}}}}")
    )
    team = textwrap.dedent(f"""\
        apiVersion: gateway.solo.io/v1
        kind: RouteTable
        metadata: {{name: team, namespace: {NS}}}
        spec:
          routes:
          - matchers: [{{exact: /m/team/lead}}]
            directResponseAction: {{status: 200, body: "the lead\\n"}}
          - matchers: [{{prefix: /m/team/}}]
            routeAction: {{single: {{upstream: {{name: backend, namespace: {NS}}}}}}}
            options: {{prefixRewrite: /members/}}
        ---
        """)
    return (upstreams(ports) + vs("main", routes) + team
            + vs("api", route("api-domain", "{prefix: /}"), domains="[api.example.com]")
            + vs("wild", route("wildcard", "{prefix: /}"), domains='["*.wild.test"]'))


def hit(path: str, name: str, **kw: Any) -> Req:
    """A request that must be served by route ``name``."""
    return Req(path, kw.pop("status", 200), upstream=1, has=(("x-route", name),), **kw)


def miss(path: str, status: int = 404, **kw: Any) -> Req:
    return Req(path, status, upstream=0, **kw)


MATCHER_CASES = [
    case("exact", hit("/m/health", "exact")),
    case("exact-not-longer", miss("/m/health/x")),
    case("exact-query-kept", hit("/m/health?full=1", "exact")),
    case("prefix-case-insensitive", hit("/m/ci/x", "prefix-ci")),
    case("exact-case-insensitive", hit("/m/EXACT", "exact-ci")),
    case("prefix-case-sensitive", hit("/m/Case/a", "case-sensitive"), miss("/m/case/a")),
    case("regex-whole-path", hit("/m/v12/items", "regex"), miss("/m/v12/items/1"), miss("/m/vx/items")),
    case("methods", hit("/m/methods", "methods", method="POST", body=b"x"), hit("/m/methods", "methods", method="PUT",
                                                                              body=b"y"),
         hit("/m/methods", "methods-other"), hit("/m/methods", "methods-other", method="DELETE")),
    case("header-exact", hit("/m/hdr", "hdr-exact", headers=(("X-Version", "2"),))),
    case("header-regex", hit("/m/hdr", "hdr-regex", headers=(("x-version", "3.14"),)),
         hit("/m/hdr", "hdr-invert", headers=(("x-version", "3.x"),))),
    case("header-present", hit("/m/hdr", "hdr-present", headers=(("x-beta", ""),)),
         hit("/m/hdr", "hdr-present", headers=(("x-beta", "1"),))),
    case("header-repeated-joined", hit("/m/hdr", "hdr-joined", headers=(("x-multi", "a"), ("X-Multi", "b")))),
    case("header-invert", hit("/m/hdr", "hdr-invert"), hit("/m/hdr", "hdr-fallback", headers=(("x-legacy", "1"),))),
    case("query-value", hit("/m/q?debug=1", "query-value"), hit("/m/q?debug=2&flag", "query-present")),
    case("query-first-occurrence", hit("/m/q?id=7&id=x", "query-regex"), miss("/m/q?id=x&id=7")),
    case("query-present", hit("/m/q?flag=", "query-present"), miss("/m/q?flags=1")),
    case("pseudo-authority", hit("/m/pseudo", "pseudo-authority"),
         hit("/m/pseudo", "pseudo-authority", authority="gw.test:8080"),
         hit("/m/pseudo", "pseudo-method", method="PATCH", authority="other.test", body=b"p")),
    case("pseudo-other", hit("/m/pseudo", "pseudo-other", authority="other.test")),
    case("any-of-matchers", hit("/m/any-a", "any-of"), hit("/m/any-b", "any-of"), miss("/m/any-c")),
    case("priority-first-wins", hit("/m/p1/x", "first-prefix"), hit("/m/p2/x", "first-exact"),
         hit("/m/p2/y", "then-prefix")),
    case("delegation", Req("/m/team/lead", 200, upstream=0), hit("/m/team/bob", "team")),
    case("domain-exact", hit("/", "api-domain", authority="api.example.com"),
         hit("/x", "api-domain", authority="API.Example.com:8443")),
    case("domain-wildcard", hit("/", "wildcard", authority="a.b.wild.test"), miss("/zzz", authority="wild.test")),
    case("path-normalised", hit("/m/x/../health", "exact"), hit("/m/%68ealth", "exact"),
         hit("//m//health", "exact"), hit("/m/./health", "exact")),
    case("path-refused", miss("/m/a\\b", 400), miss("/m/%5c", 400), miss("/m/%00", 400), miss("/m/%zz", 400),
         miss("/m/..;/health", 400)),
    case("no-route", miss("/nothing-here")),
]


def traffic_config(ports: dict[str, int]) -> str:
    cors = ("cors: {allowOrigin: [https://app.example], allowOriginRegex: ['https://[a-z]+\\.apps\\.example'], "
            "allowMethods: [GET, POST], allowHeaders: [x-custom], exposeHeaders: [x-backend], maxAge: '600', "
            "allowCredentials: true}")
    csrf = ("csrf: {filterEnabled: {defaultValue: {numerator: 100, denominator: HUNDRED}}, "
            "additionalOrigins: [{exact: partner.example}, {suffix: .trusted.example}]}")
    hdr = ("headerManipulation: {requestHeadersToAdd: [{header: {key: x-added, value: one}}, "
           "{header: {key: x-replaced, value: gw}, append: false}, {header: {key: x-vhost, value: route}, "
           "append: false}], requestHeadersToRemove: [x-secret], "
           "responseHeadersToAdd: [{header: {key: x-resp, value: r}}, {header: {key: x-backend, value: gw-too}}, "
           "{header: {key: set-cookie, value: c=3}}], responseHeadersToRemove: [x-drop-me]}")
    plain = f"routeAction: {{single: {{upstream: {{name: backend, namespace: {NS}}}}}}}"
    routes = (
        route("prefix-rewrite", "{prefix: /t/prefix/}", "prefixRewrite: /rewritten/")
        + route("prefix-rewrite-exact", "{exact: /t/exact}", "prefixRewrite: /whole")
        + route("regex-rewrite", "{prefix: /t/regex/}",
                "regexRewrite: {pattern: {regex: '^/t/regex/([a-z]+)/([0-9]+)'}, substitution: '/r/\\2/\\1'}")
        + route("host-rewrite", "{prefix: /t/host}", "hostRewrite: internal.example")
        + route("auto-host-rewrite", "{prefix: /t/autohost}", "autoHostRewrite: true")
        + f"""\
    - name: headers
      matchers: [{{prefix: /t/hdr}}]
      {plain}
      options: {{{hdr}}}
"""
        + f"""\
    - name: secret-headers
      matchers: [{{prefix: /t/secret-hdr}}]
      {plain}
      options: {{headerManipulation: {{requestHeadersToAdd: [{{headerSecretRef: {{name: route-headers, namespace: {NS}}}}}]}}}}
"""
        + f"""\
    - name: delegated-options
      matchers: [{{prefix: /t/delegated}}]
      {plain}
      optionsConfigRefs: {{delegateOptions: [{{name: slow-and-marked, namespace: {NS}}}]}}
      options: {{headerManipulation: {{responseHeadersToAdd: [{{header: {{key: x-route, value: delegated}}}}]}}}}
"""
        + route("timeout", "{prefix: /t/timeout/}", "timeout: 0.3s")
        + route("retry", "{prefix: /t/retry/}", "retries: {retryOn: 5xx, numRetries: 2, "
                "retryBackOff: {baseInterval: 0.01s}}")
        + route("retry-codes", "{prefix: /t/retry-codes/}", "retries: {retryOn: retriable-status-codes, "
                "retriable_status_codes: [418], retryBackOff: {baseInterval: 0.01s}}")
        + route("cors", "{prefix: /t/cors}", cors)
        + route("cors-jwt", "{prefix: /c/jwt}", f"{cors}, jwt: {{{JWT_PROVIDER}}}")
        + route("csrf", "{prefix: /t/csrf}", csrf)
        + route("fault-abort", "{prefix: /t/abort}", "faults: {abort: {httpStatus: 418, percentage: 100}}")
        + route("fault-delay", "{prefix: /t/delay}", "faults: {delay: {fixedDelay: 0.05s, percentage: 100}}")
        + route("buffer", "{prefix: /t/buffer}", "bufferPerRoute: {buffer: {maxRequestBytes: 10}}")
        + route("shadow", "{prefix: /t/shadow}", f"shadowing: {{upstream: {{name: shadow, namespace: {NS}}}, "
                "percentage: 100}")
        + route("weighted", "{prefix: /t/weighted}", action=(
            f"routeAction: {{multi: {{destinations: [{{destination: {{upstream: {{name: shadow, namespace: {NS}}}}}, "
            "weight: 1, options: {headerManipulation: {requestHeadersToAdd: [{header: {key: x-dest, value: s}}]}}}, "
            f"{{destination: {{upstream: {{name: backend, namespace: {NS}}}}}, weight: 0}}]}}}}"))
        + route("group", "{prefix: /t/group}",
                action=f"routeAction: {{upstreamGroup: {{name: to-shadow, namespace: {NS}}}}}")
        + route("direct", "{exact: /t/direct}", action='directResponseAction: {status: 201, body: "made here\\n"}')
        + route("direct-empty", "{exact: /t/direct-empty}", action="directResponseAction: {status: 503}")
        + route("direct-204", "{exact: /t/direct-204}", action="directResponseAction: {status: 204}")
        + route("redirect-host", "{prefix: /t/redir-host}",
                action="redirectAction: {hostRedirect: other.example, responseCode: FOUND}")
        + route("redirect-https", "{prefix: /t/redir-https}", action="redirectAction: {httpsRedirect: true}")
        + route("redirect-path", "{prefix: /t/redir-path}",
                action="redirectAction: {pathRedirect: '/new?x=1', responseCode: TEMPORARY_REDIRECT}")
        + route("redirect-prefix", "{prefix: /t/redir-prefix/}",
                action="redirectAction: {prefixRewrite: /moved/, responseCode: PERMANENT_REDIRECT}")
        + route("redirect-strip", "{prefix: /t/redir-strip}",
                action="redirectAction: {portRedirect: 8443, stripQuery: true, responseCode: SEE_OTHER}")
        + route("lb-hash", "{prefix: /t/hash}", "lbHash: {hashPolicies: [{header: x-user}]}",
                action=f"routeAction: {{single: {{upstream: {{name: hashed, namespace: {NS}}}}}}}")
        + route("kube", "{prefix: /t/kube}",
                action=f"routeAction: {{single: {{kube: {{ref: {{name: pets, namespace: {NS}}}, port: 8080}}}}}}")
        + route("plain", "{prefix: /}")
    )
    group = textwrap.dedent(f"""\
        apiVersion: v1
        kind: Secret
        type: gloo.solo.io/header
        metadata: {{name: route-headers, namespace: {NS}}}
        stringData: {{x-from-secret: s3, x-also-secret: s4}}
        ---
        apiVersion: gateway.solo.io/v1
        kind: RouteOption
        metadata: {{name: slow-and-marked, namespace: {NS}}}
        spec:
          options:
            timeout: 0.3s
            headerManipulation: {{responseHeadersToAdd: [{{header: {{key: x-route, value: not-this}}}}]}}
            prefixRewrite: /via-route-option/
        ---
        apiVersion: gloo.solo.io/v1
        kind: UpstreamGroup
        metadata: {{name: to-shadow, namespace: {NS}}}
        spec:
          destinations:
          - destination: {{upstream: {{name: shadow, namespace: {NS}}}}}
            weight: 5
        ---
        """)
    vhost = ("{headerManipulation: {requestHeadersToAdd: [{header: {key: x-vhost, value: vhost}, append: false}], "
             "responseHeadersToAdd: [{header: {key: x-vhost-resp, value: v}}]}}")
    return upstreams(ports) + group + vs("traffic", routes, options=vhost)


def through(path: str, upstream: int = 1, **kw: Any) -> Req:
    return Req(path, kw.pop("status", 200), upstream=upstream, **kw)


ORIGIN = ("Origin", "https://app.example")
PREFLIGHT = (ORIGIN, ("Access-Control-Request-Method", "POST"), ("Access-Control-Request-Headers", "x-custom"))
BODY = b"name=rex&kind=dog" * 40

TRAFFIC_CASES = [
    case("prefix-rewrite", through("/t/prefix/a/b?x=1")),
    case("prefix-rewrite-exact", through("/t/exact?q=2")),
    case("regex-rewrite", through("/t/regex/pets/42?keep=1")),
    case("host-rewrite", through("/t/host/a")),
    case("auto-host-rewrite", through("/t/autohost/a")),
    case("header-manipulation", through("/t/hdr", headers=(("x-secret", "s"), ("x-replaced", "client"),
                                                          ("x-added", "client"), ("x-vhost", "client")),
                                        seen=("x-added", "x-replaced", "x-vhost"), unseen=("x-secret",),
                                        has=(("x-resp", "r"), ("x-vhost-resp", "v")))),
    case("response-header-removed", through("/t/hdr/status/404", status=404)),
    case("header-secret-ref", through("/t/secret-hdr", seen=("x-from-secret", "x-also-secret"))),
    case("delegated-options", through("/t/delegated/a", has=(("x-route", "delegated"),)),
         through("/t/delegated/slow/?s=1.5", status=504)),
    case("timeout", through("/t/timeout/slow/?s=1.5", status=504)),
    case("timeout-in-time", through("/t/timeout/x")),
    case("retry-5xx", through("/t/retry/flaky/{m}", upstream=2)),
    case("retry-status-codes", through("/t/retry-codes/status/418", upstream=2, status=418)),
    case("retry-post-body", through("/t/retry/flaky/post-{m}", upstream=2, method="POST", body=BODY)),
    case("cors-preflight", Req("/t/cors/x", 200, method="OPTIONS", headers=PREFLIGHT, upstream=0,
                               has=(("access-control-allow-origin", "https://app.example"),))),
    case("cors-preflight-regex-origin", Req("/t/cors/x", 200, method="OPTIONS", upstream=0, headers=(
        ("Origin", "https://shop.apps.example"), ("Access-Control-Request-Method", "GET")))),
    case("cors-preflight-other-origin", through("/t/cors/x", method="OPTIONS", headers=(
        ("Origin", "https://evil.example"), ("Access-Control-Request-Method", "POST")))),
    case("cors-simple", through("/t/cors/x", headers=(ORIGIN,),
                                has=(("access-control-allow-origin", "https://app.example"),))),
    case("cors-simple-other-origin", through("/t/cors/x", headers=(("Origin", "https://evil.example"),),
                                             has=(("access-control-allow-origin", "https://backend.example"),))),
    case("cors-preflight-before-jwt", Req("/c/jwt", 200, method="OPTIONS", headers=PREFLIGHT, upstream=0),
         Req("/c/jwt", 401, headers=(ORIGIN,), upstream=0)),
    case("csrf-cross-origin", Req("/t/csrf", 403, method="POST", body=b"a=1", upstream=0,
                                  headers=(("Origin", "https://evil.example"),))),
    case("csrf-same-origin", through("/t/csrf", method="POST", body=b"a=1", headers=(("Origin", "https://gw.test"),))),
    case("csrf-additional", through("/t/csrf", method="PUT", body=b"a=1", headers=(("Origin", "https://partner.example"),)),
         through("/t/csrf", method="DELETE", headers=(("Referer", "https://app.trusted.example/page"),))),
    case("csrf-no-origin", Req("/t/csrf", 403, method="PATCH", body=b"a=1", upstream=0)),
    case("csrf-null-origin", Req("/t/csrf", 403, method="POST", body=b"a", upstream=0, headers=(("Origin", "null"),))),
    case("csrf-safe-method", through("/t/csrf", headers=(("Origin", "https://evil.example"),))),
    case("fault-abort", Req("/t/abort", 418, upstream=0)),
    case("fault-delay", through("/t/delay")),
    case("buffer-over", Req("/t/buffer", 413, method="POST", body=b"x" * 20, upstream=0)),
    case("buffer-under", through("/t/buffer", method="POST", body=b"x" * 5)),
    case("shadow", through("/t/shadow/a", upstream=2, method="POST", body=b"copy me")),
    case("weighted-destination", through("/t/weighted", seen=("x-dest",))),
    case("upstream-group", through("/t/group")),
    case("lb-hash", *[through("/t/hash", headers=(("x-user", user),)) for user in ("ann", "bo", "cy", "di", "ed")]),
    case("kube-destination", through("/t/kube/a")),
    case("direct-response", Req("/t/direct", 201, upstream=0), Req("/t/direct", 201, method="HEAD", upstream=0)),
    case("direct-response-empty", Req("/t/direct-empty", 503, upstream=0)),
    case("direct-response-204", Req("/t/direct-204", 204, upstream=0)),
    case("redirect-host", Req("/t/redir-host/a?b=1", 302, upstream=0)),
    case("redirect-https", Req("/t/redir-https", 301, upstream=0, authority="gw.test:80")),
    case("redirect-path", Req("/t/redir-path/x", 307, upstream=0)),
    case("redirect-prefix", Req("/t/redir-prefix/a/b?c=d", 308, upstream=0)),
    case("redirect-port-strip-query", Req("/t/redir-strip?x=1", 303, upstream=0)),
    case("post-content-length", through("/p", method="POST", body=BODY, headers=(("Content-Type", "text/plain"),))),
    case("post-chunked", through("/p", method="POST", body=BODY, chunked=True)),
    case("post-large-body", through("/p", method="POST", body=bytes(range(256)) * 1000)),
    case("post-large-chunked", through("/p", method="POST", body=b"z" * 150_000, chunked=True)),
    case("expect-100-continue", through("/p", method="POST", body=b"after the 100",
                                        headers=(("Expect", "100-continue"),), unseen=("expect",))),
    case("put-empty-body", through("/p", method="PUT", body=b"")),
    case("head", through("/p", method="HEAD"), through("/big/x", method="HEAD")),
    case("big-response", through("/big/x")),
    case("chunked-response", through("/chunked/x")),
    # a response the client's window holds back pauses the upstream connection; the next request on that
    # pooled connection must still be read (it hung until the upstream timeout over HTTP/2, session 12)
    case("pooled-after-held-response", *[r for _ in range(4) for r in (through("/big/x?n=131072"), through("/p"))]),
    case("backend-status", through("/status/404", status=404), through("/status/204", status=204),
         through("/status/503", status=503), through("/status/304", status=304)),
    case("forwarding-headers-replaced", through("/p", headers=(
        ("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-Proto", "gopher"), ("X-Real-IP", "6.6.6.6"),
        ("Forwarded", "for=6.6.6.6"), ("X-Forwarded-Host", "evil"), ("X-HTTP-Method-Override", "DELETE")),
        unseen=("forwarded", "x-forwarded-host", "x-http-method-override"), seen=("x-forwarded-for",))),
    case("underscore-header-dropped", through("/p", headers=(("x_user", "root"),), unseen=("x_user",))),
    case("te-trailers-dropped", through("/p", headers=(("TE", "trailers"),), unseen=("te",))),
    case("cookies-joined", through("/p", headers=(("Cookie", "a=1; b=2; c=3"),), seen=("cookie",))),
    case("repeated-headers", through("/p", headers=(("Accept", "text/html"), ("accept", "application/json"),
                                                    ("X-Tag", "one"), ("x-tag", "two")))),
    case("host-with-port", through("/p", authority="gw.test:8080")),
    case("query-and-escapes", through("/p/%7Euser/a%2Fb?x=%20y&z")),
]


def ldap_config(ports: dict[str, int], slapd_url: str) -> str:
    return upstreams(ports) + vs("ldap", route("team", "{prefix: /team}", extauth("ldap"))
                                 + route("open", "{prefix: /open}")) + textwrap.dedent(f"""\
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {{name: ldap, namespace: {NS}}}
        spec:
          configs:
          - ldap:
              address: {slapd_url}
              userDnTemplate: "uid=%s,ou=people,dc=example,dc=org"
              allowedGroups: ["cn=managers,ou=groups,dc=example,dc=org"]
              groupsHeader: x-groups
              userHeader: x-user
        ---
        apiVersion: gloo.solo.io/v1
        kind: Settings
        metadata: {{name: default, namespace: gloo-system}}
        spec:
          extauth: {{userIdHeader: x-authenticated-user}}
        """)


LDAP_CASES = [
    case("ldap-missing", deny("/team", 401)),
    case("ldap-wrong-password", deny("/team", 401, ("Authorization", basic("alice", "wrong")))),
    case("ldap-not-in-group", deny("/team", 403, ("Authorization", basic("bob", "bob-pw")))),
    case("ldap-admitted", allow("/team/x", ("Authorization", basic("alice", "alice-pw")), ("x-user", "mallory"),
                                seen=("x-user", "x-groups", "x-authenticated-user"), unseen=("authorization",))),
    case("ldap-password-with-colons", allow("/team", ("Authorization", basic("eve", "pa:ss:wd")))),
    case("ldap-forged-identity-dropped", allow("/open", ("x-groups", "cn=managers"), ("x-authenticated-user", "root"),
                                              unseen=("x-groups", "x-authenticated-user"))),
]

#: group → (configuration, cases, needs slapd)
GROUPS: dict[str, tuple[Callable[..., str], list[Case], bool]] = {
    "auth": (auth_config, AUTH_CASES, False),
    "matchers": (matcher_config, MATCHER_CASES, False),
    "traffic": (traffic_config, TRAFFIC_CASES, False),
    "ldap": (ldap_config, LDAP_CASES, True),
}


# -- running them ------------------------------------------------------------------------------------


class Served:
    """One group's gateway: its ports (plain, TLS) and the recorders."""

    def __init__(self, gw: TwistGateway, tls: int, recorders: list[Any]) -> None:
        self.gw = gw
        self.ports = {"plain": gw.port, "tls": tls}
        self.recorders = recorders


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Any]]:
    started: dict[str, Any] = {"backend": Recorder("backend", backend_answer),
                               "shadow": Recorder("shadow", backend_answer), "auth": Recorder("auth", auth_service),
                               "grpc-auth": GrpcRecorder(GrpcAuthServer(grpc_auth))}
    yield started
    for r in started.values():
        r.close()


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: Any, servers: dict[str, Any]) -> Iterator[Callable[[str], Served]]:
    """``gateways(group)``: the group's gateway, started on first use (one
    process per group, for the whole module)."""
    running: dict[str, Served] = {}
    failed: set[str] = set()
    stops: list[Any] = []
    tmp = tmp_path_factory.mktemp("parity")
    key, cert = self_signed(tmp / "certs")

    def get(group: str) -> Served:
        if group in running:
            return running[group]
        if group in failed:  # once is enough: the other cases of the group fail at once
            pytest.fail(f"the {group} gateway did not start (see its first case)", pytrace=False)
        failed.add(group)
        make, _, needs_slapd = GROUPS[group]
        ports = {name: r.port for name, r in servers.items()}
        ports["closed"] = free_port()  # nothing listens there
        args: tuple[Any, ...] = (ports,)
        if needs_slapd:
            try:
                slapd = Slapd(tmp / "slapd", permissive=True).start()
            except SlapdMissing as exc:
                pytest.fail(str(exc), pytrace=False)
            stops.append(slapd.stop)
            args += (slapd.url,)
        directory = tmp / group
        directory.mkdir(exist_ok=True)
        (directory / "config.yaml").write_text(make(*args))
        tls = free_port()
        gw = TwistGateway(tmp, str(directory), args=(
            "--listen", f"ssl:{tls}:privateKey={key}:certKey={cert}:interface=127.0.0.1")).__enter__()
        stops.append(lambda: gw.__exit__(None, None, None))
        running[group] = Served(gw, tls, list(servers.values()))
        failed.discard(group)
        return running[group]

    yield get
    for stop in reversed(stops):
        stop()


def params() -> list[Any]:
    out = []
    for group, (_, cases, needs_slapd) in GROUPS.items():
        marks = [pytest.mark.slapd] if needs_slapd else []
        out += [pytest.param(group, c, id=f"{group}/{c.name}", marks=marks) for c in cases]
    return out


def expected(req: Req, got: Outcome, mode: str) -> None:
    """The HTTP/1.1 answer is what the row says."""
    where = f"{mode} {req.method} {req.path}"
    assert got.status == req.status, (where, got.status, got.body[:300])
    backends = [u for u in got.upstream if u["server"] not in ("auth", "grpc-auth")]
    if req.upstream is not None:
        assert len(backends) == req.upstream, (where, backends)
    for u in backends:
        for name in req.seen:
            assert name in u["headers"], (where, name, u["headers"])
        for name in req.unseen:
            assert name not in u["headers"], (where, name, u["headers"])
    for name, value in req.has:
        assert got.header(name) == value, (where, name, got.headers)


def differences(a: Outcome, b: Outcome) -> list[str]:
    out = []
    if a.status != b.status:
        out.append(f"status {a.status} != {b.status}")
    if a.body != b.body:
        out.append(f"body {a.body[:200]!r} != {b.body[:200]!r}")
    for name in sorted(set(a.headers) | set(b.headers)):
        if a.headers.get(name) != b.headers.get(name):
            out.append(f"response header {name}: {a.headers.get(name)} != {b.headers.get(name)}")
    if len(a.upstream) != len(b.upstream):
        out.append(f"upstream requests {len(a.upstream)} != {len(b.upstream)}: {a.upstream} != {b.upstream}")
    for x, y in zip(a.upstream, b.upstream, strict=False):  # a length difference is reported above
        for k in ("server", "method", "target", "body"):
            if x[k] != y[k]:
                out.append(f"upstream {k} {x[k]!r} != {y[k]!r}")
        for name in sorted(set(x["headers"]) | set(y["headers"])):
            if x["headers"].get(name) != y["headers"].get(name):
                out.append(f"upstream header {name}: {x['headers'].get(name)} != {y['headers'].get(name)}")
    return out


def compare(c: Case, got: dict[str, list[Outcome]]) -> None:
    problems = []
    for i, req in enumerate(c.requests):
        for reference, h2 in PAIRS:
            expected(req, got[reference][i], reference)
            diff = differences(got[reference][i], got[h2][i])
            if diff:
                problems.append(f"request {i} {req.method} {req.path} {reference} vs {h2}: " + "; ".join(diff))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("group, c", params())
def test_parity(gateways: Callable[[str], Served], group: str, c: Case) -> None:
    served = gateways(group)
    got = {mode: [exchange(mode, served.ports, req, served.recorders) for req in c.requests] for mode in MODES}
    compare(c, got)


#: cases also run with the curl binary (a client of its own: its HPACK, its framing, its ALPN)
CURL_CASES = {
    "auth": ("jwt-rbac-admitted", "jwt-rbac-refused", "basic-gloo-missing", "basic-sha1-good", "apikey-good",
             "opa-header-post", "passthrough-good", "custom-refused", "atv-jwt-good", "atv-introspect-good"),
    "matchers": ("regex-whole-path", "header-repeated-joined", "query-value", "domain-exact", "path-refused"),
    "traffic": ("header-manipulation", "regex-rewrite", "retry-5xx", "cors-preflight", "csrf-cross-origin",
                "redirect-host", "direct-response-empty", "shadow", "post-content-length", "post-chunked",
                "big-response", "expect-100-continue", "timeout"),
    "ldap": ("ldap-not-in-group", "ldap-admitted"),
}


def curl_params() -> list[Any]:
    out = []
    for group, names in CURL_CASES.items():
        _, cases, needs_slapd = GROUPS[group]
        marks = [pytest.mark.slapd] if needs_slapd else []
        by_name = {c.name: c for c in cases}
        out += [pytest.param(group, by_name[name], id=f"{group}/{name}", marks=marks) for name in names]
    return out


@pytest.mark.parametrize("group, c", curl_params())
def test_parity_with_curl(gateways: Callable[[str], Served], tmp_path: Path, group: str, c: Case) -> None:
    served = gateways(group)
    got = {mode: [curl_exchange(mode, served.ports, req, served.recorders, tmp_path) for req in c.requests]
           for mode in MODES}
    compare(c, got)


def test_the_tables_cover_every_group() -> None:
    """Counts per group (the docs quote them); a group emptied by mistake fails."""
    counts = {group: len(cases) for group, (_, cases, _) in GROUPS.items()}
    assert all(n >= 5 for n in counts.values()), counts
