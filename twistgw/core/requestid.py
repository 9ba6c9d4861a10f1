"""``x-request-id`` on a Gateway's listener, as Envoy's HTTP connection
manager sets it (``generateRequestId``, ``preserveExternalRequestId``;
no I/O): :func:`request_id` decides the id a request goes upstream with,
:func:`new_id` makes one.

An id is a UUID version 4 in its usual text form. Made from
``os.urandom`` bytes read 4 KiB at a time (256 ids per read, the block
dropped in a forked child): as unpredictable as ``uuid.uuid4()`` at a
fifth of its cost (docs/decisions.md).
"""

from __future__ import annotations

import os

from twistgw.config.gateways import HcmSettings

__all__ = ["MAX_LENGTH", "is_sane", "new_id", "request_id"]

#: the longest client id kept (a UUID is 36 characters; Envoy bounds
#: nothing but the header block)
MAX_LENGTH = 128

_BLOCK = 4096
_block = b""
_at = _BLOCK
#: the hex digit at the variant's place: 8, 9, a or b (RFC 9562 §4.1)
_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}
#: visible ASCII: what a kept id may hold
_VISIBLE = bytes(range(0x21, 0x7F))


def _forget_block() -> None:
    global _block, _at
    _block, _at = b"", _BLOCK


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_block)  # a worker never repeats its parent's ids


def new_id() -> str:
    """A fresh UUID4 (``xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx``)."""
    global _block, _at
    at = _at
    if at >= _BLOCK:
        _block, at = os.urandom(_BLOCK), 0
    _at = at + 16
    h = _block[at:at + 16].hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


def is_sane(value: bytes) -> bool:
    """A client's id worth keeping: 1 to :data:`MAX_LENGTH` visible ASCII
    characters (no space, no control character, nothing a log line or a
    backend could take for something else)."""
    return 0 < len(value) <= MAX_LENGTH and not value.translate(None, _VISIBLE)


def request_id(hcm: HcmSettings, received: list[bytes] | None) -> bytes | None:
    """The ``x-request-id`` to send upstream, or None (``generateRequestId:
    false``: the client's, if any, goes on as it came).

    Envoy's rules: with ``generateRequestId`` (its default), a request
    without one gets a new id; a client's id is replaced on an edge listener
    (``useRemoteAddress``, Gloo's default) unless
    ``preserveExternalRequestId``. twistgw also replaces a kept id that is
    not one sane value (:func:`is_sane`; two headers are not one)."""
    if not hcm.generate_request_id:
        return None
    if received is not None and len(received) == 1 and is_sane(received[0]) and (
            hcm.preserve_external_request_id or not hcm.use_remote_address):
        return received[0]
    return new_id().encode("ascii")
