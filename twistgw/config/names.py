"""Name, address and duration rules shared by the configuration readers (pure)."""

from __future__ import annotations

import re
from typing import Any


def host_without_port(host: str) -> str:
    """A Host value or configured domain, lower-cased, without its port
    (an IPv6 literal keeps its brackets) and without a trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end != -1 else host
    colon = host.rfind(":")
    if colon != -1 and host.count(":") == 1:
        return host[:colon]
    return host.rstrip(".")


def is_loopback_endpoint(description: str) -> bool:
    """Whether a Twisted server endpoint string listens on loopback only
    (``tcp:PORT:interface=127.0.0.1`` or ``::1``)."""
    parts = description.split(":")
    if not parts or parts[0] not in ("tcp", "tcp6"):
        return False
    for part in parts[1:]:
        if part.startswith("interface="):
            iface = part.split("=", 1)[1].replace("\\", "")
            return iface.startswith("127.") or iface in ("::1", "localhost")
    return False


def parse_duration(value: Any) -> float | None:
    """``15s``, ``1.5s``, ``200ms``, ``2m``, ``1h`` or a number of seconds."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value >= 0 else None
    if not isinstance(value, str):
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", value)
    if not m:
        return None
    number = float(m.group(1))
    return number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
