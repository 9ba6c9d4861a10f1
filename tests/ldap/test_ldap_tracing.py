"""LDAP binds and searches as child spans of the request's span: a real
``twist twistgw`` with a traced Gloo Gateway, the real slapd, a real OTLP/gRPC
receiver (``support.otlp``). The spans name the operation and the server,
never the password; a refused bind is the request's ``deny`` decision."""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
import time
from pathlib import Path
from typing import Any

from ldap_helpers import basic, ldap_config
from support.otlp import OtlpReceiver
from support.ports import free_port
from support.process import TwistGateway


class _Ok(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


def _get(port: int, headers: dict[str, str]) -> int:
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/team", headers={"Host": "api.example", **headers})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _attrs(span: Any) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in span.attributes}


def test_ldap_binds_are_child_spans(tmp_path: Path, slapd_open: Any) -> None:
    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    port = free_port()
    with OtlpReceiver(protocol="grpc") as rx:
        text = ldap_config(slapd_open.url, cacheTtl=0).replace(
            "hosts: [{addr: 127.0.0.1, port: 9}]", f"hosts: [{{addr: 127.0.0.1, port: {backend.server_address[1]}}}]")
        text += f"""---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: otel, namespace: default}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {rx.port}}}]}}}}
---
apiVersion: gateway.solo.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  bindAddress: 127.0.0.1
  bindPort: {port}
  httpGateway:
    options:
      httpConnectionManagerSettings:
        tracing:
          openTelemetryConfig: {{collectorUpstreamRef: {{name: otel}}}}
"""
        (tmp_path / "cfg").mkdir()
        (tmp_path / "cfg" / "config.yaml").write_text(text)
        try:
            with TwistGateway(tmp_path, str(tmp_path / "cfg")):
                assert _get(port, basic("alice", "alice-pw")) == 200
                assert _get(port, basic("alice", "wrong-pw")) == 401
                spans = rx.wait_spans(5)
        finally:
            backend.shutdown()
            backend.server_close()
    servers = sorted((s for s in spans if s.kind == 2), key=lambda s: s.start_time_unix_nano)
    assert len(servers) == 2
    binds = [s for s in spans if s.name == "ldap.bind"]
    assert binds, [s.name for s in spans]
    for bind in binds:
        assert bind.parent_span_id in {s.span_id for s in servers}
        a = _attrs(bind)
        assert a["ldap.operation"].startswith("bind_") and "127.0.0.1" in a["server.address"]
    user_binds = {s.parent_span_id: _attrs(s)["ldap.result_code"] for s in binds
                  if _attrs(s)["ldap.operation"] == "bind_user"}
    assert user_binds == {servers[0].span_id: 0, servers[1].span_id: 49}  # invalidCredentials
    denied = _attrs(servers[1])
    assert (denied["twistgw.auth.decision"], denied["twistgw.auth.decided_by"]) == ("deny", "extauth")
    dumped = "".join(str(s) for s in spans)
    assert "alice-pw" not in dumped and "wrong-pw" not in dumped
