"""twistgw's own per-request cost, in memory: no sockets, no load generator.

    python bench/micro.py [--requests N] [--repeat R] [--clock cpu] [--profile SCENARIO]
                          [--opcodes SCENARIO]

Request bytes go into the engine's server protocol over a StringTransport;
the upstream is one pooled engine connection over another StringTransport,
fed a response with a 23-byte body (the same as the bench backend) as soon
as the request went out. What is timed is everything twistgw does between
the bytes of a request and the bytes of its response: both HTTP parsers,
routing, the plugin chain, header handling, the relay, metrics. Sockets and
the reactor are not in it, so the numbers are smaller than bench/run's CPU
µs per request; the differences between scenarios are what this is for
(how much does JWT + RBAC add to a plain route?), measured with far less
noise than a loaded shared machine allows. bench/run remains the
measurement of record. ``bare-twisted`` is twisted.web (Site + a stub Agent
answering at once), for comparison.

``--clock cpu`` times with the process's CPU clock instead of the wall
clock: on a loaded machine the time other processes had the core is left
out (what remains, caches shared with the neighbours, is still noise; the
minimum of many rounds is the figure to compare). ``--profile`` counts
Python calls per request and ``--opcodes`` bytecode instructions per
request, by function: neither changes with the neighbours' load, so two
builds or two scenarios compare exactly (what they leave out is the C
code behind each instruction: allocation, dict and string work).

The LDAP scenarios measure the decision-cache hit path: the cache is
filled before timing, so no directory is needed. ldap-search-cache is the
userSearch + nested groupSearch configuration, whose cached verdict also
sets the groups header.

The extauth scenarios need no outside service either: ``apikey`` (one key
among 100 Secrets) and ``basic-cache`` (apr1; the warm-up request fills the
verified-credentials memo) decide from the request and the snapshot;
``oidc-cookie`` sends a session cookie sealed with the plugin's own code
(bench/oidc_bench.py, as a login leaves it); ``oauth2-introspect`` sends an
opaque token whose introspection answer is put in the checker's result
cache before timing (the introspection URL is never called).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.defer import succeed
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.web._newclient import ResponseDone
from twisted.web.http_headers import Headers

from twistgw.config.loader import load_text
from twistgw.core.plugins import PluginHost
from twistgw.engine.server import Gateway, GatewayFactory
from twistgw.engine.upstream import UpstreamConnection
from twistgw.core.snapshot import build_snapshot

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (the same configurations as bench/run)
import oidc_bench  # noqa: E402


class _Response:
    code = 200
    phrase = b"OK"
    version = (b"HTTP", 1, 1)
    length = 23
    body = b"hello from the backend\n"

    def __init__(self) -> None:
        self.headers = Headers({b"content-type": [b"text/plain"], b"server": [b"nginx"],
                                b"date": [b"Sat, 21 Nov 2026 10:00:00 GMT"]})

    def deliverBody(self, protocol: Any) -> None:
        protocol.makeConnection(_NullProducer())
        protocol.dataReceived(self.body)
        protocol.connectionLost(Failure(ResponseDone()))


class _NullProducer:
    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


class _StubAgent:
    def request(self, method: bytes, uri: bytes, headers: Headers, body: Any = None) -> Any:
        return succeed(_Response())


#: What the stub upstream answers to every request (nginx-like headers).
UPSTREAM_RESPONSE = (b"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Sat, 21 Nov 2026 10:00:00 GMT\r\n"
                     b"Content-Type: text/plain\r\nContent-Length: 23\r\nConnection: keep-alive\r\n\r\n"
                     b"hello from the backend\n")


def scenarios(fresh_needed: bool = True) -> dict[str, tuple[str, str, bytes]]:
    """name -> (virtual host options YAML, extra resources YAML, extra request
    header lines), from bench/harness.py's scenario definitions. Without
    ``fresh_needed`` jwt-fresh gets one token (minting thousands takes seconds)."""
    with tempfile.TemporaryDirectory() as keys:
        mat = harness.jwt_material(keys, 0)
    bearer = f"Authorization: Bearer {mat.alice}\r\n".encode()
    fresh = [f"Authorization: Bearer {token}\r\n".encode()
             for token in fresh_tokens(mat, FRESH_TOKENS if fresh_needed else 1)]
    ldap_options, ldap_extra = harness.ldap_options(9, cache=True)
    search_options, search_extra = harness.ldap_options(9, cache=True, search=True)
    alice = f"Authorization: {harness.basic('alice', 'alicepw')}\r\n".encode()
    return {
        "bare-twisted": ("", "", b""),
        "plain": ("", "", b""),
        "plain-log": ("", "", b""),
        "plain-log-events": ("", "", b""),
        "plain-bearer": ("", "", bearer),
        "jwt": (harness.jwt_options(mat, rbac=False), "", bearer),
        "jwt-fresh": (harness.jwt_options(mat, rbac=False), "", fresh),
        "jwt-rbac": (harness.jwt_options(mat, rbac=True), "", bearer),
        "ldap-cache": (ldap_options, ldap_extra, alice),
        "ldap-search-cache": (search_options, search_extra, alice),
        "ratelimit-local": (harness.RATELIMIT_OPTIONS["ratelimit-local"], "", b""),
        "upstream-policy": ("", "", b""),
        **{name: extauth_scenario(name) for name in EXTAUTH},
        # issue 24: headerManipulation + cors + retries, a CORS origin on every request
        "traffic": (harness.TRAFFIC_OPTIONS, "", b"Origin: https://app.example.com\r\n"),
        **{name: gateway_scenario(name) for name in ON_GATEWAY},
        # issue 35: the request through a Gloo Gateway's listener, without tracing, with tracing
        # and no request sampled (randomSamplePercentage: 0), and every request sampled
        "gateway": ("", tracing_gateway(None), b""),
        "tracing-unsampled": ("", tracing_gateway(0), b""),
        "tracing-sampled": ("", tracing_gateway(100), b""),
    }


#: plain, served on a Gloo Gateway's listener: without and with its x-request-id (bench/run's rows)
ON_GATEWAY = ("gateway-plain", "request-id")


def gateway_scenario(name: str) -> tuple[str, str, bytes]:
    http = "{options: {httpConnectionManagerSettings: {generateRequestId: false}}}" if name == "gateway-plain" else "{}"
    return ("", f"---\napiVersion: gateway.vendor.io/v1\nkind: Gateway\nmetadata: {{name: bench, namespace: default}}\n"
                f"spec:\n  bindPort: 8080\n  httpGateway: {http}\n", b"")


#: the scenarios served through a Gloo Gateway's listener (its key)
GATEWAY_KEY = "default/bench-gw"


def tracing_gateway(percent: float | None) -> str:
    """bench/run's tracing rows' Gateway (no socket is opened here)."""
    return harness.tracing_gateway_yaml(percent, 18080, 4317)


class SpanSink:
    """Where the tracing scenarios' spans go: ``SpanExporter.submit``'s
    work on the reactor thread (one append to a bounded deque; its queue
    is a deque too). The export thread's CPU is bench/otlp_export.py's."""

    def __init__(self, target: Any, **kw: Any) -> None:
        import collections

        self.submit = collections.deque(maxlen=4096).append

    def stop(self, timeout_s: float = 0.0) -> None:
        pass


#: The extauth scenarios (bench/run's rows of the same names).
EXTAUTH = ("apikey", "basic-cache", "oidc-cookie", "oauth2-introspect")


def extauth_scenario(name: str) -> tuple[str, str, bytes]:
    if name in ("apikey", "basic-cache"):
        options, extra, _expect, headers = harness.authtypes_options(name, 9)
        return options, extra, "".join(f"{h}\r\n" for h in headers).encode()
    options, extra = oidc_bench.options(name, 0, 9)
    if name == "oauth2-introspect":
        return options, extra, f"Authorization: Bearer {oidc_bench.TOKEN}\r\n".encode()
    return options, extra, f"{oidc_bench.cookie_header()}\r\n".encode()


def fill_introspection_cache(snapshot: Any) -> None:
    """The bench token's introspection answer in the checker's result cache,
    as the first request would leave it (active, a day to live)."""
    now = time.time()
    claims = {"active": True, "sub": "svc", "scope": "read", "exp": int(now) + 86400}
    for compiled in snapshot.plugin_compiled.get("extauth", []):
        for entry in compiled.entries:
            checker = entry.checker
            checker.cache.put(oidc_bench.TOKEN, dict(claims), checker.runtime.now(), checker.spec.cache_timeout,
                              claims["exp"])


#: Upstream spec lines of the scenarios that configure the upstream itself:
#: outlier detection and least request report every request (start, status,
#: end) to the upstream's watch.
UPSTREAM_SPECS = {
    "upstream-policy": "  outlierDetection: {consecutive5xx: 5}\n  loadBalancerConfig: {leastRequest: {}}\n",
}


#: Distinct tokens for jwt-fresh: more than any run's requests would make
#: minting (~0.7 ms a token) dominate; the plugin's token cache holds 4,096
#: by default, so cycling through these still misses it every time.
FRESH_TOKENS = 6000


def fresh_tokens(mat: Any, n: int) -> list[str]:
    """``n`` RS256 tokens for distinct subjects, signed with the bench key."""
    import jwt
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(mat.private_pem, None)
    exp = int(time.time()) + 86400
    return [jwt.encode({"iss": harness.ISSUER, "sub": f"user{i}", "exp": exp}, key, algorithm="RS256",
                       headers={"kid": "bench"}) for i in range(n)]


def build_bare(reactor: Any) -> Any:
    """bench/bare_proxy.py's Site over the same stub upstream: the floor."""
    from twisted.web import server

    from bare_proxy import Proxy

    site = server.Site(Proxy("127.0.0.1:9", _StubAgent()), reactor=reactor)
    site.log = lambda request: None
    return site


def fill_ldap_cache(snapshot: Any) -> None:
    """Alice's admission in the decision cache, with the groups the bench
    directory gives her (staff through managers), as a check would leave it."""
    from twistgw_ldap._answers import Group
    from twistgw_ldap._credentials import password_digest
    from twistgw_ldap._directory import make_verdict
    from twistgw_ldap._dn import parse_dn

    groups = {parse_dn(dn): Group(dn, name, level) for dn, name, level in (
        ("cn=managers,ou=groups,dc=example,dc=org", "managers", 1),
        ("cn=staff,ou=groups,dc=example,dc=org", "staff", 2))}
    for compiled in snapshot.plugin_compiled.get("extauth", []):
        for entry in compiled.entries:
            cfg, cache = entry.checker.cfg, entry.checker.state.cache(entry.checker.cfg)
            cache.put(("alice", password_digest(b"alicepw")),
                      make_verdict(cfg, "alice", "allowed", "filled by bench/micro.py", groups))
            if cfg.user_search is not None:  # the directory's name for what was typed
                cache.learn_name("alice", "alice")


def build(name: str, spec: tuple[str, str, bytes]) -> tuple[Any, bytes]:
    options, extra, header = spec
    if name == "bare-twisted":
        reactor = MemoryReactorClock()
        proto = build_bare(reactor).buildProtocol(IPv4Address("TCP", "127.0.0.1", 8080))
        transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
        proto.makeConnection(transport)
        return (proto, transport, None, None), b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\n\r\n"
    reactor = MemoryReactorClock()
    host = PluginHost.create()
    gateway = Gateway(reactor, host, access_log=access_log(name, reactor))
    upstream = UpstreamConnection(gateway.forwarder, ("127.0.0.1", 9))
    upstream_transport = StringTransport()
    upstream.makeConnection(upstream_transport)
    gateway.forwarder.release(upstream)
    from twistgw.runtime.metrics import Metrics
    from prometheus_client import CollectorRegistry

    gateway.metrics = Metrics(CollectorRegistry())
    gateway.snapshot = build_snapshot(load_text(harness.gateway_yaml(9, options, extra, UPSTREAM_SPECS.get(name, ""))),
                                      host)
    if name.startswith("ldap-"):
        fill_ldap_cache(gateway.snapshot)
    if name == "oauth2-introspect":
        fill_introspection_cache(gateway.snapshot)
    gateway_key = "default/bench" if name in ON_GATEWAY else None
    if name in ("gateway", "tracing-unsampled", "tracing-sampled"):
        from twistgw.engine.tracing import Exporters

        gateway_key = GATEWAY_KEY
        gateway.exporters = Exporters(factory=SpanSink)
        gateway.sync_tracing(gateway.snapshot)
    factory = GatewayFactory(gateway, timeout=60, gateway_key=gateway_key)
    factory.micro_reactor = reactor
    proto = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 8080))
    proto.callLater = reactor.callLater
    transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
    proto.makeConnection(transport)
    # the look at the first bytes (HTTP/2's preface?) is over: an HTTP/1.1 connection, as after its first read
    proto.__dict__.pop("dataReceived", None)
    head = b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\n"
    if isinstance(header, list):  # a different request each time (jwt-fresh)
        return (proto, transport, upstream, upstream_transport), Rotating([head + h + b"\r\n" for h in header])
    request = head + header + b"\r\n"
    return (proto, transport, upstream, upstream_transport), request


def access_log(name: str, reactor: Any) -> Any:
    """As shipped under ``twist`` with stdout to a file (JSON), to /dev/null:
    ``plain-log`` the buffered access log, one write per reactor turn;
    ``plain-log-events`` a twisted.logger event per request through twist's
    JSON observer (how it was done before issue 13)."""
    if name == "plain-log":
        from twistgw.runtime.logs import buffered_access_log

        return buffered_access_log(open(os.devnull, "w"), "json", reactor)
    if name == "plain-log-events":
        from twisted.logger import globalLogPublisher, jsonFileLogObserver

        globalLogPublisher.addObserver(jsonFileLogObserver(open(os.devnull, "w")))
        return True
    return False


class Rotating(list):
    """Requests sent in turn, each run going on where the last one stopped
    (so a token cache smaller than the list never sees a token again soon)."""

    at = 0

    def take(self) -> bytes:
        request = self[self.at]
        self.at = (self.at + 1) % len(self)
        return request


#: the clock requests are timed with (``--clock``)
clock = time.perf_counter


def run(conn: Any, request: bytes | Rotating, n: int) -> float:
    proto, transport, upstream, upstream_transport = conn
    if isinstance(request, Rotating):
        return run_each(conn, request, n)
    clear = transport.clear
    feed = proto.dataReceived
    # Every request is its own reactor turn (the worst case for the access
    # log's once-per-turn write; under load a turn finishes several).
    reactor = getattr(getattr(proto, "factory", None), "micro_reactor", None)
    turn = reactor.advance if reactor is not None else (lambda seconds: None)
    t0 = clock()
    if upstream is None:
        for _ in range(n):
            feed(request)
            clear()
            turn(0)
    else:
        answer = upstream.dataReceived
        upstream_clear = upstream_transport.clear
        for _ in range(n):
            feed(request)
            answer(UPSTREAM_RESPONSE)
            upstream_clear()
            clear()
            turn(0)
    return (clock() - t0) / n * 1e6


def run_each(conn: Any, requests: Rotating, n: int) -> float:
    """:func:`run` with a different request each time, in turn."""
    proto, transport, upstream, upstream_transport = conn
    reactor = proto.factory.micro_reactor
    feed, answer, take = proto.dataReceived, upstream.dataReceived, requests.take
    t0 = clock()
    for _ in range(n):
        feed(take())
        answer(UPSTREAM_RESPONSE)
        upstream_transport.clear()
        transport.clear()
        reactor.advance(0)
    return (clock() - t0) / n * 1e6


def count_opcodes(conn: Any, request: bytes | Rotating, n: int) -> None:
    """Print the bytecode instructions ``n`` requests execute, per request,
    in total and by function (``sys.settrace`` with ``f_trace_opcodes``)."""
    import collections

    counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        key = (frame.f_code.co_filename, frame.f_code.co_name)

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[key] += 1
            return local
        return local

    sys.settrace(tracer)
    try:
        run(conn, request, n)
    finally:
        sys.settrace(None)
    print(f"{sum(counts.values()) / n:.1f} bytecode instructions per request")
    for (filename, function), c in counts.most_common(40):
        print(f"{c / n:8.1f}  {filename.split('site-packages/')[-1]}:{function}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--scenarios", default="bare-twisted,plain,jwt,jwt-fresh,jwt-rbac,ldap-cache,ldap-search-cache")
    ap.add_argument("--profile", metavar="SCENARIO", help="cProfile this scenario instead")
    ap.add_argument("--opcodes", metavar="SCENARIO",
                    help="count bytecode instructions per request, by function, instead")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="time with the wall clock (default) or the process's CPU clock (a loaded machine)")
    args = ap.parse_args()
    global clock
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    specs = scenarios(fresh_needed="jwt-fresh" in (args.scenarios.split(",") + [args.profile, args.opcodes]))
    conns = {}
    for name in args.scenarios.split(","):
        conn, request = build(name, specs[name])
        run(conn, request, 1)
        conn[1].clear()
        conn[0].dataReceived(request.take() if isinstance(request, Rotating) else request)
        if conn[2] is not None:
            conn[2].dataReceived(UPSTREAM_RESPONSE)
            conn[3].clear()
        out = conn[1].value()
        conn[1].clear()
        if not out.startswith(b"HTTP/1.1 200 "):
            sys.exit(f"{name}: expected a 200, got {out[:200]!r}")
        conns[name] = (conn, request)
    if args.opcodes:
        count_opcodes(*conns[args.opcodes], args.requests)
        return
    if args.profile:
        import cProfile
        import pstats

        conn, request = conns[args.profile]
        prof = cProfile.Profile()
        prof.runcall(run, conn, request, args.requests)
        pstats.Stats(prof).sort_stats("tottime").print_stats(35)
        return
    results: dict[str, list[float]] = {name: [] for name in conns}
    gc.collect()
    for _ in range(args.repeat):
        for name, (conn, request) in conns.items():
            results[name].append(run(conn, request, args.requests))
    # The best of the rounds: on a shared machine the slower ones measure
    # the neighbours, not this code.
    plain = min(results["plain"]) if "plain" in results else None
    print(f"{'scenario':18} {'µs/req':>8} {'median':>7}  {'+ over plain':>12}")
    for name, values in results.items():
        best = min(values)
        extra = f"{best - plain:+10.1f}" if plain is not None and name != "plain" else ""
        print(f"{name:18} {best:8.1f} {statistics.median(values):7.1f}  {extra:>12}")


if __name__ == "__main__":
    main()
