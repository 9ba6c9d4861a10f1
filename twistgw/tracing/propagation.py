"""Trace context in and out of a request: W3C ``traceparent`` /
``tracestate`` and Zipkin's B3 (single ``b3`` and multi ``X-B3-*``), parsed
strictly, and the ids of new spans. No I/O, no Twisted.

A value that does not parse is not an error: the gateway starts a new trace
(the request is never refused for it). What parses is *continued* (the same
trace id, the gateway's span as the child of the sender's), never trusted for
anything else (docs/decisions.md, "Tracing").
"""

from __future__ import annotations

import os
import random
import sys
from array import array

__all__ = ["B3_MULTI", "B3_SINGLE", "W3C", "Incoming", "format_b3", "format_traceparent", "new_span_id",
           "new_trace_id", "new_traces", "parse_b3_multi", "parse_b3_single", "parse_traceparent", "parse_tracestate",
           "read_incoming", "sampling_value"]

#: how the incoming context was written (written back out the same way too)
W3C = 0
B3_SINGLE = 1
B3_MULTI = 2

_HEX = frozenset(b"0123456789abcdef")
#: W3C trace-context §3.3.1.1: at most 32 list members, 512 characters is
#: what a vendor must propagate at least; more is dropped whole
_MAX_TRACESTATE = 512
_MAX_MEMBERS = 32

# One generator per process, seeded from os.urandom by the random module
# (and reseeded in a forked worker: random registers that at fork). Span
# ids are not secrets: what matters is that they do not collide.
_bits = random.getrandbits


def new_trace_id() -> int:
    """A non-zero 128-bit trace id."""
    tid = _bits(128)
    while not tid:  # pragma: no cover - one in 2**128
        tid = _bits(128)
    return tid


def new_span_id() -> int:
    """A non-zero 64-bit span id."""
    sid = _bits(64)
    while not sid:  # pragma: no cover - one in 2**64
        sid = _bits(64)
    return sid


#: new traces made per ``os.urandom`` read (:func:`new_traces`)
TRACE_BLOCK = 256
_SWAP = sys.byteorder == "little"
#: new traces not handed out yet (:func:`new_traces`; emptied in a forked child)
PARENTS: list[bytes] = []
LOWS: list[int] = []


def new_traces() -> None:
    """:data:`TRACE_BLOCK` new traces from one ``os.urandom`` read, put in
    :data:`PARENTS` and :data:`LOWS` (one of each per trace, popped
    together): the ``traceparent`` an unsampled request sends
    (``00-<trace id>-<span id>-00``; its ids are the new trace's and its
    span's) and the trace id's low 64 bits (``low % 10000`` is its
    :func:`sampling_value`). Laid out by a few C calls over the whole block
    (nothing formatted per trace): the random bytes' hex with a dash every
    8 bytes, the dash inside each trace id deleted by one strided ``del``,
    the one after each span id made the split point. Ids are as
    unpredictable as ``os.urandom``; a block with a zero 64-bit word (one
    in 2**54) is drawn again, so no id is ever all zeros."""
    count = TRACE_BLOCK
    while True:
        rand = os.urandom(24 * count)  # per trace: 16 bytes of trace id, 8 of span id
        words = array("Q", rand)  # per trace: the trace id's high and low 64 bits, the span id
        if 0 not in words:
            break
    text = bytearray(rand.hex("-", -8), "ascii")  # T1-T2-S-T1-T2-S-...: 51 characters per trace
    del text[16::51]  # T-S-T-S-...: 50 per trace
    text[49::50] = b"\n" * (count - 1)  # T-S\nT-S\n...
    PARENTS.extend((b"00-" + bytes(text).replace(b"\n", b"-00\n00-") + b"-00").split(b"\n"))
    if _SWAP:
        words.byteswap()  # big-endian, as the hex digits read
    LOWS.extend(words[1::3].tolist())


def _forget() -> None:
    PARENTS.clear()
    LOWS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)  # a worker never repeats its parent's trace ids


def sampling_value(trace_id: int) -> int:
    """The trace's value in ``[0, 10000)`` compared with a percentage of
    10000ths (Envoy's ``featureEnabled`` with a ``TEN_THOUSAND`` fraction):
    the same trace id, the same decision."""
    return (trace_id & 0xFFFFFFFFFFFFFFFF) % 10000


def _hex(value: bytes, length: int) -> int | None:
    """``value`` as an int when it is exactly ``length`` lowercase hex digits, not all zero."""
    if len(value) != length or not _HEX.issuperset(value):
        return None
    number = int(value, 16)
    return number or None


class Incoming:
    """A trace context read from a request: the sender's trace and span,
    its sampled flag (None: B3 left the decision to us), its ``tracestate``,
    and the form it came in (:data:`W3C`, :data:`B3_SINGLE`, :data:`B3_MULTI`)."""

    __slots__ = ("trace_id", "span_id", "sampled", "trace_state", "form")

    def __init__(self, trace_id: int, span_id: int, sampled: bool | None, trace_state: str = "",
                 form: int = W3C) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.sampled = sampled
        self.trace_state = trace_state
        self.form = form

    def __repr__(self) -> str:
        return (f"Incoming({self.trace_id:032x}, {self.span_id:016x}, sampled={self.sampled},"
                f" form={self.form}, trace_state={self.trace_state!r})")


def parse_traceparent(values: list[bytes] | None) -> Incoming | None:
    """W3C ``traceparent``, version ``00`` only, exactly
    ``00-<32 hex>-<16 hex>-<2 hex>`` in lowercase, ids not all zero. Two
    headers, another version, or anything else: None (a new trace)."""
    if values is None or len(values) != 1:
        return None
    value = values[0]
    if len(value) != 55 or value[:3] != b"00-" or value[35:36] != b"-" or value[52:53] != b"-":
        return None
    trace_id = _hex(value[3:35], 32)
    span_id = _hex(value[36:52], 16)
    flags = value[53:55]
    if trace_id is None or span_id is None or len(flags) != 2 or not _HEX.issuperset(flags):
        return None
    return Incoming(trace_id, span_id, bool(int(flags, 16) & 1))


def parse_tracestate(values: list[bytes] | None) -> str:
    """W3C ``tracestate``, passed on as received (several headers joined
    with ``,``) when it is printable ASCII of at most 512 characters and 32
    ``key=value`` members; otherwise dropped (``""``)."""
    if not values:
        return ""
    joined = b",".join(values)
    if len(joined) > _MAX_TRACESTATE or not joined.isascii():
        return ""
    text = joined.decode("ascii")
    members = [m.strip() for m in text.split(",") if m.strip()]
    if len(members) > _MAX_MEMBERS:
        return ""
    for m in members:
        key, eq, val = m.partition("=")
        if not eq or not key or not val or not m.isprintable() or " " in key:
            return ""
    return ",".join(members)


def _b3_trace(value: bytes) -> int | None:
    """A B3 trace id: 16 or 32 lowercase hex digits (a 64-bit one is the low half)."""
    return _hex(value, len(value)) if len(value) in (16, 32) else None


def parse_b3_single(values: list[bytes] | None) -> Incoming | None:
    """Zipkin's single ``b3`` header: ``{trace}-{span}[-{sampled}[-{parent}]]``
    (sampled ``0``, ``1`` or ``d``, debug, which is sampled). A bare ``0``
    or ``1`` carries a decision without a context: no context to continue,
    so None (a new trace, decided by the gateway)."""
    if values is None or len(values) != 1:
        return None
    parts = values[0].split(b"-")
    if len(parts) < 2 or len(parts) > 4:
        return None
    trace_id = _b3_trace(parts[0])
    span_id = _hex(parts[1], 16)
    if trace_id is None or span_id is None:
        return None
    sampled: bool | None = None
    if len(parts) >= 3:
        flag = parts[2]
        if flag not in (b"0", b"1", b"d"):
            return None
        sampled = flag != b"0"
    if len(parts) == 4 and _hex(parts[3], 16) is None:
        return None
    return Incoming(trace_id, span_id, sampled, "", B3_SINGLE)


def parse_b3_multi(trace: list[bytes] | None, span: list[bytes] | None, sampled: list[bytes] | None,
                   flags: list[bytes] | None) -> Incoming | None:
    """Zipkin's ``X-B3-TraceId``, ``X-B3-SpanId`` (both required, one
    each), ``X-B3-Sampled`` (``0`` or ``1``) and ``X-B3-Flags`` (``1``:
    debug, sampled)."""
    if trace is None or span is None or len(trace) != 1 or len(span) != 1:
        return None
    trace_id = _b3_trace(trace[0])
    span_id = _hex(span[0], 16)
    if trace_id is None or span_id is None:
        return None
    decision: bool | None = None
    if sampled is not None:
        if len(sampled) != 1 or sampled[0] not in (b"0", b"1"):
            return None
        decision = sampled[0] == b"1"
    if flags is not None:
        if len(flags) != 1 or flags[0] not in (b"0", b"1"):
            return None
        if flags[0] == b"1":
            decision = True
    return Incoming(trace_id, span_id, decision, "", B3_MULTI)


#: the canonical names of the trace-context headers
TRACE_HEADER_NAMES = (b"Traceparent", b"Tracestate", b"B3", b"X-B3-Traceid", b"X-B3-Spanid", b"X-B3-Parentspanid",
                      b"X-B3-Sampled", b"X-B3-Flags")


def read_incoming(headers: object) -> Incoming | None:
    """The trace context of a request (``headers``: anything with
    ``getRawHeaders``): a valid ``traceparent`` first (with its
    ``tracestate``), else a valid ``b3``, else valid ``X-B3-*``; None when
    none is (a new trace)."""
    raw = getattr(headers, "raw", None)
    if raw is not None:  # twistgw's Headers: canonical names, looked up without canonicalising
        get = raw.get
        if get(b"Traceparent") is None and get(b"B3") is None and get(b"X-B3-Traceid") is None:
            return None
        return _read(headers)
    return _read(headers)


def _read(headers: object) -> Incoming | None:
    get = headers.getRawHeaders  # type: ignore[attr-defined]
    found = parse_traceparent(get(b"traceparent"))
    if found is not None:
        found.trace_state = parse_tracestate(get(b"tracestate"))
        return found
    single = get(b"b3")
    if single is not None:
        return parse_b3_single(single)
    multi = get(b"x-b3-traceid")
    if multi is not None:
        return parse_b3_multi(multi, get(b"x-b3-spanid"), get(b"x-b3-sampled"), get(b"x-b3-flags"))
    return None


def format_traceparent(trace_id: int, span_id: int, sampled: bool) -> bytes:
    return b"00-%032x-%016x-%s" % (trace_id, span_id, b"01" if sampled else b"00")


def format_b3(trace_id: int, span_id: int, sampled: bool) -> bytes:
    """The single ``b3`` header the backend gets."""
    return b"%032x-%016x-%s" % (trace_id, span_id, b"1" if sampled else b"0")
