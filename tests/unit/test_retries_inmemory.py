"""``retries`` in the engine, in memory (a MemoryReactorClock, upstream
connections on StringTransports): the backoff between tries, a client that
leaves while the gateway waits, the route timeout over every try, a try's
own timeout, and a body that grows past the replay bound meanwhile."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from twistgw.config.loader import load_text
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.engine.server import Gateway, GatewayFactory

from support.memory import MemoryUpstreams

CONFIG = """
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: up, namespace: default}
spec:
  static: {hosts: [{addr: 127.0.0.1, port: 9}]}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: mem, namespace: default}
spec:
  virtualHost:
    domains: ["*"]
    routes:
    - matchers: [{prefix: /}]
      options:
        timeout: 1s
        retries: {retryOn: "5xx", numRetries: 5, perTryTimeout: 300ms,
                  retryBackOff: {baseInterval: 100ms, maxInterval: 100ms}}
      routeAction: {single: {upstream: {name: up}}}
"""

FAILED = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 6\r\n\r\nfailed"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class RetryTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        host = PluginHost.create(load_entry_points=False)
        gateway = Gateway(self.reactor, host, access_log=False)
        gateway.snapshot = build_snapshot(load_text(CONFIG), host)
        self.factory = GatewayFactory(gateway, timeout=60, head_timeout=10)
        self.upstreams = MemoryUpstreams(self.reactor)
        self.proto = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 8080))
        self.t = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.7", 5555))
        self.proto.makeConnection(self.t)

    def answer(self, i: int, data: bytes) -> Any:
        conn, t = self.upstreams[i]
        conn.dataReceived(data)
        return t

    def test_a_503_is_tried_again_after_the_backoff_and_the_200_relayed(self) -> None:
        self.proto.dataReceived(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        first = self.answer(0, FAILED)
        self.assertTrue(first.disconnecting or first.disconnected)  # dropped with its answer
        self.assertEqual(len(self.upstreams), 1)  # not before the backoff
        self.reactor.advance(0.1)
        self.assertEqual(len(self.upstreams), 2)
        self.answer(1, OK)
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 200 OK"), self.t.value())
        self.assertNotIn(b"failed", self.t.value())

    def test_a_client_that_leaves_during_the_backoff_ends_the_retries(self) -> None:
        self.proto.dataReceived(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        self.answer(0, FAILED)
        self.proto.connectionLost(None)
        self.reactor.advance(1.0)
        self.assertEqual(len(self.upstreams), 1)

    def test_the_route_timeout_bounds_every_try(self) -> None:
        self.proto.dataReceived(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(20):
            self.reactor.advance(0.05)
            len(self.upstreams)  # connect what the pool asked for
        # 300 ms per try, up to 100 ms between: three tries within the second
        self.assertEqual(len(self.upstreams), 3)
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 504"), self.t.value())
        self.assertIn(b"upstream request timeout", self.t.value())

    def test_a_body_that_grows_past_the_bound_while_waiting_is_not_replayed(self) -> None:
        size = 2 * 1024 * 1024
        self.proto.dataReceived(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\nstart" % size)
        self.answer(0, FAILED)  # an early answer; the client is still sending
        self.proto.dataReceived(b"x" * (size - 5))  # past the 1 MiB kept for a retry
        self.reactor.advance(0.1)
        self.assertEqual(len(self.upstreams), 1)  # never sent again with a part missing
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 503"), self.t.value())

    def test_a_small_body_is_sent_again_whole(self) -> None:
        self.proto.dataReceived(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        self.answer(0, FAILED)
        self.reactor.advance(0.1)
        _, second = self.upstreams[1]
        self.assertTrue(second.value().endswith(b"\r\n\r\nhello"), second.value())


class PooledTryTests(SynchronousTestCase):
    """The first try on a pooled connection (the usual case under load):
    its budget and the route's deadline are read from the connection's
    timer, set when the client's request is complete."""

    setUp = RetryTests.setUp
    answer = RetryTests.answer

    def pooled(self) -> Any:
        """A first request answered 200 on upstream connection 0, which goes back to the pool."""
        self.proto.dataReceived(b"GET /warm HTTP/1.1\r\nHost: x\r\n\r\n")
        self.answer(0, OK)
        self.t.clear()
        conn, t = self.upstreams[0]
        t.clear()
        return t

    def test_every_slot_of_a_retrying_request_is_set(self) -> None:
        from twistgw.engine.upstream.request import UpstreamRequest
        from twistgw.engine.upstream.retrying import RetryingRequest

        self.pooled()
        self.proto.dataReceived(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        req = self.upstreams[0][0].req
        self.assertIsInstance(req, RetryingRequest)
        # compiled by mypyc (twistgw/compiled.py), UpstreamRequest lists its attributes in __mypyc_attrs__
        base = UpstreamRequest.__dict__.get("__slots__") or UpstreamRequest.__mypyc_attrs__  # type: ignore[attr-defined]
        assert "pool" in base and "finished" in base
        for name in tuple(base) + RetryingRequest.__slots__:
            getattr(req, name)  # an AttributeError if __init__ missed one

    def test_a_try_on_a_pooled_connection_times_out_and_is_tried_again(self) -> None:
        first = self.pooled()
        self.proto.dataReceived(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertIn(b"GET /a ", first.value())  # sent on the pooled connection
        self.reactor.advance(0.29)
        self.assertEqual(len(self.upstreams), 1)
        self.reactor.advance(0.02)  # perTryTimeout (300 ms): dropped
        self.assertTrue(first.disconnecting or first.disconnected)
        self.reactor.advance(0.1)  # the backoff
        self.assertEqual(len(self.upstreams), 2)
        self.answer(1, OK)
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 200 OK"), self.t.value())

    def test_the_route_timeout_bounds_every_try_from_a_pooled_connection(self) -> None:
        self.pooled()
        self.proto.dataReceived(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(19):
            self.reactor.advance(0.05)
            len(self.upstreams)
        self.assertEqual(self.t.value(), b"")  # 0.95 s: not yet
        for _ in range(2):
            self.reactor.advance(0.05)
            len(self.upstreams)
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 504"), self.t.value())
        self.assertEqual(len(self.upstreams), 3)  # the pooled one, then two new ones

    def test_a_body_is_sent_again_whole_after_a_pooled_try(self) -> None:
        self.pooled()
        self.proto.dataReceived(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        self.answer(0, FAILED)
        self.reactor.advance(0.1)
        _, second = self.upstreams[1]
        self.assertTrue(second.value().endswith(b"\r\n\r\nhello"), second.value())
        self.answer(1, OK)
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 200 OK"), self.t.value())
