"""gRPC end to end with real grpcio on both sides (issue 33): grpcio
*clients* speaking HTTP/2 with prior knowledge (h2c) to the gateway's plain
listener (downstream HTTP/2, ``engine/http2``; and over TLS by ALPN h2 to a
``twist`` process), the gateway forwarding to a
grpcio *server* behind ``useHttp2: true`` (upstream HTTP/2,
``engine/upstream/h2*``). Every call kind, errors with details and
trailing metadata (the upstream's trailers, passed as the last HEADERS
frame), deadlines (``grpc-timeout``), and the gateway's own refusals as
gRPC statuses (trailers-only, ``core/grpc.local_reply``): JWT missing →
UNAUTHENTICATED, RBAC → PERMISSION_DENIED, no route → UNIMPLEMENTED, and
the same refusal to a grpc-web client over HTTP/1.1 in the head.

The service (``support/grpc_backend.py``) and the configuration
(``config()``) are those of ``test_grpc_upstream_e2e.py``, whose clients
speak HTTP/1.1 (grpc-web, ``TE: trailers``).
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import grpc
import jwt
import pytest
import pytest_twisted
from cryptography.hazmat.primitives import serialization
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ResponseReceived, StreamEnded, StreamReset, TrailersReceived
from cryptography.hazmat.primitives.asymmetric import rsa
from twisted.internet.threads import deferToThread

from support.grpc_backend import HOLD_LIMIT, GrpcBackend, frame, start_grpc_backend
from support.http import parse_responses, raw_exchange
from test_grpc_upstream_e2e import config, request

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PEM = KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                    serialization.PublicFormat.SubjectPublicKeyInfo).decode()
ISSUER = "https://issuer.test"
AUTH = ("      options:\n"
        f"        jwt: {{providers: {{p: {{issuer: {ISSUER}, jwks: {{local: {{key: {json.dumps(PEM)}}}}}}}}}}}\n"
        "        rbac: {policies: {callers: {principals: [{jwtPrincipal: {claims: {role: caller}}}]}}}\n")


@pytest.fixture
def grpc_backend() -> Any:
    """``grpc_backend()`` → a running grpcio service (``support/grpc_backend.py``), stopped at teardown."""
    started: list[GrpcBackend] = []

    def start(credentials: Any = None) -> GrpcBackend:
        b = start_grpc_backend(credentials)
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop(0)


def token(**claims: Any) -> str:
    return jwt.encode({"iss": ISSUER, "sub": "alice", "exp": int(time.time()) + 3600, **claims}, KEY,
                      algorithm="RS256")


def raw_grpc_call(port: int, message: bytes, timeout: bytes) -> tuple[int, dict[bytes, bytes]]:
    """One unary call over h2c by ``h2`` (no deadline of the client's own:
    only ``grpc-timeout``): the HTTP status and every field of the answer's
    header blocks (head and trailers)."""
    conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    sock = socket.create_connection(("127.0.0.1", port), timeout=HOLD_LIMIT)
    try:
        conn.initiate_connection()
        conn.send_headers(1, [(b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"gw.test"),
                              (b":path", b"/test.Echo/Unary"), (b"content-type", b"application/grpc"),
                              (b"te", b"trailers"), (b"grpc-timeout", timeout)])
        conn.send_data(1, frame(message), end_stream=True)
        sock.sendall(conn.data_to_send())
        fields: dict[bytes, bytes] = {}
        while True:
            data = sock.recv(65536)
            assert data, "the gateway closed the connection"
            for event in conn.receive_data(data):
                if isinstance(event, (ResponseReceived, TrailersReceived)):
                    fields.update(dict(event.headers))
                elif isinstance(event, StreamEnded):
                    return int(fields[b":status"]), fields
                elif isinstance(event, StreamReset):
                    raise AssertionError(f"stream reset: {event.error_code}")
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()


def channel(port: int) -> Any:
    # grpcio's insecure channel speaks h2c with prior knowledge: the preface first
    return grpc.insecure_channel(f"127.0.0.1:{port}")


def calls(ch: Any) -> dict[str, Any]:
    return {
        "unary": ch.unary_unary("/test.Echo/Unary"),
        "server": ch.unary_stream("/test.Echo/ServerStream"),
        "client": ch.stream_unary("/test.Echo/ClientStream"),
        "bidi": ch.stream_stream("/test.Echo/Bidi"),
    }


@pytest_twisted.ensureDeferred
async def test_all_four_kinds_of_call(grpc_backend: Any, config_dir: Any, gateway: Any) -> None:
    backend = grpc_backend()
    gw = gateway(config_dir(config(backend.port)))

    def run() -> None:
        with channel(gw.port) as ch:
            c = calls(ch)
            value, call = c["unary"].with_call(b"hi", metadata=(("x-echo", "1"),), timeout=5)
            assert value == b"hi" and ("x-echo", "1") in call.trailing_metadata()
            assert list(c["server"](b"3", timeout=5)) == [b"m0", b"m1", b"m2"]
            assert c["client"](iter([b"a", b"b"]), timeout=5) == b"a+b"
            assert list(c["bidi"](iter([b"x", b"y"]), timeout=5)) == [b"echo:x", b"echo:y"]
            # a streamed response larger than the client's and the gateway's windows (flow control both ways)
            big = list(c["server"](b"40:32768", timeout=10))  # 1.25 MiB: past the upstream's 1 MiB stream window
            assert len(big) == 40 and all(len(m) == 32768 for m in big)
    await deferToThread(run)
    assert [m for m, _ in backend.seen] == ["Unary", "ServerStream", "ClientStream", "Bidi", "ServerStream"]
    assert backend.seen[0][1].get("x-echo") == "1"  # the client's metadata reached the service


@pytest_twisted.ensureDeferred
async def test_errors_details_trailing_metadata_and_deadlines(grpc_backend: Any, config_dir: Any,
                                                              gateway: Any) -> None:
    backend = grpc_backend()
    gw = gateway(config_dir(config(backend.port)))

    def run() -> None:
        with channel(gw.port) as ch:
            unary = calls(ch)["unary"]
            with pytest.raises(grpc.RpcError) as e:
                unary(b"fail:NOT_FOUND:no such pet", timeout=5)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND and e.value.details() == "no such pet"
            assert ("x-detail", "no such pet") in e.value.trailing_metadata()
            # the service holds its answer until the call is over: the deadline
            # surely passes first, whichever side (grpcio's own timer, or the
            # gateway's grpc-timeout) reports it, and both say DEADLINE_EXCEEDED
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as e:
                unary(b"hold", timeout=0.3)
            assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert time.monotonic() - started < HOLD_LIMIT / 2  # not the held answer
            assert backend.holding.is_set()  # the call reached the service
            backend.release()
            # the connection is still good after the cancelled call
            assert unary(b"after", timeout=5) == b"after"
    await deferToThread(run)


@pytest_twisted.ensureDeferred
async def test_the_gateway_answers_a_passed_grpc_timeout_with_deadline_exceeded(
        grpc_backend: Any, config_dir: Any, gateway: Any) -> None:
    """The gateway's side alone: a client that sends ``grpc-timeout: 200m`` but
    keeps no deadline of its own gets the gateway's trailers-only answer,
    ``grpc-status`` 4 (DEADLINE_EXCEEDED, as Envoy's), not 14 (a 504's);
    the service holds its answer until then, so only the gateway can answer."""
    backend = grpc_backend()
    gw = gateway(config_dir(config(backend.port)))
    try:
        status, fields = await deferToThread(raw_grpc_call, gw.port, b"hold", b"200m")
    finally:
        backend.release()
    assert status == 200
    assert fields.get(b"grpc-status") == b"4", fields
    assert backend.holding.is_set()


@pytest_twisted.ensureDeferred
async def test_refusals_are_grpc_statuses(grpc_backend: Any, config_dir: Any, gateway: Any) -> None:
    backend = grpc_backend()
    gw = gateway(config_dir(config(backend.port, route_options=AUTH)), load_entry_points=True)

    def run() -> None:
        with channel(gw.port) as ch:
            unary = calls(ch)["unary"]
            with pytest.raises(grpc.RpcError) as e:
                unary(b"x", timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as e:
                unary(b"x", timeout=5, metadata=(("authorization", f"Bearer {token(role='guest')}"),))
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert e.value.details()  # grpc-message: the answer's text
            value = unary(b"ok", timeout=5, metadata=(("authorization", f"Bearer {token(role='caller')}"),))
            assert value == b"ok"
    await deferToThread(run)
    assert len(backend.seen) == 1  # the refused calls never reached the service
    assert "authorization" not in backend.seen[0][1]  # the token stays at the gateway


@pytest_twisted.ensureDeferred
async def test_no_route_is_unimplemented(grpc_backend: Any, config_dir: Any, gateway: Any) -> None:
    backend = grpc_backend()
    text = config(backend.port).replace("[{prefix: /}]", "[{prefix: /test.Echo/}]")
    gw = gateway(config_dir(text))

    def run() -> None:
        with channel(gw.port) as ch:
            with pytest.raises(grpc.RpcError) as e:
                ch.unary_unary("/other.Svc/Call")(b"x", timeout=5)
            assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
            assert calls(ch)["unary"](b"routed", timeout=5) == b"routed"
    await deferToThread(run)


@pytest_twisted.ensureDeferred
async def test_grpc_web_refusal_is_trailers_only_in_the_head(grpc_backend: Any, config_dir: Any,
                                                             gateway: Any) -> None:
    """A grpc-web client (HTTP/1.1) refused by JWT reads grpc-status 16 from
    the head of an HTTP 200, as Envoy answers it."""
    backend = grpc_backend()
    gw = gateway(config_dir(config(backend.port, route_options=AUTH)), load_entry_points=True)
    result = await raw_exchange(gw.port, request("/test.Echo/Unary", frame(b"x")), timeout=5,
                                until=lambda data: bool(parse_responses(data)))
    answer = result.responses()[0]
    assert answer.status == 200 and answer.body == b""
    assert answer.header(b"grpc-status") == b"16" and answer.header(b"grpc-message")
    assert answer.header(b"content-type") == b"application/grpc-web+proto"
    assert not backend.seen


def test_grpc_over_tls_by_alpn_h2(grpc_backend: Any, tmp_path: Any) -> None:
    """A grpcio client with TLS credentials (ALPN h2) to a ``twist``
    process's ``--listen ssl:`` endpoint, to the same service behind it."""
    from support.pki import TestCA
    from support.process import TwistGateway

    ca = TestCA()
    cert, key = ca.issue("grpc.test", dns=["grpc.test"]).write(tmp_path, "tls")
    backend = grpc_backend()
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.yaml").write_text(config(backend.port))
    with TwistGateway(tmp_path, str(tmp_path / "cfg"),
                      listen=f"ssl:{{port}}:privateKey={key}:certKey={cert}:interface=127.0.0.1") as gw:
        credentials = grpc.ssl_channel_credentials(root_certificates=ca.pem)
        with grpc.secure_channel(f"127.0.0.1:{gw.port}", credentials,
                                 options=(("grpc.ssl_target_name_override", "grpc.test"),)) as ch:
            c = calls(ch)
            value, call = c["unary"].with_call(b"tls", metadata=(("x-echo", "2"),), timeout=10)
            assert value == b"tls" and ("x-echo", "2") in call.trailing_metadata()
            assert list(c["bidi"](iter([b"p", b"q"]), timeout=5)) == [b"echo:p", b"echo:q"]
            with pytest.raises(grpc.RpcError) as e:
                ch.unary_unary("/test.Echo/Unary")(b"fail:ABORTED:over tls", timeout=5)
            assert e.value.code() == grpc.StatusCode.ABORTED and e.value.details() == "over tls"
