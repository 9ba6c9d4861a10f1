"""HPACK that remembers what it repeats, around ``hpack`` (issue 33).

``h2`` stays the HTTP/2 state machine and ``hpack`` the HPACK codec; these
subclasses only skip work whose result is already known:

* **Huffman decodings** (:func:`decode_huffman`): one process-wide LRU of
  :data:`HUFFMAN_ENTRIES` strings of at most :data:`HUFFMAN_MAX` bytes. A
  client such as nghttp2 (h2load, curl) sends ``authorization`` never
  indexed (RFC 7541 §7.1.3), so a 1 KB bearer token is Huffman-decoded, in
  Python, with every request: about 100 µs.
* **Header blocks** (:class:`Decoder`): a block that left the dynamic table
  unchanged (only indexed fields and literals without indexing) decodes to
  the same list as long as the table does not change. Each connection
  remembers :data:`BLOCKS` such blocks of at most :data:`BLOCK_MAX` bytes,
  forgotten all at once when the table (or a bound the decoding checks)
  changes.
* **The last response head** (:class:`Encoder`): the same header list,
  encoded once more with the table as it was left by that encoding, gives
  the same bytes.

A table change is counted by :class:`Table` (every ``add`` and every
resize), so "unchanged" is exact, not a guess from the table's size.
``tests/unit/test_http2_codec.py`` compares these with plain ``hpack`` on
random sequences of header lists, table-size updates and evictions.
"""

from __future__ import annotations

import functools
from typing import Any, cast

import h2.config
import h2.connection
import h2.settings
import hpack
import hpack.hpack
from hpack.huffman_table import decode_huffman as _plain_huffman
from h2.exceptions import StreamClosedError, StreamIDTooLowError
from hpack.table import HeaderTable

__all__ = ["BLOCKS", "BLOCK_MAX", "Configuration", "Connection", "Decoder", "Encoder", "HUFFMAN_ENTRIES", "HUFFMAN_MAX",
           "Settings", "Table", "decode_huffman", "equip", "install"]

#: Huffman-coded strings remembered, process-wide, and the longest one
HUFFMAN_ENTRIES = 256
HUFFMAN_MAX = 4096
#: header blocks remembered per connection, and the longest one
BLOCKS = 4
BLOCK_MAX = 8192


@functools.lru_cache(maxsize=HUFFMAN_ENTRIES)
def _cached_huffman(data: bytes) -> bytes:
    return _plain_huffman(data)


def decode_huffman(data: bytes) -> bytes:
    """hpack's Huffman decoding, remembered for strings up to :data:`HUFFMAN_MAX`
    bytes (an invalid string raises each time: errors are not cached)."""
    if len(data) <= HUFFMAN_MAX:
        return _cached_huffman(bytes(data))
    return _plain_huffman(data)


class _Silent:
    """hpack's module logger, quiet: it logs every header field it encodes
    or decodes at DEBUG, some fifty calls a request even with logging off."""

    def debug(self, *args: Any, **kwargs: Any) -> None:
        pass


def install() -> None:
    """hpack's module-level helpers replaced, once, for every hpack user in
    the process: the remembered Huffman decoding (the same results) and a
    silent DEBUG logger."""
    hpack.hpack.decode_huffman = decode_huffman  # type: ignore[assignment]
    hpack.hpack.log = _Silent()  # type: ignore[assignment]


install()


class Table(HeaderTable):
    """hpack's dynamic table, counting its changes (``changes``)."""

    def __init__(self) -> None:
        super().__init__()
        self.changes = 0

    def add(self, name: bytes, value: bytes) -> None:
        self.changes += 1
        super().add(name, value)

    def _set_maxsize(self, newmax: int) -> None:
        self.changes += 1
        HeaderTable.maxsize.fset(self, newmax)  # type: ignore[attr-defined]

    maxsize = property(HeaderTable.maxsize.fget, _set_maxsize)  # type: ignore[attr-defined]


class Decoder(hpack.Decoder):
    """hpack's decoder, remembering header blocks that leave the table
    unchanged (see the module); only the raw form (``raw=True``, what ``h2``
    asks for) is remembered."""

    def __init__(self, max_header_list_size: int = hpack.hpack.DEFAULT_MAX_HEADER_LIST_SIZE) -> None:
        super().__init__(max_header_list_size)
        self.header_table: Table = Table()
        self.max_allowed_table_size = self.header_table.maxsize
        self._blocks: dict[bytes, tuple[Any, ...]] = {}
        #: what the remembered blocks hold for: (table changes, the bounds decode checks)
        self._stamp: tuple[int, int, int] = (0, 0, 0)

    def decode(self, data: bytes, raw: bool = False) -> Any:
        if not raw:
            return super().decode(data, raw)
        table = self.header_table
        stamp = (table.changes, self.max_header_list_size, self.max_allowed_table_size)
        blocks = self._blocks
        if stamp != self._stamp:
            blocks.clear()
            self._stamp = stamp
        else:
            hit = blocks.get(data)
            if hit is not None:
                return list(hit)
        headers = super().decode(data, raw)
        if table.changes == stamp[0] and len(data) <= BLOCK_MAX:
            if len(blocks) >= BLOCKS:
                del blocks[next(iter(blocks))]
            blocks[bytes(data)] = tuple(headers)
        return headers


class Encoder(hpack.Encoder):
    """hpack's encoder, remembering the last header list it encoded when
    that encoding left the table unchanged (see the module). ``huffman``:
    the default for :meth:`encode` (``h2`` never passes it)."""

    def __init__(self, huffman: bool = True) -> None:
        super().__init__()
        self.header_table: Table = Table()
        self.huffman = huffman
        #: (table changes after, huffman, the header list, its block)
        self._last: tuple[int, bool, list[Any], bytes] | None = None

    def encode(self, headers: Any, huffman: bool | None = None) -> bytes:
        if huffman is None:
            huffman = self.huffman
        table = self.header_table
        # plain 2-tuples only: a HeaderTuple's "never indexed" is not part of tuple equality
        plain = type(headers) is list and all(type(h) is tuple and len(h) == 2 for h in headers)
        last = self._last
        if (plain and last is not None and last[0] == table.changes and last[1] is huffman
                and not table.resized and last[2] == headers):
            return last[3]
        before = table.changes
        resized = table.resized
        block = super().encode(headers, huffman)
        self._last = (before, huffman, list(headers), block) if plain and not resized and table.changes == before \
            else None
        return block


class Configuration:
    """``h2``'s :class:`~h2.config.H2Configuration` as plain attributes: ``h2``
    reads them some thirty times a request, and each read of an
    ``H2Configuration`` option is a Python descriptor call. ``h2``'s own
    header validation and normalisation are off: the engine checks a header
    list in one pass (``engine/http2/headers.request_fields`` downstream,
    ``engine/upstream/h2stream.field_problem`` upstream), and ``h2`` still
    checks framing, HPACK, flow control, stream states and ``content-length``
    against DATA."""

    def __init__(self, client_side: bool) -> None:
        self.client_side = client_side
        self.header_encoding = None
        self.validate_outbound_headers = False
        self.normalize_outbound_headers = False
        self.split_outbound_cookies = False
        self.validate_inbound_headers = False
        self.normalize_inbound_headers = False
        self.logger = h2.config.DummyLogger()


class _Pending(list[int]):
    """One setting's value, then those sent and not acknowledged yet: what
    ``h2`` keeps in a ``collections.deque``, in a list (a deque is 760 bytes
    even for one value, a one-value list 64)."""

    __slots__ = ()

    def popleft(self) -> Any:
        return self.pop(0)


class Settings(h2.settings.Settings):
    """``h2``'s settings of one side, their values in small lists: an idle
    connection's two ``Settings`` held some ten deques, 7-9 KiB of the
    15 KiB it cost the gateway."""

    def __init__(self, client: bool = True, initial_values: Any = None) -> None:
        super().__init__(client, initial_values)
        self._small()

    def _small(self) -> None:
        self._settings = {k: _Pending(v) for k, v in self._settings.items()}  # type: ignore[misc]

    def __setitem__(self, key: Any, value: int) -> None:
        fresh = key not in self._settings
        super().__setitem__(key, value)
        if fresh:  # h2 made a deque for it
            self._settings[key] = _Pending(self._settings[key])  # type: ignore[assignment]


def shrink(settings: h2.settings.Settings) -> h2.settings.Settings:
    """``settings`` (made by ``h2``) as :class:`Settings`, in place."""
    settings.__class__ = Settings
    cast(Settings, settings)._small()
    return settings


def equip(conn: Any, *, huffman: bool) -> Any:
    """``conn`` (a fresh ``h2`` connection) with the remembering codecs (its
    decoder's bound ``max_header_list_size`` carried over) and small settings."""
    decoder = Decoder(conn.decoder.max_header_list_size)
    conn.decoder = decoder
    conn.encoder = Encoder(huffman)
    shrink(conn.local_settings)
    shrink(conn.remote_settings)
    return conn


class Connection(h2.connection.H2Connection):
    """``h2``'s connection without one eager cost: its ``_receive_frame``
    formats ``repr(frame)`` for a trace log line before the (silent) logger
    is called, for every frame received, a few µs each. Here a frame goes
    straight to ``h2``'s dispatch; a frame on a closed stream (the two
    errors ``h2``'s method handles itself) is handed to ``h2``'s own method,
    with a dispatch that raises the same error again, so it is handled
    exactly as ``h2`` handles it and no state is touched twice."""

    def _receive_frame(self, frame: Any) -> list[Any]:
        try:
            frames, events = self._frame_dispatch_table[frame.__class__](frame)
        except (StreamClosedError, StreamIDTooLowError) as exc:
            return self._closed_stream_frame(frame, exc)
        self._prepare_for_sending(frames)
        return events

    def _closed_stream_frame(self, frame: Any, exc: Exception) -> list[Any]:
        def again(_frame: Any) -> Any:
            raise exc
        table = self._frame_dispatch_table
        self._frame_dispatch_table = {**table, frame.__class__: again}
        try:
            return super()._receive_frame(frame)
        finally:
            self._frame_dispatch_table = table
