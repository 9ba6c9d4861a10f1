"""``shadowing`` in memory: how it is read and refused (with its field), the
``-shadow`` host, the percentage, and the copy's plan the pipeline makes
beside the primary's. End to end over sockets (the copy sent, the primary
unaffected, the bounds): tests/integration/test_shadowing_e2e.py."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from twistgw.config.errors import ConfigError
from twistgw.config.loader import load_text
from twistgw.core.plan import Forward, RetryingForward
from twistgw.core.plugins import PluginHost
from twistgw.core.shadowing import Shadow, shadow_host
from twistgw.core.snapshot import build_snapshot
from twistgw.sdk.testing import ChainTester

from support.trial import TestCase

UPSTREAMS = """\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: blue}
spec: {static: {hosts: [{addr: blue.internal, port: 8080}]}}
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: green, namespace: canary}
spec: {static: {hosts: [{addr: 127.0.0.2, port: 9090}]}}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: vs}
spec:
  virtualHost:
    domains: ['*']
"""
TO_BLUE = "routeAction: {single: {upstream: {name: blue}}}"


def vs(routes: str, options: str = "") -> str:
    text = UPSTREAMS
    if options:
        text += "    options:\n" + textwrap.indent(textwrap.dedent(options), "      ")
    return text + "    routes:\n" + textwrap.indent(textwrap.dedent(routes), "    ")


def problems(text: str) -> list[tuple[str, str]]:
    try:
        build_snapshot(load_text(text, keep_going=True), PluginHost.create(load_entry_points=False))
    except ConfigError as exc:
        return [(i.field, i.reason) for i in exc.issues]
    return []


GREEN = "{upstream: {name: green, namespace: canary}, percentage: 100}"


class ReadingTests(TestCase):
    @pytest.mark.parametrize("value, field, reason", [
        ("{upstream: {name: green, namespace: canary}}", "shadowing.percentage", "is required"),
        ("{percentage: 5}", "shadowing.upstream", "is required"),
        ("{upstream: {name: green, namespace: canary}, percentage: 101}", "shadowing.percentage",
         "must be a percentage from 0 to 100, got 101"),
        ("{upstream: {name: green, namespace: canary}, percentage: true}", "shadowing.percentage",
         "must be a percentage from 0 to 100"),
        ("{upstream: {name: green, namespace: canary}, percentage: 5, hostSuffix: false}", "shadowing.hostSuffix",
         "unknown field"),
        ("{upstream: {namespace: canary}, percentage: 5}", "shadowing.upstream.name", "is required"),
    ])
    def test_refusals(self, value, field, reason):
        found = problems(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n  options: {{shadowing: {value}}}\n"))
        assert any(f == "spec.virtualHost.routes[0].options." + field and reason in r for f, r in found), found

    def test_a_dangling_upstream_is_named(self):
        found = problems(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n"
                            "  options: {shadowing: {upstream: {name: green}, percentage: 5}}\n"))
        assert found == [("spec.virtualHost.routes[0].options",
                          "shadowing: dangling reference: upstream names no Upstream default/green")]

    def test_a_route_that_answers_itself_has_nothing_to_copy(self):
        found = problems(vs("- matchers: [{prefix: /}]\n  directResponseAction: {status: 200, body: hi}\n"
                            f"  options: {{shadowing: {GREEN}}}\n"))
        assert len(found) == 1 and "answers itself" in found[0][1], found

    def test_a_route_option_only(self):
        found = problems(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n", f"shadowing: {GREEN}\n"))
        assert found == [("spec.virtualHost.options.shadowing",
                          "is a route option (as in Gloo): write it under the routes' options")]


class HostTests(TestCase):
    @pytest.mark.parametrize("host, shadow", [
        (b"api.example.com", b"api.example.com-shadow"),
        (b"api.example.com:8080", b"api.example.com-shadow:8080"),
        (b"10.0.0.1:80", b"10.0.0.1-shadow:80"),
        (b"[::1]:8443", b"[::1]-shadow:8443"),
        (b"[::1]", b"[::1]-shadow"),
    ])
    def test_envoys_suffix_goes_before_the_port(self, host, shadow):
        assert shadow_host(host) == shadow


class PlanTests(TestCase):
    async def test_the_copy_is_the_primary_request_to_the_shadow_upstream(self):
        t = ChainTester.from_yaml(vs(f"""\
            - matchers: [{{prefix: /}}]
              {TO_BLUE}
              options:
                shadowing: {GREEN}
                prefixRewrite: /v2/
                headerManipulation: {{requestHeadersToAdd: [{{header: {{key: x-tag, value: one}}}}]}}
            """), [])
        r = await t.request("POST", "http://api.example.com:8000/orders?id=7", headers={"X-Client": "c"})
        primary = r.plan
        assert isinstance(primary, RetryingForward) and primary.retry is None
        copy = primary.mirror
        assert isinstance(copy, Forward) and copy.mirror is None
        assert (copy.endpoint.host, copy.endpoint.port) == ("127.0.0.2", 9090)
        assert (copy.upstream.namespace, copy.upstream.name) == ("canary", "green")
        assert (copy.method, copy.target, copy.timeout) == (b"POST", b"/v2/orders?id=7", primary.timeout)
        assert copy.headers.getRawHeaders(b"host") == [b"api.example.com-shadow:8000"]
        assert primary.headers.getRawHeaders(b"host") == [b"api.example.com:8000"]
        for name in (b"x-tag", b"x-client", b"x-forwarded-for", b"x-forwarded-proto"):
            assert copy.headers.getRawHeaders(name) == primary.headers.getRawHeaders(name), name
        copy.headers.setRawHeaders(b"x-tag", [b"changed"])  # a copy: the primary's are its own
        assert primary.headers.getRawHeaders(b"x-tag") == [b"one"]

    async def test_percentage_zero_copies_nothing(self):
        t = ChainTester.from_yaml(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n  options: {{shadowing:"
                                     " {upstream: {name: green, namespace: canary}, percentage: 0}}\n"), [])
        for _ in range(50):
            r = await t.request("GET", "http://api.example.com/x")
            assert r.plan.mirror is None

    async def test_a_route_without_shadowing_plans_a_plain_forward(self):
        t = ChainTester.from_yaml(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n"), [])
        r = await t.request("GET", "http://api.example.com/x")
        assert type(r.plan) is Forward and r.plan.mirror is None


class PercentageTests(TestCase):
    async def test_the_roll_decides(self):
        t = ChainTester.from_yaml(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n  options: {{shadowing: {GREEN}}}\n"),
                                  [])
        r = await t.request("GET", "http://api.example.com/x")
        compiled = r.runtime.policy.shadow
        rolls = iter([0.299, 0.3, 0.0, 0.9999])
        shadow = Shadow(compiled.balancer, 30.0, lambda: next(rolls))
        assert [shadow.mirror(r.plan) is not None for _ in range(4)] == [True, False, True, False]


class EngineTests(TestCase):
    """The engine over StringTransports and a MemoryReactorClock: the copy
    goes out after the primary, on a connection of its own, and the bounds."""

    CONFIG = vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n  options: {{shadowing: {GREEN}, timeout: 5s}}\n")

    def _gateway(self, max_inflight: int = 100, body_limit: int = 64 * 1024) -> tuple[Any, Any, Any]:
        from twisted.internet.address import IPv4Address
        from twisted.internet.testing import MemoryReactorClock, StringTransport

        from twistgw.engine.server import Gateway, GatewayFactory
        from twistgw.engine.upstream.shadow import Shadows

        reactor = MemoryReactorClock()
        host = PluginHost.create(load_entry_points=False)
        gateway = Gateway(reactor, host, access_log=False)
        gateway.shadows = Shadows(gateway.forwarder, reactor, max_inflight, body_limit)
        gateway.snapshot = build_snapshot(load_text(self.CONFIG), host)
        proto = GatewayFactory(gateway).buildProtocol(IPv4Address("TCP", "127.0.0.1", 8080))
        client = StringTransport(peerAddress=IPv4Address("TCP", "203.0.113.5", 5555))
        proto.makeConnection(client)
        return reactor, proto, client

    @staticmethod
    def _connect(reactor: Any, index: int) -> Any:
        from twisted.internet.testing import StringTransport

        host, port, factory, _timeout, _bind = reactor.tcpClients[index]
        transport = StringTransport()
        conn = factory.buildProtocol(None)
        conn.makeConnection(transport)
        return (host, port), conn, transport

    def test_the_copy_follows_the_primary_and_its_answer_is_dropped(self):
        from twistgw.core.shadowing import SHADOWS

        answered = SHADOWS.labels("answered").value
        reactor, proto, client = self._gateway()
        proto.dataReceived(b"POST /orders HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 5\r\n\r\nhello")
        assert [p for _h, p, *_ in reactor.tcpClients] == [8080, 9090]  # the primary first, then its copy
        (_, primary, primary_out), (_, shadow, shadow_out) = self._connect(reactor, 0), self._connect(reactor, 1)
        assert primary_out.value().startswith(b"POST /orders HTTP/1.1\r\n")
        sent = shadow_out.value()
        assert sent.startswith(b"POST /orders HTTP/1.1\r\n") and sent.endswith(b"\r\n\r\nhello"), sent
        assert b"\r\nHost: api.example.com-shadow\r\n" in sent and b"\r\nContent-Length: 5\r\n" in sent
        shadow.dataReceived(b"HTTP/1.1 500 Oops\r\nContent-Length: 6\r\n\r\nshadow")
        primary.dataReceived(b"HTTP/1.1 201 Created\r\nContent-Length: 7\r\n\r\nprimary")
        answer = client.value()
        assert answer.startswith(b"HTTP/1.1 201 ") and answer.endswith(b"primary") and b"shadow" not in answer
        assert SHADOWS.labels("answered").value == answered + 1

    def test_in_flight_bound_drops_and_counts(self):
        from twistgw.core.shadowing import SHADOWS

        overflow = SHADOWS.labels("overflow").value
        reactor, proto, client = self._gateway(max_inflight=1)
        request = b"GET /a HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
        proto.dataReceived(request)
        (_, primary, _), (_, _shadow, shadow_out) = self._connect(reactor, 0), self._connect(reactor, 1)
        assert shadow_out.value().startswith(b"GET /a ")  # in flight, never answered
        primary.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        proto.dataReceived(request)  # the primary reuses its pooled connection; no place for a second shadow
        assert len(reactor.tcpClients) == 2
        assert SHADOWS.labels("overflow").value == overflow + 1
        primary.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        assert client.value().count(b"HTTP/1.1 200 OK") == 2  # the primary, unaffected

    def test_a_body_over_the_bound_is_not_copied_and_the_primary_gets_it_all(self):
        from twistgw.core.shadowing import SHADOWS

        too_large = SHADOWS.labels("body_too_large").value
        reactor, proto, client = self._gateway(body_limit=8)
        proto.dataReceived(b"POST /up HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n"
                           b"5\r\nhello\r\n")
        (_, primary, primary_out) = self._connect(reactor, 0)
        proto.dataReceived(b"6\r\n world\r\n0\r\n\r\n")  # 11 bytes: past the bound
        assert b"hello" in primary_out.value() and b" world" in primary_out.value()
        assert SHADOWS.labels("body_too_large").value == too_large + 1
        reactor.advance(10)
        assert len(reactor.tcpClients) == 1  # no copy, ever

    def test_a_body_that_never_completes_sends_no_copy(self):
        from twistgw.core.shadowing import SHADOWS

        incomplete = SHADOWS.labels("incomplete_body").value
        reactor, proto, client = self._gateway()
        proto.dataReceived(b"PUT /up HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 100\r\n\r\nabc")
        reactor.advance(5.1)  # the route's timeout
        assert SHADOWS.labels("incomplete_body").value == incomplete + 1
        assert len(reactor.tcpClients) == 1


class ExplainTests(TestCase):
    def test_explain_says_where_the_copy_goes(self):
        import subprocess
        import sys
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "config.yaml").write_text(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n"
                                                    f"  options: {{shadowing: {GREEN}}}\n"))
            done = subprocess.run([sys.executable, "-m", "twistgw", "explain", d, "GET", "http://api.example.com/x"],
                                  capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert ("Shadowed: 100% of requests copied to upstream canary/green with the Host suffixed -shadow,"
                " the answer discarded (this request included)") in done.stdout, done.stdout


class CredentialsTests(TestCase):
    async def test_the_copy_carries_no_credentials_the_chain_consumed(self):
        config = vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n  options: {{shadowing: {GREEN},"
                    " extauth: {configRef: {name: keys, namespace: default}}}\n") + """\
---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {name: keys, namespace: default}
spec:
  configs:
  - apiKeyAuth: {labelSelector: {team: "a"}}
---
apiVersion: v1
kind: Secret
type: extauth.solo.io/apikey
metadata: {name: key-1, namespace: default, labels: {team: "a"}}
stringData: {api-key: secret-key-1}
"""
        t = ChainTester.from_yaml(config, ["extauth", "authtypes"])
        r = await t.request("GET", "http://api.example.com/x", headers={"api-key": "secret-key-1", "X-Other": "o"})
        assert r.status == 200 and r.plan.mirror is not None, r
        copy = r.plan.mirror.headers
        assert copy.getRawHeaders(b"api-key") is None and r.plan.headers.getRawHeaders(b"api-key") is None
        assert copy.getRawHeaders(b"x-other") == [b"o"]
