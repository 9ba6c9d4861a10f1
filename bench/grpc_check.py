"""What one ``passThroughAuth.grpc`` Check costs the gateway, two ways.

A grpcio ext_authz server runs in this process (its own threads) on
loopback; the real reactor runs the calls, ``--concurrency`` at a time,
``--calls`` in all, and the script reports per call: wall time, the
process's CPU (client, server and grpcio's threads together) and the
*reactor thread's* CPU, the part that competes with proxying.

* ``future``: what twistgw does (``stub.Check.future`` +
  ``add_done_callback`` + ``reactor.callFromThread``);
* ``aio``: ``grpc.aio`` on an asyncio loop in a second thread
  (``run_coroutine_threadsafe``, then ``callFromThread``).

Usage: ``.venv/bin/python bench/grpc_check.py [--calls 3000] [--concurrency 16]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import grpc  # noqa: E402
from envoy.service.auth.v3 import external_auth_pb2_grpc  # noqa: E402
from twisted.internet import defer, reactor  # noqa: E402

from twistgw.api.headers import Headers  # noqa: E402
from twistgw.api.types import RequestContext  # noqa: E402
from twistgw_authtypes._grpc import GrpcChannels, Target  # noqa: E402
from twistgw_authtypes.passthrough_grpc import check_request  # noqa: E402

from support.grpc_authz import ok, start_grpc_authz  # noqa: E402


def ctx() -> RequestContext:
    h = Headers()
    h.addRawHeader(b"host", b"pets.example.com")
    h.addRawHeader(b"authorization", b"Bearer abc")
    h.addRawHeader(b"user-agent", b"wrk")
    return RequestContext("GET", "/api/pets/1", b"", h, "pets.example.com", "127.0.0.1")


class Aio:
    """grpc.aio on its own loop thread."""

    def __init__(self, address: str) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.stub = asyncio.run_coroutine_threadsafe(self._stub(address), self.loop).result()

    async def _stub(self, address: str) -> Any:
        self.channel = grpc.aio.insecure_channel(address)
        return external_auth_pb2_grpc.AuthorizationStub(self.channel)

    async def _check(self, request: Any, timeout: float) -> Any:
        return await self.stub.Check(request, timeout=timeout)  # made in the loop's thread, as grpc.aio needs

    def call(self, request: Any, timeout: float) -> defer.Deferred[Any]:
        d: defer.Deferred[Any] = defer.Deferred()
        future = asyncio.run_coroutine_threadsafe(self._check(request, timeout), self.loop)

        def done(f: Any) -> None:
            reactor.callFromThread(lambda: d.errback(f.exception()) if f.exception() else d.callback(f.result()))

        future.add_done_callback(done)
        return d


async def measure(call: Any, calls: int, concurrency: int) -> tuple[float, float, float]:
    request_ctx = ctx()
    left = [calls]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await call(check_request(request_ctx, None, None, None), 2.0)

    for _ in range(50):  # warm the channel
        await call(check_request(request_ctx, None, None, None), 2.0)
    wall0, cpu0, thread0 = time.perf_counter(), time.process_time(), time.thread_time()
    await defer.gatherResults([defer.Deferred.fromCoroutine(worker()) for _ in range(concurrency)])
    wall, cpu, thread = time.perf_counter() - wall0, time.process_time() - cpu0, time.thread_time() - thread0
    return wall / calls * 1e6, cpu / calls * 1e6, thread / calls * 1e6


async def main(args: argparse.Namespace) -> None:
    server = start_grpc_authz(lambda r: ok(headers=(("x-user-id", "42"),)))
    target = Target(server.address)
    channels = GrpcChannels()
    aio = Aio(server.address)
    print(f"{args.calls} calls, {args.concurrency} at a time; µs per call")
    print(f"{'way':8} {'wall':>8} {'process CPU':>12} {'reactor CPU':>12}")
    for _ in range(args.repeat):
        for name, call in (("future", lambda r, t: channels.call(reactor, target, r, t)), ("aio", aio.call)):
            wall, cpu, thread = await measure(call, args.calls, args.concurrency)
            print(f"{name:8} {wall:8.1f} {cpu:12.1f} {thread:12.1f}")
    channels.close()
    server.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    d = defer.Deferred.fromCoroutine(main(args))
    d.addErrback(lambda f: print(f.getTraceback(), file=sys.stderr))
    d.addBoth(lambda _: reactor.stop())
    reactor.run()
