"""The export of finished spans to an OpenTelemetry collector (OTLP/HTTP
protobuf or OTLP/gRPC), off the reactor: :meth:`SpanExporter.submit` puts a
span on a bounded queue (O(1), never blocks, never raises; a full queue drops
the span and counts it) and a daemon thread sends batches.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from twistgw.tracing.span import Span

__all__ = ["CollectorTarget", "SpanExporter"]


@attrs.frozen
class CollectorTarget:
    """Where spans go. ``protocol``: ``"grpc"`` (OTLP/gRPC,
    ``TraceService/Export``) or ``"http"`` (OTLP/HTTP protobuf, ``POST
    path``). With ``tls`` the collector's certificate is verified against
    ``ca_pem`` (None: the system's CAs) and by name, always: ``server_name``,
    or ``host`` when None. ``headers`` are sent with every export (gRPC:
    metadata, lower-cased); ``timeout_s`` bounds one export attempt."""

    protocol: str
    host: str
    port: int
    path: str = "/v1/traces"
    tls: bool = False
    server_name: str | None = None
    ca_pem: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 10.0


class SpanExporter:
    """One collector's exporter: built once per collector per configuration
    snapshot, kept across reloads while the target is equal. ``resource``:
    the OTLP resource's attributes (``service.name``...)."""

    def __init__(self, target: CollectorTarget, *, resource: Mapping[str, str], max_queue: int = 2048,
                 max_batch: int = 512, delay_s: float = 1.0) -> None:
        self.target = target
        self.resource = dict(resource)
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.delay_s = delay_s

    def submit(self, span: Span) -> None:
        """Queue a finished span (the reactor thread, per span): O(1), never
        blocks, never raises; a full queue drops it (counted, ``queue_full``)."""

    def stop(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (within ``timeout_s``) and end the thread."""
