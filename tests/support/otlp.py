"""A real OTLP trace receiver for the exporter's tests: an OTLP/HTTP server
(``http.server`` on its own threads) and an OTLP/gRPC server (grpcio, a
generic handler of ``TraceService/Export``), on loopback, that decode what
they get with opentelemetry-proto's own messages and record it::

    with OtlpReceiver(protocol="grpc") as rx:              # or "http"; tls=ca.issue(...) for TLS
        exporter = SpanExporter(rx.target(), resource={"service.name": "gw"})
        ...
        requests = rx.wait_spans(3)                         # the decoded spans, at least 3
        rx.mode = "error"                                   # HTTP 503 / gRPC UNAVAILABLE from now on
        rx.mode = "slow"; rx.delay = 2.0                    # answers after 2 s
        rx.stop(); rx.start()                               # down (no listener), then back, same port
        rx.authorities[0]                                   # gRPC: the first call's :authority, as received

Modes: ``normal``; ``slow`` (each answer waits ``delay`` seconds); ``error``
(HTTP ``error_status``, 503 by default, with ``Retry-After: 0``; gRPC
``UNAVAILABLE``); ``partial`` (an OTLP partial success: ``rejected`` spans
refused with ``error_message``); ``huge`` (HTTP: a 10 MiB response body; gRPC: a 1 MiB
response message). :meth:`~OtlpReceiver.stop` closes the listener (down);
:func:`blackhole` gives a port that accepts connections at the kernel and
never answers. The port comes from :func:`support.ports.free_port`, so the
receiver can be stopped and started again on it.
"""

from __future__ import annotations

import http.server
import socket
import ssl
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any, Iterator

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTraceServiceRequest,
                                                                      ExportTraceServiceResponse)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from support.pki import Issued
from support.ports import free_port
from twistgw.tracing.export import CollectorTarget

__all__ = ["OtlpReceiver", "blackhole"]

_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

# xds-protos ships an old copy of these modules at the same paths (no scope_spans): run-tests.sh
# installs opentelemetry-proto's again after it; say so plainly where that did not happen.
if "scope_spans" not in ExportTraceServiceRequest.DESCRIPTOR.fields_by_name["resource_spans"].message_type.fields_by_name:
    raise ImportError("opentelemetry.proto is xds-protos' old copy (no ResourceSpans.scope_spans): reinstall "
                      "opentelemetry-proto after xds-protos (pip install --force-reinstall --no-deps "
                      "opentelemetry-proto), as run-tests.sh does")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_HttpServer"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        rx = self.server.receiver
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        rx.record(body, {k.lower(): v for k, v in self.headers.items()}, self.path)
        mode = rx.mode
        if mode == "slow":
            time.sleep(rx.delay)
        if mode == "error":
            self.send_response(rx.error_status)
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        answer = rx.answer()
        if mode == "huge":
            answer = b"\0" * (10 << 20)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        try:
            self.wfile.write(answer)
        except OSError:  # the exporter stopped reading a huge answer
            pass


class _HttpServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    receiver: "OtlpReceiver"


class OtlpReceiver:
    """See the module docstring. ``requests``: (decoded request, headers or
    metadata, path) of each export received, in order."""

    def __init__(self, protocol: str = "http", tls: Issued | None = None) -> None:
        assert protocol in ("http", "grpc")
        self.protocol = protocol
        self.tls = tls
        self.port = free_port()
        self.mode = "normal"
        self.delay = 1.0
        self.error_status = 503
        self.rejected = 1
        self.error_message = "span too old"
        self.requests: list[tuple[ExportTraceServiceRequest, dict[str, str], str]] = []
        self.attempts = 0
        #: gRPC: each call's ``:authority``, in order
        self.authorities: list[str | None] = []
        self._lock = threading.Condition()
        self._http: _HttpServer | None = None
        self._grpc: Any = None
        self._tmp = tempfile.TemporaryDirectory(prefix="otlp-rx-")

    # the servers

    def start(self) -> "OtlpReceiver":
        if self.protocol == "http":
            self._start_http()
        else:
            self._start_grpc()
        return self

    def _start_http(self) -> None:
        server = _HttpServer(("127.0.0.1", self.port), _Handler, bind_and_activate=False)
        server.allow_reuse_address = True
        server.server_bind()
        server.server_activate()
        server.receiver = self
        if self.tls is not None:
            cert, key = self.tls.write(Path(self._tmp.name), "server")
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(cert), str(key))
            server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._http = server

    def _start_grpc(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[("grpc.so_reuseport", 0)])
        handler = grpc.unary_unary_rpc_method_handler(self._export)  # raw bytes both ways
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": handler}),))
        address = f"127.0.0.1:{self.port}"
        if self.tls is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, grpc.ssl_server_credentials(
                [(self.tls.key_pem, self.tls.cert_pem)]))
        assert bound == self.port, (bound, self.port)
        server.start()
        self._grpc = server

    def _export(self, request: bytes, context: Any) -> bytes:
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        # the call's :authority: grpcio's metadata leaves it out; the call's
        # details (grpcio's own record of the incoming call) hold it as "host"
        host = getattr(getattr(getattr(context, "_rpc_event", None), "call_details", None), "host", None)
        with self._lock:
            self.authorities.append(host.decode("ascii") if isinstance(host, bytes) else host)
        self.record(request, metadata, _METHOD)
        mode = self.mode
        if mode == "slow":
            time.sleep(self.delay)
        if mode == "error":
            context.abort(grpc.StatusCode.UNAVAILABLE, "the test collector is erroring")
        if mode == "huge":
            return b"\0" * (1 << 20)
        return self.answer()

    def answer(self) -> bytes:
        """An ``ExportTraceServiceResponse``: empty, or in ``partial`` mode
        rejecting ``rejected`` spans with ``error_message``."""
        response = ExportTraceServiceResponse()
        if self.mode == "partial":
            response.partial_success.rejected_spans = self.rejected
            response.partial_success.error_message = self.error_message
        return response.SerializeToString()

    def stop(self) -> None:
        """Down: no listener on the port any more."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._grpc is not None:
            self._grpc.stop(grace=None).wait(5)
            self._grpc = None

    def close(self) -> None:
        self.stop()
        self._tmp.cleanup()

    def __enter__(self) -> "OtlpReceiver":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # what it got

    def record(self, body: bytes, headers: dict[str, str], path: str) -> None:
        request = ExportTraceServiceRequest.FromString(body)  # a malformed body fails the handler, loudly
        with self._lock:
            self.attempts += 1
            self.requests.append((request, headers, path))
            self._lock.notify_all()

    def spans(self) -> list[PbSpan]:
        """Every span received, in order (retried batches count again)."""
        with self._lock:
            return [span for request, _, _ in self.requests for span in _spans_of(request)]

    def wait_spans(self, n: int, timeout: float = 10.0) -> list[PbSpan]:
        """At least ``n`` spans received, within ``timeout`` (else AssertionError)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while sum(len(list(_spans_of(r))) for r, _, _ in self.requests) < n:
                left = deadline - time.monotonic()
                assert left > 0, f"{n} spans expected within {timeout} s, got {len(self.spans())}"
                self._lock.wait(left)
        return self.spans()

    def wait_attempts(self, n: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.attempts < n:
                left = deadline - time.monotonic()
                assert left > 0, f"{n} export attempts expected within {timeout} s, got {self.attempts}"
                self._lock.wait(left)

    def target(self, **kw: Any) -> CollectorTarget:
        """A :class:`CollectorTarget` of this receiver (``kw``: its other fields)."""
        kw.setdefault("timeout_s", 2.0)
        return CollectorTarget(self.protocol, "127.0.0.1", self.port, tls=self.tls is not None, **kw)


def _spans_of(request: ExportTraceServiceRequest) -> Iterator[PbSpan]:
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            yield from ss.spans


class blackhole:
    """A loopback port whose connections the kernel accepts and nobody
    reads (``listen`` without ``accept``): ``with blackhole() as port:``."""

    def __enter__(self) -> int:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
