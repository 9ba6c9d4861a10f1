"""One OTLP export attempt over HTTP or gRPC, made on the exporter's thread
(never the reactor's): :class:`HttpSender` (OTLP/HTTP protobuf with
:mod:`http.client`, TLS by :mod:`twistgw.stdtls`) and :class:`GrpcSender`
(OTLP/gRPC with grpcio's generic unary call). Each keeps its connection
(channel) between exports and answers every attempt with an
:class:`Outcome`; neither raises for anything the collector does.

What a collector sends back is bounded: an HTTP response's body is read up
to :data:`MAX_RESPONSE` bytes (the connection is closed if there is more),
its head by :mod:`http.client`'s own limits; a gRPC response by
``grpc.max_receive_message_length``. Retryable answers are OTLP's
(specification, "OTLP/HTTP Response" and "OTLP/gRPC Response"): HTTP 429,
502, 503, 504 (with ``Retry-After`` in seconds), gRPC ``CANCELLED``,
``DEADLINE_EXCEEDED``, ``ABORTED``, ``OUT_OF_RANGE``, ``UNAVAILABLE``,
``DATA_LOSS``; a connection that fails or times out is retryable too.
"""

from __future__ import annotations

import http.client
import ssl
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    from twistgw.tracing.export import CollectorTarget

__all__ = ["MAX_RESPONSE", "GrpcSender", "HttpSender", "Outcome", "Sender", "sender_for"]

#: the most of an HTTP response's body that is read
MAX_RESPONSE = 64 * 1024
#: OTLP/gRPC's method
GRPC_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

_HTTP_RETRYABLE = frozenset((429, 502, 503, 504))
_GRPC_RETRYABLE = frozenset(("CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE",
                             "DATA_LOSS"))
#: the longest ``Retry-After`` honoured, seconds
_RETRY_AFTER_MAX = 30.0


@attrs.frozen
class Outcome:
    """The result of one attempt: ``ok``, or why not (``reason``), whether
    OTLP allows trying again (``retryable``) and after how long the
    collector asked (``retry_after``, seconds)."""

    ok: bool
    retryable: bool = False
    reason: str = ""
    retry_after: float | None = None


OK = Outcome(True)


class Sender(Protocol):
    def send(self, body: bytes, timeout: float) -> Outcome: ...

    def close(self) -> None: ...


def sender_for(target: "CollectorTarget") -> Sender:
    """The sender of ``target``'s protocol (built on the export thread, at
    its first export). :raises ValueError: for an unknown protocol."""
    if target.protocol == "http":
        return HttpSender(target)
    if target.protocol == "grpc":
        return GrpcSender(target)
    raise ValueError(f"unknown OTLP protocol {target.protocol!r} (expected 'grpc' or 'http')")


class TlsRefused(Exception):
    """The collector's certificate is refused (its chain or its name)."""


# twistgw.stdtls (and twistgw.tls under it) is imported where TLS is used: it loads parts of
# twisted.web, which importing the exporter does not (the core may import it, tests/unit/test_layers.py).

def check_tls(target: "CollectorTarget") -> None:
    """Build ``target``'s TLS settings once, so that unusable ones are refused
    when the exporter is made. :raises twistgw.tls.TLSSettingsError:"""
    if target.tls:
        from twistgw import stdtls

        stdtls.server_names(target.verified_name())
        stdtls.client_context(ca_pem=target.ca_pem, alpn=("http/1.1",))


class _Connection(http.client.HTTPConnection):
    """An HTTP connection, TLS when ``context`` is given: the chain verified
    by OpenSSL during the handshake, the name by :func:`stdtls.peer_problem`
    right after it, before the request is written."""

    def __init__(self, host: str, port: int, timeout: float, context: ssl.SSLContext | None, sni: str,
                 names: tuple[str, ...]) -> None:
        super().__init__(host, port, timeout=timeout)
        self._context = context
        self._sni = sni
        self._names = names

    def connect(self) -> None:
        super().connect()
        if self._context is None:
            return
        from twistgw import stdtls

        try:
            tls = self._context.wrap_socket(self.sock, server_hostname=self._sni or None)
        except ssl.SSLCertVerificationError as exc:
            self.sock.close()
            raise TlsRefused(str(stdtls.untrusted(exc, self._names))) from None
        problem = stdtls.peer_problem(tls.getpeercert(True), self._names)
        if problem is not None:
            tls.close()
            raise TlsRefused(problem)
        self.sock = tls


def _retry_after(value: str | None) -> float | None:
    try:
        return None if value is None else min(max(float(value), 0.0), _RETRY_AFTER_MAX)
    except ValueError:  # an HTTP date: not followed, the exporter's own backoff applies
        return None


class HttpSender:
    """OTLP/HTTP protobuf: ``POST`` of the request to ``target.path`` on a
    kept-alive connection."""

    def __init__(self, target: "CollectorTarget") -> None:
        self.target = target
        self._context: ssl.SSLContext | None = None
        self._sni = ""
        self._names: tuple[str, ...] = ()
        authority = target.verified_name()
        if target.tls:
            from twistgw import stdtls

            self._sni, self._names = stdtls.server_names(authority)
            self._context = stdtls.client_context(ca_pem=target.ca_pem, alpn=("http/1.1",))
        host = target.sent_authority()
        if host is None:
            host = f"[{authority}]" if ":" in authority else authority
            if target.port != (443 if target.tls else 80):
                host = f"{host}:{target.port}"
        self._headers = {"Host": host, "Content-Type": "application/x-protobuf", **dict(target.sent_headers())}
        self._conn: _Connection | None = None

    def send(self, body: bytes, timeout: float) -> Outcome:
        reused = self._conn is not None
        outcome, stale = self._attempt(body, timeout)
        if reused and stale:
            # a kept-alive connection the collector closed meanwhile: once more, on a new one
            outcome, _ = self._attempt(body, timeout)
        return outcome

    def _attempt(self, body: bytes, timeout: float) -> tuple[Outcome, bool]:
        """The outcome, and whether the connection was found closed."""
        conn = self._conn
        if conn is None:
            conn = self._conn = _Connection(self.target.host, self.target.port, timeout, self._context,
                                            self._sni, self._names)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        try:
            conn.request("POST", self.target.path, body, self._headers)
            response = conn.getresponse()
            response.read(MAX_RESPONSE)
            if not response.isclosed():  # more than we read, or unknown length: not kept
                self.close()
        except TlsRefused as exc:
            self.close()
            return Outcome(False, False, f"TLS: {exc}"), False
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            stale = isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError))
            return Outcome(False, True, f"{type(exc).__name__}: {exc}".rstrip(": ")), stale
        status = response.status
        if 200 <= status < 300:
            return OK, False
        if response.will_close:
            self.close()
        return Outcome(False, status in _HTTP_RETRYABLE, f"HTTP {status} {response.reason}".rstrip(),
                       _retry_after(response.getheader("Retry-After"))), False

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _system_roots() -> bytes | None:
    """The system's CA file for grpcio, which otherwise uses its own bundle."""
    paths = ssl.get_default_verify_paths()
    for path in (paths.cafile, paths.openssl_cafile):
        if path:
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError:
                continue
    return None


class GrpcSender:
    """OTLP/gRPC: the unary ``TraceService/Export`` call with the encoded
    request as it is (identity serializers), on one channel. TLS through
    grpcio's own (BoringSSL): the chain verified against ``ca_pem`` (or the
    system's CA file), the name (``server_name``, else ``host``) by grpcio."""

    def __init__(self, target: "CollectorTarget") -> None:
        import grpc  # the exporter's thread only

        self._grpc = grpc
        self.target = target
        address = f"[{target.host}]:{target.port}" if ":" in target.host else f"{target.host}:{target.port}"
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", MAX_RESPONSE),
            ("grpc.enable_retries", 0),  # the exporter retries, as OTLP says
            ("grpc.max_reconnect_backoff_ms", 5000),
        ]
        authority = target.sent_authority()
        if authority is not None:
            options.append(("grpc.default_authority", authority))
        if target.tls:
            if target.server_name:
                options.append(("grpc.ssl_target_name_override", target.server_name))
            roots = target.ca_pem if target.ca_pem is not None else _system_roots()
            credentials = grpc.ssl_channel_credentials(root_certificates=roots)
            self._channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._call = self._channel.unary_unary(GRPC_METHOD, request_serializer=None, response_deserializer=None)
        self._metadata = tuple((k.lower(), v) for k, v in target.sent_headers())

    def send(self, body: bytes, timeout: float) -> Outcome:
        try:
            self._call(body, timeout=timeout, metadata=self._metadata or None)
        except self._grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            name = getattr(code, "name", "UNKNOWN")
            details = exc.details() if hasattr(exc, "details") else ""
            return Outcome(False, name in _GRPC_RETRYABLE, f"gRPC {name}: {details}".rstrip(": "))
        except Exception as exc:  # grpcio's own failures (a closed channel...): never the thread's end
            return Outcome(False, True, f"gRPC: {type(exc).__name__}: {exc}")
        return OK

    def close(self) -> None:
        self._channel.close()

