"""The engine in memory (issue 13, point 6): the server protocol and the
upstream pool over StringTransports, time from a MemoryReactorClock, the
pool connecting through the clock's ``connectTCP``. No sockets, no plugins;
the routing is one catch-all route to one upstream.

twisted.trial TestCases, so both ``pytest`` and ``python -m twisted.trial``
run them (trial with ``PYTHONPATH=tests``, for ``support``).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from twistgw.config.loader import load_text
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.engine.server import MAX_PIPELINE, Gateway, GatewayFactory

from support.memory import MemoryUpstreams, memory_config

CONFIG = memory_config("""\
    - matchers: [{prefix: /local}]
      directResponseAction: {status: 200, body: "local\\n"}
    - matchers: [{prefix: /}]
      routeAction: {single: {upstream: {name: up, namespace: default}}}
""")

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class EngineTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        host = PluginHost.create(load_entry_points=False)
        self.gateway = Gateway(self.reactor, host, access_log=False)
        self.gateway.snapshot = build_snapshot(load_text(CONFIG), host)
        self.factory = GatewayFactory(self.gateway, timeout=60, head_timeout=10)
        self.upstreams = MemoryUpstreams(self.reactor)
        self.proto, self.t = self.client()

    def client(self) -> tuple[Any, StringTransport]:
        proto = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 8080))
        t = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.7", 5555))
        proto.makeConnection(t)
        return proto, t

    def upstream(self, i: int = -1) -> tuple[Any, StringTransport]:
        """The i-th upstream connection the pool asked for, connected."""
        return self.upstreams[i]

    # -- framing --------------------------------------------------------------

    def test_chunked_request_body_is_reframed_not_passed_raw(self) -> None:
        self.proto.dataReceived(b"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                                b"3;ext=1\r\nabc\r\n")
        p, t = self.upstream()
        self.proto.dataReceived(b"02\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n")
        sent = t.value()
        head, _, body = sent.partition(b"\r\n\r\n")
        self.assertIn(b"\r\nTransfer-Encoding: chunked", head)
        self.assertEqual(body, b"3\r\nabc\r\n2\r\nde\r\n0\r\nx-trailer: t\r\n\r\n")  # no extension; the trailer passes
        p.dataReceived(OK)
        self.assertTrue(self.t.value().endswith(b"ok"))

    def test_chunked_response_is_reframed(self) -> None:
        self.proto.dataReceived(b"GET /up HTTP/1.1\r\nHost: a\r\n\r\n")
        p, _ = self.upstream()
        p.dataReceived(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n")
        p.dataReceived(b"0\r\nX-T: 1\r\n\r\n")
        out = self.t.value()
        self.assertIn(b"Transfer-Encoding: chunked\r\n", out)
        self.assertTrue(out.endswith(b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), out)
        self.assertNotIn(b"x=y", out)
        self.assertNotIn(b"X-T", out)

    def test_http10_client_gets_a_close_delimited_body(self) -> None:
        self.proto.dataReceived(b"GET /up HTTP/1.0\r\nHost: a\r\n\r\n")
        p, _ = self.upstream()
        p.dataReceived(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        out = self.t.value()
        self.assertNotIn(b"chunked", out.lower())
        self.assertTrue(out.endswith(b"\r\n\r\nhello"), out)
        self.assertTrue(self.t.disconnecting)

    def test_head_response_keeps_its_length_and_sends_no_body(self) -> None:
        self.proto.dataReceived(b"HEAD /up HTTP/1.1\r\nHost: a\r\n\r\n")
        p, t = self.upstream()
        p.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n")
        out = self.t.value()
        self.assertTrue(out.endswith(b"Content-Length: 1234\r\n\r\n"), out)
        self.assertFalse(self.t.disconnecting)
        # the upstream connection is reused for the next request
        self.t.clear()
        t.clear()
        self.proto.dataReceived(b"GET /again HTTP/1.1\r\nHost: a\r\n\r\n")
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.assertTrue(t.value().startswith(b"GET /again "))

    def test_interim_responses_are_not_relayed(self) -> None:
        self.proto.dataReceived(b"GET /up HTTP/1.1\r\nHost: a\r\n\r\n")
        p, _ = self.upstream()
        p.dataReceived(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK)
        out = self.t.value()
        self.assertTrue(out.startswith(b"HTTP/1.1 200 OK\r\n"), out)
        self.assertNotIn(b"Link", out)

    # -- Expect: 100-continue -----------------------------------------------------

    def test_continue_is_sent_after_the_plan_forwards(self) -> None:
        self.proto.dataReceived(b"PUT /up HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
        self.assertEqual(self.t.value(), b"HTTP/1.1 100 Continue\r\n\r\n")
        p, t = self.upstream()
        self.assertNotIn(b"Expect", t.value())
        self.proto.dataReceived(b"abc")
        self.assertTrue(t.value().endswith(b"\r\n\r\nabc"))

    # -- pooling and retries --------------------------------------------------------

    def _reuse(self, method: bytes, body: bytes = b"") -> tuple[Any, StringTransport]:
        self.proto.dataReceived(b"GET /one HTTP/1.1\r\nHost: a\r\n\r\n")
        p, t = self.upstream()
        p.dataReceived(OK)
        self.t.clear()
        length = b"Content-Length: %d\r\n" % len(body) if body else b""
        self.proto.dataReceived(b"%s /two HTTP/1.1\r\nHost: a\r\n%s\r\n%s" % (method, length, body))
        self.assertEqual(len(self.reactor.tcpClients), 1)  # the pooled connection took it
        # ... and the upstream had closed it meanwhile: it dies before answering
        p.connectionLost(Failure(ConnectionDone()))
        return p, t

    def test_stale_pooled_connection_is_retried_once_for_get(self) -> None:
        self._reuse(b"GET")
        self.assertEqual(len(self.reactor.tcpClients), 2)
        p2, t2 = self.upstream()
        self.assertTrue(t2.value().startswith(b"GET /two "))
        p2.dataReceived(OK)
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 200 "), self.t.value())

    def test_stale_pooled_connection_is_not_retried_for_post(self) -> None:
        self._reuse(b"POST", b"x")
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 503 "), self.t.value())

    def test_a_retried_request_is_not_retried_twice(self) -> None:
        self._reuse(b"GET")
        p2, _ = self.upstream()
        p2.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(len(self.reactor.tcpClients), 2)
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 503 "), self.t.value())

    def test_client_disconnect_aborts_the_upstream_request(self) -> None:
        self.proto.dataReceived(b"GET /up HTTP/1.1\r\nHost: a\r\n\r\n")
        p, t = self.upstream()
        self.proto.connectionLost(Failure(ConnectionLost()))
        self.assertTrue(t.disconnecting)
        self.assertEqual(self.gateway.forwarder.idle.get(("127.0.0.1", 9), []), [])
        self.assertEqual(self.gateway.inflight, 0)

    # -- back-pressure -----------------------------------------------------------------

    def test_a_client_that_does_not_read_pauses_the_upstream(self) -> None:
        self.proto.dataReceived(b"GET /up HTTP/1.1\r\nHost: a\r\n\r\n")
        p, t = self.upstream()
        p.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345")
        self.proto.pauseProducing()  # the client's transport buffer is full
        self.assertEqual(t.producerState, "paused")
        self.assertEqual(self.t.producerState, "paused")  # and it is not read either
        self.proto.resumeProducing()
        self.assertEqual(t.producerState, "producing")
        self.assertEqual(self.t.producerState, "producing")

    def test_an_upstream_that_does_not_read_pauses_the_client(self) -> None:
        self.proto.dataReceived(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nabc")
        p, t = self.upstream()
        p.pauseProducing()  # the upstream transport's buffer is full
        self.assertEqual(self.t.producerState, "paused")
        p.resumeProducing()
        self.assertEqual(self.t.producerState, "producing")

    def test_a_body_waiting_for_a_connection_is_bounded(self) -> None:
        self.proto.dataReceived(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\n")
        self.proto.dataReceived(b"x" * 70000)  # not connected yet: buffered, then paused
        self.assertEqual(self.t.producerState, "paused")
        p, t = self.upstream()
        self.assertEqual(self.t.producerState, "producing")
        self.assertTrue(t.value().endswith(b"x" * 70000))

    def test_pipelined_local_answers_stop_while_the_client_does_not_read(self) -> None:
        one = b"GET /local HTTP/1.1\r\nHost: a\r\n\r\n"
        self.proto.dataReceived(one)
        self.proto.pauseProducing()  # the client stopped reading our answers
        self.t.clear()
        self.proto.dataReceived(one * 10)
        self.assertEqual(self.t.value(), b"")  # queued, not answered into a full buffer
        self.assertEqual(self.t.producerState, "paused")
        self.proto.resumeProducing()
        self.assertEqual(self.t.value().count(b"local\n"), 10)

    def test_pipeline_depth_is_bounded(self) -> None:
        one = b"GET /up HTTP/1.1\r\nHost: a\r\n\r\n"
        self.proto.dataReceived(one * (MAX_PIPELINE + 50))
        self.assertLessEqual(len(self.proto.queue), MAX_PIPELINE)
        for _ in range(MAX_PIPELINE + 1):
            p, t = self.upstream(0)
            if self.t.disconnecting:
                break
            p.dataReceived(OK)
        out = self.t.value()
        self.assertEqual(out.count(b"HTTP/1.1 200 "), MAX_PIPELINE + 1)  # the current one and the queue
        self.assertTrue(self.t.disconnecting)

    # -- timers --------------------------------------------------------------------------

    def test_no_reactor_call_per_keep_alive_request(self) -> None:
        made: list[float] = []
        real = self.reactor.callLater

        def counting(delay: float, *a: Any, **kw: Any) -> Any:
            made.append(delay)
            return real(delay, *a, **kw)

        self.proto.callLater = counting
        for _ in range(20):
            self.proto.dataReceived(b"GET /local HTTP/1.1\r\nHost: a\r\n\r\n")
            self.reactor.advance(0.1)
        self.assertEqual(self.t.value().count(b"local\n"), 20)
        self.assertLessEqual(len(made), 2, made)

    def test_a_queued_request_reads_the_rest_of_its_body_when_its_turn_comes(self) -> None:
        # Found by the property test: a pipelined POST whose body was cut
        # mid-way waited for bytes the paused connection never read.
        self.proto.dataReceived(b"GET /one HTTP/1.1\r\nHost: a\r\n\r\n"
                                b"POST /two HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nab")
        self.assertEqual(self.t.producerState, "paused")
        p, t = self.upstream()
        t.clear()
        p.dataReceived(OK)  # /one answered: /two's turn, and its body is read on
        self.assertEqual(self.t.producerState, "producing")
        self.proto.dataReceived(b"cd")
        self.assertTrue(t.value().startswith(b"POST /two "))
        self.assertTrue(t.value().endswith(b"\r\n\r\nabcd"), t.value())
