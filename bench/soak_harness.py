"""bench/soak: mixed traffic through a real twistgw process, with faults on a schedule.

Everything runs on loopback and is started (and stopped) here, by pid:

* the gateway: ``python -m twisted twistgw --config DIR ...`` (cwd = the
  repository, so the source tree's dropin is used);
* a backend and a key-set server (``bench/soak_servers.py``, one process each);
* a private OpenLDAP slapd (``tests/ldap/slapd.py``).

The load: ``--concurrency`` asyncio clients on keep-alive connections, each
sending one request at a time, cycling through the request kinds below.
Every kind knows the statuses it may get in each phase of the schedule (a
request that overlaps a phase boundary may get either phase's). A status
outside that set is a *wrong decision*; the run fails if there is any.

Schedule (fractions of ``--duration``; each fault lasts ``fault_len`` =
max(2 s, 6.5 % of the duration), then ``grace`` = max(2 s, 2 %) of recovery
during which either answer is accepted):

* 8 %   slapd killed (SIGKILL), restarted after fault_len: LDAP kinds → 503
* 25 %  key-set server stopped, restarted: no change (cached keys serve)
* 42 %  a broken configuration written (every route open + an invalid RBAC
        policy), then fixed: no change (the last good configuration serves)
* 60 %  backend killed, restarted: forwarded kinds → 503
* 77 %  slapd frozen (SIGSTOP), resumed: LDAP kinds → 503 after requestTimeout

A request without any HTTP answer (connection error, client timeout) is not
a decision: it is counted apart, with the load client's own stalls (its event
loop not running for over 0.5 s, e.g. a machine short of memory) so a busy
machine can be told from a stuck gateway.

Report: requests, statuses and errors by kind, wrong decisions, p50/p99
latency (all, and outside fault windows), time to recover after each fault,
gateway RSS and open FDs over time (sampled every second from /proc), and
whether the gateway logged any traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "ldap"))

from slapd import MANAGERS, SERVICE_DN, SERVICE_PW, Slapd  # noqa: E402

ISSUER = "https://issuer.soak.example"
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listening on {port} after {timeout}s") from None
            time.sleep(0.05)


# ---------------------------------------------------------------------------
# Keys, tokens, configuration
# ---------------------------------------------------------------------------


def make_keys() -> dict[str, Any]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from twistgw_jwt import tools

    keys = [rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2)]
    pems = [k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()) for k in keys]
    pub = keys[0].public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    doc = tools.jwks_from_public_key(pub)
    kid = doc["keys"][0]["kid"]
    mint = tools.mint_token
    return {
        "jwks": doc,
        "valid": mint(pems[0], ISSUER, "alice", {}, 7200),
        "admin": mint(pems[0], ISSUER, "root", {"role": "admin"}, 7200),
        # signed by the other key but naming key 0's kid: must never verify
        "forged": mint(pems[1], ISSUER, "mallory", {"role": "admin"}, 7200, kid=kid),
        # a kid nobody has: each one may trigger a (rate-limited) refetch
        "unknown_kid": mint(pems[1], ISSUER, "mallory", {"role": "admin"}, 7200, kid="no-such-kid"),
    }


def _upstream(name: str, port: int) -> dict[str, Any]:
    return {"apiVersion": "core.vendor.io/v1", "kind": "Upstream",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": port}]}}}


def _route(prefix: str, **options: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"matchers": [{"prefix": prefix}],
                         "routeAction": {"single": {"upstream": {"name": "backend", "namespace": "default"}}}}
    if options:
        r["options"] = options
    return r


JWT = {"providers": {"soak": {"issuer": ISSUER, "jwks": {"remote": {
    "upstreamRef": {"name": "jwks", "namespace": "default"}, "url": "http://keys.soak.example/jwks.json",
    "cacheDuration": "5s", "timeout": "1s", "refetchInterval": "2s"}}}}}
RBAC = {"policies": {"admins": {"permissions": {"methods": ["GET"], "pathPrefix": "/rbac"},
                                "principals": [{"jwtPrincipal": {"claims": {"role": "admin"}}}]}}}
EXTAUTH = {"configRef": {"name": "ldap", "namespace": "default"}}


def vs_doc(extra_routes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    routes = [_route("/open"), _route("/jwt", jwt=JWT), _route("/rbac", jwt=JWT, rbac=RBAC),
              _route("/ldap", extauth=EXTAUTH)] + (extra_routes or []) + [_route("/", jwt=JWT)]
    return {"apiVersion": "gateway.vendor.io/v1", "kind": "VirtualService",
            "metadata": {"name": "soak", "namespace": "default"},
            "spec": {"virtualHost": {"domains": ["*"], "routes": routes}}}


def broken_vs_doc() -> dict[str, Any]:
    """Every route open, and an invalid RBAC policy: applied even in part,
    it would admit unauthenticated requests."""
    doc = vs_doc()
    for r in doc["spec"]["virtualHost"]["routes"]:
        r.pop("options", None)
    doc["spec"]["virtualHost"]["options"] = {"rbac": {"policies": {"p": {"permissions": 5}}}}
    return doc


def write_atomic(path: str, text: str) -> None:
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_config(directory: str, backend: int, jwks: int, ldap_url: str) -> None:
    upstreams = [_upstream("backend", backend), _upstream("jwks", jwks)]
    ldap = {"address": ldap_url, "userDnTemplate": "uid=%s,ou=people,dc=example,dc=org",
            "allowedGroups": [MANAGERS], "connectTimeout": "1s", "requestTimeout": "1s",
            "cacheTtl": "0s", "pool": {"maxSize": 8},
            "groupLookupSettings": {"checkGroupsWithServiceAccount": True,
                                    "credentialsSecretRef": {"name": "ldap-sa", "namespace": "default"}}}
    auth = [
        {"apiVersion": "enterprise.gateway.vendor.io/v1", "kind": "AuthConfig",
         "metadata": {"name": "ldap", "namespace": "default"}, "spec": {"configs": [{"ldap": ldap}]}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ldap-sa", "namespace": "default"},
         "type": "extauth.vendor.io/accountcredentials",
         "stringData": {"username": SERVICE_DN, "password": SERVICE_PW}},
    ]
    write_atomic(os.path.join(directory, "10-upstreams.yaml"), yaml.safe_dump_all(upstreams))
    write_atomic(os.path.join(directory, "20-auth.yaml"), yaml.safe_dump_all(auth))
    write_atomic(os.path.join(directory, "30-vs.yaml"), yaml.safe_dump(vs_doc()))


# ---------------------------------------------------------------------------
# Request kinds and what each may get
# ---------------------------------------------------------------------------


def basic(user: str, pw: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()


@dataclass
class Kind:
    name: str
    path: str
    auth: str | None
    normal: frozenset[int]
    forwarded: bool  # reaches the backend when admitted
    ldap: bool = False


def kinds(tokens: dict[str, Any]) -> list[Kind]:
    b = lambda t: f"Bearer {tokens[t]}"  # noqa: E731
    return [
        Kind("open", "/open/x", None, frozenset({200}), True),
        Kind("jwt-valid", "/jwt/x", b("valid"), frozenset({200}), True),
        Kind("jwt-missing", "/jwt/x", None, frozenset({401}), False),
        Kind("jwt-forged", "/jwt/x", b("forged"), frozenset({401}), False),
        Kind("jwt-unknown-kid", "/jwt/x", b("unknown_kid"), frozenset({401}), False),
        Kind("rbac-allow", "/rbac/x", b("admin"), frozenset({200}), True),
        Kind("rbac-deny", "/rbac/x", b("valid"), frozenset({403}), False),
        Kind("ldap-allow", "/ldap/x", basic("alice", "alice-pw"), frozenset({200}), True, True),
        Kind("ldap-deny", "/ldap/x", basic("carol", "carol-pw"), frozenset({403}), False, True),
        Kind("ldap-badpw", "/ldap/x", basic("alice", "wrong-pw"), frozenset({401}), False, True),
    ]


@dataclass
class Fault:
    name: str
    start: float       # seconds from the start of the load
    end: float         # fault removed
    grace: float       # recovery window after ``end``
    affects: str       # "ldap", "backend" or "none"
    #: measured: injection begun / in force; restoration begun / done
    began_at: float | None = None
    started_at: float | None = None
    restore_at: float | None = None
    ended_at: float | None = None

    def during(self, kind: Kind) -> frozenset[int]:
        """Statuses ``kind`` may get while the fault is in force."""
        if self.affects == "ldap" and kind.ldap:
            return frozenset({503})
        if self.affects == "backend" and kind.forwarded:
            return frozenset({503})
        return kind.normal


def schedule(duration: float) -> list[Fault]:
    length = max(2.0, 0.065 * duration)
    grace = max(2.0, 0.02 * duration)
    plan = [("slapd-kill", 0.08, "ldap"), ("jwks-stop", 0.25, "none"), ("config-broken", 0.42, "none"),
            ("backend-kill", 0.60, "backend"), ("slapd-freeze", 0.77, "ldap")]
    return [Fault(name, at * duration, at * duration + length, grace, affects) for name, at, affects in plan]


def allowed(kind: Kind, start: float, end: float, faults: list[Fault]) -> frozenset[int]:
    """Statuses allowed for a request that ran from ``start`` to ``end``
    (seconds from the load's start), using the real fault times."""
    ok: set[int] = set()
    in_strict_fault = False
    for f in faults:
        if f.began_at is None:
            continue
        f_end = f.ended_at if f.ended_at is not None else float("inf")
        # Any overlap with [injection begun, restored + grace] allows the fault's answers.
        if start <= f_end + f.grace and end >= f.began_at:
            ok |= f.during(kind)
            # Wholly inside [in force, restoration begun]: only the fault's answers.
            strict_end = f.restore_at if f.restore_at is not None else float("inf")
            if (f.started_at is not None and start >= f.started_at and end <= strict_end
                    and f.during(kind) != kind.normal):
                in_strict_fault = True
    if not in_strict_fault:
        ok |= kind.normal
    return frozenset(ok)


# ---------------------------------------------------------------------------
# The load client (asyncio, raw HTTP/1.1, keep-alive)
# ---------------------------------------------------------------------------


@dataclass
class Record:
    kind: str
    start: float
    end: float
    status: int | None
    error: str = ""


class ClientError(Exception):
    pass


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bool, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length: int | None = None
    chunked = close = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        value = value.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value:
            chunked = True
        elif name == b"connection" and value == b"close":
            close = True
    if chunked:
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            body += await reader.readexactly(size + 2)
    elif length is not None:
        body = await reader.readexactly(length)
    else:
        body = await reader.read()
        close = True
    return status, close, body


async def worker(n: int, port: int, kinds_: list[Kind], t0: float, stop_at: float, records: list[Record],
                 timeout: float, budget: list[int]) -> None:
    rng = random.Random(n)
    reader = writer = None
    while time.monotonic() < stop_at and budget[0] > 0:
        budget[0] -= 1
        kind = kinds_[rng.randrange(len(kinds_))]
        auth = f"Authorization: {kind.auth}\r\n" if kind.auth else ""
        request = f"GET {kind.path} HTTP/1.1\r\nHost: soak\r\n{auth}\r\n".encode()
        start = time.monotonic()
        try:
            if writer is None:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
            writer.write(request)
            status, close, _ = await asyncio.wait_for(read_response(reader), timeout)
            records.append(Record(kind.name, start - t0, time.monotonic() - t0, status))
            if close:
                writer.close()
                reader = writer = None
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            what = type(exc).__name__
            records.append(Record(kind.name, start - t0, time.monotonic() - t0, None, what))
            if writer is not None:
                writer.close()
            reader = writer = None
            await asyncio.sleep(0.05)
    if writer is not None:
        writer.close()


# ---------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = tempfile.mkdtemp(prefix="twistgw-soak-")
        self.config = os.path.join(self.work, "config")
        os.mkdir(self.config)
        self.procs: dict[str, subprocess.Popen] = {}
        self.slapd: Slapd | None = None
        self.gw_port, self.admin_port = free_port(), free_port()
        self.backend_port, self.jwks_port = free_port(), free_port()
        self.samples: list[dict[str, Any]] = []
        self.events: list[tuple[float, str]] = []

    # -- children ------------------------------------------------------------

    def start_server(self, role: str) -> None:
        port = self.backend_port if role == "backend" else self.jwks_port
        argv = [PY, os.path.join(HERE, "soak_servers.py"), role, str(port)]
        if role == "jwks":
            argv.append(os.path.join(self.work, "jwks.json"))
        log = open(os.path.join(self.work, f"{role}.log"), "ab")
        self.procs[role] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        wait_port(port, proc=self.procs[role])

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(5)

    def start_gateway(self) -> None:
        log = open(os.path.join(self.work, "gateway.log"), "ab")
        argv = [PY, "-m", "twisted", "--log-format=text", "twistgw", "--config", self.config,
                "--listen", f"tcp:{self.gw_port}:interface=127.0.0.1",
                "--admin", f"tcp:{self.admin_port}:interface=127.0.0.1",
                "--poll-interval", "0.5", "--no-access-log"]
        self.procs["gateway"] = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL)
        log.close()
        wait_port(self.gw_port, proc=self.procs["gateway"])

    def stop_all(self) -> None:
        gw = self.procs.pop("gateway", None)
        if gw is not None and gw.poll() is None:
            gw.send_signal(signal.SIGTERM)
            try:
                gw.wait(15)
            except subprocess.TimeoutExpired:
                gw.kill()
                gw.wait(5)
        for name in list(self.procs):
            self.kill(name)
        if self.slapd is not None:
            try:
                if self.slapd.process is not None:
                    self.slapd.resume()
            except Exception:
                pass
            self.slapd.stop()

    # -- sampling --------------------------------------------------------------

    def sample(self, t: float) -> None:
        gw = self.procs.get("gateway")
        if gw is None:
            return
        pid = gw.pid
        try:
            with open(f"/proc/{pid}/status") as f:
                status = {line.split(":")[0]: line.split(":")[1].strip() for line in f if ":" in line}
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            return
        rss = int(status["VmRSS"].split()[0]) * 1024
        self.samples.append({"t": round(t, 1), "rss": rss, "fds": fds})

    def readyz(self) -> str:
        import http.client

        try:
            c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=2)
            c.request("GET", "/readyz")
            r = c.getresponse()
            text = f"{r.status} {r.read().decode().strip()}"
            c.close()
            return text
        except OSError as exc:
            return f"error {exc}"

    # -- the run -----------------------------------------------------------------

    def prepare(self) -> dict[str, Any]:
        tokens = make_keys()
        with open(os.path.join(self.work, "jwks.json"), "w") as f:
            json.dump(tokens["jwks"], f)
        self.slapd = Slapd(os.path.join(self.work, "slapd"), permissive=True).start()
        self.start_server("backend")
        self.start_server("jwks")
        write_config(self.config, self.backend_port, self.jwks_port, self.slapd.url)
        self.start_gateway()
        return tokens

    async def apply(self, fault: Fault, begin: bool, t: float) -> None:
        loop = asyncio.get_running_loop()
        name = fault.name
        if begin:
            fault.began_at = t
        else:
            fault.restore_at = time.monotonic() - self._t0
        self.events.append((round(t, 2), f"{name} {'begin' if begin else 'end'}"))
        assert self.slapd is not None
        if name == "slapd-kill":
            await loop.run_in_executor(None, self.slapd.kill if begin else self.slapd.start)
        elif name == "slapd-freeze":
            (self.slapd.pause if begin else self.slapd.resume)()
        elif name == "jwks-stop":
            if begin:
                self.kill("jwks")
            else:
                await loop.run_in_executor(None, self.start_server, "jwks")
        elif name == "backend-kill":
            if begin:
                self.kill("backend")
            else:
                await loop.run_in_executor(None, self.start_server, "backend")
        elif name == "config-broken":
            path = os.path.join(self.config, "30-vs.yaml")
            doc = broken_vs_doc() if begin else vs_doc([_route("/fixed")])
            write_atomic(path, yaml.safe_dump(doc))
        if begin:
            fault.started_at = time.monotonic() - self._t0
        else:
            fault.ended_at = time.monotonic() - self._t0

    async def run_load(self, tokens: dict[str, Any]) -> tuple[list[Record], list[Fault], float]:
        args = self.args
        kinds_ = kinds(tokens)
        faults = schedule(args.duration)
        records: list[Record] = []
        # Warm-up: every kind answers as expected before the clock starts.
        for k in kinds_:
            probe: list[Record] = []
            await worker(0, self.gw_port, [k], time.monotonic(), time.monotonic() + 0.2, probe, 5.0, [3])
            bad = [r for r in probe if r.status not in k.normal]
            if bad:
                raise RuntimeError(f"warm-up: {k.name} got {bad[0].status or bad[0].error}, expected {set(k.normal)}")
        self._t0 = t0 = time.monotonic()
        stop_at = t0 + args.duration
        budget = [args.max_requests]
        tasks = [asyncio.create_task(worker(n, self.gw_port, kinds_, t0, stop_at, records, args.timeout, budget))
                 for n in range(args.concurrency)]
        timeline = sorted([(f.start, f, True) for f in faults] + [(f.end, f, False) for f in faults],
                          key=lambda e: e[0])
        next_sample = 0.0
        readyz_seen: list[tuple[float, str]] = []
        self.stalls: list[tuple[float, float]] = []
        while time.monotonic() < stop_at:
            t = time.monotonic() - t0
            while timeline and timeline[0][0] <= t:
                _, fault, begin = timeline.pop(0)
                await self.apply(fault, begin, t)
            if t >= next_sample:
                self.sample(t)
                loop = asyncio.get_running_loop()
                readyz_seen.append((round(t, 1), await loop.run_in_executor(None, self.readyz)))
                next_sample += 1.0
            before = time.monotonic()
            await asyncio.sleep(0.05)
            if time.monotonic() - before > 0.5:  # the load client itself did not run (machine busy)
                self.stalls.append((round(before - t0, 1), round(time.monotonic() - before, 2)))
        await asyncio.gather(*tasks)
        self.sample(time.monotonic() - t0)
        self.readyz_seen = readyz_seen
        return records, faults, time.monotonic() - t0


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def analyse(records: list[Record], faults: list[Fault], kinds_: list[Kind], elapsed: float,
            soak: Soak) -> dict[str, Any]:
    by_name = {k.name: k for k in kinds_}
    wrong: list[dict[str, Any]] = []
    lost: list[dict[str, Any]] = []
    by_kind: dict[str, dict[str, int]] = {}
    errors: dict[str, int] = {}
    for r in records:
        k = by_name[r.kind]
        label = str(r.status) if r.status is not None else f"conn:{r.error}"
        by_kind.setdefault(r.kind, {}).setdefault(label, 0)
        by_kind[r.kind][label] += 1
        if r.status is None or r.status >= 500:
            errors[label] = errors.get(label, 0) + 1
        ok = allowed(k, r.start, r.end, faults)
        if r.status is None:
            lost.append({"kind": r.kind, "error": r.error, "start": round(r.start, 3), "end": round(r.end, 3)})
        elif r.status not in ok:
            wrong.append({"kind": r.kind, "status": r.status, "error": r.error, "start": round(r.start, 3),
                          "end": round(r.end, 3), "allowed": sorted(ok)})
    fail_open = [w for w in wrong if w["status"] is not None and 200 <= w["status"] < 300]

    def in_fault(r: Record) -> bool:
        return any(f.began_at is not None and r.end >= f.began_at
                   and r.start <= (f.ended_at or elapsed) + f.grace for f in faults)

    lat_all = [(r.end - r.start) * 1000 for r in records if r.status is not None]
    lat_calm = [(r.end - r.start) * 1000 for r in records if r.status is not None and not in_fault(r)]
    recovery: dict[str, float | None] = {}
    for f in faults:
        if f.ended_at is None:
            continue
        affected = [k for k in kinds_ if f.during(k) != k.normal] or kinds_
        names = {k.name for k in affected}
        firsts = [r.end - f.ended_at for r in records
                  if r.kind in names and r.start >= f.ended_at and r.status in by_name[r.kind].normal]
        recovery[f.name] = round(min(firsts), 3) if firsts else None
    rss = [s["rss"] for s in soak.samples]
    fds = [s["fds"] for s in soak.samples]
    log_text = open(os.path.join(soak.work, "gateway.log"), errors="replace").read()
    rejected_seen = any("last change rejected" in text for _, text in soak.readyz_seen)
    return {
        "duration_s": round(elapsed, 1),
        "concurrency": soak.args.concurrency,
        "requests": len(records),
        "rps": round(len(records) / elapsed, 1),
        "wrong_decisions": len(wrong),
        "fail_open": len(fail_open),
        "wrong_examples": wrong[:10],
        "lost": len(lost),
        "lost_examples": lost[:5],
        "client_stalls": soak.stalls,
        "errors": dict(sorted(errors.items())),
        "by_kind": by_kind,
        "latency_ms": {"p50": round(percentile(lat_all, 50), 2), "p99": round(percentile(lat_all, 99), 2),
                       "p50_outside_faults": round(percentile(lat_calm, 50), 2),
                       "p99_outside_faults": round(percentile(lat_calm, 99), 2)},
        "recovery_s": recovery,
        "faults": [{"name": f.name, "start": round(f.began_at or 0, 1), "end": round(f.ended_at or 0, 1)}
                   for f in faults],
        "rss_mb": {"first": round(rss[0] / 2**20, 1) if rss else None,
                   "peak": round(max(rss) / 2**20, 1) if rss else None,
                   "last": round(rss[-1] / 2**20, 1) if rss else None},
        "fds": {"first": fds[0] if fds else None, "peak": max(fds) if fds else None,
                "last": fds[-1] if fds else None},
        "samples": soak.samples,
        "config_rejection_seen_on_readyz": rejected_seen,
        "final_readyz": soak.readyz_seen[-1][1] if soak.readyz_seen else None,
        "gateway_tracebacks": log_text.count("Traceback"),
        "events": soak.events,
        "work_dir": soak.work,
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        f"twistgw soak: {report['duration_s']} s, concurrency {report['concurrency']}, "
        f"{report['requests']} requests ({report['rps']}/s)",
        f"wrong decisions: {report['wrong_decisions']} (of which 2xx where a denial was due: {report['fail_open']})",
        f"requests without an HTTP answer (connection error or client timeout): {report['lost']};"
        f" load-client stalls over 0.5 s (t, seconds): {report['client_stalls']}",
        f"latency ms: p50 {report['latency_ms']['p50']}, p99 {report['latency_ms']['p99']}; outside fault"
        f" windows p50 {report['latency_ms']['p50_outside_faults']}, p99 {report['latency_ms']['p99_outside_faults']}",
        f"gateway RSS MB: first {report['rss_mb']['first']}, peak {report['rss_mb']['peak']},"
        f" last {report['rss_mb']['last']}; open FDs: first {report['fds']['first']},"
        f" peak {report['fds']['peak']}, last {report['fds']['last']}",
        f"errors (5xx and connection errors): {report['errors']}",
        f"recovery after each fault (s until the first expected answer): {report['recovery_s']}",
        f"faults (s from start): {report['faults']}",
        f"config rejection reported on /readyz: {report['config_rejection_seen_on_readyz']};"
        f" final /readyz: {report['final_readyz']!r}; tracebacks in gateway log: {report['gateway_tracebacks']}",
        "by kind:",
    ]
    for kind, counts in report["by_kind"].items():
        lines.append(f"  {kind:16} " + ", ".join(f"{s}: {n}" for s, n in sorted(counts.items())))
    if report["lost_examples"]:
        lines.append("requests without an answer (first 5):")
        lines += [f"  {w}" for w in report["lost_examples"]]
    if report["wrong_examples"]:
        lines.append("wrong decisions (first 10):")
        lines += [f"  {w}" for w in report["wrong_examples"]]
    step = max(1, len(report["samples"]) // 12)
    lines.append("RSS MB / FDs over time: " + ", ".join(
        f"{s['t']:.0f}s {s['rss'] / 2**20:.1f}/{s['fds']}" for s in report["samples"][::step]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=180.0, help="seconds of load (default 180)")
    ap.add_argument("--concurrency", type=int, default=16, help="concurrent keep-alive clients (default 16)")
    ap.add_argument("--timeout", type=float, default=5.0, help="per-request client timeout, seconds")
    ap.add_argument("--max-requests", type=int, default=5_000_000, help="stop after this many requests")
    ap.add_argument("--json", help="also write the full report (with samples) to this file")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, config)")
    args = ap.parse_args(argv)
    if args.duration < 20:
        ap.error("--duration must be at least 20 s (the fault schedule needs room)")
    soak = Soak(args)

    def terminate(signum: int, frame: Any) -> None:
        raise SystemExit(f"bench/soak: stopped by signal {signum}")

    signal.signal(signal.SIGTERM, terminate)  # so the children are stopped too
    try:
        tokens = soak.prepare()
        records, faults, elapsed = asyncio.run(soak.run_load(tokens))
    finally:
        soak.stop_all()
    report = analyse(records, faults, kinds(tokens), elapsed, soak)
    print(render(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if not args.keep:
        import shutil

        shutil.rmtree(soak.work, ignore_errors=True)
    else:
        print(f"work directory kept: {soak.work}")
    return 1 if report["wrong_decisions"] or report["gateway_tracebacks"] else 0


if __name__ == "__main__":
    sys.exit(main())
