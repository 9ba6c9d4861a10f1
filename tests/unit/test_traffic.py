"""Gloo's traffic options in memory: what each field does to the plan the
pipeline makes (the same plan the server carries out), and every refusal
with its field. End to end over sockets: tests/integration/test_traffic_e2e.py."""

from __future__ import annotations

import collections
import textwrap
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from twistgw.config.errors import ConfigError
from twistgw.config.loader import load_text
from twistgw.core.plan import Forward, LocalResponse
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.core.traffic import HeaderLevel, ResponseEdit
from twistgw.testing import ChainTester

from support.trial import TestCase

UPSTREAMS = """\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: blue}
spec: {static: {hosts: [{addr: blue.internal, port: 8080}]}}
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: green}
spec: {static: {hosts: [{addr: 127.0.0.2, port: 8080}]}}
---
"""


def vs(routes: str, options: str = "", extra: str = "") -> str:
    text = UPSTREAMS + extra + textwrap.dedent("""\
        apiVersion: gateway.solo.io/v1
        kind: VirtualService
        metadata: {name: vs}
        spec:
          virtualHost:
            domains: ['*']
        """)
    if options:
        text += "    options:\n" + textwrap.indent(textwrap.dedent(options), "      ")
    return text + "    routes:\n" + textwrap.indent(textwrap.dedent(routes), "    ")


def gateway_plan(text: str, plugins: Any = (), reactor: Any = None) -> ChainTester:
    return ChainTester.from_yaml(text, list(plugins), reactor=reactor)


def problems(text: str) -> list[tuple[str, str]]:
    try:
        build_snapshot(load_text(text, keep_going=True), PluginHost.create(load_entry_points=False))
    except ConfigError as exc:
        return [(i.field, i.reason) for i in exc.issues]
    return []


TO_BLUE = "routeAction: {single: {upstream: {name: blue}}}"


class HeaderManipulationTests(TestCase):
    async def test_request_headers_added_removed_in_envoys_order(self):
        t = gateway_plan(vs(f"""\
            - matchers: [{{prefix: /}}]
              {TO_BLUE}
              options:
                headerManipulation:
                  requestHeadersToAdd:
                  - header: {{key: x-level, value: route}}
                    append: false
                  - header: {{key: x-route, value: r}}
                  - header: {{key: x-multi, value: from-route}}
                  requestHeadersToRemove: [x-secret-debug]
            """, """\
            headerManipulation:
              requestHeadersToAdd:
              - header: {key: x-level, value: vhost}
                append: false
              - header: {key: x-multi, value: from-vhost}
            """))
        r = await t.request("GET", "http://api.example.com/a", {"x-secret-debug": "1", "x-multi": "client"})
        h = r.forwarded_headers
        # both levels apply; for a header both replace, the virtual host's
        # value is the one sent (Envoy applies route, then virtual host)
        assert h.getRawHeaders(b"x-level") == [b"vhost"]
        assert h.getRawHeaders(b"x-route") == [b"r"]
        assert h.getRawHeaders(b"x-multi") == [b"client", b"from-route", b"from-vhost"]  # append is the default
        assert h.getRawHeaders(b"x-secret-debug") is None

    async def test_header_values_from_a_secret(self):
        secret = textwrap.dedent("""\
            apiVersion: v1
            kind: Secret
            metadata: {name: hdrs}
            type: gloo.solo.io/header
            stringData: {x-api-token: s3cret, x-tenant: acme}
            ---
            """)
        t = gateway_plan(vs(f"""\
            - matchers: [{{prefix: /}}]
              {TO_BLUE}
              options:
                headerManipulation:
                  requestHeadersToAdd: [{{headerSecretRef: {{name: hdrs, namespace: default}}, append: false}}]
            """, extra=secret))
        r = await t.request("GET", "http://api.example.com/a", {"x-tenant": "forged"})
        assert r.forwarded_headers.getRawHeaders(b"x-api-token") == [b"s3cret"]
        assert r.forwarded_headers.getRawHeaders(b"x-tenant") == [b"acme"]

    def test_missing_secret_is_reported(self):
        found = problems(vs(f"""\
            - matchers: [{{prefix: /}}]
              {TO_BLUE}
              options:
                headerManipulation:
                  requestHeadersToAdd: [{{headerSecretRef: {{name: nope}}}}]
            """))
        assert found == [("spec.virtualHost.routes[0].options",
                          "headerManipulation: dangling reference: headerSecretRef names no Secret default/nope")]

    async def test_gateway_headers_win_and_cannot_be_named(self):
        found = problems(vs(f"""\
            - matchers: [{{prefix: /}}]
              {TO_BLUE}
              options:
                headerManipulation:
                  requestHeadersToAdd: [{{header: {{key: X-Forwarded-For, value: 10.0.0.1}}}}]
                  requestHeadersToRemove: [host]
            """))
        assert [f for f, _ in found] == [
            "spec.virtualHost.routes[0].options.headerManipulation.requestHeadersToAdd[0].header.key",
            "spec.virtualHost.routes[0].options.headerManipulation.requestHeadersToRemove[0]"]
        assert "is set by the gateway itself" in found[0][1]
        assert "use hostRewrite or autoHostRewrite" in found[1][1]

    def test_plugin_owned_headers_cannot_be_forged(self):
        from twistgw_jwt import JwtPlugin  # noqa: F401  (the plugin that owns claimsToHeaders headers)

        text = vs(f"""\
            - matchers: [{{prefix: /}}]
              {TO_BLUE}
              options:
                headerManipulation:
                  requestHeadersToAdd: [{{header: {{key: x-user, value: admin}}}}]
            """, """\
            jwt:
              providers:
                p:
                  issuer: https://issuer.example.com
                  claimsToHeaders: [{claim: sub, header: x-user}]
                  jwks: {local: {key: "%s"}}
            """ % _pem_one_line())
        with pytest.raises(ConfigError) as info:
            ChainTester.from_yaml(text, ["jwt"])
        (issue,) = info.value.issues
        assert issue.field == "spec.virtualHost.routes[0].options.headerManipulation"
        assert "names X-User, which a plugin owns" in issue.reason

    def test_formatters_and_bad_names_refused(self):
        found = problems(vs(f"""\
            - matchers: [{{prefix: /}}]
              {TO_BLUE}
              options:
                headerManipulation:
                  requestHeadersToAdd: [{{header: {{key: x-client, value: "%DOWNSTREAM_REMOTE_ADDRESS%"}}}}]
                  responseHeadersToAdd: [{{header: {{key: "bad name", value: x}}}}]
            """))
        assert [f.rsplit(".", 2)[-2:] for f, _ in found] == [["header", "value"], ["header", "key"]]
        assert "%VARIABLE% header formatters are not supported" in found[0][1]

    async def test_response_headers_on_direct_responses_and_in_the_forward(self):
        t = gateway_plan(vs(f"""\
            - matchers: [{{prefix: /direct}}]
              directResponseAction: {{status: 200, body: hi}}
            - matchers: [{{prefix: /}}]
              {TO_BLUE}
            """, """\
            headerManipulation:
              responseHeadersToAdd: [{header: {key: x-served-by, value: twistgw}, append: false}]
              responseHeadersToRemove: [server]
            """))
        r = await t.request("GET", "http://api.example.com/direct")
        assert (b"X-Served-By", b"twistgw") in r.plan.headers
        r = await t.request("GET", "http://api.example.com/up")
        edit = r.plan.response_edit
        lines = edit.apply_to_lines([b"Server: nginx\r\n", b"Content-Type: text/plain\r\n", b"x-served-by: app\r\n"])
        assert lines == [b"Content-Type: text/plain\r\n", b"X-Served-By: twistgw\r\n"]
        # the engine's one pass over an upstream's head: hop-by-hop and
        # removed names skipped, added ones after, the framing read
        hop: dict[bytes, bytes] = {}
        lines = edit.head_lines([(b"Server", b"nginx"), (b"Content-Type", b"text/plain"), (b"Content-Length", b"2"),
                                 (b"Connection", b"keep-alive, x-hop"), (b"X-Hop", b"1"),
                                 (b"x-served-by", b"app")], hop)
        assert lines == [b"Content-Type: text/plain\r\n", b"X-Served-By: twistgw\r\n"]
        assert hop == {b"content-length": b"2"}

    async def test_plain_route_has_no_policy(self):
        t = gateway_plan(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n"))
        r = await t.request("GET", "http://api.example.com/a")
        assert r.runtime.policy is None and r.plan.response_edit is None


def _pem_one_line() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return pem.replace("\n", "\\n")


class RewriteTests(TestCase):
    @pytest.mark.parametrize("options, host, target", [
        ("{hostRewrite: api.upstream.example}", b"api.upstream.example", "/svc/a?q=1"),
        ("{autoHostRewrite: true}", b"blue.internal", "/svc/a?q=1"),
        ("{regexRewrite: {pattern: {regex: '^/svc/([^/]+)'}, substitution: '/v2/\\1/x'}}", b"api.example.com",
         "/v2/a/x?q=1"),
    ])
    async def test_host_and_path_rewrites(self, options, host, target):
        t = gateway_plan(vs(f"- matchers: [{{prefix: /svc}}]\n  {TO_BLUE}\n  options: {options}\n"))
        r = await t.request("GET", "http://api.example.com/svc/a?q=1")
        assert r.forwarded_headers.getRawHeaders(b"host") == [host]
        assert r.forwarded_target == target

    @pytest.mark.parametrize("options, field, reason", [
        ("{hostRewrite: a, autoHostRewrite: true}", "autoHostRewrite", "set hostRewrite or autoHostRewrite"),
        ("{prefixRewrite: /, regexRewrite: {pattern: {regex: a}, substitution: b}}", "regexRewrite",
         "set prefixRewrite or regexRewrite"),
        ("{regexRewrite: {pattern: {regex: '(a)\\1'}, substitution: b}}", "regexRewrite.pattern.regex",
         "backreferences"),
        ("{hostRewritePathRegex: {}}", "hostRewritePathRegex", "is not supported by twistgw"),
        ("{colour: blue}", "colour", "unknown field 'colour'; expected one of: autoHostRewrite, bufferPerRoute"),
    ])
    def test_refusals(self, options, field, reason):
        found = problems(vs(f"- matchers: [{{prefix: /svc}}]\n  {TO_BLUE}\n  options: {options}\n"))
        assert any(f == "spec.virtualHost.routes[0].options." + field and reason in r for f, r in found), found

    def test_route_only_options_on_a_virtual_host(self):
        found = problems(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n", "faults: {abort: {httpStatus: 503}}\n"))
        assert found == [("spec.virtualHost.options.faults",
                          "is a route option (as in Gloo): write it under the routes' options")]


class RedirectTests(TestCase):
    @pytest.mark.parametrize("action, url, location, status", [
        ("{hostRedirect: www.example.com}", "http://api.example.com/a?x=1", b"http://www.example.com/a?x=1", 301),
        ("{httpsRedirect: true}", "http://api.example.com:80/a", b"https://api.example.com/a", 301),
        ("{httpsRedirect: true, portRedirect: 8443}", "http://api.example.com:8080/a",
         b"https://api.example.com:8443/a", 301),
        ("{pathRedirect: /new, responseCode: FOUND}", "http://api.example.com/old/x?y=2",
         b"http://api.example.com/new?y=2", 302),
        ("{prefixRewrite: /v2/, stripQuery: true, responseCode: PERMANENT_REDIRECT}",
         "http://api.example.com/old/x?y=2", b"http://api.example.com/v2/x", 308),
    ])
    async def test_redirects(self, action, url, location, status):
        t = gateway_plan(vs(f"- matchers: [{{prefix: /old}}, {{prefix: /a}}]\n  redirectAction: {action}\n"))
        r = await t.request("GET", url)
        assert r.status == status
        assert dict(r.response_headers)[b"Location"] == location

    def test_redirect_problems(self):
        found = problems(vs("- matchers: [{prefix: /}]\n  redirectAction: {pathRedirect: a, prefixRewrite: /b,"
                            " responseCode: MOVED}\n"))
        assert [f for f, _ in found] == ["spec.virtualHost.routes[0].redirectAction"]


class CorsTests(TestCase):
    CORS = """\
        cors:
          allowOrigin: [https://app.example.com]
          allowOriginRegex: ['https://[a-z]+\\.partner\\.example']
          allowMethods: [GET, POST]
          allowHeaders: [authorization, content-type]
          exposeHeaders: [x-request-id]
          maxAge: "600"
          allowCredentials: true
        """

    def t(self, route_options: str = "") -> ChainTester:
        return gateway_plan(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n" + route_options, self.CORS))

    async def test_preflight_answered(self):
        r = await self.t().request("OPTIONS", "http://api.example.com/x", {
            "origin": "https://app.example.com", "access-control-request-method": "POST"})
        # answered by the gateway (not forwarded, not a refusal)
        assert r.status == 200 and isinstance(r.plan, LocalResponse) and r.plan.answer and r.deny is None
        assert dict(r.response_headers) == {
            b"Access-Control-Allow-Origin": b"https://app.example.com",
            b"Access-Control-Allow-Credentials": b"true",
            b"Access-Control-Allow-Methods": b"GET,POST",
            b"Access-Control-Allow-Headers": b"authorization,content-type",
            b"Access-Control-Max-Age": b"600"}

    async def test_disallowed_origin_gets_nothing(self):
        r = await self.t().request("OPTIONS", "http://api.example.com/x", {
            "origin": "https://evil.example", "access-control-request-method": "POST"})
        assert isinstance(r.plan, Forward)  # not a preflight the gateway answers: the backend sees it
        assert r.plan.response_edit is None
        r = await self.t().request("GET", "http://api.example.com/x", {"origin": "https://evil.example"})
        assert r.plan.response_edit is None

    async def test_actual_request_gets_the_headers(self):
        r = await self.t().request("GET", "http://api.example.com/x", {"origin": "https://shop.partner.example"})
        lines = r.plan.response_edit.apply_to_lines([b"Content-Type: text/plain\r\n"])
        assert lines == [b"Content-Type: text/plain\r\n",
                         b"Access-Control-Allow-Credentials: true\r\n",
                         b"Access-Control-Expose-Headers: x-request-id\r\n",
                         b"Access-Control-Allow-Origin: https://shop.partner.example\r\n"]

    @pytest.mark.parametrize("written, sent", [("1d", b"86400"), ("2s", b"2"), ("10m", b"600"), (3600, b"3600"),
                                               ("600", b"600")])
    async def test_max_age_as_gloo_guides_write_it(self, written, sent):
        cors = self.CORS.replace('maxAge: "600"', f"maxAge: {written}")
        t = gateway_plan(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n", cors))
        r = await t.request("OPTIONS", "http://api.example.com/x", {
            "origin": "https://app.example.com", "access-control-request-method": "POST"})
        assert dict(r.response_headers)[b"Access-Control-Max-Age"] == sent

    @pytest.mark.parametrize("written", ["1.5s", "soon", "-1", "250ms", "true"])
    def test_max_age_that_is_not_whole_seconds_is_refused(self, written):
        found = problems(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n",
                            self.CORS.replace('maxAge: "600"', f"maxAge: {written}")))
        assert [f for f, _ in found] == ["spec.virtualHost.options.cors.maxAge"]
        assert "whole seconds" in found[0][1]

    async def test_disable_for_route(self):
        r = await self.t("  options: {cors: {disableForRoute: true}}\n").request(
            "OPTIONS", "http://api.example.com/x",
            {"origin": "https://app.example.com", "access-control-request-method": "POST"})
        assert isinstance(r.plan, Forward) and r.plan.response_edit is None


class CsrfTests(TestCase):
    def t(self, percent: int = 100, shadow: bool = False) -> ChainTester:
        key = "shadowEnabled" if shadow else "filterEnabled"
        return gateway_plan(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n", f"""\
            csrf:
              {key}: {{defaultValue: {{numerator: {percent}, denominator: HUNDRED}}}}
              additionalOrigins: [{{suffix: .trusted.example}}]
            """))

    @pytest.mark.parametrize("method, headers, status", [
        ("GET", {"origin": "https://evil.example"}, 200),
        ("POST", {"origin": "https://evil.example"}, 403),
        ("POST", {}, 403),
        ("POST", {"origin": "http://api.example.com"}, 200),
        ("DELETE", {"referer": "https://api.example.com/page"}, 200),
        ("PUT", {"origin": "https://app.trusted.example"}, 200),
    ])
    async def test_origins(self, method, headers, status):
        r = await self.t().request(method, "http://api.example.com/x", headers)
        assert r.status == status

    async def test_shadow_and_zero_percent_do_not_enforce(self):
        for t in (self.t(shadow=True), self.t(percent=0)):
            r = await t.request("POST", "http://api.example.com/x", {"origin": "https://evil.example"})
            assert r.status == 200


class FaultTests(TestCase):
    async def test_abort_all(self):
        t = gateway_plan(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n"
                      "  options: {faults: {abort: {percentage: 100, httpStatus: 503}}}\n"))
        r = await t.request("GET", "http://api.example.com/x")
        assert r.status == 503 and r.body == b"fault filter abort"

    async def test_abort_percentage(self):
        t = gateway_plan(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n"
                      "  options: {faults: {abort: {percentage: 30, httpStatus: 418}}}\n"))
        statuses = collections.Counter([(await t.request("GET", "http://api.example.com/x")).status
                                        for _ in range(2000)])
        assert 0.25 < statuses[418] / 2000 < 0.35

    async def test_delay_then_forward(self):
        clock = MemoryReactorClock()
        t = gateway_plan(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n"
                      "  options: {faults: {delay: {percentage: 100, fixedDelay: 2s}}}\n"), reactor=clock)
        pending = t.pipeline.handle(_head(), t.snapshot)
        got: list[Any] = []
        pending.addCallback(got.append)
        clock.advance(1.9)
        assert got == []
        clock.advance(0.2)
        assert isinstance(got[0], Forward)


def _head() -> Any:
    from twistgw.api.headers import Headers
    from twistgw.core.pipeline import RequestHead

    return RequestHead(b"GET", b"/x", Headers({b"host": [b"api.example.com"]}), "127.0.0.1")


class BufferTests(TestCase):
    async def test_declared_body_over_the_bound(self):
        t = gateway_plan(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n",
                      "bufferPerRoute: {buffer: {maxRequestBytes: 10}}\n"))
        r = await t.request("POST", "http://api.example.com/x", {"content-length": "11"})
        assert r.status == 413
        r = await t.request("POST", "http://api.example.com/x", {"content-length": "10"})
        assert r.status == 200


class WeightedTests(TestCase):
    async def test_multi_split_and_destination_headers(self):
        t = gateway_plan(vs("""\
            - matchers: [{prefix: /}]
              routeAction:
                multi:
                  destinations:
                  - destination: {upstream: {name: blue}}
                    weight: 80
                  - destination: {upstream: {name: green}}
                    weight: 20
                    options:
                      headerManipulation:
                        requestHeadersToAdd: [{header: {key: x-canary, value: "yes"}}]
            """))
        seen = collections.Counter()
        for _ in range(4000):
            r = await t.request("GET", "http://api.example.com/x")
            up = r.plan.upstream.name
            seen[up] += 1
            assert (r.forwarded_headers.getRawHeaders(b"x-canary") == [b"yes"]) == (up == "green")
        assert abs(seen["blue"] / 4000 - 0.8) < 0.03

    async def test_upstream_group(self):
        t = gateway_plan(vs("- matchers: [{prefix: /}]\n  routeAction: {upstreamGroup: {name: g}}\n", extra="""\
apiVersion: gloo.solo.io/v1
kind: UpstreamGroup
metadata: {name: g}
spec:
  destinations:
  - destination: {upstream: {name: green}}
    weight: 1
  - destination: {upstream: {name: blue}}
    weight: 0
---
"""))
        names = {(await t.request("GET", "http://api.example.com/x")).plan.upstream.name for _ in range(50)}
        assert names == {"green"}  # weight 0 never picked

    def test_dangling_destinations(self):
        found = problems(vs("""\
            - matchers: [{prefix: /a}]
              routeAction: {upstreamGroup: {name: nope}}
            - matchers: [{prefix: /b}]
              routeAction: {multi: {destinations: [{destination: {upstream: {name: nope}}, weight: 1}]}}
            """))
        assert [f for f, _ in found] == [
            "spec.virtualHost.routes[0].routeAction.upstreamGroup",
            "spec.virtualHost.routes[1].routeAction.multi.destinations[0].destination.upstream"]


class DelegatedOptionsTests(TestCase):
    async def test_virtual_host_and_route_options_merge_as_gloo(self):
        extra = """\
apiVersion: gateway.solo.io/v1
kind: VirtualHostOption
metadata: {name: shared}
spec:
  options:
    headerManipulation: {requestHeadersToAdd: [{header: {key: x-from, value: vho}}]}
    csrf: {filterEnabled: {defaultValue: {numerator: 100}}}
---
apiVersion: gateway.solo.io/v1
kind: RouteOption
metadata: {name: first}
spec:
  options: {hostRewrite: first.example, faults: {abort: {percentage: 100, httpStatus: 418}}}
---
apiVersion: gateway.solo.io/v1
kind: RouteOption
metadata: {name: second}
spec:
  options: {hostRewrite: second.example, prefixRewrite: /v2/}
---
"""
        text = vs(f"""\
            - matchers: [{{prefix: /a}}]
              {TO_BLUE}
              options: {{faults: {{abort: {{percentage: 0, httpStatus: 500}}}}}}
              optionsConfigRefs: {{delegateOptions: [{{name: first}}, {{name: second}}]}}
            """, "headerManipulation: {requestHeadersToAdd: [{header: {key: x-from, value: inline}}]}\n",
                  extra=extra).replace("domains: ['*']\n", "domains: ['*']\n    optionsConfigRefs: "
                                       "{delegateOptions: [{name: shared}]}\n")
        r = await gateway_plan(text).request("GET", "http://api.example.com/a/b")
        assert r.status == 200  # the route's own faults win over RouteOption first's
        assert r.forwarded_headers.getRawHeaders(b"host") == [b"first.example"]  # first listed wins
        assert r.forwarded_target == "/v2/b"  # a key only the second sets
        assert r.forwarded_headers.getRawHeaders(b"x-from") == [b"inline"]  # the inline vhost key wins
        r = await gateway_plan(text).request("POST", "http://api.example.com/a/b", {"origin": "https://evil"})
        assert r.status == 403  # csrf from the VirtualHostOption

    def test_dangling_option_refs(self):
        text = vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n"
                  "  optionsConfigRefs: {delegateOptions: [{name: x}]}\n")
        assert problems(text) == [("spec.virtualHost.routes[0].optionsConfigRefs.delegateOptions[0]",
                                   "dangling reference: no RouteOption default/x")]


class LoadingTests(TestCase):
    def test_virtual_service_without_routes_loads(self):
        text = UPSTREAMS + "apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: partial}\n" \
            "spec: {virtualHost: {domains: [a.example.com], options: {cors: {allowOrigin: ['*']}}}}\n"
        config = load_text(text)
        assert config.virtual_services[0].routes == ()
        assert problems(text) == []

    def test_upstream_as_kubectl_prints_it(self):
        text = textwrap.dedent("""\
            apiVersion: gloo.solo.io/v1
            kind: Upstream
            metadata:
              name: default-petstore-8080
              namespace: gloo-system
              resourceVersion: "4711"
              uid: 0b0e8ad5-ffff-4c0e-8f6a-1d2c3b4a5e6f
              generation: 2
              creationTimestamp: "2024-01-01T00:00:00Z"
              labels: {discovered_by: kubernetesplugin}
            spec:
              discoveryMetadata: {labels: {app: petstore}}
              static: {hosts: [{addr: 127.0.0.1, port: 8080}]}
            status:
              statuses: {gloo-system: {reportedBy: gloo, state: 1}}
            """)
        (up,) = load_text(text).upstream_resources.values()
        assert up.name == "default-petstore-8080"

    @pytest.mark.parametrize("kind", ["aws", "awsEc2", "gcp", "consul"])
    def test_cloud_upstreams_refused_by_name(self, kind):
        text = f"apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {{name: u}}\nspec: {{{kind}: {{}}}}\n"
        found = problems(text)
        assert any(f == f"spec.{kind}" and "is not supported by twistgw" in r for f, r in found), found


class ResponseEditTests(TestCase):
    def test_levels_apply_in_order(self):
        edit = ResponseEdit.of_level((b"Server",), ((b"X-A", b"1", False),)).then(
            ResponseEdit.of_level((), ((b"X-A", b"2", False), (b"X-B", b"3", True))))
        assert edit.apply_to_lines([b"server: x\r\n", b"X-A: 0\r\n"]) == [b"X-A: 2\r\n", b"X-B: 3\r\n"]
        local = edit.apply_to_local(LocalResponse(200, b"", ((b"X-A", b"0"),)))
        assert local.headers == ((b"X-A", b"2"), (b"X-B", b"3"))


class MatcherAndOverrideTests(TestCase):
    async def test_csrf_additional_origin_matchers(self):
        # matched against the origin's host[:port] (Envoy's), never the whole value
        t = gateway_plan(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n", """\
            csrf:
              filterEnabled: {defaultValue: {numerator: 100}}
              additionalOrigins:
              - {exact: "one.example"}
              - {prefix: "TWO.", ignoreCase: true}
              - {safeRegex: {regex: "three[0-9]+\\\\.example"}}
            """))
        for origin, status in (("https://one.example", 200), ("https://ONE.example", 200),
                               ("https://one.example:8443", 403), ("https://TWO.example", 200),
                               ("https://three42.example", 200), ("https://three.example", 403)):
            r = await t.request("POST", "http://api.example.com/x", {"origin": origin})
            assert r.status == status, origin

    async def test_buffer_disabled_on_a_route(self):
        t = gateway_plan(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n"
                            "  options: {bufferPerRoute: {disabled: true}}\n",
                            "bufferPerRoute: {buffer: {maxRequestBytes: 10}}\n"))
        r = await t.request("POST", "http://api.example.com/x", {"content-length": "100000"})
        assert r.status == 200


GLOO_SETTINGS = """\
apiVersion: gloo.solo.io/v1
kind: Settings
metadata: {name: default, namespace: gloo-system}
spec:
  discoveryNamespace: gloo-system
  kubernetesArtifactSource: {}
  kubernetesConfigSource: {}
  kubernetesSecretSource: {}
  refreshRate: 60s
  gloo: {xdsBindAddr: "0.0.0.0:9977", regexMaxProgramSize: %d%s}
  gateway: {readGatewaysFromAllNamespaces: false, validation: {proxyValidationServerAddr: "gloo:9988"}}
%s---
"""


class GlooSettingsTests(TestCase):
    ROUTE = "- matchers: [{regex: '/[a-z0-9]{60}x'}]\n  directResponseAction: {status: 200}\n"

    def test_served_fields_apply(self):
        # the route's regex is over Envoy's default program size (100): Gloo's setting raises the limit
        assert any("program size" in r for _, r in problems(vs(self.ROUTE)))
        assert problems(vs(self.ROUTE, extra=GLOO_SETTINGS % (1000, "", ""))) == []

    async def test_plugin_sections_reach_their_plugin(self):
        # Gloo's Settings spec.rbac.requireRbac: a route without an RBAC policy is refused
        t = ChainTester.from_yaml(vs(self.ROUTE, extra=GLOO_SETTINGS % (1000, "", "  rbac: {requireRbac: true}\n")),
                                  ["rbac"])
        r = await t.request("GET", "http://api.example.com/" + "a" * 60 + "x")
        assert r.status == 403

    def test_the_rest_is_refused_by_name(self):
        found = problems(vs(self.ROUTE, extra=GLOO_SETTINGS % (1000, ", invalidConfigPolicy: {}",
                                                               "  linkerd: true\n")))
        assert [f for f, _ in found] == ["spec.gloo.invalidConfigPolicy", "spec.linkerd"]
        assert all("is not supported by twistgw" in r for _, r in found)


class RequestLevelTests(TestCase):
    def test_composed_levels_keep_envoys_sequence(self):
        from twistgw.api.headers import Headers

        route = HeaderLevel((b"X-Drop",), ((b"X-A", b"route", False), (b"X-B", b"route", True)))
        vhost = HeaderLevel((b"X-B",), ((b"X-A", b"vhost", False),))
        h = Headers({b"x-drop": [b"1"], b"x-b": [b"client"]})
        route.then(vhost).on_request(h)
        # the virtual host removes what the route added, and its value replaces the route's
        found = (h.getRawHeaders(b"x-drop"), h.getRawHeaders(b"x-a"), h.getRawHeaders(b"x-b"))
        assert found == (None, [b"vhost"], None)


def lb_upstream(lb: str, name: str = "pool", hosts: int = 4) -> str:
    addrs = ", ".join(f"{{addr: 127.0.0.{i + 1}, port: 8080}}" for i in range(hosts))
    return (f"apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {{name: {name}}}\n"
            f"spec:\n  static: {{hosts: [{addrs}]}}\n  loadBalancerConfig: {lb}\n---\n")


TO_POOL = "routeAction: {single: {upstream: {name: pool}}}"


class LoadBalancerTests(TestCase):
    @pytest.mark.parametrize("lb", ["{ringHash: {ringHashConfig: {minimumRingSize: 512, maximumRingSize: '4096'}}}",
                                    "{maglev: {}}", "{ringHash: {useHostnameForHashing: true}}"])
    async def test_the_same_key_sticks_to_one_endpoint(self, lb):
        t = gateway_plan(vs(f"""\
            - matchers: [{{prefix: /}}]
              {TO_POOL}
              options:
                lbHash:
                  hashPolicies:
                  - {{header: x-user, terminal: true}}
                  - {{cookie: {{name: session}}}}
                  - {{sourceIp: true}}
            """, extra=lb_upstream(lb)))
        picked = collections.defaultdict(set)
        for user in ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"):
            for _ in range(5):
                r = await t.request("GET", "http://api.example.com/x", {"x-user": user, "cookie": "session=s1"})
                picked[user].add(r.plan.endpoint.host)
        assert all(len(hosts) == 1 for hosts in picked.values()), picked  # sticky
        assert len(set().union(*picked.values())) > 1  # and spread
        # without the header, the cookie (then the source IP) is hashed: one endpoint again
        seen = set()
        for _ in range(10):
            r = await t.request("GET", "http://api.example.com/x", {"cookie": "a=1; session=s2"})
            seen.add(r.plan.endpoint.host)
        assert len(seen) == 1

    async def test_random_and_hash_without_a_key_spread(self):
        for lb in ("{random: {}}", "{maglev: {}}"):
            t = gateway_plan(vs(f"- matchers: [{{prefix: /}}]\n  {TO_POOL}\n", extra=lb_upstream(lb)))
            hosts: collections.Counter[str] = collections.Counter()
            for _ in range(400):
                hosts[(await t.request("GET", "http://api.example.com/x")).plan.endpoint.host] += 1
            assert len(hosts) == 4 and min(hosts.values()) > 50, hosts

    def test_ring_moves_little_when_an_endpoint_goes(self):
        from twistgw.api.types import Endpoint, UpstreamInfo
        from twistgw.config.model import LoadBalancer
        from twistgw.core.balancers import Maglev, RingHash, stable_hash

        eps = tuple(Endpoint(f"10.0.0.{i}", 80) for i in range(5))
        for cls in (RingHash, Maglev):
            full = cls(UpstreamInfo("d", "u", eps), LoadBalancer())
            less = cls(UpstreamInfo("d", "u", eps[:4]), LoadBalancer())
            keys = [stable_hash(b"k%d" % i) for i in range(2000)]
            moved = sum(1 for k in keys if full.pick_hash(k) != eps[4] and full.pick_hash(k) != less.pick_hash(k))
            # a modulo hash would move about 80% of the keys; consistent hashing moves few
            # (the remaining endpoints get more points, so a few keys change hands)
            assert moved < 2000 * 0.15, (cls, moved)

    @pytest.mark.parametrize("lb, field", [
        ("{leastRequest: {choiceCount: 1}}", "spec.loadBalancerConfig.leastRequest.choiceCount"),
        ("{healthyPanicThreshold: 150}", "spec.loadBalancerConfig.healthyPanicThreshold"),
        ("{localityWeightedLbConfig: {}}", "spec.loadBalancerConfig.localityWeightedLbConfig"),
        ("{leastRequest: {}, random: {}}", "spec.loadBalancerConfig"),
        ("{roundRobin: {}, random: {}}", "spec.loadBalancerConfig"),
    ])
    def test_refusals(self, lb, field):
        found = problems(lb_upstream(lb) + vs(f"- matchers: [{{prefix: /}}]\n  {TO_POOL}\n"))
        assert [f for f, _ in found] == [field]

    def test_lb_hash_needs_a_hashing_upstream(self):
        found = problems(lb_upstream("{roundRobin: {}}") + vs(
            f"- matchers: [{{prefix: /}}]\n  {TO_POOL}\n"
            "  options: {lbHash: {hashPolicies: [{sourceIp: true}]}}\n"))
        assert found == [("spec.virtualHost.routes[0].options",
                          "lbHash: upstream default/pool does not balance by hash: give it loadBalancerConfig"
                          " ringHash or maglev (Envoy ignores hash policies otherwise)")]

    def test_generated_cookies_refused(self):
        found = problems(lb_upstream("{maglev: {}}") + vs(
            f"- matchers: [{{prefix: /}}]\n  {TO_POOL}\n"
            "  options: {lbHash: {hashPolicies: [{cookie: {name: s, ttl: 1s}}]}}\n"))
        assert [f for f, _ in found] == ["spec.virtualHost.routes[0].options.lbHash.hashPolicies[0].cookie.ttl"]


HEALTHY = """  healthChecks:
  - timeout: 1s
    interval: 5s
    unhealthyThreshold: 2
    healthyThreshold: 3
    httpHealthCheck:
      path: /healthz
      host: checked.internal
      expectedStatuses: [{start: 200, end: 300}]
---
"""


class HealthTests(TestCase):
    def t(self, hosts: int = 4) -> ChainTester:
        return gateway_plan(lb_upstream("{roundRobin: {}}", hosts=hosts).replace("---\n", HEALTHY)
                            + vs(f"- matchers: [{{prefix: /}}]\n  {TO_POOL}\n"))

    async def hosts(self, t: ChainTester, n: int = 40) -> set[str]:
        return {(await t.request("GET", "http://api.example.com/x")).plan.endpoint.host for _ in range(n)}

    async def test_thresholds_and_panic(self):
        t = self.t()
        (state,) = t.snapshot.health.values()
        check = state.check
        assert (check.path, check.host, check.passes(204), check.passes(503)) == ("/healthz", "checked.internal",
                                                                                  True, False)
        eps = state.upstream.endpoints
        assert state.report(eps[0], False) is None  # one failure: still in
        assert await self.hosts(t) == {e.host for e in eps}
        assert state.report(eps[0], False) is False  # unhealthyThreshold reached
        assert await self.hosts(t) == {e.host for e in eps[1:]}
        assert [state.report(eps[0], True) for _ in range(3)] == [None, None, True]  # healthyThreshold
        assert await self.hosts(t) == {e.host for e in eps}
        for ep in eps[:3]:  # 1 of 4 healthy, under Envoy's 50% panic threshold: all take traffic
            state.report(ep, False)
            state.report(ep, False)
        assert await self.hosts(t) == {e.host for e in eps}

    async def test_no_traffic_interval_until_the_first_request(self):
        """``noTrafficInterval`` (Envoy's default 60 s) until a request goes
        to the upstream, ``interval`` from then on; the runtime is told once."""
        t = self.t()
        (state,) = t.snapshot.health.values()
        told: list[bool] = []
        state.on_traffic = lambda: told.append(True)
        assert (state.check.no_traffic_interval, state.traffic, state.interval) == (60.0, False, 60.0)
        await self.hosts(t, 3)
        assert (state.traffic, state.interval, told) == (True, 5.0, [True])
        custom = gateway_plan(lb_upstream("{roundRobin: {}}").replace("---\n", HEALTHY.replace(
            "interval: 5s", "interval: 5s\n    noTrafficInterval: 30s"))
            + vs(f"- matchers: [{{prefix: /}}]\n  {TO_POOL}\n"))
        (state,) = custom.snapshot.health.values()
        assert (state.check.no_traffic_interval, state.interval) == (30.0, 30.0)

    async def test_a_route_without_an_endpoint_is_no_traffic(self):
        t = gateway_plan(lb_upstream("{roundRobin: {}, healthyPanicThreshold: 0}").replace("---\n", HEALTHY)
                         + vs(f"- matchers: [{{prefix: /}}]\n  {TO_POOL}\n"))
        (state,) = t.snapshot.health.values()
        for ep in state.upstream.endpoints:
            state.report(ep, False)
            state.report(ep, False)
        answer = (await t.request("GET", "http://api.example.com/x")).plan
        assert isinstance(answer, LocalResponse) and answer.status == 503
        assert not state.traffic  # nothing was sent

    @pytest.mark.parametrize("check, field", [
        ("{timeout: 1s, interval: 1s, noTrafficInterval: 0s, unhealthyThreshold: 1, healthyThreshold: 1,"
         " httpHealthCheck: {path: /}}", "spec.healthChecks[0].noTrafficInterval"),
        ("{timeout: 1s, interval: 1s, unhealthyEdgeInterval: 1s, unhealthyThreshold: 1, healthyThreshold: 1,"
         " httpHealthCheck: {path: /}}", "spec.healthChecks[0].unhealthyEdgeInterval"),
        ("{tcpHealthCheck: {}, timeout: 1s, interval: 1s, unhealthyThreshold: 1, healthyThreshold: 1,"
         " httpHealthCheck: {path: /}}", "spec.healthChecks[0].tcpHealthCheck"),
        ("{timeout: 1s, interval: 1s, unhealthyThreshold: 1, healthyThreshold: 1, httpHealthCheck: {path: x}}",
         "spec.healthChecks[0].httpHealthCheck.path"),
        ("{timeout: 1s, interval: 0s, unhealthyThreshold: 1, healthyThreshold: 1, httpHealthCheck: {path: /}}",
         "spec.healthChecks[0].interval"),
    ])
    def test_refusals(self, check, field):
        text = lb_upstream("{roundRobin: {}}").replace("---\n", f"  healthChecks: [{check}]\n---\n")
        found = problems(text + vs(f"- matchers: [{{prefix: /}}]\n  {TO_POOL}\n"))
        assert [f for f, _ in found] == [field]
