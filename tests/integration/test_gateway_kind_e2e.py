"""Gloo ``Gateway`` resources through a real ``twist twistgw`` on loopback:
listeners open at start and follow reloads (added, removed, moved), which
virtual services each serves, a taken port at start (exit 3) and on reload
(the last good configuration keeps serving), the PROXY protocol (v1 and
v2), X-Forwarded-For with 0, 1 and 2 trusted hops (what the backend sees,
and the rate-limit bucket by address, in a real Redis), and
``httpLocalRatelimit``'s default bucket and its overrides (also as Gloo's
local rate limiting guide writes them, ``ratelimit.localRatelimit``).

Blocking helpers (processes, threads): plain synchronous tests.
"""

from __future__ import annotations

import http.client
import http.server
import json
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from support.process import TwistGateway, free_port, twist_command
from support.redis import RedisServer
from twistgw.runtime.listeners import EXIT_CANNOT_LISTEN

NS = "gloo-system"


class _Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def backend() -> Iterator[int]:
    """A threaded HTTP server answering with the request headers it got (JSON)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def taken() -> Iterator[int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    yield s.getsockname()[1]
    s.close()


def upstream(port: int) -> dict[str, Any]:
    return {"apiVersion": "gloo.solo.io/v1", "kind": "Upstream", "metadata": {"name": "echo", "namespace": NS},
            "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": port}]}}}


def vs(name: str, domains: list[str], body: str | None = None, labels: dict[str, str] | None = None,
       options: dict[str, Any] | None = None, routes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A VirtualService answering ``body`` (a direct response) or forwarding to ``echo``."""
    action: dict[str, Any] = ({"directResponseAction": {"status": 200, "body": body}} if body is not None
                              else {"routeAction": {"single": {"upstream": {"name": "echo", "namespace": NS}}}})
    vh: dict[str, Any] = {"domains": domains, "routes": routes or [{"matchers": [{"prefix": "/"}], **action}]}
    if options:
        vh["options"] = options
    return {"apiVersion": "gateway.solo.io/v1", "kind": "VirtualService",
            "metadata": {"name": name, "namespace": NS, "labels": labels or {}}, "spec": {"virtualHost": vh}}


def gateway(name: str, port: int, http: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "gateway.solo.io/v1", "kind": "Gateway", "metadata": {"name": name, "namespace": NS},
            "spec": {"bindAddress": "127.0.0.1", "bindPort": port, "httpGateway": http or {}, **spec}}


def write(directory: Path, documents: list[dict[str, Any]]) -> str:
    directory.mkdir(exist_ok=True)
    tmp = directory / ".gw.yaml.tmp"
    tmp.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    tmp.replace(directory / "gw.yaml")
    return str(directory)


def request(port: int, host: str = "a.example", headers: dict[str, str] | None = None,
            path: str = "/") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": host, **(headers or {})})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def eventually(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


def gateway_process(tmp_path: Path, directory: str) -> TwistGateway:
    """``--listen`` on a port of its own (serving every virtual service)
    beside the Gateways' listeners; reloads every 0.1 s."""
    return TwistGateway(tmp_path, directory, args=("--poll-interval", "0.1"))


def test_listeners_follow_reloads(tmp_path: Path) -> None:
    one, two, three = free_port(), free_port(), free_port()
    d = tmp_path / "config"
    base = [vs("a", ["a.example"], body="A")]
    directory = write(d, base + [gateway("one", one)])
    with gateway_process(tmp_path, directory) as gw:
        assert request(one)[2] == b"A" and request(gw.port)[2] == b"A"
        assert not listening(two)
        write(d, base + [gateway("one", one), gateway("two", two)])  # added
        eventually(lambda: listening(two))
        assert request(two)[2] == b"A"
        write(d, base + [gateway("two", two)])  # removed
        eventually(lambda: not listening(one))
        write(d, base + [gateway("two", three)])  # moved
        eventually(lambda: listening(three))
        eventually(lambda: not listening(two))
        assert request(three)[2] == b"A"
        assert request(gw.port)[2] == b"A"  # --listen serves throughout
        log = gw.log_text()  # JSON lines: the message's fields apart
        assert "Closing the listener of {what}" in log and '"what": "Gateway gloo-system/one"' in log


def test_a_removed_gateway_drains_a_request_in_flight(tmp_path: Path, backend: int) -> None:
    """An idle keep-alive connection is closed; the listener stops accepting."""
    port = free_port()
    d = tmp_path / "config"
    base = [upstream(backend), vs("a", ["a.example"])]
    with gateway_process(tmp_path, write(d, base + [gateway("one", port)])) as gw:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/", headers={"Host": "a.example"})
        assert conn.getresponse().read()
        write(d, base)
        eventually(lambda: not listening(port))
        gw.wait_log('"what": "Gateway gloo-system/one"')
        sock = conn.sock
        assert sock is not None
        sock.settimeout(5)
        assert sock.recv(1) == b""  # the idle keep-alive connection was closed
        conn.close()


def test_which_virtual_services_each_gateway_serves(tmp_path: Path) -> None:
    pub, ref, listen_all = free_port(), free_port(), None
    docs = [vs("pub-a", ["a.example"], body="pub-a", labels={"team": "pub"}),
            vs("int", ["i.example"], body="int"),
            gateway("public", pub, {"virtualServiceSelector": {"team": "pub"}}),
            gateway("internal", ref, {"virtualServices": [{"name": "int", "namespace": NS}]})]
    with gateway_process(tmp_path, write(tmp_path / "config", docs)) as gw:
        listen_all = gw.port
        assert request(pub, "a.example")[2] == b"pub-a"
        assert request(pub, "i.example")[0] == 404
        assert request(ref, "i.example")[2] == b"int"
        assert request(ref, "a.example")[0] == 404
        assert request(listen_all, "a.example")[2] == b"pub-a"  # --listen: every virtual service
        assert request(listen_all, "i.example")[2] == b"int"


def _twist(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd, cwd = twist_command(tmp_path)
    return subprocess.run(cmd + list(args), cwd=cwd, capture_output=True, text=True, timeout=60)


def test_a_taken_port_at_start_exits_3_with_one_line(tmp_path: Path, taken: int) -> None:
    free = free_port()
    directory = write(tmp_path / "config", [vs("a", ["*"], body="A"), gateway("fine", free),
                                            gateway("busy", taken)])
    out = _twist(tmp_path, "--config", directory, "--admin", "none")
    assert out.returncode == EXIT_CANNOT_LISTEN, out
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [f"twistgw: cannot listen on Gateway {NS}/busy (127.0.0.1:{taken}): address already in use"]
    assert "Traceback" not in out.stdout + out.stderr
    assert not listening(free)  # all or nothing


def test_without_listen_the_gateways_say_where_to_listen(tmp_path: Path) -> None:
    """No --listen: no tcp:8080 beside the Gateways' listeners."""
    port = free_port()
    directory = write(tmp_path / "config", [vs("a", ["*"], body="A"), gateway("only", port)])
    cmd, cwd = twist_command(tmp_path)
    log = tmp_path / "only.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd + ["--config", directory, "--admin", "none"], cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        eventually(lambda: listening(port), 30)
        # the log line may reach the file a moment after the socket listens
        eventually(lambda: '"listen": "Gateway gloo-system/only"' in log.read_text(), 10)
        assert "tcp:8080" not in log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_taken_port_on_reload_keeps_the_last_good_config(tmp_path: Path, taken: int) -> None:
    port = free_port()
    d = tmp_path / "config"
    with gateway_process(tmp_path, write(d, [vs("a", ["*"], body="old"), gateway("one", port)])) as gw:
        write(d, [vs("a", ["*"], body="new"), gateway("one", port), gateway("busy", taken)])
        text = gw.wait_log("Configuration change rejected")
        assert f"cannot listen on Gateway {NS}/busy (127.0.0.1:{taken}): address already in use" in text
        assert request(port)[2] == b"old" and request(gw.port)[2] == b"old"
        write(d, [vs("a", ["*"], body="new"), gateway("one", port)])  # fixed: serves
        eventually(lambda: request(port)[2] == b"new")


def _proxy_v2(source: str, port: int) -> bytes:
    addresses = socket.inet_aton(source) + socket.inet_aton("127.0.0.1") + struct.pack("!HH", 40000, port)
    return b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack("!H", len(addresses)) + addresses


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def test_proxy_protocol_v1_and_v2(tmp_path: Path, backend: int) -> None:
    port = free_port()
    docs = [upstream(backend), vs("a", ["*"]), gateway("behind-lb", port, useProxyProto=True)]
    get = b"GET / HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n"
    with gateway_process(tmp_path, write(tmp_path / "config", docs)) as gw:
        v1 = _raw(port, b"PROXY TCP4 203.0.113.7 127.0.0.1 56324 %d\r\n" % port + get)
        assert v1.startswith(b"HTTP/1.1 200")
        seen = json.loads(v1.split(b"\r\n\r\n", 1)[1])
        assert seen["x-forwarded-for"] == "203.0.113.7" and seen["x-real-ip"] == "203.0.113.7"
        v2 = _raw(port, _proxy_v2("198.51.100.9", port) + get)
        assert json.loads(v2.split(b"\r\n\r\n", 1)[1])["x-forwarded-for"] == "198.51.100.9"
        assert _raw(port, get) == b""  # no header: closed, nothing answered
        assert _raw(port, b"PROXY TCP4 nonsense\r\n" + get) == b""
        gw.wait_log('"client": "203.0.113.7"')  # the access log's client
        # the --listen endpoint reads no header
        assert request(gw.port)[0] == 200


XFF = "6.6.6.6, 7.7.7.7"


@pytest.mark.parametrize("hcm, client, sent", [
    (None, "127.0.0.1", "127.0.0.1"),
    ({"xffNumTrustedHops": 0}, "127.0.0.1", f"{XFF}, 127.0.0.1"),
    ({"xffNumTrustedHops": 1}, "7.7.7.7", f"{XFF}, 127.0.0.1"),
    ({"xffNumTrustedHops": 2}, "6.6.6.6", f"{XFF}, 127.0.0.1"),
    ({"xffNumTrustedHops": 1, "skipXffAppend": True}, "7.7.7.7", XFF),
    ({"useRemoteAddress": False}, "7.7.7.7", XFF),
], ids=["twistgw-default", "hops-0", "hops-1", "hops-2", "skip-append", "internal"])
def test_what_the_backend_sees(tmp_path: Path, backend: int, hcm: dict[str, Any] | None, client: str,
                               sent: str) -> None:
    port = free_port()
    http_gw = {"options": {"httpConnectionManagerSettings": hcm}} if hcm is not None else {}
    docs = [upstream(backend), vs("a", ["*"]), gateway("edge", port, http_gw)]
    with gateway_process(tmp_path, write(tmp_path / "config", docs)) as gw:
        status, _, body = request(port, headers={"X-Forwarded-For": XFF, "X-Real-IP": "9.9.9.9"})
        seen = json.loads(body)
        assert status == 200 and seen["x-forwarded-for"] == sent and seen["x-real-ip"] == client
        gw.wait_log(f'"client": "{client}"')


def _limited(port: int, xff: str) -> int:
    return request(port, headers={"X-Forwarded-For": xff})[0]


def test_rate_limit_by_address_follows_the_trusted_hops(tmp_path: Path) -> None:
    """``ratelimitBasic.anonymousLimits`` counts by client address: with 0
    trusted hops a forged X-Forwarded-For never picks the bucket; with 1,
    the address the trusted proxy appended does."""
    hop0, hop1 = free_port(), free_port()
    with RedisServer(tmp_path / "redis") as redis:
        left = 3600 - time.time() % 3600
        if left < 30:
            time.sleep(left + 0.1)
        settings = {"apiVersion": "gateway.vendor.io/v1", "kind": "Settings",
                    "metadata": {"name": "default", "namespace": NS},
                    "spec": {"ratelimitServer": {"redis": {"address": redis.address}}}}
        limit = {"ratelimitBasic": {"anonymousLimits": {"requestsPerUnit": 2, "unit": "HOUR"}}}
        docs = [settings, vs("a", ["*"], body="ok", options=limit),
                gateway("hops-0", hop0, {"options": {"httpConnectionManagerSettings": {"xffNumTrustedHops": 0}}}),
                gateway("hops-1", hop1, {"options": {"httpConnectionManagerSettings": {"xffNumTrustedHops": 1}}})]
        with gateway_process(tmp_path, write(tmp_path / "config", docs)):
            assert [_limited(hop0, f"203.0.113.{i}") for i in range(4)] == [200, 200, 429, 429]
            assert [_limited(hop1, f"198.51.100.{i}") for i in range(4)] == [200, 200, 200, 200]
            assert [_limited(hop1, "192.0.2.1, 198.51.100.50") for _ in range(3)] == [200, 200, 429]
            keys = redis.command("KEYS", "twistgw:rl:*")
            assert "ip=127.0.0.1|" in keys and "ip=198.51.100.50|" in keys
            assert "203.0.113" not in keys and "192.0.2.1|" not in keys


def test_http_local_ratelimit_default_and_overrides(tmp_path: Path) -> None:
    limited, free = free_port(), free_port()
    default = {"httpLocalRatelimit": {"defaultLimit": {"maxTokens": 3, "tokensPerFill": 1, "fillInterval": "100s"},
                                      "enableXRatelimitHeaders": True}}
    routes = [{"matchers": [{"prefix": "/own"}], "directResponseAction": {"status": 200, "body": "own"},
               "options": {"localRatelimit": {"maxTokens": 5, "tokensPerFill": 1, "fillInterval": "100s"}}},
              {"matchers": [{"prefix": "/"}], "directResponseAction": {"status": 200, "body": "shared"}}]
    docs = [vs("a", ["a.example"], routes=routes),
            vs("b", ["b.example"], body="vh", options={"localRatelimit": {"maxTokens": 1, "fillInterval": "100s"}}),
            vs("c", ["c.example"], body="c"),
            gateway("limited", limited, {"options": default}), gateway("free", free)]
    with gateway_process(tmp_path, write(tmp_path / "config", docs)):
        # one bucket for the Gateway, shared by every route without its own
        found = [request(limited, "a.example", path="/x")[0], request(limited, "c.example")[0],
                 request(limited, "a.example", path="/y")[0], request(limited, "c.example")[0]]
        assert found == [200, 200, 200, 429]
        status, headers, _ = request(limited, "c.example")
        assert status == 429 and headers["x-envoy-ratelimited"] == "true"
        assert headers["x-ratelimit-limit"] == "3" and headers["x-ratelimit-remaining"] == "0"
        # a route's own localRatelimit replaces the default
        assert [request(limited, "a.example", path="/own")[0] for _ in range(6)] == [200] * 5 + [429]
        # so does the virtual host's
        assert [request(limited, "b.example")[0] for _ in range(2)] == [200, 429]
        # a Gateway without httpLocalRatelimit: no default bucket
        assert [request(free, "c.example")[0] for _ in range(5)] == [200] * 5


#: Gloo's local rate limiting guide (guides/security/local_rate_limiting/http.md,
#: "Different local rate limit settings on the gateway and virtual service"):
#: its Gateway and VirtualService as written there, but for the address, the
#: port and where the httpbin upstream is
GLOO_LOCAL_GUIDE = """\
apiVersion: gateway.solo.io/v1
kind: Gateway
metadata:
  name: gateway-proxy
  namespace: gloo-system
spec:
  bindAddress: '127.0.0.1'
  bindPort: {port}
  httpGateway:
    options:
      httpLocalRatelimit:
        defaultLimit:
          maxTokens: 1
          tokensPerFill: 1
          fillInterval: 100s
        enableXRatelimitHeaders: true
  ssl: false
  useProxyProto: false
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata:
  name: httpbin
  namespace: gloo-system
spec:
  virtualHost:
    domains:
    - '*'
    routes:
    - matchers:
      - prefix: /status/200
      routeAction:
        single:
          upstream:
            name: default-httpbin-8000
            namespace: gloo-system
    - matchers:
      - prefix: /ip
      routeAction:
        single:
          upstream:
            name: default-httpbin-8000
            namespace: gloo-system
    - matchers:
      - prefix: /headers
      options:
        ratelimit:
          localRatelimit:
            maxTokens: 3
            tokensPerFill: 3
            fillInterval: 30s
      routeAction:
        single:
          upstream:
            name: default-httpbin-8000
            namespace: gloo-system
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata:
  name: default-httpbin-8000
  namespace: gloo-system
spec:
  static:
    hosts:
    - addr: 127.0.0.1
      port: {backend}
"""


def test_gloo_local_rate_limiting_guide(tmp_path: Path, backend: int) -> None:
    """The guide's outcomes: /status/200 and /ip share the Gateway's bucket
    of one token (the second request is refused, with the x-ratelimit
    headers); /headers has its own bucket of three (Gloo's
    ``ratelimit.localRatelimit`` on the route)."""
    port = free_port()
    directory = tmp_path / "config"
    directory.mkdir()
    (directory / "guide.yaml").write_text(GLOO_LOCAL_GUIDE.format(port=port, backend=backend))
    with gateway_process(tmp_path, str(directory)):
        status, headers, _ = request(port, path="/status/200")
        assert status == 200 and headers["x-ratelimit-limit"] == "1" and headers["x-ratelimit-remaining"] == "0"
        status, headers, body = request(port, path="/status/200")
        assert (status, headers["x-envoy-ratelimited"], body) == (429, "true", b"local_rate_limited")
        assert request(port, path="/ip")[0] == 429
        found = [request(port, path="/headers") for _ in range(4)]
        assert [s for s, _, _ in found] == [200, 200, 200, 429]
        assert "x-ratelimit-limit" not in found[0][1]  # the route's bucket: no headers without Settings' switch
        assert found[3][2] == b"local_rate_limited"


def _closed_after(port: int, data: bytes = b"") -> float:
    """Seconds until the gateway closes a connection that sent ``data`` and then nothing."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        if data:
            s.sendall(data)
        while s.recv(65536):
            pass
    return time.monotonic() - start


def test_server_name_and_timeouts_per_gateway(tmp_path: Path, backend: int) -> None:
    port = free_port()
    hcm = {"serverName": "edge-1", "idleTimeout": "1s", "requestHeadersTimeout": "1s"}
    docs = [upstream(backend), vs("a", ["*"]),
            gateway("edge", port, {"options": {"httpConnectionManagerSettings": hcm}})]
    with gateway_process(tmp_path, write(tmp_path / "config", docs)) as gw:
        status, headers, _ = request(port)
        assert status == 200 and headers["server"] == "edge-1"  # the backend's own Server replaced
        assert request(port, path="/", host="a.example")[1]["server"] == "edge-1"
        assert "edge-1" not in request(gw.port)[1].get("server", "")  # --listen: the backend's
        assert 0.8 < _closed_after(port) < 5  # idle: idleTimeout 1s
        assert 0.8 < _closed_after(port, b"GET / HTTP/1.1\r\nHost: a") < 5  # a head never finished


def test_workers_refuse_gateways_with_the_reason(tmp_path: Path) -> None:
    directory = write(tmp_path / "config", [vs("a", ["*"], body="A"), gateway("one", free_port())])
    out = _twist(tmp_path, "--config", directory, "--admin", "none", "--workers", "2",
                 "--listen", f"tcp:{free_port()}:interface=127.0.0.1")
    assert out.returncode == 2, out
    assert "Gateway resources are not supported with --workers yet" in out.stderr
    assert "Traceback" not in out.stdout + out.stderr
