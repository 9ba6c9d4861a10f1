"""``healthChecks[].noTrafficInterval`` (issue 32 item 7), on real sockets:
backends that count the health checks they get, a gateway that checks them
with short intervals. Until an upstream has had traffic its endpoints are
checked every ``noTrafficInterval`` (Envoy's default: 60 s); once a request
went to it, every ``interval`` (the next round brought forward, not waited
out); a reload keeps what it learnt."""

from __future__ import annotations

from typing import Any

import pytest_twisted
from twisted.internet import reactor
from twisted.web import resource, server

from support.http import http_request, sleep, wait_for


class Counting(resource.Resource):
    """``/healthz`` is counted; anything else is answered with the name."""

    isLeaf = True

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name.encode()
        self.checks = 0

    def render(self, request: Any) -> bytes:
        if request.path == b"/healthz":
            self.checks += 1
            return b"ok"
        return self.name


def _config(ports: dict[str, int], comment: str = "") -> str:
    def upstream(name: str, quiet: str) -> str:
        return (f"apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {{name: {name}, namespace: default}}\n"
                f"spec:\n  static: {{hosts: [{{addr: 127.0.0.1, port: {ports[name]}}}]}}\n  healthChecks:\n"
                f"  - {{timeout: 1s, interval: 0.1s,{quiet} unhealthyThreshold: 2, healthyThreshold: 1,"
                " httpHealthCheck: {path: /healthz}}\n---\n")
    return (f"# {comment}\n" + upstream("quiet", " noTrafficInterval: 1s,") + upstream("default", "")
            + "apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: app, namespace: default}\n"
              "spec:\n  virtualHost:\n    domains: ['*']\n    routes:\n"
              "    - matchers: [{prefix: /quiet}]\n      routeAction: {single: {upstream: {name: quiet}}}\n"
              "    - matchers: [{prefix: /default}]\n      routeAction: {single: {upstream: {name: default}}}\n")


@pytest_twisted.ensureDeferred
async def test_no_traffic_interval_until_the_first_request_then_interval(config_dir: Any, gateway: Any) -> None:
    backends = {"quiet": Counting("quiet"), "default": Counting("default")}
    listening = {n: reactor.listenTCP(0, server.Site(b), interface="127.0.0.1") for n, b in backends.items()}
    ports = {n: p.getHost().port for n, p in listening.items()}
    quiet, default = backends["quiet"], backends["default"]
    try:
        d = config_dir(_config(ports))
        gw = gateway(d, poll_interval=0.1)
        await sleep(2.3)
        # no traffic: every noTrafficInterval (1 s: rounds at 0, 1 and 2 s), and Envoy's default of 60 s
        assert 2 <= quiet.checks <= 4, quiet.checks
        assert default.checks == 1, default.checks  # the first round only, at once
        for name in backends:
            r = await http_request("GET", gw.url(f"/{name}/x"))
            assert (r.status, r.body) == (200, name.encode())
        seen = {n: b.checks for n, b in backends.items()}
        await sleep(1.0)
        # traffic: every interval (0.1 s), at once, not after the no-traffic interval runs out
        grown = {n: b.checks - seen[n] for n, b in backends.items()}
        assert min(grown.values()) >= 4, grown
        # a reload (new snapshot, new health states) remembers that they had traffic
        config_dir(_config(ports, "reloaded"), directory=d)
        await wait_for(lambda: gw.service.generation == 2, timeout=5)
        seen = {n: b.checks for n, b in backends.items()}
        await sleep(1.0)
        grown = {n: b.checks - seen[n] for n, b in backends.items()}
        assert min(grown.values()) >= 4, grown
    finally:
        for p in listening.values():
            await p.stopListening()
