"""WebSocket and HTTP traffic mixed through one real twistgw process, for minutes: is memory flat?

    python bench/soak_ws.py [--duration 300] [--warmup 30] [--json FILE]

Everything runs on loopback and is started (and stopped) here, by pid:

* a backend (this file with ``--serve``): a ``websockets`` server that
  echoes every WebSocket message and answers plain HTTP requests with a
  small body;
* the gateway, as shipped (access log on, written to a file; metrics on):
  ``python -m twisted twistgw --config DIR``, routes ``/jwt`` (JWT
  required), ``/ws`` and ``/`` to the backend;
* HTTP load: ``wrk -t1 -c16`` on ``/``, the whole time;
* WebSocket load, in this process (the ``websockets`` client):
  - 16 long-lived connections, each sending messages of 1 byte to 16 KiB and
    checking every echo byte for byte;
  - 4 churning clients: connect, exchange 5 messages, close properly, again;
  - 2 vanishing clients: connect, send a message, then drop the TCP
    connection without a close frame (the gateway must free both sides);
  - 2 denied clients: upgrade on ``/jwt`` without a token, which must be
    refused with 401 and never reach the backend.

Every ``--sample`` seconds the gateway's RSS and open file descriptors are
read from ``/proc``. The verdict (issue 13): RSS at the end within ±10% of
RSS after the warm-up, no wrong echo, every denied upgrade a 401, no
traceback in the gateway's log. Exit status 0 only when all hold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode} before listening on {port}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"{what} did not listen on {port} within {timeout:g} s")


# -- the backend ---------------------------------------------------------------

def serve(port: int) -> None:
    from websockets.asyncio.server import serve as ws_serve
    from websockets.datastructures import Headers
    from websockets.exceptions import ConnectionClosed
    from websockets.http11 import Response

    body = b"hello from the backend\n"

    def plain_http(connection: Any, request: Any) -> Any:
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return Response(200, "OK", Headers([("Content-Type", "text/plain"),
                                                ("Content-Length", str(len(body)))]), body)
        return None

    async def echo(ws: Any) -> None:
        try:
            async for message in ws:
                await ws.send(message)
        except ConnectionClosed:
            pass  # a vanishing client (no close frame): expected here

    async def main() -> None:
        async with ws_serve(echo, "127.0.0.1", port, process_request=plain_http, compression=None,
                            max_size=1 << 20, ping_interval=None):
            await asyncio.Future()

    asyncio.run(main())


# -- the gateway -----------------------------------------------------------------

def config(backend: int, public_pem: str) -> str:
    jwt = ("{jwt: {providers: {soak: {issuer: https://issuer.soak, jwks: {local: {key: %s}}}}}}"
           % json.dumps(public_pem))
    return f"""apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: backend, namespace: default}}
spec:
  static:
    hosts: [{{addr: 127.0.0.1, port: {backend}}}]
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {{name: soak, namespace: default}}
spec:
  virtualHost:
    domains: ["*"]
    routes:
    - matchers: [{{prefix: /jwt}}]
      routeAction: {{single: {{upstream: {{name: backend, namespace: default}}}}}}
      options: {jwt}
    - matchers: [{{prefix: /}}]
      routeAction: {{single: {{upstream: {{name: backend, namespace: default}}}}}}
"""


def public_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M).group(1))


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# -- the WebSocket load ------------------------------------------------------------

class Counts:
    def __init__(self) -> None:
        self.messages = 0       # echoes checked and equal
        self.bytes = 0
        self.wrong = 0          # an echo that differed
        self.opened = 0         # WebSocket connections opened through the gateway
        self.closed = 0         # closed properly by the client
        self.vanished = 0       # dropped without a close frame
        self.denied = 0         # upgrades refused with 401
        self.denied_wrong = 0   # an upgrade on /jwt that got anything but 401
        self.errors: dict[str, int] = {}

    def error(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self.errors[name] = self.errors.get(name, 0) + 1


def payload(rng: random.Random) -> bytes | str:
    size = rng.choice((1, 20, 200, 2000, 16384))
    data = rng.randbytes(size)
    return data if rng.random() < 0.5 else data.hex()[:size]


async def exchange(ws: Any, rng: random.Random, counts: Counts) -> None:
    message = payload(rng)
    await ws.send(message)
    echo = await asyncio.wait_for(ws.recv(), 10)
    if echo != message:
        counts.wrong += 1
    else:
        counts.messages += 1
        counts.bytes += len(message)


async def talker(url: str, stop: float, counts: Counts, seed: int, messages: int | None) -> None:
    """A client that opens a connection, exchanges ``messages`` echoes (None:
    until the end of the run), closes it properly, and starts again."""
    from websockets.asyncio.client import connect

    rng = random.Random(seed)
    while time.monotonic() < stop:
        try:
            async with connect(url, compression=None, max_size=1 << 20, ping_interval=None) as ws:
                counts.opened += 1
                sent = 0
                while time.monotonic() < stop and (messages is None or sent < messages):
                    await exchange(ws, rng, counts)
                    sent += 1
            counts.closed += 1
        except Exception as exc:  # the gateway closed it, or a timeout: count, go on
            counts.error(exc)
            await asyncio.sleep(0.2)


async def vanish(url: str, stop: float, counts: Counts, seed: int) -> None:
    from websockets.asyncio.client import connect

    rng = random.Random(seed)
    while time.monotonic() < stop:
        try:
            ws = await connect(url, compression=None, max_size=1 << 20, ping_interval=None)
            counts.opened += 1
            await exchange(ws, rng, counts)
            await ws.send(payload(rng))     # in flight when the client disappears
            ws.transport.abort()            # no close frame, no FIN handshake: an RST
            counts.vanished += 1
        except Exception as exc:
            counts.error(exc)
        await asyncio.sleep(0.05)


async def denied(url: str, stop: float, counts: Counts) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    while time.monotonic() < stop:
        try:
            async with connect(url, compression=None, ping_interval=None):
                counts.denied_wrong += 1   # admitted without a token
        except InvalidStatus as exc:
            if exc.response.status_code == 401:
                counts.denied += 1
            else:
                counts.denied_wrong += 1
        except Exception as exc:
            counts.error(exc)
        await asyncio.sleep(0.05)


async def ws_load(port: int, seconds: float, counts: Counts) -> None:
    stop = time.monotonic() + seconds
    base = f"ws://127.0.0.1:{port}"
    tasks = [talker(f"{base}/ws/long", stop, counts, i, None) for i in range(16)]
    tasks += [talker(f"{base}/ws/churn", stop, counts, 100 + i, 5) for i in range(4)]
    tasks += [vanish(f"{base}/ws/vanish", stop, counts, 200 + i) for i in range(2)]
    tasks += [denied(f"{base}/jwt/ws", stop, counts) for _ in range(2)]
    await asyncio.gather(*tasks)


# -- the run -----------------------------------------------------------------------

def run(args: argparse.Namespace) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="twistgw-soak-ws-")
    procs: list[subprocess.Popen] = []
    try:
        backend_port, port, admin = free_port(), free_port(), free_port()
        backend = subprocess.Popen([sys.executable, __file__, "--serve", str(backend_port)],
                                   stdout=open(os.path.join(work, "backend.log"), "wb"), stderr=subprocess.STDOUT)
        procs.append(backend)
        wait_port(backend_port, backend, "the backend")
        os.makedirs(os.path.join(work, "config"))
        with open(os.path.join(work, "config", "gateway.yaml"), "w") as f:
            f.write(config(backend_port, public_pem()))
        log_path = os.path.join(work, "gateway.log")
        log = open(log_path, "wb")
        gateway = subprocess.Popen(
            [sys.executable, "-m", "twisted", "twistgw", "--config", os.path.join(work, "config"),
             "--listen", f"tcp:{port}:interface=127.0.0.1", "--admin", f"tcp:{admin}:interface=127.0.0.1"],
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        procs.append(gateway)
        wait_port(port, gateway, "the gateway")
        time.sleep(0.5)
        fds_before = fds(gateway.pid)
        total = args.warmup + args.duration
        wrk = None
        if shutil.which("wrk"):
            wrk = subprocess.Popen(["wrk", "-t1", "-c16", f"-d{total:g}s", "--latency",
                                    f"http://127.0.0.1:{port}/http"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            procs.append(wrk)
        counts = Counts()
        samples: list[tuple[float, int, int]] = []

        async def sampler() -> None:
            t0 = time.monotonic()
            while time.monotonic() - t0 < total:
                await asyncio.sleep(args.sample)
                samples.append((time.monotonic() - t0, rss_kib(gateway.pid), fds(gateway.pid)))

        async def main() -> None:
            await asyncio.gather(ws_load(port, total, counts), sampler())

        print(f"soaking for {args.warmup:g} s of warm-up + {args.duration:g} s: HTTP (wrk) and WebSocket"
              f" through the gateway (pid {gateway.pid}) ...", flush=True)
        asyncio.run(main())
        http = {}
        if wrk is not None:
            out, _ = wrk.communicate(timeout=60)
            m = re.search(r"(\d+) requests in", out)
            non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
            http = {"requests": int(m.group(1)) if m else 0, "non2xx": int(non2xx.group(1)) if non2xx else 0}
        time.sleep(1.0)  # let the gateway see the last closes
        end_fds = fds(gateway.pid)
        log.flush()
        with open(log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        after_warmup = [s for s in samples if s[0] >= args.warmup] or samples
        first, last = after_warmup[0], after_warmup[-1]
        rss = [s[1] for s in after_warmup]
        drift = (last[1] - first[1]) / first[1] * 100
        report = {
            "duration_s": args.duration, "warmup_s": args.warmup,
            "http": http, "ws": vars(counts),
            "rss_mib": {"start": first[1] / 1024, "peak": max(rss) / 1024, "end": last[1] / 1024,
                        "drift_percent": drift},
            "fds": {"before_load": fds_before, "start": first[2], "peak": max(s[2] for s in after_warmup),
                    "end": end_fds},
            "tracebacks": text.count("Traceback"),
            "samples": samples,
        }
        report["ok"] = (abs(drift) <= 10 and counts.wrong == 0 and counts.denied_wrong == 0
                        and counts.denied > 0 and counts.messages > 0 and report["tracebacks"] == 0
                        and http.get("non2xx", 0) == 0)
        return report
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")


def render(r: dict[str, Any]) -> str:
    ws, rss, fd = r["ws"], r["rss_mib"], r["fds"]
    lines = [
        f"| soak ({r['warmup_s']:g} s warm-up + {r['duration_s']:g} s) | |",
        "|---|---:|",
        f"| HTTP requests (wrk -c16), non-2xx | {r['http'].get('requests', 0):,}, {r['http'].get('non2xx', 0)} |",
        f"| WebSocket echoes checked, bytes | {ws['messages']:,}, {ws['bytes']:,} |",
        f"| wrong echoes | {ws['wrong']} |",
        f"| WebSocket connections opened / closed properly / vanished | {ws['opened']:,} / {ws['closed']:,} /"
        f" {ws['vanished']:,} |",
        f"| denied upgrades (401) / anything else | {ws['denied']:,} / {ws['denied_wrong']} |",
        f"| client-side errors | {ws['errors'] or 'none'} |",
        f"| gateway RSS after warm-up / peak / end (MiB) | {rss['start']:.1f} / {rss['peak']:.1f} /"
        f" {rss['end']:.1f} ({rss['drift_percent']:+.1f}%) |",
        f"| gateway open fds before the load / after warm-up / peak / end | {fd['before_load']} / {fd['start']} /"
        f" {fd['peak']} / {fd['end']} |",
        f"| tracebacks in the gateway log | {r['tracebacks']} |",
        f"| verdict (RSS ±10%, no wrong answer) | {'met' if r['ok'] else 'NOT met'} |",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    p.add_argument("--duration", type=float, default=300.0, help="seconds measured after the warm-up (default 300)")
    p.add_argument("--warmup", type=float, default=30.0, help="seconds before the RSS baseline (default 30)")
    p.add_argument("--sample", type=float, default=5.0, help="seconds between RSS samples (default 5)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--keep", action="store_true", help="keep the working directory (config, gateway log)")
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    report = run(args)
    print(render(report), end="")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
