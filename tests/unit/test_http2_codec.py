"""HPACK that remembers what it repeats (``engine/http2/codec.py``) gives
what plain ``hpack`` gives, on random sequences of header lists: fields
indexed, not indexed and never indexed, Huffman on and off, table-size
updates and evictions (small tables), repeated blocks. The decoder and the
encoder each run beside a plain twin fed the same input; their outputs and
their dynamic tables must agree after every step."""

from __future__ import annotations

import collections

import h2.config
import h2.connection
import h2.exceptions
import h2.settings
import hpack
import hyperframe.frame
import pytest
from hpack import HeaderTuple, NeverIndexedHeaderTuple
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hpack.huffman_table import decode_huffman as plain_huffman
from hypothesis import given, settings
from hypothesis import strategies as st

from twistgw.engine.http2 import codec

_FIELDS = st.sampled_from([(b":method", b"GET"), (b":path", b"/"), (b":path", b"/hello"), (b"x-a", b"1"),
                           (b"x-a", b"2"), (b"authorization", b"Bearer " + b"t" * 300), (b"user-agent", b"h2load"),
                           (b"x-long", b"v" * 120), (b"cookie", b"a=b")])
_KIND = st.sampled_from(["plain", "indexed", "never"])


@st.composite
def _lists(draw: st.DrawFn) -> list[object]:
    out: list[object] = []
    for name, value in draw(st.lists(_FIELDS, min_size=1, max_size=6)):
        kind = draw(_KIND)
        out.append((name, value) if kind == "plain" else
                   HeaderTuple(name, value) if kind == "indexed" else NeverIndexedHeaderTuple(name, value))
    return out


# a step: a header list to encode (with Huffman or not), or a new table size for the encoder
_STEPS = st.lists(st.one_of(st.tuples(st.just("list"), _lists(), st.booleans()),
                            st.tuples(st.just("size"), st.sampled_from([0, 64, 200, 400, 4096]), st.just(False))),
                  min_size=1, max_size=30)


def _table(t: hpack.hpack.HeaderTable) -> tuple[object, ...]:
    return (t.maxsize, tuple(t.dynamic_entries))


def _decoded(decoder: hpack.Decoder, block: bytes) -> object:
    """The header list, or the error's type (hpack's own encoder can write
    what its decoder refuses, e.g. around a table of size 0: both must refuse)."""
    try:
        return decoder.decode(block, raw=True)
    except hpack.HPACKError as exc:
        return type(exc)


@settings(max_examples=300, deadline=None)
@given(_STEPS, st.integers(0, 3))
def test_the_decoder_agrees_with_hpack(steps: list[tuple[str, object, bool]], repeats: int) -> None:
    peer = hpack.Encoder()
    plain, ours = hpack.Decoder(), codec.Decoder()
    for kind, arg, huffman in steps:
        if kind == "size":
            if arg != peer.header_table_size:  # hpack loses a pending update set twice to one size
                peer.header_table_size = arg
            continue
        block = peer.encode(arg, huffman=huffman)
        for _ in range(1 + repeats):  # the same bytes again: a hit when the table did not change
            assert _decoded(ours, block) == _decoded(plain, block)
            assert _table(ours.header_table) == _table(plain.header_table)


@settings(max_examples=300, deadline=None)
@given(_STEPS, st.integers(0, 3))
def test_the_encoder_agrees_with_hpack(steps: list[tuple[str, object, bool]], repeats: int) -> None:
    plain, ours = hpack.Encoder(), codec.Encoder()
    peer = hpack.Decoder()
    for kind, arg, huffman in steps:
        if kind == "size":
            if arg != plain.header_table_size:
                plain.header_table_size = ours.header_table_size = arg
            continue
        for _ in range(1 + repeats):
            block = ours.encode(list(arg), huffman=huffman)  # type: ignore[call-overload]
            assert block == plain.encode(list(arg), huffman=huffman)  # type: ignore[call-overload]
            assert _table(ours.header_table) == _table(plain.header_table)
            peer.decode(block, raw=True)
            assert _table(peer.header_table) == _table(plain.header_table)


def test_a_block_is_not_reused_once_the_table_changed() -> None:
    """The same bytes name another field after an insertion: decoded afresh."""
    peer = hpack.Encoder()
    ours = codec.Decoder()
    first = peer.encode([(b"x-a", b"1")])  # inserted: index 62
    ours.decode(first, raw=True)
    ref = bytes([0x80 | 62])
    assert ours.decode(ref, raw=True) == [(b"x-a", b"1")]
    assert ours.decode(ref, raw=True) == [(b"x-a", b"1")]  # remembered
    ours.decode(peer.encode([(b"x-b", b"2")]), raw=True)  # index 62 is x-b now
    assert ours.decode(ref, raw=True) == [(b"x-b", b"2")]


def test_a_remembered_block_still_meets_a_smaller_header_list_bound() -> None:
    ours = codec.Decoder()
    block = hpack.Encoder().encode([NeverIndexedHeaderTuple(b"x-long", b"v" * 200)])
    ours.decode(block, raw=True)
    ours.decode(block, raw=True)
    ours.max_header_list_size = 100
    with pytest.raises(hpack.OversizedHeaderListError):
        ours.decode(block, raw=True)


def test_a_never_indexed_field_is_not_sent_from_the_remembered_list() -> None:
    ours, plain = codec.Encoder(), hpack.Encoder()
    fields = [(b":status", b"200"), (b"x-a", b"1")]
    for _ in range(3):
        assert ours.encode(fields) == plain.encode(fields)  # remembered after the first
    secret = [(b":status", b"200"), NeverIndexedHeaderTuple(b"x-a", b"2")]
    assert ours.encode(secret) == plain.encode(secret)  # a never-indexed literal, not the list remembered


@settings(deadline=None)
@given(st.binary(max_size=600))
def test_huffman_decoding_is_remembered_with_the_same_result(raw: bytes) -> None:
    coded = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH).encode(raw)
    assert codec.decode_huffman(coded) == plain_huffman(coded) == raw
    assert codec.decode_huffman(coded) == raw


def test_invalid_huffman_raises_every_time() -> None:
    bad = b"\xff\xff\xff\xff"  # EOS: a decoding error (RFC 7541 §5.2)
    for _ in range(2):
        with pytest.raises(hpack.HPACKDecodingError):
            codec.decode_huffman(bad)


def test_the_remembered_list_is_encoded_afresh_once_the_table_changed() -> None:
    """An insertion shifts the dynamic indices: the same list gets other bytes."""
    ours, plain = codec.Encoder(), hpack.Encoder()
    fields = [(b":status", b"200"), (b"x-a", b"1")]
    for step in (fields, fields, [(b"x-b", b"2")], fields, fields):
        assert ours.encode(step) == plain.encode(step)


def _settings_story(settings: h2.settings.Settings) -> list[object]:
    """What h2 does with one side's settings: values sent, read before and after their ACK."""
    codes = h2.settings.SettingCodes
    seen: list[object] = [dict(settings)]
    settings[codes.INITIAL_WINDOW_SIZE] = 1000
    settings[codes.MAX_CONCURRENT_STREAMS] = 5  # a key it did not hold
    settings[codes.INITIAL_WINDOW_SIZE] = 2000  # two values waiting for their ACK
    seen += [settings.initial_window_size, settings.get(codes.MAX_CONCURRENT_STREAMS)]
    seen.append(sorted((int(k), c.original_value, c.new_value) for k, c in settings.acknowledge().items()))
    seen += [settings.initial_window_size, settings.max_concurrent_streams, dict(settings)]
    del settings[codes.MAX_CONCURRENT_STREAMS]
    seen.append(dict(settings))
    return seen


def test_small_settings_behave_as_h2s() -> None:
    assert _settings_story(codec.Settings(client=False)) == _settings_story(h2.settings.Settings(client=False))
    made = codec.shrink(h2.settings.Settings(client=True))
    assert _settings_story(made) == _settings_story(h2.settings.Settings(client=True))
    assert all(type(v) is not collections.deque for v in made._settings.values())  # the memory it is for


def _closed_stream_story(server: h2.connection.H2Connection) -> list[object]:
    """A client's frames on a stream it reset, and on one the server ended:
    what h2's _receive_frame handles itself (RST_STREAM back, or a GOAWAY)."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    server.initiate_connection()
    out: list[object] = []

    def deliver() -> None:
        try:
            events = server.receive_data(client.data_to_send())
        except h2.exceptions.ProtocolError as exc:
            out.append(type(exc).__name__)
        else:
            out.append([type(e).__name__ for e in events])
        out.append(server.data_to_send())
        client.receive_data(out[-1])  # type: ignore[arg-type]

    deliver()
    client.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":authority", "a"), (":path", "/")])
    client.reset_stream(1)
    deliver()
    for frame in (hyperframe.frame.DataFrame(1, b"late"),  # DATA after its own RST_STREAM: a stream error
                  hyperframe.frame.HeadersFrame(1, hpack.Encoder().encode([(b"x-t", b"1")]),
                                                flags=["END_HEADERS", "END_STREAM"])):  # trailers after it
        out.append([type(e).__name__ for e in server.receive_data(frame.serialize())])
        out.append(server.data_to_send())
    frame = hyperframe.frame.DataFrame(7, b"never opened", flags=["END_STREAM"])  # a connection error
    try:
        server.receive_data(frame.serialize())
    except h2.exceptions.ProtocolError as exc:
        out.append(type(exc).__name__)
    out.append(server.data_to_send())
    return out


def test_frames_on_closed_streams_are_handled_as_h2_handles_them() -> None:
    ours = _closed_stream_story(codec.Connection(h2.config.H2Configuration(client_side=False)))
    assert ours == _closed_stream_story(h2.connection.H2Connection(h2.config.H2Configuration(client_side=False)))
    rst = [x for x in ours if isinstance(x, bytes) and x[3:4] == b"\x03"]  # RST_STREAM (type 3) went out
    assert rst, ours
