"""The core's header policy (issue 13, point 8): Host validation, what a
client's request may tell the backend, HTTP/1.0 without Host."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.web.http_headers import Headers

from twistgw.config.loader import load_text
from twistgw.config.names import parse_host
from twistgw.core.headers import copy_end_to_end, copy_request_headers, end_to_end_lines
from twistgw.core.pipeline import Pipeline, Prepared, RequestHead, prepare
from twistgw.core.plan import Forward, LocalResponse
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot

from support.trial import TestCase, fixture

CONFIG = """\
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {name: backend}
spec: {static: {hosts: [{addr: 127.0.0.1, port: 9}]}}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: api}
spec:
  virtualHost:
    domains: [api.example.com, "[::1]", 10.0.0.1]
    routes:
    - matchers: [{prefix: /}]
      routeAction: {single: {upstream: {name: backend}}}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: fallback}
spec:
  virtualHost:
    domains: ["*"]
    routes:
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200, body: fallback}
"""


@fixture
def snapshot():
    return build_snapshot(load_text(CONFIG), PluginHost.create(load_entry_points=False))


def run(snapshot, host: bytes | None, target: bytes = b"/x", version: bytes = b"HTTP/1.1",
        extra: list[tuple[bytes, bytes]] = ()):
    h = Headers()
    if host is not None:
        h.setRawHeaders(b"host", [host])
    for n, v in extra:
        h.addRawHeader(n, v)
    return prepare(snapshot, RequestHead(b"GET", target, h, "192.0.2.9", version=version))


# ---------------------------------------------------------------------------
# What a client's request may tell the backend
# ---------------------------------------------------------------------------

def _names(p: Prepared) -> list[bytes]:
    return sorted(n.lower() for n, _ in p.ctx.headers.getAllRawHeaders())


class HeaderPolicyTests(TestCase):
    # ---------------------------------------------------------------------------
    # Host: uri-host [ ":" port ]
    # ---------------------------------------------------------------------------

    @pytest.mark.parametrize("raw, host", [
        (b"api.example.com", "api.example.com"),
        (b"API.Example.COM:8080", "api.example.com"),
        (b"api.example.com.", "api.example.com"),
        (b"api.example.com.:80", "api.example.com"),
        (b"api.example.com:", "api.example.com"),  # RFC 3986: port = *DIGIT
        (b"10.0.0.1:80", "10.0.0.1"),
        (b"[::1]", "[::1]"),
        (b"[::1]:8080", "[::1]"),
        (b"[::1]:", "[::1]"),
        (b"[2001:DB8::1]:443", "[2001:db8::1]"),
        (b"my_host~1", "my_host~1"),
    ])
    def test_parse_host_accepts(self, raw: bytes, host: str) -> None:
        assert parse_host(raw) == host

    @pytest.mark.parametrize("raw", [
        b"user@api.example.com", b"user:pw@api.example.com", b"@api.example.com",
        b"api.example.com,evil.example.com", b"api.example.com, evil.example.com",
        b"api.example.com/admin", b"api.example.com/", b"/", b"api.example.com?x", b"api.example.com#x",
        b'"api.example.com"', b"'api.example.com'", b"api.example.com\\evil", b"api.example.com\\",
        b"api example.com", b"api.example.com\t", b"api%2Eexample.com", b"api.example.com;x",
        b"a!b", b"a$b", b"a&b", b"a(b)", b"a*b", b"a+b", b"a=b", b"<a>", b"{a}", b"a|b", b"a^b", b"a`b",
        b"api..example.com", b".api.example.com", b".", b"..", b":80", b"api.example.com:80:80",
        b"api.example.com:http", b"api.example.com:-1", b"api.example.com:65536", b"api.example.com:123456",
        b"::1", b"[::1", b"::1]", b"[::1]x", b"[::1]:x", b"[::1]:99999", b"[fe80::1%25eth0]", b"[v1.x]",
        b"[not-ip]", b"[1.2.3.4]", b"api.example.com\x00", b"api.example.com\r", "é.example.com".encode(),
        b"\xffhost", b"",
    ])
    def test_parse_host_refuses(self, raw: bytes) -> None:
        assert parse_host(raw) is None

    @settings(deadline=None)
    @given(st.binary(max_size=40))
    def test_parse_host_never_raises_and_accepts_only_safe_characters(self, raw: bytes) -> None:
        host = parse_host(raw)
        if host is not None:
            assert all(c.isalnum() or c in "._~-[]:" for c in host)
            assert "@" not in host and "," not in host and "/" not in host

    @pytest.mark.parametrize("host", [
        b"user@api.example.com", b"api.example.com,evil", b"api.example.com/x", b'"api.example.com"',
        b"api.example.com\\x", b"api.example.com:99999", "é".encode(),
    ])
    def test_invalid_host_is_400(self, snapshot, host: bytes) -> None:
        p = run(snapshot, host)
        assert isinstance(p, LocalResponse) and p.status == 400
        assert b"not a valid host[:port]" in p.body

    @pytest.mark.parametrize("target", [b"http://api.example.com,evil/x", b"http:///x", b"http://:80/x",
                                        b"http://api.example.com:99999999/x"])
    def test_invalid_authority_in_absolute_form_is_400(self, snapshot, target: bytes) -> None:
        p = run(snapshot, b"api.example.com", target=target)
        assert isinstance(p, LocalResponse) and p.status == 400

    def test_empty_host_is_400(self, snapshot) -> None:
        for version in (b"HTTP/1.1", b"HTTP/1.0"):
            p = run(snapshot, b"", version=version)
            assert isinstance(p, LocalResponse) and p.status == 400

    @pytest.mark.parametrize("host", [b"api.example.com.", b"api.example.com.:80", b"API.example.com.:8080",
                                      b"[::1]:80", b"10.0.0.1."])
    def test_trailing_dot_and_port_route_like_the_host(self, snapshot, host: bytes) -> None:
        p = run(snapshot, host)
        assert isinstance(p, Prepared) and p.ctx.virtual_service == "default/api"
        # the backend sees the Host the client sent (decisions: Host forwarded unchanged)
        assert p.ctx.headers.getRawHeaders(b"host") == [host]

    # ---------------------------------------------------------------------------
    # HTTP/1.0 without Host
    # ---------------------------------------------------------------------------

    def test_http10_without_host_is_served_by_the_star_virtual_service(self, snapshot) -> None:
        p = run(snapshot, None, version=b"HTTP/1.0")
        assert isinstance(p, Prepared) and p.ctx.virtual_service == "default/fallback"
        assert p.ctx.host == ""

    def test_http11_without_host_is_still_400(self, snapshot) -> None:
        p = run(snapshot, None)
        assert isinstance(p, LocalResponse) and p.status == 400 and b"Host header is required" in p.body

    def test_http10_without_host_and_without_star_is_404(self) -> None:
        snap = build_snapshot(load_text(CONFIG.split("---\n")[0] + "---\n" + CONFIG.split("---\n")[1]),
                              PluginHost.create(load_entry_points=False))
        p = run(snap, None, version=b"HTTP/1.0")
        assert isinstance(p, LocalResponse) and p.status == 404

    def test_pipeline_passes_the_heads_version(self, snapshot) -> None:
        pipeline = Pipeline(PluginHost.create(load_entry_points=False))
        plan = pipeline.handle(RequestHead(b"GET", b"/", Headers(), "192.0.2.1", version=b"HTTP/1.0"), snapshot)
        assert isinstance(plan, LocalResponse) and plan.status == 200 and plan.body == b"fallback"
        plan = pipeline.handle(RequestHead(b"GET", b"/", Headers(), "192.0.2.1"), snapshot)
        assert isinstance(plan, LocalResponse) and plan.status == 400

    @pytest.mark.parametrize("listed", [b"Host", b"host", b"close, Host", b"keep-alive,HOST ,x"])
    def test_connection_cannot_drop_host(self, snapshot, listed: bytes) -> None:
        p = run(snapshot, b"api.example.com", extra=[(b"connection", listed)])
        assert isinstance(p, Prepared)
        assert p.ctx.headers.getRawHeaders(b"host") == [b"api.example.com"]

    def test_connection_still_drops_the_other_headers_it_names(self, snapshot) -> None:
        p = run(snapshot, b"api.example.com", extra=[(b"connection", b"host, x-hop"), (b"x-hop", b"1"),
                                                     (b"x-keep", b"2")])
        assert _names(p) == [b"host", b"x-keep"]

    @pytest.mark.parametrize("name", [b"X-HTTP-Method-Override", b"x-http-method-override", b"X-Method-Override",
                                      b"X-HTTP-Method"])
    def test_method_override_headers_are_removed(self, snapshot, name: bytes) -> None:
        p = run(snapshot, b"api.example.com", extra=[(name, b"DELETE")])
        assert _names(p) == [b"host"]

    @pytest.mark.parametrize("name", [b"x_user", b"X_User", b"_", b"x-auth_groups", b"HTTP_X_USER"])
    def test_header_names_with_underscores_are_dropped(self, snapshot, name: bytes) -> None:
        p = run(snapshot, b"api.example.com", extra=[(name, b"admin"), (b"x-user", b"alice")])
        assert _names(p) == [b"host", b"x-user"]
        assert p.ctx.headers.getRawHeaders(b"x-user") == [b"alice"]

    @pytest.mark.parametrize("name", [b"Forwarded", b"X-Real-IP", b"X-Forwarded-For", b"X-Forwarded-Proto",
                                      b"X-Forwarded-Host", b"X-Forwarded-Port", b"X-Forwarded-Prefix"])
    def test_client_forwarding_headers_are_not_taken(self, snapshot, name: bytes) -> None:
        p = run(snapshot, b"api.example.com", extra=[(name, b"for=10.6.6.6;host=evil")])
        assert _names(p) == [b"host"]

    def test_forward_plan_sets_the_gateways_forwarding_headers(self, snapshot) -> None:
        pipeline = Pipeline(PluginHost.create(load_entry_points=False))
        h = Headers({b"host": [b"api.example.com"], b"x-real-ip": [b"10.6.6.6"], b"forwarded": [b"for=10.6.6.6"],
                     b"x-forwarded-for": [b"10.6.6.6"], b"x-forwarded-host": [b"evil"]})
        plan = pipeline.handle(RequestHead(b"GET", b"/x", h, "192.0.2.7", "https"), snapshot)
        assert isinstance(plan, Forward)
        sent = {n.lower(): v for n, v in plan.headers.getAllRawHeaders()}
        assert sent == {b"host": [b"api.example.com"], b"x-forwarded-for": [b"192.0.2.7"],
                        b"x-forwarded-proto": [b"https"], b"x-real-ip": [b"192.0.2.7"]}
        # plugins read it under any spelling
        assert plan.headers.getRawHeaders(b"X-Real-IP") == [b"192.0.2.7"]

    def test_responses_keep_what_only_requests_lose(self) -> None:
        # the request policy is not applied to responses: a backend may answer
        # with X-Real-IP or an underscore header (nginx, too, passes them back)
        incoming = Headers({b"x_debug": [b"1"], b"x-real-ip": [b"1.2.3.4"], b"connection": [b"x-hop"],
                            b"x-hop": [b"1"], b"keep-alive": [b"5"]})
        out: dict[bytes, list[bytes]] = {}
        copy_end_to_end(incoming, out)
        assert sorted(n.lower() for n in out) == [b"x-real-ip", b"x_debug"]
        out = {}
        copy_request_headers(incoming, out)
        assert out == {}

    def test_request_verdicts_are_the_same_once_remembered(self) -> None:
        # copy_request_headers remembers each name's fixed verdict: the
        # second request with the same names must be treated exactly as the
        # first (and an unseen spelling as its lower-case twin).
        incoming = Headers({b"X_Debug": [b"1"], b"X-Forwarded-Host": [b"evil"], b"Te": [b"trailers"],
                            b"X-Method-Override": [b"DELETE"], b"Accept": [b"*/*"],
                            b"Connection": [b"x-named, HOST"], b"X-Named": [b"1"], b"Host": [b"h"]})
        for _ in range(3):
            out: dict[bytes, list[bytes]] = {}
            copy_request_headers(incoming, out)
            assert sorted(n.lower() for n in out) == [b"accept", b"host"]
        out = {}
        copy_request_headers(Headers({b"X-NAMED": [b"1"], b"x-named": [b"2"]}), out)
        assert sorted(n.lower() for n in out) == [b"x-named"]

    @pytest.mark.parametrize("connection, kept", [
        ([], [b"Server", b"X-Hop"]),
        ([b"keep-alive"], [b"Server", b"X-Hop"]),
        ([b"Keep-Alive"], [b"Server", b"X-Hop"]),
        ([b"close"], [b"Server", b"X-Hop"]),
        ([b"x-hop"], [b"Server"]),
        ([b"keep-alive, X-Hop"], [b"Server"]),
        ([b"keep-alive", b"x-hop"], [b"Server"]),
        ([b"server", b"close"], [b"X-Hop"]),
    ])
    def test_response_lines_drop_what_connection_names(self, connection: list[bytes],
                                                       kept: list[bytes]) -> None:
        pairs = [(b"Server", b"s"), (b"X-Hop", b"1 "), (b"Keep-Alive", b"timeout=5"),
                 (b"Content-Length", b"3")] + [(b"Connection", c) for c in connection]
        hop: dict[bytes, bytes] = {}
        lines = end_to_end_lines(pairs, hop)
        assert [line.split(b":")[0] for line in lines] == kept
        assert all(line.endswith(b"\r\n") and b" \r" not in line for line in lines)
        assert hop == {b"keep-alive": b"timeout=5", b"content-length": b"3"}
