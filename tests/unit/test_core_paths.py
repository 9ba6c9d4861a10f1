"""Path normalisation (table + properties), host matching, request preparation."""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from twisted.web.http_headers import Headers

from twistgw.core.plan import LocalResponse
from twistgw.config.loader import load_text
from twistgw.config.model import Route, VirtualService
from twistgw.core.paths import _ALREADY_NORMAL, BadPath, normalise_path, normalise_slowly
from twistgw.core.plugins import PluginHost
from twistgw.core.pipeline import Prepared, RequestHead, prepare, split_target
from twistgw.config.names import host_without_port, parse_host
from twistgw.core.routing import HostTable
from twistgw.core.snapshot import build_snapshot

from support.trial import TestCase, fixture

NORMALISED = [
    (b"/", "/"),
    (b"/a/b", "/a/b"),
    (b"//a///b", "/a/b"),
    (b"/a/./b", "/a/b"),
    (b"/a/../b", "/b"),
    (b"/../a", "/a"),
    (b"/../../..", "/"),
    (b"/a/b/..", "/a/"),
    (b"/a/b/.", "/a/b/"),
    (b"/a/b/", "/a/b/"),
    (b"/%2e%2e/admin", "/admin"),
    (b"/api/%2E%2e/admin", "/admin"),
    (b"/api/.%2e/admin", "/admin"),
    (b"/api/..%2fadmin", "/admin"),
    (b"/api/..%2Fadmin", "/admin"),
    (b"/api%2f..%2fadmin", "/admin"),
    (b"/a/%2f%2fb", "/a/b"),
    (b"/a%2Fb", "/a/b"),
    (b"/%7Euser", "/~user"),
    (b"/%41%62c", "/Abc"),
    (b"/a%3a", "/a%3A"),
    (b"/a%20b", "/a%20b"),
    (b"/%252e%252e/x", "/%252e%252e/x"),
    (b"/a;b=c/d", "/a;b=c/d"),
    (b"/a/..;b", "/a/..;b") if False else (b"/a/b..;c", "/a/b..;c"),
    (b"/a/...", "/a/..."),
    (b"/a:b@c!$&'()*+,=", "/a:b@c!$&'()*+,="),
    (b"*", "*"),
]

REFUSED = [
    b"", b"a/b", b"http://x/", b"/a\\b", b"/a%5cb", b"/a%5C..%5Cadmin", b"/a%00", b"/a\x00b",
    b"/a\x7f", b"/a%7f", b"/a%1f", b"/a%0d%0aSet-Cookie:x", b"/a\r\n", b"/a%", b"/a%2", b"/a%g0",
    b"/a#frag", b"/\xc3\xa9", b"/a b", b"/a\tb", b"/..;/admin", b"/api/..;x/admin", b"/.;/a",
    b'/a"b', b"/a<b>", b"/a{b}", b"/a|b", b"/a^b", b"/a`b", b"/a[b]",
]


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------

_TOKENS = [
    "/", "/", "/", ".", "..", "%2e", "%2E", "%2e%2e", ".%2e", "%2f", "%2F", "%5c", "\\", "a", "b", "api",
    "admin", "%25", "%252e", "%252f", ";", ";x=1", "%3b", "%00", "#", "%41", "~", "%7e", "%7E", " ",
    "\xe9", "%", "%zz", "%c3%a9", "-", "_", "@", ":", "%3A", "\t", "%20",
]

paths = st.lists(st.sampled_from(_TOKENS), max_size=14).map(lambda ts: ("/" + "".join(ts)).encode("latin-1"))
any_bytes = st.binary(max_size=64)


def _remove_dots(path: str) -> str:
    """RFC 3986 §5.2.4, straight from the RFC, for comparison."""
    inp, out = path, ""
    while inp:
        if inp.startswith("../"):
            inp = inp[3:]
        elif inp.startswith("./"):
            inp = inp[2:]
        elif inp.startswith("/./"):
            inp = "/" + inp[3:]
        elif inp == "/.":
            inp = "/"
        elif inp.startswith("/../"):
            inp = "/" + inp[4:]
            out = out[: out.rfind("/")] if "/" in out else ""
        elif inp == "/..":
            inp = "/"
            out = out[: out.rfind("/")] if "/" in out else ""
        elif inp in (".", ".."):
            inp = ""
        else:
            start = 1 if inp.startswith("/") else 0
            nxt = inp.find("/", start)
            seg, inp = (inp, "") if nxt == -1 else (inp[:nxt], inp[nxt:])
            out += seg
    return out


def backend_view(path: bytes) -> bytes:
    """What a backend that decodes once, merges slashes and resolves dot
    segments (and treats ``\\`` as ``/``) sees."""
    decoded = unquote_to_bytes(path).replace(b"\\", b"/")
    merged = re.sub(rb"/{2,}", b"/", decoded)
    return _remove_dots(merged.decode("latin-1")).encode("latin-1")


# ---------------------------------------------------------------------------
# Hosts
# ---------------------------------------------------------------------------


def _vs(name: str, *domains: str) -> VirtualService:
    return VirtualService("default", name, domains, ())


# ---------------------------------------------------------------------------
# prepare(): target, Host, route, context
# ---------------------------------------------------------------------------

CONFIG = """\
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: api}
spec:
  virtualHost:
    domains: [api.example.com]
    routes:
    - name: admin
      matchers: [{prefix: /admin}]
      directResponseAction: {status: 200, body: admin}
    - name: get-only
      matchers: [{prefix: /get, methods: [GET]}]
      directResponseAction: {status: 200}
    - name: exact
      matchers: [{exact: /exact}]
      directResponseAction: {status: 200}
    - name: api
      matchers: [{prefix: /api}]
      directResponseAction: {status: 200}
"""


@fixture
def snapshot():
    return build_snapshot(load_text(CONFIG), PluginHost.create(load_entry_points=False))


def run(snapshot, target: bytes, host: bytes | list[bytes] | None = b"api.example.com", method: bytes = b"GET",
        extra: list[tuple[bytes, bytes]] = ()):
    h = Headers()
    if host is not None:
        h.setRawHeaders(b"host", host if isinstance(host, list) else [host])
    for n, v in extra:
        h.addRawHeader(n, v)
    return prepare(snapshot, RequestHead(method, target, h, "192.0.2.9"))


class CorePathsTests(TestCase):
    @pytest.mark.parametrize("raw, expected", NORMALISED)
    def test_normalised(self, raw: bytes, expected: str) -> None:
        assert normalise_path(raw) == expected

    @pytest.mark.parametrize("raw", REFUSED)
    def test_refused(self, raw: bytes) -> None:
        with pytest.raises(BadPath):
            normalise_path(raw)

    @settings(max_examples=600, deadline=None)
    @given(paths)
    @example(b"/api/..%2fadmin")
    @example(b"/api/%2e%2e/admin")
    def test_idempotent(self, raw: bytes) -> None:
        try:
            once = normalise_path(raw)
        except BadPath:
            return
        assert normalise_path(once.encode("ascii")) == once

    @settings(max_examples=1500, deadline=None)
    @given(st.one_of(paths, any_bytes.map(lambda b: b"/" + b),
                     st.lists(st.sampled_from([b"/", b".", b"..", b"a", b"%2e", b"~", b";", b"-", b"%"]),
                              max_size=8).map(lambda parts: b"/" + b"".join(parts))))
    @example(b"/")
    @example(b"/a/")
    @example(b"/.well-known")
    @example(b"/a//b")
    @example(b"/-")
    def test_the_fast_path_takes_only_what_the_full_rules_leave_unchanged(self, raw: bytes) -> None:
        try:
            slow = normalise_slowly(raw)
        except BadPath:
            slow = None
        if _ALREADY_NORMAL.fullmatch(raw) is not None:
            assert slow == raw.decode("ascii")
        assert normalise_path(raw) == slow if slow is not None else True

    @settings(max_examples=600, deadline=None)
    @given(st.one_of(paths, any_bytes, any_bytes.map(lambda b: b"/" + b)))
    def test_only_bad_path_escapes(self, raw: bytes) -> None:
        try:
            result = normalise_path(raw)
        except BadPath:
            return
        assert isinstance(result, str)
        result.encode("ascii")  # always ASCII

    @settings(max_examples=800, deadline=None)
    @given(paths, st.sampled_from(["/api", "/api/", "/admin", "/a"]))
    @example(b"/api/..%2fadmin", "/api")
    @example(b"/api%2f..%2fadmin", "/api")
    @example(b"/api/%252e%252e/admin", "/api/")
    def test_never_escapes_a_prefix(self, raw: bytes, prefix: str) -> None:
        """The forwarded path is under a prefix exactly when the path the raw
    target decodes to is, and the backend, decoding once more, sees no dot
    segment, backslash or empty segment that could take it elsewhere."""
        try:
            normalised = normalise_path(raw)
        except BadPath:
            return
        forwarded = normalised.encode("ascii")
        # what the raw target "appeared to be" after decoding
        appeared = backend_view(raw)
        assert backend_view(forwarded) == appeared
        assert normalised.startswith(prefix) == appeared.decode("latin-1").startswith(prefix)
        # the backend's own decoding cannot move it: no structure hidden in escapes
        decoded = unquote_to_bytes(forwarded)
        assert b"\\" not in decoded and b"//" not in decoded
        assert not any(seg in (b".", b"..") for seg in decoded.split(b"/"))

    @pytest.mark.parametrize("raw, host", [
        ("api.example.com", "api.example.com"),
        ("API.Example.COM:8080", "api.example.com"),
        ("api.example.com.", "api.example.com"),
        ("api.example.com.:8080", "api.example.com"),
        (" api.example.com ", "api.example.com"),
        ("[::1]:8080", "[::1]"),
        ("[::1]", "[::1]"),
        ("127.0.0.1:80", "127.0.0.1"),
    ])
    def test_host_without_port(self, raw: str, host: str) -> None:
        assert host_without_port(raw) == host

    def test_host_table(self) -> None:
        table = HostTable([
            _vs("exact", "api.example.com"),
            _vs("wild", "*.example.com"),
            _vs("deeper", "*.eu.example.com"),
            _vs("any", "*"),
            _vs("late-exact", "api.example.com", "other.org"),
        ])
        name = lambda host: (table.lookup(host) or _vs("none")).name  # noqa: E731
        assert name("api.example.com") == "exact"
        assert name("other.org") == "late-exact"
        assert name("www.example.com") == "wild"
        assert name("a.b.example.com") == "wild"
        assert name("x.eu.example.com") == "deeper"  # longest suffix wins
        assert name("example.com") == "any"  # "*.example.com" needs a label before it
        assert name("evilexample.com") == "any"
        assert name("anything.else") == "any"

    def test_host_table_without_default(self) -> None:
        table = HostTable([_vs("a", "a.com"), _vs("w", "*.b.com")])
        assert table.lookup("c.com") is None
        assert table.lookup("b.com") is None
        assert table.lookup("x.b.com").name == "w"

    @pytest.mark.parametrize("target, route, path", [
        (b"/admin/x", "admin", "/admin/x"),
        (b"/api/../admin/x", "admin", "/admin/x"),
        (b"/api/%2e%2e/admin", "admin", "/admin"),
        (b"//admin", "admin", "/admin"),
        (b"/api/x?a=1&b=%2F", "api", "/api/x"),
        (b"/exact", "exact", "/exact"),
        (b"/get", "get-only", "/get"),
        (b"http://api.example.com/api/y?q", "api", "/api/y"),
    ])
    def test_prepare_routes_on_normalised_path(self, snapshot, target: bytes, route: str, path: str) -> None:
        p = run(snapshot, target)
        assert isinstance(p, Prepared), p
        assert (p.ctx.route, p.ctx.path) == (route, path)
        assert p.ctx.query == (target.partition(b"?")[2])
        assert p.ctx.host == "api.example.com" and p.ctx.client_address == "192.0.2.9"
        assert p.ctx.virtual_service == "default/api" and p.ctx.method == "GET"

    @pytest.mark.parametrize("target, method, host, status", [
        (b"/nothing", b"GET", b"api.example.com", 404),
        (b"/exact/", b"GET", b"api.example.com", 404),
        (b"/get", b"POST", b"api.example.com", 404),
        (b"/get", b"get", b"api.example.com", 404),
        (b"/admin", b"GET", b"other.example.com", 404),
        (b"/admin", b"GET", None, 400),
        (b"/admin", b"GET", [b"api.example.com", b"api.example.com"], 400),
        (b"/a%5c", b"GET", b"api.example.com", 400),
        (b"/a#b", b"GET", b"api.example.com", 400),
        (b"http://user@api.example.com/admin", b"GET", b"api.example.com", 400),
        (b"/admin", b"GET", b"api.example.com\xff", 400),
    ])
    def test_prepare_refusals(self, snapshot, target, method, host, status) -> None:
        p = run(snapshot, target, host, method)
        assert isinstance(p, LocalResponse) and p.status == status

    def test_absolute_form_target_wins_over_host_header(self, snapshot) -> None:
        p = run(snapshot, b"http://api.example.com:8080/admin", host=b"evil.example.com")
        assert isinstance(p, Prepared) and p.ctx.host == "api.example.com" and p.ctx.route == "admin"
        p = run(snapshot, b"HTTP://evil.example.com/admin", host=b"api.example.com")
        assert isinstance(p, LocalResponse) and p.status == 404

    def test_prepare_host_port_and_case_ignored(self, snapshot) -> None:
        p = run(snapshot, b"/admin", host=b"API.EXAMPLE.COM:443")
        assert isinstance(p, Prepared) and p.ctx.route == "admin"

    def test_prepare_strips_hop_by_hop_headers(self, snapshot) -> None:
        p = run(snapshot, b"/admin", extra=[
            (b"connection", b"keep-alive, X-Secret-Hop"), (b"x-secret-hop", b"1"), (b"keep-alive", b"300"),
            (b"te", b"trailers"), (b"upgrade", b"websocket"), (b"proxy-authorization", b"Basic x"),
            (b"proxy-connection", b"keep-alive"), (b"trailer", b"x"), (b"transfer-encoding", b"chunked"),
            (b"x-keep", b"a"), (b"x-keep", b"b")])
        assert isinstance(p, Prepared)
        names = sorted(n.lower() for n, _ in p.ctx.headers.getAllRawHeaders())
        assert names == [b"host", b"x-keep"]
        assert p.ctx.headers.getRawHeaders(b"x-keep") == [b"a", b"b"]

    @pytest.mark.parametrize("target, authority, path, query", [
        (b"/a?b", None, b"/a", b"b"),
        (b"http://h:1/a/b?c=d", b"h:1", b"/a/b", b"c=d"),
        (b"http://h?x", b"h", b"/", b"x"),
        (b"https://h", b"h", b"/", b""),
    ])
    def test_split_target(self, target, authority, path, query) -> None:
        assert split_target(target) == (authority, path, query)

    def test_route_model_matching(self) -> None:
        from twistgw.config.model import Matcher

        r = Route("r", 0, (Matcher(prefix="/api"), Matcher(exact="/x", methods=("POST",))), None)
        assert r.matches("GET", "/api") and r.matches("GET", "/apix") and r.matches("POST", "/x")
        assert not r.matches("GET", "/x") and not r.matches("GET", "/ap")

    def test_host_table_resolve_remembers_a_bounded_number_of_host_values(self) -> None:
        table = HostTable([_vs("a", "a.com"), _vs("w", "*.b.com"), _vs("d", "*")])
        for raw in (b"A.com:8080", b"x.b.com", b"x.b.com.", b"x.b.com.:80", b"[::1]:80", b"other"):
            expected = parse_host(raw)
            assert expected == host_without_port(raw.decode())
            assert table.resolve(raw) == (expected, table.lookup(expected))
            assert table.resolve(raw) == (expected, table.lookup(expected))  # remembered
        for i in range(5000):  # client-chosen values must not grow memory without bound
            table.resolve(b"h%d.example" % i)
        assert len(table._by_header) <= 1024
        assert table.resolve("é.com".encode()) == (None, None)
        assert table.resolve(b"u@a.com") == (None, None)
