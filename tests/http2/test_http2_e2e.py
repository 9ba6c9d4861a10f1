"""HTTP/2 towards clients with real parts (issue 33): a ``twist twistgw``
process, the curl binary (``--http2-prior-knowledge``: h2c; ``--http2`` over
TLS: ALPN ``h2``), h2load, Python's ``ssl`` offering ALPN, and an HTTP/1.1
backend (an HTTP/2 client to an HTTP/1.1 upstream). HTTP/1.1 clients keep
working on the same ports; ``Upgrade: h2c`` stays refused. The access line,
``/metrics`` and a GOAWAY on shutdown name and follow the protocol.
"""

from __future__ import annotations

import json
import re
import signal
import ssl
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from h2support import H2LOAD, Backend, H2Client, config, curl, self_signed, served
from support.ports import free_port
from support.process import TwistGateway


@pytest.fixture(scope="module")
def backend() -> Any:
    b = Backend()
    yield b
    b.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: Any) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def plain(tmp_path_factory: Any, backend: Backend) -> Any:
    tmp = tmp_path_factory.mktemp("plain")
    admin = free_port()
    with TwistGateway(tmp, config(tmp / "cfg", backend.port),
                      args=("--admin", f"tcp:{admin}:interface=127.0.0.1")) as gw:
        gw.admin = admin
        yield gw


@pytest.fixture(scope="module")
def tls(tmp_path_factory: Any, backend: Backend, certs: tuple[Path, Path]) -> Any:
    tmp = tmp_path_factory.mktemp("tls")
    key, cert = certs
    with TwistGateway(tmp, config(tmp / "cfg", backend.port),
                      listen=f"ssl:{{port}}:privateKey={key}:certKey={cert}:interface=127.0.0.1") as gw:
        yield gw


def test_curl_h2c_with_prior_knowledge_reaches_an_http11_backend(plain: Any, backend: Backend) -> None:
    out = curl("--http2-prior-knowledge", "-w", "\n%{http_version}", "-H", "Cookie: a=1", "-H", "Cookie: b=2",
               f"http://127.0.0.1:{plain.port}/h2c?x=1")
    body, version = out.stdout.rsplit("\n", 1)
    assert version == "2", out.stderr
    seen = json.loads(body)
    assert seen["path"] == "/h2c?x=1" and seen["headers"]["Host"] == f"127.0.0.1:{plain.port}"
    assert seen["headers"]["Cookie"] == "a=1; b=2"  # RFC 9113 §8.2.3, joined for HTTP/1.1
    assert seen["headers"]["X-Forwarded-Proto"] == "http"


def test_http11_clients_keep_working_on_the_same_port(plain: Any) -> None:
    out = curl("--http1.1", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", f"http://127.0.0.1:{plain.port}/")
    assert out.stdout == "1.1 200"
    with socket.create_connection(("127.0.0.1", plain.port)) as s:  # a request split right after "PRI"-like bytes
        s.sendall(b"P")
        time.sleep(0.2)
        s.sendall(b"OST / HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200 ")


def test_upgrade_h2c_stays_refused(plain: Any, backend: Backend) -> None:
    # plain http with --http2: curl asks Upgrade: h2c over HTTP/1.1; it is never honoured
    out = curl("--http2", "-v", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
               f"http://127.0.0.1:{plain.port}/upgrade")
    assert out.stdout == "1.1 200", out.stderr
    assert "Upgrade: h2c" in out.stderr and "101" not in out.stdout
    assert "Upgrade" not in [h for _, p, hs, _ in backend.seen if p == "/upgrade" for h in hs]


def test_bodies_stream_both_ways(plain: Any, backend: Backend, tmp_path: Path) -> None:
    upload = tmp_path / "up.bin"
    upload.write_bytes(b"u" * 3_000_000)
    out = curl("--http2-prior-knowledge", "--data-binary", f"@{upload}", f"http://127.0.0.1:{plain.port}/upload")
    assert json.loads(out.stdout)["body_bytes"] == 3_000_000, out.stderr
    out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", f"http://127.0.0.1:{plain.port}/big?n=5000000"],
                         capture_output=True, timeout=30)
    assert out.stdout == b"b" * 5_000_000


def test_many_streams_on_one_connection(plain: Any) -> None:
    client = H2Client(plain.port)
    sids = [client.request(f"/multi/{i}") for i in range(50)]
    answers = [client.response(sid) for sid in sids]
    assert all(status == 200 for status, _, _ in answers)
    assert [json.loads(body)["path"] for _, _, body in answers] == [f"/multi/{i}" for i in range(50)]
    client.close()


def test_curl_http2_over_tls_negotiates_h2_by_alpn(tls: Any) -> None:
    out = curl("-k", "--http2", "-w", "\n%{http_version}", f"https://127.0.0.1:{tls.port}/tls")
    body, version = out.stdout.rsplit("\n", 1)
    assert version == "2", out.stderr
    assert json.loads(body)["headers"]["X-Forwarded-Proto"] == "https"
    out = curl("-k", "--http1.1", "-o", "/dev/null", "-w", "%{http_version}", f"https://127.0.0.1:{tls.port}/")
    assert out.stdout == "1.1"


@pytest.mark.parametrize("offer, negotiated", [(["h2", "http/1.1"], "h2"), (["http/1.1", "h2"], "h2"),
                                                (["http/1.1"], "http/1.1"), (["h2"], "h2")])
def test_alpn_picks_h2_first_on_the_listeners_certificate(tls: Any, offer: list[str], negotiated: str) -> None:
    client = H2Client(tls.port, tls=True, alpn=offer, preface=negotiated == "h2")
    assert client.negotiated == negotiated
    if negotiated == "h2":
        assert client.get("/alpn")[0] == 200
    client.close()


def test_tls_without_alpn_is_http11(tls: Any) -> None:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls.port)), server_hostname="localhost") as s:
        assert s.selected_alpn_protocol() is None
        s.sendall(b"GET / HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200 ")


def test_h2load_drives_many_streams_while_http11_is_served(plain: Any) -> None:
    assert H2LOAD is not None, "h2load (nghttp2-client) is required"
    load = subprocess.Popen([H2LOAD, "-n", "4000", "-c", "8", "-m", "10", f"http://127.0.0.1:{plain.port}/load"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.3)
    out = curl("--http1.1", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{plain.port}/beside")
    assert out.stdout == "200"
    text = load.communicate(timeout=120)[0]
    assert "4000 succeeded, 0 failed, 0 errored" in text, text
    assert "status codes: 4000 2xx" in text, text


def test_access_line_and_metrics_name_the_protocol(plain: Any) -> None:
    assert curl("--http2-prior-knowledge", "-o", "/dev/null", f"http://127.0.0.1:{plain.port}/logged-h2").returncode == 0
    assert curl("--http1.1", "-o", "/dev/null", f"http://127.0.0.1:{plain.port}/logged-h1").returncode == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "/logged-h1" not in plain.log_text():
        time.sleep(0.1)
    records = [json.loads(line) for line in plain.log_text().split("\x1e") if '"twistgw.access"' in line]
    protocols = {r["path"]: r["protocol"] for r in records}
    assert protocols["/logged-h2"] == "HTTP/2" and protocols["/logged-h1"] == "HTTP/1.1"
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{plain.admin}/metrics", timeout=5).read().decode()
    h2 = re.search(r'^twistgw_requests_by_protocol_total\{protocol="HTTP/2"\} (\d+)', metrics, re.M)
    h1 = re.search(r'^twistgw_requests_by_protocol_total\{protocol="HTTP/1.1"\} (\d+)', metrics, re.M)
    assert h2 and h1 and int(h2.group(1)) >= 1 and int(h1.group(1)) >= 1
    assert re.search(r"^twistgw_http2_connections_total [1-9]", metrics, re.M)


def test_no_http2_serves_http11_only(tmp_path: Path, backend: Backend, certs: tuple[Path, Path]) -> None:
    key, cert = certs
    with TwistGateway(tmp_path, config(tmp_path / "cfg", backend.port), args=("--no-http2",)) as gw:
        out = curl("--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{gw.port}/")
        assert out.stdout != "200"  # the preface is no HTTP/1.1 request: 400, closed
        assert curl("--http1.1", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{gw.port}/").stdout == "200"
    with TwistGateway(tmp_path, config(tmp_path / "cfg2", backend.port), args=("--no-http2",),
                      listen=f"ssl:{{port}}:privateKey={key}:certKey={cert}:interface=127.0.0.1") as gw:
        out = curl("-k", "--http2", "-o", "/dev/null", "-w", "%{http_version}", f"https://127.0.0.1:{gw.port}/")
        assert out.stdout == "1.1"


def test_shutdown_sends_goaway_and_finishes_the_open_streams(tmp_path: Path, backend: Backend) -> None:
    gw = TwistGateway(tmp_path, config(tmp_path / "cfg", backend.port), args=("--drain-timeout", "10"))
    with gw:
        client = H2Client(gw.port, timeout=10)
        sid = client.request("/slow?s=1.5")
        time.sleep(0.3)
        gw.proc.send_signal(signal.SIGTERM)
        client.read(lambda events: client.goaway() is not None, timeout=5, parse=False)
        goaway = client.goaway()
        assert goaway is not None and goaway.error_code == 0 and goaway.last_stream_id == sid
        # the open stream is still answered (h2's client state ends at a GOAWAY: read the frames)
        client.read(timeout=5, parse=False)
        data = [f for f in _frames(client.raw_in) if type(f).__name__ == "DataFrame" and f.stream_id == sid]
        assert data and "END_STREAM" in data[-1].flags
        assert json.loads(b"".join(f.data for f in data))["path"] == "/slow?s=1.5"
        gw.proc.wait(15)


def _frames(data: bytes) -> list[Any]:
    from h2support import frames_of

    return frames_of(data)


def test_other_clients_are_served_while_one_connection_is_busy(plain: Any) -> None:
    slow = H2Client(plain.port, timeout=10)
    sids = [slow.request("/slow?s=1") for _ in range(20)]
    started = time.monotonic()
    assert served(plain.port)
    assert time.monotonic() - started < 1.0
    assert all(slow.response(sid)[0] == 200 for sid in sids)
    slow.close()


def test_an_h2_client_in_a_thread_and_curl_at_once(plain: Any) -> None:
    results: list[int] = []

    def run() -> None:
        c = H2Client(plain.port)
        results.extend(c.get(f"/t/{i}")[0] for i in range(20))
        c.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [200] * 80
