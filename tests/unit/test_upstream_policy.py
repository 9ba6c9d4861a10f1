"""An Upstream's ``outlierDetection``, ``loadBalancerConfig.leastRequest`` /
``healthyPanicThreshold`` and ``connectionConfig``: what is refused (file,
line, field, reason, every problem at once), what loads, and the core's
rules (Envoy's) with a clock and dice of the test's own. End to end through
``twist twistgw``: ``tests/integration/test_upstream_policy_e2e.py``."""

from __future__ import annotations

import random
import socket

from twistgw.api.types import Endpoint, UpstreamInfo
from twistgw.api.upstreampolicy import ConnectionConfig, OutlierDetection, TcpKeepalive
from twistgw.config.errors import ConfigError
from twistgw.config.loader import load_directory
from twistgw.config.model import LoadBalancer
from twistgw.core.balancers import LeastRequest
from twistgw.core.health import CheckedBalancer
from twistgw.core.outlier import OutlierState, UpstreamWatch
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.engine.upstream.configured import set_keepalive

from support.trial import TestCase

import pytest

VS = """\
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  virtualHost:
    domains: ['*']
    routes:
    - matchers: [{prefix: /}]
      routeAction: {single: {upstream: {name: pool, namespace: default}}}
"""


def upstream(spec: str) -> str:
    return ("apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: pool, namespace: default}\nspec:\n"
            "  static: {hosts: [{addr: 127.0.0.1, port: 1}, {addr: 127.0.0.1, port: 2}]}\n" + spec + VS)


def load(tmp_path, text: str):
    (tmp_path / "config.yaml").write_text(text)
    config = load_directory(str(tmp_path), keep_going=True)
    return build_snapshot(config, PluginHost.create(load_entry_points=False))


def issues(tmp_path, text: str) -> list[tuple[str, int | None, str, str]]:
    try:
        load(tmp_path, text)
    except ConfigError as exc:
        return [(i.file.rsplit("/", 1)[-1], i.line, i.field, i.reason) for i in exc.issues]
    return []


class RefusalTests(TestCase):
    def test_every_refusal_at_once_with_file_line_field_reason(self, tmp_path):
        found = issues(tmp_path, upstream(
            "  outlierDetection:\n"                                    # line 6
            "    consecutive5xx: 0\n"                                  # 7
            "    successRateStdevFactor: 1900\n"                       # 8
            "    failurePercentageThreshold: 85\n"                     # 9
            "    splitExternalLocalOriginErrors: true\n"               # 10
            "    maxEjectionPercent: 101\n"                            # 11
            "    interval: 0s\n"                                       # 12
            "  connectionConfig:\n"                                    # 13
            "    perConnectionBufferLimitBytes: 1024\n"                # 14
            "    commonHttpProtocolOptions:\n"                         # 15
            "      maxStreamDuration: 5s\n"                            # 16
            "      headersWithUnderscoresAction: DROP_HEADER\n"        # 17
            "    tcpKeepalive: {keepaliveProbes: 0}\n"                 # 18
            "  loadBalancerConfig: {leastRequest: {choiceCount: 1}, healthyPanicThreshold: -1}\n"))  # 19
        by_field = {field: (f, line, reason) for f, line, field, reason in found}
        od, cc, lb = "spec.outlierDetection", "spec.connectionConfig", "spec.loadBalancerConfig"
        expected_lines = {
            f"{od}.consecutive5xx": 7, f"{od}.successRateStdevFactor": 8, f"{od}.failurePercentageThreshold": 9,
            f"{od}.splitExternalLocalOriginErrors": 10, f"{od}.maxEjectionPercent": 11, f"{od}.interval": 12,
            f"{cc}.perConnectionBufferLimitBytes": 14, f"{cc}.commonHttpProtocolOptions.maxStreamDuration": 16,
            f"{cc}.commonHttpProtocolOptions.headersWithUnderscoresAction": 17,
            f"{cc}.tcpKeepalive.keepaliveProbes": 18, f"{lb}.leastRequest.choiceCount": 19,
            f"{lb}.healthyPanicThreshold": 19,
        }
        assert {k: v[1] for k, v in by_field.items()} == expected_lines
        assert all(f == "config.yaml" for f, _, _ in by_field.values())
        reasons = {k: v[2] for k, v in by_field.items()}
        assert all(r.startswith("is not supported by twistgw") for k, r in reasons.items()
                   if not k.endswith(("consecutive5xx", "maxEjectionPercent", "interval", "Probes", "Threshold",
                                      "choiceCount")))
        assert "success-rate outlier detection" in reasons[f"{od}.successRateStdevFactor"]
        assert "failure-percentage" in reasons[f"{od}.failurePercentageThreshold"]
        assert "always count as 5xx" in reasons[f"{od}.splitExternalLocalOriginErrors"]
        assert "back-pressure" in reasons[f"{cc}.perConnectionBufferLimitBytes"]
        assert "route's timeout" in reasons[f"{cc}.commonHttpProtocolOptions.maxStreamDuration"]
        assert "no effect on an Upstream" in reasons[f"{cc}.commonHttpProtocolOptions.headersWithUnderscoresAction"]
        assert "percentage from 0 to 100" in reasons[f"{lb}.healthyPanicThreshold"]

    @pytest.mark.parametrize("spec, field", [
        ("  outlierDetection: {consecutiveLocalOriginFailure: 3}\n", "spec.outlierDetection.consecutiveLocalOriginFailure"),
        ("  outlierDetection: {baseEjectionTime: soon}\n", "spec.outlierDetection.baseEjectionTime"),
        ("  outlierDetection: {ejectionTime: 3s}\n", "spec.outlierDetection.ejectionTime"),
        ("  connectionConfig: {http1ProtocolOptions: {enableTrailers: true}}\n",
         "spec.connectionConfig.http1ProtocolOptions"),
        ("  connectionConfig: {connectTimeout: 0s}\n", "spec.connectionConfig.connectTimeout"),
        ("  connectionConfig: {commonHttpProtocolOptions: {headersWithUnderscoresAction: MAYBE}}\n",
         "spec.connectionConfig.commonHttpProtocolOptions.headersWithUnderscoresAction"),
        ("  loadBalancerConfig: {leastRequest: {slowStartConfig: {slowStartWindow: 5s}}}\n",
         "spec.loadBalancerConfig.leastRequest.slowStartConfig"),
    ])
    def test_one_refusal(self, tmp_path, spec, field):
        assert [f for _, _, f, _ in issues(tmp_path, upstream(spec))] == [field]

    def test_everything_built_loads_with_gloos_names(self, tmp_path):
        snap = load(tmp_path, upstream(
            "  outlierDetection: {consecutive5xx: 3, enforcingConsecutive5xx: 90, consecutiveGatewayFailure: 2,\n"
            "    enforcingConsecutiveGatewayFailure: 100, interval: 2s, baseEjectionTime: 10s,"
            " maxEjectionTime: 1m, maxEjectionPercent: 50}\n"
            "  connectionConfig: {maxRequestsPerConnection: 7, connectTimeout: 1.5s,\n"
            "    tcpKeepalive: {keepaliveProbes: 3, keepaliveTime: 7.2s, keepaliveInterval: 2s},\n"
            "    commonHttpProtocolOptions: {idleTimeout: 0s, maxHeadersCount: 20,"
            " headersWithUnderscoresAction: ALLOW}}\n"
            "  loadBalancerConfig: {leastRequest: {choiceCount: 3}, healthyPanicThreshold: 25}\n"))
        res = snap.config.upstream_resources[("default", "pool")]
        assert res.outlier == OutlierDetection(3, 90, 2, 100, 2.0, 10.0, 60.0, 50)
        assert res.connection == ConnectionConfig(7, 1.5, TcpKeepalive(3, 8, 2), 0.0, 20)
        assert snap.config.upstreams[("default", "pool")].connection == res.connection
        assert (res.load_balancer.kind, res.load_balancer.choice_count, res.load_balancer.panic_threshold) == \
            ("leastRequest", 3, 25.0)
        assert list(snap.outliers) == [("default", "pool")]

    def test_envoys_defaults(self, tmp_path):
        snap = load(tmp_path, upstream("  outlierDetection: {}\n  loadBalancerConfig: {leastRequest: {}}\n"))
        res = snap.config.upstream_resources[("default", "pool")]
        assert res.outlier == OutlierDetection(5, 100, 5, 0, 10.0, 30.0, 300.0, 10)
        assert (res.load_balancer.choice_count, res.load_balancer.panic_threshold) == (2, 50.0)


EPS = tuple(Endpoint("10.0.0.%d" % i, 80) for i in range(1, 5))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def outlier(n: int = 4, roll: float = 0.0, **config) -> tuple[OutlierState, CheckedBalancer, Clock]:
    clock = Clock()
    info = UpstreamInfo("d", "u", EPS[:n])
    lb = LoadBalancer(panic_threshold=config.pop("panic")) if "panic" in config else None
    state = OutlierState(info, OutlierDetection(**config), clock=clock, roll=lambda: roll)
    return state, CheckedBalancer(info, lb, None, state), clock


class OutlierTests(TestCase):
    def test_consecutive_5xx_ejects_and_a_success_resets(self):
        state, balancer, _ = outlier(consecutive_5xx=3, max_ejection_percent=50)
        for status in (500, 503, 200, 500, 500):
            state.answered(EPS[0], status)
        assert not state.ejected  # the 200 broke the run
        state.answered(EPS[0], 502)
        assert list(state.ejected) == [EPS[0]]
        assert EPS[0] not in balancer.healthy and len(balancer.healthy) == 3

    def test_gateway_failures_are_not_enforced_by_default(self):
        state, _, _ = outlier(consecutive_5xx=10, consecutive_gateway_failure=2)
        for _ in range(3):
            state.answered(EPS[1], 503)
        assert not state.ejected  # enforcingConsecutiveGatewayFailure defaults to 0
        state2, _, _ = outlier(consecutive_5xx=10, consecutive_gateway_failure=2,
                               enforcing_consecutive_gateway_failure=100)
        state2.answered(EPS[1], 503)
        state2.answered(EPS[1], 500)  # not a gateway error: the run is broken
        state2.answered(EPS[1], 504)
        assert not state2.ejected
        state2.answered(EPS[1], 504)
        assert list(state2.ejected) == [EPS[1]]

    def test_enforcing_percentage_is_a_probability(self):
        state, _, _ = outlier(consecutive_5xx=1, enforcing_consecutive_5xx=30, roll=0.5)
        state.answered(EPS[0], 500)
        assert not state.ejected  # rolled 50 >= 30
        state, _, _ = outlier(consecutive_5xx=1, enforcing_consecutive_5xx=30, roll=0.2)
        state.answered(EPS[0], 500)
        assert list(state.ejected) == [EPS[0]]

    def test_max_ejection_percent_and_at_least_one(self):
        state, _, _ = outlier(consecutive_5xx=1, max_ejection_percent=10)
        for ep in EPS:
            state.answered(ep, 500)
        assert list(state.ejected) == [EPS[0]]  # 10 % of 4 is none, but one always may go
        state, _, _ = outlier(consecutive_5xx=1, max_ejection_percent=50)
        for ep in EPS:
            state.answered(ep, 500)
        assert list(state.ejected) == [EPS[0], EPS[1]]

    def test_ejection_time_grows_capped_and_decays(self):
        state, balancer, clock = outlier(consecutive_5xx=1, base_ejection_time=10.0, max_ejection_time=25.0,
                                         interval=1.0, max_ejection_percent=100)
        state.answered(EPS[0], 500)
        clock.now = 9.5
        assert state.sweep() == []
        clock.now = 10.0
        assert state.sweep() == [EPS[0]] and EPS[0] in balancer.healthy
        state.answered(EPS[0], 500)  # second ejection: 20 s
        clock.now = 29.0
        assert state.sweep() == []
        clock.now = 30.0
        assert state.sweep() == [EPS[0]]
        state.answered(EPS[0], 500)  # third: 30 s, capped at 25
        clock.now = 55.0
        assert state.sweep() == [EPS[0]]
        assert state.times[EPS[0]] == 3
        for t in (56.0, 57.0):  # one step down per interval back in the rotation
            clock.now = t
            state.sweep()
        assert state.times[EPS[0]] == 1

    def test_panic_below_the_threshold_and_disabled_at_zero(self):
        state, balancer, _ = outlier(n=2, consecutive_5xx=1, max_ejection_percent=100)
        state.answered(EPS[0], 500)
        assert balancer.healthy == (EPS[1],)  # 50 % healthy: not below the threshold
        state.answered(EPS[1], 500)
        assert set(balancer.healthy) == set(EPS[:2])  # none healthy: panic, every endpoint
        state, balancer, _ = outlier(n=2, consecutive_5xx=1, max_ejection_percent=100, panic=0.0)
        state.answered(EPS[0], 500)
        state.answered(EPS[1], 500)
        assert balancer.healthy == () and balancer.pick() is None  # no panic: no healthy upstream

    def test_a_local_failure_and_the_watch(self):
        state, _, _ = outlier(consecutive_5xx=2)
        active: dict[Endpoint, int] = {}
        watch = UpstreamWatch(active, state)
        watch.started(EPS[0])
        watch.started(EPS[0])
        assert active == {EPS[0]: 2}
        watch.answered(EPS[0], 503)
        watch.answered(EPS[0], 504)
        watch.ended(EPS[0])
        watch.ended(EPS[0])
        assert active == {} and list(state.ejected) == [EPS[0]]


class LeastRequestTests(TestCase):
    def test_fewest_active_of_the_choices(self):
        draws = iter([i / 4 + 0.01 for i in (0, 1, 1, 2, 3, 3)])  # endpoints 0, 1, 1, 2, 3, 3 of four
        active = {EPS[0]: 3, EPS[1]: 1, EPS[2]: 0}
        lb = LeastRequest(UpstreamInfo("d", "u", EPS), LoadBalancer("leastRequest", choice_count=2), active,
                          rand=lambda: next(draws))
        assert lb.pick() == EPS[1]  # 0 (3 active) against 1 (1 active)
        assert lb.pick() == EPS[2]  # 1 (1 active) against 2 (idle)
        assert lb.pick() == EPS[3]  # idle at the first draw: nothing can beat it
        assert next(draws) == 3 / 4 + 0.01

    def test_idle_endpoint_wins_under_load(self):
        # The busy endpoint wins only when all five draws are it: 1 in 32,
        # about 12 of 400 picks (round robin: 200). Drawn from a seeded
        # generator: with the process's own, 20 or more came about once in
        # 35 runs (the binomial tail: 2.8 %), and the test failed. This seed: 12.
        active = {EPS[0]: 5}
        lb = LeastRequest(UpstreamInfo("d", "u", EPS[:2]), LoadBalancer("leastRequest", choice_count=5), active,
                          rand=random.Random(4).random)
        picks = [lb.pick() for _ in range(400)]
        assert picks.count(EPS[0]) < 20, picks.count(EPS[0])


class KeepaliveTests(TestCase):
    def test_socket_options(self):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            set_keepalive(sock, TcpKeepalive(3, 8, 2))
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert [sock.getsockopt(socket.IPPROTO_TCP, o) for o in
                    (socket.TCP_KEEPCNT, socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL)] == [3, 8, 2]
        finally:
            sock.close()
