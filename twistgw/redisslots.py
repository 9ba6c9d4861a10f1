"""Redis Cluster's arithmetic, without I/O: which hash slot a key lives in,
the slot map a node describes (``CLUSTER SHARDS``, or ``CLUSTER SLOTS``
before Redis 7), and the redirections a node answers (``MOVED``, ``ASK``).

* :func:`key_slot` is the cluster's own: CRC16 (CCITT/XMODEM, the
  polynomial 0x1021 from 0, which is :func:`binascii.crc_hqx`) of the key,
  modulo 16384; a key holding ``{tag}`` (the first ``{``, then the first
  ``}`` after it, with something between) is hashed by ``tag`` alone, so
  keys that share a tag share a slot.
* :func:`parse_shards` and :func:`parse_slots` turn a reply into
  :class:`SlotRange` values: ranges of slots and the primary serving each
  (None when no primary can serve it now: failed, or with no address).
* :func:`parse_redirect` reads ``MOVED 3999 10.0.0.2:6379`` and
  ``ASK 3999 10.0.0.2:6379`` (an empty host means the node that answered).

:mod:`twistgw.rediscluster` routes commands with these.
"""

from __future__ import annotations

from binascii import crc_hqx
from typing import Any, Sequence

import attrs

__all__ = ["SLOTS", "Redirect", "SlotRange", "key_slot", "parse_redirect", "parse_shards", "parse_slots"]

#: hash slots in a Redis Cluster
SLOTS = 16384


def key_slot(key: str | bytes) -> int:
    """The hash slot of ``key`` (hash tags honoured), as ``CLUSTER KEYSLOT`` answers."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1:end]
    return crc_hqx(data, 0) & (SLOTS - 1)


@attrs.frozen
class Redirect:
    """A ``MOVED`` or ``ASK`` answer: the slot, and where it is served."""

    kind: str  # "MOVED" or "ASK"
    slot: int
    #: the node's host; "" means the node that answered; None when it is not known ("?")
    host: str | None
    port: int


def _port(text: str) -> int | None:
    if not text.isdigit() or not 0 < int(text) < 65536:
        return None
    return int(text)


def parse_redirect(text: str) -> Redirect | None:
    """``text`` (an error reply) as a redirection; None when it is not one, or malformed."""
    parts = text.split(" ")
    if len(parts) != 3 or parts[0] not in ("MOVED", "ASK") or not parts[1].isdigit():
        return None
    slot = int(parts[1])
    host, sep, port_text = parts[2].rpartition(":")
    port = _port(port_text)
    if not sep or port is None or slot >= SLOTS:
        return None
    host = host.strip("[]")  # IPv6 written with or without brackets
    return Redirect(parts[0], slot, None if host == "?" else host, port)


@attrs.frozen
class SlotRange:
    """Slots ``low`` to ``high`` (inclusive), served by ``node`` ((host, port)),
    or by nobody reachable (None: the primary failed and no replica took over
    yet, or the node has no address)."""

    low: int
    high: int
    node: tuple[str, int] | None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _pairs(flat: Sequence[Any]) -> dict[str, Any]:
    """A RESP2 map (a flat list: name, value, name, value...) as a dict."""
    if not isinstance(flat, list) or len(flat) % 2:
        raise ValueError(f"not a map: {flat!r}")
    return {_text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


def _endpoint(value: Any, asked: str) -> str | None:
    """A node's address as a reply gives it: "" is the node asked, "?" or nil unknown."""
    if value is None:
        return None
    text = _text(value)
    if text == "?":
        return None
    return text or asked


def _range(low: Any, high: Any) -> tuple[int, int]:
    if not isinstance(low, int) or not isinstance(high, int) or not 0 <= low <= high < SLOTS:
        raise ValueError(f"not a slot range: {low!r}-{high!r}")
    return low, high


def parse_shards(reply: Any, asked: str, tls: bool) -> list[SlotRange]:
    """``CLUSTER SHARDS`` (Redis 7+): each shard's slot ranges and its
    primary, when that primary is ``online``. ``asked`` is the host of the
    node that answered; ``tls`` picks each node's ``tls-port``."""
    if not isinstance(reply, list):
        raise ValueError(f"CLUSTER SHARDS answered {reply!r}")
    out: list[SlotRange] = []
    for shard in reply:
        fields = _pairs(shard)
        slots = fields.get("slots") or []
        if not isinstance(slots, list) or len(slots) % 2:
            raise ValueError(f"CLUSTER SHARDS slots: {slots!r}")
        node: tuple[str, int] | None = None
        for raw in fields.get("nodes") or []:
            info = _pairs(raw)
            if _text(info.get("role", "")) != "master" or _text(info.get("health", "online")) != "online":
                continue  # a replica, or a primary that failed or is loading: it serves nothing now
            port = info.get("tls-port") if tls and "tls-port" in info else info.get("port")
            host = _endpoint(info.get("endpoint"), asked)
            if host is None:
                host = _endpoint(info.get("ip"), asked)
            if host is not None and isinstance(port, int) and 0 < port < 65536:
                node = (host, port)
            break
        for i in range(0, len(slots), 2):
            low, high = _range(slots[i], slots[i + 1])
            out.append(SlotRange(low, high, node))
    return out


def parse_slots(reply: Any, asked: str) -> list[SlotRange]:
    """``CLUSTER SLOTS`` (before Redis 7): ``[low, high, [host, port, id, ...], replicas...]``
    per range; the port is the one of the connection's kind (TLS or not)."""
    if not isinstance(reply, list):
        raise ValueError(f"CLUSTER SLOTS answered {reply!r}")
    out: list[SlotRange] = []
    for entry in reply:
        if not isinstance(entry, list) or len(entry) < 3 or not isinstance(entry[2], list) or len(entry[2]) < 2:
            raise ValueError(f"CLUSTER SLOTS entry: {entry!r}")
        low, high = _range(entry[0], entry[1])
        host, port = _endpoint(entry[2][0], asked), entry[2][1]
        ok = host is not None and isinstance(port, int) and 0 < port < 65536
        out.append(SlotRange(low, high, (host, port) if ok and host is not None else None))
    return out
