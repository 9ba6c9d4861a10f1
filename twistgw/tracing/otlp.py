"""The OTLP protobuf encoding of spans: ``ExportTraceServiceRequest`` bytes,
the body of an OTLP/HTTP ``POST /v1/traces`` and of an OTLP/gRPC
``TraceService/Export`` call.

Hand-written, not the OpenTelemetry SDK or opentelemetry-proto's messages:
building upb messages per span costs several times the gateway's whole
budget for a sampled request (docs/decisions.md, docs/performance.md). The
messages and field numbers are those of
``opentelemetry/proto/{collector/trace,trace,resource,common}/v1/*.proto``;
``tests/observability/test_otlp_encoding.py`` decodes what this writes with
opentelemetry-proto's own messages and compares every field.

One request holds one ``ResourceSpans`` (the exporter's resource) with one
``ScopeSpans`` (scope ``twistgw``) holding the spans::

    resource = encode_resource({"service.name": "gateway"})   # once per exporter
    body = encode_request(resource, [span.encode() for ...])   # per batch

Attribute values are written as OTLP's ``AnyValue``: ``bool`` as
``bool_value``, ``int`` as ``int_value`` (an int outside the signed 64-bit
range, which OTLP cannot carry, as ``string_value`` of its digits), ``float``
as ``double_value``, anything else as ``string_value`` of ``str(value)``.
Strings that are not valid UTF-8 (lone surrogates) have them replaced, so that
a collector never refuses a batch for one span. Fields are written in order
and proto3's defaults left out, so the bytes are those opentelemetry-proto's
own serialization gives for the same message (the tests compare them).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from twistgw.tracing.span import AttributeValue, Span

__all__ = ["SCOPE_NAME", "encode_attributes", "encode_request", "encode_resource", "encode_span"]

#: the instrumentation scope of every span the gateway makes
SCOPE_NAME = "twistgw"

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_U64 = (1 << 64) - 1

_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack
_pack_double = struct.Struct("<d").pack

#: one-byte varints, the common case of lengths and small numbers
_SMALL = [bytes((i,)) for i in range(128)]


def _varint(n: int) -> bytes:
    """The base-128 varint of ``0 <= n < 2**64``."""
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: not UTF-8, which a collector refuses
        return text.encode("utf-8", "replace")


# Tags: (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
def _tag(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


# Span
_SPAN_TRACE_ID = _tag(1, 2)
_SPAN_SPAN_ID = _tag(2, 2)
_SPAN_TRACE_STATE = _tag(3, 2)
_SPAN_PARENT = _tag(4, 2)
_SPAN_NAME = _tag(5, 2)
_SPAN_KIND = _tag(6, 0)
_SPAN_START = _tag(7, 1)
_SPAN_END = _tag(8, 1)
_SPAN_ATTRIBUTE = _tag(9, 2)
_SPAN_STATUS = _tag(15, 2)
_SPAN_FLAGS = _tag(16, 5)
# Status
_STATUS_MESSAGE = _tag(2, 2)
_STATUS_CODE = _tag(3, 0)
# KeyValue, AnyValue
_KV_KEY = _tag(1, 2)
_KV_VALUE = _tag(2, 2)
_ANY_STRING = _tag(1, 2)
_ANY_BOOL = _tag(2, 0)
_ANY_INT = _tag(3, 0)
_ANY_DOUBLE = _tag(4, 1)
_TRUE = _ANY_BOOL + b"\x01"
_FALSE = _ANY_BOOL + b"\x00"
# ExportTraceServiceRequest.resource_spans, ResourceSpans.{resource, scope_spans},
# Resource.attributes, ScopeSpans.{scope, spans}, InstrumentationScope.name
_REQUEST_RESOURCE_SPANS = _tag(1, 2)
_RS_RESOURCE = _tag(1, 2)
_RS_SCOPE_SPANS = _tag(2, 2)
_RESOURCE_ATTRIBUTE = _tag(1, 2)
_SS_SCOPE = _tag(1, 2)
_SS_SPAN = _tag(2, 2)
_SCOPE_NAME = _tag(1, 2)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    n = len(payload)
    return tag + (_SMALL[n] if n < 128 else _varint(n)) + payload


def _any_value(value: AttributeValue) -> bytes:
    """The bytes of an ``AnyValue`` message."""
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    if type(value) is str:
        return _field(_ANY_STRING, _utf8(value))
    if isinstance(value, int):  # bool is handled above
        if _INT64_MIN <= value <= _INT64_MAX:
            return _ANY_INT + _varint(value & _U64)
        return _field(_ANY_STRING, str(value).encode("ascii"))
    if isinstance(value, float):
        return _ANY_DOUBLE + _pack_double(value)
    return _field(_ANY_STRING, _utf8(str(value)))


#: ``KeyValue`` key field bytes by key (the same few keys on every span)
_KEYS: dict[str, bytes] = {}
_KEYS_MAX = 4096


def _key(key: str) -> bytes:
    encoded = _KEYS.get(key)
    if encoded is None:
        encoded = _field(_KV_KEY, _utf8(key)) if key else b""
        if len(_KEYS) >= _KEYS_MAX:
            _KEYS.clear()
        _KEYS[key] = encoded
    return encoded


#: a span attribute's whole field by (key, value) for string values: most repeat from span to span
#: (the method, the route, the virtual service...); cleared when full
_STRING_ATTRIBUTES: dict[tuple[str, str], bytes] = {}
_STRING_ATTRIBUTES_MAX = 8192


def _attribute(tag: bytes, key: str, value: AttributeValue) -> bytes:
    return _field(tag, _key(key) + _field(_KV_VALUE, _any_value(value)))


def encode_attributes(tag: bytes, attributes: Mapping[str, AttributeValue]) -> list[bytes]:
    """Each attribute as a ``KeyValue`` field with ``tag``."""
    out = []
    cache = _STRING_ATTRIBUTES if tag is _SPAN_ATTRIBUTE else None
    for key, value in attributes.items():
        if cache is not None and type(value) is str:
            pair = (key, value)
            encoded = cache.get(pair)
            if encoded is None:
                encoded = _attribute(tag, key, value)
                if len(cache) >= _STRING_ATTRIBUTES_MAX:
                    cache.clear()
                cache[pair] = encoded
            out.append(encoded)
        else:
            out.append(_attribute(tag, key, value))
    return out


def encode_span(span: Span) -> bytes:
    """The bytes of one ``Span`` message (without its field tag)."""
    parts = [_field(_SPAN_TRACE_ID, span.trace_id), _field(_SPAN_SPAN_ID, span.span_id)]
    if span.trace_state:
        parts.append(_field(_SPAN_TRACE_STATE, _utf8(span.trace_state)))
    if span.parent_span_id:
        parts.append(_field(_SPAN_PARENT, span.parent_span_id))
    if span.name:
        parts.append(_field(_SPAN_NAME, _utf8(span.name)))
    if span.kind:
        parts.append(_SPAN_KIND + _varint(span.kind & _U64))
    if span.start_ns:
        parts.append(_SPAN_START + _pack_fixed64(span.start_ns & _U64))
    if span.end_ns:
        parts.append(_SPAN_END + _pack_fixed64(span.end_ns & _U64))
    if span.attributes:
        parts.extend(encode_attributes(_SPAN_ATTRIBUTE, span.attributes))
    if span.status_code or span.status_message:
        status = b""
        if span.status_message:
            status = _field(_STATUS_MESSAGE, _utf8(span.status_message))
        if span.status_code:
            status += _STATUS_CODE + _varint(span.status_code & _U64)
        parts.append(_field(_SPAN_STATUS, status))
    if span.flags:
        parts.append(_SPAN_FLAGS + _pack_fixed32(span.flags & 0xFFFFFFFF))
    return b"".join(parts)


def encode_resource(attributes: Mapping[str, AttributeValue]) -> bytes:
    """The ``ResourceSpans.resource`` field (tag included) of a resource with
    these attributes: made once per exporter."""
    return _field(_RS_RESOURCE, b"".join(encode_attributes(_RESOURCE_ATTRIBUTE, attributes)))


_SCOPE = _field(_SS_SCOPE, _field(_SCOPE_NAME, SCOPE_NAME.encode("ascii")))


def encode_request(resource: bytes, spans: Iterable[bytes]) -> bytes:
    """An ``ExportTraceServiceRequest`` of ``spans`` (:func:`encode_span`'s
    bytes) under ``resource`` (:func:`encode_resource`'s)."""
    scope_spans = _SCOPE + b"".join([_field(_SS_SPAN, s) for s in spans])
    resource_spans = resource + _field(_RS_SCOPE_SPANS, scope_spans)
    return _field(_REQUEST_RESOURCE_SPANS, resource_spans)
