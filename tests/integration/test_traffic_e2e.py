"""Gloo's traffic options end to end through ``twist twistgw`` (a real
gateway process, real backends on loopback), in the shapes of Gloo's guides:
a CORS preflight from a browser origin on a JWT-protected route, redirects,
a weighted canary split over thousands of requests, fault injection, header
manipulation and host rewrites as the backend sees them, an UpstreamGroup,
and delegated options."""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Any

import jwt as pyjwt
import pytest_twisted
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from twisted.internet import defer, reactor
from twisted.web import resource, server

from support.http import http_request, sleep, static_upstream_yaml
from test_core_twist import start_twist, stop_process

ISSUER = "https://issuer.traffic.test"


def _key() -> tuple[Any, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return key, pem


def config(primary: int, canary: int, pem: str) -> str:
    key_block = "\n".join("                  " + line for line in pem.strip().splitlines())
    return (static_upstream_yaml("primary", [primary]) + "---\n" + static_upstream_yaml("canary", [canary])
            + f"""---
apiVersion: gloo.solo.io/v1
kind: UpstreamGroup
metadata: {{name: halves}}
spec:
  destinations:
  - destination: {{upstream: {{name: primary}}}}
    weight: 50
  - destination: {{upstream: {{name: canary}}}}
    weight: 50
---
apiVersion: gateway.solo.io/v1
kind: RouteOption
metadata: {{name: slow}}
spec:
  options:
    faults: {{delay: {{percentage: 100, fixedDelay: 300ms}}}}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: app}}
spec:
  virtualHost:
    domains: [api.example.com]
    options:
      cors:
        allowOrigin: [https://app.example.com]
        allowMethods: [GET, POST]
        allowHeaders: [authorization, content-type]
        maxAge: "3600"
        allowCredentials: true
      headerManipulation:
        requestHeadersToAdd: [{{header: {{key: x-gateway, value: twistgw}}, append: false}}]
        requestHeadersToRemove: [x-internal-debug]
        responseHeadersToAdd: [{{header: {{key: x-served-by, value: twistgw}}}}]
      jwt:
        providers:
          local:
            issuer: {ISSUER}
            jwks:
              local:
                key: |
{key_block}
    routes:
    - matchers: [{{prefix: /old}}]
      redirectAction: {{hostRedirect: new.example.com, prefixRewrite: /new, responseCode: FOUND}}
      options: {{jwt: {{disable: true}}}}
    - matchers: [{{prefix: /canary}}]
      options:
        jwt: {{disable: true}}
        regexRewrite: {{pattern: {{regex: "^/canary/(.*)"}}, substitution: "/v2/\\\\1"}}
        hostRewrite: backend.internal
      routeAction:
        multi:
          destinations:
          - destination: {{upstream: {{name: primary}}}}
            weight: 90
          - destination: {{upstream: {{name: canary}}}}
            weight: 10
            options:
              headerManipulation:
                requestHeadersToAdd: [{{header: {{key: x-canary, value: "true"}}}}]
    - matchers: [{{prefix: /group}}]
      options: {{jwt: {{disable: true}}}}
      routeAction: {{upstreamGroup: {{name: halves}}}}
    - matchers: [{{prefix: /broken}}]
      options:
        jwt: {{disable: true}}
        faults: {{abort: {{percentage: 100, httpStatus: 503}}}}
      routeAction: {{single: {{upstream: {{name: primary}}}}}}
    - matchers: [{{prefix: /slow}}]
      optionsConfigRefs: {{delegateOptions: [{{name: slow}}]}}
      options: {{jwt: {{disable: true}}}}
      routeAction: {{single: {{upstream: {{name: primary}}}}}}
    - matchers: [{{prefix: /forms}}]
      options:
        jwt: {{disable: true}}
        csrf: {{filterEnabled: {{defaultValue: {{numerator: 100, denominator: HUNDRED}}}}}}
        bufferPerRoute: {{buffer: {{maxRequestBytes: 64}}}}
      routeAction: {{single: {{upstream: {{name: primary}}}}}}
    - matchers: [{{prefix: /hello}}]
      options: {{jwt: {{disable: true}}}}
      directResponseAction: {{status: 200, body: hello}}
    - matchers: [{{prefix: /api}}]
      routeAction: {{single: {{upstream: {{name: primary}}}}}}
""")


async def _gateway(tmp_path: Path, backend_factory: Any, config_dir: Any) -> Any:
    primary, canary = backend_factory("primary"), backend_factory("canary")
    key, pem = _key()
    d = config_dir(config(primary.port, canary.port, pem))
    proc, port, log_path, log = await start_twist(tmp_path, d)
    return proc, port, log, primary, canary, key


def _url(port: int, path: str) -> str:
    return f"http://127.0.0.1:{port}{path}"


HOST = {"host": "api.example.com"}


@pytest_twisted.ensureDeferred
async def test_gloo_traffic_guides_through_twist(tmp_path: Path, backend_factory: Any, config_dir: Any) -> None:
    proc, port, log, primary, canary, key = await _gateway(tmp_path, backend_factory, config_dir)
    try:
        # -- CORS on a JWT-protected route (Gloo's CORS guide) -------------------
        pre = await http_request("OPTIONS", _url(port, "/api/pets"), {
            **HOST, "origin": "https://app.example.com", "access-control-request-method": "POST",
            "access-control-request-headers": "authorization"})
        assert pre.status == 200  # answered before authentication: no token needed
        assert pre.header("access-control-allow-origin") == "https://app.example.com"
        assert pre.header("access-control-allow-methods") == "GET,POST"
        assert pre.header("access-control-allow-headers") == "authorization,content-type"
        assert pre.header("access-control-max-age") == "3600"
        assert pre.header("access-control-allow-credentials") == "true"
        assert primary.requests == []  # the backend never saw the preflight
        denied = await http_request("GET", _url(port, "/api/pets"), {**HOST, "origin": "https://app.example.com"})
        assert denied.status == 401
        assert denied.header("access-control-allow-origin") == "https://app.example.com"  # the browser can read it
        evil = await http_request("OPTIONS", _url(port, "/api/pets"), {
            **HOST, "origin": "https://evil.example", "access-control-request-method": "POST"})
        assert evil.header("access-control-allow-origin") is None
        token = pyjwt.encode({"iss": ISSUER, "sub": "alice", "exp": int(time.time()) + 600}, key, algorithm="ES256")
        ok = await http_request("GET", _url(port, "/api/pets"), {
            **HOST, "origin": "https://app.example.com", "authorization": f"Bearer {token}",
            "x-internal-debug": "1", "x-gateway": "forged"})
        assert ok.status == 200
        seen = primary.requests[-1]
        assert seen.header(b"x-gateway") == [b"twistgw"]
        assert seen.header(b"x-internal-debug") is None

        # -- redirects (Gloo's redirect guide) ------------------------------------
        moved = await http_request("GET", _url(port, "/old/list?page=2"), HOST)
        assert moved.status == 302
        assert moved.header("location") == "http://new.example.com/new/list?page=2"

        # -- a direct response with the virtual host's response headers ----------
        hello = await http_request("GET", _url(port, "/hello"), HOST)
        assert (hello.status, hello.body, hello.header("x-served-by")) == (200, b"hello", "twistgw")

        # -- faults (Gloo's fault injection guide) --------------------------------
        broken = await http_request("GET", _url(port, "/broken"), HOST)
        assert (broken.status, broken.body) == (503, b"fault filter abort")
        started = time.monotonic()
        slow = await http_request("GET", _url(port, "/slow"), HOST)  # delay from a RouteOption
        assert slow.status == 200 and time.monotonic() - started >= 0.3

        # -- CSRF and the request size bound (Envoy's csrf and buffer filters) -------
        seen_before = len(primary.requests)
        forged = await http_request("POST", _url(port, "/forms/save"), {**HOST, "origin": "https://evil.example"},
                                    body=b"a=1")
        assert (forged.status, forged.body) == (403, b"Invalid origin")
        same = await http_request("POST", _url(port, "/forms/save"), {**HOST, "origin": "http://api.example.com"},
                                  body=b"a=1")
        assert same.status == 200
        big = await http_request("POST", _url(port, "/forms/save"), {**HOST, "origin": "http://api.example.com"},
                                 body=b"x" * 65)
        assert big.status == 413
        assert len(primary.requests) == seen_before + 1  # only the allowed one reached the backend

        # -- a weighted canary split, rewrites and per-destination headers ---------
        before_p, before_c = len(primary.requests), len(canary.requests)
        counts: collections.Counter[str] = collections.Counter()
        for _ in range(40):
            batch = await defer.gatherResults([defer.ensureDeferred(
                http_request("GET", _url(port, "/canary/items?x=1"), HOST)) for _ in range(50)])
            for r in batch:
                assert r.status == 200
                counts[r.json()["server"]] += 1
        assert sum(counts.values()) == 2000
        assert abs(counts["canary"] / 2000 - 0.10) < 0.03, counts
        new_c = canary.requests[before_c:]
        new_p = primary.requests[before_p:]
        assert {r.uri for r in new_c + new_p} == {b"/v2/items?x=1"}
        assert {tuple(r.header(b"host")) for r in new_c + new_p} == {(b"backend.internal",)}
        assert all(r.header(b"x-canary") == [b"true"] for r in new_c)
        assert all(r.header(b"x-canary") is None for r in new_p)

        # -- an UpstreamGroup ------------------------------------------------------
        group: collections.Counter[str] = collections.Counter()
        for _ in range(10):
            batch = await defer.gatherResults([defer.ensureDeferred(
                http_request("GET", _url(port, "/group"), HOST)) for _ in range(40)])
            group.update(json.loads(r.body)["server"] for r in batch)
        assert abs(group["primary"] / 400 - 0.5) < 0.1, group
    finally:
        await stop_process(proc)
        log.close()


class _Flaky(resource.Resource):
    """A backend whose /healthz answers 200 or 503 as the test says; every
    other path answers its name."""

    isLeaf = True

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name.encode()
        self.healthy = True
        self.checks = 0

    def render_GET(self, request: Any) -> bytes:
        if request.path == b"/healthz":
            self.checks += 1
            assert request.getHeader(b"host") == b"checked.internal"
            request.setResponseCode(200 if self.healthy else 503)
            return b"ok" if self.healthy else b"down"
        return self.name


async def _counts(port: int, n: int) -> collections.Counter[bytes]:
    batch = await defer.gatherResults([defer.ensureDeferred(
        http_request("GET", _url(port, "/work"), HOST)) for _ in range(n)])
    assert all(r.status == 200 for r in batch)
    return collections.Counter(r.body for r in batch)


async def _until(predicate: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await sleep(0.05)


@pytest_twisted.ensureDeferred
async def test_health_checks_take_an_endpoint_out_and_back(tmp_path: Path, config_dir: Any) -> None:
    backends = [_Flaky("a"), _Flaky("b")]
    ports = [reactor.listenTCP(0, server.Site(b), interface="127.0.0.1") for b in backends]
    d = config_dir(static_upstream_yaml("pool", [p.getHost().port for p in ports]) + """\
  healthChecks:
  - timeout: 5s               # the checks fail by status here; a check timed out on a loaded machine reconnects,
    interval: 0.1s            # and the connections are what this test counts (1 s made 20 for 44 checks)
    noTrafficInterval: 0.1s   # checked as often before the first request (Envoy's default: 60 s)
    unhealthyThreshold: 2
    healthyThreshold: 2
    httpHealthCheck: {path: /healthz, host: checked.internal}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: app}
spec:
  virtualHost:
    domains: [api.example.com]
    routes:
    - matchers: [{prefix: /}]
      routeAction: {single: {upstream: {name: pool}}}
""")
    proc, port, log_path, log = await start_twist(tmp_path, d)
    try:
        a, b = backends
        await _until(lambda: a.checks >= 2 and b.checks >= 2)
        assert set(await _counts(port, 40)) == {b"a", b"b"}
        b.healthy = False  # b fails its checks: it leaves the rotation
        seen = b.checks
        await _until(lambda: b.checks >= seen + 3)
        assert await _counts(port, 40) == {b"a": 40}
        b.healthy = True  # and comes back after two passed checks
        seen = b.checks
        await _until(lambda: b.checks >= seen + 3)
        assert set(await _counts(port, 40)) == {b"a", b"b"}
        a.healthy = b.healthy = False  # none healthy: Envoy's panic, every endpoint takes traffic
        seen = a.checks
        await _until(lambda: a.checks >= seen + 3)
        assert set(await _counts(port, 40)) == {b"a", b"b"}
        text = log_path.read_text()  # twist logs JSON events
        assert "is unhealthy and leaves the rotation ({what})" in text and '"what": "status 503"' in text
        assert "is healthy again ({what})" in text and '"what": "status 200"' in text
        # the checks keep their connections: far fewer connections than checks (one per check would
        # start a factory for each; a loaded machine may time a few checks out and reconnect)
        checks = a.checks + b.checks
        assert checks >= 20
        assert text.count("Starting factory") <= checks // 3, (text.count("Starting factory"), checks)
    finally:
        await stop_process(proc)
        log.close()
        for p in ports:
            await p.stopListening()


@pytest_twisted.ensureDeferred
async def test_response_headers_and_cors_on_proxied_responses(tmp_path: Path, backend_factory: Any,
                                                               config_dir: Any) -> None:
    proc, port, log, primary, canary, key = await _gateway(tmp_path, backend_factory, config_dir)
    try:
        token = pyjwt.encode({"iss": ISSUER, "sub": "alice", "exp": int(time.time()) + 600}, key, algorithm="ES256")
        ok = await http_request("GET", _url(port, "/api/pets"), {
            **HOST, "origin": "https://app.example.com", "authorization": f"Bearer {token}"})
        assert ok.status == 200
        assert ok.header("x-served-by") == "twistgw"
        assert ok.header("access-control-allow-origin") == "https://app.example.com"
    finally:
        await stop_process(proc)
        log.close()
