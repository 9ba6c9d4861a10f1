"""The listen backlog (issue 13, point 8): a burst of connects arriving while
the reactor is busy completes at once, instead of waiting on SYN
retransmits (1 s, then 3 s...) behind Twisted's default backlog of 50."""

from __future__ import annotations

import select
import socket
import time
from typing import Any

import pytest
import pytest_twisted

from support.http import sleep, static_upstream_yaml, vs_yaml
from twistgw.config.defaults import BACKLOG
from twistgw.config.names import with_backlog
from twistgw.runtime.service import GatewayService
from twistgw.tap import Options

BURST = 600


@pytest.mark.parametrize("description, expected", [
    ("tcp:8080", f"tcp:8080:backlog={BACKLOG}"),
    ("tcp:8080:interface=127.0.0.1", f"tcp:8080:interface=127.0.0.1:backlog={BACKLOG}"),
    ("tcp6:8080:interface=\\:\\:1", f"tcp6:8080:interface=\\:\\:1:backlog={BACKLOG}"),
    ("ssl:8443:privateKey=k.pem:certKey=c.pem", f"ssl:8443:privateKey=k.pem:certKey=c.pem:backlog={BACKLOG}"),
    ("unix:/run/gw.sock", f"unix:/run/gw.sock:backlog={BACKLOG}"),
    ("tcp:8080:backlog=10", "tcp:8080:backlog=10"),  # an explicit backlog= wins
    ("systemd:domain=INET:index=0", "systemd:domain=INET:index=0"),  # no backlog parameter
])
def test_with_backlog(description: str, expected: str) -> None:
    assert with_backlog(description, BACKLOG) == expected


def test_backlog_option() -> None:
    o = Options()
    o.parseOptions([])
    assert o["backlog"] == BACKLOG >= 1024
    o = Options()
    o.parseOptions(["--backlog", "4096"])
    assert o["backlog"] == 4096
    for bad in ("0", "-1", "lots", "70000"):
        with pytest.raises(SystemExit) as exited:  # a usage error: one line, exit status 2
            Options().parseOptions(["--backlog", bad])
        assert exited.value.code == 2


def _burst(port: int) -> tuple[list[socket.socket], int]:
    """Start BURST connects without letting the reactor run (so nothing is
    accepted meanwhile); return the sockets and how many connected within
    0.3 s. A connect whose SYN found the accept queue full waits 1 s."""
    socks = []
    for _ in range(BURST):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLOUT)
    connected: set[int] = set()
    deadline = time.monotonic() + 0.3
    while len(connected) < BURST and time.monotonic() < deadline:
        for fd, events in poller.poll(50):
            if events & select.POLLOUT:
                connected.add(fd)
                poller.unregister(fd)
    return socks, len(connected)


async def _serve_burst(config_dir: Any, backend: Any, listen: str, **options: Any) -> int:
    d = config_dir(static_upstream_yaml("backend", [backend.port]) + "---\n" + vs_yaml(domains=["*"]))
    from twisted.internet import reactor

    svc = GatewayService(d, listen=[listen], admin=None, reactor=reactor, poll_interval=0, access_log=False,
                         **options)
    svc.startService()
    socks: list[socket.socket] = []
    try:
        port = svc.listeners[0].port.getHost().port
        socks, connected = _burst(port)
        return connected
    finally:
        for s in socks:
            s.close()
        await sleep(0.2)  # let the gateway accept and see them go
        await svc.stopService()


@pytest_twisted.ensureDeferred
async def test_a_burst_of_connects_completes_at_once(config_dir: Any, backend: Any) -> None:
    assert await _serve_burst(config_dir, backend, "tcp:0:interface=127.0.0.1") == BURST


@pytest_twisted.ensureDeferred
async def test_a_small_explicit_backlog_is_kept_and_drops_the_burst(config_dir: Any, backend: Any) -> None:
    # the check above can fail: with Twisted's old default most of the burst waits
    connected = await _serve_burst(config_dir, backend, "tcp:0:interface=127.0.0.1:backlog=50")
    assert connected < BURST - 100


@pytest_twisted.ensureDeferred
async def test_backlog_keyword_of_the_service(config_dir: Any, backend: Any) -> None:
    connected = await _serve_burst(config_dir, backend, "tcp:0:interface=127.0.0.1", backlog=50)
    assert connected < BURST - 100
