"""The streaming proxy over real loopback: routing, backends, pass-through,
hop-by-hop, forwarding headers, streaming, framing, upstream failures."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, task

from twistgw import sdk
from support.http import (
    ChunkedBody,
    http_request,
    raw_connect,
    raw_exchange,
    reactor,
    rss_bytes,
    sleep,
    wait_for,
)

HOP_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nConnection: close, X-Resp-Hop\r\nX-Resp-Hop: secret\r\n"
    b"Keep-Alive: timeout=5\r\nProxy-Authenticate: Basic realm=x\r\nUpgrade: h2c\r\n"
    b"Trailer: X-T\r\nX-End: kept\r\nX-End: twice\r\nContent-Length: 2\r\n\r\nok"
)

RAW_REPLIES: dict[bytes, Any] = {
    b"/raw/garbage": b"SPDY/9 hello there\r\n\r\n",
    b"/raw/badstatus": b"HTTP/1.1 2x0 OK\r\ncontent-length: 0\r\n\r\n",
    b"/raw/badlength": b"HTTP/1.1 200 OK\r\ncontent-length: abc\r\n\r\n",
    b"/raw/nocolon": b"HTTP/1.1 200 OK\r\nthis is not a header\r\ncontent-length: 0\r\n\r\n",
    b"/raw/silent": None,
    b"/raw/reset": b"RESET",
    b"/raw/close": b"",
    b"/raw/hop": HOP_RESPONSE,
    b"/raw/204": b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n",
    b"/raw/304": b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 1234\r\n\r\n",
    b"/raw/badchunk": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nabc\r\n",
}


def _raw_reply(received: bytes) -> Any:
    target = received.split(b" ", 2)[1].split(b"?")[0]
    return RAW_REPLIES.get(target, b"HTTP/1.1 500 Unknown\r\ncontent-length: 0\r\n\r\n")


CONFIG = """\
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: two}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {a}}}, {{addr: 127.0.0.1, port: {b}}}]}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: pets}}
spec: {{ports: [{{name: http, port: 80, targetPort: web}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: pets}}
subsets:
- addresses: [{{ip: 127.0.0.1}}]
  ports: [{{name: http, port: {a}}}]
- addresses: [{{ip: 127.0.0.1}}]
  ports: [{{name: http, port: {b}}}]
---
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: kube-pets}}
spec: {{kube: {{serviceName: pets, servicePort: 80}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: empty}}
spec: {{ports: [{{port: 80}}]}}
---
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: refused}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {refused}}}]}}}}
---
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: raw}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {raw}}}]}}}}
---
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: one}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {a}}}]}}}}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {{name: main}}
spec:
  virtualHost:
    domains: [gw.test, 127.0.0.1]
    routes:
    - matchers: [{{prefix: /static}}]
      routeAction: {{single: {{upstream: {{name: two}}}}}}
    - matchers: [{{prefix: /kube}}]
      routeAction: {{single: {{kube: {{ref: {{name: pets, port: 80}}}}}}}}
    - matchers: [{{prefix: /disc}}]
      routeAction: {{single: {{upstream: {{name: default-pets-80}}}}}}
    - matchers: [{{prefix: /kubeup}}]
      routeAction: {{single: {{upstream: {{name: kube-pets}}}}}}
    - matchers: [{{prefix: /direct204}}]
      directResponseAction: {{status: 204}}
    - matchers: [{{prefix: /direct}}]
      directResponseAction: {{status: 201, body: "made it"}}
    - matchers: [{{prefix: /refused}}]
      routeAction: {{single: {{upstream: {{name: refused}}}}}}
    - matchers: [{{prefix: /raw}}]
      routeAction: {{single: {{upstream: {{name: raw}}}}}}
      options: {{timeout: 500ms}}
    - matchers: [{{prefix: /empty}}]
      routeAction: {{single: {{kube: {{ref: {{name: empty, port: 80}}}}}}}}
    - matchers: [{{prefix: /rewrite}}]
      routeAction: {{single: {{upstream: {{name: one}}}}}}
      options: {{prefixRewrite: /new}}
    - matchers: [{{prefix: /slow}}]
      routeAction: {{single: {{upstream: {{name: one}}}}}}
      options: {{timeout: 300ms, prefixRewrite: /}}
    - matchers: [{{prefix: /}}]
      routeAction: {{single: {{upstream: {{name: one}}}}}}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {{name: narrow}}
spec:
  virtualHost:
    domains: [narrow.test]
    routes:
    - matchers: [{{exact: /only}}]
      directResponseAction: {{status: 200, body: only}}
"""


ONE_UPSTREAM = """\
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: up}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {port}}}]}}}}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {{name: v}}
spec:
  virtualHost:
    routes: [{{routeAction: {{single: {{upstream: {{name: up}}}}}}}}]
"""


class Env:
    def __init__(self, gw: Any, a: Any, b: Any, raw: Any) -> None:
        self.gw, self.a, self.b, self.raw = gw, a, b, raw

    def url(self, path: str) -> str:
        return self.gw.url(path)

    def raw_get(self, path: str, host: str = "gw.test", extra: str = "", method: str = "GET") -> bytes:
        return (f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n").encode("latin-1")


@pytest.fixture
def env(backend_factory: Any, raw_server: Any, unused_port: int, config_dir: Any, gateway: Any) -> Any:
    a, b = backend_factory("a"), backend_factory("b")
    raw = raw_server(_raw_reply)
    d = config_dir(CONFIG.format(a=a.port, b=b.port, raw=raw.port, refused=unused_port))
    e = Env(gateway(d), a, b, raw)
    yield e
    # every request was accounted for, however it ended (no leak)
    pytest_twisted.blockon(defer.ensureDeferred(
        wait_for(lambda: e.gw.service.gateway.inflight == 0, timeout=3)))


def seen_json(result: Any) -> dict:
    assert result.status == 200, (result.status, result.body)
    return json.loads(result.body)


def headers_of(echo: dict) -> dict[str, list[str]]:
    return {n.lower(): v for n, v in echo["headers"]}


# ---------------------------------------------------------------------------
# Routing
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_no_virtual_service_is_404(env: Env) -> None:
    r = await http_request("GET", env.url("/static"), headers={"Host": "nobody.test"})
    assert (r.status, r.body) == (404, b"")
    assert env.a.requests == [] and env.b.requests == []


@pytest_twisted.ensureDeferred
async def test_no_route_is_404(env: Env) -> None:
    r = await http_request("GET", env.url("/only/more"), headers={"Host": "narrow.test"})
    assert (r.status, r.body) == (404, b"")
    r = await http_request("GET", env.url("/only"), headers={"Host": "Narrow.TEST:9999"})
    assert (r.status, r.body) == (200, b"only")


@pytest_twisted.ensureDeferred
async def test_direct_response(env: Env) -> None:
    r = await http_request("GET", env.url("/direct/x"))
    assert (r.status, r.body) == (201, b"made it")
    assert r.header("content-type") == "text/plain"
    assert env.a.requests == [] and env.b.requests == []


@pytest.mark.parametrize("prefix", ["/static", "/kube", "/disc", "/kubeup"])
@pytest_twisted.ensureDeferred
async def test_round_robin_over_two_backends(env: Env, prefix: str) -> None:
    servers = [seen_json(await http_request("GET", env.url(f"{prefix}/{i}")))["server"] for i in range(4)]
    assert sorted(servers) == ["a", "a", "b", "b"]
    assert servers[0] != servers[1] and servers[1] != servers[2]
    assert [r.path for r in env.a.requests + env.b.requests] == [f"{prefix}/{i}".encode() for i in (0, 2, 1, 3)] or \
        sorted(r.path for r in env.a.requests + env.b.requests) == [f"{prefix}/{i}".encode() for i in range(4)]


@pytest_twisted.ensureDeferred
async def test_no_endpoints_is_503(env: Env) -> None:
    r = await http_request("GET", env.url("/empty"))
    assert (r.status, r.body) == (503, b"no healthy upstream")


# ---------------------------------------------------------------------------
# What passes through unchanged, and what does not
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "PURGE", "GET"])
@pytest_twisted.ensureDeferred
async def test_method_path_query_headers_body_unchanged(env: Env, method: str) -> None:
    body = bytes(range(256)) * 40
    r = await http_request(
        method, env.url("/static/p/a;v=1/%41%20b?x=1&x=2&y=%2F&z=%20+&&w"),
        headers=[("X-Rep", "one"), ("X-Rep", "two, three"), ("Cookie", "a=1"), ("Cookie", "b=2"),
                 ("X-Empty", ""), ("Accept-Encoding", "gzip"), ("Authorization", "Bearer t")],
        body=body if method != "GET" else None)
    echo = seen_json(r)
    assert echo["method"] == method
    # unreserved escapes decoded (%41 -> A), others kept; the query byte for byte
    assert echo["uri"] == "/static/p/a;v=1/A%20b?x=1&x=2&y=%2F&z=%20+&&w"
    h = headers_of(echo)
    assert h["x-rep"] == ["one", "two, three"]
    assert h["cookie"] == ["a=1", "b=2"]
    assert h["x-empty"] == [""]
    assert h["accept-encoding"] == ["gzip"] and h["authorization"] == ["Bearer t"]
    assert echo["body_length"] == (len(body) if method != "GET" else 0)
    if method != "GET":
        assert echo["body_sha256"] == hashlib.sha256(body).hexdigest()
        assert h["content-length"] == [str(len(body))]


@pytest_twisted.ensureDeferred
async def test_response_status_and_headers_pass_through(env: Env) -> None:
    r = await http_request("GET", env.url("/_headers?x-multi=1&x-multi=2&set-cookie=a%3D1&set-cookie=b%3D2"))
    assert r.status == 200
    assert r.headers.getRawHeaders(b"x-multi") == [b"1", b"2"]
    assert r.headers.getRawHeaders(b"set-cookie") == [b"a=1", b"b=2"]
    r = await http_request("GET", env.url("/_status?code=418"))
    assert r.status == 418 and json.loads(r.body)["server"] == "a"


@pytest_twisted.ensureDeferred
async def test_hop_by_hop_request_headers_removed(env: Env) -> None:
    req = env.raw_get("/static/h", extra=(
        "Connection: X-Hop-A, x-hop-b\r\nX-Hop-A: 1\r\nX-Hop-B: 2\r\nKeep-Alive: timeout=5\r\n"
        "TE: trailers\r\nTrailer: X-T\r\nUpgrade: websocket\r\nProxy-Authorization: Basic YTpi\r\n"
        "Proxy-Connection: keep-alive\r\nX-End: stays\r\n"))
    res = await raw_exchange(env.gw.port, req)
    (resp,) = res.responses()
    assert resp.status == 200
    h = headers_of(json.loads(resp.body))
    for name in ("connection", "x-hop-a", "x-hop-b", "keep-alive", "te", "trailer", "upgrade",
                 "proxy-authorization", "proxy-connection"):
        assert name not in h, name
    assert h["x-end"] == ["stays"]


@pytest_twisted.ensureDeferred
async def test_hop_by_hop_response_headers_removed(env: Env) -> None:
    res = await raw_exchange(env.gw.port, env.raw_get("/raw/hop"))
    (resp,) = res.responses()
    assert (resp.status, resp.body) == (200, b"ok")
    names = [n.lower() for n, _ in resp.headers]
    for name in (b"x-resp-hop", b"keep-alive", b"proxy-authenticate", b"upgrade", b"trailer"):
        assert name not in names, name
    assert [v for n, v in resp.headers if n.lower() == b"x-end"] in ([b"kept", b"twice"], [b"kept, twice"])
    # the gateway's own Connection header is about the client connection only
    assert [v.lower() for n, v in resp.headers if n.lower() == b"connection"] in ([], [b"close"])


@pytest_twisted.ensureDeferred
async def test_forwarded_headers_overwritten(env: Env) -> None:
    r = await http_request("GET", env.url("/static/f"), headers=[
        ("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-For", "7.7.7.7"), ("X-Forwarded-Proto", "https")])
    h = headers_of(seen_json(r))
    assert h["x-forwarded-for"] == ["127.0.0.1"]
    assert h["x-forwarded-proto"] == ["http"]


@pytest_twisted.ensureDeferred
async def test_host_header_forwarded(env: Env) -> None:
    r = await http_request("GET", env.url("/static/h"), headers={"Host": "GW.test:1234"})
    assert headers_of(seen_json(r))["host"] == ["GW.test:1234"]


@pytest.mark.parametrize("target, expected_uri", [
    ("/static/a/../b/%2e%2e/c//d?q=%2e", "/static/c/d?q=%2e"),
    ("/kube/../static/x", "/static/x"),
    ("/kube/%2e%2e%2fstatic/y", "/static/y"),
    ("//static///z/.", "/static/z/"),
    ("/rewrite/x/../y?k", "/new/y?k"),
    ("/rewrite", "/new"),
])
@pytest_twisted.ensureDeferred
async def test_normalised_path_is_forwarded(env: Env, target: str, expected_uri: str) -> None:
    res = await raw_exchange(env.gw.port, env.raw_get(target))
    (resp,) = res.responses()
    assert resp.status == 200, resp
    assert json.loads(resp.body)["uri"] == expected_uri


@pytest.mark.parametrize("target", ["/static/%5c..%5cadmin", "/static/a%00", "/static/..;/x", "/st atic"])
@pytest_twisted.ensureDeferred
async def test_bad_path_is_400_and_not_forwarded(env: Env, target: str) -> None:
    res = await raw_exchange(env.gw.port, env.raw_get(target))
    assert res.status == 400
    assert env.a.requests == [] and env.b.requests == []


# ---------------------------------------------------------------------------
# Streaming and framing
# ---------------------------------------------------------------------------

MB = 1024 * 1024


class PeakRSS:
    def __init__(self) -> None:
        self.baseline = rss_bytes()
        self.peak = self.baseline
        self.loop = task.LoopingCall(self._sample)
        self.loop.clock = reactor

    def _sample(self) -> None:
        self.peak = max(self.peak, rss_bytes())

    def __enter__(self) -> "PeakRSS":
        self.loop.start(0.02)
        return self

    def __exit__(self, *a: Any) -> None:
        self.loop.stop()
        self._sample()

    @property
    def growth(self) -> int:
        return self.peak - self.baseline


@pytest_twisted.ensureDeferred
async def test_large_upload_streams_with_bounded_memory(env: Env) -> None:
    await http_request("POST", env.url("/u"), body=b"warm-up" * 1000)
    piece = b"0123456789abcdef" * 4096  # 64 KiB
    count = 800  # 50 MiB
    digest = hashlib.sha256()
    for _ in range(count):
        digest.update(piece)
    with PeakRSS() as rss:
        r = await http_request("POST", env.url("/upload"), body=ChunkedBody(piece for _ in range(count)),
                               timeout=60)
    echo = seen_json(r)
    assert echo["body_length"] == len(piece) * count
    assert echo["body_sha256"] == digest.hexdigest()
    assert headers_of(echo)["transfer-encoding"] == ["chunked"]
    assert rss.growth < 20 * MB, f"RSS grew by {rss.growth / MB:.1f} MiB"


@pytest_twisted.ensureDeferred
async def test_large_download_streams_with_bounded_memory(env: Env) -> None:
    await http_request("GET", env.url("/_stream?size=100000"))
    size = 50 * MB
    with PeakRSS() as rss:
        r = await http_request("GET", env.url(f"/_stream?size={size}"), keep_body=False, timeout=60)
    assert r.status == 200
    assert int(r.header("x-test-body-length")) == size
    assert rss.growth < 20 * MB, f"RSS grew by {rss.growth / MB:.1f} MiB"


@pytest_twisted.ensureDeferred
async def test_download_back_pressure_to_a_client_that_does_not_read(env: Env) -> None:
    size = 50 * MB
    client = await raw_connect(env.gw.port, keep=4096)
    client.transport.pauseProducing()
    with PeakRSS() as rss:
        client.transport.write(f"GET /_stream?size={size} HTTP/1.1\r\nHost: gw.test\r\n\r\n".encode())
        await wait_for(lambda: env.a.requests)
        await sleep(1.0)
    (seen,) = env.a.requests
    # the backend was paused: nowhere near the whole body left it
    assert seen.body_sent < 20 * MB, seen.body_sent
    assert rss.growth < 20 * MB, f"RSS grew by {rss.growth / MB:.1f} MiB"
    client.transport.resumeProducing()
    await wait_for(lambda: client.count >= size, timeout=30)
    head = client.buf.split(b"\r\n\r\n", 1)[0]
    assert client.count == len(head) + 4 + size
    client.transport.abortConnection()


@pytest_twisted.ensureDeferred
async def test_upload_back_pressure_from_a_stalled_upstream(raw_server: Any, config_dir: Any,
                                                           gateway: Any) -> None:
    stalled = raw_server(None, pause_reading=True)
    gw = gateway(config_dir(ONE_UPSTREAM.format(port=stalled.port)))
    piece = b"u" * 65536
    produced = [0]

    def pieces() -> Any:
        for _ in range(800):  # 50 MiB
            produced[0] += len(piece)
            yield piece

    with PeakRSS() as rss:
        d = defer.ensureDeferred(http_request("POST", gw.url("/up"), body=ChunkedBody(pieces()), timeout=30))
        d.addErrback(lambda f: None)
        await wait_for(lambda: stalled.connections)
        await sleep(1.0)
    assert produced[0] < 20 * MB, produced[0]
    assert rss.growth < 20 * MB, f"RSS grew by {rss.growth / MB:.1f} MiB"
    d.cancel()


@pytest_twisted.ensureDeferred
async def test_download_is_streamed_not_buffered(env: Env) -> None:
    arrivals: list[float] = []
    start = reactor.seconds()
    r = await http_request("GET", env.url("/_stream?size=200000&chunk=10000&delay_ms=25"),
                           on_data=lambda d: arrivals.append(reactor.seconds() - start))
    assert r.status == 200 and len(r.body) == 200000
    assert arrivals[-1] >= 0.4  # twenty pieces, 25 ms apart
    assert arrivals[0] < arrivals[-1] - 0.3  # the first bytes came long before the last


@pytest_twisted.ensureDeferred
async def test_upload_is_streamed_before_it_is_complete(env: Env, raw_server: Any, config_dir: Any,
                                                        gateway: Any) -> None:
    silent = raw_server(None)
    d = config_dir(ONE_UPSTREAM.format(port=silent.port))
    gw = gateway(d)
    client = await raw_connect(gw.port)
    client.transport.write(b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                           b"5\r\nfirst\r\n")
    await wait_for(lambda: b"first" in silent.data)
    assert b"second" not in silent.data
    client.transport.write(b"6\r\nsecond\r\n")
    await wait_for(lambda: b"second" in silent.data)
    client.transport.abortConnection()


@pytest_twisted.ensureDeferred
async def test_head_and_keep_alive_framing(env: Env) -> None:
    req = (b"HEAD /_stream?size=5000 HTTP/1.1\r\nHost: gw.test\r\n\r\n"
           b"GET /_stream?size=7 HTTP/1.1\r\nHost: gw.test\r\n\r\n"
           b"HEAD /static/x HTTP/1.1\r\nHost: gw.test\r\n\r\n"
           b"GET /direct HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n")
    res = await raw_exchange(env.gw.port, req)
    r1, r2, r3, r4 = res.responses(["HEAD", "GET", "HEAD", "GET"])
    assert (r1.status, r1.body, r1.header(b"content-length")) == (200, b"", b"5000")
    assert (r2.status, r2.body) == (200, b"xxxxxxx")
    assert r3.status == 200 and r3.body == b""
    assert (r4.status, r4.body) == (201, b"made it")
    assert res.closed


@pytest_twisted.ensureDeferred
async def test_no_body_statuses_framing(env: Env) -> None:
    req = (b"GET /raw/204 HTTP/1.1\r\nHost: gw.test\r\n\r\n"
           b"GET /raw/304 HTTP/1.1\r\nHost: gw.test\r\nIf-None-Match: \"v1\"\r\n\r\n"
           b"GET /direct204 HTTP/1.1\r\nHost: gw.test\r\n\r\n"
           b"GET /direct HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n")
    res = await raw_exchange(env.gw.port, req)
    r204, r304, d204, last = res.responses()
    for r in (r204, d204):
        assert r.status == 204 and r.body == b""
        # RFC 9110 8.6: no Content-Length (and no chunking) on a 204
        assert r.header(b"content-length") is None and r.header(b"transfer-encoding") is None
    assert r204.header(b"x-a") == b"1"
    # 304: the representation's length passes through, not a made-up 0
    assert (r304.status, r304.header(b"content-length"), r304.header(b"etag")) == (304, b"1234", b'"v1"')
    assert (last.status, last.body) == (201, b"made it")


@pytest_twisted.ensureDeferred
async def test_chunked_response_framing(env: Env) -> None:
    req = (b"GET /_stream?size=100000&chunked=1&chunk=7000 HTTP/1.1\r\nHost: gw.test\r\n\r\n"
           b"GET /direct HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n")
    res = await raw_exchange(env.gw.port, req)
    r1, r2 = res.responses()
    assert r1.header(b"transfer-encoding") == b"chunked" and r1.header(b"content-length") is None
    assert r1.body == b"x" * 100000
    assert (r2.status, r2.body) == (201, b"made it")


# ---------------------------------------------------------------------------
# Upstream failures
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_upstream_refused_is_503(env: Env) -> None:
    r = await http_request("GET", env.url("/refused"))
    assert r.status == 503
    assert r.body == b"upstream connect error or disconnect/reset before headers. reset reason: connection failure"


@pytest_twisted.ensureDeferred
async def test_upstream_silent_is_504_after_route_timeout(env: Env) -> None:
    start = reactor.seconds()
    r = await http_request("GET", env.url("/raw/silent"))
    elapsed = reactor.seconds() - start
    assert (r.status, r.body) == (504, b"upstream request timeout")
    assert 0.45 <= elapsed < 2.0


@pytest_twisted.ensureDeferred
async def test_slow_backend_within_timeout_is_fine_and_past_it_504(env: Env) -> None:
    r = await http_request("GET", env.url("/slow/_sleep?ms=50"))
    assert r.status == 200 and json.loads(r.body)["uri"] == "/_sleep?ms=50"
    r = await http_request("GET", env.url("/slow/_sleep?ms=800"))
    assert (r.status, r.body) == (504, b"upstream request timeout")
    # the upstream request is abandoned, not left running
    await wait_for(lambda: env.a.requests[-1].aborted, timeout=2)


@pytest_twisted.ensureDeferred
async def test_silent_upstream_connection_closed_after_timeout(env: Env) -> None:
    r = await http_request("GET", env.url("/raw/silent"))
    assert r.status == 504
    (conn,) = env.raw.connections
    await wait_for(lambda: conn.transport.disconnected, timeout=2)


@pytest.mark.parametrize("path", ["/raw/garbage", "/raw/badstatus", "/raw/badlength", "/raw/nocolon"])
@pytest_twisted.ensureDeferred
async def test_malformed_upstream_response_is_502(env: Env, path: str) -> None:
    r = await http_request("GET", env.url(path))
    assert (r.status, r.body) == (502, b"upstream sent a malformed response")


@pytest.mark.parametrize("path", ["/raw/reset", "/raw/close"])
@pytest_twisted.ensureDeferred
async def test_upstream_reset_before_headers_is_503(env: Env, path: str) -> None:
    r = await http_request("GET", env.url(path))
    assert r.status == 503
    assert r.body.startswith(b"upstream connect error or disconnect/reset before headers")


@pytest.mark.parametrize("path", ["/_close_mid?size=100000", "/raw/badchunk"])
@pytest_twisted.ensureDeferred
async def test_reset_mid_response_truncates_and_closes(env: Env, path: str) -> None:
    res = await raw_exchange(env.gw.port, f"GET {path} HTTP/1.1\r\nHost: gw.test\r\n\r\n".encode(), timeout=3)
    assert res.closed, "the gateway must close the client connection"
    assert res.status == 200
    head, _, body = res.data.partition(b"\r\n\r\n")
    if b"content-length: 100000" in head.lower():
        assert len(body) < 100000
    else:
        # chunked: the terminating zero-size chunk must never be sent
        assert b"transfer-encoding: chunked" in head.lower()
        assert not body.endswith(b"0\r\n\r\n")


@pytest_twisted.ensureDeferred
async def test_client_disconnect_aborts_upstream_request(env: Env) -> None:
    client = await raw_connect(env.gw.port)
    client.transport.write(b"GET /_hang HTTP/1.1\r\nHost: gw.test\r\n\r\n")
    await wait_for(lambda: env.a.requests)
    (seen,) = env.a.requests
    assert not seen.aborted
    client.transport.abortConnection()
    await wait_for(lambda: seen.aborted, timeout=2)


@pytest_twisted.ensureDeferred
async def test_client_disconnect_mid_upload_aborts_upstream(env: Env, raw_server: Any, config_dir: Any,
                                                            gateway: Any) -> None:
    silent = raw_server(None)
    d = config_dir(ONE_UPSTREAM.format(port=silent.port))
    gw = gateway(d)
    client = await raw_connect(gw.port)
    client.transport.write(b"PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + b"z" * 1000)
    await wait_for(lambda: b"z" * 1000 in silent.data)
    (conn,) = silent.connections
    client.transport.abortConnection()
    await wait_for(lambda: conn.transport is None or conn.transport.disconnected, timeout=2)


# ---------------------------------------------------------------------------
# Plugins on the real path
# ---------------------------------------------------------------------------


class Gate:
    """``gate: {mode: deny|raise|garbage|allow}``: a test plugin."""

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Any, scope: Any) -> Any:
        return options["mode"]

    @sdk.hookimpl
    def twistgw_authenticate(self, ctx: Any, options: Any) -> Any:
        if options == "deny":
            return sdk.Deny(403, b"gate says no", headers=((b"x-gate", b"closed"),))
        if options == "raise":
            raise RuntimeError("gate exploded")
        if options == "garbage":
            return 42
        ctx.headers.setRawHeaders(b"x-gate", [b"passed"])
        return sdk.Allow()


GATE_CONFIG = """\
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: one}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {port}}}]}}}}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {{name: v}}
spec:
  virtualHost:
    options: {{gate: {{mode: deny}}}}
    routes:
    - matchers: [{{prefix: /allow}}]
      routeAction: {{single: {{upstream: {{name: one}}}}}}
      options: {{gate: {{mode: allow}}}}
    - matchers: [{{prefix: /raise}}]
      routeAction: {{single: {{upstream: {{name: one}}}}}}
      options: {{gate: {{mode: raise}}}}
    - matchers: [{{prefix: /garbage}}]
      routeAction: {{single: {{upstream: {{name: one}}}}}}
      options: {{gate: {{mode: garbage}}}}
    - matchers: [{{prefix: /}}]
      routeAction: {{single: {{upstream: {{name: one}}}}}}
"""


@pytest_twisted.ensureDeferred
async def test_plugin_decisions_through_the_proxy(backend: Any, config_dir: Any, gateway: Any) -> None:
    gw = gateway(config_dir(GATE_CONFIG.format(port=backend.port)), plugins=[("gate", Gate())])
    r = await http_request("GET", gw.url("/x"))
    assert (r.status, r.body, r.header("x-gate"), r.header("content-type")) == (
        403, b"gate says no", "closed", "text/plain")
    for path in ("/raise", "/garbage"):
        r = await http_request("GET", gw.url(path))
        assert (r.status, r.body) == (500, b"Internal Server Error")
    assert backend.requests == []
    r = await http_request("GET", gw.url("/allow"), headers={"x-gate": "forged"})
    assert headers_of(seen_json(r))["x-gate"] == ["passed"]
    assert len(backend.requests) == 1


@pytest_twisted.ensureDeferred
async def test_many_sequential_requests_reuse_pooled_connections(env: Env) -> None:
    for i in range(20):
        r = await http_request("GET", env.url(f"/x/{i}"))
        assert r.status == 200
    # one backend, persistent pool: far fewer connections than requests
    assert env.a.site.connections_made <= 2
    await sleep(0)


class Router:
    """``twistgw_route_match``: ``x-route: N`` picks route N; ``x-route: raise``
    raises; ``x-route: garbage`` returns junk; ``x-route: foreign`` returns
    a route of another virtual service."""

    foreign: Any = None

    @sdk.hookimpl
    def twistgw_route_match(self, ctx: Any, virtual_service: Any) -> Any:
        choice = ctx.header("x-route")
        if choice is None:
            return None
        if choice == "raise":
            raise RuntimeError("router exploded")
        if choice == "garbage":
            return "routes[0]"
        if choice == "foreign":
            return self.foreign
        return virtual_service.routes[int(choice)]


ROUTER_CONFIG = """\
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: v}
spec:
  virtualHost:
    domains: [gw.test]
    routes:
    - matchers: [{prefix: /a}]
      directResponseAction: {status: 200, body: route-a}
    - matchers: [{prefix: /b}]
      directResponseAction: {status: 200, body: route-b}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: other}
spec:
  virtualHost:
    domains: [other.test]
    routes:
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200, body: other-0}
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200, body: other-1}
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200, body: other-2}
"""


@pytest_twisted.ensureDeferred
async def test_route_match_plugin(config_dir: Any, gateway: Any) -> None:
    router = Router()
    gw = gateway(config_dir(ROUTER_CONFIG), plugins=[("router", router)])
    other = gw.service.snapshot.config.virtual_services[1]

    async def get(path: str, route: str | None) -> Any:
        headers = {"Host": "gw.test"}
        if route is not None:
            headers["x-route"] = route
        return await http_request("GET", gw.url(path), headers=headers)

    assert (await get("/a", None)).body == b"route-a"  # the core matcher
    assert (await get("/a", "1")).body == b"route-b"  # the plugin's choice wins
    for bad in ("raise", "garbage", "foreign"):
        router.foreign = other.routes[2] if bad == "foreign" else None
        r = await get("/a", bad)
        assert (r.status, r.body) == (500, b"Internal Server Error"), bad
    router.foreign = other.routes[0]  # equal index, but another virtual service's route
    assert (await get("/a", "foreign")).status == 500
    assert gw.service.gateway.inflight == 0


class SlowAllow:
    """``slow: {ms: N}``: admits after N ms (an asynchronous plugin)."""

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Any, scope: Any) -> Any:
        return options["ms"] / 1000

    @sdk.hookimpl
    async def twistgw_authenticate(self, ctx: Any, options: Any) -> Any:
        await sleep(options)
        return sdk.Allow()


@pytest.mark.parametrize("chunked", [False, True])
@pytest_twisted.ensureDeferred
async def test_upload_waits_for_an_async_plugin_then_streams_whole(backend: Any, config_dir: Any, gateway: Any,
                                                                  chunked: bool) -> None:
    text = ONE_UPSTREAM.format(port=backend.port).replace(
        "routes: [", "options: {slow: {ms: 300}}\n    routes: [")
    gw = gateway(config_dir(text), plugins=[("slow", SlowAllow())])
    body = bytes(range(256)) * 20000  # ~5 MB: far past the pre-decision buffer
    producer: Any = ChunkedBody(body[i:i + 50000] for i in range(0, len(body), 50000)) if chunked else body
    r = await http_request("PUT", gw.url("/up"), body=producer, timeout=30)
    echo = seen_json(r)
    assert echo["body_length"] == len(body)
    assert echo["body_sha256"] == hashlib.sha256(body).hexdigest()


@pytest_twisted.ensureDeferred
async def test_ipv6_literal_and_hostname_upstreams(backend: Any, config_dir: Any, gateway: Any) -> None:
    from support.http import EchoBackend, _TrackingSite, static_upstream_yaml, vs_yaml

    v6 = reactor.listenTCP(0, _TrackingSite(EchoBackend("v6")), interface="::1")
    try:
        text = "---\n".join([
            static_upstream_yaml("byname", [backend.port]).replace("127.0.0.1", "localhost"),
            static_upstream_yaml("v6", [v6.getHost().port]).replace("127.0.0.1", '"::1"'),
            vs_yaml(name="n", upstream="byname", domains=["name.test"]),
            vs_yaml(name="s", upstream="v6", domains=["v6.test"]),
        ])
        gw = gateway(config_dir(text))
        r = await http_request("GET", gw.url("/n"), headers={"Host": "name.test"})
        assert seen_json(r)["server"] == "backend"
        r = await http_request("GET", gw.url("/s"), headers={"Host": "v6.test"})
        assert seen_json(r)["server"] == "v6"
    finally:
        await v6.stopListening()


def _open_fds() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


@pytest_twisted.ensureDeferred
async def test_failures_leak_no_file_descriptors(env: Env) -> None:
    paths = ["/refused", "/raw/garbage", "/raw/reset", "/raw/close", "/raw/badchunk", "/_close_mid",
             "/empty", "/raw/silent"]
    for p in paths:  # warm up (pool, lazily opened files)
        await raw_exchange(env.gw.port, env.raw_get(p), timeout=3)
    await sleep(0.2)
    baseline = _open_fds()
    for _ in range(3):
        for p in paths:
            await raw_exchange(env.gw.port, env.raw_get(p), timeout=3)
    await sleep(0.2)
    assert _open_fds() <= baseline + 2, (baseline, _open_fds())
