"""A TLS upstream's close-delimited response (issue 32, item 2): the body
ends with the connection, so the only thing that says it is complete is
TLS's ``close_notify`` (RFC 8446 §6.1; RFC 9112 §9.8). A TCP close without
it is a truncation the client must see as one: an HTTP/1.1 client gets no
terminating chunk and a closed connection, an HTTP/1.0 client (whose
response is itself delimited by the close) a reset; the access line says
``truncated=upstream``. A proper close (``close_notify``, from nginx and
from the raw server) still ends the response cleanly.

Upstreams: ``support.tlsraw.TruncatingTLSServer`` (the standard library's
``ssl`` over a plain socket: it can close with or without close_notify)
and a real nginx answering close-delimited (``chunked_transfer_encoding
off`` and ``sub_filter``, which drops the Content-Length).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import pytest_twisted

from support.http import raw_exchange, sleep
from support.pki import TestCA
from support.ports import free_port
from support.tlsraw import BODY, TruncatingTLSServer
from twistgw.core.accesslog import AccessLog

NGINX_BODY = b"nginx close-delimited " * 150


def _nginx_conf(d: Path, port: int) -> str:
    text = NGINX_BODY.decode()
    return textwrap.dedent(f"""\
        pid {d}/nginx.pid;
        error_log {d}/error.log;
        events {{ worker_connections 64; }}
        http {{
          access_log off;
          client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
          uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
          server {{
            listen 127.0.0.1:{port} ssl;
            ssl_certificate {d}/named.crt; ssl_certificate_key {d}/named.key;
            location / {{
              default_type text/html;
              chunked_transfer_encoding off;
              sub_filter 'never-there' 'x';
              sub_filter_once off;
              return 200 "{text}";
            }}
          }}
        }}
        """)


@pytest.fixture(scope="module")
def ca() -> TestCA:
    return TestCA()


@pytest.fixture
def raw_tls(ca: TestCA) -> Iterator[TruncatingTLSServer]:
    server = TruncatingTLSServer(ca)
    yield server
    server.close()


@pytest.fixture
def raw_tcp(ca: TestCA) -> Iterator[TruncatingTLSServer]:
    server = TruncatingTLSServer(ca, tls=False)
    yield server
    server.close()


@pytest.fixture
def nginx(tmp_path: Path, ca: TestCA) -> Iterator[int]:
    d = tmp_path / "nginx"
    d.mkdir()
    ca.issue("backend.test", dns=["backend.test"]).write(d, "named")
    port = free_port()
    (d / "nginx.conf").write_text(_nginx_conf(d, port))
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = subprocess.Popen([binary, "-p", str(d), "-c", str(d / "nginx.conf"), "-g",
                             "daemon off; master_process off;"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            assert proc.poll() is None, (d / "error.log").read_text() if (d / "error.log").exists() else "nginx died"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def _upstream(name: str, port: int, tls: bool = True) -> str:
    return textwrap.dedent(f"""\
        apiVersion: gloo.solo.io/v1
        kind: Upstream
        metadata: {{name: {name}, namespace: default}}
        spec:
          static: {{hosts: [{{addr: 127.0.0.1, port: {port}}}]}}
        """) + ("  sslConfig: {sni: backend.test, sslFiles: {rootCa: ca.crt}}\n" if tls else "") + "---\n"


@pytest.fixture
def gw(raw_tls: TruncatingTLSServer, raw_tcp: TruncatingTLSServer, nginx: int, ca: TestCA, config_dir: Any,
       gateway: Any) -> Any:
    d = config_dir(_upstream("raw", raw_tls.port) + _upstream("nginx", nginx) + _upstream("tcp", raw_tcp.port, False)
                   + textwrap.dedent("""\
        apiVersion: gateway.solo.io/v1
        kind: VirtualService
        metadata: {name: app, namespace: default}
        spec:
          virtualHost:
            domains: ["*"]
            routes:
            - matchers: [{prefix: /nginx}]
              routeAction: {single: {upstream: {name: nginx}}}
            - matchers: [{prefix: /tcp}]
              routeAction: {single: {upstream: {name: tcp}}}
            - matchers: [{prefix: /}]
              routeAction: {single: {upstream: {name: raw}}}
        """))
    (Path(d) / "ca.crt").write_bytes(ca.pem)
    lines: list[str] = []
    g = gateway(d, access_log=AccessLog(write=lines.append, fmt="text"))
    g.lines = lines
    return g


async def _get(gw: Any, path: str, version: bytes = b"HTTP/1.1") -> Any:
    return await raw_exchange(gw.port, b"GET %s %s\r\nHost: app.test\r\nConnection: close\r\n\r\n" % (path.encode(), version), timeout=10)


async def _line(gw: Any, path: str) -> str:
    for _ in range(200):
        found = [line for line in "".join(gw.lines).splitlines() if f'"GET {path}"' in line]
        if found:
            return found[-1]
        await sleep(0.01)
    raise AssertionError(f"no access line for {path}: {gw.lines}")


@pytest_twisted.ensureDeferred
async def test_a_truncated_tls_response_is_broken_for_an_http11_client(gw: Any) -> None:
    res = await _get(gw, "/cut")
    head, _, body = res.data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
    assert res.closed
    assert not body.endswith(b"0\r\n\r\n"), "the terminating chunk says the response is complete: it is not"
    line = await _line(gw, "/cut")
    assert line.endswith(" truncated=upstream"), line


@pytest_twisted.ensureDeferred
async def test_a_truncated_tls_response_is_reset_for_an_http10_client(gw: Any) -> None:
    res = await _get(gw, "/cut10", b"HTTP/1.0")
    assert res.data.startswith(b"HTTP/1.1 200") or res.data == b""
    assert b"transfer-encoding" not in res.data.partition(b"\r\n\r\n")[0].lower()
    # its response ends with the connection: only a reset tells it the body is not whole
    assert res.closed and res.reset, res
    assert (await _line(gw, "/cut10")).endswith(" truncated=upstream")


@pytest.mark.parametrize("version", [b"HTTP/1.1", b"HTTP/1.0"])
@pytest_twisted.ensureDeferred
async def test_close_notify_ends_the_response_cleanly(gw: Any, raw_tls: TruncatingTLSServer, version: bytes) -> None:
    for path, expected in (("/notify", BODY), ("/nginx/page", NGINX_BODY)):
        res = await _get(gw, path, version)
        (resp,) = res.responses()
        assert resp.status == 200 and resp.body == expected, (path, res.data[-200:])
        assert res.closed and not res.reset
        if version == b"HTTP/1.1":
            assert res.data.endswith(b"0\r\n\r\n")
        assert "truncated" not in await _line(gw, path)
    assert raw_tls.endings[-1] == "close_notify"


@pytest_twisted.ensureDeferred
async def test_on_plain_tcp_a_reset_is_a_truncation_and_a_fin_the_end(gw: Any, raw_tcp: TruncatingTLSServer) -> None:
    res = await _get(gw, "/tcp/cut")
    assert res.closed and not res.data.endswith(b"0\r\n\r\n")
    assert (await _line(gw, "/tcp/cut")).endswith(" truncated=upstream")
    res = await _get(gw, "/tcp/notify")
    (resp,) = res.responses()
    assert resp.body == BODY and res.data.endswith(b"0\r\n\r\n")
    assert raw_tcp.endings == ["reset", "fin"]
