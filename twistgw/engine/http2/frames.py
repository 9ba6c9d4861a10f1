"""The bounds ``h2`` does not keep, checked on the frame headers of what a
client sends before ``h2`` sees the bytes.

``h2`` (``H2Connection``) is the codec: it parses, validates and answers
every frame. It does not bound two things a hostile client controls, and
this module does, reading only the 9-byte header of each frame (length,
type, flags; RFC 9113 §4.1), never a payload:

* a frame longer than SETTINGS_MAX_FRAME_SIZE: ``h2`` buffers a frame's
  whole announced length (up to 16 MiB) before it checks; here it is a
  connection error (FRAME_SIZE_ERROR) as soon as its header arrives;
* a header block (HEADERS then CONTINUATION frames) longer than the
  header-list bound: ``h2`` keeps up to 64 CONTINUATION frames before it
  decodes; here the block's bytes are counted as they come (the
  CONTINUATION flood, 2024);

and it counts what Envoy's ``http2_protocol_options`` bound: consecutive
frames with an empty payload, PRIORITY and WINDOW_UPDATE frames (floods of
frames that cost work and carry nothing), and the PING and SETTINGS frames
that each make the gateway queue an acknowledgement.

:class:`FrameWatch` raises :class:`Flood` with the RFC 9113 error code; the
connection then sends GOAWAY and closes. It also says whether a header
block is under way (:attr:`FrameWatch.heading`): the head timer runs
meanwhile.
"""

from __future__ import annotations

from h2.errors import ErrorCodes

from twistgw.config.http2 import Http2Options

__all__ = ["Flood", "FrameWatch"]

# frame types (RFC 9113 §6)
_DATA, _HEADERS, _PRIORITY, _SETTINGS, _PING, _WINDOW_UPDATE, _CONTINUATION = 0, 1, 2, 4, 6, 8, 9
_END_STREAM = 0x1  # DATA, HEADERS
_ACK = 0x1  # SETTINGS, PING
_END_HEADERS = 0x4  # HEADERS, CONTINUATION
#: the client connection preface (RFC 9113 §3.4), before the first frame
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class Flood(Exception):
    """The client broke a bound: a connection error ``code``, for ``reason``."""

    def __init__(self, code: ErrorCodes, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class FrameWatch:
    """Reads the frame headers of one client connection's bytes (see the module).

    ``acks``: PING and SETTINGS frames (not acknowledgements) since
    :meth:`take_acks`; ``data_sent``: DATA frames the gateway sent (the
    connection adds them), which WINDOW_UPDATE frames are measured against.
    """

    __slots__ = ("_options", "_preface", "_skip", "_type", "_partial", "_in_block", "_block", "_empty",
                 "_priority", "_updates", "_headers", "acks", "data_sent")

    def __init__(self, options: Http2Options, preface: bool = True) -> None:
        self._options = options
        self._preface = len(PREFACE) if preface else 0
        #: payload bytes of the frame under way still to come
        self._skip = 0
        #: the type of the last frame whose header was read
        self._type = -1
        #: the start of a frame header split between two reads
        self._partial = b""
        self._in_block = False
        self._block = 0
        self._empty = 0
        self._priority = 0
        self._updates = 0
        self._headers = 0
        self.acks = 0
        self.data_sent = 0

    @property
    def heading(self) -> bool:
        """A header block is under way (its HEADERS or CONTINUATION frames
        are incomplete)."""
        return self._in_block or (self._skip > 0 and self._type in (_HEADERS, _CONTINUATION))

    def take_acks(self) -> int:
        n, self.acks = self.acks, 0
        return n

    def feed(self, data: bytes) -> None:
        """The next bytes from the client. Raises :class:`Flood`."""
        n = len(data)
        i = 0
        if self._preface:
            i = min(self._preface, n)
            self._preface -= i
        if self._skip:
            take = min(self._skip, n - i)
            self._skip -= take
            i += take
            if self._skip:
                return
        if self._partial:
            head = self._partial + data[i:i + 9 - len(self._partial)]
            i += len(head) - len(self._partial)
            if len(head) < 9:
                self._partial = head
                return
            self._partial = b""
            length = self._frame(head, 0)
            if length > n - i:
                self._skip = length - (n - i)
                return
            i += length
        while n - i >= 9:
            length = self._frame(data, i)
            i += 9
            if length > n - i:
                self._skip = length - (n - i)
                return
            i += length
        if i < n:
            self._partial = data[i:]

    def _frame(self, buf: bytes, at: int) -> int:
        """Check one frame header (at ``buf[at:at+9]``); its payload length."""
        length = (buf[at] << 16) | (buf[at + 1] << 8) | buf[at + 2]
        kind = buf[at + 3]
        flags = buf[at + 4]
        self._type = kind
        options = self._options
        if length > options.max_frame_size:
            raise Flood(ErrorCodes.FRAME_SIZE_ERROR, f"a frame of {length} bytes, over SETTINGS_MAX_FRAME_SIZE"
                        f" ({options.max_frame_size})")
        if kind == _DATA or kind == _HEADERS or kind == _CONTINUATION:
            if kind == _CONTINUATION or (kind == _HEADERS and not self._in_block):
                self._header_block(kind, length, flags)
            if length or (kind != _CONTINUATION and flags & _END_STREAM):
                self._empty = 0
            else:
                self._empty += 1
                if self._empty > options.max_empty_frames:
                    raise Flood(ErrorCodes.ENHANCE_YOUR_CALM, "frames with an empty payload, one after the other")
        elif kind == _PING or kind == _SETTINGS:
            if not flags & _ACK:
                self.acks += 1
        elif kind == _PRIORITY:
            self._priority += 1
            if self._priority > options.priority_frames_per_stream * (1 + self._headers):
                raise Flood(ErrorCodes.ENHANCE_YOUR_CALM, "a flood of PRIORITY frames")
        elif kind == _WINDOW_UPDATE:
            self._updates += 1
            if self._updates > 5 + 2 * (self._headers + options.window_updates_per_data_frame * self.data_sent):
                raise Flood(ErrorCodes.ENHANCE_YOUR_CALM, "a flood of WINDOW_UPDATE frames")
        return length

    def _header_block(self, kind: int, length: int, flags: int) -> None:
        if kind == _HEADERS:
            self._headers += 1
            self._block = 0
        elif not self._in_block:
            return  # a CONTINUATION outside a block: h2's protocol error
        self._block += length
        if self._block > self._options.max_header_list:
            raise Flood(ErrorCodes.ENHANCE_YOUR_CALM, f"a header block over {self._options.max_header_list}"
                        " bytes (HEADERS and CONTINUATION frames)")
        self._in_block = not flags & _END_HEADERS
