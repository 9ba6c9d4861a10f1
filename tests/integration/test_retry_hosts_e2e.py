"""A retry picks another endpoint (issue 32 item 5), end to end through
``twist twistgw``: static Upstreams whose first host is a real closed port
(connections refused) and whose other host is a real backend, on routes with
``retries: {retryOn: connect-failure, numRetries: 3}`` as Gloo users write
them. Every balancer (round robin, least request, random, ring hash and
Maglev with a hash per request), with active health checks and with
outlier detection: not one request of hundreds may get a 503, and the
backend sees each request once. A third host answering 503 shows that a
5xx retry moves on too (three hosts, two retries: each try another host).
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import defer, reactor
from twisted.logger import eventsFromJSONLogFile
from twisted.web import resource, server

from support.http import http_request
from support.ports import free_port
from test_core_twist import start_twist, stop_process


class Backend(resource.Resource):
    """Answers ``status`` with its name; counts the requests per path."""

    isLeaf = True

    def __init__(self, name: str, status: int = 200) -> None:
        super().__init__()
        self.name = name.encode()
        self.status = status
        self.seen: collections.Counter[bytes] = collections.Counter()

    def render(self, request: Any) -> bytes:
        if request.uri == b"/healthz":
            return b"ok"
        self.seen[request.uri] += 1
        request.setResponseCode(self.status)
        return self.name


FAST = "retryBackOff: {baseInterval: 5ms, maxInterval: 20ms}"

#: route prefix → (the Upstream's extra spec lines, the route's retries, its other options)
ROUTES = {
    "rr": ("", "{retryOn: connect-failure, numRetries: 3, %s}" % FAST, ""),
    "once": ("", "{retryOn: connect-failure, numRetries: 1, %s}" % FAST, ""),
    "least": ("  loadBalancerConfig: {leastRequest: {}}\n", "{retryOn: connect-failure, numRetries: 3, %s}" % FAST,
              ""),
    "random": ("  loadBalancerConfig: {random: {}}\n", "{retryOn: connect-failure, numRetries: 3, %s}" % FAST, ""),
    "ring": ("  loadBalancerConfig: {ringHash: {}}\n", "{retryOn: connect-failure, numRetries: 3, %s}" % FAST,
             ", lbHash: {hashPolicies: [{header: x-user}]}"),
    "maglev": ("  loadBalancerConfig: {maglev: {}}\n", "{retryOn: connect-failure, numRetries: 3, %s}" % FAST,
               ", lbHash: {hashPolicies: [{header: x-user}]}"),
    # the checks take the closed port out after three failures; until then retries move on
    "checked": ("  healthChecks:\n  - {timeout: 1s, interval: 0.1s, unhealthyThreshold: 3,"
                " healthyThreshold: 1, httpHealthCheck: {path: /healthz}}\n",
                "{retryOn: connect-failure, numRetries: 3, %s}" % FAST, ""),
    # the refused connect is counted (503) and ejects the closed port at once
    "ejecting": ("  outlierDetection: {consecutiveGatewayFailure: 1, interval: 10s, baseEjectionTime: 60s,"
                 " maxEjectionPercent: 50}\n", "{retryOn: connect-failure, numRetries: 3, %s}" % FAST, ""),
}


def _config(dead: int, good: int, failing: int) -> str:
    docs = []
    routes = []
    for name, (extra, retries, options) in ROUTES.items():
        docs.append(f"apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {{name: {name}, namespace: default}}\n"
                    f"spec:\n  static:\n    hosts: [{{addr: 127.0.0.1, port: {dead}}}, {{addr: 127.0.0.1, port: {good}}}]\n"
                    + extra)
        routes.append(f"    - matchers: [{{prefix: /{name}/}}]\n      options: {{retries: {retries}{options}}}\n"
                      f"      routeAction: {{single: {{upstream: {{name: {name}}}}}}}\n")
    docs.append("apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: three, namespace: default}\nspec:\n"
                f"  static:\n    hosts: [{{addr: 127.0.0.1, port: {dead}}}, {{addr: 127.0.0.1, port: {failing}}},"
                f" {{addr: 127.0.0.1, port: {good}}}]\n")
    routes.append(f"    - matchers: [{{prefix: /three/}}]\n      options: {{retries: {{retryOn: 5xx, numRetries: 2,"
                  f" {FAST}}}}}\n      routeAction: {{single: {{upstream: {{name: three}}}}}}\n")
    vs = ("apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: app, namespace: default}\n"
          "spec:\n  virtualHost:\n    domains: ['*']\n    routes:\n" + "".join(routes))
    return "---\n".join(docs + [vs])


async def _batch(port: int, prefix: str, start: int, n: int) -> list[Any]:
    """``n`` requests at once (so round robin interleaves them), each its own
    path and ``x-user`` (so hashing spreads them)."""
    return list(await defer.gatherResults([
        defer.ensureDeferred(http_request("GET", f"http://127.0.0.1:{port}/{prefix}/{i}", {"x-user": f"user{i}"}))
        for i in range(start, start + n)]))


@pytest_twisted.ensureDeferred
async def test_a_retry_goes_to_another_endpoint(tmp_path: Path, config_dir: Any) -> None:
    good, failing = Backend("good"), Backend("failing", 503)
    listening = [reactor.listenTCP(0, server.Site(b), interface="127.0.0.1") for b in (good, failing)]
    dead = free_port()  # nothing listens there: every connection is refused
    good_port = listening[0].getHost().port
    d = config_dir(_config(dead, good_port, listening[1].getHost().port))
    proc, port, log_path, log = await start_twist(tmp_path, d)
    per_route = 60
    try:
        statuses: dict[str, collections.Counter[int]] = {}
        for prefix in [*ROUTES, "three"]:
            seen: collections.Counter[int] = collections.Counter()
            for start in range(0, per_route, 10):
                for r in await _batch(port, prefix, start, 10):
                    seen[r.status] += 1
                    assert r.status != 200 or r.body == b"good", (prefix, r.body)
            statuses[prefix] = seen
        assert statuses == {p: {200: per_route} for p in [*ROUTES, "three"]}, statuses
        # the good backend saw each request once: a retry never sends a request twice to it
        assert set(good.seen.values()) == {1} and len(good.seen) == per_route * (len(ROUTES) + 1)
        # with three hosts and two retries, each try went to another host: the failing one at most once
        assert set(failing.seen.values()) <= {1}
    finally:
        await stop_process(proc)
        log.close()
        for p in listening:
            await p.stopListening()
    with open(log_path) as f:
        access = [e for e in eventsFromJSONLogFile(f) if e.get("log_namespace") == "twistgw.access"]
    assert len(access) == per_route * (len(ROUTES) + 1)
    # the access log's upstream is the endpoint of the last try (Envoy's %UPSTREAM_HOST%)
    assert {e["upstream"] for e in access} == {f"127.0.0.1:{good_port}"}
