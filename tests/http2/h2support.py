"""Real parts for the HTTP/2 tests over sockets (tests/http2):

* :class:`Backend`: an HTTP/1.1 upstream on loopback (the standard
  library's threading server) that echoes what it got as JSON, serves
  ``/big?n=N`` bytes and ``/slow?s=S`` after a pause, and counts requests;
* :func:`config`: a configuration directory routing ``/`` to it;
* :class:`H2Client`: a blocking HTTP/2 client on ``h2`` over a real socket
  (plain or TLS with ALPN), polite (:meth:`H2Client.get`) or hostile
  (:meth:`H2Client.raw`: bytes a real client never sends, frames built with
  hyperframe and hpack);
* :func:`curl`: the curl binary (``--http2-prior-knowledge``, ``--http2``);
* :func:`self_signed`: a certificate for ``localhost``.
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import parse_qs, urlsplit

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ConnectionTerminated, DataReceived, Event, ResponseReceived, StreamEnded, StreamReset
from hyperframe.frame import Frame, GoAwayFrame

CURL = shutil.which("curl")
H2LOAD = shutil.which("h2load")



def read_chunked(rfile: Any) -> bytes:
    """A chunked request body from a test backend's ``rfile`` (trailers read and dropped)."""
    out = b""
    while True:
        size = int(rfile.readline().split(b";")[0], 16)
        if size == 0:
            while rfile.readline() not in (b"\r\n", b""):
                pass
            return out
        out += rfile.read(size)
        rfile.readline()

class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = read_chunked(self.rfile)
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        with self.server.lock:
            self.server.seen.append((self.command, self.path, dict(self.headers), len(body)))
        if url.path.startswith("/slow"):
            time.sleep(float(query.get("s", ["1"])[0]))
        if url.path.startswith("/big"):
            n = int(query.get("n", ["1000000"])[0])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = b"b" * 65536
            while n > 0:
                try:
                    self.wfile.write(chunk[:n])
                except OSError:
                    return
                n -= len(chunk)
            return
        out = json.dumps({"method": self.command, "path": self.path, "headers": dict(self.headers),
                          "body_bytes": len(body)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _answer

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:
            pass  # the gateway gave up on this request (a timeout, a reset stream)

    def log_message(self, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog is 5: the gateway opens dozens of
    # upstream connections at once under h2load, and on a loaded machine (the
    # accepting thread slow to run) the SYNs past 5 were dropped and retried
    # 1, 3, 7, 15 s later, past the gateway's upstream timeout (5xx answers)
    request_queue_size = 128
    seen: list[tuple[str, str, dict[str, str], int]]
    lock: threading.Lock


class Backend:
    """An HTTP/1.1 echo backend on a loopback port (a thread)."""

    def __init__(self) -> None:
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.seen = []
        self.server.lock = threading.Lock()
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def seen(self) -> list[tuple[str, str, dict[str, str], int]]:
        with self.server.lock:
            return list(self.server.seen)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def config(directory: Path, backend_port: int, extra: str = "", options: str = "", ssl_config: str = "") -> str:
    """A configuration directory: Upstream ``backend`` and VirtualService
    ``vs`` (every domain, ``/`` to the backend); ``options`` under its
    virtualHost, ``ssl_config`` its sslConfig; ``extra`` more documents."""
    directory.mkdir(parents=True, exist_ok=True)
    text = f"""\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: backend, namespace: default}}
spec:
  static:
    hosts: [{{addr: 127.0.0.1, port: {backend_port}}}]
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
{f"  sslConfig: {ssl_config}" if ssl_config else ""}
  virtualHost:
    domains: ["*"]
{f"    options: {options}" if options else ""}
    routes:
    - matchers: [{{prefix: /}}]
      routeAction: {{single: {{upstream: {{name: backend, namespace: default}}}}}}
"""
    (directory / "config.yaml").write_text(text + (("---\n" + extra) if extra else ""))
    return str(directory)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """``(key.pem, cert.pem)`` for ``localhost`` and 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    key_path, cert_path = directory / "key.pem", directory / "cert.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


def curl(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """The curl binary, ``-sS``; the output as text."""
    assert CURL is not None, "curl is required (the HTTP/2 tests run the real binary)"
    return subprocess.run([CURL, "-sS", "--max-time", str(timeout), *args], capture_output=True, text=True,
                          timeout=timeout + 5)


class H2Client:
    """A blocking HTTP/2 client on ``h2`` over a real socket.

    ``alpn``: for TLS (``tls=True``) the protocols offered. Outbound
    validation is off, so that a test can send what h2 would refuse to.
    """

    def __init__(self, port: int, tls: bool = False, alpn: Iterable[str] = ("h2",), timeout: float = 5.0,
                 settings: dict[int, int] | None = None, preface: bool = True, rcvbuf: int | None = None) -> None:
        if rcvbuf is None:
            sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        else:  # a small receive buffer, set before connecting (the window is agreed then)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.settimeout(timeout)
            sock.connect(("127.0.0.1", port))
        self.negotiated: str | None = None
        if tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(list(alpn))
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
            self.negotiated = sock.selected_alpn_protocol()
        self.sock = sock
        self.timeout = timeout
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding=None,
                                                 validate_outbound_headers=False, normalize_outbound_headers=False))
        self.events: list[Event] = []
        self.raw_in = b""
        self.closed = False
        if preface:
            self.conn.initiate_connection()
            if settings:
                self.conn.update_settings(settings)
            self.flush()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def raw(self, data: bytes) -> None:
        """Bytes straight to the socket (after what h2 queued)."""
        self.flush()
        self.sock.sendall(data)

    def read(self, until: Any = None, timeout: float | None = None, parse: bool = True) -> list[Event]:
        """Read until ``until(events)`` is true, the connection closes or the
        time is up; returns the new events (``parse=False``: raw bytes only,
        kept in ``raw_in``)."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        new: list[Event] = []
        while not self.closed and time.monotonic() < deadline:
            if until is not None and until(self.events):
                break
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except (socket.timeout, ssl.SSLWantReadError):
                continue
            except OSError:
                self.closed = True
                break
            if not data:
                self.closed = True
                break
            self.raw_in += data
            if parse:
                got = self.conn.receive_data(data)
                self.events += got
                new += got
                self.flush()
        return new

    def request(self, path: str = "/", method: str = "GET", headers: Iterable[tuple[bytes, bytes]] = (),
                body: bytes | None = None, authority: str = "gw.test", end: bool = True) -> int:
        sid = self.conn.get_next_available_stream_id()
        fields = [(b":method", method.encode()), (b":scheme", b"http"), (b":authority", authority.encode()),
                  (b":path", path.encode()), *headers]
        self.conn.send_headers(sid, fields, end_stream=end and body is None)
        if body is not None:
            self.conn.send_data(sid, body, end_stream=end)
        self.flush()
        return sid

    def ended(self, sid: int) -> Any:
        return lambda events: any(isinstance(e, (StreamEnded, StreamReset)) and e.stream_id == sid
                                  or isinstance(e, ConnectionTerminated) for e in events)

    def response(self, sid: int) -> tuple[int, dict[bytes, bytes], bytes]:
        """Wait for stream ``sid``'s answer: ``(status, headers, body)``
        (status 0 if it never came)."""
        self.read(self.ended(sid))
        status, headers, body = 0, {}, b""
        for e in self.events:
            if getattr(e, "stream_id", None) != sid:
                continue
            if isinstance(e, ResponseReceived):
                headers = dict(e.headers)
                status = int(headers[b":status"])
            elif isinstance(e, DataReceived):
                body += e.data
                self.conn.acknowledge_received_data(e.flow_controlled_length, sid)
        self.flush()
        return status, headers, body

    def get(self, path: str = "/", **kwargs: Any) -> tuple[int, dict[bytes, bytes], bytes]:
        return self.response(self.request(path, **kwargs))

    def goaway(self) -> GoAwayFrame | None:
        """The gateway's GOAWAY among what was read (raw bytes, so that it is
        found also after a frame h2's client state cannot take)."""
        for frame in frames_of(self.raw_in):
            if isinstance(frame, GoAwayFrame):
                return frame
        return None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def frames_of(data: bytes) -> list[Frame]:
    out = []
    view = memoryview(data)
    while len(view) >= 9:
        frame, length = Frame.parse_frame_header(view[:9])
        if len(view) < 9 + length:
            break
        frame.parse_body(view[9:9 + length])
        out.append(frame)
        view = view[9 + length:]
    return out


def served(port: int, timeout: float = 5.0) -> bool:
    """Another client, meanwhile: an HTTP/2 GET answered 200 in time."""
    client = H2Client(port, timeout=timeout)
    try:
        return client.get("/")[0] == 200
    finally:
        client.close()
