"""``RequestContext.add_response_header``: headers plugins add to the
client's response, folded into the plan (``Forward.response_edit``, or the
gateway's own answer) and refused for the headers the engine owns. Over
sockets, each user of it is tested with its plugin (extauth, ratelimit,
authtypes, oidc) and the engine's half with traffic options
(tests/integration/test_traffic_e2e.py)."""

from __future__ import annotations

import textwrap
from typing import Any


from twistgw.api.types import RequestContext
from twistgw.core.plan import Forward, LocalResponse
from twistgw.sdk.testing import ChainTester

from support.plugins import adder
from support.trial import TestCase

UPSTREAM = """\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: app}
spec: {static: {hosts: [{addr: 127.0.0.1, port: 9}]}}
---
"""


def config(route: str, route_options: str = "{adder: {}}", vh_options: str = "") -> str:
    text = UPSTREAM + textwrap.dedent(f"""\
        apiVersion: gateway.solo.io/v1
        kind: VirtualService
        metadata: {{name: vs}}
        spec:
          virtualHost:
            domains: ["*"]
            {vh_options}
            routes:
            - matchers: [{{prefix: /}}]
              {route}
              options: {route_options}
        """)
    return text


FORWARD = "routeAction: {single: {upstream: {name: app}}}"




async def run(text: str, plugin: tuple[str, object] | None = None) -> Any:
    tester = ChainTester.from_yaml(text, [plugin or adder()])
    return await tester.request("GET", "http://api.example.com/x")


class AddResponseHeaderTests(TestCase):
    async def test_a_plain_route_has_no_response_edit_and_no_list(self) -> None:
        r = await run(config(FORWARD, "{}"))
        assert isinstance(r.plan, Forward)
        assert r.plan.response_edit is None and r.ctx.response_headers is None

    async def test_headers_added_by_a_plugin_go_into_the_forward(self) -> None:
        for later in (False, True):
            r = await run(config(FORWARD), adder(later=later))
            assert isinstance(r.plan, Forward)
            lines = r.plan.response_edit.apply_to_lines([b"Set-Cookie: backend=1\r\n"])
            assert lines == [b"Set-Cookie: backend=1\r\n", b"X-Seen-By: adder\r\n", b"Set-Cookie: a=1\r\n"]

    async def test_after_the_routes_own_response_headers(self) -> None:
        route_options = ("{adder: {}, headerManipulation: {responseHeadersToRemove: [server],"
                         " responseHeadersToAdd: [{header: {key: x-route, value: r}}]}}")
        r = await run(config(FORWARD, route_options))
        lines = r.plan.response_edit.apply_to_lines([b"Server: nginx\r\n"])
        assert [line.lower() for line in lines] == [b"x-route: r\r\n", b"x-seen-by: adder\r\n", b"set-cookie: a=1\r\n"]

    async def test_on_the_gateways_own_answers_and_refusals(self) -> None:
        direct = await run(config('directResponseAction: {status: 200, body: "hi"}'))
        assert isinstance(direct.plan, LocalResponse)
        assert direct.response_headers == ((b"X-Seen-By", b"adder"), (b"Set-Cookie", b"a=1"))
        again = await run(config('directResponseAction: {status: 200, body: "hi"}', "{}"))
        assert again.response_headers == ()  # the route's shared answer was not changed
        for later in (False, True):
            refused = await run(config(FORWARD), adder(deny=True, later=later))
            assert refused.status == 401
            assert refused.response_headers == ((b"www-authenticate", b"Basic"), (b"X-Seen-By", b"adder"),
                                                (b"Set-Cookie", b"a=1"))

    def test_framing_and_hop_by_hop_headers_are_refused_at_the_call(self) -> None:
        ctx = RequestContext("GET", "/")
        for name in (b"Content-Length", b"transfer-encoding", b"Connection", b"Keep-Alive", b"Upgrade",
                     b"TE", b"Trailer", b"Proxy-Connection"):
            with self.assertRaises(ValueError) as caught:
                ctx.add_response_header(name, b"1")
            assert "the gateway writes itself" in str(caught.exception)
        for name, value in ((b"X-A", b"1\r\nX-Evil: 1"), (b"X-A", b"a\x00"), (b"Bad Name", b"1"), (b"", b"1")):
            with self.assertRaises(ValueError):
                ctx.add_response_header(name, value)
        with self.assertRaises(TypeError):
            ctx.add_response_header("X-A", "1")  # type: ignore[arg-type]
        assert ctx.response_headers is None
        ctx.add_response_header(b"X-A", b"1")
        assert ctx.response_headers == [(b"X-A", b"1")]
