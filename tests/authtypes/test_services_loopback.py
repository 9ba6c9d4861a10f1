"""``passThroughAuth.http`` and ``customAuth`` against a real HTTP service on
loopback (the recording server of ``support.recorder``): what is sent, an
admitting answer, a refusal with a body and headers, a service that does
not answer in time, one that is down, and pooled connections."""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet import reactor

from twistgw.sdk import OptionsError
from twistgw_extauth import AuthAllow, AuthDeny
from twistgw.api.types import Endpoint, UpstreamInfo
from twistgw_authtypes.custom import CustomAuth
from twistgw_authtypes.passthrough import PassThroughAuth

from authtypes_helpers import Resources, request, scope
from support.recorder import Recorded, start_recorder
from support.trial import TestCase


def reply(status: int, headers: tuple[tuple[str, str], ...] = (), body: bytes = b"") -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers)
    return head.encode() + b"\r\n" + body


def _closed_port() -> int:
    port = reactor.listenTCP(0, __import__("twisted.internet.protocol", fromlist=["Factory"]).Factory(),
                             interface="127.0.0.1")
    number = port.getHost().port
    port.stopListening()
    return number


class _ServiceTest(TestCase):
    def start(self, respond: Any) -> int:
        recorder = start_recorder(respond)
        self.addCleanup(recorder.close)
        self.recorder = recorder
        return recorder.port

    def ctx(self, *headers: tuple[str, str], method: str = "GET", path: str = "/api/pets/1", query: bytes = b"") -> Any:
        ctx = request(method, path, headers=headers, query=query)
        ctx.reactor = reactor
        return ctx


class PassThroughTests(_ServiceTest):
    def compile(self, port: int, **http: Any) -> Any:
        kind = PassThroughAuth()
        self.addCleanup(kind.unconfigure)
        raw = {"http": {"url": f"http://127.0.0.1:{port}/auth", **http}}
        raw.update(http.pop("_top", {}))
        raw["http"].pop("_top", None)
        return kind.compile(raw, scope(type_name="passThroughAuth"))

    async def test_admits_with_upstream_headers_and_state(self) -> None:
        def respond(r: Recorded) -> bytes:
            return reply(200, (("x-user-id", "42"), ("x-other", "no")), b'{"state": {"tier": "gold"}}')

        port = self.start(respond)
        checker = self.compile(port, request={"allowedHeaders": ["authorization"], "headersToAdd": {"x-gw": "tw"},
                                              "passThroughState": True},
                               response={"allowedUpstreamHeaders": ["x-user-id"], "readStateFromResponse": True},
                               _top={"config": {"team": "a"}})
        verdict = await checker.check(self.ctx(("Authorization", "authorize me"), ("Cookie", "c"), method="DELETE"))
        self.assertEqual(type(verdict), AuthAllow)
        self.assertEqual((verdict.headers, verdict.state), (((b"x-user-id", b"42"),), {"tier": "gold"}))
        self.assertEqual(checker.owned_request_headers, (b"x-user-id",))
        sent = self.recorder.requests[0]
        self.assertEqual((sent.method, sent.target), (b"POST", b"/auth"))
        self.assertEqual(sent.headers(b"authorization"), [b"authorize me"])
        self.assertEqual(sent.headers(b"x-gw"), [b"tw"])
        self.assertEqual(sent.headers(b"cookie"), [])
        self.assertEqual(json.loads(sent.body), {"state": {}, "config": {"team": "a"}})

    async def test_client_headers_on_success(self) -> None:
        port = self.start(lambda r: reply(200, (("x-ratelimit-left", "9"), ("x-other", "no"))))
        response = {"allowedClientHeadersOnSuccess": ["x-ratelimit-left"]}
        with pytest.raises(OptionsError) as exc:
            self.compile(port, response={"allowedClientHeadersOnSuccess": ["x-ok", "Content-Length"]})
        self.assertIn("framing/hop-by-hop header the gateway writes itself", str(exc.value))
        verdict = await self.compile(port, response=response).check(self.ctx())
        self.assertEqual(verdict.response_headers, ((b"x-ratelimit-left", b"9"),))

    async def test_upstream_headers_to_overwrite(self) -> None:
        port = self.start(lambda r: reply(200, (("x-tenant", "t1"), ("x-user-id", "9"))))
        checker = self.compile(port, response={"allowedUpstreamHeadersToOverwrite": ["x-tenant"]})
        verdict = await checker.check(self.ctx(("x-tenant", "forged")))
        self.assertEqual((verdict.headers, checker.owned_request_headers), (((b"x-tenant", b"t1"),), (b"x-tenant",)))

    async def test_filter_metadata_is_sent_empty(self) -> None:
        """passThroughFilterMetadata: twistgw has no Envoy filter metadata, so {}."""
        port = self.start(lambda r: reply(200))
        await self.compile(port, request={"passThroughFilterMetadata": True}).check(self.ctx())
        self.assertEqual(json.loads(self.recorder.requests[0].body), {"filterMetadata": {}})

    async def test_empty_body_unless_asked(self) -> None:
        port = self.start(lambda r: reply(200))
        await self.compile(port).check(self.ctx())
        self.assertEqual((self.recorder.requests[0].body, self.recorder.requests[0].headers(b"content-length")),
                         (b"", [b"0"]))

    async def test_refusal_with_allowed_client_headers(self) -> None:
        port = self.start(lambda r: reply(401, (("WWW-Authenticate", "Bearer"), ("x-debug", "s")), b"no"))
        checker = self.compile(port, response={"allowedClientHeadersOnDenied": ["www-authenticate"]})
        verdict = await checker.check(self.ctx())
        self.assertEqual((type(verdict), verdict.status, verdict.headers, verdict.error),
                         (AuthDeny, 401, ((b"www-authenticate", b"Bearer"),), False))
        port2 = self.start(lambda r: reply(418))
        self.assertEqual((await self.compile(port2).check(self.ctx())).status, 403)

    async def test_server_error_timeout_and_down_are_errors(self) -> None:
        port = self.start(lambda r: reply(503))
        verdict = await self.compile(port).check(self.ctx())
        self.assertEqual((verdict.status, verdict.error), (503, True))
        silent = self.start(lambda r: None)
        slow = await self.compile(silent, connectionTimeout="100ms").check(self.ctx())
        self.assertEqual((slow.error, "timeout" in slow.reason), (True, True))
        down = await self.compile(_closed_port()).check(self.ctx())
        self.assertEqual((down.error, "unreachable" in down.reason), (True, True))

    async def test_failure_mode_allow_admits_on_errors_only(self) -> None:
        port = self.start(lambda r: reply(500) if r.index == 0 else reply(403))
        checker = self.compile(port, _top={"failureModeAllow": True})
        self.assertIsInstance(await checker.check(self.ctx()), AuthAllow)
        self.assertEqual((await checker.check(self.ctx())).status, 403)
        down = self.compile(_closed_port(), _top={"failureModeAllow": True})
        self.assertIsInstance(await down.check(self.ctx()), AuthAllow)

    async def test_connections_are_pooled(self) -> None:
        port = self.start(lambda r: reply(200))
        checker = self.compile(port)
        for _ in range(3):
            self.assertIsInstance(await checker.check(self.ctx()), AuthAllow)
        self.assertEqual(self.recorder.connections, 1)

    def test_unsupported_fields_are_refused_by_name(self) -> None:
        with pytest.raises(OptionsError) as exc:
            PassThroughAuth().compile({"http": {"url": "http://a/", "request": {"passThroughBody": True},
                                                "tlsConfig": {"sslParams": {"cipherSuites": []}}}},
                                      scope(type_name="passThroughAuth"))
        self.assertEqual(sorted(p.path[-1] for p in exc.value.problems), ["passThroughBody", "tlsConfig"])
        self.assertIn("needs Settings.spec.extauth.requestBody", str(exc.value))
        with pytest.raises(OptionsError) as exc:
            PassThroughAuth().compile({"grpc": {"address": "a:1", "retryPolicy": {"jitter": 1},
                                                "tlsConfig": {"sslParams": {}}}},
                                      scope(type_name="passThroughAuth"))
        self.assertEqual(sorted(p.path[-1] for p in exc.value.problems), ["jitter", "sslParams"])
        for bad in ({"grpc": {"address": "a:1"}, "http": {"url": "http://a/"}}, {"grpc": {"address": "http://a:1"}},
                    {"grpc": {"address": "a"}}, {"grpc": {}}):
            with pytest.raises(OptionsError):
                PassThroughAuth().compile(bad, scope(type_name="passThroughAuth"))


def _settings(port: int, **extauth: Any) -> Resources:
    upstream = UpstreamInfo("gloo-system", "auth-server", (Endpoint("127.0.0.1", port),))
    settings = {"extauth": {"extauthzServerRef": {"name": "auth-server", "namespace": "gloo-system"}, **extauth}}
    return Resources(upstreams=[upstream], settings=settings)


class CustomAuthTests(_ServiceTest):
    def compile(self, port: int, raw: Any = None, **extauth: Any) -> Any:
        kind = CustomAuth()
        self.addCleanup(kind.unconfigure)
        return kind.compile(raw or {}, scope(_settings(port, **extauth), type_name="customAuth", inline=True))

    async def test_gloo_guide_server(self) -> None:
        """The guide's server: 200 for /api/pets/1, else 401 with x-server."""
        def respond(r: Recorded) -> bytes:
            if r.target.startswith(b"/check/api/pets/1"):
                return reply(200, (("x-user-id", "7"),))
            return reply(401, (("x-server", "pythonauth"), ("Content-Type", "text/plain")), b"Not authorized")

        port = self.start(respond)
        checker = self.compile(port, httpService={"pathPrefix": "/check", "request": {"allowedHeaders": ["x-foo"]},
                                                  "response": {"allowedUpstreamHeaders": ["x-user-id"]}},
                               requestTimeout="0.5s")
        ok = await checker.check(self.ctx(("x-foo", "1"), ("x-bar", "2"), ("authorization", "t"), query=b"a=b"))
        self.assertEqual((type(ok), ok.headers), (AuthAllow, ((b"x-user-id", b"7"),)))
        sent = self.recorder.requests[0]
        self.assertEqual((sent.method, sent.target), (b"GET", b"/check/api/pets/1?a=b"))
        self.assertEqual((sent.headers(b"x-foo"), sent.headers(b"x-bar"), sent.headers(b"authorization"),
                          sent.headers(b"host")), ([b"1"], [], [b"t"], [b"api.example.com"]))
        denied = await checker.check(self.ctx(method="DELETE", path="/api/pets/2"))
        self.assertEqual((denied.status, denied.body, denied.content_type, denied.error),
                         (401, b"Not authorized", b"text/plain", False))
        self.assertIn((b"x-server", b"pythonauth"), denied.headers)
        self.assertEqual(self.recorder.requests[1].method, b"DELETE")

    async def test_timeout_and_down_are_errors_with_403(self) -> None:
        silent = self.start(lambda r: None)
        slow = await self.compile(silent, requestTimeout="50ms").check(self.ctx())
        self.assertEqual((slow.status, slow.error), (403, True))
        down = await self.compile(_closed_port()).check(self.ctx())
        self.assertEqual((down.status, down.error), (403, True))

    def test_named_servers_and_refusals(self) -> None:
        kind = CustomAuth()
        resources = _settings(1, namedExtauth={"second": {"extauthzServerRef": {"name": "auth-server",
                                                                                "namespace": "gloo-system"}}})
        checker = kind.compile({"name": "second"}, scope(resources, type_name="customAuth", inline=True))
        self.assertEqual(checker.server.base, b"http://127.0.0.1:1")
        with pytest.raises(OptionsError) as exc:
            kind.compile({"name": "third"}, scope(resources, type_name="customAuth", inline=True))
        self.assertIn("no Settings.spec.extauth.namedExtauth.third", str(exc.value))
        with pytest.raises(OptionsError) as exc:
            kind.compile({}, scope(_settings(1, grpcService={"envoyGrpc": {}}, requestBody={"maxRequestBytes": 0}),
                                   type_name="customAuth", inline=True))
        told = " | ".join(str(p) for p in exc.value.problems)
        self.assertIn("Settings.spec.extauth.grpcService: is not supported", told)
        self.assertIn("Settings.spec.extauth.requestBody.maxRequestBytes: must be a whole number", told)
        body = kind.compile({}, scope(_settings(1, requestBody={"maxRequestBytes": 10, "allowPartialMessage": True}),
                                      type_name="customAuth", inline=True)).server.body
        self.assertEqual((body.max_bytes, body.allow_partial, body.pack_as_bytes), (10, True, False))
