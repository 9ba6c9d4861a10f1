"""Where a retry goes (issue 32 item 5), in memory: every balancer picks
another endpoint than the ones a request tried (Envoy's ``previous_hosts``
retry predicate), among the endpoints taking traffic now (active health,
outlier ejection, panic), the same one again only when it tried them all;
consistent hashing walks on from the request's point. Then the engine: the
next try's connection goes to the new endpoint, with its ``Host`` under
``autoHostRewrite``, its active-request count (``leastRequest``), its
access-log label, and 503 "no healthy upstream" when none is left.
End to end over real sockets: tests/integration/test_retry_hosts_e2e.py."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

from twistgw.config.loader import load_text
from twistgw.core.plan import RetryingForward
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.engine.server import Gateway, GatewayFactory
from twistgw.testing import ChainTester

from support.memory import MemoryUpstreams
from support.trial import TestCase

LBS = {
    "roundRobin": ("{roundRobin: {}}", ""),
    "leastRequest": ("{leastRequest: {choiceCount: 3}}", ""),
    "random": ("{random: {}}", ""),
    "ringHash": ("{ringHash: {}}", ", lbHash: {hashPolicies: [{header: x-user}]}"),
    "maglev": ("{maglev: {}}", ", lbHash: {hashPolicies: [{header: x-user}]}"),
}


def config(lb: str = "{roundRobin: {}}", options: str = "", hosts: int = 4, extra: str = "") -> str:
    addrs = ", ".join(f"{{addr: 127.0.0.{i + 1}, port: 9}}" for i in range(hosts))
    return (f"apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {{name: pool, namespace: default}}\n"
            f"spec:\n  static: {{hosts: [{addrs}]}}\n  loadBalancerConfig: {lb}\n{extra}---\n"
            "apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: mem, namespace: default}\n"
            "spec:\n  virtualHost:\n    domains: ['*']\n    routes:\n    - matchers: [{prefix: /}]\n"
            "      options: {retries: {retryOn: 5xx, numRetries: 3, retryBackOff: {baseInterval: 100ms,"
            " maxInterval: 100ms}}" + options + "}\n"
            "      routeAction: {single: {upstream: {name: pool}}}\n")


CHECKED = ("  healthChecks:\n  - {timeout: 1s, interval: 5s, unhealthyThreshold: 1, healthyThreshold: 1,"
           " httpHealthCheck: {path: /healthz}}\n")


class PickTests(TestCase):
    async def plan(self, t: ChainTester, user: str = "alice") -> RetryingForward:
        plan = (await t.request("GET", "http://api.example.com/x", headers={"x-user": user})).plan
        assert isinstance(plan, RetryingForward)
        return plan

    @pytest.mark.parametrize("kind", list(LBS))
    async def test_every_balancer_moves_on_past_the_endpoints_tried(self, kind: str) -> None:
        lb, options = LBS[kind]
        t = ChainTester.from_yaml(config(lb, options), [])
        for user in ("alice", "bob", "carol", "dave", "erin"):
            plan = await self.plan(t, user)
            eps = plan.upstream.endpoints
            tried: tuple[Any, ...] = (plan.endpoint,)
            for _ in range(len(eps) - 1):  # each retry another endpoint, until every one was tried
                nxt = plan.retry_endpoint(tried)
                assert nxt is not None and nxt not in tried, (kind, nxt, tried)
                tried += (nxt,)
            assert set(tried) == set(eps)
            assert plan.retry_endpoint(tried) in eps  # all tried: one of them again, never none

    @pytest.mark.parametrize("kind", ["ringHash", "maglev"])
    async def test_a_hash_retries_to_the_same_second_choice(self, kind: str) -> None:
        lb, options = LBS[kind]
        t = ChainTester.from_yaml(config(lb, options), [])
        first, again = await self.plan(t, "alice"), await self.plan(t, "alice")
        assert first.endpoint == again.endpoint
        assert first.retry_endpoint((first.endpoint,)) == again.retry_endpoint((again.endpoint,))

    async def test_unhealthy_endpoints_are_never_picked_for_a_retry(self) -> None:
        t = ChainTester.from_yaml(config(extra=CHECKED), [])
        (state,) = t.snapshot.health.values()
        eps = state.upstream.endpoints
        state.report(eps[0], False)
        state.report(eps[1], False)  # two of four out: 50 %, not under the panic threshold
        for _ in range(8):
            plan = await self.plan(t)
            assert plan.endpoint in eps[2:]
            other = plan.retry_endpoint((plan.endpoint,))
            assert other in eps[2:] and other != plan.endpoint
            # both healthy ones tried: one of them again, not an unhealthy one
            assert plan.retry_endpoint(eps[2:]) in eps[2:]

    async def test_in_panic_a_retry_may_go_to_any_endpoint_not_tried(self) -> None:
        t = ChainTester.from_yaml(config(extra=CHECKED), [])
        (state,) = t.snapshot.health.values()
        eps = state.upstream.endpoints
        for ep in eps[:3]:
            state.report(ep, False)  # one of four healthy: panic, every endpoint takes traffic
        plan = await self.plan(t)
        assert plan.retry_endpoint(eps[1:]) == eps[0]

    async def test_an_ejected_endpoint_is_not_picked_for_a_retry(self) -> None:
        t = ChainTester.from_yaml(config(extra="  outlierDetection: {consecutive5xx: 1, interval: 10s,"
                                               " baseEjectionTime: 60s, maxEjectionPercent: 50}\n"), [])
        (outlier,) = t.snapshot.outliers.values()
        eps = outlier.upstream.endpoints
        outlier.answered(eps[1], 503)  # ejected at once
        assert list(outlier.ejected) == [eps[1]]
        for _ in range(8):
            plan = await self.plan(t)
            assert plan.retry_endpoint((plan.endpoint,)) not in (eps[1], plan.endpoint)

    async def test_no_endpoint_taking_traffic_is_none(self) -> None:
        t = ChainTester.from_yaml(config("{roundRobin: {}, healthyPanicThreshold: 0}", extra=CHECKED), [])
        (state,) = t.snapshot.health.values()
        plan = await self.plan(t)
        for ep in state.upstream.endpoints:
            state.report(ep, False)
        assert plan.retry_endpoint((plan.endpoint,)) is None


FAILED = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 6\r\n\r\nfailed"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class EngineTests(TestCase):
    def start(self, text: str) -> None:
        self.reactor = MemoryReactorClock()
        host = PluginHost.create(load_entry_points=False)
        self.gateway = Gateway(self.reactor, host, access_log=False)
        self.gateway.snapshot = build_snapshot(load_text(text), host)
        factory = GatewayFactory(self.gateway, timeout=60, head_timeout=10)
        self.upstreams = MemoryUpstreams(self.reactor)
        self.proto = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 8080))
        self.t = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.7", 5555))
        self.proto.makeConnection(self.t)

    def host_of(self, i: int) -> str:
        len(self.upstreams)
        return str(self.reactor.tcpClients[i][0])

    def test_the_next_try_connects_to_another_endpoint_with_its_host_and_count(self) -> None:
        self.start(config("{leastRequest: {}}", ", autoHostRewrite: true", hosts=2))
        self.proto.dataReceived(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        conn, first = self.upstreams[0]
        req = conn.req
        active = req.plan.watch.active
        one = self.host_of(0)
        self.assertIn(b"Host: %s\r\n" % one.encode(), first.value())
        self.assertEqual({ep.host: n for ep, n in active.items()}, {one: 1})
        self.assertEqual(req.label, f"{one}:9")
        conn.dataReceived(FAILED)
        self.reactor.advance(0.1)  # the backoff
        self.assertEqual(len(self.upstreams), 2)
        two = self.host_of(1)
        self.assertEqual({one, two}, {"127.0.0.1", "127.0.0.2"})  # the other endpoint
        conn, second = self.upstreams[1]
        self.assertIn(b"Host: %s\r\n" % two.encode(), second.value())  # autoHostRewrite follows
        self.assertEqual({ep.host: n for ep, n in active.items()}, {two: 1})  # counted where it is
        self.assertEqual(req.label, f"{two}:9")
        self.assertEqual(req.ex.upstream_label, f"{two}:9")  # the access log's upstream: the last try's
        conn.dataReceived(OK)
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 200 OK"), self.t.value())
        self.assertEqual(active, {})

    def test_no_endpoint_left_for_the_retry_is_no_healthy_upstream(self) -> None:
        self.start(config("{roundRobin: {}, healthyPanicThreshold: 0}", hosts=2, extra=CHECKED))
        self.proto.dataReceived(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        conn, _ = self.upstreams[0]
        conn.dataReceived(FAILED)
        (state,) = self.gateway.snapshot.health.values()
        for ep in state.upstream.endpoints:
            state.report(ep, False)  # meanwhile the checks took both out
        self.reactor.advance(0.1)
        self.assertEqual(len(self.upstreams), 1)  # no second try
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 503"), self.t.value())
        self.assertIn(b"no healthy upstream", self.t.value())
