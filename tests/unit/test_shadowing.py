"""``shadowing`` in memory: how it is read and refused (with its field), the
``-shadow`` host, the percentage, and the copy's plan the pipeline makes
beside the primary's. End to end over sockets (the copy sent, the primary
unaffected, the bounds): tests/integration/test_shadowing_e2e.py."""

from __future__ import annotations

import textwrap

import pytest

from twistgw.config.errors import ConfigError
from twistgw.config.loader import load_text
from twistgw.core.plan import Forward, RetryingForward
from twistgw.core.plugins import PluginHost
from twistgw.core.shadowing import Shadow, shadow_host
from twistgw.core.snapshot import build_snapshot
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
metadata: {name: green, namespace: canary}
spec: {static: {hosts: [{addr: 127.0.0.2, port: 9090}]}}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: vs}
spec:
  virtualHost:
    domains: ['*']
"""
TO_BLUE = "routeAction: {single: {upstream: {name: blue}}}"


def vs(routes: str, options: str = "") -> str:
    text = UPSTREAMS
    if options:
        text += "    options:\n" + textwrap.indent(textwrap.dedent(options), "      ")
    return text + "    routes:\n" + textwrap.indent(textwrap.dedent(routes), "    ")


def problems(text: str) -> list[tuple[str, str]]:
    try:
        build_snapshot(load_text(text, keep_going=True), PluginHost.create(load_entry_points=False))
    except ConfigError as exc:
        return [(i.field, i.reason) for i in exc.issues]
    return []


GREEN = "{upstream: {name: green, namespace: canary}, percentage: 100}"


class ReadingTests(TestCase):
    @pytest.mark.parametrize("value, field, reason", [
        ("{upstream: {name: green, namespace: canary}}", "shadowing.percentage", "is required"),
        ("{percentage: 5}", "shadowing.upstream", "is required"),
        ("{upstream: {name: green, namespace: canary}, percentage: 101}", "shadowing.percentage",
         "must be a percentage from 0 to 100, got 101"),
        ("{upstream: {name: green, namespace: canary}, percentage: true}", "shadowing.percentage",
         "must be a percentage from 0 to 100"),
        ("{upstream: {name: green, namespace: canary}, percentage: 5, hostSuffix: false}", "shadowing.hostSuffix",
         "unknown field"),
        ("{upstream: {namespace: canary}, percentage: 5}", "shadowing.upstream.name", "is required"),
    ])
    def test_refusals(self, value, field, reason):
        found = problems(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n  options: {{shadowing: {value}}}\n"))
        assert any(f == "spec.virtualHost.routes[0].options." + field and reason in r for f, r in found), found

    def test_a_dangling_upstream_is_named(self):
        found = problems(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n"
                            "  options: {shadowing: {upstream: {name: green}, percentage: 5}}\n"))
        assert found == [("spec.virtualHost.routes[0].options",
                          "shadowing: dangling reference: upstream names no Upstream default/green")]

    def test_a_route_that_answers_itself_has_nothing_to_copy(self):
        found = problems(vs("- matchers: [{prefix: /}]\n  directResponseAction: {status: 200, body: hi}\n"
                            f"  options: {{shadowing: {GREEN}}}\n"))
        assert len(found) == 1 and "answers itself" in found[0][1], found

    def test_a_route_option_only(self):
        found = problems(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n", f"shadowing: {GREEN}\n"))
        assert found == [("spec.virtualHost.options.shadowing",
                          "is a route option (as in Gloo): write it under the routes' options")]


class HostTests(TestCase):
    @pytest.mark.parametrize("host, shadow", [
        (b"api.example.com", b"api.example.com-shadow"),
        (b"api.example.com:8080", b"api.example.com-shadow:8080"),
        (b"10.0.0.1:80", b"10.0.0.1-shadow:80"),
        (b"[::1]:8443", b"[::1]-shadow:8443"),
        (b"[::1]", b"[::1]-shadow"),
    ])
    def test_envoys_suffix_goes_before_the_port(self, host, shadow):
        assert shadow_host(host) == shadow


class PlanTests(TestCase):
    async def test_the_copy_is_the_primary_request_to_the_shadow_upstream(self):
        t = ChainTester.from_yaml(vs(f"""\
            - matchers: [{{prefix: /}}]
              {TO_BLUE}
              options:
                shadowing: {GREEN}
                prefixRewrite: /v2/
                headerManipulation: {{requestHeadersToAdd: [{{header: {{key: x-tag, value: one}}}}]}}
            """), [])
        r = await t.request("POST", "http://api.example.com:8000/orders?id=7", headers={"X-Client": "c"})
        primary = r.plan
        assert isinstance(primary, RetryingForward) and primary.retry is None
        copy = primary.mirror
        assert isinstance(copy, Forward) and copy.mirror is None
        assert (copy.endpoint.host, copy.endpoint.port) == ("127.0.0.2", 9090)
        assert (copy.upstream.namespace, copy.upstream.name) == ("canary", "green")
        assert (copy.method, copy.target, copy.timeout) == (b"POST", b"/v2/orders?id=7", primary.timeout)
        assert copy.headers.getRawHeaders(b"host") == [b"api.example.com-shadow:8000"]
        assert primary.headers.getRawHeaders(b"host") == [b"api.example.com:8000"]
        for name in (b"x-tag", b"x-client", b"x-forwarded-for", b"x-forwarded-proto"):
            assert copy.headers.getRawHeaders(name) == primary.headers.getRawHeaders(name), name
        copy.headers.setRawHeaders(b"x-tag", [b"changed"])  # a copy: the primary's are its own
        assert primary.headers.getRawHeaders(b"x-tag") == [b"one"]

    async def test_percentage_zero_copies_nothing(self):
        t = ChainTester.from_yaml(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n  options: {{shadowing:"
                                     " {upstream: {name: green, namespace: canary}, percentage: 0}}\n"), [])
        for _ in range(50):
            r = await t.request("GET", "http://api.example.com/x")
            assert r.plan.mirror is None

    async def test_a_route_without_shadowing_plans_a_plain_forward(self):
        t = ChainTester.from_yaml(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n"), [])
        r = await t.request("GET", "http://api.example.com/x")
        assert type(r.plan) is Forward and r.plan.mirror is None


class PercentageTests(TestCase):
    async def test_the_roll_decides(self):
        t = ChainTester.from_yaml(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n  options: {{shadowing: {GREEN}}}\n"),
                                  [])
        r = await t.request("GET", "http://api.example.com/x")
        compiled = r.runtime.policy.shadow
        rolls = iter([0.299, 0.3, 0.0, 0.9999])
        shadow = Shadow(compiled.balancer, 30.0, lambda: next(rolls))
        assert [shadow.mirror(r.plan) is not None for _ in range(4)] == [True, False, True, False]
