"""HTTP/2 towards clients, in memory (issue 33): an ``h2`` client over a
StringTransport to the gateway's factory, the upstreams in memory
(:mod:`support.h2memory`). One request model inside: an HTTP/2 stream is
routed, refused and forwarded as an HTTP/1.1 request is, and the upstream
gets HTTP/1.1. Flow control both ways; gRPC's form of the gateway's own
answers (also to grpc-web over HTTP/1.1); 100-continue; trailers both ways.

Runs under pytest and trial (``tests/inmemory.py``).
"""

from __future__ import annotations

from h2.events import InformationalResponseReceived, RemoteSettingsChanged
from h2.settings import SettingCodes
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from twistgw.engine.states import ConnState, Phase

from support.h2memory import H2Memory
from support.memory import memory_config
from support.plugins import DenyAll
from support.trial import TestCase

CONFIG = memory_config("""\
    - matchers: [{prefix: /local}]
      directResponseAction: {status: 200, body: "local"}
    - matchers: [{prefix: /protected}]
      options: {denyall: {}}
      routeAction: {single: {upstream: {name: up, namespace: default}}}
    - matchers: [{prefix: /a}]
      routeAction: {single: {upstream: {name: up, namespace: default}}}
""")
PLUGINS = [("denyall", DenyAll())]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
GRPC = [(b"content-type", b"application/grpc"), (b"te", b"trailers")]


def h2(**kwargs: object) -> H2Memory:
    return H2Memory(CONFIG, PLUGINS, **kwargs)  # type: ignore[arg-type]


def stream_of(m: H2Memory, sid: int):  # the gateway's H2Stream
    (conn,) = m.factory.connections
    return conn.streams[sid]


class RequestTests(TestCase):
    def test_the_preface_makes_an_http2_connection_with_the_gateways_settings(self):
        m = h2()
        assert m.proto.state is ConnState.HTTP2
        (settings,) = [e for e in m.events if isinstance(e, RemoteSettingsChanged)]
        got = {code: s.new_value for code, s in settings.changed_settings.items()}
        assert got[SettingCodes.MAX_CONCURRENT_STREAMS] == 100
        assert got[SettingCodes.INITIAL_WINDOW_SIZE] == 65535
        assert got[SettingCodes.MAX_FRAME_SIZE] == 16384
        assert got[SettingCodes.MAX_HEADER_LIST_SIZE] == 65536
        # the connection window: 1 MiB (Envoy's edge recommendation)
        assert m.client.outbound_flow_control_window == 1024 * 1024

    def test_a_get_is_forwarded_as_http11_with_authority_as_host(self):
        m = h2()
        sid = m.request(b"/a/b?q=1", headers=[(b"cookie", b"a=1"), (b"cookie", b"b=2"), (b"x-thing", b"v")])
        up, t = m.upstream(0)
        sent = t.value()
        assert sent.startswith(b"GET /a/b?q=1 HTTP/1.1\r\n")
        assert b"\r\nHost: gw.test\r\n" in sent
        assert b"\r\nCookie: a=1; b=2\r\n" in sent  # RFC 9113 §8.2.3: one field for HTTP/1.1
        assert b"\r\nX-Thing: v\r\n" in sent and b"X-Forwarded-Proto: http" in sent
        assert b":path" not in sent and b":authority" not in sent
        m.answer(0, OK)
        status, headers, body, _, ended = m.response(sid)
        assert (status, body, ended) == (200, b"ok", True)
        assert headers[b"content-type"] == b"text/plain" and headers[b"content-length"] == b"2"
        (ex,) = m.gateway.recorded
        assert ex.protocol == b"HTTP/2" and ex.status == 200 and ex.phase is Phase.DONE

    def test_connection_specific_response_fields_never_reach_the_client(self):
        m = h2()
        sid = m.request(b"/a")
        m.answer(0, b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Drop\r\nKeep-Alive: timeout=5\r\nX-Drop: 1\r\n"
                    b"Transfer-Encoding: chunked\r\nX-Keep: yes\r\n\r\n2\r\nok\r\n0\r\n\r\n")
        status, headers, body, _, ended = m.response(sid)
        assert (status, body, ended) == (200, b"ok", True)
        assert headers[b"x-keep"] == b"yes"
        for name in (b"connection", b"keep-alive", b"transfer-encoding", b"x-drop"):
            assert name not in headers

    def test_head_keeps_the_length_and_sends_no_body(self):
        m = h2()
        sid = m.request(b"/a", method=b"HEAD")
        m.answer(0, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
        status, headers, body, _, ended = m.response(sid)
        assert (status, body, ended, headers[b"content-length"]) == (200, b"", True, b"10")

    def test_streams_are_answered_each_on_its_own_and_out_of_order(self):
        m = h2()
        sids = [m.request(b"/a/%d" % i) for i in range(3)]
        assert len(m.upstreams) == 3
        for i in (2, 0, 1):
            m.answer(i, b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d" % i)
        assert [m.response(sid)[2] for sid in sids] == [b"0", b"1", b"2"]

    def test_a_local_route_and_a_refusal_work_as_over_http11(self):
        m = h2()
        local, refused = m.request(b"/local"), m.request(b"/protected")
        assert m.response(local)[:3:2] == (200, b"local")
        status, headers, body, _, _ = m.response(refused)
        assert (status, body, headers[b"www-authenticate"]) == (401, b"go away", b"Basic realm=x")
        assert len(m.upstreams) == 0

    def test_connect_is_answered_501(self):
        m = h2()
        sid = m.client.get_next_available_stream_id()
        m.client.send_headers(sid, [(b":method", b"CONNECT"), (b":authority", b"x:443")])
        m.send()
        assert m.response(sid)[0] == 501

    def test_heads_over_the_http11_limits_are_431_and_414(self):
        m = h2()
        many = m.request(b"/a", headers=[(b"x-h%d" % i, b"v") for i in range(101)])
        big = m.request(b"/a", headers=[(b"x-big", b"v" * 17000)])
        long = m.request(b"/a/" + b"p" * 8200)
        assert [m.response(s)[0] for s in (many, big, long)] == [431, 431, 414]
        assert len(m.upstreams) == 0
        assert m.goaway() is None  # the connection goes on

    def test_the_client_resetting_a_stream_aborts_its_upstream_request(self):
        m = h2()
        sid = m.request(b"/a")
        other = m.request(b"/a/2")
        up, t = m.upstream(0)
        m.client.reset_stream(sid)
        m.send()
        assert t.disconnecting  # the upstream request was given up
        m.answer(1, OK)
        assert m.response(other)[:3:2] == (200, b"ok")
        aborted = [ex for ex in m.gateway.recorded if ex.phase is Phase.ABORTED]
        assert len(aborted) == 1 and aborted[0].stream_id == sid

    def test_an_upstream_breaking_off_resets_only_its_stream(self):
        m = h2()
        sid, other = m.request(b"/a"), m.request(b"/a/2")
        m.answer(0, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234")
        m.upstream(0)[0].connectionLost(Failure(ConnectionDone()))
        m.receive()
        assert m.reset_of(sid) == 2  # INTERNAL_ERROR
        m.answer(1, OK)
        assert m.response(other)[:3:2] == (200, b"ok") and m.goaway() is None

    def test_100_continue_goes_out_only_once_the_chain_admitted_the_request(self):
        m = h2()
        admitted = m.request(b"/a", method=b"POST", headers=[(b"expect", b"100-continue")], end=False)
        refused = m.request(b"/protected", method=b"POST", headers=[(b"expect", b"100-continue")], end=False)
        infos = [e.stream_id for e in m.events if isinstance(e, InformationalResponseReceived)]
        assert infos == [admitted]
        assert m.response(refused)[0] == 401


class BodyAndFlowTests(TestCase):
    def test_a_request_body_streams_upstream_chunked_without_content_length(self):
        m = h2()
        sid = m.request(b"/a", method=b"POST", body=b"hello", end=False)
        up, t = m.upstream(0)
        assert b"Transfer-Encoding: chunked\r\n" in t.value()
        m.client.send_data(sid, b" world", end_stream=True)
        m.send()
        assert t.value().endswith(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")

    def test_a_content_length_body_is_forwarded_with_its_length(self):
        m = h2()
        m.request(b"/a", method=b"POST", headers=[(b"content-length", b"5")], body=b"hello")
        sent = m.upstream(0)[1].value()
        assert b"Content-Length: 5\r\n" in sent and sent.endswith(b"\r\n\r\nhello")

    def test_request_trailers_end_the_body(self):
        m = h2()
        sid = m.request(b"/a", method=b"POST", body=b"x", end=False)
        st = stream_of(m, sid)
        m.client.send_headers(sid, [(b"x-checksum", b"abc")], end_stream=True)
        m.send()
        assert st.body.complete and st.body.trailers == ((b"x-checksum", b"abc"),)
        # an HTTP/1.1 upstream gets them in the last chunk of the chunked body
        assert m.upstream(0)[1].value().endswith(b"1\r\nx\r\n0\r\nx-checksum: abc\r\n\r\n")

    def test_an_upstream_that_does_not_read_withholds_the_clients_window(self):
        m = h2()
        sid = m.request(b"/a", method=b"POST", end=False)
        up, t = m.upstream(0)
        up.pauseProducing()  # as Twisted does when the upstream's socket buffer is full
        sent = 0
        while m.client.local_flow_control_window(sid) > 0:
            n = min(16384, m.client.local_flow_control_window(sid))
            m.client.send_data(sid, b"x" * n)
            sent += n
            m.send()
            assert sent <= 65535, "the window was handed back while the upstream did not read"
        assert sent == 65535  # the stream's whole initial window, and not a byte more
        up.resumeProducing()
        m.receive()
        assert m.client.local_flow_control_window(sid) > 0  # handed back once the upstream reads

    def test_a_slow_client_reader_pauses_the_upstream(self):
        m = h2(client_settings={SettingCodes.INITIAL_WINDOW_SIZE: 0})
        sid = m.request(b"/a")
        up, t = m.upstream(0)
        m.answer(0, b"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n")
        chunk = b"y" * 16384
        for _ in range(5):
            m.answer(0, chunk)
        assert t.producerState == "paused"  # 80 KiB queued for a client that opened no window
        st = stream_of(m, sid)
        assert st.queued <= 5 * 16384
        m.client.increment_flow_control_window(200000, stream_id=sid)
        m.send()  # the connection's window (65535) still holds 16 KiB back: under the bound
        assert t.producerState == "producing"
        assert len(m.response(sid)[2]) == 65535
        m.client.increment_flow_control_window(200000)
        m.send()
        assert len(m.response(sid)[2]) == 5 * 16384

    def test_an_upstream_paused_by_the_read_that_ended_its_response_is_pooled_reading(self):
        # found by tests/http2/test_parity.py: the read that completes the
        # response also pushes the stream's queue past its bound; the stream
        # pauses the upstream and, its exchange over, never resumes it
        m = h2(client_settings={SettingCodes.INITIAL_WINDOW_SIZE: 0})
        first = m.request(b"/a")
        up, t = m.upstream(0)
        m.answer(0, b"HTTP/1.1 200 OK\r\nContent-Length: 66536\r\n\r\n")
        for _ in range(4):
            m.answer(0, b"y" * 16384)  # 64 KiB queued: at the bound, not past it
        assert t.producerState == "producing"
        m.answer(0, b"y" * 1000)  # past the bound, and the end of the response
        assert stream_of(m, first).queued == 66536  # all of it held for a client that opened no window
        assert t.producerState == "producing"  # back in the pool, reading
        second = m.request(b"/a/next")
        assert len(m.upstreams) == 1  # the pooled connection took it
        m.answer(0, OK)
        assert m.response(second)[0] == 200  # a HEADERS frame needs no window

    def test_response_trailers_go_out_as_the_last_headers_frame(self):
        m = h2()
        sid = m.request(b"/a", headers=GRPC, method=b"POST", body=b"\0\0\0\0\0")
        st = stream_of(m, sid)
        # what an upstream with trailers (HTTP/2, or chunked HTTP/1.1) reports across the seam
        st.send_head(200, b"", [b"Content-Type: application/grpc\r\n"], None, hold=True)
        st.write(b"\0\0\0\0\0")
        st.finish([(b"grpc-status", b"0"), (b"grpc-message", b"")])
        m.receive()
        status, headers, body, trailers, ended = m.response(sid)
        assert (status, body, ended) == (200, b"\0\0\0\0\0", True)
        assert trailers == {b"grpc-status": b"0", b"grpc-message": b""}


class GrpcAnswerTests(TestCase):
    """The gateway's own answers to a gRPC request: trailers-only, HTTP 200,
    grpc-status mapped as Envoy maps it (one place: core/grpc.py)."""

    def grpc(self, path: bytes, upstream: bytes | None = None, lost: bool = False, wait: float = 0.0):
        m = h2()
        sid = m.request(path, method=b"POST", headers=GRPC, body=b"\0\0\0\0\0")
        if upstream is not None:
            m.answer(0, upstream)
        if lost:
            m.upstream(0)[0].connectionLost(Failure(ConnectionDone()))
            m.receive()
        if wait:
            m.reactor.advance(wait)
            m.receive()
        return m, sid

    def assert_trailers_only(self, m: H2Memory, sid: int, grpc_status: bytes) -> dict[bytes, bytes]:
        status, headers, body, trailers, ended = m.response(sid)
        assert (status, body, trailers, ended) == (200, b"", {}, True)
        assert headers[b"content-type"] == b"application/grpc"
        assert headers[b"grpc-status"] == grpc_status, headers
        return headers

    def test_a_plugin_refusal_401_is_unauthenticated_with_its_message_and_headers(self):
        m, sid = self.grpc(b"/protected")
        headers = self.assert_trailers_only(m, sid, b"16")
        assert headers[b"grpc-message"] == b"go away" and headers[b"www-authenticate"] == b"Basic realm=x"
        (ex,) = m.gateway.recorded
        assert ex.status == 200  # what the client got

    def test_no_route_is_unimplemented(self):
        self.assert_trailers_only(*self.grpc(b"/nowhere"), b"12")

    def test_an_upstream_reset_before_the_head_is_unavailable(self):
        self.assert_trailers_only(*self.grpc(b"/a", lost=True), b"14")

    def test_an_upstream_timeout_is_unavailable(self):
        self.assert_trailers_only(*self.grpc(b"/a", wait=6), b"14")

    def test_a_malformed_upstream_answer_502_is_unavailable(self):
        self.assert_trailers_only(*self.grpc(b"/a", upstream=b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"),
                                  b"14")

    def test_a_non_grpc_request_gets_the_plain_answer(self):
        m = h2()
        sid = m.request(b"/protected")
        assert m.response(sid)[0] == 401

    def test_grpc_web_over_http11_gets_the_same_answer_in_headers(self):
        m = h2(preface=False)  # the same gateway, spoken to in HTTP/1.1
        proto = m.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 8080))
        t = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.8", 5555))
        proto.makeConnection(t)
        proto.dataReceived(b"POST /protected HTTP/1.1\r\nHost: gw.test\r\nContent-Type: application/grpc-web+proto\r\n"
                           b"Content-Length: 5\r\n\r\n\0\0\0\0\0")
        head = t.value().split(b"\r\n\r\n")[0].lower()
        assert head.startswith(b"http/1.1 200 ")
        assert b"\r\ncontent-type: application/grpc-web+proto" in head
        assert b"\r\ngrpc-status: 16" in head and b"\r\ngrpc-message: go away" in head
        assert b"\r\ncontent-length: 0" in head


class _Replaced:
    """A TLS connection's certificate choice after a reload replaced it."""

    server_name = "gw.test"

    def hosts(self, snapshot: object) -> None:
        return None


class MisdirectedTests(TestCase):
    def test_a_replaced_certificate_gets_421_and_a_goaway(self):
        m = h2(preface=False)
        m.proto.tls = _Replaced()  # as engine/sni.py sets it before the first bytes
        m.send()
        sid = m.request(b"/a")
        assert m.response(sid)[0] == 421
        goaway = m.goaway()
        assert goaway is not None and goaway.error_code == 0 and goaway.last_stream_id == sid
        assert m.t.disconnecting and len(m.upstreams) == 0
