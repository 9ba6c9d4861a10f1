"""Reading the start of a request body before the chain decides
(``RequestContext.read_body``, ``engine/body.py``'s ``read_prefix``), in
memory: a test plugin reads up to a bound and decides on what it saw; the
upstream must then receive every byte of the body, exactly once, re-framed
as usual. Bodies below, at and above the bound, ``Content-Length`` and
chunked, ``Expect: 100-continue``, a body far past the engine's 64 KiB
buffer, and a client that goes away while the plugin waits."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from twistgw import sdk
from twistgw.api.types import BodyPrefix, BytesBody, RequestContext
from twistgw.config.loader import load_text
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.engine.server import Gateway, GatewayFactory

from support.memory import MemoryUpstreams, memory_config

CONFIG = memory_config("""\
    - matchers: [{prefix: /partial}]
      routeAction: {single: {upstream: {name: up, namespace: default}}}
      options: {bodygate: {max: 100000, partial: true}}
    - matchers: [{prefix: /gated}]
      routeAction: {single: {upstream: {name: up, namespace: default}}}
      options: {bodygate: {max: 10, partial: false}}
    - matchers: [{prefix: /}]
      routeAction: {single: {upstream: {name: up, namespace: default}}}
""")

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class _BodyGate:
    """Reads ``max`` bytes of the body; refuses 413 past it (unless
    ``partial``), 403 when the part it saw says ``deny``."""

    def __init__(self) -> None:
        self.seen: list[BodyPrefix] = []

    @sdk.hookimpl
    def twistgw_authenticate(self, ctx: RequestContext, options: Any) -> Deferred[sdk.Decision]:
        def decide(prefix: BodyPrefix) -> sdk.Decision:
            self.seen.append(prefix)
            if not prefix.complete and not options["partial"]:
                return sdk.Deny(413, b"too large")
            return sdk.Deny(403, b"no") if b"deny" in prefix.data else sdk.Allow()

        return ctx.read_body(options["max"], options["partial"]).addCallback(decide)


class BodyPrefixTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.gate = _BodyGate()
        host = PluginHost.create(extra=[("bodygate", self.gate)], load_entry_points=False)
        gateway = Gateway(self.reactor, host, access_log=False)
        gateway.snapshot = build_snapshot(load_text(CONFIG), host)
        self.factory = GatewayFactory(gateway, timeout=60, head_timeout=10)
        self.upstreams = MemoryUpstreams(self.reactor)
        self.proto = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 8080))
        self.t = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.7", 5555))
        self.proto.makeConnection(self.t)

    def forwarded_body(self) -> bytes:
        self.assertEqual(len(self.upstreams), 1)
        _, t = self.upstreams[0]
        return t.value().partition(b"\r\n\r\n")[2]

    def test_below_the_bound_the_chain_waits_for_the_whole_body(self) -> None:
        self.proto.dataReceived(b"POST /gated HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n\r\nabc")
        self.assertEqual((len(self.upstreams), self.gate.seen), (0, []))  # still deciding
        self.proto.dataReceived(b"def")
        self.assertEqual(self.gate.seen, [BodyPrefix(b"abcdef", True)])
        self.assertEqual(self.forwarded_body(), b"abcdef")  # the same bytes, once

    def test_at_the_bound_is_complete(self) -> None:
        self.proto.dataReceived(b"POST /gated HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789")
        self.assertEqual(self.gate.seen, [BodyPrefix(b"0123456789", True)])
        self.assertEqual(self.forwarded_body(), b"0123456789")

    def test_a_declared_length_over_the_bound_is_refused_unread(self) -> None:
        self.proto.dataReceived(b"POST /gated HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n")
        self.assertEqual(self.gate.seen, [BodyPrefix(b"", False)])
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 413 "))
        self.assertIn(b"Connection: close", self.t.value())
        self.assertEqual(len(self.upstreams), 0)

    def test_a_chunked_body_over_the_bound_is_refused_once_past_it(self) -> None:
        self.proto.dataReceived(b"POST /gated HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                                b"8\r\n01234567\r\n")
        self.assertEqual(self.gate.seen, [])
        self.proto.dataReceived(b"3\r\n89a\r\n")
        self.assertEqual(self.gate.seen, [BodyPrefix(b"0123456789", False)])
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 413 "))
        self.assertEqual(len(self.upstreams), 0)

    def test_a_chunked_body_below_the_bound_is_forwarded_whole(self) -> None:
        self.proto.dataReceived(b"POST /gated HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                                b"3\r\nabc\r\n2\r\nde\r\n")
        self.assertEqual(self.gate.seen, [])
        self.proto.dataReceived(b"0\r\n\r\n")
        self.assertEqual(self.gate.seen, [BodyPrefix(b"abcde", True)])
        self.assertEqual(self.forwarded_body(), b"5\r\nabcde\r\n0\r\n\r\n")

    def test_a_pooled_connection_taking_the_body_at_once_ends_it_once(self) -> None:
        self.proto.dataReceived(b"GET /other HTTP/1.1\r\nHost: a\r\n\r\n")
        p, t = self.upstreams[0]
        p.dataReceived(OK)  # answered: the connection goes back to the pool
        t.clear()
        self.proto.dataReceived(b"POST /gated HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                                b"3\r\nabc\r\n")
        self.proto.dataReceived(b"0\r\n\r\n")  # the reader answers; the chain forwards on the pooled one
        self.assertEqual(len(self.upstreams), 1)
        self.assertTrue(t.value().startswith(b"POST /gated HTTP/1.1\r\n"))
        self.assertEqual(t.value().partition(b"\r\n\r\n")[2], b"3\r\nabc\r\n0\r\n\r\n")
        p.dataReceived(OK)
        self.assertEqual(self.t.value().count(b"HTTP/1.1 200 OK"), 2)

    def test_what_the_plugin_saw_decides(self) -> None:
        self.proto.dataReceived(b"POST /gated HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\ndeny")
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 403 "))
        self.assertEqual(len(self.upstreams), 0)

    def test_partial_past_the_engine_buffer_forwards_every_byte(self) -> None:
        body = bytes(range(256)) * 1000  # 256,000 bytes: past 64 KiB and past the 100,000 bound
        self.proto.dataReceived(b"POST /partial HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 16384):
            self.proto.dataReceived(body[i:i + 16384])
            if i < 90000:  # below the bound: never paused, still deciding
                self.assertEqual((self.gate.seen, self.t.producerState), ([], "producing"))
        self.assertEqual(self.gate.seen, [BodyPrefix(body[:100000], False)])
        p, t = self.upstreams[0]
        p.dataReceived(OK)
        self.assertEqual(t.value().partition(b"\r\n\r\n")[2], body)

    def test_expect_continue_is_answered_when_the_body_is_wanted(self) -> None:
        self.proto.dataReceived(b"POST /gated HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
                                b"Expect: 100-continue\r\n\r\n")
        self.assertEqual(self.t.value(), b"HTTP/1.1 100 Continue\r\n\r\n")
        self.proto.dataReceived(b"abc")
        self.assertEqual(self.forwarded_body(), b"abc")
        self.assertEqual(self.t.value().count(b"100 Continue"), 1)

    def test_expect_continue_over_the_bound_is_refused_without_inviting(self) -> None:
        self.proto.dataReceived(b"POST /gated HTTP/1.1\r\nHost: a\r\nContent-Length: 99\r\n"
                                b"Expect: 100-continue\r\n\r\n")
        self.assertTrue(self.t.value().startswith(b"HTTP/1.1 413 "))

    def test_a_request_without_a_body_reads_nothing(self) -> None:
        self.proto.dataReceived(b"GET /gated HTTP/1.1\r\nHost: a\r\n\r\n")
        self.assertEqual(self.gate.seen, [BodyPrefix(b"", True)])
        self.assertEqual(len(self.upstreams), 1)

    def test_a_route_without_the_plugin_streams_as_always(self) -> None:
        self.proto.dataReceived(b"POST /other HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n\r\nabc")
        self.assertEqual(len(self.upstreams), 1)  # forwarded before the body is complete
        self.proto.dataReceived(b"def")
        self.assertEqual(self.forwarded_body(), b"abcdef")
        self.assertEqual(self.gate.seen, [])

    def test_the_client_going_away_answers_the_waiting_reader(self) -> None:
        self.proto.dataReceived(b"POST /gated HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n\r\nab")
        self.proto.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.gate.seen, [BodyPrefix(b"ab", False)])
        self.assertEqual(len(self.upstreams), 0)


class BytesBodyTests(SynchronousTestCase):
    def test_bytes_body_and_no_body(self) -> None:
        ctx = RequestContext("POST", "/")
        self.assertEqual(self.successResultOf(ctx.read_body(4)), BodyPrefix(b"", True))
        ctx.body_source = BytesBody(b"abcdef")
        self.assertEqual(self.successResultOf(ctx.read_body(6)), BodyPrefix(b"abcdef", True))
        self.assertEqual(self.successResultOf(ctx.read_body(4)), BodyPrefix(b"abcd", False))
        self.assertEqual(self.successResultOf(ctx.read_body(4, partial=False)), BodyPrefix(b"", False))
