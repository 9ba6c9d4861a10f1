"""Tracing end to end: a real ``twist twistgw`` with a Gloo Gateway whose
``httpConnectionManagerSettings.tracing`` names a real OTLP/gRPC receiver
(``support.otlp``, decoding with opentelemetry-proto), a real backend that
records the trace headers it got, a real key-set server for a JWT route.

What is checked: the trace id the backend sees is the exported server
span's, and its parent the gateway's client span, itself the server span's
child; an incoming ``traceparent`` is continued (same trace, the sender's
span the parent) and a hostile one replaced; the span's attributes
(OpenTelemetry's HTTP conventions, the route, ``guid:x-request-id``, a
header tag, the auth decision) and never a credential; 5xx and an upstream
that refuses connections are ERROR; the key-set wait is a child span;
``tracePercentages`` 0 exports nothing yet propagates an unsampled
``traceparent``; ``propagate: false``; HTTP/2 clients' spans say ``2``; a
collector that is down changes nothing for requests; and Gloo's
OpenTelemetry guide's YAML loads and behaves as the guide says.
"""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from support.otlp import OtlpReceiver
from support.ports import free_port
from support.process import TwistGateway
from support.redis import RedisServer

NS = "gloo-system"
TID = "4bf92f3577b34da6a3ce929d0e0e4736"
SID = "00f067aa0ba902b7"
ISSUER = "https://issuer.trace.test"


class _Recording(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Backend"

    def do_GET(self) -> None:
        self.server.seen.append({k.lower(): v for k, v in self.headers.items()})
        body = b"ok"
        self.send_response(self.server.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _Backend(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Recording)
        self.seen: list[dict[str, str]] = []
        self.status = 200


@pytest.fixture
def backend() -> Iterator[_Backend]:
    """A real HTTP backend recording the headers of each request it got."""
    server = _Backend()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver(protocol="grpc") as rx:
        yield rx


def upstream(name: str, port: int, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "gloo.solo.io/v1", "kind": "Upstream", "metadata": {"name": name, "namespace": NS},
            "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": port}]}, **spec}}


def virtual_service(routes: list[dict[str, Any]], options: dict[str, Any] | None = None) -> dict[str, Any]:
    vh: dict[str, Any] = {"domains": ["*"], "routes": routes}
    if options:
        vh["options"] = options
    return {"apiVersion": "gateway.solo.io/v1", "kind": "VirtualService",
            "metadata": {"name": "default", "namespace": NS}, "spec": {"virtualHost": vh}}


def to(upstream_name: str, prefix: str = "/", name: str | None = None, **options: Any) -> dict[str, Any]:
    route: dict[str, Any] = {"matchers": [{"prefix": prefix}],
                             "routeAction": {"single": {"upstream": {"name": upstream_name, "namespace": NS}}}}
    if name:
        route["name"] = name
    if options:
        route["options"] = options
    return route


def traced_gateway(port: int, **tracing: Any) -> dict[str, Any]:
    settings = {"openTelemetryConfig": {"collectorUpstreamRef": {"name": "otel", "namespace": NS},
                                        "serviceName": "edge"}, **tracing}
    return {"apiVersion": "gateway.solo.io/v1", "kind": "Gateway", "metadata": {"name": "gateway-proxy", "namespace": NS},
            "spec": {"bindAddress": "127.0.0.1", "bindPort": port,
                     "httpGateway": {"options": {"httpConnectionManagerSettings": {"tracing": settings}}}}}


def write(directory: Path, documents: list[dict[str, Any]]) -> str:
    directory.mkdir(exist_ok=True)
    (directory / "gw.yaml").write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return str(directory)


def get(port: int, path: str = "/", headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    deadline = time.monotonic() + 10
    while True:  # the Gateway's listener opens beside --listen's
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.05)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": "api.example", **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def attrs(span: Any) -> dict[str, Any]:
    out = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value"))
    return out


def by_name(spans: list[Any]) -> dict[str, Any]:
    return {s.name: s for s in spans}


def start(tmp_path: Path, documents: list[dict[str, Any]]) -> TwistGateway:
    return TwistGateway(tmp_path, write(tmp_path / "config", documents))


def test_the_backend_continues_the_exported_trace(tmp_path: Path, backend: _Backend, receiver: OtlpReceiver) -> None:
    port = free_port()
    docs = [upstream("otel", receiver.port), upstream("backend", backend.server_address[1]),
            virtual_service([to("backend", name="api")]), traced_gateway(port, requestHeadersForTags=["x-tenant"],
                                                                          literalsForTags=[{"tag": "zone",
                                                                                            "value": "eu-1"}])]
    with start(tmp_path, docs):
        status, _ = get(port, "/pets?limit=1", {"traceparent": f"00-{TID}-{SID}-01", "tracestate": "rojo=1",
                                                "x-tenant": "acme", "User-Agent": "trace-test/1",
                                                "x-request-id": "rid-1"})
        assert status == 200
        spans = by_name(receiver.wait_spans(2))
    server, client = spans["ingress"], spans["router gloo-system/backend egress"]
    seen = backend.seen[0]
    sent_trace, sent_parent, flags = seen["traceparent"].split("-")[1:]
    assert sent_trace == TID == server.trace_id.hex() == client.trace_id.hex()
    assert flags == "01" and seen["tracestate"] == "rojo=1"
    assert server.parent_span_id.hex() == SID  # the client's span is the gateway span's parent
    assert client.parent_span_id == server.span_id and sent_parent == client.span_id.hex()
    assert (server.kind, client.kind) == (2, 3)  # SERVER, CLIENT
    a = attrs(server)
    assert {k: a[k] for k in ("http.request.method", "url.path", "http.route", "http.response.status_code",
                              "network.protocol.version", "user_agent.original", "server.address",
                              "client.address", "twistgw.virtual_service", "guid:x-request-id", "x-tenant",
                              "zone")} == {
        "http.request.method": "GET", "url.path": "/pets", "http.route": "api", "http.response.status_code": 200,
        "network.protocol.version": "1.1", "user_agent.original": "trace-test/1", "server.address": "api.example",
        "client.address": "127.0.0.1", "twistgw.virtual_service": f"{NS}/default",
        # the id the backend got: the client's "rid-1" is replaced on this edge listener
        # (preserveExternalRequestId is off), by a UUID4 the gateway made
        "guid:x-request-id": seen["x-request-id"],
        "x-tenant": "acme", "zone": "eu-1"}
    assert seen["x-request-id"] != "rid-1" and uuid.UUID(seen["x-request-id"]).version == 4
    assert server.status.code == 0  # UNSET for a 200, as the semantic conventions say
    c = attrs(client)
    assert c["http.response.status_code"] == 200 and c["server.port"] == backend.server_address[1]
    assert c["twistgw.upstream.retries"] == 0
    resource = {kv.key: kv.value.string_value for kv in receiver.requests[0][0].resource_spans[0].resource.attributes}
    assert resource["service.name"] == "edge"


def test_a_new_trace_and_a_hostile_traceparent(tmp_path: Path, backend: _Backend, receiver: OtlpReceiver) -> None:
    port = free_port()
    docs = [upstream("otel", receiver.port), upstream("backend", backend.server_address[1]),
            virtual_service([to("backend")]), traced_gateway(port)]
    with start(tmp_path, docs):
        assert get(port)[0] == 200
        assert get(port, headers={"traceparent": f"00-{'0' * 32}-{SID}-01"})[0] == 200
        assert get(port, headers={"traceparent": "00-" + "A" * 32 + f"-{SID}-01"})[0] == 200
        spans = receiver.wait_spans(6)
    servers = [s for s in spans if s.kind == 2]
    assert len(servers) == 3 and all(s.parent_span_id == b"" for s in servers)  # roots: nothing continued
    sent = [h["traceparent"].split("-")[1] for h in backend.seen]
    assert sorted(sent) == sorted(s.trace_id.hex() for s in servers) and "0" * 32 not in sent


def test_errors_and_an_upstream_that_refuses(tmp_path: Path, backend: _Backend, receiver: OtlpReceiver) -> None:
    port, closed = free_port(), free_port()
    backend.status = 503
    docs = [upstream("otel", receiver.port), upstream("backend", backend.server_address[1]),
            upstream("gone", closed),
            virtual_service([to("gone", "/gone"), to("backend")]), traced_gateway(port)]
    with start(tmp_path, docs):
        assert get(port, "/x")[0] == 503
        assert get(port, "/gone")[0] == 503
        spans = receiver.wait_spans(4)
    servers = [s for s in spans if s.kind == 2]
    assert all(s.status.code == 2 for s in servers)  # ERROR
    refused = next(s for s in spans if s.name == "router gloo-system/gone egress")
    assert refused.status.code == 2 and refused.status.message
    answered = next(s for s in spans if s.name == "router gloo-system/backend egress")
    assert attrs(answered)["http.response.status_code"] == 503 and answered.status.code == 2


def test_unsampled_requests_export_nothing_and_propagate(tmp_path: Path, backend: _Backend,
                                                         receiver: OtlpReceiver) -> None:
    port = free_port()
    docs = [upstream("otel", receiver.port), upstream("backend", backend.server_address[1]),
            virtual_service([to("backend", "/quiet", tracing={"propagate": False}), to("backend")]),
            traced_gateway(port, tracePercentages={"randomSamplePercentage": 0})]
    with start(tmp_path, docs):
        for _ in range(5):
            assert get(port)[0] == 200
        assert get(port, "/quiet", {"traceparent": f"00-{TID}-{SID}-01"})[0] == 200  # sampled parent: followed
        spans = receiver.wait_spans(2)
        time.sleep(1.5)  # one export delay: nothing else arrives
        assert len(receiver.spans()) == 2
    assert all(h["traceparent"].endswith("-00") for h in backend.seen[:5])
    assert "traceparent" not in backend.seen[5]  # propagate: false
    assert {s.trace_id.hex() for s in spans} == {TID}


def _jwks_server(key: rsa.RSAPrivateKey) -> tuple[http.server.ThreadingHTTPServer, int]:
    numbers = key.public_key().public_numbers()

    def b64(n: int) -> str:
        return base64.urlsafe_b64encode(n.to_bytes((n.bit_length() + 7) // 8, "big")).rstrip(b"=").decode()

    doc = json.dumps({"keys": [{"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig", "n": b64(numbers.n),
                                "e": b64(numbers.e)}]}).encode()

    class Keys(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(2.0)  # a slow key server: the first request waits for the fetch the load started
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(doc)))
            self.end_headers()
            self.wfile.write(doc)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Keys)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def _token(key: rsa.RSAPrivateKey, sub: str) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    signing = f"{part({'alg': 'RS256', 'kid': 'k1', 'typ': 'JWT'})}.{part({'iss': ISSUER, 'sub': sub, 'exp': int(time.time()) + 300})}"
    signature = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
    return signing + "." + base64.urlsafe_b64encode(signature).rstrip(b"=").decode()


def test_a_key_set_fetch_is_a_child_span_and_no_token_leaks(tmp_path: Path, backend: _Backend,
                                                            receiver: OtlpReceiver) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    keys, keys_port = _jwks_server(key)
    port = free_port()
    jwt = {"providers": {"issuer": {"issuer": ISSUER, "jwks": {"remote": {
        "url": f"http://127.0.0.1:{keys_port}/jwks.json", "upstreamRef": {"name": "keys", "namespace": NS}}}}}}
    docs = [upstream("otel", receiver.port), upstream("backend", backend.server_address[1]),
            upstream("keys", keys_port), virtual_service([to("backend", name="api")], {"jwt": jwt}),
            traced_gateway(port, requestHeadersForTags=["x-tenant"])]
    token = _token(key, "alice")
    try:
        with start(tmp_path, docs):
            assert get(port, headers={"Authorization": f"Bearer {token}", "x-tenant": "acme"})[0] == 200
            assert get(port)[0] == 401
            spans = receiver.wait_spans(4)
    finally:
        keys.shutdown()
        keys.server_close()
    servers = sorted((s for s in spans if s.kind == 2), key=lambda s: s.start_time_unix_nano)
    fetch = next(s for s in spans if s.name == "jwt.jwks_fetch")
    assert fetch.parent_span_id == servers[0].span_id and fetch.trace_id == servers[0].trace_id
    assert fetch.status.code == 0 and attrs(fetch)["jwt.provider"] == "issuer"
    allowed, denied = attrs(servers[0]), attrs(servers[1])
    assert (allowed["twistgw.auth.chain"], allowed["twistgw.auth.decision"]) == ("jwt", "allow")
    assert (denied["twistgw.auth.decision"], denied["twistgw.auth.decided_by"]) == ("deny", "jwt")
    assert allowed["x-tenant"] == "acme"
    dumped = "".join(str(s) for s in spans)
    assert token not in dumped and token.split(".")[2] not in dumped  # no credential in any span


def test_http2_clients_spans_say_2(tmp_path: Path, backend: _Backend, receiver: OtlpReceiver) -> None:
    port = free_port()
    docs = [upstream("otel", receiver.port), upstream("backend", backend.server_address[1]),
            virtual_service([to("backend")]), traced_gateway(port)]
    with start(tmp_path, docs):
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_version}", "--http2-prior-knowledge",
                              "-H", "Host: api.example", f"http://127.0.0.1:{port}/h2"],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout == "2", out
        spans = receiver.wait_spans(2)
    server = next(s for s in spans if s.kind == 2)
    assert attrs(server)["network.protocol.version"] == "2"
    assert backend.seen[0]["traceparent"].split("-")[1] == server.trace_id.hex()


def test_a_collector_that_is_down_changes_nothing(tmp_path: Path, backend: _Backend) -> None:
    port, nobody = free_port(), free_port()
    docs = [upstream("otel", nobody), upstream("backend", backend.server_address[1]),
            virtual_service([to("backend")]), traced_gateway(port)]
    with start(tmp_path, docs):
        started = time.monotonic()
        for _ in range(50):
            assert get(port)[0] == 200
        assert time.monotonic() - started < 10
    assert len(backend.seen) == 50 and all("traceparent" in h for h in backend.seen)


#: Gloo's OpenTelemetry tracing guide (docs/content/guides/observability/tracing/otel.md), step 5, as
#: written but the collector's address (a receiver on loopback) and the bind address (loopback)
GUIDE = """\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata:
  name: "opentelemetry-collector"
  namespace: gloo-system
spec:
  # REQUIRED FOR OPENTELEMETRY COLLECTION
  useHttp2: true
  static:
    hosts:
      - addr: "127.0.0.1"
        port: {collector}
---
apiVersion: gateway.solo.io/v1
kind: Gateway
metadata:
  labels:
    app: gloo
  name: gateway-proxy
  namespace: gloo-system
spec:
  bindAddress: '127.0.0.1'
  bindPort: {port}
  httpGateway:
    options:
      httpConnectionManagerSettings:
        tracing:
          openTelemetryConfig:
            collectorUpstreamRef:
              namespace: "gloo-system"
              name: "opentelemetry-collector"
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata:
  name: default
  namespace: gloo-system
spec:
  virtualHost:
    domains:
      - '*'
    routes:
      - matchers:
         - prefix: /route2
        options:
          tracing:
            routeDescriptor: CUSTOM_ROUTE_DESCRIPTOR
        directResponseAction:
          status: 200
          body: 'route2'
      - matchers:
         - prefix: /fail
        directResponseAction:
          status: 500
          body: 'failed'
      - matchers:
         - prefix: /
        directResponseAction:
          status: 200
          body: 'hello world'
"""


def test_the_gloo_guide_behaves_as_the_guide_says(tmp_path: Path, receiver: OtlpReceiver) -> None:
    port = free_port()
    directory = tmp_path / "config"
    directory.mkdir()
    (directory / "guide.yaml").write_text(GUIDE.format(collector=receiver.port, port=port))
    with TwistGateway(tmp_path, str(directory)):
        assert get(port) == (200, b"hello world")
        assert get(port, "/route2")[0] == 200
        assert get(port, "/fail")[0] == 500
        spans = receiver.wait_spans(3)
    assert [s.name for s in spans] == ["ingress", "CUSTOM_ROUTE_DESCRIPTOR", "ingress"]
    assert [s.kind for s in spans] == [2, 2, 2] and [s.parent_span_id for s in spans] == [b"", b"", b""]
    assert [s.status.code for s in spans] == [0, 0, 2]  # Unset; a 500 is Error, as the guide says
    resource = {kv.key: kv.value.string_value for kv in receiver.requests[0][0].resource_spans[0].resource.attributes}
    assert resource["service.name"] == "gateway-proxy"


def _metric(admin: int, name: str, **labels: str) -> float:
    """The sum of the admin endpoint's ``name`` samples whose labels include ``labels``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        sample, value = line.rsplit(" ", 1)
        if all(f'{k}="{v}"' in sample for k, v in labels.items()):
            total += float(value)
    return total


def _wait_metric(admin: int, name: str, at_least: float, timeout: float = 30.0, **labels: str) -> float:
    deadline = time.monotonic() + timeout
    while True:
        value = _metric(admin, name, **labels)
        if value >= at_least:
            return value
        assert time.monotonic() < deadline, f"{name}{labels} stayed at {value}, {at_least} expected"
        time.sleep(0.2)


def test_the_exporters_counters_on_the_admin_endpoint(tmp_path: Path, backend: _Backend,
                                                      receiver: OtlpReceiver) -> None:
    """``twistgw_spans_exported_total`` counts what the collector accepted;
    with the collector down, what could not be sent is counted
    ``twistgw_spans_dropped_total{reason="export_failed"}`` (and the batches
    given up ``twistgw_span_export_failures_total``), on a running gateway's
    /metrics."""
    port, admin = free_port(), free_port()
    docs = [upstream("otel", receiver.port), upstream("backend", backend.server_address[1]),
            virtual_service([to("backend")]), traced_gateway(port)]
    with TwistGateway(tmp_path, write(tmp_path / "config", docs),
                      args=("--admin", f"tcp:{admin}:interface=127.0.0.1")):
        for _ in range(3):
            assert get(port)[0] == 200
        receiver.wait_spans(6)  # a server and a client span each
        assert _wait_metric(admin, "twistgw_spans_exported_total", 6) == 6
        assert _metric(admin, "twistgw_spans_dropped_total") == 0
        receiver.stop()  # the collector goes down
        for _ in range(2):
            assert get(port)[0] == 200
        assert _wait_metric(admin, "twistgw_spans_dropped_total", 4, reason="export_failed") == 4
        assert _wait_metric(admin, "twistgw_span_export_failures_total", 1) >= 1
        assert _metric(admin, "twistgw_spans_exported_total") == 6
    assert len(receiver.spans()) == 6


def test_grpc_service_authority_is_the_collectors_authority(tmp_path: Path, backend: _Backend,
                                                            receiver: OtlpReceiver) -> None:
    """``openTelemetryConfig.grpcService.authority``: the ``:authority`` of the
    export calls the collector gets (not the address dialled)."""
    port = free_port()
    gateway = traced_gateway(port)
    otel = gateway["spec"]["httpGateway"]["options"]["httpConnectionManagerSettings"]["tracing"]
    otel["openTelemetryConfig"]["grpcService"] = {"authority": "otel-collector.observability:4317"}
    docs = [upstream("otel", receiver.port), upstream("backend", backend.server_address[1]),
            virtual_service([to("backend")]), gateway]
    with start(tmp_path, docs):
        assert get(port)[0] == 200
        receiver.wait_spans(2)
    assert receiver.authorities and set(receiver.authorities) == {"otel-collector.observability:4317"}


class _Auth(http.server.BaseHTTPRequestHandler):
    """A pass-through auth service (``/pass``: 200, allowed) and an RFC 7662
    introspection endpoint (``/introspect``: the token ``good`` is active)."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/introspect"):
            active = b"token=tok-5f3a9c" in body
            doc = json.dumps({"active": active, "sub": "alice", "exp": int(time.time()) + 300} if active
                             else {"active": False}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            doc = b""
            self.send_response(200)
        self.send_header("Content-Length", str(len(doc)))
        self.end_headers()
        self.wfile.write(doc)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


def test_auth_calls_and_the_redis_wait_are_child_spans(tmp_path: Path, backend: _Backend,
                                                       receiver: OtlpReceiver) -> None:
    """The pass-through HTTP auth call, the OAuth2 introspection call and the
    Redis rate-limit wait (a real redis-server) are each a child span of the
    request's server span, in its trace, and no token is in any span."""
    auth = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Auth)
    auth.daemon_threads = True
    threading.Thread(target=auth.serve_forever, daemon=True).start()
    auth_port = auth.server_address[1]
    port = free_port()

    def auth_config(name: str, config: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "enterprise.gloo.solo.io/v1", "kind": "AuthConfig",
                "metadata": {"name": name, "namespace": NS}, "spec": {"configs": [config]}}

    def extauth(name: str) -> dict[str, Any]:
        return {"extauth": {"configRef": {"name": name, "namespace": NS}}}

    try:
        with RedisServer(tmp_path / "redis") as redis:
            settings = {"apiVersion": "gateway.vendor.io/v1", "kind": "Settings",
                        "metadata": {"name": "default", "namespace": NS},
                        "spec": {"ratelimitServer": {"redis": {"address": redis.address}}}}
            docs = [upstream("otel", receiver.port), upstream("backend", backend.server_address[1]),
                    auth_config("pass", {"passThroughAuth": {"http": {"url": f"http://127.0.0.1:{auth_port}/pass"}}}),
                    auth_config("introspect", {"oauth2": {"accessTokenValidation": {
                        "introspectionUrl": f"http://127.0.0.1:{auth_port}/introspect", "cacheTimeout": "0s"}}}),
                    settings,
                    virtual_service([
                        to("backend", "/pass", name="pass", **extauth("pass")),
                        to("backend", "/introspect", name="introspect", **extauth("introspect")),
                        to("backend", "/limited", name="limited",
                           ratelimitBasic={"anonymousLimits": {"requestsPerUnit": 100, "unit": "HOUR"}})]),
                    traced_gateway(port)]
            with start(tmp_path, docs):
                assert get(port, "/pass")[0] == 200
                assert get(port, "/introspect", {"Authorization": "Bearer tok-5f3a9c"})[0] == 200
                assert get(port, "/limited")[0] == 200
                spans = receiver.wait_spans(9)  # each: server, client, and the child
            assert int(redis.command("DBSIZE")) >= 1  # the limit was counted in this Redis
    finally:
        auth.shutdown()
        auth.server_close()
    servers = {attrs(s)["http.route"]: s for s in spans if s.kind == 2}
    for route, child_name in (("pass", "extauth.passthrough.http"), ("introspect", "oauth2.introspection"),
                              ("limited", "ratelimit.redis")):
        server = servers[route]
        child = next(s for s in spans if s.name == child_name)
        assert child.trace_id == server.trace_id and child.parent_span_id == server.span_id, child_name
        assert child.status.code != 2 and child.end_time_unix_nano >= child.start_time_unix_nano, child_name
    dumped = "".join(str(s) for s in spans)
    assert "tok-5f3a9c" not in dumped  # the token never is in a span
