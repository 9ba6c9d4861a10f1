"""TLS connections whose client never answers close_notify (issue 23,
item 10): a real ``twist twistgw`` with an ``ssl:`` listener; real TLS
clients (Python's ``ssl`` over a memory BIO on a plain socket, so that
nothing is sent behind the test's back) that complete the handshake, then
never send close_notify and never close their socket.

Before: after the idle timeout, the head timeout (408), a 400 or any
``Connection: close`` answer the gateway sent its close_notify and waited
for the client's forever, one descriptor per client. Now it aborts the
connection a grace period (1 s, once its bytes are out) after closing.
"""

from __future__ import annotations

import os
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

from support.http import static_upstream_yaml, vs_yaml
from support.process import TwistGateway

from test_engine_tls import certificate  # noqa: F401  (the fixture)


class StubbornClient:
    """A TLS client on a plain socket that never sends close_notify."""

    def __init__(self, port: int, cert: Path) -> None:
        ctx = ssl.create_default_context(cafile=str(cert))
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                self.incoming.write(self.sock.recv(65536))
        self._flush()

    def _flush(self) -> None:
        data = self.outgoing.read()
        if data:
            self.sock.sendall(data)

    def send(self, data: bytes) -> None:
        self.tls.write(data)
        self._flush()

    def read_until_eof(self, timeout: float) -> tuple[bytes, bool]:
        """(what the gateway wrote, whether the TCP connection closed)
        within ``timeout``. close_notify is read, never answered."""
        self.sock.settimeout(timeout)
        got = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                raw = self.sock.recv(65536)
            except socket.timeout:
                return got, False
            except ConnectionResetError:
                return got, True  # aborted
            if not raw:
                return got, True  # the gateway's FIN (or RST)
            self.incoming.write(raw)
            try:
                while chunk := self.tls.read(65536):
                    got += chunk
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                pass
        return got, False

    def close(self) -> None:
        self.sock.close()


def _fds(pid: int) -> int:
    """The gateway's open sockets (other descriptors come and go: logs)."""
    fds = f"/proc/{pid}/fd"
    count = 0
    for fd in os.listdir(fds):
        try:
            count += os.readlink(f"{fds}/{fd}").startswith("socket:")
        except OSError:
            pass  # closed meanwhile
    return count


@pytest.fixture
def gateway(tmp_path: Path, certificate: tuple[Path, Path]) -> Any:  # noqa: F811
    d = tmp_path / "cfg"
    d.mkdir()
    # a backend that is never reached (the requests here never get that far)
    (d / "c.yaml").write_text(static_upstream_yaml("none", [9]) + "---\n"
                              + vs_yaml(routes=DIRECT))
    key, cert = certificate
    listen = f"ssl:{{port}}:privateKey={key}:certKey={cert}:interface=127.0.0.1"
    with TwistGateway(tmp_path, str(d), listen=listen, args=("--idle-timeout", "1", "--head-timeout", "1")) as gw:
        gw.cert = cert
        yield gw


DIRECT = """    - matchers: [{prefix: /direct}]
      directResponseAction: {status: 200, body: "direct"}
"""

#: what each kind of client sends, and the start of the answer it gets
KINDS = {
    "idle": (b"", b""),
    "head timeout": (b"GET /direct HTTP/1.1\r\n", b"HTTP/1.1 408 "),
    "bad request": (b"GET /direct HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n", b"HTTP/1.1 400 "),
    "connection close": (b"GET /direct HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", b"HTTP/1.1 200 "),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_client_that_never_answers_close_notify_is_cut_off(gateway: Any, kind: str) -> None:
    before = _fds(gateway.pid)
    clients = [StubbornClient(gateway.port, gateway.cert) for _ in range(8)]
    try:
        for c in clients:
            c.send(KINDS[kind][0])
        # timeouts of 1 s, then the grace period of 1 s: closed within ~2 s
        for c in clients:
            got, closed = c.read_until_eof(6)
            assert got.startswith(KINDS[kind][1]), got
            assert closed, f"{kind}: the gateway still holds the connection open"
        deadline = time.monotonic() + 5
        while _fds(gateway.pid) > before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _fds(gateway.pid) <= before
    finally:
        for c in clients:
            c.close()
