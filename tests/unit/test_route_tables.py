"""RouteTables and delegateAction, with Gloo Edge's rules: ref or selector
(labels, expressions, namespaces), weights, the delegated prefix kept by
every child, options inherited; cycles and dangling delegations rejected."""

from __future__ import annotations

import textwrap

import pytest

from twistgw.config.loader import ConfigError, load_text
from twistgw.sdk.testing import ChainTester

from support.trial import TestCase


def vs(routes: str, ns: str = "gloo-system") -> str:
    return textwrap.dedent(f"""\
        apiVersion: gateway.solo.io/v1
        kind: VirtualService
        metadata: {{name: example, namespace: {ns}}}
        spec:
          virtualHost:
            domains: [example.com]
            routes:
        """) + textwrap.indent(textwrap.dedent(routes), "    ")


def table(name: str, ns: str, routes: str, labels: str = "{}", weight: int | None = None) -> str:
    w = f"  weight: {weight}\n" if weight is not None else ""
    return "---\n" + textwrap.dedent(f"""\
        apiVersion: gateway.solo.io/v1
        kind: RouteTable
        metadata: {{name: {name}, namespace: {ns}, labels: {labels}}}
        spec:
        """) + w + "  routes:\n" + textwrap.indent(textwrap.dedent(routes), "  ")


def direct(path_matcher: str, body: str, extra: str = "") -> str:
    return f"- matchers: [{path_matcher}]\n  directResponseAction: {{status: 200, body: {body}}}\n{extra}"


async def served(t: ChainTester, path: str) -> str | None:
    r = await t.request("GET", "http://example.com" + path)
    return None if r.status == 404 else r.body.decode()


def issues(text: str) -> list:
    with pytest.raises(ConfigError) as info:
        load_text(text, "rt.yaml")
    return info.value.issues


class RouteTablesTests(TestCase):
    async def test_delegation_by_ref_nested(self):
        text = vs("""\
        - matchers: [{prefix: /a}]
          delegateAction: {ref: {name: a-routes, namespace: a}}
        - matchers: [{prefix: /b}]
          delegateAction: {ref: {name: b-routes, namespace: b}}
        """) + table("a-routes", "a", direct("{prefix: /a/1}", "a1") + direct("{prefix: /a/2}", "a2")) \
            + table("b-routes", "b", direct("{regex: '/b/3'}", "b3") + textwrap.dedent("""\
            - matchers: [{prefix: /b/c/}]
              delegateAction: {ref: {name: c-routes, namespace: c}}
            """)) + table("c-routes", "c", direct("{exact: /b/c/4}", "c4"))
        t = ChainTester.from_yaml(text, [])
        assert [await served(t, p) for p in ("/a/1", "/a/2x", "/b/3", "/b/c/4", "/b/c/5", "/a")] == \
            ["a1", "a2", "b3", "c4", None, None]
        routes = t.snapshot.config.virtual_services[0].routes
        assert [r.index for r in routes] == [0, 1, 2, 3]
        assert routes[3].owner == "RouteTable c/c-routes"

    async def test_selector_weights_and_namespaces(self):
        text = vs("""\
        - matchers: [{prefix: /}]
          delegateAction:
            selector:
              labels: {domain: example.com}
              namespaces: [gloo-system]
        """) + table("a-routes", "gloo-system", direct("{prefix: /a}", "a"), "{domain: example.com}", 20) \
            + table("a-b-routes", "gloo-system", direct("{prefix: /a/b}", "ab"), "{domain: example.com}", 10) \
            + table("elsewhere", "other", direct("{prefix: /a/b/c}", "other"), "{domain: example.com}", 0) \
            + table("unlabelled", "gloo-system", direct("{prefix: /a/b/c}", "unlabelled"), "{}", 0)
        t = ChainTester.from_yaml(text, [])
        assert await served(t, "/a/b/c") == "ab"  # weight 10 before weight 20; other tables not selected
        assert await served(t, "/a/x") == "a"

    async def test_equal_weights_sort_most_specific_first_and_expressions(self):
        text = vs("""\
        - matchers: [{prefix: /}]
          delegateAction:
            selector:
              expressions:
              - {key: team, operator: In, values: [pets, vets]}
              - {key: retired, operator: DoesNotExist}
              namespaces: ['*']
        """) + table("short", "one", direct("{prefix: /api}", "short"), "{team: pets}") \
            + table("long", "two", direct("{prefix: /api/pets}", "long"), "{team: vets}") \
            + table("gone", "two", direct("{prefix: /api/pets/x}", "gone"), "{team: vets, retired: 'yes'}")
        t = ChainTester.from_yaml(text, [])
        assert await served(t, "/api/pets/x") == "long"
        assert await served(t, "/api/vets") == "short"

    async def test_children_inherit_matcher_and_options(self):
        text = vs("""\
        - matchers: [{prefix: /shop}]
          options: {prefixRewrite: /v2, timeout: 3s}
          delegateAction: {ref: {name: shop}}
        """) + table("shop", "gloo-system", textwrap.dedent("""\
            - directResponseAction: {status: 200, body: all}
            - matchers: [{prefix: /shop/fast}]
              options: {timeout: 1s}
              directResponseAction: {status: 200, body: fast}
            """))
        t = ChainTester.from_yaml(text, [])
        every, fast = t.snapshot.config.virtual_services[0].routes
        assert [m.prefix for m in every.matchers] == ["/shop"]  # no matchers: the parent's
        assert (every.prefix_rewrite, every.timeout) == ("/v2", 3.0)
        assert (fast.prefix_rewrite, fast.timeout) == ("/v2", 1.0)
        assert await served(t, "/shop/x") == "all"

    async def test_a_child_never_matches_outside_the_delegated_prefix(self):
        # issue 23 item 5: a child regex '/team/.*|/admin/.*' starts with the
        # delegated prefix, passed check, and served /admin/x
        text = vs("""\
        - matchers: [{prefix: /team/}]
          delegateAction: {ref: {name: team, namespace: gloo-system}}
        - matchers: [{prefix: /admin/}]
          directResponseAction: {status: 403, body: admin}
        - matchers: [{prefix: /Team/}]
          directResponseAction: {status: 200, body: upper}
        """) + table("team", "gloo-system",
                     direct("{regex: '/team/.*|/admin/.*'}", "team")
                     + direct("{prefix: /team/ci/, caseSensitive: false}", "ci"))
        t = ChainTester.from_yaml(text, [])
        assert await served(t, "/team/x") == "team"
        assert await served(t, "/admin/x") == "admin"  # the table's regex does not reach outside /team/
        assert await served(t, "/TEAM/CI/x") is None  # nor does its case-insensitive route
        assert await served(t, "/Team/x") == "upper"

    def test_child_must_keep_the_parent_prefix(self):
        text = vs("""\
        - matchers: [{prefix: /api}]
          delegateAction: {ref: {name: t}}
        """) + table("t", "gloo-system", direct("{prefix: /api/v1}", "ok") + direct("{prefix: /v2}", "bad")
                         + direct("{regex: '/.*'}", "bad2"))
        found = issues(text)
        assert [(i.resource, i.field, i.line) for i in found] == [
            ("RouteTable gloo-system/t", "spec.routes[1].matchers[0]", 18),
            ("RouteTable gloo-system/t", "spec.routes[2].matchers[0]", 20),
        ]
        assert "prefix '/v2' does not start with '/api'" in found[0].reason
        assert found[0].file == "rt.yaml" and found[0].document == 1

    def test_delegating_route_rules(self):
        text = vs("""\
        - matchers: [{exact: /api}]
          delegateAction: {ref: {name: t}}
        - matchers: [{prefix: /a}, {prefix: /b}]
          delegateAction: {ref: {name: t}}
        - matchers: [{prefix: /h, headers: [{name: x-team, value: a}]}]
          delegateAction: {ref: {name: h}}
        """) + table("t", "gloo-system", direct("{prefix: /api}", "x")) \
            + table("h", "gloo-system", direct("{prefix: /h/1, headers: [{name: x-team, value: a}]}", "ok")
                    + direct("{prefix: /h/2}", "missing"))
        reasons = [(i.field, i.reason) for i in issues(text)]
        assert reasons[0] == ("spec.virtualHost.routes[0].matchers[0].exact",
                              "a delegating route matches by prefix only, not exact")
        assert reasons[1] == ("spec.virtualHost.routes[1].matchers", "a delegating route takes exactly one prefix matcher")
        assert reasons[2][0] == "spec.routes[1].matchers[0]" and "x-team" in reasons[2][1]
        assert len(reasons) == 3

    def test_cycles_and_dangling_delegations(self):
        text = vs("""\
        - matchers: [{prefix: /a}]
          delegateAction: {ref: {name: one}}
        - matchers: [{prefix: /b}]
          delegateAction: {ref: {name: nowhere}}
        - matchers: [{prefix: /c}]
          delegateAction: {selector: {labels: {nobody: here}}}
        """) + table("one", "gloo-system", "- matchers: [{prefix: /a/1}]\n  delegateAction: {ref: {name: two}}\n") \
            + table("two", "gloo-system", "- matchers: [{prefix: /a/1/2}]\n  delegateAction: {ref: {name: one}}\n")
        found = {(i.resource, i.field): i.reason for i in issues(text)}
        assert found == {
            ("RouteTable gloo-system/two", "spec.routes[0].delegateAction"):
                "delegation cycle: RouteTable gloo-system/one -> RouteTable gloo-system/two -> RouteTable gloo-system/one",
            ("VirtualService gloo-system/example", "spec.virtualHost.routes[1].delegateAction.ref"):
                "dangling delegation: no RouteTable gloo-system/nowhere",
            ("VirtualService gloo-system/example", "spec.virtualHost.routes[2].delegateAction.selector"):
                "dangling delegation: the selector chooses no RouteTable",
        }

    def test_an_invalid_table_is_reported_once(self):
        text = vs("""\
        - matchers: [{prefix: /a}]
          delegateAction: {ref: {name: broken}}
        """) + table("broken", "gloo-system", "- matchers: [{prefix: /a}]\n  routeAction: 7\n")
        found = issues(text)
        assert [(i.resource, i.field) for i in found] == [("RouteTable gloo-system/broken", "spec.routes[0].routeAction")]

    def test_selector_errors(self):
        text = vs("""\
        - matchers: [{prefix: /}]
          delegateAction: {selector: {labels: {a: b}, expressions: [{key: a, operator: Exists}]}}
        - matchers: [{prefix: /}]
          delegateAction: {selector: {expressions: [{key: a, operator: Like, values: [x]}]}}
        - matchers: [{prefix: /}]
          delegateAction: {ref: {name: x}, selector: {}}
        """)
        found = [(i.field, i.reason) for i in issues(text)]
        assert found == [
            ("spec.virtualHost.routes[0].delegateAction.selector", "set labels or expressions, not both (as in Gloo)"),
            ("spec.virtualHost.routes[1].delegateAction.selector.expressions[0].operator",
             "unknown operator 'Like' (expected one of: Equals, DoubleEquals, NotEquals, In, NotIn, Exists,"
             " DoesNotExist, GreaterThan, LessThan)"),
            ("spec.virtualHost.routes[2].delegateAction", "set exactly one of ref or selector"),
        ]

    async def test_inheritable_matchers_and_path_matchers(self):
        text = vs("""\
        - matchers: [{prefix: /api, headers: [{name: x-team, value: a}], methods: [GET, POST]}]
          inheritableMatchers: true
          delegateAction: {ref: {name: t}}
        - matchers: [{prefix: /p}]
          inheritablePathMatchers: true
          delegateAction: {ref: {name: paths}}
        """) + table("t", "gloo-system", direct("{prefix: /api/1}", "one") + direct(
                "{prefix: /api/2, methods: [POST, DELETE]}", "two")) \
            + table("paths", "gloo-system", direct("{exact: /anything}", "inherited-path"))
        t = ChainTester.from_yaml(text, [])

        async def serve(method, path, headers=None):
            r = await t.request(method, "http://example.com" + path, headers)
            return None if r.status == 404 else r.body.decode()

        assert await serve("GET", "/api/1", {"x-team": "a"}) == "one"
        assert await serve("GET", "/api/1") is None  # the parent's header condition was added
        assert await serve("DELETE", "/api/1", {"x-team": "a"}) is None  # and its methods
        assert await serve("POST", "/api/2", {"x-team": "a"}) == "two"
        assert await serve("DELETE", "/api/2", {"x-team": "a"}) is None  # methods: the intersection
        assert await serve("GET", "/p/x") == "inherited-path"  # the parent's prefix, not /anything

    def test_inherited_methods_that_leave_none_are_an_error(self):
        text = vs("""\
        - matchers: [{prefix: /api, methods: [GET]}]
          inheritableMatchers: true
          delegateAction: {ref: {name: t}}
        """) + table("t", "gloo-system", direct("{prefix: /api/1, methods: [POST]}", "never"))
        (issue,) = issues(text)
        assert issue.field == "spec.routes[0].matchers[0]" and "methods GET" in issue.reason

    def test_without_inheritance_children_must_repeat_the_conditions(self):
        text = vs("""\
        - matchers: [{prefix: /api, headers: [{name: x-team, value: a}]}]
          inheritableMatchers: false
          delegateAction: {ref: {name: t}}
        """) + table("t", "gloo-system", direct("{prefix: /api/1}", "one"))
        (issue,) = issues(text)
        assert "must repeat the delegating route's conditions (x-team)" in issue.reason
