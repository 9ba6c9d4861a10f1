"""HTTP/2's bounds and timers, in memory (issue 33, item 5): what a hostile
client sends (frames built with hyperframe and hpack, never by hand) and
the GOAWAY or RST_STREAM it gets, as RFC 9113 says; the timers (idle, head,
drain, zero-window stall). The same attacks over real sockets, with memory
measured and other clients served meanwhile: tests/http2/test_http2_attacks.py.

Runs under pytest and trial (``tests/inmemory.py``).
"""

from __future__ import annotations

from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hpack import Encoder
from hyperframe.frame import (ContinuationFrame, DataFrame, GoAwayFrame, HeadersFrame, PriorityFrame,
                              RstStreamFrame, WindowUpdateFrame)

from twistgw.config.http2 import Http2Options

from support.h2memory import H2Memory, frames_of, goaway_code
from support.memory import memory_config
from support.trial import TestCase

CONFIG = memory_config("""\
    - matchers: [{prefix: /}]
      routeAction: {single: {upstream: {name: up, namespace: default}}}
""")
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
BASE = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"gw.test"), (b":path", b"/")]


def raw_headers(sid: int, fields: list[tuple[bytes, bytes]], encoder: Encoder | None = None,
                flags: tuple[str, ...] = ("END_HEADERS", "END_STREAM")) -> bytes:
    frame = HeadersFrame(sid, (encoder or Encoder()).encode(fields), flags=set(flags))
    return frame.serialize()


class Raw:
    """A client that sends bytes: the preface and SETTINGS from h2, then
    whatever a test builds; ``got`` is every byte the gateway wrote."""

    def __init__(self, **kwargs: object) -> None:
        self.m = H2Memory(CONFIG, **kwargs)  # type: ignore[arg-type]
        self.got = self.m.t.value()
        self.m.t.clear()
        self.encoder = Encoder()

    def send(self, data: bytes) -> bytes:
        self.m.proto.dataReceived(data)
        out = self.m.t.value()
        self.m.t.clear()
        self.got += out
        return out

    @property
    def closing(self) -> bool:
        return bool(self.m.t.disconnecting)

    def goaway(self) -> int | None:
        return goaway_code(self.got)


class MalformedRequestTests(TestCase):
    """RFC 9113 §8.1.1, §8.2, §8.3: a malformed request ends the connection
    (GOAWAY PROTOCOL_ERROR), Envoy's default; nothing reaches the upstream."""

    def assert_refused(self, fields: list[tuple[bytes, bytes]]) -> None:
        r = Raw()
        r.send(raw_headers(1, fields))
        assert r.goaway() == ErrorCodes.PROTOCOL_ERROR, fields
        assert r.closing and len(r.m.upstreams) == 0

    def test_pseudo_header_abuse(self):
        self.assert_refused(BASE + [(b":path", b"/again")])  # duplicate
        self.assert_refused(BASE + [(b":hidden", b"x")])  # unknown pseudo-header
        self.assert_refused([BASE[0], (b"x-a", b"1"), *BASE[1:]])  # pseudo after a regular field
        self.assert_refused(BASE[1:])  # no :method
        self.assert_refused([*BASE[:3], (b":path", b"")])  # empty :path
        self.assert_refused(BASE + [(b":status", b"200")])  # a response pseudo-header

    def test_connection_specific_fields(self):
        for field in [(b"connection", b"keep-alive"), (b"transfer-encoding", b"chunked"), (b"upgrade", b"h2c"),
                      (b"keep-alive", b"5"), (b"proxy-connection", b"x"), (b"te", b"gzip")]:
            self.assert_refused(BASE + [field])

    def test_names_and_values_h2_refuses(self):
        self.assert_refused(BASE + [(b"X-Upper", b"v")])  # upper case (RFC 9113 §8.2.1)
        self.assert_refused(BASE + [(b"x-a", b"a\r\nInjected: 1")])
        self.assert_refused(BASE + [(b"x-a", b"a\x00b")])
        self.assert_refused(BASE + [(b"host", b"other.test")])  # differs from :authority (§8.3.1)

    def test_with_override_stream_error_only_the_stream_is_reset(self):
        # Gloo's overrideStreamErrorOnInvalidHttpMessage: true (RFC 9113 §8.1.1's stream error)
        r = Raw(options=Http2Options(stream_error_on_invalid=True))
        out = r.send(raw_headers(1, BASE + [(b"connection", b"close")], r.encoder))
        resets = [f for f in frames_of(out) if isinstance(f, RstStreamFrame)]
        assert [(f.stream_id, f.error_code) for f in resets] == [(1, ErrorCodes.PROTOCOL_ERROR)]
        assert r.goaway() is None and not r.closing
        r.send(raw_headers(3, BASE, r.encoder))
        assert len(r.m.upstreams) == 1  # the connection serves on

    def test_te_trailers_is_the_one_te_allowed(self):
        r = Raw()
        r.send(raw_headers(1, BASE + [(b"te", b"trailers")]))
        assert r.goaway() is None and len(r.m.upstreams) == 1

    def test_content_length_disagreeing_with_data_smuggles_nothing(self):
        for length, data in ((b"5", b"hello world"), (b"10", b"hello")):
            r = Raw()
            post = [(b":method", b"POST"), *BASE[1:], (b"content-length", length)]
            r.send(raw_headers(1, post, r.encoder, ("END_HEADERS",)) + DataFrame(1, data, flags={"END_STREAM"}).serialize())
            assert r.goaway() == ErrorCodes.PROTOCOL_ERROR and r.closing
            sent = b"".join(t.value() for _, t in r.m.upstreams)
            assert b"world" not in sent and sent.count(b"HTTP/1.1\r\n") <= 1


class FloodTests(TestCase):
    def test_a_frame_over_max_frame_size_is_refused_from_its_header_alone(self):
        r = Raw()
        header = DataFrame(1, b"x" * 20000).serialize()[:9]  # 20000 bytes announced, none sent
        r.send(header)
        assert r.goaway() == ErrorCodes.FRAME_SIZE_ERROR and r.closing

    def test_the_continuation_flood_ends_at_the_header_list_bound(self):
        r = Raw()
        r.send(raw_headers(1, BASE, flags=()))
        sent = 0
        while not r.closing and sent < 1024 * 1024:
            r.send(ContinuationFrame(1, b"\x00" * 16384).serialize())  # never END_HEADERS
            sent += 16384
        assert r.goaway() == ErrorCodes.ENHANCE_YOUR_CALM
        assert sent <= 64 * 1024 + 16384  # refused once the block passed 64 KiB, not after h2's 64 frames

    def test_an_hpack_bomb_is_refused(self):
        r = Raw()
        encoder = Encoder()
        # one 4 KiB field into the dynamic table, then a block referring to it 40 times
        first = raw_headers(1, BASE + [(b"x-bomb", b"b" * 4000)], encoder)
        block = encoder.encode(BASE + [(b"x-bomb", b"b" * 4000)] * 40)
        r.send(first + HeadersFrame(3, block, flags={"END_HEADERS", "END_STREAM"}).serialize())
        assert len(block) < 16384  # small on the wire, 160 KB decoded
        assert r.goaway() == ErrorCodes.ENHANCE_YOUR_CALM

    def test_empty_frames_one_after_the_other_are_a_flood(self):
        r = Raw()
        post = [(b":method", b"POST"), *BASE[1:]]
        r.send(raw_headers(1, post, flags=("END_HEADERS",)))
        r.send(DataFrame(1, b"").serialize() * 3)
        assert r.goaway() == ErrorCodes.ENHANCE_YOUR_CALM

    def test_priority_and_window_update_floods(self):
        r = Raw()
        r.send(PriorityFrame(1).serialize() * 101)
        assert r.goaway() == ErrorCodes.ENHANCE_YOUR_CALM
        r = Raw()
        r.send(WindowUpdateFrame(0, window_increment=1).serialize() * 6)
        assert r.goaway() == ErrorCodes.ENHANCE_YOUR_CALM

    def test_more_streams_than_max_concurrent_streams(self):
        r = Raw(options=Http2Options(max_concurrent_streams=3))
        data = b"".join(raw_headers(sid, BASE, r.encoder) for sid in (1, 3, 5, 7))
        r.send(data)
        assert r.goaway() == ErrorCodes.PROTOCOL_ERROR  # RFC 9113 §5.1.2 (a connection error, §5.4.1)
        # the three it took had reached the upstream side; the connection ends with them
        assert r.closing

    def test_rapid_reset_ends_the_connection(self):
        r = Raw()
        sid = 1
        while not r.closing and sid < 2000:
            r.send(raw_headers(sid, BASE, r.encoder))  # each read: a stream opened...
            r.send(RstStreamFrame(sid, error_code=ErrorCodes.CANCEL).serialize())  # ...and reset, before its answer
            sid += 2
        assert r.goaway() == ErrorCodes.ENHANCE_YOUR_CALM
        assert sid // 2 <= 251  # Envoy's rule: 250 premature resets before 500 streams closed

    def test_streams_reset_in_the_read_that_opened_them_never_reach_the_pipeline(self):
        r = Raw()
        r.send(b"".join(raw_headers(sid, BASE, r.encoder) + RstStreamFrame(sid, error_code=8).serialize()
                        for sid in range(1, 200, 2)))
        assert len(r.m.upstreams) == 0 and r.m.gateway.inflight == 0
        assert r.goaway() is None  # 100 premature resets: under the bound

    def test_streams_reset_after_their_answer_began_do_not_count_as_premature(self):
        m = H2Memory(CONFIG)
        for i in range(300):
            sid = m.request(b"/")
            m.answer(i, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234")
            m.client.reset_stream(sid, ErrorCodes.CANCEL)  # a client that had seen enough
            m.send()
        assert m.goaway() is None and not m.t.disconnecting


class TimerTests(TestCase):
    def test_idle_connection_gets_goaway_no_error_and_closes(self):
        m = H2Memory(CONFIG, idle_timeout=5)
        sid = m.request(b"/")
        m.answer(0, OK)
        m.reactor.advance(4)
        m.receive()
        assert m.goaway() is None
        m.reactor.advance(1.5)
        m.receive()
        assert m.goaway().error_code == ErrorCodes.NO_ERROR and m.goaway().last_stream_id == sid
        assert m.t.disconnecting

    def test_pings_do_not_keep_a_connection_alive(self):
        m = H2Memory(CONFIG, idle_timeout=5)
        for _ in range(6):
            m.client.ping(b"12345678")
            m.send()
            m.reactor.advance(1)
        m.receive()
        assert m.goaway() is not None and m.t.disconnecting

    def test_a_header_block_that_never_ends_meets_the_head_timeout(self):
        r = Raw(head_timeout=2)
        r.send(raw_headers(1, BASE, flags=()))
        r.m.reactor.advance(2.1)
        r.got += r.m.t.value()
        assert r.goaway() == ErrorCodes.ENHANCE_YOUR_CALM and r.closing

    def test_a_headers_frame_dripped_byte_by_byte_meets_the_head_timeout(self):
        r = Raw(head_timeout=2)
        frame = raw_headers(1, BASE)
        for byte in frame[:-1]:
            r.send(bytes([byte]))
            r.m.reactor.advance(0.05)
        assert r.goaway() is None  # the timer runs from the HEADERS frame's header (its 9th byte)
        r.m.reactor.advance(2.1)
        r.got += r.m.t.value()
        assert r.goaway() == ErrorCodes.ENHANCE_YOUR_CALM

    def test_drain_sends_goaway_answers_the_open_streams_and_refuses_new_ones(self):
        r = Raw()
        r.send(raw_headers(1, BASE, r.encoder))
        r.m.factory.goaway()  # the gateway stops (or a reload removed the listener)
        r.got += r.m.t.value()
        r.m.t.clear()
        (goaway,) = [f for f in frames_of(r.got) if isinstance(f, GoAwayFrame)]
        assert goaway.error_code == ErrorCodes.NO_ERROR and goaway.last_stream_id == 1
        assert not r.closing
        out = r.send(raw_headers(3, BASE, r.encoder))
        (reset,) = [f for f in frames_of(out) if isinstance(f, RstStreamFrame)]
        assert (reset.stream_id, reset.error_code) == (3, ErrorCodes.REFUSED_STREAM)
        assert len(r.m.upstreams) == 1
        r.m.upstreams[0][0].dataReceived(OK)
        answer = frames_of(r.m.t.value())
        assert [type(f).__name__ for f in answer] == ["HeadersFrame", "DataFrame"]
        assert answer[1].data == b"ok" and "END_STREAM" in answer[1].flags
        assert r.closing  # the last stream answered: closed

    def test_a_zero_window_stall_resets_the_stream_after_the_idle_timeout(self):
        m = H2Memory(CONFIG, idle_timeout=3, client_settings={SettingCodes.INITIAL_WINDOW_SIZE: 0})
        sid = m.request(b"/")
        up, t = m.upstream(0)
        m.answer(0, b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"z" * 60000)
        m.reactor.advance(2)
        m.receive()
        assert m.reset_of(sid) is None
        m.reactor.advance(1.5)
        m.receive()
        assert m.reset_of(sid) == ErrorCodes.CANCEL
        assert t.disconnecting  # the upstream request was given up: nothing more is buffered
        m.reactor.advance(3.5)
        m.receive()
        assert m.goaway() is not None  # then the idle connection goes
