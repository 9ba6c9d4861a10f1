"""Delegation through the real gateway, in the shape of Gloo Edge's
delegation guide: a virtual service hands ``/a`` to the RouteTables a
selector chooses (weights order them), each owned in its own file; a bad
edit to one table is refused whole and the last good routing keeps serving."""

from __future__ import annotations

import textwrap

import pytest_twisted
from support.http import http_request


def _vs() -> str:
    return textwrap.dedent("""\
        apiVersion: gateway.solo.io/v1
        kind: VirtualService
        metadata: {name: example, namespace: gloo-system}
        spec:
          virtualHost:
            domains: ['*']
            routes:
            - matchers: [{prefix: /a}]
              delegateAction:
                selector:
                  labels: {domain: example.com}
                  namespaces: [gloo-system]
        """)


def _table(name: str, weight: int, prefix: str, port: int) -> str:
    return textwrap.dedent(f"""\
        apiVersion: gateway.solo.io/v1
        kind: RouteTable
        metadata:
          name: {name}
          namespace: gloo-system
          labels: {{domain: example.com}}
        spec:
          weight: {weight}
          routes:
          - matchers: [{{prefix: {prefix}}}]
            routeAction:
              single:
                upstream: {{name: {name}, namespace: gloo-system}}
        ---
        apiVersion: gloo.solo.io/v1
        kind: Upstream
        metadata: {{name: {name}, namespace: gloo-system}}
        spec:
          static:
            hosts: [{{addr: 127.0.0.1, port: {port}}}]
        """)


@pytest_twisted.ensureDeferred
async def test_selector_delegation_and_weights_through_the_proxy(backend_factory, config_dir, gateway):
    a, ab = backend_factory("a"), backend_factory("ab")
    directory = config_dir(_vs(), name="vs.yaml")
    config_dir(_table("a-routes", 20, "/a", a.port), name="a.yaml", directory=directory)
    config_dir(_table("a-b-routes", 10, "/a/b", ab.port), name="ab.yaml", directory=directory)
    gw = gateway(directory)

    assert (await http_request("GET", gw.url("/a/b/c"))).status == 200
    assert len(ab.requests) == 1 and a.requests == []  # weight 10 comes before weight 20
    assert (await http_request("GET", gw.url("/a/x"))).status == 200
    assert len(a.requests) == 1
    assert (await http_request("GET", gw.url("/other"))).status == 404

    # the a-b team moves its route outside the prefix delegated to it:
    # refused whole, and the last good routing keeps serving
    config_dir(_table("a-b-routes", 10, "/b", ab.port), name="ab.yaml", directory=directory)
    assert gw.reload() is False
    assert (await http_request("GET", gw.url("/a/b/c"))).status == 200
    assert len(ab.requests) == 2
    assert (await http_request("GET", gw.url("/b"))).status == 404


def test_the_gateway_logs_each_skipped_document_once(config_dir, gateway):
    from twisted.logger import formatEvent, globalLogPublisher

    seen: list[str] = []

    def observe(event):
        seen.append(formatEvent(event))

    directory = config_dir(
        "apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: v}\nspec:\n"
        "  virtualHost: {routes: [{directResponseAction: {status: 200}}]}\n"
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {}\n"
        "---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: conf}\n")
    globalLogPublisher.addObserver(observe)
    try:
        gateway(directory)
    finally:
        globalLogPublisher.removeObserver(observe)
    notes = [line for line in seen if "not an API group twistgw serves" in line]
    assert len(notes) == 2, seen
    assert "skipped Deployment (apps/v1)" in notes[0] and "skipped ServiceAccount (v1)" in notes[1]
