"""Claim-based routing, in the shape of Gloo Edge's JWT claim-routing guide,
through the real gateway: the virtual host's JWT provider copies the ``org``
claim into ``x-company``, and the routes match on that header. The route is
selected again after the chain (Envoy's ``clearRouteCache``): see
docs/decisions.md, "Claim-based routing"."""

from __future__ import annotations

import textwrap

import pytest_twisted
from support.http import http_request
from jwt_helpers import ClockedJwtPlugin, claim_routing_virtual_service, token

import twistgw_rbac

PLUGINS = [("jwt", ClockedJwtPlugin), ("rbac", twistgw_rbac)]
ISSUER = "solo.io"


def _guide_yaml(primary: int, canary: int, extra_route: str = "") -> str:
    """``extra_route``: YAML of one more route, written first (at column 0)."""
    routes = textwrap.indent(textwrap.dedent(extra_route), " " * 4) + textwrap.indent(textwrap.dedent("""\
        - matchers:
          - prefix: /
            headers:
            - name: x-company
              value: solo.io
          routeAction:
            single:
              upstream: {name: echo-canary, namespace: gloo-system}
        - matchers:
          - prefix: /
          routeAction:
            single:
              upstream: {name: echo-primary, namespace: gloo-system}
        """), " " * 4)
    return textwrap.dedent(f"""\
        # the application's own manifests sit in the same directory; the
        # gateway skips what it does not serve
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: echo-canary, labels: {{app: echoapp, stage: canary}}}}
        spec: {{replicas: 1}}
        ---
        apiVersion: gloo.solo.io/v1
        kind: Upstream
        metadata: {{name: echo-primary, namespace: gloo-system}}
        spec:
          static:
            hosts: [{{addr: 127.0.0.1, port: {primary}}}]
        ---
        apiVersion: gloo.solo.io/v1
        kind: Upstream
        metadata: {{name: echo-canary, namespace: gloo-system}}
        spec:
          static:
            hosts: [{{addr: 127.0.0.1, port: {canary}}}]
        ---
        """) + claim_routing_virtual_service("echo") + "    routes:\n" + routes


@pytest_twisted.ensureDeferred
async def test_claims_choose_the_route(backend_factory, config_dir, gateway):
    primary, canary = backend_factory("primary"), backend_factory("canary")
    gw = gateway(config_dir(_guide_yaml(primary.port, canary.port)), plugins=PLUGINS)
    solo = token(iss=ISSUER, sub="1234567890", org="solo.io")
    other = token(iss=ISSUER, sub="0987654321", org="othercompany.com")

    # a solo.io employee goes to the canary, as the guide's walkthrough shows
    r = await http_request("GET", gw.url(f"/?token={solo}"))
    assert r.status == 200
    assert len(canary.requests) == 1 and primary.requests == []
    assert canary.requests[-1].header(b"x-company") == [b"solo.io"]

    # everyone else to the primary
    r = await http_request("GET", gw.url(f"/?token={other}"))
    assert r.status == 200
    assert len(primary.requests) == 1 and len(canary.requests) == 1
    assert primary.requests[-1].header(b"x-company") == [b"othercompany.com"]

    # the token in the x-token header works the same way
    r = await http_request("GET", gw.url("/"), headers={"x-token": solo})
    assert r.status == 200 and len(canary.requests) == 2

    # no token: the virtual host's JWT requirement holds on every route
    r = await http_request("GET", gw.url("/"))
    assert (r.status, r.body) == (401, b"Jwt is missing")

    # a client cannot choose the route by sending the header itself: the JWT
    # plugin owns x-company, and the route is chosen from what it wrote
    r = await http_request("GET", gw.url(f"/?token={other}"), headers={"x-company": "solo.io"})
    assert r.status == 200
    assert len(primary.requests) == 2 and len(canary.requests) == 2
    assert primary.requests[-1].header(b"x-company") == [b"othercompany.com"]

    # ... nor without a token
    r = await http_request("GET", gw.url("/"), headers={"x-company": "solo.io"})
    assert (r.status, r.body) == (401, b"Jwt is missing")
    assert len(canary.requests) == 2


@pytest_twisted.ensureDeferred
async def test_the_route_selected_again_runs_its_own_chain(backend_factory, config_dir, gateway):
    """A route reached only after the claims were copied still applies its
    own options (here an RBAC policy the first route does not have)."""
    primary, canary = backend_factory("primary"), backend_factory("canary")
    admin_route = textwrap.dedent("""\
        - matchers:
          - prefix: /admin
            headers:
            - name: x-company
              value: solo.io
          options:
            rbac:
              policies:
                admins:
                  principals:
                  - jwtPrincipal: {claims: {role: admin}}
          routeAction:
            single:
              upstream: {name: echo-canary, namespace: gloo-system}
        """)
    gw = gateway(config_dir(_guide_yaml(primary.port, canary.port, admin_route)), plugins=PLUGINS)
    solo_user = token(iss=ISSUER, org="solo.io", role="user")
    solo_admin = token(iss=ISSUER, org="solo.io", role="admin")

    r = await http_request("GET", gw.url(f"/admin/x?token={solo_user}"))
    assert (r.status, r.body) == (403, b"RBAC: access denied")
    assert canary.requests == [] and primary.requests == []

    r = await http_request("GET", gw.url(f"/admin/x?token={solo_admin}"))
    assert r.status == 200 and len(canary.requests) == 1


@pytest_twisted.ensureDeferred
async def test_explain_shows_the_route_selected_again(tmp_path):
    from twistgw.sdk.testing import ChainTester

    (tmp_path / "c.yaml").write_text(_guide_yaml(1, 2))
    tester = ChainTester.from_directory(str(tmp_path), plugins=PLUGINS, load_entry_points=False)
    result = await tester.request("GET", "http://h/?token=" + token(iss=ISSUER, org="solo.io"))
    assert result.ctx.route == "routes[0]"
    steps = [(p, ph) for p, ph, _ in result.trace]
    assert steps == [("jwt", "authenticate"), ("routing", "reselect")]
    assert "select route routes[0] (was routes[1])" in result.trace[1][2].reason
    other = await tester.request("GET", "http://h/?token=" + token(iss=ISSUER, org="othercompany.com"))
    assert other.ctx.route == "routes[1]" and [p for p, _, _ in other.trace] == ["jwt"]
