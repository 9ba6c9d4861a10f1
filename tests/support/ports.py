"""Loopback ports for processes the tests start with a port written in their
configuration (a Gloo Gateway's bindPort, slapd, redis-server, twist's
``--listen``), where binding port 0 is not possible.

A port that was free when the test chose it can be taken before the process
binds it. What takes it is nearly always an outgoing connection: every
client socket on the machine (the gateway's upstream and Redis connections,
curl, the test's own clients) gets its local port from the kernel's
ephemeral range. So the ports handed out here are chosen *below* that range
(``/proc/sys/net/ipv4/ip_local_port_range``), where no connection is given
a port, and are checked to be bindable now.
"""

from __future__ import annotations

import random
import socket

__all__ = ["free_port"]

_LOWEST = 20000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A loopback TCP port nobody listens on now, outside the ephemeral range."""
    high = _ephemeral_low() - 1
    for _ in range(200):
        port = random.randint(_LOWEST, high) if high > _LOWEST else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError(f"no free loopback port between {_LOWEST} and {high}")
