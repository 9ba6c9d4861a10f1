"""One finished span, as OTLP describes it (``opentelemetry.proto.trace.v1.Span``).

It is made once per sampled request (and per upstream call), so it is a
slotted record without behaviour: the exporter encodes it on its own thread.
"""

from __future__ import annotations

import attrs

__all__ = ["KIND_CLIENT", "KIND_INTERNAL", "KIND_SERVER", "STATUS_ERROR", "STATUS_OK", "STATUS_UNSET",
           "AttributeValue", "Span"]

#: OTLP ``Span.SpanKind``
KIND_INTERNAL = 1
KIND_SERVER = 2
KIND_CLIENT = 3

#: OTLP ``Status.StatusCode``
STATUS_UNSET = 0
STATUS_OK = 1
STATUS_ERROR = 2

AttributeValue = str | int | float | bool


@attrs.define(slots=True)
class Span:
    """A finished span. ``trace_id`` is 16 bytes, ``span_id`` 8,
    ``parent_span_id`` 8 or ``b""`` for a root span; times are
    ``time.time_ns()``; ``attributes`` values are ``str``, ``int`` (signed
    64-bit), ``float`` or ``bool``; ``trace_state`` is the W3C
    ``tracestate`` passed through, ``flags`` the W3C trace flags."""

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    status_code: int = STATUS_UNSET
    status_message: str = ""
    trace_state: str = ""
    flags: int = 1
