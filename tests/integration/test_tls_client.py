"""``twistgw.tls.client_tls``: the one way the gateway opens TLS client
connections (issue 23, item 17), against a real TLS server on loopback.

Each case connects, sends a "password" as the first application data, and
looks at what the server received: a refused peer gets nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from OpenSSL import crypto
from twisted.internet import defer, protocol, reactor, ssl
from twisted.internet.endpoints import TCP4ClientEndpoint, wrapClientTLS

from support.pki import Issued, TestCA
from twistgw.tls import PeerRefused, TLSSettingsError, client_tls, describe_tls_failure

SECRET = b"password=hunter2\n"


class _Server(protocol.Protocol):
    def connectionMade(self) -> None:
        self.factory.received.append(b"")  # type: ignore[attr-defined]

    def dataReceived(self, data: bytes) -> None:
        self.factory.received[-1] += data  # type: ignore[attr-defined]
        self.transport.write(b"ok:" + data)  # type: ignore[union-attr]


class _Client(protocol.Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.reason: Any = None
        self.done: defer.Deferred[None] = defer.Deferred()

    def connectionMade(self) -> None:
        self.transport.write(SECRET)  # type: ignore[union-attr]

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        if self.data.endswith(b"\n"):
            self.transport.loseConnection()  # type: ignore[union-attr]

    def connectionLost(self, reason: Any = None) -> None:
        self.reason = reason
        self.done.callback(None)


def _serve(issued: Issued, client_ca: TestCA | None = None,
           max_version: ssl.TLSVersion | None = None) -> tuple[int, list[bytes], Any]:
    factory = protocol.Factory.forProtocol(_Server)
    factory.received = []  # type: ignore[attr-defined]
    extra: dict[str, Any] = {}
    if client_ca is not None:
        extra = {"verify": True, "caCerts": [crypto.X509.from_cryptography(client_ca.cert)],
                 "requireCertificate": True}
    if max_version is not None:
        extra["lowerMaximumSecurityTo"] = max_version
    options = ssl.CertificateOptions(
        privateKey=crypto.PKey.from_cryptography_key(
            __import__("cryptography.hazmat.primitives.serialization", fromlist=["x"])
            .load_pem_private_key(issued.key_pem, None)),
        certificate=crypto.X509.from_cryptography(
            __import__("cryptography.x509", fromlist=["x"]).load_pem_x509_certificate(issued.cert_pem)),
        **extra)
    port = reactor.listenSSL(0, factory, options, interface="127.0.0.1")  # type: ignore[attr-defined]
    return port.getHost().port, factory.received, port  # type: ignore[attr-defined]


async def _talk(creator: Any, port: int) -> tuple[bytes, Any]:
    client = _Client()
    endpoint = wrapClientTLS(creator, TCP4ClientEndpoint(reactor, "127.0.0.1", port, timeout=5))
    try:
        await endpoint.connect(protocol.Factory.forProtocol(lambda: client))
    except Exception as exc:  # a failed connect is an answer too
        return b"", exc
    await client.done
    return client.data, client.reason.value


@pytest.fixture(scope="module")
def ca() -> TestCA:
    return TestCA()


@pytest.fixture
def listening() -> Any:
    ports: list[Any] = []

    def start(*args: Any, **kwargs: Any) -> tuple[int, list[bytes]]:
        number, received, port = _serve(*args, **kwargs)
        ports.append(port)
        return number, received

    yield start
    for port in ports:
        port.stopListening()


async def _refused(creator: Any, port: int, received: list[bytes]) -> str:
    data, reason = await _talk(creator, port)
    assert data == b""
    assert b"".join(received) == b"", "the client sent application data to a refused peer"
    text = describe_tls_failure(reason)
    assert text is not None, repr(reason)
    return text


@pytest_twisted.ensureDeferred
async def test_the_right_subject_alt_name_is_accepted(ca: TestCA, listening: Any) -> None:
    port, received = listening(ca.issue("ldap.example.org", dns=["ldap.example.org"]))
    data, _reason = await _talk(client_tls("ldap.example.org", ca_pem=ca.pem), port)
    assert data == b"ok:" + SECRET
    assert received == [SECRET]


@pytest_twisted.ensureDeferred
async def test_a_certificate_without_subject_alt_name_is_refused(ca: TestCA, listening: Any) -> None:
    """The common name is the very name asked for; it still does not count."""
    port, received = listening(ca.issue("evil.example.org"))
    text = await _refused(client_tls("evil.example.org", ca_pem=ca.pem), port, received)
    assert "no DNS or IP subjectAltName" in text and "evil.example.org" in text


@pytest_twisted.ensureDeferred
async def test_a_certificate_without_subject_alt_name_for_another_host_is_refused(
        ca: TestCA, listening: Any) -> None:
    """Issue 23's case: a CN for another host, checked against serverName."""
    port, received = listening(ca.issue("dc1.corp.example.test"))
    text = await _refused(client_tls("evil.example.org", ca_pem=ca.pem), port, received)
    assert "no DNS or IP subjectAltName" in text


@pytest_twisted.ensureDeferred
async def test_a_wrong_name_is_refused(ca: TestCA, listening: Any) -> None:
    port, received = listening(ca.issue("ldap.example.org", dns=["other.example.org"]))
    text = await _refused(client_tls("ldap.example.org", ca_pem=ca.pem), port, received)
    assert "names other.example.org, not ldap.example.org" in text


@pytest_twisted.ensureDeferred
async def test_a_wildcard_covers_one_label_only(ca: TestCA, listening: Any) -> None:
    port, received = listening(ca.issue("x", dns=["*.example.org"]))
    data, _ = await _talk(client_tls("ldap.example.org", ca_pem=ca.pem), port)
    assert data == b"ok:" + SECRET
    await _refused(client_tls("a.ldap.example.org", ca_pem=ca.pem), port, received[1:])


@pytest_twisted.ensureDeferred
async def test_an_untrusted_ca_is_refused(ca: TestCA, listening: Any) -> None:
    port, received = listening(TestCA("another CA").issue("ldap.example.org", dns=["ldap.example.org"]))
    text = await _refused(client_tls("ldap.example.org", ca_pem=ca.pem), port, received)
    assert "not trusted" in text


@pytest_twisted.ensureDeferred
async def test_the_system_trust_does_not_know_a_private_ca(ca: TestCA, listening: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    port, received = listening(ca.issue("ldap.example.org", dns=["ldap.example.org"]))
    text = await _refused(client_tls("ldap.example.org"), port, received)
    assert "not trusted" in text


@pytest_twisted.ensureDeferred
async def test_the_system_trust_honours_ssl_cert_file(ca: TestCA, listening: Any, monkeypatch: Any,
                                                      tmp_path: Any) -> None:
    (tmp_path / "ca.pem").write_bytes(ca.pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    port, _received = listening(ca.issue("ldap.example.org", dns=["ldap.example.org"]))
    data, _ = await _talk(client_tls("ldap.example.org"), port)
    assert data == b"ok:" + SECRET


@pytest_twisted.ensureDeferred
async def test_an_ip_address_is_checked_against_ip_subject_alt_names(ca: TestCA, listening: Any) -> None:
    port, received = listening(ca.issue("127.0.0.1", ips=["127.0.0.1"]))
    data, _ = await _talk(client_tls("127.0.0.1", ca_pem=ca.pem), port)
    assert data == b"ok:" + SECRET
    port2, received2 = listening(ca.issue("127.0.0.1", dns=["127.0.0.1"]))  # a DNS name is not an IP SAN
    await _refused(client_tls("127.0.0.1", ca_pem=ca.pem), port2, received2)


@pytest_twisted.ensureDeferred
async def test_verify_names_replace_the_server_name(ca: TestCA, listening: Any) -> None:
    port, received = listening(ca.issue("x", dns=["backend.internal"]))
    data, _ = await _talk(client_tls("api.example.org", ca_pem=ca.pem, verify_names=["backend.internal"]), port)
    assert data == b"ok:" + SECRET
    await _refused(client_tls("backend.internal", ca_pem=ca.pem, verify_names=["api.example.org"]),
                   port, received[1:])


@pytest_twisted.ensureDeferred
async def test_client_certificate(ca: TestCA, listening: Any) -> None:
    port, received = listening(ca.issue("ldap.example.org", dns=["ldap.example.org"]), client_ca=ca)
    me = ca.issue("gateway", client=True)
    data, _ = await _talk(client_tls("ldap.example.org", ca_pem=ca.pem, client_cert_pem=me.cert_pem,
                                     client_key_pem=me.key_pem), port)
    assert data == b"ok:" + SECRET
    data, reason = await _talk(client_tls("ldap.example.org", ca_pem=ca.pem), port)
    assert data == b"" and received[1:] in ([], [b""])
    assert reason is not None


@pytest_twisted.ensureDeferred
async def test_minimum_version_above_the_server_fails_the_handshake(ca: TestCA, listening: Any) -> None:
    port, received = listening(ca.issue("ldap.example.org", dns=["ldap.example.org"]),
                               max_version=ssl.TLSVersion.TLSv1_2)
    data, _ = await _talk(client_tls("ldap.example.org", ca_pem=ca.pem, max_version="TLSv1_2"), port)
    assert data == b"ok:" + SECRET
    text = await _refused(client_tls("ldap.example.org", ca_pem=ca.pem, min_version="TLSv1_3"),
                          port, received[1:])
    assert text.startswith("TLS handshake failed")


@pytest.mark.parametrize("kwargs, message", [
    ({"ca_pem": b"not a certificate"}, "CA certificates"),
    ({"ca_pem": b""}, "CA certificates"),
    ({"min_version": "TLSv1_4"}, "minimum TLS version 'TLSv1_4'"),
    ({"max_version": "SSLv3"}, "maximum TLS version 'SSLv3'"),
    ({"min_version": "TLSv1_3", "max_version": "TLSv1_2"}, "above the maximum"),
    ({"ciphers": ["NO-SUCH-CIPHER"]}, "refused by OpenSSL"),
    ({"ciphers": "aNULL"}, "refused by OpenSSL"),  # anonymous suites have no certificate to check
    ({"ciphers": ["ADH-AES128-SHA", "PSK-AES128-CBC-SHA"]}, "refused by OpenSSL"),
    ({"ciphers": ["ECDHE-RSA-AES128-GCM-SHA256@STRENGTH=x"]}, "refused by OpenSSL"),  # a malformed rule
    ({"client_cert_pem": b"x"}, "needs its private key"),
    ({"verify_names": ["bad name"]}, "has spaces"),
])
def test_settings_that_cannot_work_are_refused_when_built(ca: TestCA, kwargs: dict[str, Any],
                                                          message: str) -> None:
    with pytest.raises(TLSSettingsError, match=message.replace("(", r"\(")):
        client_tls("ldap.example.org", **kwargs)


def test_envoy_equal_preference_groups_are_read_in_order() -> None:
    # Gloo's client-TLS guide writes BoringSSL's "[A|B]" groups; OpenSSL has none
    creator = client_tls("backend.test", ciphers=[
        "[ECDHE-ECDSA-AES128-GCM-SHA256|ECDHE-ECDSA-CHACHA20-POLY1305]", "ECDHE-RSA-AES256-GCM-SHA384"])
    assert creator is not None


def test_a_server_name_that_idna_cannot_encode_is_a_settings_error() -> None:
    with pytest.raises(TLSSettingsError, match="not a valid host name"):
        client_tls("b\u00fccher..example")
    client_tls("my_service.internal")  # ASCII names go as they are (docker and kube names have _)


def test_describe() -> None:
    assert describe_tls_failure(PeerRefused("x")) == "TLS peer refused: x"
    assert describe_tls_failure(ValueError("x")) is None


@pytest_twisted.ensureDeferred
async def test_an_agent_with_the_per_host_policy(ca: TestCA) -> None:
    """treq/Agent for URLs of any host: each checked against its own name."""
    import treq
    from treq.client import HTTPClient
    from twisted.web import resource, server
    from twisted.web.client import Agent, HTTPConnectionPool, ResponseNeverReceived

    from twistgw.tls import verifying_https_policy

    class Hello(resource.Resource):
        isLeaf = True

        def render_GET(self, request: Any) -> bytes:
            return b"hello"

    ports = []
    for issued in (ca.issue("x", ips=["127.0.0.1"]), ca.issue("127.0.0.1")):  # the second has no SAN
        options = ssl.PrivateCertificate.loadPEM(issued.key_pem + issued.cert_pem).options()
        ports.append(reactor.listenSSL(0, server.Site(Hello()), options,  # type: ignore[attr-defined]
                                       interface="127.0.0.1"))
    pool = HTTPConnectionPool(reactor, persistent=False)
    client = HTTPClient(Agent(reactor, contextFactory=verifying_https_policy(ca_pem=ca.pem), pool=pool))
    try:
        good, bad = (p.getHost().port for p in ports)
        response = await client.get(f"https://127.0.0.1:{good}/".encode())
        assert await treq.content(response) == b"hello"
        with pytest.raises(ResponseNeverReceived) as refused:
            await client.get(f"https://127.0.0.1:{bad}/".encode())
        assert "no DNS or IP subjectAltName" in (describe_tls_failure(refused.value.reasons[0].value) or "")
    finally:
        for p in ports:
            await p.stopListening()
    with pytest.raises(TLSSettingsError):
        verifying_https_policy(ca_pem=b"nope")
