"""twistgw's hand-written OTLP encoder (``twistgw.tracing.otlp``) against the
OpenTelemetry project's own messages: whatever spans and resource it is
given, opentelemetry-proto decodes its bytes into exactly those fields."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from twistgw.tracing import otlp
from twistgw.tracing.span import Span

SETTINGS = dict(deadline=None, max_examples=300)

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
VALUES = st.one_of(st.text(), st.booleans(), INT64, st.integers(), st.floats(allow_nan=True),
                   st.sampled_from([0, -1, 1 << 63, -(1 << 63) - 1, (1 << 63) - 1, -(1 << 63), 1 << 200]))
ATTRIBUTES = st.dictionaries(st.text(), VALUES, max_size=8)
U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


@st.composite
def spans(draw: st.DrawFn) -> Span:
    return Span(
        trace_id=draw(st.binary(min_size=16, max_size=16)),
        span_id=draw(st.binary(min_size=8, max_size=8)),
        parent_span_id=draw(st.one_of(st.just(b""), st.binary(min_size=8, max_size=8))),
        name=draw(st.text()),
        kind=draw(st.sampled_from([0, 1, 2, 3, 4, 5])),
        start_ns=draw(U64),
        end_ns=draw(U64),
        attributes=draw(ATTRIBUTES),
        status_code=draw(st.sampled_from([0, 1, 2])),
        status_message=draw(st.text()),
        trace_state=draw(st.text()),
        flags=draw(st.integers(min_value=0, max_value=0xFFFFFFFF)),
    )


def _utf8(text: str) -> str:
    """What a string becomes: itself, lone surrogates replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _check_value(key: str, expected: object, value) -> None:
    kind = value.WhichOneof("value")
    if isinstance(expected, bool):
        assert (kind, value.bool_value) == ("bool_value", expected), key
    elif isinstance(expected, int):
        if -(1 << 63) <= expected < (1 << 63):
            assert (kind, value.int_value) == ("int_value", expected), key
        else:  # outside int64: its digits
            assert (kind, value.string_value) == ("string_value", str(expected)), key
    elif isinstance(expected, float):
        assert kind == "double_value", key
        assert value.double_value == expected or (math.isnan(expected) and math.isnan(value.double_value)), key
    else:
        assert (kind, value.string_value) == ("string_value", _utf8(str(expected))), key


def _check_attributes(expected: dict, decoded) -> None:
    assert [kv.key for kv in decoded] == [_utf8(k) for k in expected]
    for (key, value), kv in zip(expected.items(), decoded, strict=True):
        _check_value(key, value, kv.value)


def _check_span(span: Span, pb) -> None:
    assert pb.trace_id == span.trace_id
    assert pb.span_id == span.span_id
    assert pb.parent_span_id == span.parent_span_id
    assert pb.name == _utf8(span.name)
    assert pb.kind == span.kind
    assert pb.start_time_unix_nano == span.start_ns
    assert pb.end_time_unix_nano == span.end_ns
    assert pb.trace_state == _utf8(span.trace_state)
    assert pb.flags == span.flags
    assert pb.status.code == span.status_code
    assert pb.status.message == _utf8(span.status_message)
    assert pb.dropped_attributes_count == 0 and not pb.events and not pb.links
    _check_attributes(span.attributes, pb.attributes)


def decode(resource: dict, batch: list[Span]) -> ExportTraceServiceRequest:
    body = otlp.encode_request(otlp.encode_resource(resource), [otlp.encode_span(s) for s in batch])
    request = ExportTraceServiceRequest.FromString(body)
    # byte for byte what the project's messages write for the same content: no unknown or repeated
    # field, in order, proto3's defaults left out
    assert request.SerializeToString(deterministic=True) == body
    return request


@settings(**SETTINGS)
@given(st.dictionaries(st.text(), st.text(), max_size=5), st.lists(spans(), max_size=5))
def test_decoded_by_opentelemetry_proto_field_by_field(resource: dict, batch: list[Span]) -> None:
    request = decode(resource, batch)
    assert len(request.resource_spans) == 1
    rs = request.resource_spans[0]
    _check_attributes(resource, rs.resource.attributes)
    assert len(rs.scope_spans) == 1
    scope_spans = rs.scope_spans[0]
    assert scope_spans.scope.name == "twistgw" and scope_spans.scope.version == ""
    assert len(scope_spans.spans) == len(batch)
    for span, pb in zip(batch, scope_spans.spans, strict=True):
        _check_span(span, pb)


@settings(**SETTINGS)
@given(VALUES)
def test_every_attribute_value_type(value: object) -> None:
    span = Span(b"t" * 16, b"s" * 8, b"", "n", 2, 1, 2, {"k": value})
    pb = decode({}, [span]).resource_spans[0].scope_spans[0].spans[0]
    _check_value("k", value, pb.attributes[0].value)


def test_the_edges_by_name() -> None:
    """Each edge case once, by name, so a failure says which."""
    span = Span(b"\x00" * 16, b"\xff" * 8, b"", "", 1, 0, (1 << 64) - 1, {}, status_message="", flags=0)
    pb = decode({"service.name": "gateway"}, [span]).resource_spans[0].scope_spans[0].spans[0]
    _check_span(span, pb)  # empty attributes, empty name, no status, no parent, flags 0
    assert not pb.HasField("status")
    values = {"big": 1 << 64, "neg": -1, "min": -(1 << 63), "max": (1 << 63) - 1, "é": "naïve 日本 🚀",
              "t": True, "f": False, "zero": 0, "d": -0.0, "inf": float("inf"), "s": "\ud800x", "": ""}
    span = Span(b"a" * 16, b"b" * 8, b"c" * 8, "GET /é\ud800", 3, 5, 6, values, 2, "boom 💥", "k=v,ä=1", 0x301)
    _check_span(span, decode({}, [span]).resource_spans[0].scope_spans[0].spans[0])


def test_a_long_span_needs_multi_byte_lengths() -> None:
    span = Span(b"a" * 16, b"b" * 8, b"", "x" * 300, 2, 5, 6, {f"k{i}": "v" * 200 for i in range(100)})
    request = decode({"service.name": "s" * 1000}, [span] * 3)
    spans = request.resource_spans[0].scope_spans[0].spans
    assert len(spans) == 3
    for pb in spans:
        _check_span(span, pb)
