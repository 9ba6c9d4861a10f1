"""twistgw's own per-request cost over HTTP/2, in memory (issue 33): the
HTTP/2 twin of bench/micro.py.

    python bench/h2_micro.py [--requests N] [--repeat R] [--streams S] [--scenarios plain,jwt-rbac]
                             [--breakdown]

An ``h2`` client sends batches of ``--streams`` requests (h2load's ``-m``)
to the gateway's factory over a StringTransport; each request goes to a
pooled upstream connection (another StringTransport) answered with the
bench backend's 23-byte body; the client reads the answers and gives the
window back. Only the gateway's own work is timed (its ``dataReceived``
calls and the upstreams' reads), on the process's CPU clock, never the
client's. The scenarios are bench/micro.py's (the same configuration and
request header), so ``h2-plain`` sits beside ``plain`` and the extra of
``jwt-rbac`` can be compared over both protocols. ``--breakdown`` also
times h2's calls (receive, send_headers, send_data). The scenarios take
turns batch by batch (a paired measurement): columns are the minimum and
the median over ``--repeat`` rounds, and the median of the paired extras. The client lets HPACK
index every field, as h2load and curl (nghttp2) do; ``--never-index`` sends
``authorization`` never-indexed, as h2's own client does: then the token is
Huffman-decoded by hpack, in Python, with every request.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived
from prometheus_client import CollectorRegistry
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

import harness
import micro
from twistgw.config.loader import load_text
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.engine.gateway import Gateway, GatewayFactory
from twistgw.runtime.metrics import Metrics

#: --never-index: the client's h2 marks authorization never-indexed
NORMALIZE = [False]
BODY = b"HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Type: text/plain\r\nContent-Length: 23\r\n\r\n" + b"x" * 23


class H2Bench:
    """One HTTP/2 connection to a gateway in memory."""

    def __init__(self, spec: tuple[str, str, bytes]) -> None:
        options, extra, header = spec
        self.reactor = MemoryReactorClock()
        host = PluginHost.create()
        gateway = Gateway(self.reactor, host, access_log=False)
        gateway.metrics = Metrics(CollectorRegistry())
        gateway.snapshot = build_snapshot(load_text(harness.gateway_yaml(9, options, extra)), host)
        self.gateway = gateway
        factory = GatewayFactory(gateway, timeout=60)
        self.proto = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 8080))
        self.t = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
        self.proto.makeConnection(self.t)
        # h2load and curl (nghttp2) let HPACK index every field; h2's own
        # normalisation would mark authorization never-indexed (sent, and
        # Huffman-decoded in Python, in full with every request):
        # --never-index measures that
        self.client = H2Connection(H2Configuration(client_side=True, header_encoding=None,
                                                   normalize_outbound_headers=NORMALIZE[0]))
        self.client.initiate_connection()
        self.fields = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"127.0.0.1:8080"),
                       (b":path", b"/hello"), (b"user-agent", b"h2load nghttp2/1.52.0")]
        if isinstance(header, bytes) and header:
            name, _, value = header.rstrip(b"\r\n").partition(b": ")
            self.fields.append((name.lower(), value))
        self.upstreams: list[tuple[Any, StringTransport]] = []
        self.spent = 0.0
        self.server(self.proto.dataReceived, self.client.data_to_send())
        self.back()

    def server(self, f: Any, *args: Any) -> None:
        t = time.process_time()
        f(*args)
        self.spent += time.process_time() - t

    def _connect(self) -> None:
        tcp = self.reactor.tcpClients
        while len(self.upstreams) < len(tcp):
            host, port, factory = tcp[len(self.upstreams)][:3]
            p = factory.buildProtocol(IPv4Address("TCP", host, port))
            t = StringTransport()
            self.server(p.makeConnection, t)
            self.upstreams.append((getattr(p, "_wrappedProtocol", p), t))

    def back(self) -> None:
        data = self.t.value()
        self.t.clear()
        if data:
            for event in self.client.receive_data(data):
                if isinstance(event, DataReceived):
                    self.client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        out = self.client.data_to_send()
        if out:
            self.server(self.proto.dataReceived, out)
            self.t.clear() if not self.t.value() else self.back()

    def batch(self, streams: int) -> None:
        for _ in range(streams):
            sid = self.client.get_next_available_stream_id()
            self.client.send_headers(sid, self.fields, end_stream=True)
        self.server(self.proto.dataReceived, self.client.data_to_send())
        self._connect()
        for up, t in self.upstreams:
            if t.value():
                t.clear()
                self.server(up.dataReceived, BODY)
        self.back()


def breakdown(bench: H2Bench, streams: int, n: int) -> dict[str, float]:
    (conn,) = bench.proto.factory.connections
    h2 = conn.h2
    spent: dict[str, float] = {}
    for name in ("receive_data", "send_headers", "send_data", "end_stream", "data_to_send"):
        original = getattr(h2, name)

        def timed(*a: Any, _f: Any = original, _n: str = name, **k: Any) -> Any:
            t = time.process_time()
            try:
                return _f(*a, **k)
            finally:
                spent[_n] = spent.get(_n, 0.0) + time.process_time() - t
        setattr(h2, name, timed)
    for _ in range(n // streams):
        bench.batch(streams)
    return {k: v * 1e6 / n for k, v in spent.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--streams", type=int, default=10)
    p.add_argument("--scenarios", default="plain,jwt-rbac")
    p.add_argument("--breakdown", action="store_true")
    p.add_argument("--never-index", action="store_true",
                   help="the client sends authorization never-indexed (h2's default), not indexed (nghttp2's)")
    args = p.parse_args()
    NORMALIZE[0] = args.never_index
    specs = micro.scenarios(fresh_needed=False)
    names = args.scenarios.split(",")
    benches = {name: H2Bench(specs[name]) for name in names}
    for bench in benches.values():
        for _ in range(20):
            bench.batch(args.streams)
    # the scenarios take turns, one batch each: a loaded machine's drift
    # falls on all of them alike (a paired measurement)
    batches = args.requests // args.streams
    rounds: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.repeat):
        for bench in benches.values():
            bench.spent = 0.0
        for _ in range(batches):
            for bench in benches.values():
                bench.batch(args.streams)
        for name, bench in benches.items():
            rounds[name].append(bench.spent * 1e6 / (batches * args.streams))
    base = rounds.get("plain")
    for name in names:
        extra = ""
        if base is not None and name != "plain":
            extra = f"{statistics.median(a - b for a, b in zip(rounds[name], base, strict=True)):+9.1f}"
        print(f"h2-{name:18s} {min(rounds[name]):7.1f} {statistics.median(rounds[name]):7.1f} {extra}", flush=True)
        if args.breakdown:
            for k, v in sorted(breakdown(benches[name], args.streams, args.requests).items(), key=lambda kv: -kv[1]):
                print(f"    h2.{k:16s} {v:7.1f} µs/request")

if __name__ == "__main__":
    sys.exit(main())
