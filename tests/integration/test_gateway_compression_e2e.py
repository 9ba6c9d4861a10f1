"""A Gateway's response compression (``httpGateway.options.gzip``, twistgw's
``brotli``) and request ids (``generateRequestId``,
``preserveExternalRequestId``) through a real ``twist twistgw``, a real
backend and ``curl``: bodies decompressed byte for byte (gzip and brotli,
HTTP/1.1 and HTTP/2), a streamed body whose first compressed bytes reach
the client before the backend finished, every "never compress" rule,
Gloo's gzip guide as it is written, and the ``x-request-id`` the backend
and the Gateway's access log see.

Blocking helpers (processes, threads): plain synchronous tests.
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
import uuid
import zlib
from pathlib import Path
from typing import Any, Iterator

import brotli
import pytest
import yaml

from support.process import free_port

from test_gateway_kind_e2e import NS, eventually, gateway, gateway_process, upstream, vs, write

BODY = json.dumps([{"id": i, "name": f"pet {i}", "tags": ["a", "b"]} for i in range(200)]).encode()
STREAM_PARTS = [b'{"part": 1, "text": "' + b"x" * 2000 + b'"}\n', b'{"part": 2, "text": "' + b"y" * 2000 + b'"}\n']


class _Backend(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    release: threading.Event
    seen: list[dict[str, str]]

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if status != 204:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and status != 204:
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        self.seen.append({k.lower(): v for k, v in self.headers.items()})
        path = self.path
        json_type = {"Content-Type": "application/json"}
        if path == "/echo":
            self._send(200, json.dumps(self.seen[-1]).encode(), json_type)
        elif path == "/json":
            self._send(200, BODY, json_type)
        elif path == "/etag":
            self._send(200, BODY, {**json_type, "ETag": '"v1"', "Vary": "Origin"})
        elif path == "/weak":
            self._send(200, BODY, {**json_type, "ETag": 'W/"v1"'})
        elif path == "/png":
            self._send(200, BODY, {"Content-Type": "image/png"})
        elif path == "/encoded":
            self._send(200, brotli.compress(BODY), {**json_type, "Content-Encoding": "br"})
        elif path == "/no-transform":
            self._send(200, BODY, {**json_type, "Cache-Control": "public, no-transform"})
        elif path == "/small":
            self._send(200, b'{"ok": true}', json_type)
        elif path == "/empty":
            self._send(204, b"", {})
        elif path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, part in enumerate(STREAM_PARTS):
                if i:
                    self.release.wait(10)  # the test releases it once the client decoded the first part
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        else:
            self._send(404, b"", {})

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def origin() -> Iterator[tuple[int, type[_Backend]]]:
    handler = type("Handler", (_Backend,), {"release": threading.Event(), "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], handler
    handler.release.set()
    server.shutdown()
    server.server_close()


def curl(port: int, path: str, *args: str, host: str = "a.example") -> tuple[dict[str, str], bytes, int]:
    """``curl`` (its own decoding with ``--compressed``): the response
    headers (lower-case names, the last of each), the body as curl wrote it,
    and the status."""
    out = subprocess.run(["curl", "-s", "-D", "-", "-o", "-", "--max-time", "10", "-H", f"Host: {host}", *args,
                          f"http://127.0.0.1:{port}{path}"], capture_output=True, timeout=30, check=True).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers, body, int(status_line.split()[1])


def _compressing(port: int, backend: int, **options: Any) -> list[dict[str, Any]]:
    return [upstream(backend), vs("a", ["a.example"]),
            gateway("gw", port, {"options": options or {"gzip": {"compressionLevel": "SPEED"}, "brotli": {}}})]


@pytest.mark.parametrize("http2", [False, True], ids=["http1.1", "h2c"])
def test_gzip_and_brotli_decompress_byte_for_byte(tmp_path: Path, origin: tuple[int, Any], http2: bool) -> None:
    backend, _ = origin
    port = free_port()
    proto = ["--http2-prior-knowledge"] if http2 else []
    with gateway_process(tmp_path, write(tmp_path / "config", _compressing(port, backend))):
        for accept, coding in (("gzip", "gzip"), ("br", "br"), ("gzip;q=0.5, br", "br"), ("br;q=0.1, gzip", "gzip"),
                               ("*", "br"), ("gzip, br", "gzip")):
            headers, raw, status = curl(port, "/json", "-H", f"Accept-Encoding: {accept}", *proto)
            assert status == 200 and headers.get("content-encoding") == coding, (accept, headers)
            assert "content-length" not in headers and headers["vary"] == "Accept-Encoding"
            decoded = zlib.decompress(raw, 16 + 15) if coding == "gzip" else brotli.decompress(raw)
            assert decoded == BODY and len(raw) < len(BODY) // 3
            if not http2:
                assert headers["transfer-encoding"] == "chunked"
        # curl's own decoder, as a user runs it
        headers, body, _ = curl(port, "/json", "--compressed", *proto)
        assert body == BODY and headers["content-encoding"] in ("gzip", "br")
        # refused codings, or none asked: the body as the backend sent it, with its length
        for args in ([], ["-H", "Accept-Encoding: gzip;q=0, br;q=0"], ["-H", "Accept-Encoding: identity"],
                     ["-H", "Accept-Encoding: *;q=0"], ["-H", "Accept-Encoding: gzip;q=0.5, identity"],
                     ["-H", "Accept-Encoding: deflate"]):
            headers, body, _ = curl(port, "/json", *args, *proto)
            assert body == BODY and "content-encoding" not in headers, args
            assert headers["content-length"] == str(len(BODY)) and headers["vary"] == "Accept-Encoding"


@pytest.mark.parametrize("http2", [False, True], ids=["http1.1", "h2c"])
def test_never_compressed(tmp_path: Path, origin: tuple[int, Any], http2: bool) -> None:
    backend, _ = origin
    port = free_port()
    proto = ["--http2-prior-knowledge"] if http2 else []
    gzip = ["-H", "Accept-Encoding: gzip"]
    with gateway_process(tmp_path, write(tmp_path / "config", _compressing(
            port, backend, gzip={"disableOnEtagHeader": True}))):
        for path, expected in (("/png", BODY), ("/no-transform", BODY), ("/small", b'{"ok": true}'),
                               ("/etag", BODY), ("/encoded", brotli.compress(BODY))):
            headers, body, status = curl(port, path, *gzip, *proto)
            assert status == 200 and body == expected, path
            assert headers.get("content-encoding") in (None, "br") and headers["content-length"] == str(len(expected))
            assert "vary" not in headers or headers["vary"] == "Origin", (path, headers)
        headers, body, status = curl(port, "/empty", *gzip, *proto)
        assert status == 204 and body == b"" and "content-encoding" not in headers
        headers, body, status = curl(port, "/json", "-I", *gzip, *proto)  # HEAD
        assert status == 200 and "content-encoding" not in headers and headers["content-length"] == str(len(BODY))


def test_etags_weakened_and_vary_appended(tmp_path: Path, origin: tuple[int, Any]) -> None:
    backend, handler = origin
    port = free_port()
    with gateway_process(tmp_path, write(tmp_path / "config", _compressing(
            port, backend, gzip={"removeAcceptEncodingHeader": True, "contentType": ["application/json"]}))):
        headers, raw, _ = curl(port, "/etag", "-H", "Accept-Encoding: gzip")
        assert headers["content-encoding"] == "gzip" and headers["etag"] == 'W/"v1"'
        assert headers["vary"] == "Origin, Accept-Encoding" and zlib.decompress(raw, 31) == BODY
        headers, raw, _ = curl(port, "/weak", "-H", "Accept-Encoding: gzip")
        assert headers["etag"] == 'W/"v1"' and zlib.decompress(raw, 31) == BODY
        # removeAcceptEncodingHeader: the backend never sees the client's Accept-Encoding
        assert all("accept-encoding" not in seen for seen in handler.seen)


def test_a_streamed_body_reaches_the_client_before_the_backend_ends(tmp_path: Path,
                                                                    origin: tuple[int, Any]) -> None:
    backend, handler = origin
    port = free_port()
    with gateway_process(tmp_path, write(tmp_path / "config", _compressing(port, backend))):
        for coding in ("gzip", "br"):
            handler.release.clear()
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /stream HTTP/1.1\r\nHost: a.example\r\nAccept-Encoding: %s\r\n\r\n" % coding.encode())
            got, raw = b"", b""
            deadline = time.monotonic() + 10
            while STREAM_PARTS[0] not in got:  # the backend still holds its second part
                assert time.monotonic() < deadline and not handler.release.is_set()
                raw += s.recv(65536)
                head, sep, chunks = raw.partition(b"\r\n\r\n")
                if sep:
                    assert b"Content-Encoding: " + coding.encode() in head and b"chunked" in head
                    got = _dechunk_decode(chunks, coding)
            handler.release.set()
            while not raw.endswith(b"0\r\n\r\n"):
                data = s.recv(65536)
                assert data
                raw += data
            s.close()
            assert _dechunk_decode(raw.partition(b"\r\n\r\n")[2], coding) == b"".join(STREAM_PARTS)


def _dechunk_decode(chunks: bytes, coding: str) -> bytes:
    """The decoded bytes of the complete chunks in ``chunks`` (all the
    response's chunks so far)."""
    data = b""
    while True:
        size_line, sep, rest = chunks.partition(b"\r\n")
        if not sep:
            break
        size = int(size_line, 16)
        if size == 0 or len(rest) < size + 2:
            break
        data += rest[:size]
        chunks = rest[size + 2:]
    if coding == "gzip":
        out: bytes = zlib.decompressobj(31).decompress(data)
        return out
    return bytes(brotli.Decompressor().process(data))


GUIDE_VS = """\
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata:
  name: sample-vs
  namespace: gloo-system
spec:
  virtualHost:
    domains:
      - '*'
    routes:
      - matchers:
        - exact: /helloworld
        directResponseAction:
          status: 200
          body: "Hello, world! It's me. I've been wondering if after all these years you'd like to meet."
"""

GUIDE_GATEWAY_OPTIONS = """\
  httpGateway:
    options:
      gzip:
        compressionLevel: BEST
        contentType:
        - text/plain
"""


def test_glooss_gzip_guide(tmp_path: Path) -> None:
    """Gloo's gzip guide: the sample VirtualService answers plain text, then
    with the guide's ``httpGateway`` edit, ``content-encoding: gzip``."""
    port = free_port()
    d = tmp_path / "config"
    d.mkdir()
    (d / "vs.yaml").write_text(GUIDE_VS)
    text = b"Hello, world! It's me. I've been wondering if after all these years you'd like to meet."

    def gateway_yaml(http: str) -> str:
        return (f"apiVersion: gateway.solo.io/v1\nkind: Gateway\nmetadata:\n  name: gateway-proxy\n"
                f"  namespace: {NS}\nspec:\n  bindAddress: 127.0.0.1\n  bindPort: {port}\n{http}")
    (d / "gateway.yaml").write_text(gateway_yaml("  httpGateway: {}\n"))
    with gateway_process(tmp_path, str(d)):
        headers, body, _ = curl(port, "/helloworld", "-H", "Accept-Encoding: gzip")
        assert body == text and "content-encoding" not in headers
        (d / "gateway.yaml").write_text(gateway_yaml(GUIDE_GATEWAY_OPTIONS))

        def compressed() -> bool:
            return curl(port, "/helloworld", "-H", "Accept-Encoding: gzip")[0].get("content-encoding") == "gzip"
        eventually(compressed)
        for proto in ([], ["--http2-prior-knowledge"]):
            headers, raw, _ = curl(port, "/helloworld", "-H", "Accept-Encoding: gzip", *proto)
            assert raw != text and zlib.decompress(raw, 31) == text, proto
            assert headers["content-type"] == "text/plain" and headers["vary"] == "Accept-Encoding"
            assert headers["content-encoding"] == "gzip" and headers["content-length"] == str(len(raw))


def test_request_ids(tmp_path: Path, origin: tuple[int, Any]) -> None:
    backend, handler = origin
    port, keep_port, off_port = free_port(), free_port(), free_port()
    log = tmp_path / "access.log"
    sink = {"accessLoggingService": {"accessLog": [{"fileSink": {
        "path": str(log), "stringFormat": "%REQ(:PATH)% %RESPONSE_CODE% %REQ(X-REQUEST-ID)%\n"}}]}}
    dead = {"apiVersion": "gloo.solo.io/v1", "kind": "Upstream", "metadata": {"name": "dead", "namespace": NS},
            "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": free_port()}]}}}
    to_dead = vs("d", ["dead.example"], routes=[{"matchers": [{"prefix": "/"}], "routeAction": {
        "single": {"upstream": {"name": "dead", "namespace": NS}}}}])
    docs = [upstream(backend), dead, vs("a", ["a.example"]), to_dead,
            gateway("edge", port, options=sink),
            gateway("keep", keep_port, {"options": {"httpConnectionManagerSettings": {
                "preserveExternalRequestId": True}}}),
            gateway("off", off_port, {"options": {"httpConnectionManagerSettings": {"generateRequestId": False}}})]
    with gateway_process(tmp_path, write(tmp_path / "config", docs)) as gw:
        def seen(port: int, *args: str, path: str = "/echo", host: str = "a.example") -> str | None:
            headers, body, status = curl(port, path, *args, host=host)
            assert "x-request-id" not in headers  # Gloo has no always_set_request_id_in_response: never sent back
            return json.loads(body).get("x-request-id") if status == 200 else None

        generated = seen(port)
        assert generated is not None and uuid.UUID(generated).version == 4 and str(uuid.UUID(generated)) == generated
        other = seen(port)
        assert other != generated
        # an edge listener (useRemoteAddress, Gloo's default) replaces a client's id ...
        replaced = seen(port, "-H", "X-Request-Id: client-chosen")
        assert replaced not in (None, "client-chosen") and uuid.UUID(replaced or "").version == 4
        # ... preserveExternalRequestId keeps a sane one, and replaces one that is not
        assert seen(keep_port, "-H", "X-Request-Id: client-chosen") == "client-chosen"
        kept_bad = seen(keep_port, "-H", "X-Request-Id: " + "x" * 300)
        assert kept_bad is not None and uuid.UUID(kept_bad).version == 4
        assert uuid.UUID(seen(keep_port) or "").version == 4
        # generateRequestId: false: none made, a client's goes on as it came
        assert seen(off_port) is None
        assert seen(off_port, "-H", "X-Request-Id: as it came") == "as it came"
        # a --listen endpoint: twistgw's own rules, no id
        assert seen(gw.port) is None
        # the access log names the id the backend got; a 404 the gateway answered has one too
        curl(port, "/missing", host="nowhere.example")
        eventually(lambda: log.exists() and len(log.read_text().splitlines()) == 4)
        lines = log.read_text().splitlines()
        assert lines[0] == f"/echo 200 {generated}" and lines[2] == f"/echo 200 {replaced}"
        path, status, rid = lines[3].split()
        assert (path, status) == ("/missing", "404") and uuid.UUID(rid).version == 4
        # the gateway's own answer to a failed upstream: its log line and its access line name the id
        assert curl(port, "/x", host="dead.example")[2] == 503
        eventually(lambda: len(log.read_text().splitlines()) == 5)
        failed = log.read_text().splitlines()[4].split()[2]
        gw.wait_log(failed)
        time.sleep(0.3)  # the access line's batch
        text = gw.log_text()
        events = [line for line in text.splitlines() if failed in line]
        assert any("failed for" in line for line in events), text[-3000:]  # Upstream ... failed for GET /x ...
        assert len(events) >= 2 and all(f"request_id={failed}" in line or f'"request_id": "{failed}"' in line
                                        for line in events), events  # and the access line


def test_check_reports_bad_gzip_fields(tmp_path: Path) -> None:
    d = tmp_path / "config"
    d.mkdir()
    (d / "gw.yaml").write_text(yaml.safe_dump({
        "apiVersion": "gateway.solo.io/v1", "kind": "Gateway", "metadata": {"name": "gw", "namespace": NS},
        "spec": {"bindPort": 8080, "httpGateway": {"options": {
            "gzip": {"compressionLevel": "FASTEST", "memoryLevel": 12, "windowBits": 8, "contentLength": 10,
                     "contentType": ["json"], "chunkSize": 4096},
            "brotli": {"quality": 12, "inputBlockBits": 20},
            "httpConnectionManagerSettings": {"generateRequestId": "yes", "uuidRequestIdConfig": {}}}}}},
        sort_keys=False))
    out = subprocess.run([sys.executable, "-m", "twistgw", "check", str(d)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    text = out.stdout + out.stderr
    for field, reason in (
            ("gzip.compressionLevel", "unknown compression level 'FASTEST' (expected one of: DEFAULT, BEST, SPEED)"),
            ("gzip.memoryLevel", "12"), ("gzip.windowBits", "8"), ("gzip.contentLength", "10"),
            ("gzip.contentType[0]", "must be a media type"), ("gzip.chunkSize", "unknown field"),
            ("brotli.quality", "12"), ("brotli.inputBlockBits", "is not supported by twistgw"),
            ("httpConnectionManagerSettings.generateRequestId", "must be true or false"),
            ("httpConnectionManagerSettings.uuidRequestIdConfig", "is not supported by twistgw")):
        assert any(field in line and reason in line and "gw.yaml:" in line for line in text.splitlines()), \
            (field, text)


@pytest.fixture(autouse=True)
def _curl_has_brotli() -> None:
    assert "brotli" in subprocess.run(["curl", "-V"], capture_output=True, text=True).stdout, \
        "curl without brotli: the brotli tests need it"


@pytest.mark.parametrize("http2", [False, True], ids=["http1.1", "h2c"])
def test_curl_decodes_a_stream_before_it_ends(tmp_path: Path, origin: tuple[int, Any], http2: bool) -> None:
    """``curl --compressed -N``: the first decoded part is out of curl while
    the backend still holds the second, over HTTP/1.1 and HTTP/2."""
    backend, handler = origin
    port = free_port()
    with gateway_process(tmp_path, write(tmp_path / "config", _compressing(port, backend))):
        for coding in ("gzip", "br"):
            handler.release.clear()
            proc = subprocess.Popen(["curl", "-s", "-N", "--compressed", "--max-time", "20", "-H",
                                     f"Accept-Encoding: {coding}", "-H", "Host: a.example",
                                     *(["--http2-prior-knowledge"] if http2 else []),
                                     f"http://127.0.0.1:{port}/stream"], stdout=subprocess.PIPE)
            assert proc.stdout is not None
            first = proc.stdout.read(len(STREAM_PARTS[0]))
            assert first == STREAM_PARTS[0] and not handler.release.is_set()
            handler.release.set()
            rest = proc.stdout.read()
            assert proc.wait(timeout=20) == 0 and first + rest == b"".join(STREAM_PARTS)
