"""``x-request-id`` on a Gateway's listener, as Envoy's HTTP connection
manager sets it (``generateRequestId``, ``preserveExternalRequestId``;
no I/O): :func:`request_id` decides the id a request goes upstream with,
:func:`new_id` makes one.

An id is a UUID version 4 in its usual text form. Made 512 at a time from
one 8 KiB ``os.urandom`` read, laid out by a few C calls over the whole
block (the ids not handed out are dropped in a forked child): as
unpredictable as ``uuid.uuid4()`` at a fraction of its cost
(docs/decisions.md).
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
#: a hex digit → the variant's digit with the same two low bits (RFC 9562 §4.1)
_VARIANT = bytes.maketrans(b"0123456789abcdef", b"89ab89ab89ab89ab")
_FOUR = b"4" * _COUNT
_NEWLINES = b"\n" * (_COUNT - 1)
#: visible ASCII: what a kept id may hold
_VISIBLE = bytes(range(0x21, 0x7F))
#: ids made and not handed out yet (dropped in a forked child)
_ids: list[str] = []


def _make() -> list[str]:
    """:data:`_COUNT` ids from one read of random bytes, laid out by a few
    C calls over the whole block (no Python work per id): the bytes' hex
    with a dash every 2 bytes (``aaaa-bbbb-cccc-dddd-eeee-ffff-gggg-hhhh-``,
    40 characters per id), three strided deletions of the dashes a UUID
    does not have (``aaaabbbb-cccc-dddd-eeee-ffffgggghhhh-``, 37), then
    strided assignments of the version, the variant and the newline the
    block is split on."""
    text = bytearray(os.urandom(16 * _COUNT).hex("-", 2), "ascii")
    del text[34::40]  # ...-ffffgggg-hhhh-: 39 per id
    del text[29::39]  # ...-ffffgggghhhh-: 38
    del text[4::38]  # aaaabbbb-cccc-dddd-eeee-ffffgggghhhh-: 37
    text[14::37] = _FOUR  # the version: 4
    text[19::37] = text[19::37].translate(_VARIANT)  # the variant: 10xx
    text[36::37] = _NEWLINES
    return text.decode("ascii").split("\n")


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
        received: list[bytes] | None = headers.raw.get(b"X-Request-Id")  # canonical names: no name lookup
    except AttributeError:
        received = headers.getRawHeaders(b"x-request-id")
    if received is None:  # the usual request: a new id
        return _ids.pop() if _ids else new_id()
    if len(received) == 1 and is_sane(received[0]) and (
            hcm.preserve_external_request_id or not hcm.use_remote_address):
        return received[0].decode("ascii")
    return new_id()
