"""``x-request-id`` on a Gateway's listener, as Envoy's HTTP connection
manager sets it (``generateRequestId``, ``preserveExternalRequestId``;
no I/O): :func:`request_id` decides the id a request goes upstream with,
:func:`new_id` makes one.

An id is a UUID version 4 in its usual text form. Made 512 at a time from
one 8 KiB ``os.urandom`` read, laid out by C loops (the ids not handed out
are dropped in a forked child): as unpredictable as ``uuid.uuid4()`` at a
fraction of its cost (docs/decisions.md).
"""

from __future__ import annotations

import os
from typing import Any

from twistgw.config.gateways import HcmSettings

__all__ = ["MAX_LENGTH", "is_sane", "new_id", "request_id"]

#: the longest client id kept (a UUID is 36 characters; Envoy bounds
#: nothing but the header block)
MAX_LENGTH = 128

#: ids made per ``os.urandom`` read
_COUNT = 512
#: where each character of an id comes from: a hex digit of its 16 random
#: bytes, a dash, the version (4) or the variant (8, 9, a or b, from digit 16)
_LAYOUT: tuple[int | str, ...] = (*range(8), "-", *range(8, 12), "-", "4", *range(13, 16), "-", "v",
                                  *range(17, 20), "-", *range(20, 32))
_FILL = {"-": b"-" * _COUNT, "4": b"4" * _COUNT}
#: a hex digit → the variant's digit with the same two low bits (RFC 9562 §4.1)
_VARIANT = bytes.maketrans(b"0123456789abcdef", b"89ab89ab89ab89ab")
#: visible ASCII: what a kept id may hold
_VISIBLE = bytes(range(0x21, 0x7F))
#: ids made and not handed out yet (dropped in a forked child)
_ids: list[str] = []


def _make() -> list[str]:
    """:data:`_COUNT` ids from one read of random bytes, laid out with
    strided slice assignments (C loops: no Python work per character)."""
    digits = os.urandom(16 * _COUNT).hex().encode("ascii")
    out = bytearray(b"\n" * (37 * _COUNT))
    for place, source in enumerate(_LAYOUT):
        if isinstance(source, int):
            out[place::37] = digits[source::32]
        elif source == "v":
            out[place::37] = digits[16::32].translate(_VARIANT)
        else:
            out[place::37] = _FILL[source]
    ids = out.decode("ascii").split("\n")
    ids.pop()  # after the last newline
    return ids


def _forget() -> None:
    _ids.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)  # a worker never repeats its parent's ids


def new_id() -> str:
    """A fresh UUID4 (``xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx``)."""
    ids = _ids
    if not ids:
        ids.extend(_make())
    return ids.pop()


def is_sane(value: bytes) -> bool:
    """A client's id worth keeping: 1 to :data:`MAX_LENGTH` visible ASCII
    characters (no space, no control character, nothing a log line or a
    backend could take for something else)."""
    return 0 < len(value) <= MAX_LENGTH and not value.translate(None, _VISIBLE)


def request_id(hcm: HcmSettings, headers: Any) -> str | None:
    """The ``x-request-id`` to send upstream for a request with ``headers``
    (as received: the engine's ``Headers``, or any with ``getRawHeaders``),
    or None (``generateRequestId: false``: the client's, if any, goes on as
    it came).

    Envoy's rules: with ``generateRequestId`` (its default), a request
    without one gets a new id; a client's id is replaced on an edge listener
    (``useRemoteAddress``, Gloo's default) unless
    ``preserveExternalRequestId``. twistgw also replaces a kept id that is
    not one sane value (:func:`is_sane`; two headers are not one)."""
    if not hcm.generate_request_id:
        return None
    try:
        received: list[bytes] | None = headers.get_canonical(b"X-Request-Id")  # no name lookup
    except AttributeError:
        received = headers.getRawHeaders(b"x-request-id")
    if received is not None and len(received) == 1 and is_sane(received[0]) and (
            hcm.preserve_external_request_id or not hcm.use_remote_address):
        return received[0].decode("ascii")
    return new_id()
