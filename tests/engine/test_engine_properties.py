"""Property tests (hypothesis) of the data path over real loopback sockets
(issue #13, "Tests that must exist").

* A request stream (one to three pipelined requests, bodies framed by
  ``Content-Length`` or chunked) cut into arbitrary pieces gives the upstream
  the same requests as the stream sent whole: the same head bytes, the same
  body bytes (exactly the same framed bytes for ``Content-Length`` bodies;
  the same content for chunked ones, whose chunk sizes the gateway may
  choose), and the client the same answers.
* A response cut into arbitrary pieces by the upstream reaches the client
  like the response sent whole (status, headers but ``Date``, body).
* Garbage (bytes no HTTP request starts with; a request head with a
  forbidden byte in a header; a request line with a NUL) never crashes a
  connection (the answer is nothing or one 4xx, and the gateway serves the
  next client), never reaches the upstream, logs no failure, and leaks no
  file descriptor.

Examples are bounded (``max_examples``) and have no deadline: each is a real
exchange on loopback, and the machine may be busy.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.logger import globalLogPublisher

from engine_helpers import get, open_fds
from support.http import raw_exchange, sleep
from support.recorder import Pieces

SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=False, database=None)


TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
VALUE = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7e), max_size=30)
PATH = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._~", max_size=20).map(lambda p: "/p/" + p)


@st.composite
def requests(draw: Any, last: bool) -> bytes:
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE"]))
    path = draw(PATH)
    headers = "".join(f"x-{n}: {v}\r\n" for n, v in draw(st.lists(st.tuples(TOKEN, VALUE), max_size=4)))
    body = draw(st.binary(max_size=3000)) if method in ("POST", "PUT") else b""
    framed = b""
    if method in ("POST", "PUT"):
        if draw(st.booleans()):
            headers += f"Content-Length: {len(body)}\r\n"
            framed = body
        else:
            headers += "Transfer-Encoding: chunked\r\n"
            rest = body
            while rest:
                n = draw(st.integers(1, max(1, len(rest))))
                framed += b"%x\r\n" % n + rest[:n] + b"\r\n"
                rest = rest[n:]
            framed += b"0\r\n\r\n"
    if last:
        headers += "Connection: close\r\n"
    return f"{method} {path} HTTP/1.1\r\nHost: gw.test\r\n{headers}\r\n".encode() + framed


@st.composite
def request_streams(draw: Any) -> bytes:
    n = draw(st.integers(1, 3))
    return b"".join(draw(requests(last=i == n - 1)) for i in range(n))


def cut(data: bytes, points: list[int]) -> list[bytes]:
    marks = sorted({p % (len(data) + 1) for p in points} | {0, len(data)})
    return [data[a:b] for a, b in zip(marks, marks[1:], strict=False) if b > a]


def seen_by_upstream(rec: Any) -> list[tuple[bytes, bytes, bool, bytes | None]]:
    return [(r.head, r.body, r.chunked, None if r.chunked else r.body_raw) for r in rec.requests]


def answers(res: Any) -> list[tuple[int, bytes]]:
    return [(r.status, r.body) for r in res.responses()]


@settings(max_examples=40, **SETTINGS)
@given(stream=request_streams(), points=st.lists(st.integers(0, 10000), max_size=8))
@pytest_twisted.ensureDeferred
async def test_request_stream_cut_anywhere_reaches_the_upstream_unchanged(eng: Any, stream: bytes,
                                                                          points: list[int]) -> None:
    eng.rec.reset()
    whole = await raw_exchange(eng.port, stream, timeout=5)
    expected = seen_by_upstream(eng.rec)
    eng.rec.reset()
    pieces = await raw_exchange(eng.port, cut(stream, points), delay=0.001, timeout=5)
    assert seen_by_upstream(eng.rec) == expected
    assert answers(pieces) == answers(whole)
    assert len(expected) == stream.count(b" HTTP/1.1\r\n")  # every request got through, whole


@st.composite
def responses(draw: Any) -> bytes:
    status = draw(st.sampled_from([b"200 OK", b"201 Created", b"404 Not Found", b"500 Oops"]))
    headers = b"".join(f"x-{n}: {v}\r\n".encode() for n, v in draw(st.lists(st.tuples(TOKEN, VALUE), max_size=4)))
    body = draw(st.binary(max_size=4000))
    if draw(st.booleans()):
        return b"HTTP/1.1 " + status + b"\r\n" + headers + b"Content-Length: %d\r\n\r\n" % len(body) + body
    framed, rest = b"", body
    while rest:
        n = draw(st.integers(1, len(rest)))
        framed += b"%x\r\n" % n + rest[:n] + b"\r\n"
        rest = rest[n:]
    return b"HTTP/1.1 " + status + b"\r\n" + headers + b"Transfer-Encoding: chunked\r\n\r\n" + framed + b"0\r\n\r\n"


def as_client_sees(res: Any) -> list[tuple[int, list[tuple[bytes, bytes]], bytes]]:
    return [(r.status, [(n.lower(), v) for n, v in r.headers if n.lower() != b"date"], r.body)
            for r in res.responses()]


@settings(max_examples=40, **SETTINGS)
@given(response=responses(), points=st.lists(st.integers(0, 10000), max_size=8))
@pytest_twisted.ensureDeferred
async def test_response_cut_anywhere_reaches_the_client_unchanged(eng: Any, response: bytes,
                                                                  points: list[int]) -> None:
    eng.rec.respond = lambda rec: response
    whole = await raw_exchange(eng.port, get("/r", close=True), timeout=5)
    eng.rec.respond = lambda rec: Pieces(cut(response, points))
    pieces = await raw_exchange(eng.port, get("/r", close=True), timeout=5)
    assert len(whole.responses()) == 1, whole.data
    assert as_client_sees(pieces) == as_client_sees(whole)


TOKEN_START = set(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
NO_CRLF = st.binary(max_size=200).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))

GARBAGE = st.one_of(
    # bytes no request line starts with (not a method token)
    st.tuples(st.integers(0, 255).filter(lambda c: c not in TOKEN_START), st.binary(max_size=300))
    .map(lambda t: bytes([t[0]]) + t[1]),
    # a request head with a NUL inside a header line
    st.tuples(NO_CRLF, NO_CRLF).map(
        lambda t: b"GET /g HTTP/1.1\r\nHost: gw.test\r\nX-" + t[0] + b"\x00" + t[1] + b"\r\n\r\n"),
    # a request line with a NUL in the target
    st.tuples(NO_CRLF.map(lambda b: b.replace(b" ", b"")), st.binary(max_size=100)).map(
        lambda t: b"GET /" + t[0] + b"\x00 HTTP/1.1\r\nHost: gw.test\r\n\r\n" + t[1]),
)


@pytest.fixture
def watched(eng: Any) -> Any:
    """``eng``, watched: at the end no failure was logged, the gateway still
    serves, and the process has no more file descriptors than before."""
    failures: list[dict] = []

    def observe(event: dict) -> None:
        if event.get("log_failure") is not None or event.get("isError"):
            failures.append(event)

    pytest_twisted.blockon(defer.ensureDeferred(raw_exchange(eng.port, get("/warm", close=True))))
    pytest_twisted.blockon(defer.ensureDeferred(sleep(0.1)))
    eng.rec.reset()
    baseline = open_fds()
    globalLogPublisher.addObserver(observe)
    yield eng
    globalLogPublisher.removeObserver(observe)
    assert not failures, failures[:3]
    res = pytest_twisted.blockon(defer.ensureDeferred(raw_exchange(eng.port, get("/alive", close=True))))
    assert [r.status for r in res.responses()] == [200]
    pytest_twisted.blockon(defer.ensureDeferred(sleep(0.2)))
    assert open_fds() <= baseline + 2, (baseline, open_fds())


@settings(max_examples=150, **SETTINGS)
@given(data=GARBAGE)
@pytest_twisted.ensureDeferred
async def test_garbage_never_crashes_reaches_the_upstream_or_leaks(watched: Any, data: bytes) -> None:
    res = await raw_exchange(watched.port, data, timeout=3, half_close=True)
    assert not res.timed_out, res.data
    got = res.responses()
    assert len(got) <= 1, res.data
    if res.data:
        assert got and 400 <= got[0].status < 500, res.data
    assert res.closed
    assert watched.rec.data == b"", watched.rec.data
