"""A raw TLS backend on loopback that answers with a close-delimited body
(no Content-Length, not chunked) and then ends the connection the way a
test asks: with TLS ``close_notify`` (a complete response, RFC 9112 §6.3),
or by closing TCP without it (a truncation, RFC 8446 §6.1).

The standard library's ``ssl.SSLObject`` over memory BIOs on a plain
blocking socket, in a thread: closing the socket then certainly sends no
``close_notify`` (``SSLSocket.close`` makes no promise either way), and
``unwrap`` certainly sends one. Every request path picks the ending:
``/notify`` ends with close_notify, anything else without.

With ``tls=False`` the same server speaks plain TCP: ``/notify`` ends with
a FIN (a complete response), anything else with a reset (``SO_LINGER`` 0).
"""

from __future__ import annotations

import socket
import ssl
import struct
import tempfile
import threading
from pathlib import Path
from typing import Any

from support.pki import TestCA

__all__ = ["TruncatingTLSServer"]

#: the body each response carries before its end
BODY = b"first part of the body;" * 200


class TruncatingTLSServer:
    """``server.port``; ``server.close()`` stops it. ``ca.pem`` verifies
    its certificate for ``backend.test``."""

    def __init__(self, ca: TestCA, name: str = "backend.test", tls: bool = True) -> None:
        self.tls = tls
        leaf = ca.issue(name, dns=[name])
        self._dir = tempfile.TemporaryDirectory()
        cert, key = leaf.write(Path(self._dir.name), "leaf")
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port: int = self.sock.getsockname()[1]
        self.endings: list[str] = []
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        if not self.tls:
            self._plain(conn)
            return
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.context.wrap_bio(incoming, outgoing, server_side=True)
        try:
            self._step(conn, tls, incoming, outgoing, tls.do_handshake)
            head = b""
            while b"\r\n\r\n" not in head:
                head += self._step(conn, tls, incoming, outgoing, lambda: tls.read(65536))
            path = head.split(b" ", 2)[1]
            tls.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n" + BODY)
            conn.sendall(outgoing.read())
            if path == b"/notify":
                try:
                    tls.unwrap()
                except ssl.SSLWantReadError:
                    pass  # the peer's close_notify is not waited for
                conn.sendall(outgoing.read())
                self.endings.append("close_notify")
            else:
                self.endings.append("truncated")
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()  # TCP FIN; close_notify only if unwrap() sent it

    def _plain(self, conn: socket.socket) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(65536)
                if not data:
                    return
                head += data
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n" + BODY)
            if head.split(b" ", 2)[1].endswith(b"/notify"):
                self.endings.append("fin")
            else:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.endings.append("reset")
        except OSError:
            pass
        finally:
            conn.close()

    @staticmethod
    def _step(conn: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO,
              call: Any) -> Any:
        while True:
            try:
                result = call()
            except ssl.SSLWantReadError:
                pending = outgoing.read()
                if pending:
                    conn.sendall(pending)
                data = conn.recv(65536)
                if not data:
                    raise OSError("the client went away") from None
                incoming.write(data)
                continue
            pending = outgoing.read()
            if pending:
                conn.sendall(pending)
            return result

    def close(self) -> None:
        self._stopped = True
        self.sock.close()
        self._dir.cleanup()
