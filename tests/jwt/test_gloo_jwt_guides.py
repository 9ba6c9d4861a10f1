"""The request/response walkthroughs of Gloo Edge's JWT guides, end to end:
a real gateway on loopback, an echo backend found through Kubernetes
Service/Endpoints, and a key-set server.

* "JWT and Access Control": service-account tokens checked with a local key
  plus an RBAC policy, then its appendix, a remote key set of one key
  without ``kid`` fetched through a discovered upstream.
* "Route-level JWT policy": scenarios 1 to 6 (6: delegation to a RouteTable).

The resources are written in the guides' shapes with Gloo's own API groups
(``gateway.solo.io/v1``, ``gloo.solo.io/v1``); their keys, tokens and
addresses are this test's own.
"""

from __future__ import annotations

import json
from typing import Any

import pytest_twisted
import yaml
from jwt_helpers import ClockedJwtPlugin, KeySetServer, public_pem, signed
from support.http import http_request, raw_exchange

import twistgw_rbac
from twistgw_jwt import tools

PLUGINS = [("jwt", ClockedJwtPlugin), ("rbac", twistgw_rbac)]


def dump(*docs: Any) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def kube_service(name: str, namespace: str, port: int, target: int, backend_port: int) -> list[dict]:
    """A Service and its Endpoints: traffic for ``port`` goes to the backend."""
    return [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
         "spec": {"ports": [{"name": "http", "port": port, "protocol": "TCP", "targetPort": target}],
                  "selector": {"app": name}}},
        {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": namespace},
         "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "http", "port": backend_port}]}]},
    ]


def bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


async def exchange(port: int, method: str, path: str, token: str | None = None) -> Any:
    """One request on a raw socket, to see the response's own framing."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    raw = await raw_exchange(port, (f"{method} {path} HTTP/1.1\r\nHost: gateway-proxy.gloo-system\r\n{auth}"
                                    "Content-Length: 0\r\nConnection: close\r\n\r\n").encode())
    (resp,) = raw.responses()
    return resp


# ---------------------------------------------------------------------------
# JWT and Access Control
# ---------------------------------------------------------------------------

SA_SUB = "system:serviceaccount:default:svc-a"


def service_account_token(n: int = 0, sub: str = SA_SUB) -> str:
    """A legacy Kubernetes service-account token: RS256, no kid, no exp."""
    return signed({"iss": "kubernetes/serviceaccount",
                   "kubernetes.io/serviceaccount/namespace": "default",
                   "kubernetes.io/serviceaccount/secret.name": "svc-a-token-x1y2z",
                   "kubernetes.io/serviceaccount/service-account.name": sub.rsplit(":", 1)[1],
                   "kubernetes.io/serviceaccount/service-account.uid": "0b7c6b1e-1111-2222-3333-444455556666",
                   "sub": sub}, n=n, kid=None)


def petstore_vs(options: dict) -> dict:
    return {"apiVersion": "gateway.solo.io/v1", "kind": "VirtualService",
            "metadata": {"name": "petstore", "namespace": "gloo-system"},
            "spec": {"virtualHost": {
                "domains": ["*"],
                "routes": [{"matchers": [{"prefix": "/"}],
                            "routeAction": {"single": {"kube": {"ref": {"name": "petstore", "namespace": "default"},
                                                                "port": 8080}}}}],
                "options": options}}}


@pytest_twisted.ensureDeferred
async def test_access_control_guide_service_account_tokens_and_rbac(backend, config_dir, gateway):
    options = {
        "jwt": {"providers": {"kube": {"issuer": "kubernetes/serviceaccount",
                                       "jwks": {"local": {"key": public_pem()}}}}},
        "rbac": {"policies": {"viewer": {
            "permissions": {"methods": ["GET"], "pathPrefix": "/api/pets"},
            "principals": [{"jwtPrincipal": {"claims": {"sub": SA_SUB}}}]}}},
    }
    text = dump(*kube_service("petstore", "default", 8080, 8080, backend.port), petstore_vs(options))
    gw = gateway(config_dir(text), plugins=PLUGINS)
    token = service_account_token()

    # no token: 401, the 14 bytes "Jwt is missing" as text/plain
    resp = await exchange(gw.port, "GET", "/api/pets/1")
    assert (resp.status, resp.body) == (401, b"Jwt is missing")
    assert (resp.header(b"content-type"), resp.header(b"content-length")) == (b"text/plain", b"14")
    assert backend.requests == []
    # the service account's token, GET under /api/pets: 200 from the petstore
    r = await http_request("GET", gw.url("/api/pets/1"), headers=bearer(token))
    assert r.status == 200 and json.loads(r.body)["uri"] == "/api/pets/1"
    assert backend.requests[-1].header(b"authorization") is None
    # POST is not in the policy; /foo/ is not under its prefix: 403, 19 bytes
    for method, path in (("POST", "/api/pets/1"), ("GET", "/foo/")):
        resp = await exchange(gw.port, method, path, token)
        assert (resp.status, resp.body, resp.header(b"content-length")) == (403, b"RBAC: access denied", b"19")
    assert len(backend.requests) == 1
    # another service account's token verifies but is not the viewer
    r = await http_request("GET", gw.url("/api/pets/1"), headers=bearer(
        service_account_token(sub="system:serviceaccount:default:svc-b")))
    assert (r.status, r.body) == (403, b"RBAC: access denied")
    # a token signed by another key
    r = await http_request("GET", gw.url("/api/pets/1"), headers=bearer(service_account_token(n=1)))
    assert (r.status, r.body) == (401, b"Jwt verification fails")


def guide_key_set() -> dict:
    """As the guide builds it: pem-jwk output plus alg and use, one key, no kid."""
    key = tools.jwks_from_public_key(public_pem().encode())["keys"][0]
    return {"keys": [{"kty": "RSA", "n": key["n"], "e": key["e"], "alg": "RS256", "use": "sig"}]}


@pytest_twisted.ensureDeferred
async def test_access_control_guide_appendix_remote_key_set_without_kid(backend, config_dir, gateway):
    keys = KeySetServer()
    try:
        keys.resource.set_keys(guide_key_set())
        options = {"jwt": {"providers": {"solo-provider": {
            "issuer": "solo.io",
            "jwks": {"remote": {"upstreamRef": {"name": "gloo-system-jwks-server-80", "namespace": "gloo-system"},
                                "url": "http://jwks-server/jwks.json"}}}}}}
        text = dump(*kube_service("petstore", "default", 8080, 8080, backend.port),
                    *kube_service("jwks-server", "gloo-system", 80, 80, keys.port),
                    petstore_vs(options))
        gw = gateway(config_dir(text), plugins=PLUGINS)

        r = await http_request("GET", gw.url("/api/pets"))
        assert (r.status, r.body) == (401, b"Jwt is missing")
        # the token jwt.io makes: no kid, no exp; sent as ?access_token=
        jwt_io = signed({"iss": "solo.io", "sub": "1234567890", "solo.io/company": "solo"}, kid=None)
        r = await http_request("GET", gw.url(f"/api/pets?access_token={jwt_io}"))
        assert r.status == 200 and json.loads(r.body)["uri"] == "/api/pets"  # the token is not forwarded
        # the key set came through the discovered upstream, Host from the URL
        assert keys.resource.requests[0] == (b"/jwks.json", b"jwks-server")
        # a token that carries a kid verifies against the kid-less key too
        with_kid = signed({"iss": "solo.io", "sub": "1234567890"}, kid="2024-rotation-a")
        r = await http_request("GET", gw.url("/api/pets"), headers=bearer(with_kid))
        assert r.status == 200
        # one signed by another key does not
        r = await http_request("GET", gw.url("/api/pets"), headers=bearer(
            signed({"iss": "solo.io", "sub": "1234567890"}, n=1, kid=None)))
        assert (r.status, r.body) == (401, b"Jwt verification fails")
    finally:
        await keys.stop()


# ---------------------------------------------------------------------------
# Route-level JWT policy, scenarios 1-6
# ---------------------------------------------------------------------------

HOST = {"Host": "www.example.com"}
AFTER_HEADER = "x-after-ext-auth-bearer-token"


def person(name: str, team: str, n: int, iss: str = "solo.io") -> str:
    """The guide's people: tokens without kid or exp, with a team claim.
    Key 0 signs for the virtual host's provider, key 1 for the route's."""
    return signed({"iss": iss, "org": iss, "sub": name, "team": team, "llms": {"openai": ["gpt-4o"]}},
                  n=n, kid=None)


ALICE, BOB, CAROL = person("alice", "dev", 0), person("bob", "ops", 0), person("carol", "finance", 1)


def provider(n: int, header: str | None = None) -> dict:
    p: dict[str, Any] = {"issuer": "solo.io", "jwks": {"local": {"key": public_pem(n=n)}}}
    if header:
        p["tokenSource"] = {"headers": [{"header": header}]}
    return p


def team_policy(team: str) -> dict:
    return {"policies": {"viewer": {"nestedClaimDelimiter": ".",
                                    "principals": [{"jwtPrincipal": {"claims": {"team": team}}}]}}}


def httpbin(vh_options: dict | None, get_options: dict | None) -> str:
    route_get: dict[str, Any] = {"name": "get", "matchers": [{"prefix": "/get"}],
                                 "routeAction": {"single": {"upstream": {"name": "httpbin", "namespace": "default"}}}}
    if get_options:
        route_get["options"] = get_options
    vh: dict[str, Any] = {"domains": ["www.example.com"], "routes": [
        route_get,
        {"name": "status-200", "matchers": [{"prefix": "/status/200"}],
         "routeAction": {"single": {"upstream": {"name": "httpbin", "namespace": "default"}}}}]}
    if vh_options:
        vh["options"] = vh_options
    return dump({"apiVersion": "gateway.solo.io/v1", "kind": "VirtualService",
                 "metadata": {"name": "httpbin", "namespace": "default"}, "spec": {"virtualHost": vh}})


class Httpbin:
    """The gateway of the route-policy guide; ``apply`` re-applies the
    VirtualService (a live reload, as ``kubectl apply`` does)."""

    def __init__(self, backend: Any, config_dir: Any, gateway: Any) -> None:
        upstream = {"apiVersion": "gloo.solo.io/v1", "kind": "Upstream",
                    "metadata": {"name": "httpbin", "namespace": "default"},
                    "spec": {"kube": {"serviceName": "httpbin", "serviceNamespace": "default", "servicePort": 8000}}}
        self.dir = config_dir(dump(*kube_service("httpbin", "default", 8000, 80, backend.port), upstream),
                              "upstream.yaml")
        self.config_dir = config_dir
        self.gateway = gateway
        self.gw: Any = None

    async def apply(self, vh_options: dict | None, get_options: dict | None) -> None:
        self.config_dir(httpbin(vh_options, get_options), "vs.yaml", directory=self.dir)
        if self.gw is None:
            self.gw = self.gateway(self.dir, plugins=PLUGINS, poll_interval=0.05)
        else:
            assert self.gw.reload()

    async def call(self, path: str, authorization: str | None = None, after: str | None = None) -> tuple[int, bytes]:
        headers = dict(HOST)
        if authorization:
            headers["Authorization"] = f"Bearer {authorization}"
        if after:
            headers[AFTER_HEADER] = after
        r = await http_request("GET", self.gw.url(path), headers=headers)
        return r.status, (b"" if r.status == 200 else r.body)


@pytest_twisted.ensureDeferred
async def test_route_policy_guide_scenarios(backend, config_dir, gateway):
    site = Httpbin(backend, config_dir, gateway)
    OK = (200, b"")
    MISSING = (401, b"Jwt is missing")
    FAILS = (401, b"Jwt verification fails")

    # 1: a policy on the virtual host protects every route
    await site.apply({"jwt": {"providers": {"vhost-gateway-provider": provider(0)}}}, None)
    r = await http_request("GET", site.gw.url("/get"), headers=HOST)
    assert (r.status, r.body) == MISSING
    assert r.header("www-authenticate") == 'Bearer realm="http://www.example.com/get"'
    assert await site.call("/status/200") == MISSING
    assert await site.call("/get", ALICE) == OK
    assert await site.call("/status/200", ALICE) == OK

    # 2: the /get route has its own provider at the same (after) stage: it replaces the host's there
    route_provider = {"jwtProvidersStaged": {"afterExtAuth": {"providers": {"route-provider": provider(1)}}}}
    await site.apply({"jwt": {"providers": {"vhost-gateway-provider": provider(0)}}}, route_provider)
    assert await site.call("/status/200", BOB) == OK
    assert await site.call("/get", BOB) == FAILS
    assert await site.call("/get", CAROL) == OK
    assert await site.call("/status/200", CAROL) == FAILS
    # ... and without the host's policy, only /get is protected
    await site.apply(None, route_provider)
    assert await site.call("/status/200", CAROL) == OK
    assert await site.call("/status/200") == OK
    assert await site.call("/get") == MISSING

    # 3: both at afterExtAuth (the route's token in its own header): the route's wins on /get
    route_after = {"jwtProvidersStaged": {"afterExtAuth": {"providers": {
        "route-provider": provider(1, AFTER_HEADER)}}}}
    host_after = {"jwtStaged": {"afterExtAuth": {"providers": {"vhost-gateway-provider": provider(0)}}}}
    await site.apply(host_after, route_after)
    assert await site.call("/get", after=CAROL) == OK
    assert await site.call("/get", BOB) == MISSING  # the host's token does not serve /get
    assert await site.call("/status/200", after=CAROL) == MISSING  # other routes keep the host's policy
    assert await site.call("/status/200", BOB) == OK

    # 4: the host at beforeExtAuth, the route at afterExtAuth: /get needs both tokens
    host_before = {"jwtStaged": {"beforeExtAuth": {"providers": {"vhost-gateway-provider": provider(0)}}},
                   "rbac": team_policy("ops")}
    await site.apply(host_before, {**route_after, "rbac": team_policy("finance")})
    assert await site.call("/get", after=CAROL) == MISSING  # the bug this issue fixed: it was 200
    assert await site.call("/get", BOB, CAROL) == OK
    assert await site.call("/get", BOB) == MISSING  # the route's stage still wants Carol's
    assert await site.call("/get", ALICE, CAROL) == OK  # Carol's claims are the last verified: finance
    assert await site.call("/get", BOB, BOB) == FAILS  # Bob's token is not the route provider's
    assert await site.call("/status/200", BOB) == OK  # ops, the host's RBAC policy
    assert await site.call("/status/200", ALICE) == (403, b"RBAC: access denied")  # dev

    # 5: ALLOW_MISSING on the host's stage: Carol's token alone is enough on /get
    host_optional = {"jwtStaged": {"beforeExtAuth": {
        "validationPolicy": "ALLOW_MISSING", "providers": {"vhost-gateway-provider": provider(0)}}},
        "rbac": team_policy("ops")}
    await site.apply(host_optional, {**route_after, "rbac": team_policy("finance")})
    assert await site.call("/get", after=CAROL) == OK
    assert await site.call("/get", BOB, CAROL) == OK
    assert await site.call("/get", CAROL, CAROL) == FAILS  # a bad token is still refused
    assert await site.call("/get") == MISSING  # the route's stage is not optional
    assert len(backend.requests) > 0


@pytest_twisted.ensureDeferred
async def test_route_policy_guide_scenario_6_delegation(backend, config_dir, gateway):
    """The parent route's policy serves the child routes that set none; a
    child's own policy replaces it."""
    site = Httpbin(backend, config_dir, gateway)
    dan = person("dan", "ops", 1, iss="docs.xyz")
    upstream = {"single": {"upstream": {"name": "httpbin", "namespace": "default"}}}
    child_provider = {**provider(1, AFTER_HEADER), "issuer": "docs.xyz"}
    child = {"apiVersion": "gateway.solo.io/v1", "kind": "RouteTable",
             "metadata": {"name": "httpbin-child", "namespace": "default"},
             "spec": {"routes": [
                 {"name": "status-200", "matchers": [{"prefix": "/status/200"}], "routeAction": upstream},
                 {"name": "status-418", "matchers": [{"prefix": "/status/418"}], "routeAction": upstream,
                  "options": {"jwtProvidersStaged": {"afterExtAuth": {"providers": {
                      "child-route-provider": child_provider}}}}}]}}
    vs = {"apiVersion": "gateway.solo.io/v1", "kind": "VirtualService",
          "metadata": {"name": "httpbin", "namespace": "default"},
          "spec": {"virtualHost": {"domains": ["www.example.com"], "routes": [
              {"name": "status", "matchers": [{"prefix": "/status"}],
               "delegateAction": {"ref": {"name": "httpbin-child", "namespace": "default"}},
               "options": {"jwtProvidersStaged": {"afterExtAuth": {"providers": {
                   "route-provider": provider(1, AFTER_HEADER)}}}}}]}}}
    site.config_dir(dump(vs, child), "vs.yaml", directory=site.dir)
    site.gw = gateway(site.dir, plugins=PLUGINS)
    assert await site.call("/status/200", after=CAROL) == (200, b"")
    assert await site.call("/status/418", after=CAROL) == (401, b"Jwt issuer is not configured")
    assert await site.call("/status/200", after=dan) == (401, b"Jwt issuer is not configured")
    assert await site.call("/status/418", after=dan) == (200, b"")
    assert await site.call("/status/418") == (401, b"Jwt is missing")
