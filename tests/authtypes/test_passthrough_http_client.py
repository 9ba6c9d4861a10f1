"""``passThroughAuth.http``'s ``tlsConfig``, ``responseHeaderTimeout`` and
``connectionPool`` against real services on loopback: the recording server
of ``support.recorder``, over TLS (Twisted's ``listenSSL``) with
certificates of the test CA of ``support.pki``; connections counted on the
server's side."""

from __future__ import annotations

import time
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from OpenSSL import crypto
from twisted.internet import defer, reactor, ssl, task

from twistgw import AuthAllow, AuthDeny, OptionsError
from twistgw.api.types import SecretInfo
from twistgw_authtypes.passthrough import PassThroughAuth

from authtypes_helpers import Resources, request, scope
from support.pki import Issued, TestCA
from support.recorder import Pieces, Recorded, Recorder
from support.trial import TestCase

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def _sleep(seconds: float) -> Any:
    return task.deferLater(reactor, seconds, lambda: None)


def _server_options(issued: Issued, client_ca: TestCA | None = None,
                    max_version: ssl.TLSVersion | None = None) -> ssl.CertificateOptions:
    extra: dict[str, Any] = {}
    if client_ca is not None:
        extra = {"verify": True, "caCerts": [crypto.X509.from_cryptography(client_ca.cert)],
                 "requireCertificate": True}
    if max_version is not None:
        extra["lowerMaximumSecurityTo"] = max_version
    key = serialization.load_pem_private_key(issued.key_pem, None)
    return ssl.CertificateOptions(
        privateKey=crypto.PKey.from_cryptography_key(key),  # type: ignore[arg-type]
        certificate=crypto.X509.from_cryptography(x509.load_pem_x509_certificate(issued.cert_pem)), **extra)


class _Counting(Recorder):
    """The recorder, with the most connections it held open at once."""

    def __init__(self, respond: Any) -> None:
        super().__init__(respond)
        self.peak = 0

    def buildProtocol(self, addr: Any) -> Any:
        proto = super().buildProtocol(addr)
        made = proto.connectionMade

        def counted() -> None:
            made()
            self.peak = max(self.peak, self.open)

        proto.connectionMade = counted
        return proto


class _Base(TestCase):
    ca = TestCA()
    server_cert = ca.issue("auth.test", ips=["127.0.0.1"])

    def serve(self, respond: Any = None, options: ssl.CertificateOptions | None = None) -> _Counting:
        rec = _Counting(respond or (lambda r: OK))
        if options is None:
            rec.listening = reactor.listenTCP(0, rec, interface="127.0.0.1")
        else:
            rec.listening = reactor.listenSSL(0, rec, options, interface="127.0.0.1")  # type: ignore[attr-defined]
        rec.port = rec.listening.getHost().port
        self.addCleanup(rec.close)
        return rec

    def compile(self, rec: _Counting, secrets: tuple[SecretInfo, ...] = (), top: dict[str, Any] | None = None,
                scheme: str = "http", kind: PassThroughAuth | None = None, **http: Any) -> Any:
        if kind is None:
            kind = PassThroughAuth()
            self.addCleanup(kind.unconfigure)
        raw: dict[str, Any] = {"http": {"url": f"{scheme}://127.0.0.1:{rec.port}/auth", **http}, **(top or {})}
        return kind.compile(raw, scope(Resources(secrets=secrets), type_name="passThroughAuth"))

    def ctx(self) -> Any:
        ctx = request("GET", "/api/pets/1")
        ctx.reactor = reactor
        return ctx


def _secret(name: str, **data: bytes) -> SecretInfo:
    return SecretInfo("gloo-system", name, "kubernetes.io/tls", {k.replace("_", "."): v for k, v in data.items()})


class TlsTests(_Base):
    def https(self, rec: _Counting, secret: SecretInfo | None, top: dict[str, Any] | None = None,
              **tls: Any) -> Any:
        if secret is not None:
            tls["secretRef"] = {"name": secret.name, "namespace": "gloo-system"}
        return self.compile(rec, (secret,) if secret else (), top, scheme="https", tlsConfig=tls,
                            connectionTimeout="3s")

    async def test_ca_from_the_secret_admits(self) -> None:
        rec = self.serve(options=_server_options(self.server_cert))
        verdict = await self.https(rec, _secret("auth-ca", ca_crt=self.ca.pem)).check(self.ctx())
        self.assertEqual(type(verdict), AuthAllow)
        self.assertEqual([r.method for r in rec.requests], [b"POST"])

    async def test_a_ca_only_secret_with_empty_tls_keys_admits(self) -> None:
        """``glooctl create secret tls --rootca``: tls.crt and tls.key are
        there (Kubernetes requires them) but empty; empty means absent."""
        rec = self.serve(options=_server_options(self.server_cert))
        secret = _secret("auth-ca", ca_crt=self.ca.pem, tls_crt=b"", tls_key=b"")
        verdict = await self.https(rec, secret).check(self.ctx())
        self.assertEqual(type(verdict), AuthAllow)
        self.assertEqual([r.method for r in rec.requests], [b"POST"])

    async def test_wrong_ca_fails_closed_or_admits_by_failure_mode_allow(self) -> None:
        rec = self.serve(options=_server_options(self.server_cert))
        other = _secret("other-ca", ca_crt=TestCA("another CA").pem)
        verdict = await self.https(rec, other).check(self.ctx())
        self.assertEqual((type(verdict), verdict.status, verdict.error), (AuthDeny, 503, True))
        self.assertIn("TLS", verdict.reason)
        allowed = await self.https(rec, other, {"failureModeAllow": True}).check(self.ctx())
        self.assertEqual(type(allowed), AuthAllow)
        self.assertIn("failureModeAllow", allowed.reason)
        self.assertEqual(rec.requests, [])  # nothing was ever sent to the unverified peer

    async def test_https_without_tls_config_uses_the_system_store(self) -> None:
        rec = self.serve(options=_server_options(self.server_cert))
        kind = PassThroughAuth()
        self.addCleanup(kind.unconfigure)
        checker = kind.compile({"http": {"url": f"https://127.0.0.1:{rec.port}/auth"}},
                               scope(type_name="passThroughAuth"))
        verdict = await checker.check(self.ctx())
        self.assertEqual((verdict.status, verdict.error), (503, True))  # the test CA is not a system root
        self.assertEqual(rec.requests, [])

    async def test_certificate_without_subject_alt_name_is_refused(self) -> None:
        rec = self.serve(options=_server_options(self.ca.issue("127.0.0.1")))
        verdict = await self.https(rec, _secret("auth-ca", ca_crt=self.ca.pem)).check(self.ctx())
        self.assertEqual((verdict.status, verdict.error), (503, True))
        self.assertIn("subjectAltName", verdict.reason)
        self.assertEqual(rec.requests, [])

    async def test_mutual_tls_with_the_client_certificate_of_the_secret(self) -> None:
        client_ca = TestCA("client CA")
        client = client_ca.issue("gateway", dns=["gateway.test"], client=True)
        rec = self.serve(options=_server_options(self.server_cert, client_ca=client_ca))
        mtls = _secret("auth-mtls", ca_crt=self.ca.pem, tls_crt=client.cert_pem, tls_key=client.key_pem)
        self.assertEqual(type(await self.https(rec, mtls).check(self.ctx())), AuthAllow)
        without = await self.https(rec, _secret("auth-ca", ca_crt=self.ca.pem)).check(self.ctx())
        self.assertEqual((without.status, without.error), (503, True))
        self.assertEqual(len(rec.requests), 1)

    async def test_minimum_version_is_enforced(self) -> None:
        rec = self.serve(options=_server_options(self.server_cert, max_version=ssl.TLSVersion.TLSv1_2))
        secret = _secret("auth-ca", ca_crt=self.ca.pem)
        refused = await self.https(rec, secret, sslParams={"minimumProtocolVersion": "TLSv1_3"}).check(self.ctx())
        self.assertEqual((refused.status, refused.error), (503, True))
        ok = await self.https(rec, secret, sslParams={"minimumProtocolVersion": "TLSv1_2",
                                                      "maximumProtocolVersion": "TLS_AUTO"}).check(self.ctx())
        self.assertEqual(type(ok), AuthAllow)
        self.assertEqual(len(rec.requests), 1)


class TimeoutAndPoolTests(_Base):
    async def test_response_header_timeout_fires_before_connection_timeout(self) -> None:
        rec = self.serve(lambda r: Pieces([b"", OK], delay=1.0))  # the body is read, the answer comes late
        checker = self.compile(rec, connectionTimeout="5s", responseHeaderTimeout="200ms")
        started = time.monotonic()
        verdict = await checker.check(self.ctx())
        elapsed = time.monotonic() - started
        self.assertEqual((verdict.status, verdict.error), (503, True))
        self.assertIn("no response head within 0.2s of the request (responseHeaderTimeout)", verdict.reason)
        self.assertLess(elapsed, 0.9)
        self.assertGreaterEqual(elapsed, 0.19)
        self.assertEqual(len(rec.requests), 1)  # the request was sent whole
        # The connection is dropped, not returned to the pool (where it would
        # stay open: this wait would time out); the recorder's late answer dies with it.
        await rec.all_closed().addTimeout(5, reactor)
        self.assertEqual(rec.open, 0)

    async def test_response_header_timeout_does_not_bound_the_body(self) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
        rec = self.serve(lambda r: Pieces([head, b"ok"], delay=0.4))
        checker = self.compile(rec, connectionTimeout="3s", responseHeaderTimeout="200ms")
        self.assertEqual(type(await checker.check(self.ctx())), AuthAllow)
        await _sleep(0.5)  # the recorder takes the next request once its last piece's turn is over
        self.assertEqual(type(await checker.check(self.ctx())), AuthAllow)  # a pooled connection too
        self.assertEqual(rec.connections, 1)
        await _sleep(0.5)

    async def test_an_answer_over_the_bound_fails_closed(self) -> None:
        def answer(size: int) -> bytes:
            return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + b"x" * size

        at = self.serve(lambda r: answer(64 * 1024))
        self.assertEqual(type(await self.compile(at).check(self.ctx())), AuthAllow)
        over = self.serve(lambda r: answer(64 * 1024 + 1))
        verdict = await self.compile(over).check(self.ctx())
        self.assertEqual((type(verdict), verdict.status, verdict.error), (AuthDeny, 503, True))
        self.assertIn("answer longer than 65536 bytes", verdict.reason)
        await _sleep(0.2)  # the refused answer's connection is dropped on a later turn

    async def test_connection_timeout_still_wins_when_shorter(self) -> None:
        rec = self.serve(lambda r: None)
        verdict = await self.compile(rec, connectionTimeout="150ms", responseHeaderTimeout="10s").check(self.ctx())
        self.assertIn("no answer within 0.15s", verdict.reason)

    async def test_max_conns_one_serialises_concurrent_calls(self) -> None:
        seen: list[int] = []

        def respond(r: Recorded) -> Any:
            seen.append(rec.open)
            return Pieces([b"", OK], delay=0.2)

        rec = self.serve(respond)
        checker = self.compile(rec, connectionPool={"maxConns": 1})
        verdicts = await defer.gatherResults([defer.ensureDeferred(checker.check(self.ctx())) for _ in range(3)])
        self.assertEqual([type(v) for v in verdicts], [AuthAllow] * 3)
        self.assertEqual((rec.peak, rec.connections, seen), (1, 1, [1, 1, 1]))
        # the control: without the bound, the same calls open three connections at once
        rec2 = self.serve(lambda r: Pieces([b"", OK], delay=0.2))
        checker2 = self.compile(rec2)
        await defer.gatherResults([defer.ensureDeferred(checker2.check(self.ctx())) for _ in range(3)])
        self.assertEqual(rec2.peak, 3)
        await _sleep(0.3)  # the recorders' last turns

    async def test_a_call_that_gets_no_slot_in_time_is_an_error(self) -> None:
        rec = self.serve(lambda r: Pieces([b"", OK], delay=1.0))
        kind = PassThroughAuth()  # one service, one bound: the configs share the type's client
        self.addCleanup(kind.unconfigure)
        checker = self.compile(rec, kind=kind, connectionPool={"maxConns": 1}, connectionTimeout="300ms")
        slow = self.compile(rec, kind=kind, connectionPool={"maxConns": 1}, connectionTimeout="3s")
        first = defer.ensureDeferred(slow.check(self.ctx()))  # holds the one slot for 1 s
        await _sleep(0.05)
        waiting = await checker.check(self.ctx())
        self.assertEqual((waiting.status, waiting.error), (503, True))
        self.assertIn("waiting for a connection slot (connectionPool.maxConns)", waiting.reason)
        self.assertEqual(type(await first), AuthAllow)
        self.assertEqual((len(rec.requests), rec.peak), (1, 1))
        admitted = self.compile(rec, kind=kind, connectionPool={"maxConns": 1}, connectionTimeout="300ms",
                                top={"failureModeAllow": True})
        first = defer.ensureDeferred(slow.check(self.ctx()))
        await _sleep(0.05)
        self.assertEqual(type(await admitted.check(self.ctx())), AuthAllow)
        await first
        await _sleep(1.1)  # the recorder's last turn

    async def test_idle_timeout_closes_idle_connections(self) -> None:
        rec = self.serve()
        checker = self.compile(rec, connectionPool={"idleTimeout": "200ms"})
        self.assertEqual(type(await checker.check(self.ctx())), AuthAllow)
        self.assertEqual(rec.open, 1)
        idle_since = time.monotonic()
        # Waited for, not slept: after a stall (a full collection) the 0.6 s
        # sleep's timer could run in the idle timer's turn, before the close
        # reached the recorder. The control below shows the default never closes.
        await rec.all_closed().addTimeout(5, reactor)
        self.assertGreaterEqual(time.monotonic() - idle_since, 0.19)  # not before the idle timeout
        self.assertEqual((rec.open, rec.connections), (0, 1))
        self.assertEqual(type(await checker.check(self.ctx())), AuthAllow)
        self.assertEqual(rec.connections, 2)
        kept = self.serve()
        default = self.compile(kept)  # the default: no idle expiry (Gloo's 0)
        await default.check(self.ctx())
        await _sleep(0.6)
        self.assertEqual(kept.open, 1)


class RefusalTests(TestCase):
    def problems(self, http: dict[str, Any], *secrets: SecretInfo) -> dict[str, str]:
        raw = {"http": {"url": "https://auth.test/check", **http}}
        with pytest.raises(OptionsError) as exc:
            PassThroughAuth().compile(raw, scope(Resources(secrets=secrets), type_name="passThroughAuth"))
        return {p.dotted_path(): p.reason for p in exc.value.problems}

    def test_bad_secrets(self) -> None:
        ca = TestCA()
        client = ca.issue("gw", dns=["gw.test"], client=True)
        ref = {"secretRef": {"name": "s", "namespace": "gloo-system"}}
        told = self.problems({"tlsConfig": ref})
        self.assertIn("dangling reference", told["http.tlsConfig.secretRef"])
        told = self.problems({"tlsConfig": ref}, _secret("s", tls_crt=client.cert_pem))
        self.assertIn("needs both tls.crt and tls.key", told["http.tlsConfig.secretRef"])
        told = self.problems({"tlsConfig": ref}, _secret("s", other=b"x"))
        self.assertIn("has none of tls.crt, tls.key, ca.crt", told["http.tlsConfig.secretRef"])
        told = self.problems({"tlsConfig": ref}, _secret("s", tls_crt=b"", tls_key=b"", ca_crt=b" \n"))
        self.assertIn("has none of tls.crt, tls.key, ca.crt (or only empty ones)", told["http.tlsConfig.secretRef"])
        told = self.problems({"tlsConfig": ref}, _secret("s", tls_crt=client.cert_pem, tls_key=b""))
        self.assertIn("needs both tls.crt and tls.key", told["http.tlsConfig.secretRef"])
        told = self.problems({"tlsConfig": ref}, _secret("s", ca_crt=b"not a certificate"))
        self.assertIn("http.tlsConfig", told)
        told = self.problems({"tlsConfig": ref}, _secret("s", tls_crt=client.cert_pem,
                                                          tls_key=ca.issue("x", dns=["x"]).key_pem))
        self.assertIn("http.tlsConfig", told)

    def test_bad_fields(self) -> None:
        told = self.problems({"tlsConfig": {"sslParams": {"cipherSuites": ["ECDHE-ECDSA-AES128-GCM-SHA256"]}}})
        self.assertIn("cipherSuites", " ".join(told))
        told = self.problems({"tlsConfig": {"sslParams": {"minimumProtocolVersion": "TLSv1_0"}}})
        self.assertIn("unknown TLS version 'TLSv1_0'",
                      told["http.tlsConfig.sslParams.minimumProtocolVersion"])
        told = self.problems({"tlsConfig": {"sslParams": {"minimumProtocolVersion": "TLSv1_3",
                                                          "maximumProtocolVersion": "TLSv1_2"}}})
        self.assertIn("http.tlsConfig", told)
        told = self.problems({"url": "http://auth.test/", "tlsConfig": {}})
        self.assertIn("needs an https:// url", told["http.tlsConfig"])
        told = self.problems({"connectionPool": {"maxConns": -1, "idleTimeout": "soon", "max": 1}})
        self.assertIn("max", " ".join(told))
        told = self.problems({"connectionPool": {"maxConns": "ten"}})
        self.assertIn("whole number", told["http.connectionPool.maxConns"])
        told = self.problems({"connectionPool": {"idleTimeout": "soon"}})
        self.assertIn("duration", told["http.connectionPool.idleTimeout"])
        told = self.problems({"responseHeaderTimeout": "-1s"})
        self.assertIn("http.responseHeaderTimeout", told)


AUTH_CONFIG = """\
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {name: pass, namespace: gloo-system}
spec:
  configs:
  - passThroughAuth:
      http:
        url: https://auth.test/check
        tlsConfig:
          secretRef: {name: auth-client, namespace: gloo-system}
          sslParams:
            minimumProtocolVersion: TLSv1_3
            cipherSuites: [ECDHE-ECDSA-AES128-GCM-SHA256]
        connectionPool: {maxConns: 0.5}
---
apiVersion: v1
kind: Secret
metadata: {name: auth-client, namespace: gloo-system}
type: kubernetes.io/tls
stringData: {tls.crt: only-a-certificate}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: vs, namespace: gloo-system}
spec:
  virtualHost:
    domains: ["*"]
    options: {extauth: {configRef: {name: pass, namespace: gloo-system}}}
    routes:
    - directResponseAction: {status: 200}
"""


class LoadTests(TestCase):
    def test_every_problem_with_file_line_and_field(self) -> None:
        import os
        import tempfile

        from twistgw.config.errors import ConfigError
        from twistgw.config.loader import load_directory
        from twistgw.core.plugins import PluginHost
        from twistgw.core.snapshot import build_snapshot

        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "auth.yaml"), "w") as f:
                f.write(AUTH_CONFIG)
            with pytest.raises(ConfigError) as info:
                build_snapshot(load_directory(tmp, keep_going=True), PluginHost.create())
        told = {i.field: (os.path.basename(i.file), i.line, i.reason) for i in info.value.issues}
        base = "spec.configs[0].passThroughAuth.http."
        self.assertEqual(told[base + "tlsConfig.secretRef"][:2], ("auth.yaml", 10))
        self.assertIn("needs both tls.crt and tls.key", told[base + "tlsConfig.secretRef"][2])
        self.assertEqual(told[base + "tlsConfig.sslParams.cipherSuites"][:2], ("auth.yaml", 13))
        self.assertEqual(told[base + "connectionPool.maxConns"][:2], ("auth.yaml", 14))
        self.assertIn("whole number", told[base + "connectionPool.maxConns"][2])


class ReprTests(TestCase):
    def test_the_client_key_is_not_in_the_repr(self) -> None:
        from twistgw_authtypes._http import ClientSettings

        settings = ClientSettings("https://a:1", cert_pem=b"CERT", key_pem=b"SECRET-KEY")
        self.assertNotIn("SECRET-KEY", repr(settings))
        self.assertIn("CERT", repr(settings))
