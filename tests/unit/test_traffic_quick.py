"""The pipeline's quick path for routes whose traffic options are header
edits, CORS and retries (``RouteRuntime.quick``, ``core.policyplan.plan_quick``)
makes the same plan as the general path.

``ChainTester`` (and ``twistgw explain``) always trace, so they take the
general path; the gateway does not trace, so a quick route is served by
the quick path. Each case runs one request both ways through the same
``Pipeline`` and compares everything the engine reads from the plan.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from twisted.internet.defer import Deferred

from twistgw.api.headers import Headers
from twistgw.core.pipeline import RequestHead
from twistgw.core.plan import Forward, LocalResponse, RetryingForward
from twistgw.sdk.testing import ChainTester

from support.plugins import adder
from support.trial import TestCase

UPSTREAM = """\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: blue}
spec: {static: {hosts: [{addr: blue.internal, port: 8080}]}}
---
"""

#: bench/harness.py's traffic row (issue 24)
BENCH = """\
retries: {retryOn: "5xx,connect-failure,reset", numRetries: 3, perTryTimeout: 5s}
headerManipulation:
  requestHeadersToAdd: [{header: {key: x-gateway, value: twistgw}, append: false}]
  requestHeadersToRemove: [x-debug]
  responseHeadersToAdd: [{header: {key: x-served-by, value: twistgw}}]
  responseHeadersToRemove: [server]
cors:
  allowOrigin: [https://app.example.com]
  allowOriginRegex: ['https://[a-z]+\\.partner\\.example']
  allowMethods: [GET, POST]
  allowHeaders: [authorization]
  exposeHeaders: [x-request-id]
  allowCredentials: true
"""

APPEND = """\
headerManipulation:
  requestHeadersToAdd:
  - {header: {key: x-tag, value: route}, append: true}
  - {header: {key: x-new, value: one}, append: true}
  - {header: {key: x-set, value: route}, append: false}
  requestHeadersToRemove: [x-debug, x-set]
"""

VHOST = """\
headerManipulation:
  requestHeadersToAdd: [{header: {key: x-set, value: vhost}, append: false}, {header: {key: x-tag, value: vh}}]
  responseHeadersToAdd: [{header: {key: x-vh, value: "1"}}]
"""


def config(route_options: str, vhost_options: str = "") -> str:
    text = UPSTREAM + textwrap.dedent("""\
        apiVersion: gateway.solo.io/v1
        kind: VirtualService
        metadata: {name: vs}
        spec:
          virtualHost:
            domains: ['*']
        """)
    if vhost_options:
        text += "    options:\n" + textwrap.indent(vhost_options, "      ")
    text += "    routes:\n    - matchers: [{prefix: /}]\n"
    text += "      routeAction: {single: {upstream: {name: blue}}}\n"
    if route_options:
        text += "      options:\n" + textwrap.indent(route_options, "        ")
    return text




def described(plan: Any) -> tuple[Any, ...]:
    """Everything the engine reads from a plan."""
    if isinstance(plan, Deferred):
        found: list[Any] = []
        plan.addBoth(found.append)
        (plan,) = found  # the test plugins answer at once
    if isinstance(plan, Forward):
        edit = plan.response_edit
        return (type(plan).__name__, plan.method, plan.target, plan.endpoint.host, plan.endpoint.port,
                sorted(plan.headers.raw.items()), plan.timeout, plan.upstream, plan.retry, plan.mirror, plan.watch,
                None if edit is None else (sorted(edit.drop), edit.adds, edit.lines, sorted(edit.skip)))
    assert isinstance(plan, LocalResponse)
    return "LocalResponse", plan.status, plan.body, plan.headers, plan.content_type, plan.reason, plan.answer


def both_ways(tester: ChainTester, method: str, target: str, headers: dict[str, str]) -> tuple[Any, Any, bool]:
    """(the gateway's plan, the traced plan, whether the route is quick)."""
    plans = []
    for trace in (None, lambda plugin, phase, decision: None):
        h = Headers()
        h.setRawHeaders(b"host", [b"api.example.com"])
        for name, value in headers.items():
            h.setRawHeaders(name.encode(), [value.encode()])
        head = RequestHead(method.encode(), target.encode(), h, "10.0.0.7")
        plans.append(described(tester.pipeline.handle(head, tester.snapshot, trace)))
    assert head.runtime is not None
    return plans[0], plans[1], head.runtime.quick is not None


ALLOWED = {"origin": "https://app.example.com"}
PARTNER = {"origin": "https://shop.partner.example"}
EVIL = {"origin": "https://evil.example"}
PREFLIGHT = {"origin": "https://app.example.com", "access-control-request-method": "POST"}
SENT = {"x-debug": "1", "x-tag": "client", "x-set": "client", "user-agent": "t"}


class QuickPathTests(TestCase):
    @pytest.mark.parametrize("route, vhost, plugin", [
        (BENCH, "", None),
        (BENCH, "", adder()),
        (BENCH, "", adder(deny=True)),
        (BENCH, "", adder(later=True)),
        (BENCH, "", adder(deny=True, later=True)),
        (BENCH + "prefixRewrite: /v2/\n", "", None),
        (APPEND, VHOST, None),
        (APPEND + "cors: {allowOrigin: ['*']}\n", "", None),
        ("retries: {retryOn: 5xx, numRetries: 1}\n", "", None),
        ("cors: {allowOrigin: [https://app.example.com]}\n", "", adder(deny=True)),
    ])
    @pytest.mark.parametrize("method, target, headers", [
        ("GET", "/a?q=1", ALLOWED), ("GET", "/a", PARTNER), ("POST", "/a", EVIL), ("GET", "/", {}),
        ("GET", "/a", SENT | ALLOWED), ("OPTIONS", "/a", PREFLIGHT), ("OPTIONS", "/a", ALLOWED),
    ])
    def test_the_same_plan_as_the_general_path(self, route, vhost, plugin, method, target, headers):
        tester = ChainTester.from_yaml(config(route, vhost), [plugin] if plugin else [])
        quick, general, is_quick = both_ways(tester, method, target, headers)
        assert is_quick
        assert quick == general

    def test_the_bench_route_forwards_with_its_edit(self):
        tester = ChainTester.from_yaml(config(BENCH), [])
        quick, _, _ = both_ways(tester, "GET", "/a", SENT | ALLOWED)
        assert quick[0] == "RetryingForward" and quick[8] is not None  # the route's retries
        headers = dict(quick[5])
        assert b"X-Debug" not in headers and headers[b"X-Gateway"] == [b"twistgw"]
        assert headers[b"X-Forwarded-For"] == [b"10.0.0.7"] and headers[b"X-Real-Ip"] == [b"10.0.0.7"]
        drop, adds, lines, _ = quick[11]
        assert b"server" in drop and b"access-control-allow-origin" in drop
        assert adds == ((b"X-Served-By", b"twistgw"), (b"Access-Control-Allow-Credentials", b"true"),
                        (b"Access-Control-Expose-Headers", b"x-request-id"),
                        (b"Access-Control-Allow-Origin", b"https://app.example.com"))
        assert lines == [b"%s: %s\r\n" % pair for pair in adds]

    def test_an_allowed_origins_edit_is_made_once_and_shared(self):
        tester = ChainTester.from_yaml(config(BENCH), [])
        snapshot = tester.snapshot
        plans = []
        for origin in (b"https://app.example.com", b"https://app.example.com", b"https://evil.example"):
            h = Headers()
            h.setRawHeaders(b"host", [b"api.example.com"])
            h.setRawHeaders(b"origin", [origin])
            plans.append(tester.pipeline.handle(RequestHead(b"GET", b"/", h, "10.0.0.7"), snapshot))
        assert all(type(p) is RetryingForward for p in plans)
        assert plans[0].response_edit is plans[1].response_edit  # type: ignore[union-attr]
        # a disallowed origin: the route's own response edit, no CORS header
        policy = snapshot.runtime(*_vs_and_route(snapshot)).policy
        assert policy is not None and plans[2].response_edit is policy.response  # type: ignore[union-attr]
        assert plans[2].response_edit.adds == ((b"X-Served-By", b"twistgw"),)  # type: ignore[union-attr]

    @pytest.mark.parametrize("options", [
        "hostRewrite: other.internal\n", "autoHostRewrite: true\n",
        "regexRewrite: {pattern: {regex: '^/a'}, substitution: /b}\n",
        "faults: {abort: {percentage: 0, httpStatus: 503}}\n",
        "csrf: {filterEnabled: {defaultValue: {numerator: 100}}}\n",
        "bufferPerRoute: {buffer: {maxRequestBytes: 10}}\n",
    ])
    def test_other_options_take_the_general_path(self, options):
        tester = ChainTester.from_yaml(config(BENCH + options), [])
        quick, general, is_quick = both_ways(tester, "GET", "/a", ALLOWED)
        assert not is_quick
        assert quick == general


def _vs_and_route(snapshot: Any) -> tuple[Any, Any]:
    (vs,) = [v for v in snapshot.config.of_kind("VirtualService").values()]
    return vs, vs.routes[0]
