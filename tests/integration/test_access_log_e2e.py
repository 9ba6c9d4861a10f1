"""The access log of a serving gateway: hostile principals and paths are
escaped, lines come out whole and in order, the last ones are written when
the service stops."""

from __future__ import annotations

import io
from typing import Any

import pytest_twisted

from twistgw import sdk
from support.http import http_request, raw_exchange, static_upstream_yaml, vs_yaml
from twistgw.core.accesslog import AccessLog
from twistgw.runtime.logs import buffered_access_log
from twistgw.runtime.service import GatewayService

HOSTILE = "alice\n2026-11-23T00:00:00+0000 [twistgw.access#info] 10.0.0.1 \"GET /admin\" 200\x1b[2K\r"


class Namer:
    """``namer: {}``: admits, naming the principal after the X-Name header
    (as a JWT plugin names it after a claim the client chose)."""

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Any, scope: Any) -> Any:
        return True

    @sdk.hookimpl
    def twistgw_authenticate(self, ctx: Any, options: Any) -> Any:
        ctx.principal = HOSTILE if ctx.headers.getRawHeaders(b"x-name") else None
        return sdk.Allow()


def config(port: int) -> str:
    return static_upstream_yaml("backend", [port]) + "---\n" + vs_yaml(options="{namer: {}}")


@pytest_twisted.ensureDeferred
async def test_hostile_principal_is_escaped_and_lines_are_whole_and_ordered(
        backend: Any, config_dir: Any, gateway: Any) -> None:
    from twisted.internet import reactor

    out = io.StringIO()
    gw = gateway(config_dir(config(backend.port)), plugins=[("namer", Namer())],
                 access_log=buffered_access_log(out, "text", reactor))
    r = await http_request("GET", gw.url("/who"), headers={"X-Name": "1"})
    assert r.status == 200
    pipelined = b"".join(b"GET /p%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(30))
    res = await raw_exchange(gw.port, pipelined + b"GET /end HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert len(res.responses()) == 31
    await gw.stop()
    lines = out.getvalue().splitlines(keepends=True)
    assert len(lines) == 32 and all(line.endswith("ms\n") for line in lines)
    first = lines[0]
    assert "\r" not in first and "\x1b" not in first and first.count('"') == 2
    assert "principal=alice\\x0a2026-11-23T00:00:00+0000 [twistgw.access#info] 10.0.0.1 \\x22GET" in first
    assert [line.split('"')[1] for line in lines[1:]] == ([f"GET /p{i} HTTP/1.1" for i in range(30)]
                                                          + ["GET /end HTTP/1.1"])


@pytest_twisted.ensureDeferred
async def test_stopping_the_service_writes_the_buffered_lines(backend: Any, config_dir: Any) -> None:
    from twisted.internet import reactor

    writes: list[str] = []
    never = AccessLog(writes.append, "json", schedule=lambda f: None)  # the turn's end never comes
    svc = GatewayService(config_dir(config(backend.port)), listen=["tcp:0:interface=127.0.0.1"], admin=None,
                         reactor=reactor, poll_interval=0, access_log=never,
                         plugins=twistgw_host())
    svc.startService()
    port = svc.listeners[0].port.getHost().port
    for i in range(3):
        assert (await http_request("GET", f"http://127.0.0.1:{port}/s{i}")).status == 200
    assert writes == [] and never.buffered > 0
    await svc.stopService()
    assert "".join(writes).count("\x1e") == 3 and never.buffered == 0


def twistgw_host() -> Any:
    from twistgw.core.plugins import PluginHost

    return PluginHost.create(extra=[("namer", Namer())], load_entry_points=False)
