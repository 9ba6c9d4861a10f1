"""A real gRPC service for the HTTP/2 upstream tests: grpcio's server on its
own threads (``127.0.0.1:0``, h2c, or TLS with ``credentials``), serving
``/test.Echo/*`` on raw bytes (no generated code: the messages are what
the client sends):

``Unary``         the request back; metadata ``x-echo`` back as trailing metadata;
                  a request ``fail:<code>:<details>`` aborts with that status
                  and trailing metadata ``x-detail: <details>``;
                  ``sleep:<seconds>`` answers after that long; ``hold``
                  answers only once the test calls :meth:`GrpcBackend.release`
                  (at most :data:`HOLD_LIMIT` seconds), ``holding`` is set
                  when it arrived: a deadline surely passes meanwhile
``ServerStream``  ``<n>``: n messages ``m0`` ... ``m<n-1>``, then OK;
                  ``<n>:<size>``: n messages of ``size`` bytes
``ClientStream``  every message joined by ``+``
``Bidi``          each message back with ``echo:`` before it

It records what it saw (``seen``: (method, invocation metadata as a dict,
peer)), and the grpc-web framing helpers (:func:`frame`, :func:`unframe`)
the tests use to speak grpc-web by hand.
"""

from __future__ import annotations

import struct
import threading
import time
from concurrent import futures
from typing import Any, Iterator

import grpc

__all__ = ["GrpcBackend", "HOLD_LIMIT", "frame", "start_grpc_backend", "unframe"]

#: the longest a ``hold`` request waits for release (a test that never releases)
HOLD_LIMIT = 20.0


def frame(message: bytes, flags: int = 0) -> bytes:
    """One length-prefixed gRPC message."""
    return struct.pack(">BI", flags, len(message)) + message


def unframe(data: bytes) -> list[tuple[int, bytes]]:
    """(flags, payload) of each length-prefixed frame in ``data``."""
    out = []
    while len(data) >= 5:
        flags, n = struct.unpack(">BI", data[:5])
        out.append((flags, data[5:5 + n]))
        data = data[5 + n:]
    assert not data, f"a partial frame at the end: {data!r}"
    return out


class GrpcBackend:
    def __init__(self, credentials: Any = None) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.lock = threading.Lock()
        #: set when a ``hold`` request arrived; ``released``: it may answer
        self.holding = threading.Event()
        self.released = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                                  options=[("grpc.so_reuseport", 0)])
        handlers = {
            "Unary": grpc.unary_unary_rpc_method_handler(self.unary),
            "ServerStream": grpc.unary_stream_rpc_method_handler(self.server_stream),
            "ClientStream": grpc.stream_unary_rpc_method_handler(self.client_stream),
            "Bidi": grpc.stream_stream_rpc_method_handler(self.bidi),
        }
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", handlers),))
        if credentials is None:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            self.port = self.server.add_secure_port("127.0.0.1:0", credentials)
        self.server.start()

    def _saw(self, method: str, context: Any) -> dict[str, str]:
        md = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        with self.lock:
            self.seen.append((method, md))
        return md

    def unary(self, request: bytes, context: Any) -> bytes:
        md = self._saw("Unary", context)
        if "x-echo" in md:
            context.set_trailing_metadata((("x-echo", md["x-echo"]),))
        if request.startswith(b"fail:"):
            _, code, details = request.decode().split(":", 2)
            context.set_trailing_metadata((("x-detail", details),))
            context.abort(grpc.StatusCode[code], details)
        if request.startswith(b"sleep:"):
            time.sleep(float(request[6:]))
        if request == b"hold":
            self.holding.set()
            self.released.wait(HOLD_LIMIT)
        return request

    def release(self) -> None:
        """Let every ``hold`` request (those waiting, and later ones) answer."""
        self.released.set()

    def server_stream(self, request: bytes, context: Any) -> Iterator[bytes]:
        self._saw("ServerStream", context)
        count, _, size = request.partition(b":")
        for i in range(int(count)):
            yield b"m%d" % i if not size else b"%d" % (i % 10) * int(size)

    def client_stream(self, requests: Iterator[bytes], context: Any) -> bytes:
        self._saw("ClientStream", context)
        return b"+".join(requests)

    def bidi(self, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        self._saw("Bidi", context)
        for r in requests:
            yield b"echo:" + r

    def stop(self, grace: float | None = None) -> None:
        self.released.set()
        self.server.stop(grace).wait(5)


def start_grpc_backend(credentials: Any = None) -> GrpcBackend:
    return GrpcBackend(credentials)
