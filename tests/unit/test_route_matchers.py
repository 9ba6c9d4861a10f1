"""Route matchers as Gloo Edge defines them: prefix, exact, regex (linear
time), caseSensitive, headers, queryParameters, methods; several matchers
on one route are alternatives (OR), the conditions of one matcher all hold
(AND)."""

from __future__ import annotations

import textwrap
import time

import pytest

from twistgw.config.loader import ConfigError, load_text
from twistgw.sdk.testing import ChainTester

from support.trial import TestCase

HEAD = """\
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: m}
spec:
  virtualHost:
    routes:
"""


def make_tester(routes: str) -> ChainTester:
    return ChainTester.from_yaml(HEAD + textwrap.indent(textwrap.dedent(routes), "    "), [])


def route_yaml(name: str, matchers: str) -> str:
    return f"- name: {name}\n  matchers: {matchers}\n  directResponseAction: {{status: 200, body: {name}}}\n"


async def chosen(t: ChainTester, method: str, target: str, headers: dict | None = None) -> str | None:
    result = await t.request(method, "http://h" + target, headers)
    if result.status == 404:
        return None
    return result.body.decode()


class RouteMatchersTests(TestCase):
    async def test_path_matchers_and_case(self):
        t = make_tester(
            route_yaml("exact", "[{exact: /pets}]")
            + route_yaml("regex", "[{regex: '/pets/[0-9]+'}]")
            + route_yaml("nocase", "[{prefix: /Store, caseSensitive: false}]")
            + route_yaml("prefix", "[{prefix: /pets}]")
        )
        assert await chosen(t, "GET", "/pets") == "exact"
        assert await chosen(t, "GET", "/pets/12") == "regex"
        assert await chosen(t, "GET", "/pets/12/x") == "prefix"  # a regex matches the whole path
        assert await chosen(t, "GET", "/pets/x") == "prefix"
        assert await chosen(t, "GET", "/STORE/a") == "nocase"
        assert await chosen(t, "GET", "/store") == "nocase"
        assert await chosen(t, "GET", "/PETS") is None  # case-sensitive by default
        assert await chosen(t, "GET", "/pets?x=1") == "exact"  # the query is not part of the path

    async def test_headers_query_and_methods(self):
        t = make_tester(
            route_yaml("both", "[{prefix: /, headers: [{name: x-a, value: '1'}], queryParameters: [{name: q, value: v}]}]")
            + route_yaml("hdr-regex", "[{prefix: /, headers: [{name: x-ver, value: 'v[0-9]+', regex: true}]}]")
            + route_yaml("present", "[{prefix: /, headers: [{name: x-present}]}]")
            + route_yaml("q-regex", "[{prefix: /, queryParameters: [{name: id, value: '[a-f]+', regex: true}]}]")
            + route_yaml("q-present", "[{prefix: /, queryParameters: [{name: debug}]}]")
            + route_yaml("post", "[{prefix: /, methods: [POST, PUT]}]")
            + route_yaml("not-internal", "[{prefix: /, headers: [{name: x-internal, invertMatch: true}]}]")
            + route_yaml("rest", "[{prefix: /}]")
        )
        assert await chosen(t, "GET", "/?q=v", {"x-a": "1"}) == "both"
        assert await chosen(t, "GET", "/?q=w", {"x-a": "1", "x-internal": "y"}) == "rest"  # AND within a matcher
        assert await chosen(t, "GET", "/", {"X-Ver": "v12", "x-internal": "y"}) == "hdr-regex"
        assert await chosen(t, "GET", "/", {"x-ver": "v12x", "x-internal": "y"}) == "rest"  # full match
        assert await chosen(t, "GET", "/", {"x-present": "", "x-internal": "y"}) == "present"
        assert await chosen(t, "GET", "/?id=abc", {"x-internal": "y"}) == "q-regex"
        assert await chosen(t, "GET", "/?id=abz", {"x-internal": "y"}) == "rest"
        assert await chosen(t, "GET", "/?debug", {"x-internal": "y"}) == "q-present"
        assert await chosen(t, "PUT", "/", {"x-internal": "y"}) == "post"
        assert await chosen(t, "GET", "/") == "not-internal"
        assert await chosen(t, "GET", "/", {"x-internal": "y"}) == "rest"

    async def test_several_matchers_are_alternatives_and_pseudo_headers(self):
        t = make_tester(
            route_yaml("either", "[{exact: /a}, {prefix: /b, methods: [DELETE]}]")
            + route_yaml("authority", "[{prefix: /, headers: [{name: ':authority', value: h}]}]")
        )
        assert await chosen(t, "GET", "/a") == "either"
        assert await chosen(t, "DELETE", "/b/1") == "either"
        assert await chosen(t, "GET", "/b/1") == "authority"

    async def test_invert_match_with_a_value(self):
        t = make_tester(route_yaml("not-beta", "[{prefix: /, headers: [{name: x-stage, value: beta, invertMatch: true}]}]"))
        assert await chosen(t, "GET", "/") == "not-beta"
        assert await chosen(t, "GET", "/", {"x-stage": "prod"}) == "not-beta"
        assert await chosen(t, "GET", "/", {"x-stage": "beta"}) is None

    async def test_regex_is_linear_time(self):
        t = make_tester(route_yaml("evil", "[{regex: '/(a+)+$'}]")
                   + route_yaml("evil-header", "[{prefix: /, headers: [{name: x, value: '(a|a)*b', regex: true}]}]"))
        start = time.perf_counter()
        assert await chosen(t, "GET", "/" + "a" * 3000 + "!") is None
        assert await chosen(t, "GET", "/z", {"x": "a" * 3000 + "c"}) is None
        assert time.perf_counter() - start < 1.0  # Python's re would take longer than the universe

    async def test_a_long_path_is_matched_never_skipped(self):
        # Issue 23 item 1: a subject over 4,096 characters used to be "no
        # match", so the next (open) route served a regex-guarded path.
        t = make_tester(route_yaml("guarded", "[{regex: '/rx/admin/.*'}]")
                        + route_yaml("open", "[{prefix: /}]"))
        assert await chosen(t, "GET", "/rx/admin/" + "a" * 100) == "guarded"
        assert await chosen(t, "GET", "/rx/admin/" + "a" * 4090) == "guarded"
        assert await chosen(t, "GET", "/rx/admin/" + "a" * 60_000) == "guarded"
        t = make_tester(route_yaml("hdr", "[{prefix: /, headers: [{name: x-role, value: 'adm.*', regex: true}]}]")
                        + route_yaml("q", "[{prefix: /, queryParameters: [{name: u, value: 'adm.*', regex: true}]}]")
                        + route_yaml("open", "[{prefix: /}]"))
        assert await chosen(t, "GET", "/", {"x-role": "adm" + "n" * 5000}) == "hdr"
        assert await chosen(t, "GET", "/?u=adm" + "n" * 5000) == "q"

    async def test_headers_the_gateway_strips_still_match(self):
        # issue 23 item 3: a route guarded by a hop-by-hop header never
        # matched, and the next open route served (spliced) the request
        guarded = [("upgrade", "websocket"), ("connection", "upgrade"), ("content-length", "0"),
                   ("transfer-encoding", "chunked"), ("expect", "100-continue"),
                   ("proxy-authorization", "Basic eA=="), ("te", "trailers"), ("keep-alive", "timeout=5")]
        routes = "".join(route_yaml(name, f"[{{prefix: /, headers: [{{name: {name}, value: '{value}'}}]}}]")
                         for name, value in guarded)
        t = make_tester(routes + route_yaml("open", "[{prefix: /}]"))
        for name, value in guarded:
            assert await chosen(t, "GET", "/", {name: value}) == name, name
        assert await chosen(t, "GET", "/", {"upgrade": "h2c"}) == "open"
        # a header Connection names is dropped at run time: it matches too
        t = make_tester(route_yaml("admin", "[{prefix: /, headers: [{name: x-role, value: admin}]}]")
                        + route_yaml("open", "[{prefix: /}]"))
        assert await chosen(t, "GET", "/", {"x-role": "admin", "connection": "x-role"}) == "admin"

    async def test_a_hostile_pattern_is_cheap_or_refused(self):
        # Issue 23 item 2: '/dfa/.*a.{2400}' loaded and cost seconds per 4 KB path.
        with pytest.raises(ConfigError) as info:
            load_text(HEAD + textwrap.indent(route_yaml("r", "[{regex: '/dfa/.*a.{2400}'}]"), "    "), "m.yaml")
        assert "invalid repetition size" in str(info.value)
        with pytest.raises(ConfigError) as info:
            load_text(HEAD + textwrap.indent(route_yaml("r", "[{regex: '/dfa/.*a.{200}'}]"), "    "), "m.yaml")
        assert "spec.virtualHost.routes[0].matchers[0].regex: the pattern is too complex" in str(info.value)
        # Under the limit, the worst input pattern costs milliseconds.
        t = make_tester(route_yaml("dfa", "[{regex: '/dfa/.*a.{10}'}]")
                        + route_yaml("nfa", "[{regex: '/nfa/(.*a){8}'}]"))
        start = time.perf_counter()
        for _ in range(5):
            assert await chosen(t, "GET", "/dfa/" + "a" * 4096) == "dfa"
            assert await chosen(t, "GET", "/nfa/" + "ab" * 2048 + "b") is None
        assert time.perf_counter() - start < 0.5

    def test_gloo_patterns_with_anchors_and_flags_load(self):
        t = make_tester(route_yaml("api", "[{regex: '^/(api|v1)/.*$|^/health$'}]")
                        + route_yaml("ci", "[{regex: '(?i)/admin/.*'}]"))
        assert len(t.snapshot.routes) == 2

    def test_the_program_size_limit_is_a_setting(self):
        settings = ("---\napiVersion: gateway.vendor.io/v1\nkind: Settings\nmetadata: {name: s}\n"
                    "spec: {gateway: {regexMaxProgramSize: 1000}}\n")
        text = HEAD + textwrap.indent(route_yaml("r", "[{regex: '/dfa/.*a.{100}'}]"), "    ") + settings
        assert len(load_text(text).virtual_services[0].routes) == 1
        with pytest.raises(ConfigError) as info:
            load_text(text.replace("1000", "0"))
        assert "spec.gateway.regexMaxProgramSize: must be between 1 and 1048576" in str(info.value)

    @pytest.mark.parametrize("matchers, field, reason", [
        ("[{regex: '/(a)\\1'}]", "matchers[0].regex", "backreferences"),
        ("[{regex: '/(?=x)'}]", "matchers[0].regex", "lookahead"),
        ("[{regex: '/x{2000}'}]", "matchers[0].regex", "invalid repetition size"),
        ("[{regex: '/('}]", "matchers[0].regex", "invalid regular expression"),
        ("[{prefix: /a, exact: /b}]", "matchers[0]", "set at most one of prefix, exact or regex"),
        ("[{prefix: /a, caseSensitive: 'no'}]", "matchers[0].caseSensitive", "must be true or false"),
        ("[{headers: [{value: x}]}]", "matchers[0].headers[0].name", "is required"),
        ("[{headers: [{name: x, regex: true}]}]", "matchers[0].headers[0].regex", "needs a value"),
        ("[{headers: [{name: ':path2', value: x}]}]", "matchers[0].headers[0].name", "unknown pseudo-header"),
        ("[{queryParameters: [{name: q, value: '(', regex: true}]}]",
         "matchers[0].queryParameters[0].value", "invalid regular expression"),
        ("[{methods: [get]}]", "matchers[0].methods[0]", "in capitals"),
        ("[{headers: [{name: 'x-é', value: a}]}]", "matchers[0].headers[0].name", "is not a valid header name"),
        # a client's forwarding facts and method overrides are never trusted: refused, not skipped
        ("[{headers: [{name: X-Forwarded-For, value: 10.0.0.1}]}]", "matchers[0].headers[0].name",
         "never takes from a client"),
        ("[{headers: [{name: x-http-method-override, value: DELETE}]}]", "matchers[0].headers[0].name",
         "never takes from a client"),
        ("[{prefx: /a}]", "matchers[0].prefx", "unknown field 'prefx'"),
    ])
    def test_matcher_errors(self, matchers, field, reason):
        text = HEAD + textwrap.indent(route_yaml("r", matchers), "    ")
        with pytest.raises(ConfigError) as info:
            load_text(text, "m.yaml")
        found = [i for i in info.value.issues if i.field == "spec.virtualHost.routes[0]." + field]
        assert found and reason in found[0].reason, info.value.issues
        assert found[0].line == 8

    def test_all_matcher_problems_at_once(self):
        text = HEAD + textwrap.indent(route_yaml("r", "[{regex: '(a)\\1', methods: [get], headers: [{}]}]"), "    ")
        with pytest.raises(ConfigError) as info:
            load_text(text, "m.yaml")
        fields = sorted(i.field for i in info.value.issues)
        assert fields == ["spec.virtualHost.routes[0].matchers[0].headers[0].name",
                          "spec.virtualHost.routes[0].matchers[0].methods[0]",
                          "spec.virtualHost.routes[0].matchers[0].regex"]

    @pytest.mark.parametrize("matcher, rewrite, path, forwarded", [
        ("{prefix: /api}", "/v2", "/api/pets", "/v2/pets"),
        ("{prefix: /api/}", "/", "/api/pets", "/pets"),
        ("{prefix: /Api, caseSensitive: false}", "/v2", "/API/pets", "/v2/pets"),
        ("{exact: /health}", "/status", "/health", "/status"),
    ])
    def test_prefix_rewrite_for_each_path_matcher(self, matcher, rewrite, path, forwarded):
        text = HEAD + textwrap.indent(
            f"- matchers: [{matcher}]\n  options: {{prefixRewrite: {rewrite}}}\n"
            "  directResponseAction: {status: 200}\n", "    ")
        (route,) = load_text(text).virtual_services[0].routes
        assert route.rewrite(path) == forwarded

    def test_prefix_rewrite_of_a_regex_match_is_refused(self):
        text = HEAD + textwrap.indent(
            "- matchers: [{regex: '/api/[0-9]+'}]\n  options: {prefixRewrite: /v2}\n"
            "  directResponseAction: {status: 200}\n", "    ")
        with pytest.raises(ConfigError) as info:
            load_text(text)
        (issue,) = info.value.issues
        assert issue.field == "spec.virtualHost.routes[0].options.prefixRewrite"
        assert "cannot rewrite the prefix of a regex match" in issue.reason
