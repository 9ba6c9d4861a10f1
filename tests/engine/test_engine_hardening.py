"""Engine items of issue 23, each through a real gateway on loopback in
front of the recording upstream (the ``eng`` fixture):

* item 4, h2c upgrade smuggling: only WebSocket upgrades are forwarded; any
  other ``Upgrade`` (``h2c`` with ``HTTP2-Settings``) is dropped from the
  request and nothing after it is read; HTTP/1.0 requests never upgrade;
* item 11, idle WebSocket tunnels time out;
* item 12, a ``101`` to a request that asked for no upgrade is a 502 (in
  the access log too);
* item 16, transfer codings other than ``chunked`` are 501.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.logger import globalLogPublisher

from twistgw.core.accesslog import AccessLog

from engine_helpers import assert_400_and_closed, get
from support.http import raw_connect, wait_for
from support.recorder import OK

SWITCH = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n"


def _switching(rec: Any) -> bytes:
    """A backend that switches to whatever protocol it is asked for."""
    for line in rec.head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"upgrade":
            return SWITCH % value.strip()
    return OK


H2C = (b"GET / HTTP/1.1\r\nHost: gw.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
       b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")


@pytest_twisted.ensureDeferred
async def test_h2c_upgrade_is_dropped_and_nothing_after_it_is_read(eng: Any) -> None:
    eng.rec.respond = _switching
    # after a spliced h2c 101, this would reach the backend raw, past the chain
    smuggled = get("/protected/admin")
    res = await eng.send(H2C + smuggled)
    assert [r.status for r in res.responses()] == [200], res.data
    assert res.closed
    assert b"upgrade" not in eng.rec.data.lower(), eng.rec.data
    assert b"/protected" not in eng.rec.data, eng.rec.data
    assert [r.target for r in eng.rec.requests] == [b"/"]


@pytest.mark.parametrize("kind", [b"h2c", b"TLS/1.2", b"websocket, h2c", b"foo"])
@pytest_twisted.ensureDeferred
async def test_only_websocket_upgrades_are_forwarded(eng: Any, kind: bytes) -> None:
    eng.rec.respond = _switching
    res = await eng.send(b"GET / HTTP/1.1\r\nHost: gw.test\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n" % kind)
    assert [r.status for r in res.responses()] == [200], res.data
    assert b"upgrade" not in eng.rec.data.lower(), eng.rec.data


@pytest_twisted.ensureDeferred
async def test_http10_requests_never_upgrade(eng: Any) -> None:
    eng.rec.respond = _switching
    res = await eng.send(b"GET / HTTP/1.0\r\nHost: gw.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
                         + get("/protected/x"))
    assert [r.status for r in res.responses()] == [200], res.data
    assert res.closed
    assert b"upgrade" not in eng.rec.data.lower(), eng.rec.data
    assert [r.target for r in eng.rec.requests] == [b"/"]


WS = (b"GET /chat HTTP/1.1\r\nHost: gw.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


@pytest_twisted.ensureDeferred
async def test_an_idle_tunnel_times_out(eng: Any) -> None:
    eng.gw.service.gateway.forwarder.tunnel_idle_timeout = 0.5
    eng.rec.respond = _switching
    client = await raw_connect(eng.port)
    client.transport.write(WS)
    await wait_for(lambda: b"101 Switching" in client.buf, timeout=3)
    await wait_for(lambda: eng.rec.open == 1, timeout=3)
    # traffic keeps it open past the timeout
    for _ in range(4):
        client.transport.write(b"ping")
        await wait_for(lambda: eng.rec.data.endswith(b"ping"), timeout=1)
        await _sleep(0.2)
    assert eng.rec.open == 1
    # then silence: both sides are closed
    await wait_for(lambda: client.done.called, timeout=5)
    assert (await client.done).closed
    await wait_for(lambda: eng.rec.open == 0, timeout=3)


async def _sleep(seconds: float) -> None:
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    await deferLater(reactor, seconds)


@pytest_twisted.ensureDeferred
async def test_101_to_a_request_that_asked_no_upgrade_is_502(eng: Any) -> None:
    eng.rec.respond = lambda rec: SWITCH % b"websocket" + b"raw bytes of another protocol"
    eng.gw.service.gateway.access_log = AccessLog(fmt="events")
    statuses: list[int] = []

    def observe(event: dict[str, Any]) -> None:
        if event.get("log_namespace") == "twistgw.access":
            statuses.append(event["status"])

    globalLogPublisher.addObserver(observe)
    try:
        res = await eng.send(get("/plain", close=True))
        await wait_for(lambda: statuses, timeout=3)
    finally:
        globalLogPublisher.removeObserver(observe)
    assert [r.status for r in res.responses()] == [502], res.data
    assert b"raw bytes" not in res.data
    assert statuses == [502]


@pytest.mark.parametrize("te", ["gzip, chunked", "deflate,chunked", "gzip\r\nTransfer-Encoding: chunked",
                                "x-custom, chunked"])
@pytest_twisted.ensureDeferred
async def test_transfer_codings_other_than_chunked_are_501(eng: Any, te: str) -> None:
    body = b"5\r\nhello\r\n0\r\n\r\n"
    await assert_400_and_closed(eng, get("/up", method="POST", extra=f"Transfer-Encoding: {te}\r\n", body=body),
                                status=501)


@pytest.mark.parametrize("te", ["chunked", "Chunked"])
@pytest_twisted.ensureDeferred
async def test_plain_chunked_still_passes(eng: Any, te: str) -> None:
    res = await eng.send(get("/up", method="POST", extra=f"Transfer-Encoding: {te}\r\n",
                             body=b"5\r\nhello\r\n0\r\n\r\n", close=True))
    assert [r.status for r in res.responses()] == [200], res.data
    assert eng.rec.requests[0].body == b"hello"


def test_the_tunnel_idle_timeout_is_an_option_of_twist_twistgw(tmp_path: Any) -> None:
    """``--tunnel-idle-timeout`` (one of the timing options) reaches the pool
    that splices tunnels; the default is 300 s, 0 turns it off."""
    from twistgw.config.defaults import TUNNEL_IDLE_TIMEOUT
    from twistgw.runtime.service import GatewayService
    from twistgw.tap import Options

    options = Options()
    options.parseOptions(["--config", str(tmp_path), "--tunnel-idle-timeout", "0.5"])
    assert options["tunnel-idle-timeout"] == 0.5
    defaults = Options()
    defaults.parseOptions(["--config", str(tmp_path)])
    assert defaults["tunnel-idle-timeout"] == TUNNEL_IDLE_TIMEOUT == 300.0
    svc = GatewayService(str(tmp_path), listen=[], admin=None, tunnel_idle_timeout=0.5)
    assert svc.gateway.forwarder.tunnel_idle_timeout == 0.5
    with pytest.raises(SystemExit) as exited:  # a usage error: one line, exit 2
        Options().parseOptions(["--config", str(tmp_path), "--tunnel-idle-timeout", "soon"])
    assert exited.value.code == 2
