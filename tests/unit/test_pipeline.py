"""One pipeline: the server, ``twistgw explain`` and ``ChainTester`` run the
same ``Pipeline.handle``, so what explain and the tester show is what the
upstream really gets (path after ``prefixRewrite``, ``X-Forwarded-*``)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

from twistgw.sdk import Deny
from twistgw.config.loader import load_text
from twistgw.core.pipeline import Pipeline, RequestHead
from twistgw.core.plan import Forward, LocalResponse
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.engine.server import Gateway, GatewayFactory
from twistgw.sdk.testing import ChainTester

from support.trial import TestCase

CONFIG = """\
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {name: pets}
spec:
  static:
    hosts: [{addr: 127.0.0.1, port: 9}]
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: api}
spec:
  virtualHost:
    domains: ["api.example.com"]
    routes:
    - matchers: [{prefix: /api/}]
      routeAction: {single: {upstream: {name: pets}}}
      options: {prefixRewrite: /v2/, timeout: 3s}
    - matchers: [{prefix: /teapot}]
      directResponseAction: {status: 418, body: "short and stout\\n"}
"""


def _pipeline() -> tuple[Pipeline, Any]:
    host = PluginHost.create(load_entry_points=False)
    return Pipeline(host, None, upstream_timeout=15.0), build_snapshot(load_text(CONFIG), host)


def _headers() -> Any:
    from twistgw.sdk import Headers

    return Headers({b"host": [b"api.example.com"], b"connection": [b"keep-alive"]})


class PipelineTests(TestCase):
    def test_handle_plans_a_forward_with_the_rewritten_target_and_forwarding_headers(self) -> None:
        pipeline, snapshot = _pipeline()
        head = RequestHead(b"GET", b"/api/pets?x=1", _headers(), "192.0.2.7")
        plan = pipeline.handle(head, snapshot)
        assert isinstance(plan, Forward)
        assert plan.target == b"/v2/pets?x=1"
        assert plan.method == b"GET" and plan.timeout == 3.0
        assert (plan.endpoint.host, plan.endpoint.port) == ("127.0.0.1", 9)
        assert plan.headers.getRawHeaders(b"x-forwarded-for") == [b"192.0.2.7"]
        assert plan.headers.getRawHeaders(b"x-forwarded-proto") == [b"http"]
        assert head.ctx is not None and head.ctx.path == "/api/pets"

    def test_a_local_answer_is_its_own_type_not_a_deny(self) -> None:
        pipeline, snapshot = _pipeline()
        direct = pipeline.handle(RequestHead(b"GET", b"/teapot", _headers()), snapshot)
        missing = pipeline.handle(RequestHead(b"GET", b"/nothing", _headers()), snapshot)
        not_ready = pipeline.handle(RequestHead(b"GET", b"/api/x", _headers()), None)
        for plan, status in ((direct, 418), (missing, 404), (not_ready, 503)):
            assert type(plan) is LocalResponse and not isinstance(plan, Deny)
            assert plan.status == status
        assert direct.body == b"short and stout\n"

    async def test_chain_tester_shows_what_the_upstream_gets(self) -> None:
        result = await ChainTester.from_yaml(CONFIG, []).request(
            "GET", "http://api.example.com/api/pets", client_address="198.51.100.4")
        assert result.status == 200 and result.forwarded
        assert result.forwarded_target == "/v2/pets"
        assert result.forwarded_headers.getRawHeaders(b"x-forwarded-for") == [b"198.51.100.4"]
        assert result.forwarded_headers.getRawHeaders(b"x-forwarded-proto") == [b"http"]

    def test_explain_prints_the_rewritten_path_and_the_headers_sent(self, tmp_path) -> None:
        (tmp_path / "config.yaml").write_text(CONFIG)
        done = subprocess.run([sys.executable, "-m", "twistgw", "explain", str(tmp_path), "GET",
                               "http://api.example.com/api/pets", "-H", "Authorization: Bearer abc.def.ghi"],
                              capture_output=True, text=True, timeout=60)
        text = done.stdout
        assert done.returncode == 0, (text, done.stderr)
        assert "as /v2/pets" in text and "/api/pets\n" not in text.split("Result:")[1]
        assert "X-Forwarded-For: 127.0.0.1" in text
        assert "Authorization: Bearer (redacted)" in text and "abc.def" not in text

    def test_the_server_sends_what_the_pipeline_planned(self) -> None:
        reactor = MemoryReactorClock()
        host = PluginHost.create(load_entry_points=False)
        gateway = Gateway(reactor, host, access_log=False)
        gateway.snapshot = build_snapshot(load_text(CONFIG), host)
        proto = GatewayFactory(gateway).buildProtocol(IPv4Address("TCP", "127.0.0.1", 8080))
        proto.makeConnection(StringTransport(peerAddress=IPv4Address("TCP", "203.0.113.5", 5555)))
        proto.dataReceived(b"GET /api/pets?x=1 HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
        [(host_, port, factory, _timeout, _bind)] = reactor.tcpClients
        assert (host_, port) == ("127.0.0.1", 9)
        upstream = StringTransport()
        factory.buildProtocol(None).makeConnection(upstream)
        sent = upstream.value()
        assert sent.startswith(b"GET /v2/pets?x=1 HTTP/1.1\r\n"), sent
        assert b"\r\nX-Forwarded-For: 203.0.113.5\r\n" in sent
        assert b"\r\nHost: api.example.com\r\n" in sent
        proto.connectionLost(None)
