"""``passThroughAuth.grpc`` against a real gRPC ext_authz server
(grpcio's, on its threads, on loopback): what the CheckRequest carries,
an admitting answer (headers set, appended, removed; client headers;
state), refusals with and without ``denied_response``, a server that
hangs past the deadline, one that is down, ``failureModeAllow``, the
request body under ``Settings.spec.extauth.requestBody``, TLS verified by
name, and channels kept or closed on reload."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from twisted.internet import reactor

from twistgw import AuthAllow, AuthDeny
from twistgw.api.types import BytesBody, SecretInfo
from twistgw_authtypes.passthrough import PassThroughAuth

from authtypes_helpers import Resources, request, scope
from support.grpc_authz import HANG, Abort, denied, header_map, ok, start_grpc_authz
from support.pki import TestCA
from support.trial import TestCase
from test_services_loopback import _closed_port


class _GrpcTest(TestCase):
    def serve(self, respond: Any, credentials: Any = None) -> Any:
        server = start_grpc_authz(respond, credentials)
        self.addCleanup(server.close)
        return server

    def compile(self, address: str, settings: dict[str, Any] | None = None, secrets: tuple[SecretInfo, ...] = (),
                kind: PassThroughAuth | None = None, **top: Any) -> Any:
        if kind is None:
            kind = PassThroughAuth()
            self.addCleanup(kind.unconfigure)
        grpc_cfg = {"address": address, "connectionTimeout": top.pop("timeout", "2s"), **top.pop("grpc", {})}
        resources = Resources(secrets=secrets, settings={"extauth": settings} if settings else None)
        return kind.compile({"grpc": grpc_cfg, **top}, scope(resources, type_name="passThroughAuth"))

    def ctx(self, *headers: tuple[str, str], method: str = "GET", path: str = "/api/pets/1", query: bytes = b"",
            body: bytes | None = None) -> Any:
        ctx = request(method, path, headers=(("Host", "pets.example.com:8080"),) + headers, query=query)
        ctx.reactor = reactor
        if body is not None:
            ctx.body_source = BytesBody(body)
        return ctx


class CheckRequestTests(_GrpcTest):
    async def test_what_envoy_sends_is_sent(self) -> None:
        server = self.serve(lambda r: ok())
        checker = self.compile(server.address, config={"tier": "gold"})
        ctx = self.ctx(("Authorization", "authorize me"), ("X-Request-Id", "r-1"), method="DELETE", query=b"a=1")
        ctx.state["extauth"] = {"state": {"config_0": {"user": "alice"}}}
        verdict = await checker.check(ctx)
        self.assertEqual(type(verdict), AuthAllow)
        sent = server.requests[0].attributes
        http = sent.request.http
        self.assertEqual((http.method, http.path, http.query, http.host, http.scheme, http.protocol, http.id),
                         ("DELETE", "/api/pets/1?a=1", "a=1", "pets.example.com:8080", "http", "HTTP/1.1", "r-1"))
        headers = header_map(server.requests[0])
        self.assertEqual((headers["authorization"], headers[":method"], headers[":path"], headers[":authority"]),
                         ("authorize me", "DELETE", "/api/pets/1?a=1", "pets.example.com:8080"))
        self.assertEqual(sent.source.address.socket_address.address, "127.0.0.1")
        self.assertEqual((http.body, http.raw_body, http.size), ("", b"", -1))
        self.assertNotIn("x-envoy-auth-partial-body", headers)  # no requestBody: no body asked for
        meta = sent.metadata_context.filter_metadata
        self.assertEqual(dict(meta["solo.auth.passthrough"]), {"user": "alice"})
        self.assertEqual(dict(meta["solo.auth.passthrough.config"]), {"tier": "gold"})
        self.assertGreater(sent.request.time.seconds, 0)


class AnswerTests(_GrpcTest):
    async def test_ok_sets_appends_removes_and_keeps_state(self) -> None:
        server = self.serve(lambda r: ok(headers=(("x-user-id", "42"), ("x-bad", "a\r\nb"), ("Host", "evil")),
                                         append=(("x-trace", "gw"),), remove=("x-drop", "host"),
                                         response_headers=(("x-ratelimit-left", "9"), ("Content-Length", "1")),
                                         state={"tenant": "t1"}))
        checker = self.compile(server.address)
        verdict = await checker.check(self.ctx(("X-User-Id", "admin"), ("X-Trace", "client")))
        self.assertEqual(type(verdict), AuthAllow)
        # a client's x-user-id is replaced (Envoy: append defaults to false here), x-trace appended;
        # CR/LF values and Host are never applied, nor removing Host
        self.assertEqual(dict(verdict.headers), {b"x-user-id": b"42", b"x-trace": b"client,gw", b"x-drop": None})
        self.assertEqual(verdict.response_headers, ((b"x-ratelimit-left", b"9"),))
        self.assertEqual(verdict.state, {"tenant": "t1"})

    async def test_refusals(self) -> None:
        answers = iter([denied(16, 401, (("WWW-Authenticate", "Bearer"), ("Content-Type", "application/json"),
                                         ("Transfer-Encoding", "chunked")), '{"error":"no"}'),
                        denied(7), denied(7, 0)])
        server = self.serve(lambda r: next(answers))
        checker = self.compile(server.address)
        first = await checker.check(self.ctx())
        self.assertEqual((type(first), first.status, first.body, first.content_type, first.headers, first.error),
                         (AuthDeny, 401, b'{"error":"no"}', b"application/json", ((b"www-authenticate", b"Bearer"),),
                          False))
        self.assertEqual(((await checker.check(self.ctx())).status, (await checker.check(self.ctx())).status),
                         (403, 403))

    async def test_hanging_down_and_failing_servers_are_errors(self) -> None:
        hanging = self.serve(lambda r: HANG)
        slow = await self.compile(hanging.address, timeout="200ms").check(self.ctx())
        self.assertEqual((type(slow), slow.status, slow.error), (AuthDeny, 503, True))
        self.assertIn("DEADLINE_EXCEEDED", slow.reason)
        down = await self.compile(f"127.0.0.1:{_closed_port()}").check(self.ctx())
        self.assertEqual((down.status, down.error), (503, True))
        self.assertIn("UNAVAILABLE", down.reason)
        failing = self.serve(lambda r: Abort(grpc.StatusCode.INTERNAL, "boom"))
        broken = await self.compile(failing.address).check(self.ctx())
        self.assertEqual((broken.status, broken.error), (503, True))

    async def test_failure_mode_allow_admits_on_errors_only(self) -> None:
        hanging = self.serve(lambda r: HANG)
        allowed = await self.compile(hanging.address, timeout="200ms", failureModeAllow=True).check(self.ctx())
        self.assertEqual(type(allowed), AuthAllow)
        down = await self.compile(f"127.0.0.1:{_closed_port()}", failureModeAllow=True).check(self.ctx())
        self.assertEqual(type(down), AuthAllow)
        refusing = self.serve(lambda r: denied(7))
        self.assertEqual((await self.compile(refusing.address, failureModeAllow=True).check(self.ctx())).status, 403)


class RetryPolicyTests(_GrpcTest):
    """Gloo's ``retryPolicy`` (its gRPC pass-through guide: numRetries,
    retryBackOff): an UNAVAILABLE call is made again after the backoff,
    at most numRetries times; other failures are never retried."""

    async def test_unavailable_is_retried_until_the_service_answers(self) -> None:
        import time

        answers = iter([Abort(grpc.StatusCode.UNAVAILABLE, "starting"), Abort(grpc.StatusCode.UNAVAILABLE, "x"),
                        ok(headers=(("x-user-id", "7"),))])
        server = self.serve(lambda r: next(answers))
        checker = self.compile(server.address, grpc={"retryPolicy": {
            "numRetries": 3, "retryBackOff": {"baseInterval": "100ms", "maxInterval": "150ms"}}})
        start = time.monotonic()
        verdict = await checker.check(self.ctx())
        took = time.monotonic() - start
        self.assertEqual((type(verdict), dict(verdict.headers)), (AuthAllow, {b"x-user-id": b"7"}))
        self.assertEqual(len(server.requests), 3)
        self.assertGreaterEqual(took, 0.25)  # waited 100ms, then 150ms (2 x 100ms, capped)

    async def test_retries_are_bounded_and_reported(self) -> None:
        server = self.serve(lambda r: Abort(grpc.StatusCode.UNAVAILABLE, "down for maintenance"))
        checker = self.compile(server.address, grpc={"retryPolicy": {
            "numRetries": 2, "retryBackOff": {"baseInterval": "50ms"}}})
        verdict = await checker.check(self.ctx())
        self.assertEqual((type(verdict), verdict.status, verdict.error), (AuthDeny, 503, True))
        self.assertIn("(after 3 attempts)", verdict.reason)
        self.assertEqual(len(server.requests), 3)
        # a service that is not listening at all is UNAVAILABLE too
        down = await self.compile(f"127.0.0.1:{_closed_port()}", grpc={"retryPolicy": {
            "retryBackOff": {"baseInterval": "50ms"}}}).check(self.ctx())
        self.assertEqual(down.status, 503)
        self.assertIn("UNAVAILABLE", down.reason)
        self.assertIn("(after 2 attempts)", down.reason)  # numRetries defaults to 1

    async def test_other_failures_and_refusals_are_never_retried(self) -> None:
        failing = self.serve(lambda r: Abort(grpc.StatusCode.INTERNAL, "boom"))
        policy = {"retryPolicy": {"numRetries": 5, "retryBackOff": {"baseInterval": "50ms"}}}
        self.assertEqual((await self.compile(failing.address, grpc=policy).check(self.ctx())).status, 503)
        self.assertEqual(len(failing.requests), 1)
        refusing = self.serve(lambda r: denied(7))
        self.assertEqual((await self.compile(refusing.address, grpc=policy).check(self.ctx())).status, 403)
        self.assertEqual(len(refusing.requests), 1)

    def test_bad_policies_are_refused_with_the_field(self) -> None:
        from twistgw import OptionsError

        for policy, field in (({"numRetries": -1}, "numRetries"), ({"numRetries": "3"}, "numRetries"),
                              ({"retryBackOff": {"baseInterval": "soon"}}, "baseInterval"),
                              ({"retryBackOff": {"baseInterval": "2s", "maxInterval": "1s"}}, "maxInterval"),
                              ({"retryBackOff": {"jitter": "1s"}}, "jitter")):
            with pytest.raises(OptionsError) as exc:
                self.compile("127.0.0.1:1", grpc={"retryPolicy": policy})
            self.assertEqual(exc.value.problems[0].path[-1], field, policy)


class BodyTests(_GrpcTest):
    async def test_body_below_at_and_above_the_bound(self) -> None:
        server = self.serve(lambda r: ok())
        checker = self.compile(server.address, settings={"requestBody": {"maxRequestBytes": 8}})
        for body in (b"tiny", b"exactly8"):
            self.assertEqual(type(await checker.check(self.ctx(body=body, method="POST"))), AuthAllow)
            sent = server.requests[-1].attributes.request.http
            self.assertEqual((sent.body, header_map(server.requests[-1])["x-envoy-auth-partial-body"]),
                             (body.decode(), "false"))
        over = await checker.check(self.ctx(body=b"123456789", method="POST"))
        self.assertEqual((type(over), over.status, over.error), (AuthDeny, 413, False))
        self.assertEqual(len(server.requests), 2)  # never asked

    async def test_partial_and_pack_as_bytes(self) -> None:
        server = self.serve(lambda r: ok())
        settings = {"requestBody": {"maxRequestBytes": 4, "allowPartialMessage": True, "packAsBytes": True}}
        checker = self.compile(server.address, settings=settings)
        verdict = await checker.check(self.ctx(body=b"\xff\x00binary", method="POST"))
        self.assertEqual(type(verdict), AuthAllow)
        sent = server.requests[-1].attributes.request.http
        self.assertEqual((sent.raw_body, sent.body, header_map(server.requests[-1])["x-envoy-auth-partial-body"]),
                         (b"\xff\x00bi", "", "true"))


class TlsTests(_GrpcTest):
    def tls_server(self, ca: TestCA, names: list[str]) -> Any:
        leaf = ca.issue(names[0], dns=names)
        creds = grpc.ssl_server_credentials([(leaf.key_pem, leaf.cert_pem)])
        return self.serve(lambda r: ok(headers=(("x-user-id", "tls"),)), creds)

    async def test_verified_by_name_with_the_secrets_ca(self) -> None:
        ca = TestCA()
        server = self.tls_server(ca, ["localhost"])
        # a CA-only Secret as glooctl writes it: tls.crt and tls.key empty (empty means absent)
        secret = SecretInfo("gloo-system", "auth-tls", "kubernetes.io/tls",
                            {"ca.crt": ca.pem, "tls.crt": b"", "tls.key": b""})
        tls = {"tlsConfig": {"secretRef": {"name": "auth-tls", "namespace": "gloo-system"}}}
        good = self.compile(f"localhost:{server.port}", secrets=(secret,), grpc=tls)
        self.assertEqual(dict((await good.check(self.ctx())).headers), {b"x-user-id": b"tls"})
        # the same server by an address its certificate does not name: refused (fails closed)
        wrong_name = self.compile(f"127.0.0.1:{server.port}", secrets=(secret,), grpc=tls)
        self.assertEqual((await wrong_name.check(self.ctx())).status, 503)
        # another CA's certificate: refused, and no TLS at all against a TLS server: refused
        other = SecretInfo("gloo-system", "auth-tls", "kubernetes.io/tls", {"ca.crt": TestCA().pem})
        self.assertEqual((await self.compile(f"localhost:{server.port}", secrets=(other,), grpc=tls)
                          .check(self.ctx())).status, 503)
        self.assertEqual((await self.compile(f"localhost:{server.port}").check(self.ctx())).status, 503)
        self.assertEqual(len(server.requests), 1)


class ChannelTests(_GrpcTest):
    async def test_a_channel_per_target_kept_across_reloads(self) -> None:
        one, two = self.serve(lambda r: ok()), self.serve(lambda r: ok())
        kind = PassThroughAuth()
        self.addCleanup(kind.unconfigure)
        first = self.compile(one.address, kind=kind)
        await first.check(self.ctx())
        stub = kind.channels.stub(first.target)
        again = self.compile(one.address, kind=kind)  # a reload with the same address
        kind.config_loaded([again], {})
        self.assertIs(kind.channels.stub(again.target), stub)
        moved = self.compile(two.address, kind=kind)  # the address changed
        kind.config_loaded([moved], {})
        self.assertIsNot(kind.channels.stub(first.target), stub)  # the old one was closed: a new one is made
        self.assertEqual(type(await moved.check(self.ctx())), AuthAllow)
        self.assertEqual((len(one.requests), len(two.requests)), (1, 1))
