"""The client side of the gateway in memory: bytes into a GatewayChannel over
a StringTransport, a MemoryReactorClock for time. No sockets, deterministic.

Written as twisted.trial TestCases so both runners work:
``pytest tests/unit/test_core_inmemory.py`` and
``python -m twisted.trial tests/unit/test_core_inmemory.py``.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

import twistgw
from twistgw._config import load_text
from twistgw._plugins import PluginHost
from twistgw._server import Gateway, GatewayFactory
from twistgw._snapshot import build_snapshot

CONFIG = """
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: mem}
spec:
  virtualHost:
    domains: ["api.example.com"]
    routes:
    - matchers: [{prefix: /locked}]
      directResponseAction: {status: 200, body: "secret\\n"}
      options: {gate: {}}
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200, body: "hello\\n"}
"""


class _Gate:
    """A test plugin: admits only requests with ``X-Pass: yes``."""

    @twistgw.hookimpl
    def twistgw_authenticate(self, ctx: twistgw.RequestContext, options: Any) -> twistgw.Decision:
        if ctx.header("x-pass") == "yes":
            return twistgw.Allow()
        return twistgw.Deny(401, b"no pass")


def _gateway(reactor: MemoryReactorClock, head_timeout: float = 10.0) -> GatewayFactory:
    host = PluginHost.create(extra=[("gate", _Gate())], load_entry_points=False)
    gateway = Gateway(reactor, host, access_log=False)
    gateway.snapshot = build_snapshot(load_text(CONFIG), host)
    factory = GatewayFactory(gateway, timeout=60, head_timeout=head_timeout)
    factory._reactor = reactor  # HTTPFactory's timeouts use it
    return factory


class InMemoryTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.factory = _gateway(self.reactor)

    def connect(self, factory: GatewayFactory | None = None) -> tuple[Any, StringTransport]:
        factory = factory or self.factory
        proto = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        proto.callLater = self.reactor.callLater
        transport = StringTransport(peerAddress=IPv4Address("TCP", "10.1.2.3", 5555))
        proto.makeConnection(transport)
        return proto, transport

    def test_direct_response(self) -> None:
        proto, t = self.connect()
        proto.dataReceived(b"GET /a/../hello HTTP/1.1\r\nHost: api.example.com:8080\r\n\r\n")
        out = t.value()
        self.assertTrue(out.startswith(b"HTTP/1.1 200 OK\r\n"), out)
        self.assertTrue(out.endswith(b"\r\n\r\nhello\n"), out)
        self.assertIn(b"Content-Length: 6\r\n", out)

    def test_unknown_host_is_404_with_empty_body(self) -> None:
        proto, t = self.connect()
        proto.dataReceived(b"GET / HTTP/1.1\r\nHost: other.example.com\r\n\r\n")
        out = t.value()
        self.assertTrue(out.startswith(b"HTTP/1.1 404 "), out)
        self.assertIn(b"Content-Length: 0\r\n", out)

    def test_plugin_denies_and_admits(self) -> None:
        proto, t = self.connect()
        proto.dataReceived(b"GET /locked HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
        self.assertTrue(t.value().startswith(b"HTTP/1.1 401 "), t.value())
        self.assertTrue(t.value().endswith(b"no pass"))
        t.clear()
        proto.dataReceived(b"GET /locked HTTP/1.1\r\nHost: api.example.com\r\nX-Pass: yes\r\n\r\n")
        self.assertTrue(t.value().endswith(b"secret\n"), t.value())

    def test_expect_continue_not_sent_before_a_denial(self) -> None:
        proto, t = self.connect()
        proto.dataReceived(b"POST /locked HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 5\r\n"
                           b"Expect: 100-continue\r\n\r\n")
        out = t.value()
        self.assertNotIn(b"100 Continue", out)
        self.assertTrue(out.startswith(b"HTTP/1.1 401 "), out)
        # the unread body can never become the next request
        self.assertIn(b"connection: close", out.lower())
        self.assertTrue(t.disconnecting)

    def test_bad_path_is_400(self) -> None:
        proto, t = self.connect()
        proto.dataReceived(b"GET /a%00b HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
        self.assertTrue(t.value().startswith(b"HTTP/1.1 400 "), t.value())

    def test_obs_fold_is_400(self) -> None:
        proto, t = self.connect()
        proto.dataReceived(b"GET / HTTP/1.1\r\nHost: api.example.com\r\nX-A: 1\r\n  folded\r\n\r\n")
        self.assertTrue(t.value().startswith(b"HTTP/1.1 400 "), t.value())
        self.assertTrue(t.disconnecting)

    def test_content_length_with_transfer_encoding_is_400(self) -> None:
        proto, t = self.connect()
        proto.dataReceived(b"POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 4\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        self.assertTrue(t.value().startswith(b"HTTP/1.1 400 "), t.value())

    def test_slow_request_head_times_out(self) -> None:
        proto, t = self.connect(_gateway(self.reactor, head_timeout=5))
        proto.dataReceived(b"GET / HTTP/1.1\r\nHost: api.exa")
        self.reactor.advance(4)
        proto.dataReceived(b"mple.com\r\nX-Slow: 1\r\n")  # still no end of head
        self.assertEqual(t.value(), b"")
        self.reactor.advance(1.5)
        self.assertTrue(t.value().startswith(b"HTTP/1.1 408 "), t.value())
        self.assertTrue(t.disconnecting)

    def test_pipelined_requests_answered_in_order(self) -> None:
        proto, t = self.connect()
        proto.dataReceived(b"GET /one HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
                           b"GET /locked HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
        out = t.value()
        first = out.find(b"hello\n")
        second = out.find(b"no pass")
        self.assertTrue(0 < first < second, out)
