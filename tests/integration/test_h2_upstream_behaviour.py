"""The HTTP/2 upstream client against a scripted HTTP/2 server
(tests/support/h2server.py): what goes out (pseudo-headers, no
connection-specific fields, request trailers), a GOAWAY below a request's
stream and REFUSED_STREAM retried on a new stream, resets before and after
the head, a body that contradicts its content-length, a route's retries and
an Upstream's circuit breakers per stream, and ``protocolSelection``."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from h2.errors import ErrorCodes
from twisted.internet import defer, reactor

from support.h2server import start_h2_server
from support.http import parse_responses, raw_exchange, sleep


@pytest.fixture
def h2_server() -> Any:
    started: list[Any] = []

    def start(behave: Any, max_streams: int | None = None) -> Any:
        s = start_h2_server(behave, max_streams)
        started.append(s)
        return s

    yield start
    for s in started:
        pytest_twisted.blockon(defer.maybeDeferred(s.listening.stopListening))


def config(port: int, upstream_extra: str = "", route_options: str = "", http2: bool = True) -> str:
    h2 = "  useHttp2: true\n" if http2 else ""
    return f"""\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: h2, namespace: default}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: {port}}}]}}
{h2}{upstream_extra}---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  virtualHost:
    domains: ["*"]
    routes:
    - matchers: [{{prefix: /}}]
{route_options}      routeAction: {{single: {{upstream: {{name: h2}}}}}}
"""


def ok(conn: Any, sid: int, headers: dict, body: bytes) -> None:
    conn.answer(sid, 200, b"ok:" + body, ((b"content-type", b"text/plain"),))


async def get(gw: Any, data: bytes, timeout: float = 5.0) -> Any:
    result = await raw_exchange(gw.port, data, timeout=timeout, until=lambda d: bool(parse_responses(d)))
    return result


@pytest_twisted.ensureDeferred
async def test_what_goes_out_on_the_stream(h2_server: Any, config_dir: Any, gateway: Any) -> None:
    server = h2_server(ok)
    gw = gateway(config_dir(config(server.port)))
    result = await get(gw, b"POST /a?b=1 HTTP/1.1\r\nHost: api.test\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
                           b"TE: trailers, deflate\r\nUpgrade: h2c\r\nTransfer-Encoding: chunked\r\n\r\n"
                           b"3\r\nabc\r\n0\r\nX-Sum: 9\r\n\r\n")
    (response,) = result.responses()
    assert response.status == 200 and response.body == b"ok:abc"
    _, _, headers, body, trailers = server.requests[-1]
    assert headers[b":method"] == b"POST" and headers[b":path"] == b"/a?b=1"
    assert headers[b":authority"] == b"api.test" and headers[b":scheme"] == b"http"
    assert headers[b"te"] == b"trailers"
    for name in (b"host", b"connection", b"x-hop", b"upgrade", b"transfer-encoding"):
        assert name not in headers
    assert body == b"abc" and trailers == {b"x-sum": b"9"}


@pytest_twisted.ensureDeferred
async def test_goaway_below_the_stream_is_retried_on_a_new_connection(h2_server: Any, config_dir: Any,
                                                                      gateway: Any) -> None:
    def behave(conn: Any, sid: int, headers: dict, body: bytes) -> None:
        if conn.number == 1:
            conn.goaway(last_stream_id=0)  # "I processed nothing"
        else:
            ok(conn, sid, headers, body)
    server = h2_server(behave)
    gw = gateway(config_dir(config(server.port)))
    result = await get(gw, b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
    assert result.status == 200
    assert [r[0] for r in server.requests] == [1, 2]  # sent again, once, on another connection


@pytest_twisted.ensureDeferred
async def test_refused_stream_is_retried_and_other_resets_are_503(h2_server: Any, config_dir: Any,
                                                                 gateway: Any) -> None:
    def behave(conn: Any, sid: int, headers: dict, body: bytes) -> None:
        path = headers[b":path"]
        seen = sum(1 for r in server.requests if r[2][b":path"] == path)
        if path == b"/refused" and seen == 1:
            conn.reset(sid, ErrorCodes.REFUSED_STREAM)
        elif path == b"/internal":
            conn.reset(sid, ErrorCodes.INTERNAL_ERROR)
        elif path == b"/after-head":
            conn.h2.send_headers(sid, [(b":status", b"200")])
            conn.h2.send_data(sid, b"part")
            conn.reset(sid, ErrorCodes.INTERNAL_ERROR)
        elif path == b"/short":
            conn.h2.send_headers(sid, [(b":status", b"200"), (b"content-length", b"10")])
            conn.h2.send_data(sid, b"abc", end_stream=True)
            conn.flush()
        else:
            ok(conn, sid, headers, body)
    server = h2_server(behave)
    gw = gateway(config_dir(config(server.port)))
    assert (await get(gw, b"GET /refused HTTP/1.1\r\nHost: a\r\n\r\n")).status == 200
    result = await get(gw, b"GET /internal HTTP/1.1\r\nHost: a\r\n\r\n")
    assert result.status == 503 and b"reset" in result.data
    result = await raw_exchange(gw.port, b"GET /after-head HTTP/1.1\r\nHost: a\r\n\r\n", timeout=5)
    assert result.status == 200 and result.closed and not result.data.endswith(b"0\r\n\r\n")  # cut off
    result = await raw_exchange(gw.port, b"GET /short HTTP/1.1\r\nHost: a\r\n\r\n", timeout=5)
    assert result.status == 502  # h2 checks the body against content-length: a malformed response
    # the gateway keeps serving on a new connection after the protocol error
    assert (await get(gw, b"GET /fine HTTP/1.1\r\nHost: a\r\n\r\n")).status == 200


@pytest.mark.parametrize("fields", [
    [(b":status", b"200"), (b"connection", b"close")],
    [(b":status", b"200"), (b"X-Upper", b"1")],
    [(b":status", b"200"), (b"x-split", b"a\r\nSet-Cookie: evil=1")],
    [(b"x-first", b"1"), (b":status", b"200")],
    [(b":status", b"200"), (b":path", b"/")],
])
@pytest_twisted.ensureDeferred
async def test_a_malformed_response_head_is_502_and_never_relayed(h2_server: Any, config_dir: Any, gateway: Any,
                                                                  fields: list) -> None:
    def behave(conn: Any, sid: int, headers: dict, body: bytes) -> None:
        if headers[b":path"] == b"/bad":
            conn.h2.send_headers(sid, fields, end_stream=True)
            conn.flush()
        else:
            ok(conn, sid, headers, body)
    server = h2_server(behave)
    gw = gateway(config_dir(config(server.port)))
    result = await get(gw, b"GET /bad HTTP/1.1\r\nHost: a\r\n\r\n")
    assert result.status == 502 and b"evil" not in result.data
    assert (await get(gw, b"GET /fine HTTP/1.1\r\nHost: a\r\n\r\n")).status == 200  # a new connection


@pytest_twisted.ensureDeferred
async def test_a_routes_retries_and_an_upstreams_breakers_apply_per_stream(h2_server: Any, config_dir: Any,
                                                                           gateway: Any) -> None:
    def behave(conn: Any, sid: int, headers: dict, body: bytes) -> None:
        path = headers[b":path"]
        seen = sum(1 for r in server.requests if r[2][b":path"] == path)
        if path == b"/flaky" and seen == 1:
            conn.answer(sid, 503, b"busy")
        elif path == b"/slow":
            reactor.callLater(0.4, ok, conn, sid, headers, body)
        else:
            ok(conn, sid, headers, body)
    server = h2_server(behave)
    retries = "      options: {retries: {retryOn: 5xx, numRetries: 2, retryBackOff: {baseInterval: 5ms}}}\n"
    gw = gateway(config_dir(config(server.port, route_options=retries)))
    assert (await get(gw, b"GET /flaky HTTP/1.1\r\nHost: a\r\n\r\n")).status == 200
    assert [r[2][b":path"] for r in server.requests] == [b"/flaky", b"/flaky"]
    gw2 = gateway(config_dir(config(server.port, upstream_extra="  circuitBreakers: {maxRequests: 1}\n")))
    first = defer.ensureDeferred(get(gw2, b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"))
    await sleep(0.1)
    second = await get(gw2, b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
    assert second.status == 503 and b"x-envoy-overloaded: true" in second.data.lower()
    assert (await first).status == 200


@pytest_twisted.ensureDeferred
async def test_use_downstream_protocol_keeps_http11_clients_on_http11(raw_server: Any, config_dir: Any,
                                                                     gateway: Any) -> None:
    up = raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    gw = gateway(config_dir(config(up.port, upstream_extra="  protocolSelection: USE_DOWNSTREAM_PROTOCOL\n")))
    result = await get(gw, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    assert result.status == 200 and up.data.startswith(b"GET / HTTP/1.1\r\n")
