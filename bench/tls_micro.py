"""The client side of upstream TLS alone, in memory: one request written and
one response received on an established keep-alive TLS 1.3 connection.

    python bench/tls_micro.py [--requests N] [--rounds R] [--profile twisted|memtls]

``twisted`` is Twisted's ``TLSMemoryBIOProtocol`` over pyOpenSSL with
``twistgw.tls.client_tls``'s creator, written to unbuffered as the engine
did until session 9; ``memtls`` is ``twistgw.engine.upstream.memtls`` (the
standard library's ``ssl.SSLObject``). The server is the standard library's
on memory BIOs; its records are made before timing, so only the client's
work is timed (CPU clock, the minimum of the rounds: the figure to compare
on a shared machine). The request and response are the size of bench/run's.
``--profile`` counts Python calls per request instead (exact, load-free).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import StringTransport
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from support.pki import TestCA  # noqa: E402

from twistgw.engine.upstream.memtls import TLSConnection  # noqa: E402
from twistgw.stdtls import client_context  # noqa: E402
from twistgw.tls import client_tls  # noqa: E402

REQUEST = (b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\nX-Forwarded-For: 127.0.0.1\r\n"
           b"X-Forwarded-Proto: http\r\nX-Request-Id: 0123456789abcdef0123456789abcdef\r\n\r\n")
RESPONSE = (b"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Sat, 21 Nov 2026 10:00:00 GMT\r\nContent-Type: text/plain\r\n"
            b"Content-Length: 23\r\nConnection: keep-alive\r\n\r\nhello from the backend\n")


class _App(Protocol):
    received = 0

    def dataReceived(self, data: bytes) -> None:
        self.received += len(data)


class Pair:
    """A client (``kind``) and a standard-library server, handshaken."""

    def __init__(self, kind: str, ca: TestCA, server: ssl.SSLContext) -> None:
        self.app = _App()
        self.wire = StringTransport()
        self.client: Any
        self.write: Callable[[bytes], None]
        if kind == "twisted":
            creator = client_tls("backend.test", ca_pem=ca.pem, alpn=(b"http/1.1",))
            self.client = TLSMemoryBIOFactory(creator, True, Factory.forProtocol(lambda: self.app)).buildProtocol(None)
            self.client.makeConnection(self.wire)
            self.write = lambda data: TLSMemoryBIOProtocol.write(self.client, data)
        else:
            context = client_context(ca_pem=ca.pem, alpn=("http/1.1",))
            self.client = TLSConnection(context, "backend.test", ("backend.test",), self.app)
            self.client.makeConnection(self.wire)
            self.write = self.client.write
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.server = server.wrap_bio(self.incoming, self.outgoing, server_side=True)
        for _ in range(10):
            self.incoming.write(self.wire.value())
            self.wire.clear()
            try:
                self.server.do_handshake()
            except ssl.SSLWantReadError:
                pass
            if self.outgoing.pending:
                self.client.dataReceived(self.outgoing.read())
            if not self.wire.value():
                break

    def records(self, n: int) -> list[bytes]:
        out = []
        for _ in range(n):
            self.server.write(RESPONSE)
            out.append(self.outgoing.read())
        return out

    def exchange(self, records: list[bytes]) -> None:
        write, received = self.write, self.client.dataReceived
        for record in records:
            write(REQUEST)
            received(record)
        self.wire.clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--profile", choices=("twisted", "memtls"))
    args = ap.parse_args()
    ca = TestCA()
    with tempfile.TemporaryDirectory() as d:
        cert, key = ca.issue("backend.test", dns=["backend.test"]).write(Path(d), "backend")
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(cert, key)
        server.set_alpn_protocols(["http/1.1"])
    if args.profile:
        pair = Pair(args.profile, ca, server)
        pair.exchange(pair.records(5))
        records = pair.records(args.requests)
        profile = cProfile.Profile()
        profile.runcall(pair.exchange, records)
        stats = pstats.Stats(profile)
        calls = sum(v[1] for v in stats.stats.values()) - 1  # type: ignore[attr-defined]
        print(f"{args.profile}: {calls / args.requests:.1f} Python calls per request")
        stats.sort_stats("tottime").print_stats(12)
        return
    for kind in ("twisted", "memtls"):
        best = float("inf")
        for _ in range(args.rounds):
            pair = Pair(kind, ca, server)
            pair.exchange(pair.records(5))
            records = pair.records(args.requests)
            start = time.process_time()
            pair.exchange(records)
            best = min(best, (time.process_time() - start) / args.requests * 1e6)
            assert pair.app.received == (args.requests + 5) * len(RESPONSE)
        print(f"{kind:8} {best:6.2f} µs CPU per request and response (minimum of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
