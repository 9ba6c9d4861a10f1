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

Under pytest-xdist (``./run-tests.sh`` runs the suite on several workers)
each worker takes its ports from a slice of its own (``PYTEST_XDIST_WORKER``
``gwN`` of ``PYTEST_XDIST_WORKER_COUNT``): a port one worker chose but whose
process has not bound it yet is never chosen by another.
"""

from __future__ import annotations

import collections
import os
import random
import re
import socket

__all__ = ["free_port"]

_LOWEST = 20000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _worker_slice(low: int, high: int) -> tuple[int, int]:
    """This xdist worker's part of [low, high] (all of it outside xdist)."""
    match = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if match is None or count <= 1 or high - low < count:
        return low, high
    index = int(match.group(1)) % count
    size = (high - low + 1) // count
    return low + index * size, low + (index + 1) * size - 1


#: the ports handed out last: a test often takes two or three before any
#: is bound (a Gateway's bindPort, then twist's --listen), and a port just
#: handed out is still bindable, so it is not handed out again soon
_RECENT: collections.deque[int] = collections.deque(maxlen=512)


def free_port() -> int:
    """A loopback TCP port nobody listens on now, outside the ephemeral range
    (and inside this xdist worker's slice of it), not one of the last ones
    this process handed out."""
    low, high = _worker_slice(_LOWEST, _ephemeral_low() - 1)
    for _ in range(200):
        port = random.randint(low, high) if high > low else 0
        if port in _RECENT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        _RECENT.append(port)
        return port
    raise RuntimeError(f"no free loopback port between {low} and {high}")
