"""Hostile input over raw sockets: smuggling, limits, absolute-form,
pipelining, Expect: 100-continue, slow and idle clients."""

from __future__ import annotations

import json
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from support.http import http_request, raw_connect, raw_exchange, reactor, sleep, wait_for
from support.plugins import DenyAll


CONFIG = """\
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: backend}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {port}}}]}}}}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {{name: v}}
spec:
  virtualHost:
    domains: [gw.test]
    routes:
    - matchers: [{{prefix: /protected}}]
      routeAction: {{single: {{upstream: {{name: backend}}}}}}
      options: {{denyall: {{}}}}
    - matchers: [{{prefix: /}}]
      routeAction: {{single: {{upstream: {{name: backend}}}}}}
"""


@pytest.fixture
def gw(backend: Any, config_dir: Any, gateway: Any) -> Any:
    g = gateway(config_dir(CONFIG.format(port=backend.port)), plugins=[("denyall", DenyAll())],
                head_timeout=0.5, idle_timeout=1.0)
    g.backend = backend
    yield g
    # every request object the gateway created was accounted for (no leak)
    pytest_twisted.blockon(defer.ensureDeferred(
        wait_for(lambda: g.service.gateway.inflight == 0, timeout=3)))


async def still_serving(gw: Any) -> None:
    r = await raw_exchange(gw.port, b"GET /alive HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n")
    (resp,) = r.responses()
    assert resp.status == 200 and json.loads(resp.body)["path"] == "/alive"


def forwarded_paths(gw: Any) -> list[bytes]:
    return [r.path for r in gw.backend.requests]


HEAD = b"POST /upload HTTP/1.1\r\nHost: gw.test\r\n"

SMUGGLING = {
    "cl-and-te": HEAD + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: gw.test\r\n\r\n",
    "te-and-cl": HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: gw.test\r\n\r\n",
    "duplicate-cl": HEAD + b"Content-Length: 5\r\nContent-Length: 40\r\n\r\nhelloGET /smuggled HTTP/1.1\r\nHost: gw.test\r\n\r\n",
    "duplicate-cl-same-line": HEAD + b"Content-Length: 5, 40\r\n\r\nhello",
    "signed-cl-plus": HEAD + b"Content-Length: +5\r\n\r\nhello",
    "signed-cl-minus": HEAD + b"Content-Length: -1\r\n\r\nhello",
    "cl-hex": HEAD + b"Content-Length: 0x5\r\n\r\nhello",
    "cl-space-inside": HEAD + b"Content-Length: 1 0\r\n\r\nhelloworld",
    "bad-chunk-size": HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    "negative-chunk-size": HEAD + b"Transfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
    "hex-prefix-chunk-size": HEAD + b"Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
    "plus-chunk-size": HEAD + b"Transfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n",
    "chunk-data-overrun": HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n",
    "te-not-chunked": HEAD + b"Transfer-Encoding: gzip\r\n\r\nhello",
    "te-chunked-not-last": HEAD + b"Transfer-Encoding: chunked, gzip\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "te-xchunked": HEAD + b"Transfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "obs-fold": b"GET /fold HTTP/1.1\r\nHost: gw.test\r\nX-Folded: a\r\n  b\r\n\r\n",
    "obs-fold-tab": b"GET /fold HTTP/1.1\r\nHost: gw.test\r\nX-Folded: a\r\n\tTransfer-Encoding: chunked\r\n\r\n",
    "space-before-colon": b"GET /x HTTP/1.1\r\nHost: gw.test\r\nContent-Length : 5\r\n\r\nhello",
    "header-without-colon": b"GET /x HTTP/1.1\r\nHost: gw.test\r\nNoColonHere\r\n\r\n",
    "bare-lf-in-value": b"GET /x HTTP/1.1\r\nHost: gw.test\r\nX-A: a\rb\r\n\r\n",
    "nul-in-value": b"GET /x HTTP/1.1\r\nHost: gw.test\r\nX-A: a\x00b\r\n\r\n",
    "bad-request-line": b"GET  /x HTTP/1.1\r\nHost: gw.test\r\n\r\n",
    "bad-version": b"GET /x HTTP/9.9\r\nHost: gw.test\r\n\r\n",
    "garbage": b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n",
    "two-hosts": b"GET /x HTTP/1.1\r\nHost: gw.test\r\nHost: other.test\r\nConnection: close\r\n\r\n",
    "no-host": b"GET /x HTTP/1.1\r\nConnection: close\r\n\r\n",
}


@pytest.mark.parametrize("name", sorted(SMUGGLING))
@pytest_twisted.ensureDeferred
async def test_malformed_framing_is_400_and_closed(gw: Any, name: str) -> None:
    res = await raw_exchange(gw.port, SMUGGLING[name], timeout=3)
    assert res.closed, f"connection left open: {res.data!r}"
    assert res.status in (400, 501), res.data
    responses = res.responses()
    assert len(responses) == 1, res.data  # nothing smuggled behind it
    # nothing at all, or at most nothing after the 400, reached the backend
    assert b"/smuggled" not in forwarded_paths(gw)
    assert forwarded_paths(gw) == []
    await still_serving(gw)


@pytest_twisted.ensureDeferred
async def test_oversized_request_line(gw: Any) -> None:
    res = await raw_exchange(gw.port, b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: gw.test\r\n\r\n")
    assert res.closed and res.status in (400, 414, 431), res.data[:100]
    assert forwarded_paths(gw) == []
    await still_serving(gw)


@pytest.mark.parametrize("headers", [
    b"X-Big: " + b"b" * 20000 + b"\r\n",  # one huge header line
    b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(300)),  # a huge block
    b"".join(b"X-H%d: v\r\n" % i for i in range(1000)),  # too many headers
])
@pytest_twisted.ensureDeferred
async def test_oversized_header_block(gw: Any, headers: bytes) -> None:
    res = await raw_exchange(gw.port, b"GET /big HTTP/1.1\r\nHost: gw.test\r\n" + headers + b"\r\n")
    assert res.closed and res.status in (400, 431), res.data[:100]
    assert forwarded_paths(gw) == []
    await still_serving(gw)


@pytest_twisted.ensureDeferred
async def test_absolute_form_target(gw: Any) -> None:
    res = await raw_exchange(gw.port, b"GET http://GW.test:8080/a/../b?q=1 HTTP/1.1\r\nHost: evil.test\r\n"
                                      b"Connection: close\r\n\r\n")
    (resp,) = res.responses()
    assert resp.status == 200
    echo = json.loads(resp.body)
    assert echo["uri"] == "/b?q=1"  # origin-form upstream, normalised
    # the authority of an absolute-form target replaces Host (RFC 9112 §3.2.2):
    # the backend never sees the Host the routing decision ignored
    assert dict((n.lower(), v) for n, v in echo["headers"])["host"] == ["GW.test:8080"]
    res = await raw_exchange(gw.port, b"GET http://evil.test/b HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n")
    assert res.status == 404


@pytest_twisted.ensureDeferred
async def test_absolute_form_cannot_reach_protected_route_by_other_spelling(gw: Any) -> None:
    for target in (b"http://gw.test/protected", b"http://gw.test//protected", b"HTTP://gw.test/x/../protected",
                   b"http://gw.test/%70rotected"):
        res = await raw_exchange(gw.port, b"GET " + target + b" HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n")
        assert res.status == 401, (target, res.data)
    assert forwarded_paths(gw) == []


@pytest_twisted.ensureDeferred
async def test_pipelined_responses_come_back_in_order(gw: Any) -> None:
    reqs = b"".join([
        b"GET /_sleep?ms=300 HTTP/1.1\r\nHost: gw.test\r\n\r\n",
        b"GET /protected HTTP/1.1\r\nHost: gw.test\r\n\r\n",
        b"POST /second HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 5\r\n\r\nhello",
        b"GET /_sleep?ms=10 HTTP/1.1\r\nHost: gw.test\r\n\r\n",
        b"GET /last HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n",
    ])
    res = await raw_exchange(gw.port, reqs, timeout=5)
    r = res.responses()
    assert [x.status for x in r] == [200, 401, 200, 200, 200]
    assert [json.loads(x.body)["uri"] for x in (r[0], r[2], r[3], r[4])] == [
        "/_sleep?ms=300", "/second", "/_sleep?ms=10", "/last"]
    assert json.loads(r[2].body)["body_length"] == 5
    assert res.closed


@pytest_twisted.ensureDeferred
async def test_expect_100_continue_on_protected_route_is_refused_without_continue(gw: Any) -> None:
    res = await raw_exchange(
        gw.port, b"POST /protected HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 100000\r\n"
                 b"Expect: 100-continue\r\n\r\n", until=lambda d: b"go away" in d, timeout=3)
    assert b"100 Continue" not in res.data
    (resp,) = res.responses()
    assert (resp.status, resp.body) == (401, b"go away")
    assert resp.header(b"www-authenticate") == b"Basic realm=x"
    assert forwarded_paths(gw) == []


@pytest_twisted.ensureDeferred
async def test_expect_100_continue_refused_then_connection_not_reused_for_body(gw: Any) -> None:
    # a client that ignores the refusal and sends the body anyway: the body
    # must not be read as a new request
    body = b"GET /smuggled HTTP/1.1\r\nHost: gw.test\r\n\r\n"
    res = await raw_exchange(
        gw.port, [b"POST /protected HTTP/1.1\r\nHost: gw.test\r\nContent-Length: %d\r\n"
                  b"Expect: 100-continue\r\n\r\n" % len(body), body], delay=0.2, timeout=3)
    assert [r.status for r in res.responses()] == [401]
    assert forwarded_paths(gw) == []


@pytest_twisted.ensureDeferred
async def test_expect_100_continue_on_open_route(gw: Any) -> None:
    client = await raw_connect(gw.port)
    client.transport.write(b"POST /open HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 5\r\n"
                           b"Expect: 100-continue\r\nConnection: close\r\n\r\n")
    await wait_for(lambda: b"100 Continue" in client.buf)
    assert client.buf.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    client.transport.write(b"hello")
    result = await client.done
    interim, final = result.responses()
    assert interim.status == 100 and final.status == 200
    echo = json.loads(final.body)
    assert echo["body_length"] == 5
    assert "expect" not in [n.lower() for n, _ in echo["headers"]]


@pytest_twisted.ensureDeferred
async def test_slowloris_head_times_out(gw: Any) -> None:
    start = reactor.seconds()
    pieces = [b"GET /slow HTTP/1.1\r\n"] + [b"X-%d: v\r\n" % i for i in range(40)]
    res = await raw_exchange(gw.port, pieces, delay=0.1, timeout=5)
    elapsed = reactor.seconds() - start
    assert res.closed and res.status == 408
    assert 0.4 <= elapsed < 1.5
    assert forwarded_paths(gw) == []


@pytest_twisted.ensureDeferred
async def test_slowloris_request_line_times_out(gw: Any) -> None:
    # bytes of a request line that never ends: the head deadline applies too
    start = reactor.seconds()
    res = await raw_exchange(gw.port, [b"GET /"] + [b"a"] * 60, delay=0.05, timeout=5)
    elapsed = reactor.seconds() - start
    assert res.closed, "a dribbled request line must not hold the connection"
    assert res.status == 408
    assert elapsed < 1.5


@pytest_twisted.ensureDeferred
async def test_slow_upstream_outlasting_head_and_idle_timeouts(gw: Any) -> None:
    # head_timeout 0.5 s and idle_timeout 1 s apply to the client, not to a
    # request the gateway is still answering
    res = await raw_exchange(gw.port, b"GET /_sleep?ms=1300 HTTP/1.1\r\nHost: gw.test\r\n\r\n"
                             b"GET /next HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n", timeout=5)
    assert [r.status for r in res.responses()] == [200, 200]


@pytest_twisted.ensureDeferred
async def test_idle_keep_alive_connection_times_out(gw: Any) -> None:
    start = reactor.seconds()
    res = await raw_exchange(gw.port, b"GET /a HTTP/1.1\r\nHost: gw.test\r\n\r\n", timeout=5)
    elapsed = reactor.seconds() - start
    assert res.closed and res.status == 200
    assert 0.9 <= elapsed < 2.5


@pytest_twisted.ensureDeferred
async def test_many_idle_connections_do_not_block_others(gw: Any) -> None:
    idle = []
    for i in range(200):
        c = await raw_connect(gw.port)
        if i % 2:
            c.transport.write(b"GET /half HTTP/1.1\r\nHost: gw")  # a started head
        idle.append(c)
    start = reactor.seconds()
    for _ in range(5):
        r = await http_request("GET", f"http://127.0.0.1:{gw.port}/fine", headers={"Host": "gw.test"})
        assert r.status == 200
    assert reactor.seconds() - start < 1.0
    for c in idle:
        c.transport.abortConnection()
    await sleep(0)


@pytest_twisted.ensureDeferred
async def test_request_body_smuggling_after_response_is_not_parsed(gw: Any) -> None:
    # a denied request whose (declared) body contains a request: after the
    # 401 the connection closes; the embedded request is never handled
    inner = b"GET /smuggled HTTP/1.1\r\nHost: gw.test\r\n\r\n"
    res = await raw_exchange(gw.port, b"POST /protected HTTP/1.1\r\nHost: gw.test\r\nContent-Length: %d\r\n\r\n"
                             % len(inner) + inner, timeout=3)
    statuses = [r.status for r in res.responses()]
    assert statuses[0] == 401
    assert b"/smuggled" not in forwarded_paths(gw)


@pytest_twisted.ensureDeferred
async def test_http10_and_lowercase_method(gw: Any) -> None:
    res = await raw_exchange(gw.port, b"GET /ten HTTP/1.0\r\nHost: gw.test\r\n\r\n")
    (resp,) = res.responses()
    assert resp.status == 200 and res.closed
    # Methods are case-sensitive (RFC 9110 §9.1); llhttp, like nginx and
    # Envoy, refuses a method it does not know: "get" is not "GET".
    res = await raw_exchange(gw.port, b"get /lower HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n")
    (resp,) = res.responses()
    assert resp.status == 400 and res.closed
    assert b"/lower" not in forwarded_paths(gw)
