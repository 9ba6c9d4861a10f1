"""Request bodies for extauth and ``passThroughAuth.grpc`` in a real gateway
on loopback, in front of a real backend: the authorization service sees
the first ``maxRequestBytes`` of the body (``passThroughBody`` over HTTP,
the CheckRequest over gRPC, the body of a ``customAuth`` check), bodies
below, at and above the bound, with ``Content-Length`` and chunked, and
the backend still receives every byte. A gRPC server that admits, refuses
with a body, hangs and is down; a client that forges a header the server
sets."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from support.grpc_authz import HANG, denied, header_map, ok, start_grpc_authz
from support.http import ChunkedBody, http_request
from support.recorder import Recorded, start_recorder
from test_authtypes_gateway import _GatewayTest, vs
from test_services_loopback import _closed_port, reply


def settings(max_bytes: int, partial: bool = False, extra: str = "") -> str:
    return f"""---
apiVersion: gateway.vendor.io/v1
kind: Settings
metadata: {{name: default}}
spec:
  extauth:
    requestBody: {{maxRequestBytes: {max_bytes}, allowPartialMessage: {str(partial).lower()}}}
{extra}"""


class _BodyTest(_GatewayTest):
    async def post(self, body: Any, path: str = "/pets", **headers: str) -> Any:
        return await http_request("POST", self.gw.url(path), body=body,
                                  headers={k.replace("_", "-"): v for k, v in headers.items()})

    def backend_got(self, body: bytes) -> None:
        seen = self.backend.requests[-1]
        self.assertEqual((seen.body_length, seen.body_sha256), (len(body), hashlib.sha256(body).hexdigest()))


class HttpPassThroughBodyTests(_BodyTest):
    def config(self, service_port: int, max_bytes: int, partial: bool = False) -> None:
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {configRef: {name: pt}}")
                                          + settings(max_bytes, partial))
        (self.dir / "auth.yaml").write_text(f"""apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: pt, namespace: gloo-system}}
spec:
  configs:
  - passThroughAuth:
      http:
        url: http://127.0.0.1:{service_port}/auth
        request: {{passThroughBody: true}}
""")

    async def test_bodies_below_at_and_above_the_bound(self) -> None:
        def respond(r: Recorded) -> bytes:
            return reply(403 if b"deny" in json.loads(r.body)["body"].encode() else 200)

        service = start_recorder(respond)
        self.addCleanup(service.close)
        self.config(service.port, 1000)
        self.serve()
        for body in (b"small", b"x" * 1000):
            self.assertEqual((await self.post(body)).status, 200)
            self.assertEqual(json.loads(service.requests[-1].body), {"body": body.decode()})
            self.backend_got(body)
        chunked = [b"a" * 300, b"b" * 300, b"c" * 300]
        self.assertEqual((await self.post(ChunkedBody(chunked, delay=0.01))).status, 200)
        self.assertEqual(json.loads(service.requests[-1].body), {"body": "".join(p.decode() for p in chunked)})
        self.backend_got(b"".join(chunked))
        self.assertEqual((await self.post(b"please deny")).status, 403)
        asked = len(service.requests)
        self.assertEqual((await self.post(b"y" * 1001)).status, 413)
        self.assertEqual((await self.post(ChunkedBody([b"z" * 600, b"z" * 600], delay=0.01))).status, 413)
        self.assertEqual(len(service.requests), asked)  # over the bound: never asked
        self.assertEqual(len(self.backend.requests), 3)

    async def test_partial_sends_the_start_and_forwards_everything(self) -> None:
        service = start_recorder(lambda r: reply(200))
        self.addCleanup(service.close)
        self.config(service.port, 100, partial=True)
        self.serve()
        body = bytes(range(48, 58)) * 30_000  # 300 KB: far past the bound and the engine's 64 KiB buffer
        self.assertEqual((await self.post(body)).status, 200)
        self.assertEqual(json.loads(service.requests[-1].body), {"body": body[:100].decode()})
        self.backend_got(body)


class GrpcGatewayTests(_BodyTest):
    def config(self, address: str, extra_settings: str | None = None, fma: bool = False) -> None:
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {configRef: {name: g}}")
                                          + (extra_settings or ""))
        (self.dir / "auth.yaml").write_text(f"""apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: g, namespace: gloo-system}}
spec:
  configs:
  - passThroughAuth:
      grpc: {{address: "{address}", connectionTimeout: 300ms}}
      failureModeAllow: {str(fma).lower()}
""")

    async def test_admit_deny_hang_down(self) -> None:
        def respond(r: Any) -> Any:
            token = header_map(r).get("authorization", "")
            if token == "authorize me":
                return ok(headers=(("x-user-id", "42"),), response_headers=(("x-auth", "yes"),))
            if token == "slow":
                return HANG
            return denied(16, 401, (("WWW-Authenticate", 'Bearer realm="pets"'),), "go away")

        server = start_grpc_authz(respond)
        self.addCleanup(server.close)
        self.config(server.address)
        self.serve()
        good = await self.get(authorization="authorize me", x_user_id="admin")  # a forged x-user-id
        self.assertEqual((good.status, good.headers.getRawHeaders(b"x-auth")), (200, [b"yes"]))
        self.assertEqual(self.backend.requests[-1].header(b"x-user-id"), [b"42"])
        refused = await self.get(authorization="nope")
        self.assertEqual((refused.status, refused.body), (401, b"go away"))
        self.assertEqual(refused.headers.getRawHeaders(b"www-authenticate"), [b'Bearer realm="pets"'])
        self.assertEqual((await self.get(authorization="slow")).status, 503)
        self.assertEqual(len(self.backend.requests), 1)
        self.config(f"127.0.0.1:{_closed_port()}")
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get(authorization="authorize me")).status, 503)
        self.config(f"127.0.0.1:{_closed_port()}", fma=True)
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get()).status, 200)

    async def test_the_body_in_the_check_request_and_at_the_backend(self) -> None:
        server = start_grpc_authz(lambda r: ok())
        self.addCleanup(server.close)
        self.config(server.address, settings(64))
        self.serve()
        self.assertEqual((await self.post(b"hello grpc")).status, 200)
        self.assertEqual(server.requests[-1].attributes.request.http.body, "hello grpc")
        self.backend_got(b"hello grpc")
        self.assertEqual((await self.post(ChunkedBody([b"a" * 40, b"b" * 24], delay=0.01))).status, 200)
        self.assertEqual(server.requests[-1].attributes.request.http.body, "a" * 40 + "b" * 24)
        self.backend_got(b"a" * 40 + b"b" * 24)
        self.assertEqual((await self.post(b"q" * 65)).status, 413)
        self.assertEqual(len(server.requests), 2)


class CustomAuthBodyTests(_BodyTest):
    async def test_the_check_carries_the_body(self) -> None:
        service = start_recorder(lambda r: reply(200 if r.body.startswith(b"ok") else 403))
        self.addCleanup(service.close)
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {customAuth: {}}") + f"""---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: auth-server, namespace: gloo-system}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: {service.port}}}]}}
""" + settings(16, partial=True, extra="""    extauthzServerRef: {name: auth-server, namespace: gloo-system}
    httpService: {}
    requestTimeout: 0.5s
"""))
        self.serve()
        body = b"ok, and a longer tail past sixteen bytes"
        self.assertEqual((await self.post(body)).status, 200)
        sent = service.requests[-1]
        self.assertEqual((sent.method, sent.body, sent.headers(b"x-envoy-auth-partial-body")),
                         (b"POST", body[:16], [b"true"]))
        self.backend_got(body)
        self.assertEqual((await self.post(b"no")).status, 403)
        self.assertEqual(service.requests[-1].headers(b"x-envoy-auth-partial-body"), [b"false"])


class TwoReadersTests(_BodyTest):
    async def test_two_configs_of_one_auth_config_both_see_the_body(self) -> None:
        grpc_server = start_grpc_authz(lambda r: ok(headers=(("x-grpc-saw", r.attributes.request.http.body),)))
        self.addCleanup(grpc_server.close)
        service = start_recorder(lambda r: reply(200))
        self.addCleanup(service.close)
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {configRef: {name: two}}")
                                          + settings(32))
        (self.dir / "auth.yaml").write_text(f"""apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: two, namespace: gloo-system}}
spec:
  configs:
  - passThroughAuth:
      http: {{url: "http://127.0.0.1:{service.port}/auth", request: {{passThroughBody: true}}}}
  - passThroughAuth:
      grpc: {{address: "{grpc_server.address}"}}
""")
        self.serve()
        self.assertEqual((await self.post(ChunkedBody([b"first ", b"second"], delay=0.01))).status, 200)
        self.assertEqual(json.loads(service.requests[-1].body), {"body": "first second"})
        self.assertEqual(self.backend.requests[-1].header(b"x-grpc-saw"), [b"first second"])
        self.backend_got(b"first second")
