"""The client side of the gateway in memory: bytes into the engine's server protocol over
a StringTransport, a MemoryReactorClock for time. No sockets, deterministic.

Written as twisted.trial TestCases so both runners work:
``pytest tests/unit/test_core_inmemory.py`` and
``PYTHONPATH=tests python -m twisted.trial tests/unit/test_core_inmemory.py``.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from twistgw import sdk
from twistgw.config.loader import load_text
from twistgw.core.plugins import PluginHost
from twistgw.engine.server import Gateway, GatewayFactory
from twistgw.core.snapshot import build_snapshot

from support.memory import MemoryUpstreams, memory_config

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

    @sdk.hookimpl
    def twistgw_authenticate(self, ctx: sdk.RequestContext, options: Any) -> sdk.Decision:
        if ctx.header("x-pass") == "yes":
            return sdk.Allow()
        return sdk.Deny(401, b"no pass")


def _gateway(reactor: MemoryReactorClock, head_timeout: float = 10.0) -> GatewayFactory:
    host = PluginHost.create(extra=[("gate", _Gate())], load_entry_points=False)
    gateway = Gateway(reactor, host, access_log=False)
    gateway.snapshot = build_snapshot(load_text(CONFIG), host)
    factory = GatewayFactory(gateway, timeout=60, head_timeout=head_timeout)
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


_PROXY_CONFIG = memory_config("""\
    - matchers: [{prefix: /fast}]
      options: {timeout: 2s}
      routeAction: {single: {upstream: {name: slow, namespace: default}}}
    - matchers: [{prefix: /}]
      routeAction: {single: {upstream: {name: slow, namespace: default}}}
""", upstream="slow")


class DeadlineTests(SynchronousTestCase):
    """The head and upstream deadlines share one lazily re-armed timer per
    connection; they must still fire exactly when due. The upstream is the
    engine's own pool connecting through the MemoryReactorClock: a test
    connects its pending connections to StringTransports and answers."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        host = PluginHost.create(load_entry_points=False)
        gateway = Gateway(self.reactor, host, access_log=False, upstream_timeout=15)
        gateway.snapshot = build_snapshot(load_text(_PROXY_CONFIG), host)
        self.factory = GatewayFactory(gateway, timeout=600, head_timeout=10)
        self.upstreams = MemoryUpstreams(self.reactor)
        proto = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        self.t = StringTransport(peerAddress=IPv4Address("TCP", "10.1.2.3", 5555))
        proto.makeConnection(self.t)
        self.proto = proto

    def answer(self, body: bytes = b"ok") -> None:
        """The upstream connection holding a request answers it."""
        for p, t in self.upstreams:
            if t.value() and not t.disconnecting:
                t.clear()
                p.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                return
        raise AssertionError("no upstream connection holds a request")

    def test_upstream_deadline_shorter_than_a_pending_head_timer(self) -> None:
        self.proto.dataReceived(b"GET /fast HTTP/1.1\r\nHost: a\r\n\r\n")
        self.reactor.advance(1.9)
        self.assertEqual(self.t.value(), b"")
        self.reactor.advance(0.2)
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 504 "), self.t.value())

    def test_upstream_deadline_longer_than_the_head_timer_it_follows(self) -> None:
        self.proto.dataReceived(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        self.reactor.advance(14.9)  # past the head timer's first firing (10 s)
        self.assertEqual(self.t.value(), b"")
        self.reactor.advance(0.2)
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 504 "), self.t.value())

    def test_keep_alive_requests_each_get_their_own_head_deadline(self) -> None:
        for _ in range(3):
            self.proto.dataReceived(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
            self.reactor.advance(6)
            self.answer()
            self.assertIn(b"200 OK", self.t.value())
            self.t.clear()
        # 18 s after the first byte of the connection, a new head gets 10 s.
        self.proto.dataReceived(b"GET /slow HTTP/1.1\r\nHo")
        self.reactor.advance(9.5)
        self.assertEqual(self.t.value(), b"")
        self.reactor.advance(0.6)
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 408 "), self.t.value())

    def test_one_timer_per_connection_not_per_request(self) -> None:
        made: list[float] = []
        real = self.reactor.callLater

        def counting(delay: float, *a: Any, **kw: Any) -> Any:
            made.append(delay)
            return real(delay, *a, **kw)

        self.proto.callLater = counting
        for _ in range(50):
            self.proto.dataReceived(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
            self.answer()
            self.reactor.advance(0.1)
        self.assertEqual(self.t.value().count(b"200 OK"), 50)
        # head + upstream deadlines and the idle timeout: no reactor call per request
        self.assertLessEqual(len(made), 2, made)

    def test_closed_connection_leaves_no_timer(self) -> None:
        self.proto.dataReceived(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        self.proto.connectionLost(Failure(ConnectionDone()))
        self.assertEqual([c for c in self.reactor.getDelayedCalls()
                          if getattr(c.func, "__self__", None) is self.proto], [])

    def _connect(self, idle: float) -> tuple[Any, StringTransport]:
        self.factory.timeOut = idle
        proto = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        t = StringTransport(peerAddress=IPv4Address("TCP", "10.1.2.3", 5556))
        proto.makeConnection(t)
        return proto, t

    def test_idle_connection_is_closed_after_the_idle_timeout(self) -> None:
        proto, t = self._connect(idle=30)
        self.reactor.advance(29)
        self.assertFalse(t.disconnecting)
        self.reactor.advance(1.5)
        self.assertTrue(t.disconnecting)

    def test_requests_keep_a_connection_alive(self) -> None:
        proto, t = self._connect(idle=30)
        for _ in range(8):  # 8 x 20 s: far past 30 s, never 30 s idle
            self.reactor.advance(20)
            proto.dataReceived(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
            self.answer()
        self.assertFalse(t.disconnecting)
        self.reactor.advance(31)
        self.assertTrue(t.disconnecting)

    def test_no_idle_timeout_while_a_request_is_handled(self) -> None:
        proto, t = self._connect(idle=5)
        proto.dataReceived(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        self.reactor.advance(12)  # the upstream takes 12 s (its timeout is 15 s)
        self.assertFalse(t.disconnecting)
        self.answer()
        self.assertIn(b"200 OK", t.value())
        self.reactor.advance(5.5)
        self.assertTrue(t.disconnecting)
