"""A VirtualService's ``sslConfig`` read and checked (in memory): Gloo's
fields accepted or refused by name, every problem at once with its field and
line; certificates grouped into SNI chains as Gloo groups them, conflicts
refused; the snapshot's plain and TLS host tables; the ClientHello probe on
a real ClientHello. The TLS behaviour itself is end to end in
``tests/integration/test_vs_tls_sni.py``."""

from __future__ import annotations

import base64

import pytest
from OpenSSL import SSL

from twistgw.config.loader import ConfigError, load_text
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.servertls import ClientHelloProbe

from support.pki import TestCA
from support.trial import TestCase

CA = TestCA()
A = CA.issue("a.example.com", dns=["a.example.com"])
B = CA.issue("b.example.com", dns=["b.example.com"])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def secret(name: str, cert: bytes = A.cert_pem, key: bytes | None = A.key_pem, ca: bytes | None = None) -> str:
    data = f"tls.crt: {_b64(cert)}"
    if key is not None:
        data += f", tls.key: {_b64(key)}"
    if ca is not None:
        data += f", ca.crt: '{_b64(ca)}'"
    return f"apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}}}\ntype: kubernetes.io/tls\ndata: {{{data}}}\n---\n"


def vs(name: str, ssl: str | None, domains: str = "[a.example.com]") -> str:
    text = f"apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {{name: {name}}}\nspec:\n"
    if ssl is not None:
        text += f"  sslConfig: {ssl}\n"
    return text + (f"  virtualHost:\n    domains: {domains}\n"
                   f"    routes: [{{matchers: [{{prefix: /}}], directResponseAction: {{status: 200, body: {name}}}}}]\n"
                   "---\n")


def problems(text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load_text(text, "tls.yaml")
    return {issue.field: issue.reason for issue in info.value.issues}


class SslConfigReadingTests(TestCase):
    def test_gloo_fields_not_served_are_refused_by_name_all_at_once(self):
        found = problems(secret("a") + vs("a", "{secretRef: {name: a}, sds: {targetUri: x},"
                                               " ocspStaplePolicy: MUST_STAPLE, transportSocketConnectTimeout: 1s,"
                                               " alpnProtocols: [h2, http/1.1], disableTlsSessionResumption: false,"
                                               " sniDomains: ['*', 'a.example.com:443', ok.example.com],"
                                               " tlsFancy: 1}"))
        assert "secret discovery (SDS)" in found["spec.sslConfig.sds"]
        assert "OCSP stapling" in found["spec.sslConfig.ocspStaplePolicy"]
        assert "--head-timeout" in found["spec.sslConfig.transportSocketConnectTimeout"]
        assert "http/1.1 only" in found["spec.sslConfig.alpnProtocols[0]"]
        assert "spec.sslConfig.alpnProtocols[1]" not in found
        assert "never resumes" in found["spec.sslConfig.disableTlsSessionResumption"]
        assert "leave sniDomains out" in found["spec.sslConfig.sniDomains[0]"]
        assert "no port" in found["spec.sslConfig.sniDomains[1]"]
        assert "spec.sslConfig.sniDomains[2]" not in found
        assert "unknown field 'tlsFancy'" in found["spec.sslConfig.tlsFancy"]

    def test_accepted_alpn_and_session_fields(self):
        config = load_text(secret("a") + vs("a", "{secretRef: {name: a}, alpnProtocols: [http/1.1],"
                                                 " disableTlsSessionResumption: true}"), "tls.yaml")
        (service,) = config.virtual_services
        assert service.tls is not None and service.tls.cert_pem == A.cert_pem

    def test_a_certificate_is_required(self):
        found = problems(vs("a", "{sniDomains: [a.example.com]}"))
        assert "needs secretRef" in found["spec.sslConfig"]
        found = problems(secret("nokey", key=None) + vs("a", "{secretRef: {name: nokey}}"))
        assert "needs both tls.crt and tls.key" in found["spec.sslConfig.secretRef"]
        found = problems(vs("a", "{secretRef: {name: missing}}"))
        assert "dangling reference" in found["spec.sslConfig.secretRef"]
        # a CA-only Secret (glooctl create secret tls --rootca): tls.crt and tls.key empty
        ca_only = ("apiVersion: v1\nkind: Secret\nmetadata: {name: caonly}\ntype: kubernetes.io/tls\n"
                   f"data: {{tls.crt: '', tls.key: '', ca.crt: {_b64(CA.pem)}}}\n---\n")
        found = problems(ca_only + vs("a", "{secretRef: {name: caonly}}"))
        assert found["spec.sslConfig.secretRef"] == (
            "sslConfig.secretRef: Secret default/caonly has no tls.crt and tls.key (or empty ones, as a CA-only"
            " Secret has): a virtual service needs its certificate")

    def test_an_empty_ca_crt_is_no_client_verification(self):
        """glooctl writes ca.crt empty when no --rootca is given: empty means absent."""
        config = load_text(secret("a", ca=b"") + vs("a", "{secretRef: {name: a}}"), "tls.yaml")
        (service,) = config.virtual_services
        assert service.tls is not None and service.tls.cert_pem == A.cert_pem and service.tls.ca_pem is None

    def test_broken_pems_are_refused_with_the_secret_key_named(self):
        found = problems(secret("a", key=B.key_pem) + vs("a", "{secretRef: {name: a}}"))
        assert "Secret default/a: tls.key" in found["spec.sslConfig.secretRef"]
        assert "does not belong to the certificate" in found["spec.sslConfig.secretRef"]
        found = problems(secret("a", cert=b"garbage") + vs("a", "{secretRef: {name: a}}"))
        assert "Secret default/a: tls.crt" in found["spec.sslConfig.secretRef"]
        found = problems(secret("a", ca=b"not a ca") + vs("a", "{secretRef: {name: a}}"))
        assert "Secret default/a: ca.crt" in found["spec.sslConfig.secretRef"]

    def test_files_are_read_relative_to_the_configuration(self):
        found = problems(vs("a", "{sslFiles: {tlsCert: nowhere.crt, tlsKey: nowhere.key}}"))
        assert "sslFiles.tlsCert: cannot read" in found["spec.sslConfig.sslFiles.tlsCert"]
        found = problems(vs("a", "{sslFiles: {rootCa: ca.crt}}"))
        assert "needs tlsCert and tlsKey" in found["spec.sslConfig.sslFiles"]

    def test_verify_subject_alt_name_needs_a_root_ca(self):
        found = problems(secret("a") + vs("a", "{secretRef: {name: a}, verifySubjectAltName: [c.example.com]}"))
        assert "needs a root CA" in found["spec.sslConfig.secretRef"]

    def test_versions_and_ciphers_checked(self):
        found = problems(secret("a") + vs("a", "{secretRef: {name: a}, parameters: {minimumProtocolVersion: TLSv1_3,"
                                               " maximumProtocolVersion: TLSv1_2}}"))
        assert "above the maximum" in found["spec.sslConfig.secretRef"]
        found = problems(secret("a") + vs("a", "{secretRef: {name: a}, parameters: {minimumProtocolVersion: SSLv3}}"))
        assert "unknown TLS version" in found["spec.sslConfig.parameters.minimumProtocolVersion"]


class ChainTests(TestCase):
    def test_two_certificates_cannot_answer_one_name(self):
        found = problems(secret("a") + secret("b", B.cert_pem, B.key_pem)
                         + vs("a", "{secretRef: {name: a}, sniDomains: [a.example.com, x.example.com]}")
                         + vs("b", "{secretRef: {name: b}, sniDomains: [x.example.com]}", "[b.example.com]"))
        assert "'x.example.com' already has another certificate" in found["spec.sslConfig.sniDomains[0]"]

    def test_only_one_certificate_answers_every_name(self):
        found = problems(secret("a") + secret("b", B.cert_pem, B.key_pem)
                         + vs("a", "{secretRef: {name: a}}") + vs("b", "{secretRef: {name: b}}", "[b.example.com]"))
        assert "only one certificate can answer every server name" in found["spec.sslConfig"]

    def test_same_certificate_differing_by_sni_domains_is_one_chain(self):
        config = load_text(secret("a") + vs("a", "{secretRef: {name: a}, sniDomains: [a.example.com]}")
                           + vs("b", "{secretRef: {name: a}, sniDomains: ['*.b.example.com']}", "[b.example.com]")
                           + vs("plain", None, "['*']"), "tls.yaml")
        snapshot = build_snapshot(config, PluginHost.create())
        (chain,) = snapshot.tls.chains
        assert chain.names == ("a.example.com", "*.b.example.com")
        assert snapshot.tls.select("a.example.com") is chain
        assert snapshot.tls.select("x.y.b.example.com") is chain
        assert snapshot.tls.select("b.example.com") is None  # the wildcard needs a label before it
        assert snapshot.tls.select(None) is None
        assert chain.hosts.lookup("b.example.com").name == "b"
        assert chain.hosts.lookup("other") is None
        # plain listeners: only the virtual service without sslConfig
        assert snapshot.hosts.lookup("a.example.com").name == "plain"

    def test_exact_then_longest_wildcard_then_every_name(self):
        config = load_text(secret("a") + secret("b", B.cert_pem, B.key_pem) + secret("c", B.cert_pem, B.key_pem)
                           + vs("exact", "{secretRef: {name: a}, sniDomains: [www.example.com]}", "[www.example.com]")
                           + vs("wild", "{secretRef: {name: b}, sniDomains: ['*.example.com']}", "['*.example.com']")
                           + vs("every", "{secretRef: {name: c}, parameters: {minimumProtocolVersion: TLSv1_3}}",
                                "['*']"), "tls.yaml")
        routes = build_snapshot(config, PluginHost.create()).tls
        assert routes.select("www.example.com").hosts.lookup("www.example.com").name == "exact"
        assert routes.select("api.example.com").hosts.lookup("api.example.com").name == "wild"
        assert routes.select("other.test").hosts.lookup("other.test").name == "every"
        assert routes.select(None) is routes.every

    def test_a_domain_may_be_served_plain_and_with_tls(self):
        config = load_text(secret("a") + vs("https", "{secretRef: {name: a}}") + vs("http", None), "tls.yaml")
        assert len(config.virtual_services) == 2
        found = problems(secret("a") + vs("one", "{secretRef: {name: a}}")
                         + vs("two", "{secretRef: {name: a}, sniDomains: [a.example.com]}"))
        assert "already served by VirtualService default/one (both have sslConfig)" in \
            found["spec.virtualHost.domains[0]"]


def _client_hello(server_name: bytes | None) -> bytes:
    client = SSL.Connection(SSL.Context(SSL.TLS_CLIENT_METHOD), None)
    if server_name is not None:
        client.set_tlsext_host_name(server_name)
    client.set_connect_state()
    with pytest.raises(SSL.WantReadError):
        client.do_handshake()
    return client.bio_read(65536)


class ClientHelloProbeTests(TestCase):
    def test_the_server_name_of_a_real_client_hello(self):
        hello = _client_hello(b"API.Example.com")
        probe = ClientHelloProbe()
        # in pieces, as TCP may deliver it
        assert probe.feed(hello[:5]) is False
        assert probe.feed(hello[5:40]) is False
        assert probe.feed(hello[40:]) is True
        assert probe.server_name == "api.example.com"

    def test_no_sni_and_not_tls(self):
        probe = ClientHelloProbe()
        assert probe.feed(_client_hello(None)) is True and probe.server_name is None
        probe = ClientHelloProbe()
        assert probe.feed(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n") is True and probe.server_name is None


class ExplainTests(TestCase):
    async def test_an_https_url_is_routed_by_its_certificate(self):
        from twistgw.testing import ChainTester

        t = ChainTester.from_yaml(secret("a") + vs("a", "{secretRef: {name: a}, sniDomains: [a.example.com]}")
                                  + vs("plain", None, "['*']"), [])
        tls = await t.request("GET", "https://a.example.com/x")
        assert tls.ctx.virtual_service == "default/a" and tls.ctx.scheme == "https"
        plain = await t.request("GET", "http://a.example.com/x")
        assert plain.ctx.virtual_service == "default/plain" and plain.ctx.scheme == "http"


class TlsChoiceTests(TestCase):
    """What a connection's later requests are routed by, across reloads."""

    def snapshot(self, cert: bytes = A.cert_pem, key: bytes = A.key_pem):
        return build_snapshot(load_text(secret("a", cert, key) + vs("a", "{secretRef: {name: a}}")
                                        + vs("plain", None, "['*']"), "tls.yaml"), PluginHost.create())

    def test_same_certificate_after_a_reload_keeps_serving_and_a_new_one_is_misdirected(self):
        from twistgw.engine.sni import TlsChoice

        first = self.snapshot()
        choice = TlsChoice("a.example.com", first.tls.select("a.example.com"), first.tls)
        assert choice.hosts(first).lookup("a.example.com").name == "a"
        reloaded = self.snapshot()  # the same certificate: a new snapshot, equal settings
        assert choice.hosts(reloaded).lookup("a.example.com").name == "a"
        assert choice.routes is reloaded.tls
        renewed = CA.issue("a.example.com", dns=["a.example.com"])
        assert choice.hosts(self.snapshot(renewed.cert_pem, renewed.key_pem)) is None  # → 421

    def test_the_listener_certificate_routes_plain_virtual_services(self):
        from twistgw.engine.sni import TlsChoice

        first = self.snapshot()
        # a connection given the ssl: listener's own certificate (chain None) routes plain virtual services
        choice = TlsChoice(None, None, first.tls)
        assert choice.hosts(first).lookup("x").name == "plain"
        # after a reload, 'a' (no sniDomains: every name) answers that connection's name: misdirected
        assert first.tls.select(None) is not None
        assert choice.hosts(self.snapshot()) is None

    def test_routes_of_another_listener(self):
        from twistgw.core.tlsroutes import TlsRoutes
        from twistgw.engine.sni import TlsChoice

        first = self.snapshot()
        own = TlsRoutes(first.config.virtual_services)
        choice = TlsChoice("a.example.com", own.select("a.example.com"), own, routes_in=lambda s: own)
        assert choice.hosts(first).lookup("a.example.com").name == "a"
