"""The HTTP/1.1 data path over raw sockets (issue #13, point 2), against the
real gateway and an upstream that records the exact bytes it receives.

Covered: keep-alive; ``Connection: close`` on any line and in comma lists;
HTTP/1.0 clients; pipelined requests answered in order; pipelining after a
denial (nothing after a denied request reaches the upstream unless it is a
request of its own that the chain admitted); chunked bodies re-framed both
ways (chunk extensions never pass); ``Content-Length`` validation; 1xx, 204,
304 and HEAD framing; ``Expect: 100-continue`` only after the chain admits;
head, idle and upstream timeouts; limits on the head; malformed heads → 400
and close; hop-by-hop and ``Connection``-named headers removed both ways;
``X-Forwarded-*``; absolute-form targets; 503/504/502 classification; client
disconnects abort the upstream request; a stale pooled connection retried
once for GET, never for POST; IPv6 and hostname upstreams.

Smuggling basics (CL+TE, duplicate/signed CL, bad chunk sizes, obs-fold)
are in tests/integration/test_core_hostile.py; the cases here add to them.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from twistgw import sdk
from engine_helpers import assert_400_and_closed, get, route, still_served
from support.http import raw_connect, reactor, sleep, static_upstream_yaml, vs_yaml, wait_for
from support.recorder import CLOSE, RESET, Pieces, dechunk


def statuses(res: Any, methods: tuple[str, ...] = ()) -> list[int]:
    return [r.status for r in res.responses(methods)]


def body_reply(text: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\n" + extra + b"Content-Length: %d\r\n\r\n" % len(text) + text


def echo_target(rec: Any) -> bytes:
    """The recorder answers each request with its target as the body."""
    return body_reply(rec.target)


# ---------------------------------------------------------------------------
# Keep-alive, Connection: close, HTTP/1.0
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_keep_alive_serves_requests_one_after_another_on_one_connection(eng: Any) -> None:
    eng.rec.respond = echo_target
    client = await raw_connect(eng.port)
    for i in range(3):
        client.transport.write(get(f"/k{i}"))
        await wait_for(lambda i=i: len(client.buf.split(b"HTTP/1.1 ")) == i + 2)
    await sleep(0.05)
    assert client.transport.connected, "the connection was closed after a keep-alive request"
    client.transport.abortConnection()
    r = (await client.done).responses()
    assert [(x.status, x.body) for x in r] == [(200, b"/k0"), (200, b"/k1"), (200, b"/k2")]
    # the upstream side is pooled: one upstream connection for the three
    assert eng.rec.connections == 1


@pytest.mark.parametrize("connection", [
    "Connection: close\r\n",
    "Connection: CLOSE\r\n",
    "Connection: keep-alive, close\r\n",
    "Connection: x-a,close,x-b\r\n",
    "Connection: keep-alive\r\nConnection: close\r\n",
    "Connection: x-a\r\nConnection: close, x-b\r\n",
])
@pytest_twisted.ensureDeferred
async def test_connection_close_on_any_line_ends_the_connection(eng: Any, connection: str) -> None:
    res = await eng.send(get("/first", extra=connection) + get("/second"))
    assert res.closed
    assert statuses(res) == [200]
    assert [r.target for r in eng.rec.requests] == [b"/first"]
    assert (res.responses()[0].header(b"connection") or b"").lower() == b"close"


@pytest_twisted.ensureDeferred
async def test_http10_client_gets_one_answer_and_the_close(eng: Any) -> None:
    res = await eng.send(get("/ten", version="1.0") + get("/after", version="1.0"))
    assert res.closed and statuses(res) == [200]
    assert res.data.startswith(b"HTTP/1.")
    assert [r.target for r in eng.rec.requests] == [b"/ten"]


@pytest_twisted.ensureDeferred
async def test_http10_client_never_gets_chunked_framing(eng: Any) -> None:
    # An HTTP/1.0 client does not know chunked: the gateway de-frames (and
    # closes to delimit, or counts); the body reaches it whole.
    eng.rec.respond = lambda rec: (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    res = await eng.send(get("/old", version="1.0"))
    assert res.closed
    head, _, body = res.data.partition(b"\r\n\r\n")
    assert b"chunked" not in head.lower(), head
    assert body == b"hello world"


@pytest_twisted.ensureDeferred
async def test_http10_request_body_is_forwarded(eng: Any) -> None:
    res = await eng.send(get("/up", method="POST", version="1.0", body=b"0123456789"))
    assert statuses(res) == [200]
    (seen,) = eng.rec.requests
    assert seen.body == b"0123456789"


# ---------------------------------------------------------------------------
# Pipelining
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_pipelined_requests_are_answered_in_order_whatever_the_upstream_speed(eng: Any) -> None:
    def respond(rec: Any) -> Any:
        delay = {b"/a": 0.2, b"/c": 0.1}.get(rec.target, 0)
        return Pieces([body_reply(rec.target)], delay=delay) if delay else body_reply(rec.target)

    eng.rec.respond = respond
    reqs = (get("/a") + get("/protected") + get("/b", method="POST", body=b"xyz") + get("/c")
            + get("/protected/2") + get("/d", close=True))
    res = await eng.send(reqs, timeout=5)
    r = res.responses()
    assert [(x.status, x.body) for x in r] == [
        (200, b"/a"), (401, b"go away"), (200, b"/b"), (200, b"/c"), (401, b"go away"), (200, b"/d")]
    assert res.closed
    assert [x.target for x in eng.rec.requests] == [b"/a", b"/b", b"/c", b"/d"]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest_twisted.ensureDeferred
async def test_nothing_after_a_denied_request_reaches_the_upstream(eng: Any, framing: str) -> None:
    # A denied request's body carries requests. Whatever the gateway does with
    # the connection after the 401, neither the body nor the requests hidden
    # in it reach the upstream; a request pipelined after the body is either
    # not served, or served as a request of its own (through the chain).
    hidden = get("/smuggled-a") + get("/protected-not", method="DELETE")
    if framing == "chunked":
        body = b"%x\r\n" % len(hidden) + hidden + b"\r\n0\r\n\r\n"
        head = get("/protected/upload", method="POST", extra="Transfer-Encoding: chunked\r\n")
    else:
        body = hidden
        head = get("/protected/upload", method="POST", extra=f"Content-Length: {len(hidden)}\r\n")
    res = await eng.send([head, body, get("/protected/again"), get("/after", close=True)], delay=0.05)
    got = statuses(res)
    assert got[:2] == [401, 401] or got == [401], res.data
    assert b"smuggled" not in eng.rec.data and b"protected" not in eng.rec.data
    assert [r.target for r in eng.rec.requests] in ([], [b"/after"])


@pytest_twisted.ensureDeferred
async def test_denied_requests_pipelined_with_admitted_ones_never_leak(eng: Any) -> None:
    # 20 denied and 20 admitted requests interleaved on one connection: each
    # denied one is answered 401, never forwarded; the admitted ones are.
    eng.rec.respond = echo_target
    reqs = b"".join(get(f"/protected/{i}") + get(f"/ok/{i}") for i in range(20)) + get("/end", close=True)
    res = await eng.send(reqs, timeout=5)
    r = res.responses()
    assert len(r) == 41
    assert [x.status for x in r[:40]] == [401, 200] * 20
    assert all(x.body == b"/ok/%d" % i for i, x in enumerate(r[1:40:2]))
    assert b"/protected" not in eng.rec.data


# ---------------------------------------------------------------------------
# Chunked bodies, re-framed both ways
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_chunked_request_body_is_reframed_not_passed_through(eng: Any) -> None:
    raw = (b"5;ext=evil\r\nhello\r\n001;x=\"q\"\r\n \r\n5;y\r\nworld\r\n"
           b"0;last=1\r\nX-Trailer: t\r\n\r\n")
    res = await eng.send(get("/chunked", method="POST", extra="Transfer-Encoding: chunked\r\n") + raw
                         + get("/next", close=True))
    assert statuses(res) == [200, 200]
    seen = eng.rec.requests[0]
    assert seen.body == b"hello world"
    assert b"ext=evil" not in eng.rec.data and b"last=1" not in eng.rec.data and b"x=" not in seen.body_raw
    assert seen.body_raw != raw
    if seen.chunked:
        assert dechunk(seen.body_raw) == b"hello world"
    else:
        assert seen.headers(b"content-length") == [b"11"]
    assert eng.rec.requests[1].target == b"/next"


@pytest_twisted.ensureDeferred
async def test_chunked_response_body_is_reframed_not_passed_through(eng: Any) -> None:
    eng.rec.respond = lambda rec: (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   b"5;ext=evil\r\nhello\r\n0001\r\n \r\n5;y=\"z\"\r\nworld\r\n0;end=1\r\n\r\n")
    res = await eng.send(get("/down") + get("/again", close=True))
    r = res.responses()
    assert [(x.status, x.body) for x in r] == [(200, b"hello world"), (200, b"hello world")]
    assert b"ext=evil" not in res.data and b"end=1" not in res.data and b"y=" not in res.data


@pytest_twisted.ensureDeferred
async def test_response_without_length_is_delimited_for_the_client(eng: Any) -> None:
    # The upstream delimits by closing; the client must still be able to
    # tell where the body ends (chunked, or the gateway closes too).
    eng.rec.respond = lambda rec: Pieces([b"HTTP/1.1 200 OK\r\n\r\n", b"until", b" close"], close=True)
    res = await eng.send(get("/eof"))
    (r,) = res.responses()
    assert r.body == b"until close"
    te = (r.header(b"transfer-encoding") or b"").lower()
    assert te == b"chunked" or res.closed


# ---------------------------------------------------------------------------
# Content-Length validation (more in test_core_hostile.py)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    "99999999999999999999999",
    "18446744073709551621",
    "",                             # empty
    "5 5",
    "5\t,5",
    "0x5",
    "5.0",
    "1e1",
    "\u0665".encode().decode("latin-1"),  # an Arabic-Indic five, UTF-8 bytes
])
@pytest_twisted.ensureDeferred
async def test_invalid_content_length_is_400_and_closed(eng: Any, value: str) -> None:
    await assert_400_and_closed(eng, get("/cl", method="POST", extra=f"Content-Length: {value}\r\n") + b"hello"
                                + get("/smuggled"))


@pytest_twisted.ensureDeferred
async def test_body_shorter_than_content_length_is_not_completed_by_the_next_request(eng: Any) -> None:
    # the declared 10 bytes are only 5: the client goes away; the upstream
    # never sees a complete request built from someone else's bytes
    res = await eng.send(get("/short", method="POST", extra="Content-Length: 10\r\n") + b"hello", half_close=True)
    assert res.closed
    assert all(r.body != b"hello" or len(r.body_raw) == 10 for r in eng.rec.requests)
    await still_served(eng)


# ---------------------------------------------------------------------------
# 1xx, 204, 304 and HEAD framing
# ---------------------------------------------------------------------------

NO_BODY_REPLIES = {
    "103-then-200": b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n" + body_reply(b"final"),
    "100-unsolicited": b"HTTP/1.1 100 Continue\r\n\r\n" + body_reply(b"final"),
    "204": b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n",
    "204-with-length": b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
    "304-with-length": b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 1234\r\n\r\n",
    "304-chunked": b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
}


@pytest.mark.parametrize("name", sorted(NO_BODY_REPLIES))
@pytest_twisted.ensureDeferred
async def test_interim_and_bodiless_responses_keep_the_framing(eng: Any, name: str) -> None:
    reply = NO_BODY_REPLIES[name]
    eng.rec.respond = lambda rec: reply if rec.target == b"/first" else body_reply(b"next")
    res = await eng.send(get("/first") + get("/second", close=True), timeout=4)
    final = [r for r in res.responses() if r.status >= 200]
    expected = int(name.split("-")[0]) if not name.startswith("1") else 200
    assert [r.status for r in final] == [expected, 200], res.data
    assert final[0].body == (b"final" if expected == 200 else b"")
    assert final[1].body == b"next"
    for interim in (r for r in res.responses() if r.status < 200):
        assert interim.body == b"" and interim.status in (100, 103)
    if expected in (204, 304):
        assert b"transfer-encoding" not in res.data.split(b"\r\n\r\n")[0].lower()


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
])
@pytest_twisted.ensureDeferred
async def test_head_response_has_no_body_and_keeps_the_length(eng: Any, reply: bytes) -> None:
    eng.rec.respond = lambda rec: reply if rec.method == b"HEAD" else body_reply(b"next")
    res = await eng.send(get("/h", method="HEAD") + get("/g", close=True), timeout=4)
    r = res.responses(("HEAD", "GET"))
    assert [(x.status, x.body) for x in r] == [(200, b""), (200, b"next")]
    if b"1000" in reply:
        assert r[0].header(b"content-length") == b"1000"


# ---------------------------------------------------------------------------
# Expect: 100-continue
# ---------------------------------------------------------------------------


class SlowAllow:
    """``slowallow: {}``: admits every request after 300 ms."""

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Any, scope: Any) -> Any:
        return True

    @sdk.hookimpl
    def twistgw_authenticate(self, ctx: Any, options: Any) -> Any:
        d: defer.Deferred = defer.Deferred()
        reactor.callLater(0.3, d.callback, None)
        return d


@pytest_twisted.ensureDeferred
async def test_100_continue_comes_only_after_the_chain_admits(recorders: Any, config_dir: Any,
                                                               gateway: Any) -> None:
    rec = recorders()
    routes = route("/", "rec", "{slowallow: {}}")
    gw = gateway(config_dir(static_upstream_yaml("rec", [rec.port]) + "---\n" + vs_yaml(upstream="rec", routes=routes)),
                 plugins=[("slowallow", SlowAllow())])
    client = await raw_connect(gw.port)
    start = reactor.seconds()
    client.transport.write(get("/up", method="POST", extra="Content-Length: 5\r\nExpect: 100-continue\r\n",
                               close=True))
    await wait_for(lambda: b"100 Continue" in client.buf, timeout=3)
    assert reactor.seconds() - start >= 0.25, "100 Continue was sent before the chain decided"
    client.transport.write(b"hello")
    r = (await client.done).responses()
    assert [x.status for x in r] == [100, 200]
    (seen,) = rec.requests
    assert seen.body == b"hello"


@pytest_twisted.ensureDeferred
async def test_denied_expect_gets_the_denial_without_continue_and_no_body_upstream(eng: Any) -> None:
    client = await raw_connect(eng.port)
    client.transport.write(get("/protected/up", method="POST", extra="Content-Length: 5\r\nExpect: 100-continue\r\n"))
    await wait_for(lambda: b"go away" in client.buf, timeout=3)
    client.transport.write(b"hello")  # a client that does not wait
    await sleep(0.1)
    client.transport.abortConnection()
    res = await client.done
    assert b"100 Continue" not in res.data
    assert statuses(res) == [401]
    assert eng.rec.data == b""


# ---------------------------------------------------------------------------
# Timeouts
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_head_timeout_applies_to_the_second_request_of_a_keep_alive_connection(eng: Any) -> None:
    start = reactor.seconds()
    res = await eng.send([get("/one"), b"GET /two HTTP/1.1\r\n"] + [b"X-%d: v\r\n" % i for i in range(30)],
                         delay=0.1, timeout=5)
    assert res.closed
    assert statuses(res) == [200, 408]
    assert reactor.seconds() - start < 2.0
    assert [r.target for r in eng.rec.requests] == [b"/one"]


@pytest_twisted.ensureDeferred
async def test_upstream_timeout_is_504_and_the_upstream_connection_closed(eng: Any) -> None:
    eng.rec.respond = lambda rec: None
    start = reactor.seconds()
    res = await eng.send(get("/slow/silent", close=True))
    assert statuses(res) == [504]
    assert 0.25 <= reactor.seconds() - start < 1.5
    await wait_for(lambda: eng.rec.open == 0, timeout=2)


@pytest_twisted.ensureDeferred
async def test_idle_client_after_a_response_is_closed(eng: Any) -> None:
    client = await raw_connect(eng.port)
    client.transport.write(get("/idle"))
    res = await client.done  # never closed by us: the idle timeout (1 s) does it
    assert res.closed and statuses(res) == [200]


# ---------------------------------------------------------------------------
# Head limits and malformed heads
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_ordinary_large_heads_are_served(eng: Any) -> None:
    # what real clients send: an 8 KB cookie, 90 headers, a 4 KB URL
    extra = "Cookie: " + "c" * 8000 + "\r\n" + "".join(f"X-H{i}: v{i}\r\n" for i in range(90))
    res = await eng.send(get("/" + "p" * 4000, extra=extra, close=True))
    assert statuses(res) == [200]
    (seen,) = eng.rec.requests
    assert len(seen.headers(b"cookie")[0]) == 8000


MALFORMED = {
    "nul-in-name": b"X-A\x00B: v\r\n",
    "cr-in-name": b"X-A\rB: v\r\n",
    "lf-in-value": b"X-A: a\nb: c\r\n",
    "cr-in-value": b"X-A: a\rb\r\n",
    "nul-in-value": b"X-A: a\x00b\r\n",
    "space-in-name": b"X A: v\r\n",
    "empty-name": b": v\r\n",
    "tab-before-colon": b"X-A\t: v\r\n",
    # RFC 9110 field-value excludes CTL and DEL; llhttp (strict) refuses them
    "del-in-value": b"X-A: a\x7fb\r\n",
    "esc-in-value": b"X-A: a\x1bb\r\n",
    "non-token-name": b"X-[A]: v\r\n",
}


@pytest.mark.parametrize("line", list(MALFORMED.values()), ids=list(MALFORMED))
@pytest_twisted.ensureDeferred
async def test_malformed_header_line_is_400_and_closed(eng: Any, line: bytes) -> None:
    await assert_400_and_closed(eng, b"GET /m HTTP/1.1\r\nHost: gw.test\r\n" + line + b"\r\n" + get("/smuggled"))


@pytest.mark.parametrize("line", [
    b"GET /x HTTP/1.1 extra\r\n",
    b"GET\t/x HTTP/1.1\r\n",
    b"GET /x\x00y HTTP/1.1\r\n",
    b"GET /x HTTP/1.1\r\r\n",
    b"G\x00T /x HTTP/1.1\r\n",
    b"GET /x http/1.1\r\n",
    b"GET /x HTTP/1.10\r\n",
])
@pytest_twisted.ensureDeferred
async def test_malformed_request_line_is_400_and_closed(eng: Any, line: bytes) -> None:
    await assert_400_and_closed(eng, line + b"Host: gw.test\r\n\r\n" + get("/smuggled"))


# ---------------------------------------------------------------------------
# Hop-by-hop headers, both ways; X-Forwarded-*
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_hop_by_hop_and_connection_named_request_headers_are_removed(eng: Any) -> None:
    extra = ("Connection: keep-alive, X-Secret-One\r\nConnection: x-secret-two\r\n"
             "X-Secret-One: 1\r\nX-Secret-Two: 2\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n"
             "Trailer: X-T\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\n"
             "X-Kept: yes\r\n")
    res = await eng.send(get("/hop", extra=extra, close=True))
    assert statuses(res) == [200]
    (seen,) = eng.rec.requests
    names = seen.names()
    for gone in (b"x-secret-one", b"x-secret-two", b"keep-alive", b"te", b"trailer", b"proxy-connection",
                 b"proxy-authorization"):
        assert gone not in names, (gone, seen.head)
    assert seen.headers(b"x-kept") == [b"yes"]
    for value in seen.headers(b"connection"):  # the gateway's own, if any
        assert b"secret" not in value.lower()


@pytest_twisted.ensureDeferred
async def test_hop_by_hop_and_connection_named_response_headers_are_removed(eng: Any) -> None:
    eng.rec.respond = lambda rec: body_reply(b"ok", extra=(
        b"Connection: X-Resp-Secret\r\nConnection: x-other\r\nX-Resp-Secret: s\r\nX-Other: o\r\n"
        b"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTrailer: X-T\r\n"
        b"Upgrade: h2c\r\nX-End: kept\r\n"))
    res = await eng.send(get("/hop", close=True))
    (r,) = res.responses()
    names = {n.lower() for n, _ in r.headers}
    for gone in (b"x-resp-secret", b"x-other", b"keep-alive", b"proxy-connection", b"trailer", b"upgrade"):
        assert gone not in names, (gone, r.headers)
    assert r.header(b"x-end") == b"kept"


@pytest_twisted.ensureDeferred
async def test_x_forwarded_headers_are_the_gateways(eng: Any) -> None:
    extra = ("X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-For: 7.7.7.7, 8.8.8.8\r\n"
             "X-Forwarded-Proto: https\r\n")
    res = await eng.send(get("/xff", extra=extra, close=True))
    assert statuses(res) == [200]
    (seen,) = eng.rec.requests
    assert seen.headers(b"x-forwarded-for") == [b"127.0.0.1"]
    assert seen.headers(b"x-forwarded-proto") == [b"http"]
    assert b"6.6.6.6" not in seen.head and b"8.8.8.8" not in seen.head


@pytest.mark.parametrize("named", [
    "Host",
    "X-Forwarded-For", "X-Forwarded-Proto",
    "Content-Length",
    "Transfer-Encoding",
])
@pytest_twisted.ensureDeferred
async def test_connection_cannot_name_away_what_the_gateway_needs(eng: Any, named: str) -> None:
    body = b"0123456789"
    res = await eng.send(get("/named", method="POST", extra=f"Connection: {named}\r\n", body=body) + get(
        "/next", close=True))
    assert statuses(res) == [200, 200]
    seen = eng.rec.requests[0]
    assert seen.headers(b"host") == [b"gw.test"]
    assert seen.headers(b"x-forwarded-for") == [b"127.0.0.1"]
    assert seen.headers(b"x-forwarded-proto") == [b"http"]
    assert seen.body == body
    assert eng.rec.requests[1].target == b"/next"


# ---------------------------------------------------------------------------
# Absolute-form targets
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", [
    "http://u@gw.test/x",         # userinfo
    "http://u:p@gw.test/x",
    "ftp://gw.test/x",            # not http(s)
    "http:///x",                  # empty authority
    "http://gw.test:99999999/x",  # not a port
])
@pytest_twisted.ensureDeferred
async def test_bad_absolute_form_is_400(eng: Any, target: str) -> None:
    # the request has no body: the connection may stay open, but the bad
    # request never reaches the upstream
    res = await eng.send(get(target) + get("/next", close=True))
    assert statuses(res) == [400, 200] or (statuses(res) == [400] and res.closed), res.data
    assert [r.target for r in eng.rec.requests] in ([], [b"/next"])


@pytest_twisted.ensureDeferred
async def test_absolute_form_is_sent_upstream_in_origin_form(eng: Any) -> None:
    res = await eng.send(get("http://gw.test/abs/../p?q=1", host="ignored.test", close=True))
    assert statuses(res) == [200]
    (seen,) = eng.rec.requests
    assert seen.request_line == b"GET /p?q=1 HTTP/1.1"
    assert seen.headers(b"host") == [b"gw.test"]


# ---------------------------------------------------------------------------
# Upstream failures: 503 / 504 / 502
# ---------------------------------------------------------------------------

FAILURES = {
    "reset-before-head": (RESET, 503),
    "closed-before-head": (CLOSE, 503),
    "garbage": (b"SPDY/9 nonsense\r\n\r\n", 502),
    "bad-status": (b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", 502),
    # RFC 9112 §6.3: "ought to be handled as an error"; llhttp (strict) refuses it
    "cl-and-te": (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                  502),
    "two-lengths": (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabc", 502),
    "nul-in-header": (b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n", 502),
    "obs-fold": (b"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n", 502),
    "head-too-big": (b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"b" * 200000 + b"\r\n\r\n", 502),
}


@pytest.mark.parametrize("case", list(FAILURES.values()), ids=list(FAILURES))
@pytest_twisted.ensureDeferred
async def test_upstream_failures_are_classified(eng: Any, case: tuple[bytes, int]) -> None:
    reply, status = case
    eng.rec.respond = lambda rec: reply
    res = await eng.send(get("/fail", close=True), timeout=4)
    assert statuses(res) == [status], res.data[:300]


@pytest_twisted.ensureDeferred
async def test_refused_upstream_is_503(eng: Any) -> None:
    res = await eng.send(get("/refused", close=True))
    assert statuses(res) == [503]


# ---------------------------------------------------------------------------
# Client disconnects; stale pooled connections
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_client_disconnect_aborts_the_upstream_request(eng: Any) -> None:
    eng.rec.respond = lambda rec: None
    client = await raw_connect(eng.port)
    client.transport.write(get("/hang"))
    await wait_for(lambda: eng.rec.requests)
    assert eng.rec.open == 1
    client.transport.abortConnection()
    await wait_for(lambda: eng.rec.open == 0, timeout=2)


@pytest_twisted.ensureDeferred
async def test_client_disconnect_mid_response_closes_the_upstream(eng: Any) -> None:
    eng.rec.respond = lambda rec: Pieces([b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"]
                                         + [b"x" * 100] * 200, delay=0.02)
    client = await raw_connect(eng.port)
    client.transport.write(get("/stream"))
    await wait_for(lambda: client.count > 500)
    client.transport.abortConnection()
    await wait_for(lambda: eng.rec.open == 0, timeout=2)


def _dies_on_reuse(rec: Any) -> Any:
    """Answers the first request of a connection, keeps it open, and closes
    the connection without an answer when it is reused (a keep-alive
    connection the backend timed out just as the gateway reused it)."""
    return body_reply(b"fresh") if rec.index == 0 else CLOSE


@pytest_twisted.ensureDeferred
async def test_stale_pooled_connection_is_retried_once_for_get(eng: Any) -> None:
    eng.rec.respond = _dies_on_reuse
    assert statuses(await eng.send(get("/one", close=True))) == [200]
    res = await eng.send(get("/two", close=True))
    assert statuses(res) == [200]
    assert res.responses()[0].body == b"fresh"
    assert [(r.target, r.connection, r.index) for r in eng.rec.requests] == [
        (b"/one", 0, 0), (b"/two", 0, 1), (b"/two", 1, 0)]


@pytest_twisted.ensureDeferred
async def test_stale_pooled_connection_is_never_retried_for_post(eng: Any) -> None:
    eng.rec.respond = _dies_on_reuse
    assert statuses(await eng.send(get("/one", close=True))) == [200]
    res = await eng.send(get("/two", method="POST", body=b"once", close=True))
    assert statuses(res) == [503]
    assert [(r.target, r.connection, r.index) for r in eng.rec.requests] == [(b"/one", 0, 0), (b"/two", 0, 1)]
    await sleep(0.1)
    assert len(eng.rec.requests) == 2


@pytest_twisted.ensureDeferred
async def test_stale_connection_is_retried_only_once(eng: Any) -> None:
    # every connection dies before answering: one retry, then 503 (never a loop)
    eng.rec.respond = lambda rec: CLOSE
    res = await eng.send(get("/x", close=True))
    assert statuses(res) == [503]
    assert len(eng.rec.requests) <= 2


# ---------------------------------------------------------------------------
# IPv6 and hostname upstreams
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("addr, interface", [('"::1"', "::1"), ("localhost", "127.0.0.1")])
@pytest_twisted.ensureDeferred
async def test_ipv6_and_hostname_upstreams(recorders: Any, config_dir: Any, gateway: Any, addr: str,
                                           interface: str) -> None:
    rec = recorders(interface=interface)
    text = static_upstream_yaml("rec", [rec.port]).replace("127.0.0.1", addr) + "---\n" + vs_yaml(upstream="rec")
    gw = gateway(config_dir(text))
    from support.http import raw_exchange

    res = await raw_exchange(gw.port, get("/far", method="POST", body=b"abc", close=True))
    assert [r.status for r in res.responses()] == [200]
    (seen,) = rec.requests
    assert (seen.target, seen.body) == (b"/far", b"abc")


# ---------------------------------------------------------------------------
# An upstream that sends more than its response (response queue poisoning)
# ---------------------------------------------------------------------------

#: A whole second response, unasked for, in the same write as the first.
_SMUGGLED = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!"


@pytest.mark.parametrize("extra", [_SMUGGLED, _SMUGGLED[:20], b"garbage\r\n"])
@pytest_twisted.ensureDeferred
async def test_bytes_after_a_response_never_answer_the_next_request(eng: Any, extra: bytes) -> None:
    # Like nginx, a connection whose upstream wrote past the end of its
    # response is closed, never pooled: the bytes after it (a whole forged
    # response, part of one, or garbage) answer no other request, neither
    # the next one of the same client (pipelined, so it is sent at once on
    # the connection just finished) nor a later one.
    from twisted.logger import formatEvent, globalLogPublisher

    eng.rec.respond = lambda rec: (body_reply(b"first") + extra if rec.target == b"/a"
                                   else body_reply(b"good"))
    said: list[str] = []

    def observe(event: dict) -> None:
        said.append(formatEvent(event))

    globalLogPublisher.addObserver(observe)
    try:
        res = await eng.send(get("/a") + get("/b", close=True), timeout=4)
    finally:
        globalLogPublisher.removeObserver(observe)
    assert f"Upstream 127.0.0.1:{eng.rec.port} sent bytes after the end of a response; connection closed" in said
    r = res.responses(("GET", "GET"))
    assert [(x.status, x.body) for x in r] == [(200, b"first"), (200, b"good")], res.data
    later = await eng.send(get("/c", close=True))
    assert [(x.status, x.body) for x in later.responses()] == [(200, b"good")], later.data
    assert b"EVIL" not in res.data + later.data
    # /b may have gone out on that connection at once (the pool had it back
    # as /a ended) and then been sent again on another; /c never used it
    first = next(x for x in eng.rec.requests if x.target == b"/a")
    on_it = [x.target for x in eng.rec.requests if x.connection == first.connection]
    elsewhere = [x.target for x in eng.rec.requests if x.connection != first.connection]
    assert on_it in ([b"/a"], [b"/a", b"/b"]), on_it
    assert elsewhere == [b"/b", b"/c"], elsewhere


@pytest_twisted.ensureDeferred
async def test_bytes_after_a_response_fail_a_pipelined_post_rather_than_answer_it(eng: Any) -> None:
    # a POST is not sent twice: if it went out on the poisoned connection it
    # gets the 503 of a connection that died before its answer, never the
    # forged response
    eng.rec.respond = lambda rec: (body_reply(b"first") + _SMUGGLED if rec.target == b"/a"
                                   else body_reply(b"good"))
    res = await eng.send(get("/a") + get("/p", method="POST", body=b"once", close=True), timeout=4)
    r = res.responses(("GET", "POST"))
    assert r[0].status == 200 and r[0].body == b"first", res.data
    assert (r[1].status, r[1].body) in ((200, b"good"), (503, r[1].body)), res.data
    assert b"EVIL" not in res.data
    # never twice to the upstream (it may or may not have read the copy
    # sent on the closed connection), and once if it was answered
    await sleep(0.1)
    sent = [x.target for x in eng.rec.requests].count(b"/p")
    assert sent == 1 if r[1].status == 200 else sent <= 1, (sent, res.data)
