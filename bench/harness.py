"""bench/run: twistgw side by side with nginx, HAProxy and a bare Twisted proxy, in one run.

Everything runs on loopback and is started (and stopped) here:

* nginx as a fast backend returning a small fixed body;
* references: wrk straight at the backend, nginx as a reverse proxy
  (1 worker, upstream keepalive, access log to a file), HAProxy (1 thread,
  ``http-reuse always``), HAProxy with ``jwt_verify`` RS256 and ``iss``/``sub``/
  ``exp`` checks on every request, and ``bench/bare_proxy.py``;
* twistgw scenarios, as shipped (access log on, written to a file; metrics on):
  plain route (and the same with ``--no-access-log``, to price the log), JWT
  (one token, a fresh token per request), JWT + RBAC, LDAP against a private
  slapd with the decision cache on and off.

Load: ``wrk -t1 -c32`` pinned with taskset. The load generator, the backend and
slapd share core 0; the proxy under test has core 1 to itself. Every scenario
gets a warm-up, then is measured ``--rounds`` times (default 2), the rounds in
alternating order. Per scenario: requests/s, p50/p99, CPU microseconds per
request of the proxy process and any it started (utime+stime deltas from /proc), peak
RSS (VmHWM), and ratios to nginx and to the bare Twisted proxy.

With ``--baseline REV`` every twistgw scenario chosen also runs as
``NAME@REV``: the same configuration, pinning and load against the gateway of
commit REV, installed in a virtualenv of its own (bench/baseline.py), measured
in the same rounds, with the ratios between the two after the table.

A twistgw scenario whose plugin is missing, rejects the options or fails the
functional check before the load (e.g. a JWT scenario that answers 200
without a token) is reported as "skipped: <reason>", never measured.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import ctypes
import datetime
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import pathlib
from dataclasses import dataclass, field
from typing import Any

import grpc_bench
import h2_bench
import oidc_bench
from baseline import Baseline, BaselineError, prepare

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
PY = sys.executable
LOAD_CPU = "0"  # wrk, the backend, slapd
PROXY_CPU = "1"  # the proxy under test
CLK_TCK = os.sysconf("SC_CLK_TCK")
CONNECTIONS = 32
QUIET = 0.15  # a core is "idle" below this busy fraction (our idle servers included)
BUSY = 0.10  # a measurement is retried when other processes took more of core 1 than this
ISSUER = "https://issuer.bench.example"
DOCS = os.path.join(ROOT, "docs", "performance.md")

# Scenario names, in the order of the table.
REFERENCES = ["backend-direct", "nginx-proxy", "nginx-limit-req", "nginx-proxy-tls", "haproxy-proxy", "haproxy-jwt",
              "bare-twisted", "probe-floor", "nginx-gzip", *h2_bench.REFERENCES, *grpc_bench.REFERENCES]
GATEWAY = ["plain", "plain-nolog", "plain-textlog", "plain-w2", "plain-w2-free", "jwt", "jwt-fresh", "jwt-rbac", "ldap-cache",
           "ldap-nocache", "ldap-search-cache", "ldap-search-nocache", "ratelimit-local", "ratelimit-redis",
           "ratelimit-cluster", "traffic", "upstream-tls", "gzip-json", "gateway-json", "gateway-plain", "request-id",
           "gateway", "tracing-unsampled", "tracing-sampled",
           "apikey", "basic-cache", "opa-path", "passthrough",
           *oidc_bench.SCENARIOS, *h2_bench.SCENARIOS, *grpc_bench.GATEWAY]
ALL = REFERENCES + GATEWAY
#: Run only when named in --scenarios (the --workers measurement).
OPTIONAL = ["plain-textlog", "plain-w2", "plain-w2-free"]
DEFAULT = [s for s in ALL if s not in OPTIONAL]
DESCRIPTIONS = {
    "backend-direct": "wrk straight at the nginx backend (ceiling of core 0)",
    "nginx-proxy": "nginx reverse proxy, 1 worker, upstream keepalive, access log to a file",
    "nginx-limit-req": "nginx-proxy + limit_req by client address (a rate no request reaches: the cost of counting)",
    "nginx-proxy-tls": "nginx proxy_pass https:// to the TLS backend, proxy_ssl_verify on (CA, name), upstream"
                       " keepalive and session reuse",
    "haproxy-proxy": "HAProxy, 1 thread, http-reuse always",
    "haproxy-jwt": "HAProxy + jwt_verify RS256, iss/sub/exp checks on every request",
    "bare-twisted": "bench/bare_proxy.py: Agent + persistent pool",
    "probe-floor": "bench/probe_proxy.py: Twisted protocols + httptools, no policy (the engine's floor)",
    "nginx-gzip": "nginx proxy, gzip on; gzip_comp_level 1 (application/json), a 10 KB JSON body from the backend,"
                  " Accept-Encoding: gzip",
    "plain": "twistgw, one route, no auth (as shipped: access log and metrics on)",
    "gzip-json": "twistgw, a Gateway with gzip (compressionLevel: SPEED, zlib level 1), the same 10 KB JSON body,"
                 " Accept-Encoding: gzip (beside nginx-gzip)",
    "gateway-json": "gzip-json without gzip: the same 10 KB body relayed as it is (what the compression adds is"
                    " gzip-json - gateway-json)",
    "gateway-plain": "twistgw, plain served on a Gateway's listener, generateRequestId: false",
    "request-id": "gateway-plain with generateRequestId on (Envoy's default): a UUID4 x-request-id per request"
                  " (goal: gateway-plain + 1 us)",
    "plain-nolog": "twistgw, one route, no auth, --no-access-log",
    "plain-textlog": "plain with twist --log-format=text (a 160-byte text access line, not the 570-byte JSON record)",
    "plain-w2": "plain with --workers 2, both workers on the proxy's core (the cost of the split)",
    "plain-w2-free": "plain with --workers 2 on both cores, shared with wrk and the backend",
    "jwt": "twistgw, JWT RS256, the same token every request",
    "jwt-fresh": "twistgw, JWT RS256, a fresh token every request",
    "jwt-rbac": "twistgw, JWT RS256 + RBAC, the same token",
    "ldap-cache": "twistgw, LDAP (slapd), decision cache on",
    "ldap-nocache": "twistgw, LDAP (slapd), decision cache off",
    "ldap-search-cache": "twistgw, LDAP userSearch + nested groupSearch (slapd), decision cache on",
    "ldap-search-nocache": "twistgw, LDAP userSearch + nested groupSearch (slapd), decision cache off",
    "ratelimit-local": "twistgw, localRatelimit token bucket (never empty: the cost of counting)",
    "ratelimit-redis": "twistgw, ratelimitBasic by address counted in Redis (redis-server on core 0; never over)",
    "ratelimit-cluster": "twistgw, ratelimit-redis on a Redis Cluster (3 primaries on core 0, clustered: true; never"
                         " over; goal: plain + 25 us, >= 15,000 req/s)",
    "apikey": "twistgw, apiKeyAuth: one API key among 100 in Secrets",
    "basic-cache": "twistgw, basicAuth (apr1 hash), the verified-credentials memo warm",
    "opa-path": "twistgw, opaAuth: Gloo's allow-GET-by-path policy on regopy",
    "passthrough": "twistgw, passThroughAuth.http to the nginx backend (200), one pooled POST per request",
    "traffic": "twistgw, one route with headerManipulation (request and response), cors and retries, a CORS"
               " origin on every request (goal: plain + 5 us)",
    "gateway": "twistgw, plain through a Gloo Gateway's listener (no tracing): the tracing rows' baseline",
    "tracing-unsampled": "gateway with tracing configured, randomSamplePercentage 0 (goal: gateway + 2 us)",
    "tracing-sampled": "gateway with every request traced, spans over OTLP/gRPC to examples/tracing/receiver.py"
                       " --quiet on core 0 (goal: gateway + 25 us, the export thread included)",
    "upstream-tls": "twistgw to the TLS backend (nginx HTTPS on core 0), sslConfig with a root CA and SNI: the"
                    " peer verified by name, pooled connections (goal: CPU <= 3x nginx-proxy-tls)",
    **oidc_bench.DESCRIPTIONS,
    **h2_bench.DESCRIPTIONS,
    **grpc_bench.DESCRIPTIONS,
}

#: The name on the TLS backend's certificate (its subjectAltName), sent as SNI.
TLS_BACKEND_NAME = "backend.bench.test"

#: a rate no benchmark reaches: the rate-limit scenarios price the counting, never refuse
RATELIMIT_OPTIONS = {
    "ratelimit-local": """    options:
      localRatelimit: {maxTokens: 1000000000, tokensPerFill: 1000000000, fillInterval: 1s}
""",
    "ratelimit-redis": """    options:
      ratelimitBasic:
        anonymousLimits: {requestsPerUnit: 4000000000, unit: SECOND}
""",
}
RATELIMIT_OPTIONS["ratelimit-cluster"] = RATELIMIT_OPTIONS["ratelimit-redis"]


def ratelimit_settings(redis_port: int, clustered: bool = False) -> str:
    return f"""---
apiVersion: gateway.vendor.io/v1
kind: Settings
metadata: {{name: default, namespace: default}}
spec:
  ratelimitServer:
    requestTimeout: 100ms
    redis: {{address: "127.0.0.1:{redis_port}", clustered: {str(clustered).lower()}}}
"""


def start_redis(procs: "Processes", prefix: str) -> int:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(binary):
        raise Skip("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    directory = os.path.join(prefix, "redis")
    os.makedirs(directory, exist_ok=True)
    proc = procs.start("redis", [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", directory], LOAD_CPU)
    wait_port(port, proc, procs, "redis")
    return port


def start_redis_cluster(procs: "Processes", prefix: str, primaries: int = 3) -> list[int]:
    """A Redis Cluster of ``primaries`` redis-server processes (no replicas) on the load core,
    joined with redis-cli --cluster create; their ports."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    if not os.path.exists(binary) or not os.path.exists(cli):
        raise Skip("redis-server and redis-cli are needed (apt-get install redis-server)")
    ports = []
    for i in range(primaries):
        port, bus = free_port(), free_port()
        directory = os.path.join(prefix, f"redis-cluster-{i}")
        os.makedirs(directory, exist_ok=True)
        proc = procs.start(f"redis-cluster-{i}", [
            binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", directory,
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", str(bus)], LOAD_CPU)
        wait_port(port, proc, procs, f"redis-cluster-{i}")
        ports.append(port)
    subprocess.run([cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports], "--cluster-yes"],
                   capture_output=True, text=True, timeout=60, check=True)
    deadline = time.monotonic() + 30
    while not all("cluster_state:ok" in subprocess.run([cli, "-p", str(p), "CLUSTER", "INFO"], capture_output=True,
                                                       text=True, timeout=10).stdout for p in ports):
        if time.monotonic() > deadline:
            raise Skip("the Redis Cluster did not become ok within 30 s")
        time.sleep(0.1)
    return ports


def redis_script_calls(port: int) -> int:
    """EVAL + EVALSHA calls so far (INFO commandstats): one per batch of counters."""
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"], capture_output=True,
                         text=True, timeout=10).stdout
    return sum(int(m.group(1)) for m in re.finditer(r"cmdstat_eval(?:sha)?:calls=(\d+)", out))


#: The traffic scenario's virtual-host options: issue 24's route with
#: headerManipulation, cors and retries (no try fails: what retries cost
#: until one does).
TRAFFIC_OPTIONS = """    options:
      retries: {retryOn: "5xx,connect-failure,reset", numRetries: 3, perTryTimeout: 5s}
      headerManipulation:
        requestHeadersToAdd: [{header: {key: x-gateway, value: twistgw}, append: false}]
        requestHeadersToRemove: [x-debug]
        responseHeadersToAdd: [{header: {key: x-served-by, value: twistgw}}]
        responseHeadersToRemove: [server]
      cors:
        allowOrigin: [https://app.example.com]
        allowMethods: [GET, POST]
        allowHeaders: [authorization]
        exposeHeaders: [x-request-id]
        allowCredentials: true
"""


class Skip(Exception):
    """The scenario cannot run here; the message says why."""


# ---------------------------------------------------------------------------
# Processes: every one started here is stopped here, by its pid.
# ---------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the harness dies (even by SIGKILL)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Processes:
    def __init__(self, logdir: str) -> None:
        self.logdir = logdir
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], cpu: str, cwd: str = ROOT,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(os.path.join(self.logdir, f"{name}.log"), "wb")
        proc = subprocess.Popen(["taskset", "-c", cpu, *argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        log.close()
        self.procs.append((name, proc))
        return proc

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            with open(os.path.join(self.logdir, f"{name}.log"), "rb") as f:
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, proc: subprocess.Popen, timeout: float = 5.0) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs = [(n, p) for n, p in self.procs if p is not proc]

    def stop_all(self) -> None:
        procs = list(self.procs)
        for _, proc in procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 5
        for _, proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs = []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, procs: Processes, name: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Skip(f"{name} exited with status {proc.returncode}: " + _first_error(procs.log_tail(name)))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise Skip(f"{name} did not listen on port {port} within {timeout:.0f} s: " + _first_error(procs.log_tail(name)))


def _first_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:  # the gateway's own config report, if any
        if ln.startswith("twistgw:"):
            i = lines.index(ln)
            return " ".join(lines[i:i + 3])[:300]
    return (lines[-1] if lines else "no output")[:300]


# ---------------------------------------------------------------------------
# /proc readings
# ---------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and of every process under it (``--workers``)."""
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stats[int(entry)] = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
    tree, total = {pid}, 0.0
    for p in sorted(stats):  # a child's pid is normally larger than its parent's
        if p in tree or int(stats[p][1]) in tree:
            tree.add(p)
            total += (int(stats[p][11]) + int(stats[p][12])) / CLK_TCK
    return total


def cpu_busy() -> dict[str, float]:
    """Busy seconds of each core since boot (everything but idle and iowait)."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                name, *vals = line.split()
                v = [int(x) for x in vals[:8]]
                out[name[3:]] = (sum(v) - v[3] - v[4]) / CLK_TCK
    return out


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1])
    return out.get("VmRSS", 0), out.get("VmHWM", 0)


# ---------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------

BACKEND_BODY = "hello from the backend\n"
#: the gzip rows' body: 10 KB of JSON (a file the JSON backend serves)
JSON_BODY = json.dumps([{"id": i, "name": f"pet number {i}", "status": "available", "tags": ["dog", "cat"]}
                        for i in range(125)])[:10240]


def nginx_conf(prefix: str, name: str, server_block: str, extra_http: str = "") -> str:
    tmp = os.path.join(prefix, f"{name}-tmp")
    os.makedirs(tmp, exist_ok=True)
    return f"""
worker_processes 1;
master_process off;
daemon off;
pid {prefix}/{name}.pid;
error_log {prefix}/{name}.error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    {extra_http}
    {server_block}
}}
"""


def start_nginx(procs: Processes, prefix: str, name: str, conf: str, port: int, cpu: str) -> subprocess.Popen:
    path = os.path.join(prefix, f"{name}.conf")
    with open(path, "w") as f:
        f.write(conf)
    proc = procs.start(name, ["nginx", "-p", prefix, "-c", path, "-e", f"{prefix}/{name}.error.log"], cpu)
    wait_port(port, proc, procs, name)
    return proc


def haproxy_conf(prefix: str, name: str, port: int, backend_port: int, frontend_rules: str = "") -> str:
    """One process, one thread, upstream connections reused (``http-reuse always``),
    no logging (HAProxy logs only to syslog)."""
    return f"""
global
    nbthread 1
    maxconn 4096
    pidfile {prefix}/{name}.pid
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-keep-alive 75s
    option http-keep-alive
frontend fe
    bind 127.0.0.1:{port}
{frontend_rules}    default_backend be
backend be
    http-reuse always
    server backend 127.0.0.1:{backend_port}
"""


def haproxy_jwt_rules(public_key_path: str) -> str:
    """RS256 verified on every request (HAProxy has no token cache), then the
    issuer, expiry and subject checked: what the jwt-rbac scenario asks of twistgw."""
    return f"""    http-request deny deny_status 401 unless {{ req.hdr(authorization) -m beg "Bearer " }}
    http-request set-var(txn.bearer) http_auth_bearer
    http-request set-var(txn.alg) var(txn.bearer),jwt_header_query('$.alg')
    http-request deny deny_status 401 unless {{ var(txn.alg) -m str RS256 }}
    http-request deny deny_status 401 unless {{ var(txn.bearer),jwt_verify(txn.alg,"{public_key_path}") -m int 1 }}
    http-request deny deny_status 401 unless {{ var(txn.bearer),jwt_payload_query('$.iss') -m str "{ISSUER}" }}
    http-request set-var(txn.now) date()
    http-request set-var(txn.exp) var(txn.bearer),jwt_payload_query('$.exp','int')
    http-request deny deny_status 401 if {{ var(txn.exp),sub(txn.now) -m int lt 0 }}
    http-request deny deny_status 403 unless {{ var(txn.bearer),jwt_payload_query('$.sub') -m str alice }}
"""


def start_haproxy(procs: Processes, prefix: str, name: str, conf: str, port: int, cpu: str) -> subprocess.Popen:
    path = os.path.join(prefix, f"{name}.cfg")
    with open(path, "w") as f:
        f.write(conf)
    check_conf = subprocess.run(["haproxy", "-c", "-q", "-f", path], capture_output=True, text=True)
    if check_conf.returncode != 0:
        raise Skip(f"haproxy rejected its configuration: {_first_error(check_conf.stdout + check_conf.stderr)}")
    proc = procs.start(name, ["haproxy", "-db", "-f", path], cpu)
    wait_port(port, proc, procs, name)
    return proc


SLAPD_CONF = """
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
modulepath /usr/lib/ldap
moduleload back_mdb
moduleload memberof
pidfile {dir}/slapd.pid
argsfile {dir}/slapd.args
database mdb
maxsize 67108864
suffix "dc=example,dc=org"
rootdn "cn=admin,dc=example,dc=org"
rootpw adminpw
directory {dir}/data
overlay memberof
"""

LDIF = """dn: dc=example,dc=org
objectClass: dcObject
objectClass: organization
o: Example
dc: example

dn: ou=people,dc=example,dc=org
objectClass: organizationalUnit
ou: people

dn: ou=groups,dc=example,dc=org
objectClass: organizationalUnit
ou: groups

dn: uid=alice,ou=people,dc=example,dc=org
objectClass: inetOrgPerson
uid: alice
cn: Alice
sn: Example
userPassword: alicepw

dn: uid=bob,ou=people,dc=example,dc=org
objectClass: inetOrgPerson
uid: bob
cn: Bob
sn: Example
userPassword: bobpw

dn: ou=contractors,dc=example,dc=org
objectClass: organizationalUnit
ou: contractors

dn: uid=carol,ou=contractors,dc=example,dc=org
objectClass: inetOrgPerson
uid: carol
cn: Carol
sn: Example
userPassword: carolpw

dn: cn=managers,ou=groups,dc=example,dc=org
objectClass: groupOfNames
cn: managers
member: uid=alice,ou=people,dc=example,dc=org

dn: cn=staff,ou=groups,dc=example,dc=org
objectClass: groupOfNames
cn: staff
member: cn=managers,ou=groups,dc=example,dc=org
"""


def start_slapd(procs: Processes, prefix: str) -> int:
    if not shutil.which("slapd") and not os.path.exists("/usr/sbin/slapd"):
        raise Skip("slapd is not installed (apt-get install slapd ldap-utils)")
    d = os.path.join(prefix, "slapd")
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    with open(os.path.join(d, "slapd.conf"), "w") as f:
        f.write(SLAPD_CONF.format(dir=d))
    port = free_port()
    slapd = shutil.which("slapd") or "/usr/sbin/slapd"
    proc = procs.start("slapd", [slapd, "-f", os.path.join(d, "slapd.conf"), "-h", f"ldap://127.0.0.1:{port}/",
                                 "-d", "0"], LOAD_CPU)
    wait_port(port, proc, procs, "slapd")
    ldif = os.path.join(d, "entries.ldif")
    with open(ldif, "w") as f:
        f.write(LDIF)
    r = subprocess.run(["ldapadd", "-x", "-H", f"ldap://127.0.0.1:{port}/", "-D", "cn=admin,dc=example,dc=org",
                        "-w", "adminpw", "-f", ldif], capture_output=True, text=True)
    if r.returncode != 0:
        raise Skip(f"ldapadd failed: {r.stderr.strip()[:200]}")
    return port


# ---------------------------------------------------------------------------
# JWT material
# ---------------------------------------------------------------------------


def _mint_chunk(args: tuple[bytes, int, int]) -> list[str]:
    import jwt
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    pem, start, count = args
    key = load_pem_private_key(pem, None)
    now = int(time.time())
    return [jwt.encode({"iss": ISSUER, "sub": "alice", "jti": f"bench-{start + i}", "iat": now,
                        "exp": now + 30 * 86400}, key, algorithm="RS256", headers={"kid": "bench"})
            for i in range(count)]


@dataclass
class JwtMaterial:
    private_pem: bytes
    public_pem: str
    alice: str
    bob: str
    forged: str
    tokens_file: str = ""
    tokens: int = 0


def jwt_material(cache_dir: str, fresh_needed: int) -> JwtMaterial:
    """A key pair and tokens, kept in bench/results/.jwt so later runs skip
    the minting (RS256 signing costs ~0.7 ms a token)."""
    import jwt
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    os.makedirs(cache_dir, exist_ok=True)
    key_path = os.path.join(cache_dir, "key.pem")
    if not os.path.exists(key_path):
        k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        with open(key_path + ".new", "wb") as f:
            f.write(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
        os.replace(key_path + ".new", key_path)
        for old in os.listdir(cache_dir):
            if old.startswith("tokens"):
                os.unlink(os.path.join(cache_dir, old))
    with open(key_path, "rb") as f:
        pem = f.read()
    key = serialization.load_pem_private_key(pem, None)
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    exp = int(time.time()) + 86400
    alice = jwt.encode({"iss": ISSUER, "sub": "alice", "exp": exp}, key, algorithm="RS256", headers={"kid": "bench"})
    bob = jwt.encode({"iss": ISSUER, "sub": "bob", "exp": exp}, key, algorithm="RS256", headers={"kid": "bench"})
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode({"iss": ISSUER, "sub": "alice", "exp": exp}, other, algorithm="RS256",
                        headers={"kid": "bench"})
    mat = JwtMaterial(pem, public_pem, alice, bob, forged)
    if fresh_needed <= 0:
        return mat

    tokens_file = os.path.join(cache_dir, "tokens.txt")
    have: list[str] = []
    if os.path.exists(tokens_file) and time.time() - os.path.getmtime(tokens_file) < 20 * 86400:
        with open(tokens_file) as f:
            have = [ln for ln in f.read().splitlines() if ln]
    if len(have) < fresh_needed:
        need = fresh_needed - len(have)
        print(f"minting {need} RS256 tokens for jwt-fresh (cached in {cache_dir}; once) ...", flush=True)
        t0 = time.monotonic()
        workers = max(1, os.cpu_count() or 1)
        per = -(-need // workers)
        jobs = [(pem, len(have) + i * per, min(per, need - i * per)) for i in range(workers) if need - i * per > 0]
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(len(jobs)) as ex:
            for chunk in ex.map(_mint_chunk, jobs):
                have.extend(chunk)
        with open(tokens_file + ".new", "w") as f:
            f.write("\n".join(have) + "\n")
        os.replace(tokens_file + ".new", tokens_file)
        print(f"  minted in {time.monotonic() - t0:.1f} s", flush=True)
    mat.tokens_file = tokens_file
    mat.tokens = len(have)
    return mat


# ---------------------------------------------------------------------------
# twistgw configurations
# ---------------------------------------------------------------------------


def _yaml_block(text: str, indent: int) -> str:
    pad = " " * indent
    return "|\n" + "".join(pad + line + "\n" for line in text.strip().splitlines())


def gateway_yaml(backend_port: int, options: str = "", extra: str = "", upstream: str = "") -> str:
    """One virtual service, one route to the backend; ``options`` go on the
    virtual host, ``extra`` resources after it, ``upstream`` lines in the
    Upstream's spec (also used by bench/micro.py)."""
    return f"""apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: backend, namespace: default}}
spec:
  static:
    hosts: [{{addr: 127.0.0.1, port: {backend_port}}}]
{upstream}---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {{name: bench, namespace: default}}
spec:
  virtualHost:
    domains: ["*"]
{options}    routes:
    - matchers: [{{prefix: /}}]
      routeAction:
        single:
          upstream: {{name: backend, namespace: default}}
{extra}"""


def tracing_gateway_yaml(percent: float | None, bind_port: int, collector_port: int) -> str:
    """A Gloo Gateway on ``bind_port`` serving every virtual service, tracing
    at ``percent`` to an OTLP/gRPC collector on ``collector_port`` (None: no
    tracing); also bench/micro.py's."""
    tracing = "" if percent is None else f"""
    options:
      httpConnectionManagerSettings:
        tracing:
          tracePercentages: {{randomSamplePercentage: {percent}}}
          openTelemetryConfig: {{collectorUpstreamRef: {{name: otel, namespace: default}}}}"""
    return f"""---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: otel, namespace: default}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {collector_port}}}]}}}}
---
apiVersion: gateway.solo.io/v1
kind: Gateway
metadata: {{name: bench-gw, namespace: default}}
spec:
  bindAddress: 127.0.0.1
  bindPort: {bind_port}
  httpGateway:{" {}" if not tracing else ""}{tracing}
"""


#: the tracing rows: the Gateway's sampling percentage (None: no tracing)
TRACING = {"gateway": None, "tracing-unsampled": 0, "tracing-sampled": 100}


def gateway_config(directory: str, backend_port: int, options: str = "", extra: str = "", upstream: str = "") -> None:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "gateway.yaml"), "w") as f:
        f.write(gateway_yaml(backend_port, options, extra, upstream))


def tls_material(prefix: str) -> str:
    """A CA and the TLS backend's certificate (EC P-256, the name in its
    subjectAltName), made as the tests make them; returns the directory
    holding ca.crt, backend.crt and backend.key."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from support.pki import TestCA

    directory = os.path.join(prefix, "tls")
    os.makedirs(directory, exist_ok=True)
    ca = TestCA("twistgw bench CA")
    with open(os.path.join(directory, "ca.crt"), "wb") as f:
        f.write(ca.pem)
    ca.issue(TLS_BACKEND_NAME, dns=[TLS_BACKEND_NAME]).write(pathlib.Path(directory), "backend")
    return directory


def jwt_options(mat: JwtMaterial, rbac: bool) -> str:
    out = f"""    options:
      jwt:
        providers:
          bench:
            issuer: {ISSUER}
            jwks:
              local:
                key: {_yaml_block(mat.public_pem, 18)}"""
    if rbac:
        out += """      rbac:
        policies:
          alice-reads:
            permissions: {methods: [GET], pathPrefix: /}
            principals: [{jwtPrincipal: {claims: {sub: alice}}}]
"""
    return out


def ldap_options(slapd_port: int, cache: bool, search: bool = False) -> tuple[str, str]:
    """The ldap-* scenarios: a DN template and memberOf, or (``search``) an
    anonymous userSearch over both OUs and a nested groupSearch: alice is
    admitted through cn=staff, which lists cn=managers, which lists her
    (four LDAP operations and a second group search per uncached request)."""
    options = """    options:
      extauth: {configRef: {name: ldap, namespace: default}}
"""
    if search:
        how = """      userSearch: {baseDn: "dc=example,dc=org", filter: "(uid=%s)"}
      groupSearch: {baseDn: "ou=groups,dc=example,dc=org", nested: true}
      allowedGroups: ["cn=staff,ou=groups,dc=example,dc=org"]
      groupsHeader: X-Auth-Groups"""
    else:
        how = """      userDnTemplate: uid=%s,ou=people,dc=example,dc=org
      membershipAttributeName: memberOf
      allowedGroups: ["cn=managers,ou=groups,dc=example,dc=org"]
      searchFilter: (objectClass=*)"""
    extra = f"""---
apiVersion: enterprise.gateway.vendor.io/v1
kind: AuthConfig
metadata: {{name: ldap, namespace: default}}
spec:
  configs:
  - ldap:
      address: ldap://127.0.0.1:{slapd_port}
{how}
      pool: {{maxSize: {CONNECTIONS}, initialSize: 4}}
      cacheTtl: {"60s" if cache else "0"}
"""
    return options, extra


#: The API key the apikey scenario sends (one of 100 Secrets).
BENCH_API_KEY = "bench-key-0042-5b1d7e"
#: Gloo's basic-auth guide user: user / password. (wrk requests GET /bench;
#: the opa-path policy is Gloo's guide policy with /bench for /api/pets.)
BENCH_APR = ("TYiryv0/", "8BvzLUO9IfGPGGsPnAgSu1")
BENCH_POLICY = """package test

default allow = false
allow {
    startswith(input.http_request.path, "/bench")
    input.http_request.method == "GET"
}
"""


Expectations = list[tuple[str, dict[str, str], int]]


def authtypes_options(name: str, backend_port: int) -> tuple[str, str, Expectations, list[str]]:
    """(options, extra resources, expectations, wrk headers) of the authtypes scenarios."""
    options = """    options:
      extauth: {configRef: {name: bench, namespace: default}}
"""
    head = """---
apiVersion: enterprise.gateway.vendor.io/v1
kind: AuthConfig
metadata: {name: bench, namespace: default}
spec:
  configs:
"""
    if name == "apikey":
        secrets = "".join(f"""---
apiVersion: v1
kind: Secret
type: extauth.solo.io/apikey
metadata: {{name: key-{i:03d}, namespace: default, labels: {{bench: "yes"}}}}
stringData: {{api-key: bench-key-{i:04d}-5b1d7e}}
""" for i in range(100))
        extra = head + "  - apiKeyAuth: {labelSelector: {bench: \"yes\"}}\n" + secrets
        return options, extra, [("no key", {}, 401), ("wrong key", {"api-key": "nope"}, 401),
                                ("good key", {"api-key": BENCH_API_KEY}, 200)], [f"api-key: {BENCH_API_KEY}"]
    if name == "basic-cache":
        extra = head + f"""  - basicAuth:
      apr: {{users: {{user: {{salt: "{BENCH_APR[0]}", hashedPassword: "{BENCH_APR[1]}"}}}}}}
"""
        good = basic("user", "password")
        expect = [("no credentials", {}, 401), ("wrong password", {"Authorization": basic("user", "x")}, 401),
                  ("good credentials", {"Authorization": good}, 200)]
        return options, extra, expect, [f"Authorization: {good}"]
    if name == "opa-path":
        extra = head + """  - opaAuth: {modules: [{name: policy}], query: "data.test.allow == true"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: policy, namespace: default}
data:
  policy.rego: """ + _yaml_block(BENCH_POLICY, 4)
        return options, extra, [("GET /bench", {}, 200)], []
    extra = head + f"""  - passThroughAuth: {{http: {{url: "http://127.0.0.1:{backend_port}/auth"}}}}
"""
    return options, extra, [("GET /", {}, 200)], []


def jwt_expectations(mat: JwtMaterial, rbac: bool) -> list[tuple[str, dict[str, str], int]]:
    """What a JWT scenario (twistgw's or HAProxy's) must answer before it is measured."""
    expect = [("no token", {}, 401), ("valid token", {"Authorization": f"Bearer {mat.alice}"}, 200),
              ("token signed by another key", {"Authorization": f"Bearer {mat.forged}"}, 401)]
    if rbac:
        expect.append(("token of a user no policy admits", {"Authorization": f"Bearer {mat.bob}"}, 403))
    return expect


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------


@dataclass
class Target:
    """A running thing wrk can be pointed at."""

    name: str
    port: int
    pid: int | None  # the process whose CPU and RSS are measured
    headers: list[str] = field(default_factory=list)  # for wrk -H
    script: list[str] = field(default_factory=list)  # ["-s", lua, ..., "--", args]
    fresh: bool = False
    #: "h2load": HTTP/2 clients with prior knowledge (bench/h2_bench.py); "h2load-grpc":
    #: gRPC unary calls over h2c (bench/grpc_bench.py)
    load: str = "wrk"


@dataclass
class Run:
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    non2xx: int
    socket_errors: int
    cpu_us: float | None
    hwm_kib: int | None
    rss_kib: int | None
    order: int
    core0_busy: float = 0.0  # fraction of core 0 busy (wrk, backend, slapd, anything else)
    core1_others: float = 0.0  # fraction of core 1 busy with something other than the proxy


@dataclass
class Result:
    name: str
    skipped: str = ""
    runs: list[Run] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def rps(self) -> float:
        return statistics.mean(r.rps for r in self.runs)

    def p50(self) -> float:
        return statistics.median(r.p50_ms for r in self.runs)

    def p99(self) -> float:
        return statistics.median(r.p99_ms for r in self.runs)

    def cpu_us(self) -> float | None:
        runs = [r for r in self.runs if r.cpu_us is not None]
        if not runs:
            return None
        return sum(r.cpu_us * r.requests for r in runs) / sum(r.requests for r in runs)

    def hwm_mib(self) -> float | None:
        vals = [r.hwm_kib for r in self.runs if r.hwm_kib]
        return max(vals) / 1024 if vals else None

    def spread(self) -> float:
        vals = [r.rps for r in self.runs]
        return (max(vals) - min(vals)) / 2 / statistics.mean(vals) * 100 if len(vals) > 1 else 0.0


def http_status(port: int, headers: dict[str, str] | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/bench", headers=headers or {})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def check(port: int, expectations: list[tuple[str, dict[str, str], int]]) -> None:
    """Refuse to measure a scenario that does not do what it claims."""
    for label, headers, want in expectations:
        try:
            got = http_status(port, headers)
        except OSError as exc:
            raise Skip(f"functional check '{label}' failed: {exc}") from None
        if got != want:
            raise Skip(f"functional check '{label}' answered {got}, expected {want}")


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.prefix = tempfile.mkdtemp(prefix="twistgw-bench-")
        self.procs = Processes(self.prefix)
        self.targets: dict[str, Target] = {}
        self.results: dict[str, Result] = {name: Result(name) for name in args.scenarios}
        self.backend_port = 0
        #: the TLS backend (nginx HTTPS on core 0) and its CA, for the TLS rows
        self.tls_port = 0
        self.tls_dir = ""
        self.fresh_offset = 0
        self.mat: JwtMaterial | None = None
        self.slapd_port: int | None = None
        self.slapd_error = ""
        self.redis_port: int | None = None
        self.cluster_ports: list[int] = []
        self.baseline: Baseline | None = None
        #: the fixed gRPC upstream (nginx h2c on core 0) and its files, for the gRPC rows
        self.grpc_port = 0
        self.grpc_dir = ""
        #: the gzip rows' backend (nginx on core 0, a 10 KB JSON body)
        self.json_port = 0

    # -- setup ------------------------------------------------------------

    def setup(self) -> None:
        self.backend_port = free_port()
        start_nginx(self.procs, self.prefix, "backend", nginx_conf(self.prefix, "backend", f"""
    server {{
        listen 127.0.0.1:{self.backend_port};
        location / {{ default_type text/plain; return 200 "{BACKEND_BODY.strip()}\\n"; }}
    }}"""), self.backend_port, LOAD_CPU)
        if any(s.partition("@")[0] in ("upstream-tls", "nginx-proxy-tls") for s in self.args.scenarios):
            self.start_tls_backend()
        if any(s.partition("@")[0] in ("gzip-json", "gateway-json", "nginx-gzip") for s in self.args.scenarios):
            self.json_port = free_port()
            os.makedirs(os.path.join(self.prefix, "json"), exist_ok=True)
            with open(os.path.join(self.prefix, "json", "body.json"), "w") as f:
                f.write(JSON_BODY)
            start_nginx(self.procs, self.prefix, "backend-json", nginx_conf(self.prefix, "backend-json", f"""
    server {{
        listen 127.0.0.1:{self.json_port};
        etag off;
        location / {{ root {self.prefix}/json; default_type application/json; try_files /body.json =404; }}
    }}"""), self.json_port, LOAD_CPU)
        if any(s.partition("@")[0] in (*grpc_bench.REFERENCES, *grpc_bench.GATEWAY) for s in self.args.scenarios):
            self.grpc_dir = grpc_bench.prepare(self.prefix)
            self.grpc_port = free_port()
            start_nginx(self.procs, self.prefix, "backend-grpc", nginx_conf(
                self.prefix, "backend-grpc", grpc_bench.backend_server_block(self.grpc_port, self.grpc_dir)),
                self.grpc_port, LOAD_CPU)
        if any("jwt" in s.partition("@")[0] for s in self.args.scenarios):
            try:
                self.mat = jwt_material(os.path.join(RESULTS, ".jwt"), self.fresh_tokens_needed())
            except ImportError as exc:
                self.slapd_error = ""
                for s in self.args.scenarios:
                    if "jwt" in s.partition("@")[0]:
                        self.results[s].skipped = f"cannot mint tokens: {exc}"
        if any(s.startswith("ldap") for s in self.args.scenarios):
            try:
                self.slapd_port = start_slapd(self.procs, self.prefix)
            except Skip as exc:
                for s in self.args.scenarios:
                    if s.startswith("ldap"):
                        self.results[s].skipped = str(exc)
        if "ratelimit-redis" in self.args.scenarios:
            try:
                self.redis_port = start_redis(self.procs, self.prefix)
            except Skip as exc:
                self.results["ratelimit-redis"].skipped = str(exc)
        if "ratelimit-cluster" in self.args.scenarios:
            try:
                self.cluster_ports = start_redis_cluster(self.procs, self.prefix)
            except (Skip, subprocess.SubprocessError) as exc:
                self.results["ratelimit-cluster"].skipped = str(exc)
        for name in self.args.scenarios:
            if self.results[name].skipped:
                continue
            try:
                self.targets[name] = self.start(name)
            except Skip as exc:
                self.results[name].skipped = str(exc)
                print(f"  {name}: skipped: {exc}", flush=True)
            else:
                print(f"  {name}: ready on port {self.targets[name].port}", flush=True)

    def start_tls_backend(self) -> None:
        """nginx serving HTTPS (TLS 1.2/1.3, keep-alive) with a certificate
        from a CA made here, on core 0 like the plain backend."""
        self.tls_dir = tls_material(self.prefix)
        self.tls_port = free_port()
        d = self.tls_dir
        start_nginx(self.procs, self.prefix, "backend-tls", nginx_conf(self.prefix, "backend-tls", f"""
    server {{
        listen 127.0.0.1:{self.tls_port} ssl;
        ssl_certificate {d}/backend.crt;
        ssl_certificate_key {d}/backend.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:bench:1m;
        location / {{ default_type text/plain; return 200 "{BACKEND_BODY.strip()}\\n"; }}
    }}"""), self.tls_port, LOAD_CPU)

    def fresh_tokens_needed(self) -> int:
        fresh = [s for s in self.args.scenarios if s.partition("@")[0] == "jwt-fresh"]
        # Enough for every measured second at a generous 4,000 requests/s.
        return int(len(fresh) * self.args.rounds * self.args.duration * 4000)

    def start(self, name: str) -> Target:
        if name == "backend-direct":
            return Target(name, self.backend_port, None)
        port = free_port()
        if name in ("nginx-proxy", "nginx-limit-req"):
            limit = "limit_req zone=perip burst=1000000 nodelay;" if name == "nginx-limit-req" else ""
            zone = "limit_req_zone $binary_remote_addr zone=perip:10m rate=100000000r/s;" if limit else ""
            proc = start_nginx(self.procs, self.prefix, name, nginx_conf(self.prefix, name, f"""
    upstream backend {{ server 127.0.0.1:{self.backend_port}; keepalive 64; keepalive_requests 1000000; }}
    {zone}
    server {{
        listen 127.0.0.1:{port};
        access_log {self.prefix}/{name}.access.log;
        location / {{
            {limit}
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}"""), port, PROXY_CPU)
            check(port, [("GET /", {}, 200)])
            return Target(name, port, proc.pid)
        if name == "nginx-proxy-tls":
            d = self.tls_dir
            proc = start_nginx(self.procs, self.prefix, name, nginx_conf(self.prefix, name, f"""
    upstream backend_tls {{ server 127.0.0.1:{self.tls_port}; keepalive 64; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port};
        access_log {self.prefix}/{name}.access.log;
        location / {{
            proxy_pass https://backend_tls;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate {d}/ca.crt;
            proxy_ssl_name {TLS_BACKEND_NAME};
            proxy_ssl_server_name on;
            proxy_ssl_session_reuse on;
        }}
    }}"""), port, PROXY_CPU)
            check(port, [("GET / over verified TLS to the backend", {}, 200)])
            return Target(name, port, proc.pid)
        if name in ("haproxy-proxy", "haproxy-jwt"):
            if not shutil.which("haproxy") and not os.path.exists("/usr/sbin/haproxy"):
                raise Skip("haproxy is not installed (apt-get install haproxy)")
            rules, expect = "", [("GET /", {}, 200)]
            headers: list[str] = []
            if name == "haproxy-jwt":
                mat = self.mat
                assert mat is not None
                key = os.path.join(self.prefix, "jwt-public.pem")
                with open(key, "w") as f:
                    f.write(mat.public_pem)
                rules = haproxy_jwt_rules(key)
                expect = jwt_expectations(mat, rbac=True)
                headers = [f"Authorization: Bearer {mat.alice}"]
            proc = start_haproxy(self.procs, self.prefix, name,
                                 haproxy_conf(self.prefix, name, port, self.backend_port, rules), port, PROXY_CPU)
            check(port, expect)
            return Target(name, port, proc.pid, headers)
        if name == "nginx-gzip":
            proc = start_nginx(self.procs, self.prefix, name, nginx_conf(self.prefix, name, f"""
    upstream backend {{ server 127.0.0.1:{self.json_port}; keepalive 64; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port};
        access_log {self.prefix}/{name}.access.log;
        gzip on; gzip_comp_level 1; gzip_types application/json; gzip_proxied any; gzip_vary on;
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}"""), port, PROXY_CPU)
            check(port, [("GET / gzip", {"Accept-Encoding": "gzip"}, 200)])
            return Target(name, port, proc.pid, ["Accept-Encoding: gzip"])
        if name == "nginx-h2":
            proc = start_nginx(self.procs, self.prefix, name, nginx_conf(
                self.prefix, name, h2_bench.nginx_block(port, self.backend_port, self.prefix)), port, PROXY_CPU)
            h2_bench.check_h2(port, [("GET / over HTTP/2", {}, 200)], Skip)
            return Target(name, port, proc.pid, load="h2load")
        if name == "nginx-grpc":
            extra, server = grpc_bench.grpc_pass_block(port, self.grpc_port, f"{self.prefix}/{name}.access.log")
            proc = start_nginx(self.procs, self.prefix, name, nginx_conf(self.prefix, name, server, extra), port,
                               PROXY_CPU)
            self.check_grpc(port, name)
            return Target(name, port, proc.pid, load="h2load-grpc")
        if name in ("bare-twisted", "probe-floor"):
            script = "bare_proxy.py" if name == "bare-twisted" else "probe_proxy.py"
            proc = self.procs.start(name, [PY, os.path.join(HERE, script), str(port),
                                           f"127.0.0.1:{self.backend_port}"], PROXY_CPU)
            wait_port(port, proc, self.procs, name)
            check(port, [("GET /", {}, 200)])
            return Target(name, port, proc.pid)
        return self.start_gateway(name, port)

    def start_gateway(self, name: str, port: int) -> Target:
        """``name`` is a twistgw scenario, or ``SCENARIO@REV``: the same against the baseline."""
        kind, at, _ = name.partition("@")
        directory = os.path.join(self.prefix, f"config-{name}")
        headers: list[str] = []
        script: list[str] = []
        expect: list[tuple[str, dict[str, str], int]]
        mat = self.mat
        listen = port
        if kind in ("plain", "plain-nolog", "plain-textlog", "plain-w2", "plain-w2-free", "h2-plain"):
            gateway_config(directory, self.backend_port)
            expect = [("GET /", {}, 200)]
        elif kind in ("gzip-json", "gateway-json", "gateway-plain", "request-id"):
            # served on a Gloo Gateway's listener (the port measured); --listen elsewhere
            listen = free_port()
            http = {"gzip-json": "{options: {gzip: {compressionLevel: SPEED}}}", "gateway-json": "{}",
                    "gateway-plain": "{options: {httpConnectionManagerSettings: {generateRequestId: false}}}",
                    "request-id": "{}"}[kind]
            gateway_config(directory, self.json_port if kind.endswith("-json") else self.backend_port,
                           extra=f"---\napiVersion: gateway.vendor.io/v1\nkind: Gateway\nmetadata: {{name: bench,"
                                 f" namespace: default}}\nspec:\n  bindAddress: 127.0.0.1\n  bindPort: {port}\n"
                                 f"  httpGateway: {http}\n")
            expect = [("GET /", {"Accept-Encoding": "gzip"}, 200)]
            headers = ["Accept-Encoding: gzip"] if kind.endswith("-json") else []
        elif kind == "upstream-tls":
            os.makedirs(directory, exist_ok=True)
            shutil.copy(os.path.join(self.tls_dir, "ca.crt"), directory)  # sslFiles: relative to the config
            gateway_config(directory, self.tls_port,
                           upstream=f"  sslConfig: {{sni: {TLS_BACKEND_NAME}, sslFiles: {{rootCa: ca.crt}}}}\n")
            expect = [("GET / over verified TLS to the backend", {}, 200)]
        elif kind == "traffic":
            gateway_config(directory, self.backend_port, TRAFFIC_OPTIONS)
            expect = [("GET / from the allowed origin", {"Origin": "https://app.example.com"}, 200)]
            headers = ["Origin: https://app.example.com"]
        elif kind in ("jwt", "jwt-fresh", "jwt-rbac", "h2-jwt-rbac"):
            assert mat is not None
            rbac = kind.endswith("jwt-rbac")
            gateway_config(directory, self.backend_port, jwt_options(mat, rbac=rbac))
            expect = jwt_expectations(mat, rbac=rbac)
            headers = [f"Authorization: Bearer {mat.alice}"]
            if kind == "jwt-fresh":
                if not mat.tokens_file:
                    raise Skip("no token list")
                headers = []
                script = ["-s", os.path.join(HERE, "fresh_tokens.lua")]
        elif kind in ("ldap-cache", "ldap-nocache", "ldap-search-cache", "ldap-search-nocache"):
            assert self.slapd_port is not None
            options, extra = ldap_options(self.slapd_port, cache=kind.endswith("-cache"),
                                          search="-search-" in kind)
            gateway_config(directory, self.backend_port, options, extra)
            expect = [("no credentials", {}, 401),
                      ("wrong password", {"Authorization": basic("alice", "nope")}, 401),
                      ("member of the allowed group", {"Authorization": basic("alice", "alicepw")}, 200),
                      ("not a member", {"Authorization": basic("bob", "bobpw")}, 403)]
            if "-search-" in kind:
                expect.append(("a user of the other OU, in no group", {"Authorization": basic("carol", "carolpw")},
                               403))
            headers = [f"Authorization: {basic('alice', 'alicepw')}"]
        elif kind in RATELIMIT_OPTIONS:
            extra = ratelimit_settings(self.redis_port) if kind == "ratelimit-redis" and self.redis_port else ""
            if kind == "ratelimit-cluster" and self.cluster_ports:
                extra = ratelimit_settings(self.cluster_ports[0], clustered=True)
            gateway_config(directory, self.backend_port, RATELIMIT_OPTIONS[kind], extra)
            expect = [("GET /", {}, 200)]
        elif kind in ("apikey", "basic-cache", "opa-path", "passthrough"):
            options, extra, expect, headers = authtypes_options(kind, self.backend_port)
            gateway_config(directory, self.backend_port, options, extra)
        elif kind in TRACING:
            collector = free_port()
            if kind == "tracing-sampled":
                rx = self.procs.start(f"{name}-receiver", [PY, os.path.join(ROOT, "examples", "tracing", "receiver.py"),
                                                           "--port", str(collector), "--quiet"], LOAD_CPU)
                wait_port(collector, rx, self.procs, f"{name}-receiver")
            gateway_config(directory, self.backend_port, extra=tracing_gateway_yaml(TRACING[kind], port, collector))
            expect = [("GET / through the Gateway's listener", {}, 200)]
        elif kind in oidc_bench.SCENARIOS:
            headers, expect = self.oauth2_material(kind, directory)
        elif kind in grpc_bench.GATEWAY:
            gateway_config(directory, self.grpc_port, upstream=grpc_bench.upstream_yaml(self.grpc_port))
            expect = [("GET / to the HTTP/2 upstream", {}, 200)]
            if kind == "grpc-web":
                script = ["-s", grpc_bench.LUA]
        else:
            raise Skip(f"unknown scenario {name!r}")
        admin = free_port()
        twist = ["--log-format=text"] if kind == "plain-textlog" else []
        python, cwd = PY, ROOT
        # The current build: twistgw and the shipped plugins from this tree.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "plugins"),
                                                           os.environ.get("PYTHONPATH", "")]))
        if at:  # the baseline: its own install, nothing of this tree on its path
            assert self.baseline is not None
            python, cwd, env = self.baseline.python, self.prefix, self.baseline.env()
        if kind in TRACING:  # those rows load the Gateway's listener, on port (as the Gateway rows above)
            listen = free_port()
        argv = [python, "-m", "twisted", *twist, "twistgw", "--config", directory,
                "--listen", f"tcp:{listen}:interface=127.0.0.1",
                "--admin", f"tcp:{admin}:interface=127.0.0.1"]
        if kind == "plain-nolog":
            argv.append("--no-access-log")
        if kind.startswith("plain-w2"):
            argv += ["--workers", "2"]
        argv += self.args.gateway_arg
        cpus = f"{LOAD_CPU},{PROXY_CPU}" if kind == "plain-w2-free" else PROXY_CPU
        proc = self.procs.start(name, argv, cpus, cwd=cwd, env=env)
        try:
            wait_port(port, proc, self.procs, name, timeout=30)
            check(port, expect)
            if kind.startswith("h2-"):
                h2_bench.check_h2(port, expect, Skip)
            if kind == "grpc-h2":
                self.check_grpc(port, name)
        except Skip:
            self.procs.stop(proc)
            raise
        return Target(name, port, proc.pid, headers, script, fresh=kind == "jwt-fresh",
                      load="h2load" if kind.startswith("h2-") else "h2load-grpc" if kind == "grpc-h2" else "wrk")

    def check_grpc(self, port: int, name: str) -> None:
        """One unary call by h2load must succeed before the row is measured."""
        try:
            got = grpc_bench.h2load(port, 1, self.grpc_dir, LOAD_CPU, connections=1, streams=1, count=20)
        except RuntimeError as exc:
            raise Skip(f"{name}: a gRPC call over h2c failed ({exc})") from None
        if not got["requests"] or got["non2xx"] or got["socket_errors"]:
            raise Skip(f"{name}: the functional gRPC call did not succeed ({got})")

    def oauth2_material(self, name: str, directory: str) -> tuple[list[str], list[tuple[str, dict[str, str], int]]]:
        """The oidc-* and oauth2-* scenarios (bench/oidc_bench.py): the config, the header every request
        carries, and what must be answered before measuring."""
        redis_port = introspection_port = 0
        if name == "oidc-redis":
            if not shutil.which("redis-server"):
                raise Skip("redis-server is not installed (apt-get install redis-server)")
            redis_port = free_port()
            proc = self.procs.start("redis", oidc_bench.redis_argv(redis_port, self.prefix), LOAD_CPU)
            wait_port(redis_port, proc, self.procs, "redis")
        if name == "oauth2-introspect":
            introspection_port = oidc_bench.Introspection().port
        options, extra = oidc_bench.options(name, redis_port, introspection_port)
        gateway_config(directory, self.backend_port, options, extra)
        if name == "oauth2-introspect":
            header = f"Authorization: Bearer {oidc_bench.TOKEN}"
            expect = [("no token", {}, 401), ("unknown token", {"Authorization": "Bearer nope"}, 401)]
        else:
            header = oidc_bench.redis_session(redis_port) if name == "oidc-redis" else oidc_bench.cookie_header()
            expect = [("no session", {"Accept": "application/json"}, 401)]
        key, _, value = header.partition(": ")
        expect.append(("a valid session or token", {key: value}, 200))
        return [header], expect

    # -- load -------------------------------------------------------------

    def wrk(self, target: Target, seconds: float, offset: int | None = None) -> dict[str, Any]:
        if target.load == "h2load":
            return h2_bench.h2load(target, seconds, CONNECTIONS, LOAD_CPU)
        if target.load == "h2load-grpc":
            return grpc_bench.h2load(target.port, seconds, self.grpc_dir, LOAD_CPU, CONNECTIONS)
        argv = ["taskset", "-c", LOAD_CPU, "wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds:g}s", "--latency",
                "--timeout", "10s"]
        for h in target.headers:
            argv += ["-H", h]
        if target.fresh and offset is not None:
            argv += [*target.script, f"http://127.0.0.1:{target.port}/bench", "--",
                     self.mat.tokens_file, str(offset)]
        else:
            if target.fresh:  # warm-up: the same token
                argv += ["-H", f"Authorization: Bearer {self.mat.alice}"]
            elif target.script:  # a request of its own (bench/grpc_web.lua)
                argv += target.script
            argv += [f"http://127.0.0.1:{target.port}/bench"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
        if out.returncode != 0:
            raise RuntimeError(f"wrk failed: {out.stderr.strip()[:300]}")
        return parse_wrk(out.stdout)

    def wait_quiet(self) -> float:
        """Wait (at most --quiet-wait seconds) until other work on the machine
        leaves both cores nearly idle; returns the last busy fraction seen."""
        deadline = time.monotonic() + self.args.quiet_wait
        while True:
            b0, t0 = cpu_busy(), time.monotonic()
            time.sleep(0.5)
            b1, t1 = cpu_busy(), time.monotonic()
            busy = max((b1[c] - b0[c]) / (t1 - t0) for c in (LOAD_CPU, PROXY_CPU))
            if busy < QUIET or time.monotonic() >= deadline:
                return busy

    def measure(self, name: str, order: int) -> None:
        """One measured round; retried (up to --retry-busy times) while other
        processes took more than BUSY of core 1, keeping the cleanest attempt."""
        target = self.targets[name]
        res = self.results[name]
        best: Run | None = None
        for attempt in range(1 + self.args.retry_busy):
            if self.args.quiet_wait > 0:
                busy = self.wait_quiet()
                if busy >= QUIET and attempt == 0:
                    res.notes.append(f"round {order}: the machine was still busy ({busy:.0%} of a core)"
                                     f" after {self.args.quiet_wait:g} s of waiting")
            run = self.measure_once(target, order)
            if best is None or run.core1_others < best.core1_others:
                best = run
            if run.core1_others <= BUSY or attempt == self.args.retry_busy:
                break
            print(f"      (core 1 was {run.core1_others:.0%} busy with other processes; measuring again)", flush=True)
        assert best is not None
        res.runs.append(best)
        if target.fresh and self.fresh_offset > self.mat.tokens:
            note = f"token list wrapped ({self.fresh_offset} requests > {self.mat.tokens} tokens)"
            if note not in res.notes:
                res.notes.append(note)
        if best.non2xx or best.socket_errors:
            res.notes.append(f"round {order}: {best.non2xx} non-2xx, {best.socket_errors} socket errors")
        print(f"  [{order}] {name:15s} {best.rps:9.0f} req/s  p50 {best.p50_ms:6.2f} ms  p99 {best.p99_ms:6.2f} ms"
              + (f"  {best.cpu_us:6.0f} us/req" if best.cpu_us is not None else "")
              + f"  core0 {best.core0_busy:4.0%}  core1 others {best.core1_others:4.0%}", flush=True)

    def measure_once(self, target: Target, order: int) -> Run:
        self.wrk(target, self.args.warmup)
        pid = target.pid
        cpu0 = cpu_seconds(pid) if pid else None
        offset = self.fresh_offset if target.fresh else None
        busy0, t0 = cpu_busy(), time.monotonic()
        counted = [self.redis_port] if target.name == "ratelimit-redis" and self.redis_port else \
            self.cluster_ports if target.name == "ratelimit-cluster" else []
        calls0 = sum(redis_script_calls(p) for p in counted) if counted else None
        w = self.wrk(target, self.args.duration, offset)
        busy1, t1 = cpu_busy(), time.monotonic()
        if calls0 is not None and counted and w["requests"]:
            per_request = (sum(redis_script_calls(p) for p in counted) - calls0) / w["requests"]
            self.results[target.name].notes.append(
                f"round {order}: {per_request:.3f} Redis commands per request (one EVALSHA per reactor turn's batch)")
        cpu1 = cpu_seconds(pid) if pid else None
        proxy_s = (cpu1 - cpu0) if pid else 0.0
        core0 = (busy1[LOAD_CPU] - busy0[LOAD_CPU]) / (t1 - t0)
        others = max(0.0, (busy1[PROXY_CPU] - busy0[PROXY_CPU] - proxy_s) / (t1 - t0))
        rss, hwm = rss_kib(pid) if pid else (None, None)
        cpu_us = proxy_s * 1e6 / w["requests"] if pid and w["requests"] else None
        if target.fresh:
            self.fresh_offset += w["requests"]
        return Run(w["requests"], w["seconds"], w["rps"], w["p50_ms"], w["p99_ms"], w["non2xx"],
                   w["socket_errors"], cpu_us, hwm, rss, order, core0, others)

    def run(self) -> None:
        live = [n for n in self.args.scenarios if n in self.targets]
        for r in range(self.args.rounds):
            order = live if r % 2 == 0 else list(reversed(live))
            for name in order:
                self.measure(name, r + 1)
        #: KiB per idle connection, HTTP/2 and HTTP/1.1 (issue 33)
        self.idle: dict[str, float] = {}
        for name, label, http2 in (("h2-plain", "twistgw, an idle HTTP/2 connection", True),
                                   ("plain", "twistgw, an idle HTTP/1.1 keep-alive connection", False),
                                   ("nginx-h2", "nginx, an idle HTTP/2 connection", True)):
            target = self.targets.get(name)
            if target is not None and target.pid:
                try:
                    self.idle[label] = h2_bench.idle_memory(target.port, target.pid, http2, rss_kib)
                except OSError as exc:
                    self.results[name].notes.append(f"idle connections not measured: {exc}")

    def profile(self, name: str) -> str:
        """py-spy on a twistgw scenario under load; returns a text summary."""
        target = self.targets.get(name)
        if target is None or target.pid is None or (name in REFERENCES and name not in ("bare-twisted", "probe-floor")):
            return f"profile: {name} is not a running Python proxy"
        spy = shutil.which("py-spy") or os.path.join(os.path.dirname(PY), "py-spy")
        if not os.path.exists(spy):
            return "profile: py-spy not found (pip install py-spy)"
        os.makedirs(RESULTS, exist_ok=True)
        raw = os.path.join(RESULTS, f"profile-{name}.txt")
        seconds = max(5.0, self.args.duration)
        spy_proc = subprocess.Popen(["taskset", "-c", LOAD_CPU, spy, "record", "--pid", str(target.pid),
                                     "--rate", str(self.args.profile_rate), "--duration",
                                     f"{seconds:g}", "--format", "raw", "--output", raw],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
        try:
            time.sleep(1.0)
            # jwt-fresh: fresh tokens here too (without an offset wrk sends one token)
            w = self.wrk(target, seconds, self.fresh_offset if target.fresh else None)
            if target.fresh:
                self.fresh_offset += w["requests"]
            spy_proc.wait(30)
        finally:
            if spy_proc.poll() is None:
                spy_proc.kill()
                spy_proc.wait()
        if not os.path.exists(raw):
            return f"profile: py-spy wrote nothing ({spy_proc.stderr.read().decode()[:300]})"
        summary = summarize_profile(raw)
        with open(os.path.join(RESULTS, f"profile-{name}.md"), "w") as f:
            f.write(summary)
        return summary

    def soak(self, name: str, seconds: float) -> str:
        """Load one scenario for a long time and watch its RSS (the target: flat within ±10%)."""
        target = self.targets.get(name)
        if target is None or target.pid is None:
            return f"soak: {name} is not running"
        self.wrk(target, self.args.warmup)
        argv = ["taskset", "-c", LOAD_CPU, "wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds:g}s", "--latency"]
        argv += [x for h in target.headers for x in ("-H", h)]
        argv.append(f"http://127.0.0.1:{target.port}/bench")
        wrk = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_die_with_parent)
        samples = []
        t0 = time.monotonic()
        try:
            while wrk.poll() is None:
                time.sleep(min(5.0, max(0.5, seconds / 60)))
                samples.append((time.monotonic() - t0, rss_kib(target.pid)[0]))
            out, _ = wrk.communicate(30)
        finally:
            if wrk.poll() is None:
                wrk.kill()
                wrk.wait()
        w = parse_wrk(out)
        rss = [kib for _, kib in samples]
        first, last = rss[0], rss[-1]
        drift = (last - first) / first * 100
        spread = (max(rss) - min(rss)) / first * 100
        text = (f"Soak, {name}, {seconds:g} s under load ({w['requests']:,} requests, {w['rps']:,.0f} req/s,"
                f" p50 {w['p50_ms']:.2f} ms, p99 {w['p99_ms']:.2f} ms, {w['non2xx']} non-2xx):"
                f" RSS {first / 1024:.1f} MiB after {samples[0][0]:.0f} s, {last / 1024:.1f} MiB at the end"
                f" ({drift:+.1f}%), range {min(rss) / 1024:.1f}–{max(rss) / 1024:.1f} MiB ({spread:.1f}% of the"
                f" first); target ±10%: {'met' if abs(drift) <= 10 and spread <= 20 else 'NOT met'}.\n")
        return text

    def close(self) -> None:
        self.procs.stop_all()
        shutil.rmtree(self.prefix, ignore_errors=True)


# ---------------------------------------------------------------------------
# Parsing and reporting
# ---------------------------------------------------------------------------

_UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s|m)$", text)
    if not m:
        raise ValueError(f"unparsed duration {text!r}")
    return float(m.group(1)) * _UNIT[m.group(2)]


def parse_wrk(out: str) -> dict[str, Any]:
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", out)
    if not m:
        raise RuntimeError(f"cannot parse wrk output:\n{out}")
    pct = dict(re.findall(r"^\s+(\d+)%\s+(\S+)", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "requests": int(m.group(1)),
        "seconds": _ms(m.group(2) + m.group(3)) / 1000,
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50_ms": _ms(pct["50"]),
        "p99_ms": _ms(pct["99"]),
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(int(x) for x in sock.groups()) if sock else 0,
    }


def summarize_profile(raw: str, top: int = 25) -> str:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    self_c: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    with open(raw) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            count = int(n)
            total += count
            frames = stack.split(";")
            for fr in set(frames):
                key = _frame(fr)
                incl[key] = incl.get(key, 0) + count
            leaf = _frame(frames[-1])
            self_c[leaf] = self_c.get(leaf, 0) + count
    # collapse duplicates created by _frame's line-number stripping
    lines = [f"py-spy samples: {total} ({raw})", "", "| self % | function |", "|---:|---|"]
    for k, v in sorted(self_c.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"| {100 * v / total:.1f} | `{k}` |")
    lines += ["", "| inclusive % | function |", "|---:|---|"]
    for k, v in sorted(incl.items(), key=lambda kv: -kv[1])[:top + 15]:
        lines.append(f"| {100 * v / total:.1f} | `{k}` |")
    own = [(k, v) for k, v in incl.items() if k.startswith(("twistgw", "plugins/", "prometheus_client/"))]
    lines += ["", "| inclusive % | twistgw, plugin and metrics code |", "|---:|---|"]
    for k, v in sorted(own, key=lambda kv: -kv[1])[:top]:
        lines.append(f"| {100 * v / total:.1f} | `{k}` |")
    return "\n".join(lines) + "\n"


def _frame(fr: str) -> str:
    # py-spy raw frames look like "function (path/to/file.py:123)"
    m = re.match(r"(.*) \((.*?)(?::\d+)?\)$", fr)
    if not m:
        return fr
    func, path = m.groups()
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{path}:{func}"


def machine() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass

    def version(argv: list[str]) -> str:
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=5)
            return (r.stdout + r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    try:
        import twisted

        tw = twisted.__version__
    except ImportError:
        tw = "?"
    return (f"{model}, {os.cpu_count()} cores, Linux {platform.release()}; "
            f"CPython {platform.python_version()}, Twisted {tw}; {version(['nginx', '-v'])};"
            f" {version(['haproxy', '-v'])}; "
            f"{version(['wrk', '-v']).split(' Copyright')[0]}")


def fmt(v: float | None, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def _paired(a: Result, b: Result, value: Any) -> float | None:
    """The median over rounds of value(a's run) / value(b's run), each pair
    measured in the same round, i.e. minutes apart at most. On a shared
    machine whose speed drifts (a round can be 30% slower than the one before
    for every scenario alike), comparing within a round cancels the drift
    that comparing the means of all rounds keeps."""
    mine = {r.order: r for r in a.runs}
    ratios = []
    for rb in b.runs:
        ra = mine.get(rb.order)
        if ra is None:
            continue
        va, vb = value(ra), value(rb)
        if va and vb:
            ratios.append(va / vb)
    return statistics.median(ratios) if ratios else None


def ratio(a: Result | None, b: Result | None) -> float | None:
    """a's requests/s over b's, paired by round (see _paired)."""
    if a is None or b is None or not a.runs or not b.runs:
        return None
    return _paired(a, b, lambda r: r.rps)


def cpu_times(a: Result | None, b: Result | None) -> float | None:
    """a's CPU µs per request as a multiple of b's, paired by round."""
    if a is None or b is None or not a.runs or not b.runs:
        return None
    return _paired(a, b, lambda r: r.cpu_us)


def cpu_extra(a: Result | None, b: Result | None) -> float | None:
    """a's CPU µs per request minus b's, the median over rounds."""
    if a is None or b is None or not a.runs or not b.runs:
        return None
    mine = {r.order: r for r in a.runs}
    diffs = [mine[rb.order].cpu_us - rb.cpu_us for rb in b.runs
             if rb.order in mine and mine[rb.order].cpu_us is not None and rb.cpu_us is not None]
    return statistics.median(diffs) if diffs else None


def cpu_ratio(a: Result | None, b: Result | None) -> float | None:
    """How many of a's requests fit in the CPU time of one of b's: b's µs / a's µs,
    paired by round."""
    inverse = cpu_times(a, b)
    return 1 / inverse if inverse else None


def report(bench: Bench, elapsed: float) -> str:
    args = bench.args
    res = bench.results
    ng, bare, plain = res.get("nginx-proxy"), res.get("bare-twisted"), res.get("plain")
    lines = [
        f"Run {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, {elapsed:.0f} s: wrk -t1 -c{CONNECTIONS},"
        f" {args.duration:g} s per measurement after a {args.warmup:g} s warm-up, {args.rounds} rounds"
        " in alternating order; wrk + backend (+ slapd) on core 0, the proxy on core 1.",
        f"Machine: {machine()}.",
        *([f"Baseline (the rows NAME@{bench.baseline.rev}): {bench.baseline.describe()};"
           f" this build: {this_build()}."] if bench.baseline else []),
        "",
        "| scenario | req/s | ± | p50 ms | p99 ms | p99/p50 | CPU µs/req | CPU × nginx | peak RSS MiB | × nginx |"
        " × bare | × bare CPU | core 0 busy | core 1 others |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for name in args.scenarios:
        r = res[name]
        if r.skipped:
            lines.append(f"| {name} | skipped: {r.skipped.replace('|', '/')} |" + "  |" * 13)
            continue
        if not r.runs:
            lines.append(f"| {name} | not measured |" + "  |" * 13)
            continue
        x_ng = ratio(r, ng) if name != "nginx-proxy" else None
        x_bare = ratio(r, bare) if name != "bare-twisted" else None
        lines.append(
            f"| {name} | {r.rps():,.0f} | {r.spread():.0f}% | {r.p50():.2f} | {r.p99():.2f} | {r.p99() / r.p50():.1f} |"
            f" {fmt(r.cpu_us(), '.0f')} | {fmt(cpu_times(r, ng) if name != 'nginx-proxy' else None, '.1f')} |"
            f" {fmt(r.hwm_mib(), '.0f')} | {fmt(x_ng, '.2f')} | {fmt(x_bare, '.2f')} |"
            f" {fmt(cpu_ratio(r, bare) if name != 'bare-twisted' else None, '.2f')} |"
            f" {max(x.core0_busy for x in r.runs):.0%} | {max(x.core1_others for x in r.runs):.0%} |")
        for n in r.notes:
            notes.append(f"- {name}: {n}")
    lines += ["", "± is half the spread between rounds, in % of the mean. CPU is the proxy process's"
              " (with --workers, its workers' too) utime+stime over the measured run divided by the requests"
              " served (10 ms clock"
              " ticks); CPU × nginx is that as a multiple of the nginx proxy's. × nginx and × bare are ratios"
              " of requests/s; × bare CPU is the bare proxy's CPU µs per"
              " request divided by this row's (the throughput ratio the proxy core alone would allow,"
              " less sensitive to a busy machine). Every ratio here and below is the median of the ratios"
              " within each round (rounds drift on a shared machine), so it need not equal the ratio of"
              " the means in the columns. Core 0 busy: wrk + backend (+ slapd) and anything else"
              " on core 0 (near 100%: the load side limits the result). Core 1 others: time core 1"
              " spent on processes other than the proxy under test (the machine is shared; high values"
              " make that row pessimistic). Both are the worst round."]
    if notes:
        lines += ["", "Notes:", *notes]
    if bench.baseline:
        lines += baseline_table(bench)

    nc = res.get("ldap-nocache")

    # Targets of issue 6
    def verdict(value: float | None, goal: float, below: bool = False) -> str:
        if value is None:
            return "—"
        return "met" if (value <= goal if below else value >= goal) else "NOT met"

    def tgt(label: str, a: Result | None, b: Result | None, goal: float) -> str:
        rr, cr = ratio(a, b), cpu_ratio(a, b)
        return (f"| {label} | {fmt(rr, '.2f')} | {fmt(cr, '.2f')} | ≥ {goal:g}× |"
                f" {verdict(rr, goal)} | {verdict(cr, goal)} |")

    # Targets of issue 13 (the native engine): CPU per request against nginx and HAProxy.
    def ceiling(label: str, value: float | None, goal: float, unit: str = "×") -> str:
        shown = fmt(value, ".2f" if unit == "×" else ".0f")
        measured = shown + (" µs" if unit != "×" and value is not None else "")
        goal_text = f"{goal:g}" + (unit if unit == "×" else " µs")
        return f"| {label} | {measured} | ≤ {goal_text} | {verdict(value, goal, below=True)} |"

    lines += ["", "| target (issue 13), CPU per request | measured | goal | |", "|---|---:|---:|---|"]
    lines.append(ceiling("plain route (as shipped) / nginx proxy", cpu_times(plain, ng), 3))
    lines.append(ceiling("JWT + RBAC, same token / HAProxy jwt_verify",
                         cpu_times(res.get("jwt-rbac"), res.get("haproxy-jwt")), 1.5))
    lines.append(ceiling("JWT fresh token − plain route", cpu_extra(res.get("jwt-fresh"), plain), 90, unit="µs"))
    lines.append(ceiling("LDAP, decision cache / plain route", cpu_times(res.get("ldap-cache"), plain), 1.3))
    lines.append(ceiling("API key − plain route", cpu_extra(res.get("apikey"), plain), 5, unit="µs"))
    lines.append(ceiling("Basic, memo warm − plain route", cpu_extra(res.get("basic-cache"), plain), 10, unit="µs"))
    lines.append(ceiling("plain route, access log on / --no-access-log", cpu_times(plain, res.get("plain-nolog")), 1.1))
    traffic = res.get("traffic")
    if traffic and traffic.runs:  # issue 24: headerManipulation + cors + retries on the route
        lines.append(ceiling("headerManipulation + cors + retries − plain route", cpu_extra(traffic, plain), 5,
                             unit="µs"))
    tls = res.get("upstream-tls")
    if tls and tls.runs:  # issue 24: TLS to the upstream, against nginx doing the same
        lines.append(ceiling("upstream TLS / nginx proxy_pass https", cpu_times(tls, res.get("nginx-proxy-tls")), 3))
    if nc and nc.runs:
        lines.append(f"| LDAP uncached, req/s | {nc.rps():,.0f} | ≥ 3,000 | {verdict(nc.rps(), 3000)} |")

    probe = res.get("probe-floor")
    if probe and probe.runs:
        # Not targets: where the plain route's cost sits between the floor a
        # Python proxy on Twisted's reactor has and the gateway's own work.
        lines += ["", "| the floor (bench/probe_proxy.py) | CPU × nginx | twistgw plain − floor, µs |",
                  "|---|---:|---:|",
                  f"| Twisted protocols + httptools, no policy | {fmt(cpu_times(probe, ng), '.2f')} |"
                  f" {fmt(cpu_extra(plain, probe), '.0f')} |"]
    w2, w2free = res.get("plain-w2"), res.get("plain-w2-free")
    if (w2 and w2.runs) or (w2free and w2free.runs):
        lines += ["", "| --workers 2 (CPU summed over the workers), against plain | req/s ratio | CPU ratio |",
                  "|---|---:|---:|"]
        if w2 and w2.runs:
            lines.append(f"| both workers on the proxy's core | {fmt(ratio(w2, plain), '.2f')} |"
                         f" {fmt(cpu_times(w2, plain), '.2f')} |")
        if w2free and w2free.runs:
            lines.append(f"| both cores, shared with wrk and the backend | {fmt(ratio(w2free, plain), '.2f')} |"
                         f" {fmt(cpu_times(w2free, plain), '.2f')} |")

    sn, sc = res.get("ldap-search-nocache"), res.get("ldap-search-cache")
    if (sn and sn.runs) or (sc and sc.runs):
        lines += ["", "| LDAP userSearch + nested groupSearch, beside the DN template + memberOf rows |"
                  " req/s ratio | CPU µs/req more |", "|---|---:|---:|"]
        lines.append(f"| uncached: search + bind + 2 group searches, against bind + base search |"
                     f" {fmt(ratio(sn, nc), '.2f')} | {fmt(cpu_extra(sn, nc), '.0f')} |")
        lines.append(f"| decision cache (plus the groups header) | {fmt(ratio(sc, res.get('ldap-cache')), '.2f')} |"
                     f" {fmt(cpu_extra(sc, res.get('ldap-cache')), '.0f')} |")

    lines += ["", "| target (issue 6) | req/s ratio | CPU ratio | goal | by req/s | by CPU |",
              "|---|---:|---:|---:|---|---|"]
    lines.append(tgt("plain route / bare Twisted proxy", plain, bare, 0.9))
    lines.append(tgt("JWT + RBAC (same token) / plain route", res.get("jwt-rbac"), plain, 0.9))
    lines.append(tgt("JWT fresh token / plain route", res.get("jwt-fresh"), plain, 0.5))
    lines.append(tgt("LDAP, decision cache / plain route", res.get("ldap-cache"), plain, 0.85))
    if nc and nc.runs:
        cap = 1e6 / nc.cpu_us() if nc.cpu_us() else None
        lines.append(f"| LDAP uncached, req/s (CPU: 10⁶ / µs per request) | {nc.rps():,.0f} | {fmt(cap, ',.0f')} |"
                     f" ≥ 1,000 | {verdict(nc.rps(), 1000)} | {verdict(cap, 1000)} |")
    for name in GATEWAY:
        r = res.get(name)
        if r and r.runs and name not in h2_bench.SCENARIOS:  # h2load reports no percentiles
            v = r.p99() / r.p50()
            lines.append(f"| p99 / p50, {name} | {v:.1f} | | ≤ 5 | {verdict(v, 5, below=True)} | |")
    lines += h2_bench.report_lines(res, ceiling, cpu_times, cpu_extra, fmt, getattr(bench, "idle", {}))
    if any(res.get(n) and res[n].runs for n in (*h2_bench.SCENARIOS, *h2_bench.REFERENCES)):
        lines.append("")
        lines.append("HTTP/2 rows: h2load -c32 -m10 -t1 (HTTP/2 with prior knowledge) instead of wrk; their p50"
                     " column is h2load's mean time per request and their p99 column its maximum (h2load has no"
                     " percentiles).")
    lines.append("")
    raw = ["<details><summary>every measurement</summary>", "",
           "| scenario | round | requests | req/s | p50 ms | p99 ms | CPU µs/req | RSS MiB | non-2xx |"
           " core 0 busy | core 1 others |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in args.scenarios:
        for run in sorted(res[name].runs, key=lambda r: r.order):
            raw.append(f"| {name} | {run.order} | {run.requests} | {run.rps:,.0f} | {run.p50_ms:.2f} |"
                       f" {run.p99_ms:.2f} | {fmt(run.cpu_us, '.0f')} |"
                       f" {fmt(run.rss_kib / 1024 if run.rss_kib else None, '.0f')} | {run.non2xx} |"
                       f" {run.core0_busy:.0%} | {run.core1_others:.0%} |")
    raw += ["", "</details>", ""]
    return "\n".join(lines + raw)


def this_build() -> str:
    def git(*a: str) -> str:
        out = subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    head = git("rev-parse", "--short=12", "HEAD") or "?"
    return head + (" with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def baseline_table(bench: Bench) -> list[str]:
    """Each twistgw scenario against its baseline twin, paired by round (issue 22: no regression)."""
    rev, res = bench.baseline.rev, bench.results
    lines = ["", f"| this build / {rev} (same round, median over rounds) | req/s ratio | CPU µs/req |"
             f" CPU µs/req @{rev} | CPU ratio | peak RSS MiB | @{rev} |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name in bench.args.scenarios:
        twin = f"{name}@{rev}"
        if "@" in name or twin not in res:
            continue
        a, b = res[name], res[twin]
        if not a.runs or not b.runs:
            why = a.skipped or b.skipped or "not measured"
            lines.append(f"| {name} / {twin} | {why.replace('|', '/')} | | | | | |")
            continue
        lines.append(f"| {name} / {twin} | {fmt(ratio(a, b), '.2f')} | {fmt(a.cpu_us(), '.0f')} |"
                     f" {fmt(b.cpu_us(), '.0f')} | {fmt(cpu_times(a, b), '.2f')} | {fmt(a.hwm_mib(), '.0f')} |"
                     f" {fmt(b.hwm_mib(), '.0f')} |")
    lines += ["", "A req/s ratio above 1 or a CPU ratio below 1: this build is faster than the baseline."]
    return lines


def update_docs(table: str) -> None:
    begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
    with open(DOCS) as f:
        text = f.read()
    if begin not in text or end not in text:
        raise SystemExit(f"{DOCS} has no {begin} ... {end} markers")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(DOCS, "w") as f:
        f.write(head + begin + "\n" + table + end + tail)


# ---------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=6.0, help="seconds per measured run (default 6)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up before every measured run (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="measurements per scenario, in alternating order (default 3)")
    p.add_argument("--scenarios", default=",".join(DEFAULT),
                   help="comma-separated subset of: " + ", ".join(ALL)
                        + " (default: all but " + ", ".join(OPTIONAL) + ")")
    p.add_argument("--quick", action="store_true", help="3 s runs, 1 s warm-up: a smoke test, not a measurement")
    p.add_argument("--profile", metavar="SCENARIO", action="append", default=[],
                   help="after measuring, record SCENARIO (a twistgw one) under load with py-spy and"
                        " print where the time goes (bench/results/profile-SCENARIO.{txt,md})")
    p.add_argument("--quiet-wait", type=float, default=10.0,
                   help="before each measurement wait up to this many seconds for other work on the"
                        " machine to stop (0: do not wait; default 10)")
    p.add_argument("--retry-busy", type=int, default=1,
                   help="measure a round again (up to N times) when other processes used more than 10%% of"
                        " the proxy's core; the cleanest attempt is kept (default 1)")
    p.add_argument("--profile-rate", type=int, default=500, help="py-spy samples per second (default 500)")
    p.add_argument("--soak", metavar="SCENARIO:SECONDS", default="",
                   help="after measuring, load SCENARIO for SECONDS and report whether its RSS stays flat"
                        " (the issue's target: ±10%% over 5 minutes, i.e. plain:300)")
    p.add_argument("--gateway-arg", action="append", default=[],
                   help="extra command-line argument for every twistgw process (repeatable)")
    p.add_argument("--baseline", metavar="REV", default="",
                   help="also run every twistgw scenario chosen as SCENARIO@REV: the gateway of git revision"
                        " REV (e.g. fe20652), installed in its own virtualenv (cached in"
                        " bench/results/.baseline), measured in the same rounds; prints the ratios")
    p.add_argument("--update-docs", action="store_true", help="also put the table into docs/performance.md")
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.warmup = min(args.duration, 3.0), min(args.warmup, 1.0)
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in args.scenarios if s not in ALL]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(ALL)}")
    args.soak_scenario, args.soak_seconds = "", 0.0
    if args.soak:
        name, _, secs = args.soak.partition(":")
        try:
            args.soak_scenario, args.soak_seconds = name, float(secs or 300)
        except ValueError:
            p.error("--soak takes SCENARIO:SECONDS, e.g. plain:300")
        if name not in ALL or name in ("backend-direct", "jwt-fresh"):
            p.error(f"--soak: {name!r} is not a scenario that can be soaked")
    for s in args.profile + ([args.soak_scenario] if args.soak_scenario else []):
        if s not in ALL:
            p.error(f"unknown scenario {s!r}")
        if s not in args.scenarios:
            args.scenarios.append(s)
    args.scenarios = [s for s in ALL if s in args.scenarios]
    if args.baseline:
        if not re.fullmatch(r"[\w./~^@{}-]+", args.baseline) or args.baseline.startswith("-"):
            p.error(f"--baseline: {args.baseline!r} does not look like a git revision")
        if not any(s in GATEWAY for s in args.scenarios):
            p.error("--baseline: no twistgw scenario chosen to compare (e.g. --scenarios plain,jwt,jwt-rbac)")
        # Each twin right after its scenario: measured in the same rounds, in the same alternating order.
        args.scenarios = [x for s in args.scenarios
                          for x in ([s, f"{s}@{args.baseline}"] if s in GATEWAY else [s])]
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    for tool in ("wrk", "nginx", "taskset"):  # haproxy is optional: its rows say "skipped" without it
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            print(f"bench/run needs {tool} (apt-get install {tool if tool != 'taskset' else 'util-linux'})",
                  file=sys.stderr)
            return 2
    if (os.cpu_count() or 1) < 2:
        print("bench/run pins the load to core 0 and the proxy to core 1: it needs 2 cores", file=sys.stderr)
        return 2
    os.environ["PATH"] = "/usr/sbin:" + os.environ.get("PATH", "")

    def on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    bench = Bench(args)
    atexit.register(bench.close)
    started = time.monotonic()
    try:
        if args.baseline:
            bench.baseline = prepare(args.baseline)
        print(f"starting servers in {bench.prefix} ...", flush=True)
        bench.setup()
        print(f"measuring ({args.rounds} rounds of {args.duration:g} s, warm-up {args.warmup:g} s) ...", flush=True)
        bench.run()
        table = report(bench, time.monotonic() - started)
        profiles = [bench.profile(name) for name in args.profile]
        if args.soak_scenario:
            print(f"soaking {args.soak_scenario} for {args.soak_seconds:g} s ...", flush=True)
            soak = bench.soak(args.soak_scenario, args.soak_seconds)
            table += "\n" + soak
    except BaselineError as exc:
        print(f"bench/run --baseline: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        bench.close()
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "latest.md"), "w") as f:
        f.write(table)
    with open(os.path.join(RESULTS, "latest.json"), "w") as f:
        json.dump({name: {"skipped": r.skipped, "notes": r.notes, "runs": [vars(x) for x in r.runs]}
                   for name, r in bench.results.items()}, f, indent=1)
    print()
    print(table)
    for p in profiles:
        print(p)
    print(f"written to {os.path.relpath(os.path.join(RESULTS, 'latest.md'))}")
    if args.update_docs:
        update_docs(table)
        print(f"and into {os.path.relpath(DOCS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
