"""One sampled request's trace while it is served: its ids, the child spans
plugins and the upstream call record, and the finished :class:`Span` records
made once, when the request ends. Built by the engine
(``engine/tracing.py``); plugins see it as ``ctx.tracer``
(:class:`twistgw.api.tracer.Tracer`). No I/O, no Twisted.
"""

from __future__ import annotations

import time

from twistgw.api.tracer import AttributeValue, SpanHandle, Tracer
from twistgw.tracing.propagation import new_span_id
from twistgw.tracing.span import KIND_INTERNAL, STATUS_ERROR, STATUS_UNSET, Span

__all__ = ["ChildSpan", "RequestTrace"]

_now = time.time_ns


def _error_text(error: BaseException | str) -> str:
    if isinstance(error, BaseException):
        text = str(error)
        name = error.__class__.__name__
        return f"{name}: {text}"[:200] if text else name
    return error[:200]


class ChildSpan(SpanHandle):
    """A child span being timed (a plugin's wait, the upstream request)."""

    __slots__ = ("trace", "name", "kind", "span_id", "start_ns", "end_ns", "attributes", "status_code",
                 "status_message")

    def __init__(self, trace: "RequestTrace", name: str, kind: int, attributes: dict[str, AttributeValue]) -> None:
        self.trace = trace
        self.name = name
        self.kind = kind
        self.span_id = new_span_id()
        self.start_ns = _now()
        self.end_ns = 0
        self.attributes = attributes
        self.status_code = STATUS_UNSET
        self.status_message = ""

    def set(self, key: str, value: AttributeValue) -> None:
        self.attributes[key] = value

    def end(self, error: BaseException | str | None = None) -> None:
        if self.end_ns:
            return
        self.end_ns = _now()
        if error is not None:
            self.status_code = STATUS_ERROR
            self.status_message = _error_text(error)
        self.trace.ended.append(self)


class RequestTrace(Tracer):
    """The trace of one sampled request: the gateway's server span's ids
    (``span_id``, child of ``parent_id``, 0 for a root) and its children."""

    __slots__ = ("trace_id", "span_id", "parent_id", "trace_state", "start_ns", "ended", "upstream", "request")

    sampled = True

    def __init__(self, trace_id: int, span_id: int, parent_id: int, trace_state: str = "") -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.trace_state = trace_state
        self.start_ns = _now()
        #: the child spans that ended, in the order they did
        self.ended: list[ChildSpan] = []
        #: the upstream request's span while it is open (the engine's)
        self.upstream: ChildSpan | None = None
        #: the engine's upstream request (its retries are read at the end)
        self.request: object = None

    def child(self, name: str, **attributes: AttributeValue) -> ChildSpan:
        return ChildSpan(self, name, KIND_INTERNAL, attributes)

    def spans(self, name: str, kind: int, attributes: dict[str, AttributeValue], status_code: int,
              status_message: str = "") -> list[Span]:
        """The finished spans: the server span (``name``, ``attributes``)
        and every child that ended; a child still open (a plugin's call the
        request did not wait for) is left out."""
        trace_id = self.trace_id.to_bytes(16, "big")
        own = self.span_id.to_bytes(8, "big")
        state = self.trace_state
        out = [Span(trace_id, own, self.parent_id.to_bytes(8, "big") if self.parent_id else b"", name, kind,
                    self.start_ns, _now(), attributes, status_code, status_message, state)]
        for c in self.ended:
            out.append(Span(trace_id, c.span_id.to_bytes(8, "big"), own, c.name, c.kind, c.start_ns, c.end_ns,
                            c.attributes, c.status_code, c.status_message, state))
        return out
