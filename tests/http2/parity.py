"""The parts of the HTTP/1.1 ↔ HTTP/2 parity test (tests/http2/test_parity.py):

* :class:`Req`, :class:`Case`: a request as a table writes it (method,
  path, headers, body; ``{m}`` in its path or a header value is the mode's
  own token, for stateful cases such as a rate limit or a backend that
  fails once), and a case (requests run in order, on each protocol);
* :class:`Recorder`: a loopback HTTP/1.1 server (a thread) that records every
  request it gets (method, target, headers in order, body, which server) and
  answers by path: the backend, a shadow, an auth service;
* :func:`exchange`: one request over one of :data:`MODES`: ``h1`` (HTTP/1.1
  on the plain listener), ``h2c`` (HTTP/2 with prior knowledge), ``h1tls``
  (TLS, ALPN ``http/1.1``), ``h2tls`` (TLS, ALPN ``h2``), each its own
  connection, with real clients: Python's ``http.client`` response parser
  over a socket for HTTP/1.1, ``h2`` for HTTP/2 (as curl and browsers send
  it: lower-case names, ``cookie`` split into crumbs, ``content-length``
  with a body);
* :func:`curl_exchange`: the same with the curl binary (``--http1.1``,
  ``--http2-prior-knowledge``, ``--http2`` over TLS), for a subset;
* :class:`Outcome`: what the client got (status, end-to-end headers, body)
  and what every recorder received meanwhile, normalised only where the
  protocols must differ (hop-by-hop and connection fields, ``date``, the
  mode's token, the case of header names).
"""

from __future__ import annotations

import http.client
import http.server
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ConnectionTerminated, DataReceived, ResponseReceived, StreamEnded, StreamReset, TrailersReceived
from h2support import read_chunked

CURL = shutil.which("curl")

#: each mode's transport; an HTTP/2 mode is compared with the HTTP/1.1 mode of the same transport
MODES = ("h1", "h2c", "h1tls", "h2tls")
PAIRS = (("h1", "h2c"), ("h1tls", "h2tls"))
#: the token ``{m}`` stands for in a request: distinct per mode, none a prefix of another, all of one
#: length (a body that echoes it has one length), replaced back by ``MODE`` before comparing
TOKENS = {"h1": "mode-h1c", "h2c": "mode-h2c", "h1tls": "mode-h1s", "h2tls": "mode-h2s"}  # one length

#: response fields that belong to one connection, not to the message (RFC 9110 §7.6.1, RFC 9113 §8.2.2),
#: and ``date`` (the time of the answer)
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te",
                        "trailer", "date"})


@dataclass(frozen=True)
class Req:
    """One request of a case, and what the HTTP/1.1 answer must be (so that
    a case means what it says: the HTTP/2 answer is then compared whole).

    ``status``: the expected status; ``upstream``: how many requests the
    recorders get in all (0: refused before any backend; the HTTP/2 modes
    wait for as many); ``seen``: header names (lower case) the backend must
    have got, ``unseen``: names it must not have (a consumed credential);
    ``has``: response header name → value the answer must carry.
    """

    path: str
    status: int
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    chunked: bool = False
    authority: str = "gw.test"
    upstream: int | None = None
    seen: tuple[str, ...] = ()
    unseen: tuple[str, ...] = ()
    has: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Case:
    name: str
    requests: tuple[Req, ...]


def case(name: str, *requests: Req) -> Case:
    return Case(name, requests)


# -- the recording servers ---------------------------------------------------------------------------


@dataclass
class Seen:
    server: str
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return read_chunked(self.rfile)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _any(self) -> None:
        body = self._body()
        seen = Seen(self.server.name, self.command, self.path, list(self.headers.items()), body)
        with self.server.lock:
            self.server.seen.append(seen)
            count = sum(1 for s in self.server.seen if s.target == self.path)
        status, headers, out = self.server.answer(seen, count)
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if not any(n.lower() in ("content-length", "transfer-encoding") for n, _ in headers):
            self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD" and status not in (204, 304):
            try:
                self.wfile.write(out)
            except OSError:
                pass

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _any

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:
            pass  # the gateway gave up (a timeout)

    def log_message(self, *args: Any) -> None:
        pass


#: ``answer(seen, count)`` → (status, headers, body); ``count``: requests for this target so far
Answer = Callable[[Seen, int], "tuple[int, list[tuple[str, str]], bytes]"]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    name: str
    seen: list[Seen]
    lock: threading.Lock
    answer: Answer


class Recorder:
    """A loopback HTTP/1.1 server recording every request (a thread)."""

    def __init__(self, name: str, answer: Answer) -> None:
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.name = name
        self.server.seen = []
        self.server.lock = threading.Lock()
        self.server.answer = answer
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self) -> int:
        with self.server.lock:
            return len(self.server.seen)

    def since(self, n: int) -> list[Seen]:
        with self.server.lock:
            return list(self.server.seen[n:])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def backend_answer(seen: Seen, count: int) -> tuple[int, list[tuple[str, str]], bytes]:
    """The backend: by path, ``/status/N`` answers N, ``/flaky/...`` 503 on
    the first request of each target then 200, ``/slow/...`` after a second,
    ``/big/...?n=N`` N bytes (200 KB), ``/chunked/...`` a chunked body; every answer has
    two ``set-cookie`` fields, ``x-backend`` and ``x-drop-me`` (a response
    header a route removes)."""
    url = urlsplit(seen.target)
    path = url.path
    headers = [("Content-Type", "text/plain"), ("X-Backend", "yes"), ("X-Drop-Me", "backend"),
               ("Set-Cookie", "a=1; Path=/"), ("Set-Cookie", "b=2; Path=/"),
               ("Access-Control-Allow-Origin", "https://backend.example")]
    body = f"{seen.server} {seen.method} {seen.target} {len(seen.body)}\n".encode()
    status = 200
    if "/status/" in path:
        status = int(path.rsplit("/status/", 1)[1].split("/")[0])
    elif "/flaky/" in path and count % 2 == 1:
        status = 503
        body = b"try again\n"
    elif "/slow/" in path:
        time.sleep(float(parse_qs(url.query).get("s", ["1"])[0]))
    elif "/big/" in path:
        n = int(parse_qs(url.query).get("n", ["204800"])[0])
        body = (bytes(range(256)) * (n // 256 + 1))[:n]
    elif "/chunked/" in path:
        chunks = [b"first part\n", b"second part\n"]
        body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        headers.append(("Transfer-Encoding", "chunked"))
    if status in (204, 304):
        body = b""
    return status, headers, body


# -- the clients -------------------------------------------------------------------------------------


@dataclass
class Outcome:
    status: int
    headers: dict[str, list[str]]
    body: bytes
    upstream: list[dict[str, Any]] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return ",".join(values) if values else None


def _client_context(alpn: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols([alpn])
    return ctx


def _fill(text: str, mode: str) -> str:
    return text.replace("{m}", TOKENS[mode])


def _h1(port: int, tls: bool, req: Req, mode: str, timeout: float) -> tuple[int, list[tuple[str, str]], bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if tls:
            sock = _client_context("http/1.1").wrap_socket(sock, server_hostname="localhost")
            assert sock.selected_alpn_protocol() == "http/1.1", sock.selected_alpn_protocol()
        lines = [f"{req.method} {_fill(req.path, mode)} HTTP/1.1", f"Host: {req.authority}"]
        lines += [f"{name}: {_fill(value, mode)}" for name, value in req.headers]
        payload = b""
        if req.body is not None:
            if req.chunked:
                lines.append("Transfer-Encoding: chunked")
                half = len(req.body) // 2
                payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (req.body[:half], req.body[half:]) if p)
                payload += b"0\r\n\r\n"
            else:
                lines.append(f"Content-Length: {len(req.body)}")
                payload = req.body
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
        response = http.client.HTTPResponse(sock, method=req.method)
        response.begin()
        body = response.read()
        return response.status, [(n.lower(), v) for n, v in response.getheaders()], body
    finally:
        sock.close()


def _h2(port: int, tls: bool, req: Req, mode: str, timeout: float) -> tuple[int, list[tuple[str, str]], bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if tls:
            sock = _client_context("h2").wrap_socket(sock, server_hostname="localhost")
            assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
        conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        conn.initiate_connection()
        fields = [(":method", req.method), (":scheme", "https" if tls else "http"),
                  (":authority", req.authority), (":path", _fill(req.path, mode))]
        for name, value in req.headers:
            value = _fill(value, mode)
            if name.lower() == "cookie":  # RFC 9113 §8.2.3: browsers send each crumb as its own field
                fields += [("cookie", crumb) for crumb in value.split("; ")]
            else:
                fields.append((name.lower(), value))
        if req.body is not None and not req.chunked:
            fields.append(("content-length", str(len(req.body))))
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [(n.encode(), v.encode()) for n, v in fields], end_stream=req.body is None)
        # the body in at least two DATA frames, as the windows allow (the rest after WINDOW_UPDATEs)
        pending = b"" if req.body is None else req.body
        if req.body is not None:
            half = len(req.body) // 2
            first = min(half, conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            conn.send_data(sid, pending[:first], end_stream=not pending[first:])
            pending = pending[first:]
        sock.sendall(conn.data_to_send())
        status, headers, body = 0, [], b""
        deadline = time.monotonic() + timeout
        done = False
        while not done:
            if time.monotonic() > deadline:
                raise AssertionError(f"{mode}: no end of stream in {timeout}s")
            if pending:
                n = min(len(pending), conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
                if n:
                    conn.send_data(sid, pending[:n], end_stream=n == len(pending))
                    pending = pending[n:]
                    sock.sendall(conn.data_to_send())
                    continue
            data = sock.recv(65536)
            if not data:
                raise AssertionError(f"{mode}: the connection closed before the stream ended")
            for event in conn.receive_data(data):
                if isinstance(event, ResponseReceived) and event.stream_id == sid:
                    for name, value in event.headers:
                        if name == b":status":
                            status = int(value)
                        else:
                            headers.append((name.decode(), value.decode()))
                elif isinstance(event, TrailersReceived) and event.stream_id == sid:
                    headers += [(n.decode(), v.decode()) for n, v in event.headers]
                elif isinstance(event, DataReceived) and event.stream_id == sid:
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, sid)
                elif isinstance(event, StreamEnded) and event.stream_id == sid:
                    done = True
                elif isinstance(event, StreamReset) and event.stream_id == sid:
                    raise AssertionError(f"{mode}: stream reset ({event.error_code!r})")
                elif isinstance(event, ConnectionTerminated):
                    raise AssertionError(f"{mode}: GOAWAY ({event.error_code!r})")
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
        return status, headers, body
    finally:
        sock.close()


#: curl's flag for each mode
CURL_FLAGS = {"h1": "--http1.1", "h2c": "--http2-prior-knowledge", "h1tls": "--http1.1", "h2tls": "--http2"}


def curl_exchange(mode: str, ports: dict[str, int], req: Req, recorders: list[Recorder], scratch: Path,
                  timeout: float = 10.0) -> Outcome:
    """``req`` with the curl binary (its own User-Agent and Accept, the same
    on both protocols), and what the recorders got meanwhile."""
    assert CURL is not None, "curl is required (the parity test runs the real binary)"
    tls = mode.endswith("tls")
    port = ports["tls" if tls else "plain"]
    host, _, given = req.authority.partition(":")
    authority_port = given or ("443" if tls else "80")
    url = f"{'https' if tls else 'http'}://{req.authority}{_fill(req.path, mode)}"
    args = [CURL, "-sS", "-k", CURL_FLAGS[mode], "--max-time", str(timeout), "--path-as-is",
            "--connect-to", f"{host}:{authority_port}:127.0.0.1:{port}", "-X", req.method,
            "--dump-header", str(scratch / "head"), "--output", str(scratch / "body"),
            "-w", "%{http_version}"]
    for name, value in req.headers:
        args += ["-H", f"{name}: {_fill(value, mode)}"]
    if req.body is not None:
        args += ["--data-binary", "@-"]
        if req.chunked:
            args += ["-H", "Transfer-Encoding: chunked"]
    before = [r.count() for r in recorders]
    out = subprocess.run(args + [url], input=req.body or b"", capture_output=True, timeout=timeout + 5)
    assert out.returncode == 0, (mode, out.stderr)
    assert out.stdout.decode() == ("2" if mode.startswith("h2") else "1.1"), (mode, out.stdout)
    lines = (scratch / "head").read_bytes().decode("latin-1").split("\r\n")
    heads = [i for i, line in enumerate(lines) if line.startswith("HTTP/")]
    final = lines[heads[-1]:]  # after any 100 Continue
    status = int(final[0].split()[1])
    headers = [(n.strip(), v.strip()) for n, _, v in (line.partition(":") for line in final[1:] if line)]
    body = (scratch / "body").read_bytes() if (scratch / "body").exists() else b""
    (scratch / "body").unlink(missing_ok=True)
    return _outcome(status, headers, body, req, recorders, before)


def _normal(text: str) -> str:
    for token in TOKENS.values():
        text = text.replace(token, "MODE")
    return text


def _fields(pairs: list[tuple[str, str]], skip: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in pairs:
        name = name.lower()
        if name not in skip:
            out.setdefault(name, []).append(_normal(value))
    return out


def exchange(mode: str, ports: dict[str, int], req: Req, recorders: list[Recorder],
             timeout: float = 10.0) -> Outcome:
    """``req`` over ``mode``, and what the recorders got meanwhile (waiting,
    for an HTTP/2 mode, until they got ``expect`` requests: a shadow copy
    arrives after the answer)."""
    before = [r.count() for r in recorders]
    tls = mode.endswith("tls")
    port = ports["tls" if tls else "plain"]
    run = _h2 if mode.startswith("h2") else _h1
    status, headers, body = run(port, tls, req, mode, timeout)
    return _outcome(status, headers, body, req, recorders, before)


def _outcome(status: int, headers: list[tuple[str, str]], body: bytes, req: Req, recorders: list[Recorder],
             before: list[int]) -> Outcome:
    if req.upstream:
        deadline = time.monotonic() + 3
        while sum(r.count() - b for r, b in zip(recorders, before, strict=True)) < req.upstream and time.monotonic() < deadline:
            time.sleep(0.01)
    upstream = [{"server": s.server, "method": s.method, "target": _normal(s.target),
                 "headers": _fields(s.headers), "body": _normal(s.body.decode("latin-1"))}
                for r, b in zip(recorders, before, strict=True) for s in r.since(b)]
    upstream.sort(key=lambda u: json.dumps(u, sort_keys=True))
    return Outcome(status, _fields(headers, HOP_BY_HOP), _normal(body.decode("latin-1")).encode("latin-1"), upstream)
