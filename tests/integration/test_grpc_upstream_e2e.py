"""HTTP/2 and gRPC upstreams end to end: a real grpcio server behind the
gateway (``useHttp2: true``), reached by HTTP/1.1 clients — grpc-web as a
browser sends it (binary and text, trailers framed in the body), and plain
``application/grpc`` with ``TE: trailers`` (the trailers in the last chunk)
— unary, server- and client-streaming calls, errors with details and
trailing metadata, ``grpc-timeout``, multiplexing and ``maxConcurrentStreams``,
a slow reader, a graceful GOAWAY, TLS with ALPN h2, JWT in front."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from support.grpc_backend import GrpcBackend, frame, start_grpc_backend, unframe
from twisted.internet import defer, endpoints, protocol, reactor

from support.http import parse_responses, raw_exchange, sleep, wait_for
from support.pki import TestCA


@pytest.fixture
def grpc_backend() -> Any:
    started: list[GrpcBackend] = []

    def start(credentials: Any = None) -> GrpcBackend:
        b = start_grpc_backend(credentials)
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop(0)


def config(port: int, extra: str = "", ssl: str = "", route_options: str = "") -> str:
    return f"""\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: grpc, namespace: default}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: {port}}}]}}
  useHttp2: true
{extra}{ssl}---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  virtualHost:
    domains: ["*"]
    routes:
    - matchers: [{{prefix: /}}]
{route_options}      routeAction: {{single: {{upstream: {{name: grpc}}}}}}
"""


def request(path: str, body: bytes, content_type: str = "application/grpc-web+proto", *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: grpc.test", f"Content-Type: {content_type}", "X-Grpc-Web: 1",
            f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(data: bytes) -> tuple[bytes, bytes, list[tuple[bytes, bytes]]]:
    """(head, body, trailers) of one chunked HTTP/1.1 response."""
    head, _, rest = data.partition(b"\r\n\r\n")
    body = b""
    while True:
        line, _, rest = rest.partition(b"\r\n")
        size = int(line, 16)
        if size == 0:
            break
        body, rest = body + rest[:size], rest[size + 2:]
    trailers = []
    for line in rest.split(b"\r\n"):
        if line:
            name, _, value = line.partition(b":")
            trailers.append((name.strip(), value.strip()))
    return head, body, trailers


def grpc_web_parts(body: bytes) -> tuple[list[bytes], dict[bytes, bytes]]:
    """The messages, and the trailer frame's fields, of a grpc-web response body."""
    messages, trailers = [], {}
    for flags, payload in unframe(body):
        if flags & 0x80:
            for line in payload.split(b"\r\n"):
                if line:
                    name, _, value = line.partition(b":")
                    trailers[name.strip()] = value.strip()
        else:
            messages.append(payload)
    return messages, trailers


def until_end(data: bytes) -> bool:
    return data.endswith(b"0\r\n\r\n") or (b"\r\n0\r\n" in data and data.endswith(b"\r\n\r\n"))


async def call(gw: Any, data: bytes, timeout: float = 5.0) -> bytes:
    result = await raw_exchange(gw.port, data, timeout=timeout, until=until_end)
    return result.data


def started(coroutine: Any) -> Any:
    """Run ``coroutine`` now (a Deferred of its result)."""
    return defer.ensureDeferred(coroutine)


def one_response(data: bytes) -> bool:
    return bool(parse_responses(data))


def grpc_answer(result: Any, status: bytes = b"14") -> int:
    """The HTTP status of the gateway's own answer to a gRPC or grpc-web
    request: it comes in gRPC's trailers-only form (HTTP 200, grpc-status
    in the head, Envoy's mapping: ``status``), so only 503 and 504 (both 14,
    UNAVAILABLE) are told apart by grpc-message."""
    answer = result.responses()[0]
    assert answer.status == 200 and answer.body == b"", answer
    assert answer.header(b"grpc-status") == status, answer
    message = answer.header(b"grpc-message") or b""
    return 504 if b"timeout" in message else 503


@pytest_twisted.ensureDeferred
async def test_grpc_web_unary_gets_its_trailers_in_the_body(grpc_backend: Any, config_dir: Any,
                                                            gateway: Any) -> None:
    backend = grpc_backend()
    gw = gateway(config_dir(config(backend.port)))
    data = await call(gw, request("/test.Echo/Unary", frame(b"hello"), "application/grpc-web+proto", "X-Echo: hi"))
    head, body, trailers = chunked(data)
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"Content-Type: application/grpc-web+proto" in head
    assert trailers == []  # in the body, not as HTTP trailers
    messages, fields = grpc_web_parts(body)
    assert messages == [b"hello"]
    assert fields[b"grpc-status"] == b"0" and fields[b"x-echo"] == b"hi"
    method, metadata = backend.seen[-1]
    assert method == "Unary" and metadata["x-grpc-web"] == "1"  # end-to-end headers reach the service


@pytest_twisted.ensureDeferred
async def test_grpc_web_text_is_base64_both_ways(grpc_backend: Any, config_dir: Any, gateway: Any) -> None:
    backend = grpc_backend()
    gw = gateway(config_dir(config(backend.port)))
    # two messages, each base64 on its own (padded), as grpc-web clients send them
    body = base64.b64encode(frame(b"a")) + base64.b64encode(frame(b"bb"))
    data = await call(gw, request("/test.Echo/ClientStream", body, "application/grpc-web-text",
                                  "Accept: application/grpc-web-text"))
    head, text, _ = chunked(data)
    assert b"Content-Type: application/grpc-web-text+proto" in head
    messages, fields = grpc_web_parts(base64.b64decode(text))
    assert messages == [b"a+bb"] and fields[b"grpc-status"] == b"0"


@pytest_twisted.ensureDeferred
async def test_errors_carry_status_details_and_trailing_metadata(grpc_backend: Any, config_dir: Any,
                                                                 gateway: Any) -> None:
    backend = grpc_backend()
    gw = gateway(config_dir(config(backend.port)))
    data = await call(gw, request("/test.Echo/Unary", frame(b"fail:NOT_FOUND:no such pet")))
    head, body, _ = chunked(data)
    assert head.startswith(b"HTTP/1.1 200 ")
    messages, fields = grpc_web_parts(body) if body else ([], {})
    # grpcio answers an abort trailers-only: the status is in the head then
    where = fields or dict((k.lower(), v) for k, v in (line.split(b": ", 1) for line in head.split(b"\r\n")[1:]))
    assert messages == []
    assert where[b"grpc-status"] == b"5" and where[b"grpc-message"] == b"no such pet"
    assert where[b"x-detail"] == b"no such pet"


@pytest_twisted.ensureDeferred
async def test_server_streaming_and_http11_grpc_with_te_trailers(grpc_backend: Any, config_dir: Any,
                                                                 gateway: Any) -> None:
    backend = grpc_backend()
    gw = gateway(config_dir(config(backend.port)))
    data = await call(gw, request("/test.Echo/ServerStream", frame(b"3")))
    messages, fields = grpc_web_parts(chunked(data)[1])
    assert messages == [b"m0", b"m1", b"m2"] and fields[b"grpc-status"] == b"0"
    # an HTTP/1.1 client speaking plain gRPC to the HTTP/2 upstream: trailers in the last chunk
    data = await call(gw, request("/test.Echo/Unary", frame(b"x"), "application/grpc", "TE: trailers",
                                  "X-Echo: t"))
    head, body, trailers = chunked(data)
    assert b"content-type: application/grpc" in head.lower()
    assert unframe(body) == [(0, b"x")]
    assert (b"grpc-status", b"0") in trailers and (b"x-echo", b"t") in trailers
    # without TE: trailers, the trailers are dropped (RFC 9110 §6.5.1)
    data = await call(gw, request("/test.Echo/Unary", frame(b"x"), "application/grpc"))
    assert chunked(data)[2] == []


@pytest_twisted.ensureDeferred
async def test_grpc_timeout_bounds_the_wait(grpc_backend: Any, config_dir: Any, gateway: Any) -> None:
    backend = grpc_backend()
    gw = gateway(config_dir(config(backend.port, route_options="      options: {timeout: 10s}\n")))
    started = time.monotonic()
    result = await raw_exchange(gw.port, request("/test.Echo/Unary", frame(b"sleep:3"), "application/grpc",
                                                 "TE: trailers", "Grpc-Timeout: 300m"), timeout=5,
                                until=one_response)
    assert grpc_answer(result, b"4") == 504  # the client's deadline passed: DEADLINE_EXCEEDED, as Envoy's
    assert time.monotonic() - started < 2.0
    # a grpc-timeout longer than the route's never extends it
    gw2 = gateway(config_dir(config(backend.port, route_options="      options: {timeout: 0.3s}\n")))
    result = await raw_exchange(gw2.port, request("/test.Echo/Unary", frame(b"sleep:3"), "application/grpc",
                                                  "TE: trailers", "Grpc-Timeout: 20S"), timeout=5,
                                 until=one_response)
    assert grpc_answer(result) == 504  # the route's own timeout: 14, UNAVAILABLE


@pytest_twisted.ensureDeferred
async def test_requests_share_one_connection_until_max_concurrent_streams(grpc_backend: Any, config_dir: Any,
                                                                           gateway: Any) -> None:
    backend = grpc_backend()
    gw = gateway(config_dir(config(backend.port)))
    pool = gw.service.gateway.forwarder.h2
    calls = [started(call(gw, request("/test.Echo/Unary", frame(b"sleep:0.3")))) for _ in range(6)]
    await sleep(0.15)
    conns = [c for cs in pool.conns.values() for c in cs]
    assert len(conns) == 1 and len(conns[0].streams) == 6  # multiplexed
    for c in calls:
        assert b"grpc-status:0" in await c
    gw2 = gateway(config_dir(config(backend.port, extra="  maxConcurrentStreams: 2\n")))
    pool2 = gw2.service.gateway.forwarder.h2
    calls = [started(call(gw2, request("/test.Echo/Unary", frame(b"sleep:0.3")))) for _ in range(5)]
    await sleep(0.15)
    conns = [c for cs in pool2.conns.values() for c in cs]
    assert len(conns) == 3 and max(len(c.streams) for c in conns) == 2  # a new connection when full
    for c in calls:
        assert b"grpc-status:0" in await c


class _Tail(protocol.Protocol):
    """A client that counts what it reads and keeps the last bytes."""

    def __init__(self) -> None:
        self.count = 0
        self.tail = b""

    def dataReceived(self, data: bytes) -> None:
        self.count += len(data)
        self.tail = (self.tail + data)[-512:]


@pytest_twisted.ensureDeferred
async def test_a_slow_reader_holds_the_window_not_the_memory(grpc_backend: Any, config_dir: Any,
                                                              gateway: Any) -> None:
    backend = grpc_backend()
    window = 65535
    gw = gateway(config_dir(config(backend.port, extra=f"  initialStreamWindowSize: {window}\n"
                                   f"  initialConnectionWindowSize: {window}\n")))
    client = _Tail()
    await endpoints.connectProtocol(endpoints.TCP4ClientEndpoint(reactor, "127.0.0.1", gw.port), client)
    client.transport.pauseProducing()  # the client reads nothing
    count, size = 1600, 16384  # 26 MB: more than the sockets' buffers hold
    client.transport.write(request("/test.Echo/ServerStream", frame(b"%d:%d" % (count, size))))
    pool = gw.service.gateway.forwarder.h2
    await wait_for(lambda: any(s.paused for cs in pool.conns.values() for c in cs for s in c.streams.values()),
                   timeout=10)
    await sleep(0.5)
    stream = next(s for cs in pool.conns.values() for c in cs for s in c.streams.values())
    # what the upstream sent ahead of the client is at most the window
    assert 0 < stream.unacked <= window
    held = stream.unacked
    await sleep(0.3)
    assert stream.unacked == held  # the upstream waits
    client.transport.resumeProducing()
    await wait_for(lambda: client.tail.endswith(b"0\r\n\r\n"), timeout=30)
    assert client.count > count * (size + 5)
    assert b"\x80\x00\x00\x00\x1egrpc-status:0\r\ngrpc-message:\r\n" in client.tail
    client.transport.abortConnection()


@pytest_twisted.ensureDeferred
async def test_graceful_goaway_lets_open_streams_finish(grpc_backend: Any, config_dir: Any, gateway: Any) -> None:
    backend = grpc_backend()
    gw = gateway(config_dir(config(backend.port)))
    slow = started(call(gw, request("/test.Echo/Unary", frame(b"sleep:0.5"))))
    await sleep(0.2)
    from twisted.internet.threads import deferToThread
    stopping = deferToThread(backend.stop, 3)  # GOAWAY, in-flight calls finish
    assert b"grpc-status:0" in await slow
    await stopping


@pytest_twisted.ensureDeferred
async def test_tls_upstream_speaks_h2_by_alpn(grpc_backend: Any, config_dir: Any, gateway: Any,
                                              tmp_path: Path) -> None:
    import grpc
    ca = TestCA()
    leaf = ca.issue("grpc.test", dns=["grpc.test"])
    backend = grpc_backend(grpc.ssl_server_credentials([(leaf.key_pem, leaf.cert_pem)]))
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    ssl = f"  sslConfig: {{sni: grpc.test, sslFiles: {{rootCa: {tmp_path / 'ca.crt'}}}}}\n"
    gw = gateway(config_dir(config(backend.port, ssl=ssl)))
    data = await call(gw, request("/test.Echo/Unary", frame(b"tls")))
    messages, fields = grpc_web_parts(chunked(data)[1])
    assert messages == [b"tls"] and fields[b"grpc-status"] == b"0"
    # a wrong name is refused (verified by name, always)
    ssl = f"  sslConfig: {{sni: other.test, sslFiles: {{rootCa: {tmp_path / 'ca.crt'}}}}}\n"
    gw2 = gateway(config_dir(config(backend.port, ssl=ssl)))
    result = await raw_exchange(gw2.port, request("/test.Echo/Unary", frame(b"tls")), timeout=5)
    assert grpc_answer(result) == 503


@pytest_twisted.ensureDeferred
async def test_unreachable_h2_upstream_is_503(config_dir: Any, gateway: Any, unused_port: int) -> None:
    gw = gateway(config_dir(config(unused_port)))
    result = await raw_exchange(gw.port, request("/test.Echo/Unary", frame(b"x")), timeout=5)
    assert grpc_answer(result) == 503


@pytest_twisted.ensureDeferred
async def test_jwt_and_rbac_in_front_of_a_grpc_service(grpc_backend: Any, config_dir: Any, gateway: Any) -> None:
    import json

    import jwt
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo).decode()

    def token(**claims: Any) -> str:
        return jwt.encode({"iss": "https://issuer.test", "sub": "alice", "exp": int(time.time()) + 3600, **claims},
                          key, algorithm="RS256")
    backend = grpc_backend()
    options = ("      options:\n"
               f"        jwt: {{providers: {{p: {{issuer: https://issuer.test, jwks: {{local: {{key: {json.dumps(pem)}}}}}}}}}}}\n"
               "        rbac: {policies: {callers: {principals: [{jwtPrincipal: {claims: {role: caller}}}]}}}\n")
    gw = gateway(config_dir(config(backend.port, route_options=options)), load_entry_points=True)
    body = frame(b"secret")
    # the refusals in gRPC's trailers-only form (HTTP 200, grpc-status in the head; docs/grpc.md)
    denied = await raw_exchange(gw.port, request("/test.Echo/Unary", body), timeout=5, until=one_response)
    assert denied.status == 200 and denied.responses()[0].header(b"grpc-status") == b"16"  # was 401
    wrong = await raw_exchange(gw.port, request("/test.Echo/Unary", body, "application/grpc-web+proto",
                                                f"Authorization: Bearer {token(role='guest')}"),
                               timeout=5, until=one_response)
    assert wrong.status == 200 and wrong.responses()[0].header(b"grpc-status") == b"7"  # was 403
    data = await call(gw, request("/test.Echo/Unary", body, "application/grpc-web+proto",
                                  f"Authorization: Bearer {token(role='caller')}"))
    messages, fields = grpc_web_parts(chunked(data)[1])
    assert messages == [b"secret"] and fields[b"grpc-status"] == b"0"
    assert "authorization" not in backend.seen[-1][1]  # the token stays at the gateway (forwardToken unset)
    assert len(backend.seen) == 1  # the refused calls never reached the service


@pytest_twisted.ensureDeferred
async def test_a_discovered_service_port_named_grpc_speaks_http2(grpc_backend: Any, config_dir: Any,
                                                                 gateway: Any) -> None:
    """Gloo's gRPC guide: the Service's port is named ``grpc`` (or annotated
    ``gloo.solo.io/h2_service: "true"``) and the route names the discovered
    Upstream ``default-grpcstore-demo-80``."""
    backend = grpc_backend()
    text = f"""\
apiVersion: v1
kind: Service
metadata: {{name: grpcstore-demo, namespace: default}}
spec:
  ports: [{{name: grpc, port: 80, protocol: TCP, targetPort: 8080}}]
  selector: {{app: grpcstore-demo}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: grpcstore-demo, namespace: default}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: grpc, port: {backend.port}}}]}}]
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: grpc, namespace: gloo-system}}
spec:
  virtualHost:
    routes:
      - matchers:
          - prefix: /
        routeAction:
          single:
            upstream:
              name: default-grpcstore-demo-80
              namespace: gloo-system
"""
    gw = gateway(config_dir(text))
    data = await call(gw, request("/test.Echo/Unary", frame(b"store")))
    messages, fields = grpc_web_parts(chunked(data)[1])
    assert messages == [b"store"] and fields[b"grpc-status"] == b"0"
