"""The HTTP/2 attacks that took other proxies down (issue 33, item 5), by a
hostile client on ``h2`` (frames from hyperframe and hpack) over real
sockets against a ``twist twistgw`` process: the connection or the stream
is refused as RFC 9113 says, the gateway's memory stays bounded (its RSS,
read from /proc), and another client is served meanwhile.

The same bounds, deterministic and in memory: tests/unit/test_http2_limits.py.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from h2.errors import ErrorCodes
from h2.events import StreamReset
from h2.settings import SettingCodes
from hpack import Encoder
from hyperframe.frame import (ContinuationFrame, DataFrame, HeadersFrame, PingFrame, RstStreamFrame,
                              SettingsFrame)

from h2support import Backend, H2Client, config, served
from support.process import TwistGateway

BASE = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"gw.test"), (b":path", b"/")]
MB = 1024 * 1024


@pytest.fixture(scope="module")
def backend() -> Any:
    b = Backend()
    yield b
    b.close()


@pytest.fixture(scope="module")
def gw(tmp_path_factory: Any, backend: Backend) -> Any:
    tmp = tmp_path_factory.mktemp("attacks")
    with TwistGateway(tmp, config(tmp / "cfg", backend.port), args=("--idle-timeout", "3", "--head-timeout", "2",
                                                                     "--no-access-log")) as g:
        assert served(g.port)
        yield g


def headers(sid: int, fields: list[tuple[bytes, bytes]], encoder: Encoder,
            flags: tuple[str, ...] = ("END_HEADERS", "END_STREAM")) -> bytes:
    return HeadersFrame(sid, encoder.encode(fields), flags=set(flags)).serialize()


def goaway_after(client: H2Client, timeout: float = 5.0) -> int | None:
    client.read(lambda _: client.goaway() is not None, timeout=timeout, parse=False)
    g = client.goaway()
    return None if g is None else int(g.error_code)


def test_rapid_reset_is_refused_and_reaches_few_upstream_requests(gw: Any, backend: Backend) -> None:
    before = len(backend.seen)
    c = H2Client(gw.port)
    encoder = c.conn.encoder
    sid = 1
    try:
        while sid < 4000 and c.goaway() is None:
            c.raw(headers(sid, BASE, encoder) + RstStreamFrame(sid, error_code=ErrorCodes.CANCEL).serialize())
            sid += 2
            if sid % 101 == 0:
                c.read(timeout=0.01, parse=False)
    except OSError:
        pass  # the gateway closed the connection under the flood
    assert goaway_after(c) == ErrorCodes.ENHANCE_YOUR_CALM
    streams = sid // 2
    # Envoy's rule ends it after 250 premature resets; a stream answered before its reset arrived (a busy
    # gateway reads the pair in two reads) is not premature, so the count varies with the machine's load
    assert streams < 1500
    assert len(backend.seen) - before < streams / 2  # most never reached the pipeline
    assert served(gw.port)


def test_the_continuation_flood_is_refused_with_bounded_memory(gw: Any) -> None:
    gw.wait_idle()
    rss = gw.rss()
    clients = []
    for _ in range(40):
        c = H2Client(gw.port)
        c.raw(headers(1, BASE, c.conn.encoder, flags=()))
        try:
            for _ in range(64):
                c.raw(ContinuationFrame(1, b"\x00" * 16384).serialize())
        except OSError:
            pass
        clients.append(c)
    for c in clients:
        assert goaway_after(c) == ErrorCodes.ENHANCE_YOUR_CALM
        c.close()
    assert gw.rss() - rss < 20 * MB  # 40 connections x 1 MiB offered: at most 64 KiB each is kept
    assert served(gw.port)


def test_a_header_block_dripped_slowly_meets_the_head_timeout(gw: Any) -> None:
    c = H2Client(gw.port, timeout=6)
    block = headers(1, BASE, c.conn.encoder, flags=())
    c.raw(block)
    for _ in range(10):
        try:
            c.raw(ContinuationFrame(1, b"\x00").serialize())
        except OSError:
            break
        time.sleep(0.4)
    assert goaway_after(c) == ErrorCodes.ENHANCE_YOUR_CALM
    assert served(gw.port)


def test_an_hpack_bomb_is_refused(gw: Any) -> None:
    c = H2Client(gw.port)
    encoder = c.conn.encoder
    first = headers(1, BASE + [(b"x-bomb", b"b" * 4000)], encoder)
    bomb = HeadersFrame(3, encoder.encode(BASE + [(b"x-bomb", b"b" * 4000)] * 60),
                        flags={"END_HEADERS", "END_STREAM"}).serialize()
    assert len(bomb) < 2000  # 240 KB once decoded
    c.raw(first + bomb)
    assert goaway_after(c) == ErrorCodes.ENHANCE_YOUR_CALM
    assert served(gw.port)


def test_a_header_list_over_the_request_head_limit_is_431_and_the_connection_goes_on(gw: Any) -> None:
    c = H2Client(gw.port)
    assert c.get("/", headers=[(b"x-big-%d" % i, b"v" * 4000) for i in range(5)])[0] == 431
    assert c.get("/")[0] == 200
    c.close()


def test_more_streams_than_advertised_end_the_connection(gw: Any) -> None:
    c = H2Client(gw.port, timeout=10)
    encoder = c.conn.encoder
    slow = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"gw.test"), (b":path", b"/slow?s=2")]
    c.raw(b"".join(headers(sid, slow, encoder) for sid in range(1, 204, 2)))  # 102 streams
    assert goaway_after(c) == ErrorCodes.PROTOCOL_ERROR  # RFC 9113 §5.1.2, a connection error (§5.4.1)
    assert c.goaway().last_stream_id == 199  # the first 100 were taken
    assert served(gw.port)


def test_a_frame_over_max_frame_size_is_refused_before_its_payload(gw: Any) -> None:
    c = H2Client(gw.port)
    c.raw(DataFrame(1, b"x" * 16385).serialize()[:9])  # the header of a 16 KiB + 1 frame, nothing after
    assert goaway_after(c) == ErrorCodes.FRAME_SIZE_ERROR
    c = H2Client(gw.port)
    c.raw(b"\xff\xff\xff\x00\x00\x00\x00\x00\x01")  # 16 MiB announced
    assert goaway_after(c) == ErrorCodes.FRAME_SIZE_ERROR
    assert served(gw.port)


def test_content_length_disagreeing_with_data_smuggles_nothing(gw: Any, backend: Backend) -> None:
    c = H2Client(gw.port)
    post = [(b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"gw.test"), (b":path", b"/smuggle"),
            (b"content-length", b"5")]
    c.raw(headers(1, post, c.conn.encoder, ("END_HEADERS",))
          + DataFrame(1, b"hello GET /admin HTTP/1.1\r\nHost: x\r\n\r\n", flags={"END_STREAM"}).serialize())
    assert goaway_after(c) == ErrorCodes.PROTOCOL_ERROR
    time.sleep(0.3)
    assert not [p for _, p, _, _ in backend.seen if p == "/admin"]
    assert served(gw.port)


@pytest.mark.parametrize("fields", [
    BASE + [(b":path", b"/twice")],
    BASE + [(b":protocol", b"websocket")],
    [BASE[0], (b"x-a", b"1"), *BASE[1:]],
    BASE + [(b"connection", b"close")],
    BASE + [(b"transfer-encoding", b"chunked")],
    BASE + [(b"upgrade", b"h2c")],
    BASE + [(b"te", b"gzip")],
    BASE + [(b"X-Upper", b"1")],
    BASE + [(b"x-split", b"a\r\nX-Injected: 1")],
], ids=["duplicate-path", "unknown-pseudo", "pseudo-after-regular", "connection", "transfer-encoding",
        "upgrade", "te", "uppercase", "crlf"])
def test_pseudo_header_and_connection_specific_abuse_ends_the_connection(gw: Any, backend: Backend,
                                                                         fields: list[tuple[bytes, bytes]]) -> None:
    before = len(backend.seen)
    c = H2Client(gw.port)
    c.raw(headers(1, fields, c.conn.encoder))
    assert goaway_after(c) == ErrorCodes.PROTOCOL_ERROR
    assert len(backend.seen) == before


def test_zero_window_stalls_pause_the_upstream_and_are_reset(gw: Any) -> None:
    gw.wait_idle()
    rss = gw.rss()
    stalled = []
    for _ in range(20):
        c = H2Client(gw.port, timeout=8, settings={SettingCodes.INITIAL_WINDOW_SIZE: 0})
        c.request("/big?n=50000000")  # 50 MB each, into a window that never opens
        stalled.append(c)
    time.sleep(1.5)
    assert gw.rss() - rss < 30 * MB  # not 20 x 50 MB: each upstream paused at 64 KiB queued
    assert served(gw.port)
    for c in stalled:  # after the idle timeout (3 s) the stream is reset: CANCEL
        c.read(lambda events: any(isinstance(e, StreamReset) for e in events), timeout=8)
        assert [int(e.error_code) for e in c.events if isinstance(e, StreamReset)] == [ErrorCodes.CANCEL]
        c.close()


def _wmem_max() -> int:
    """The most a TCP socket's send buffer grows to here (tcp_wmem's third field)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_wmem") as f:
            return int(f.read().split()[2])
    except (OSError, ValueError, IndexError):
        return 4 * MB  # Linux's default


def flood_budget(frame: bytes) -> int:
    """How many ``frame`` (PING or SETTINGS) a gateway that keeps its bound
    must have ended the connection by: its acknowledgements (17 bytes for a
    PING, 9 for a SETTINGS) fill its socket's send buffer first (the kernel
    grows it up to tcp_wmem's maximum, 4 MiB: 466,000 SETTINGS acks), only
    then do they stay unsent and count against ``max_control_frames``
    (1000); twice that."""
    ack = 9 + (8 if frame[3] == 6 else 0)
    return 2 * (_wmem_max() // ack + 1000)


def _flood(port: int, frame: bytes, outcome: dict[str, Any]) -> None:
    """Send ``frame`` over and over without reading (with a slow stream
    open, so that the idle timeout is not what ends it) until the gateway
    ends the connection, or :func:`flood_budget` frames were sent (the
    bound is in bytes, not seconds: a loaded gateway reads the 466,000
    SETTINGS frames it takes to fill its send buffer in more than a
    minute), or 600 s passed. The acknowledgements first fill the kernel's
    buffers, then the gateway's: the client's receive buffer is made small
    (loopback's default of megabytes would be as much again)."""
    c = H2Client(port, rcvbuf=4096)
    c.request("/slow?s=600")
    c.sock.settimeout(1.0)
    sent, deadline, budget = 0, time.monotonic() + 600, flood_budget(frame)
    batch = frame * 500
    outcome["closed"] = False
    try:
        while time.monotonic() < deadline and sent < budget:
            try:
                c.sock.sendall(batch)
                sent += 500
            except socket.timeout:
                pass  # the gateway reads slower than we send, or stopped reading
    except OSError:
        outcome["closed"] = True  # reset by the gateway
    outcome["sent"] = sent
    c.close()


@pytest.mark.slow
@pytest.mark.parametrize("frame", [PingFrame(0, opaque_data=b"12345678").serialize(),
                                   SettingsFrame(0, settings={SettingCodes.HEADER_TABLE_SIZE: 4096}).serialize()],
                         ids=["ping", "settings"])
def test_ping_and_settings_floods_from_a_client_that_never_reads(gw: Any, frame: bytes) -> None:
    gw.wait_idle()
    rss = gw.rss()
    outcome: dict[str, Any] = {}
    flood = threading.Thread(target=_flood, args=(gw.port, frame, outcome))
    flood.start()
    time.sleep(1.0)
    assert served(gw.port, timeout=5)  # meanwhile
    flood.join(660)
    assert gw.rss() - rss < 30 * MB
    assert outcome["closed"], outcome  # ended by the gateway, not held open for the client
    h2_lines = [line[:300] for line in gw.log_text().split("\x1e") if "HTTP/2 client" in line]
    assert any("control frames (PING, SETTINGS, RST_STREAM answers) the client does not read" in line
               for line in h2_lines), (outcome, h2_lines[-3:])
    assert served(gw.port)


def test_empty_data_frames_are_a_flood(gw: Any) -> None:
    c = H2Client(gw.port)
    post = [(b":method", b"POST"), *BASE[1:]]
    c.raw(headers(1, post, c.conn.encoder, ("END_HEADERS",)) + DataFrame(1, b"").serialize() * 10)
    assert goaway_after(c) == ErrorCodes.ENHANCE_YOUR_CALM


def test_the_gateway_survived_every_attack(gw: Any, tmp_path: Path) -> None:
    assert gw.proc.poll() is None
    assert served(gw.port)
    assert "Traceback" not in gw.log_text()
