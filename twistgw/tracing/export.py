"""The export of finished spans to an OpenTelemetry collector (OTLP/HTTP
protobuf or OTLP/gRPC), off the reactor::

    exporter = SpanExporter(CollectorTarget("grpc", "collector.example.org", 4317, tls=True),
                            resource={"service.name": "gateway"})
    exporter.submit(span)      # the reactor, per finished span: O(1), never blocks, never raises
    exporter.stop(timeout_s=5) # at shutdown, or when a reload drops the collector: flush, end the thread

:meth:`SpanExporter.submit` appends the span to a bounded queue (a
``collections.deque``, whose ``append`` needs no lock) and nothing else; a
full queue drops the span, counted. A daemon thread, started at the first
span, takes up to ``max_batch`` spans at once, every ``delay_s`` or as soon as
``max_batch`` are waiting, encodes them (:mod:`twistgw.tracing.otlp`) and
sends them (:mod:`twistgw.tracing.transport`), each attempt bounded by the
target's ``timeout_s``. A retryable failure is tried again with a jittered
exponential backoff (at most :data:`ATTEMPTS` attempts; once the collector is
known to be failing, one attempt per batch, so an outage costs the thread
little); then the batch is dropped, counted. Memory is bounded by
``max_queue + max_batch`` spans, whatever the collector does.

A collector that fails is logged once when it starts failing and once when
it answers again, never per span or per batch. The counters on ``/metrics``
(label ``collector``: ``http://host:port/path`` or ``grpc://host:port``):
``twistgw_spans_exported_total``, ``twistgw_spans_dropped_total`` (by
``reason``: ``queue_full``, ``export_failed``, ``invalid``: a span that could
not be encoded, ``stopped``: submitted after :meth:`~SpanExporter.stop`) and
``twistgw_span_export_failures_total`` (batches given up).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from twistgw.api.counters import counter
from twistgw.tracing import otlp
from twistgw.tracing.span import Span
from twistgw.tracing.transport import Outcome, Sender, check_tls, sender_for

__all__ = ["ATTEMPTS", "CollectorTarget", "SpanExporter"]

#: attempts per batch while the collector answers (OTLP's retryable failures)
ATTEMPTS = 4
#: the first backoff, and the longest, seconds (each doubled, with jitter)
_BACKOFF_FIRST = 0.25
_BACKOFF_MAX = 5.0

#: spans encoded between two offers of the GIL to the other threads (the reactor)
_YIELD_EVERY = 32

_EXPORTED = counter("twistgw_spans_exported", "Spans an OpenTelemetry collector accepted, by collector",
                    ["collector"])
_DROPPED = counter("twistgw_spans_dropped", "Spans not exported, by collector and reason (queue_full,"
                   " export_failed, invalid, stopped)", ["collector", "reason"])
_FAILURES = counter("twistgw_span_export_failures", "Batches of spans given up after their attempts, by"
                    " collector", ["collector"])

_logger = logging.getLogger("twistgw.tracing")


@attrs.frozen
class CollectorTarget:
    """Where spans go. ``protocol``: ``"grpc"`` (OTLP/gRPC,
    ``TraceService/Export``) or ``"http"`` (OTLP/HTTP protobuf, ``POST
    path``). With ``tls`` the collector's certificate is verified against
    ``ca_pem`` (None: the system's CAs) and by name, always: ``server_name``,
    else the authority, else ``host`` (:meth:`verified_name`). ``headers`` are sent with every export (gRPC:
    metadata, lower-cased); ``timeout_s`` bounds one export attempt.
    ``authority``: the HTTP ``Host`` / gRPC ``:authority`` sent (Gloo's
    ``grpcService.authority``; by default ``server_name`` or ``host``); a
    header named ``:authority`` in ``headers`` is taken as it."""

    protocol: str
    host: str
    port: int
    path: str = "/v1/traces"
    tls: bool = False
    server_name: str | None = None
    ca_pem: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 10.0
    authority: str | None = None

    def sent_authority(self) -> str | None:
        """The authority asked for (``authority``, else an ``:authority``
        header), None for the default."""
        if self.authority is not None:
            return self.authority
        return next((v for k, v in self.headers if k == ":authority"), None)

    def verified_name(self) -> str:
        """The name the collector's certificate must carry: ``server_name``,
        else the authority's host, else ``host`` (as grpcio checks it)."""
        if self.server_name:
            return self.server_name
        authority = self.sent_authority()
        if not authority:
            return self.host
        if authority.startswith("[") and "]" in authority:  # [v6] or [v6]:port
            return authority[1:authority.index("]")]
        host, sep, port = authority.rpartition(":")
        return host if sep and port.isdigit() and ":" not in host else authority

    def sent_headers(self) -> tuple[tuple[str, str], ...]:
        """``headers`` without pseudo-headers (``:authority``)."""
        return tuple((k, v) for k, v in self.headers if not k.startswith(":"))

    @property
    def label(self) -> str:
        """The ``collector`` label of the counters."""
        scheme = ("https" if self.tls else "http") if self.protocol == "http" else \
            ("grpcs" if self.tls else "grpc")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}{self.path if self.protocol == 'http' else ''}"


class SpanExporter:
    """One collector's exporter: built once per collector per configuration
    snapshot, kept across reloads while the target is equal. ``resource``:
    the OTLP resource's attributes (``service.name``...). ``log``: where the
    two words of an outage go (called on the export thread; the standard
    library's ``twistgw.tracing`` logger by default).

    :raises ValueError: for an unknown protocol.
    :raises twistgw.tls.TLSSettingsError: for TLS settings that cannot be used.
    """

    def __init__(self, target: CollectorTarget, *, resource: Mapping[str, str], max_queue: int = 2048,
                 max_batch: int = 512, delay_s: float = 1.0, log: Callable[[str], None] | None = None) -> None:
        if target.protocol not in ("grpc", "http"):
            raise ValueError(f"unknown OTLP protocol {target.protocol!r} (expected 'grpc' or 'http')")
        check_tls(target)
        self.target = target
        self.resource = dict(resource)
        self.max_queue = max_queue
        self.max_batch = max(1, max_batch)
        self.delay_s = delay_s
        self._log = log if log is not None else _logger.warning
        self._resource = otlp.encode_resource(self.resource)
        self._queue: deque[Span] = deque()
        self._wake = threading.Event()
        self._halt = threading.Event()  # set by stop(): no more backoff
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._stopped = False
        self._deadline: float | None = None
        self._failing: str | None = None  # why, while the collector fails
        label = target.label
        self._exported = _EXPORTED.labels(label)
        self._queue_full = _DROPPED.labels(label, "queue_full")
        self._export_failed = _DROPPED.labels(label, "export_failed")
        self._invalid = _DROPPED.labels(label, "invalid")
        self._after_stop = _DROPPED.labels(label, "stopped")
        self._failures = _FAILURES.labels(label)

    def submit(self, span: Span) -> None:
        """Queue a finished span (the reactor thread, per span): O(1), never
        blocks, never raises; a full queue drops it (counted, ``queue_full``)."""
        queue = self._queue
        waiting = len(queue)
        if waiting >= self.max_queue or self._stopped:
            (self._after_stop if self._stopped else self._queue_full).inc()
            return
        queue.append(span)
        if self._thread is None:
            self._start()
        elif waiting + 1 == self.max_batch:
            self._wake.set()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is not None or self._stopped:
                return
            thread = threading.Thread(target=self._run, name=f"twistgw-otlp {self.target.label}", daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:  # no more threads: the spans wait, and the next submit tries again
                self._log(f"span export to {self.target.label}: the export thread could not start ({exc})")
                return
            self._thread = thread

    def stop(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (within ``timeout_s``) and end the thread;
        what is still queued then is dropped (``export_failed``)."""
        with self._start_lock:
            self._stopped = True
            thread = self._thread
        self._deadline = time.monotonic() + timeout_s
        self._halt.set()
        self._wake.set()
        if thread is not None:
            thread.join(timeout_s + 0.5)
        else:
            self._drop(len(self._queue), self._export_failed)

    # the export thread

    def _run(self) -> None:
        sender: Sender | None = None
        try:
            sender = sender_for(self.target)
            while not self._stopped:
                if len(self._queue) < self.max_batch:
                    self._wake.wait(self.delay_s)
                    self._wake.clear()
                if self._queue and not self._stopped:
                    self._export(sender)
            while self._queue and self._remaining() > 0:
                self._export(sender)
        except Exception as exc:  # a bug: said once, and the spans dropped, never a dead queue that grows
            self._log(f"span export to {self.target.label} ended: {type(exc).__name__}: {exc}")
        finally:
            self._stopped = True
            self._drop(len(self._queue), self._export_failed)
            if sender is not None:
                sender.close()

    def _remaining(self) -> float:
        return float("inf") if self._deadline is None else self._deadline - time.monotonic()

    def _export(self, sender: Sender) -> None:
        """Take, encode and send one batch."""
        queue = self._queue
        encoded = []
        for i in range(min(len(queue), self.max_batch)):
            if i and not i % _YIELD_EVERY:
                time.sleep(0)  # the GIL to the reactor, if it waits: never more than ~0.3 ms of encoding at once
            span = queue.popleft()
            try:
                encoded.append(otlp.encode_span(span))
            except Exception:  # a span whose fields are not what Span says: that one only
                self._invalid.inc()
        if not encoded:
            return
        outcome = self._send(sender, otlp.encode_request(self._resource, encoded))
        if outcome.ok:
            self._exported.inc(len(encoded))
            if self._failing is not None:
                self._failing = None
                self._log(f"span export to {self.target.label} works again")
            return
        self._failures.inc()
        self._drop(len(encoded), self._export_failed)
        if self._failing is None:
            self._failing = outcome.reason
            self._log(f"span export to {self.target.label} fails ({outcome.reason}): spans are dropped"
                      f" (twistgw_spans_dropped_total) until it works again")

    def _send(self, sender: Sender, body: bytes) -> Outcome:
        """Up to :data:`ATTEMPTS` attempts (one while the collector is failing,
        or when stopping), within the stop deadline."""
        attempts = 1 if self._failing is not None else ATTEMPTS
        backoff = _BACKOFF_FIRST
        for attempt in range(attempts):
            timeout = min(self.target.timeout_s, self._remaining())
            if timeout <= 0:
                return Outcome(False, reason="stopped before the collector answered")
            outcome = sender.send(body, timeout)
            if outcome.ok or not outcome.retryable or attempt + 1 == attempts:
                return outcome
            wait = outcome.retry_after if outcome.retry_after is not None else backoff * random.uniform(0.5, 1.0)
            backoff = min(backoff * 2, _BACKOFF_MAX)
            if self._halt.wait(wait):  # stopping: no more waiting for this batch
                return outcome
        return outcome

    def _drop(self, n: int, child: Any) -> None:
        if n:
            child.inc(n)
            for _ in range(n):
                if not self._queue:
                    break
                self._queue.popleft()

    @property
    def queued(self) -> int:
        """Spans waiting for the thread."""
        return len(self._queue)
