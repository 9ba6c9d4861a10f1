"""The engine's upstream TLS layer (``twistgw.engine.upstream.memtls``, the
standard library's ``ssl.SSLObject`` over memory BIOs, settings from
``twistgw.stdtls``) against real TLS servers on loopback: Twisted's, over
pyOpenSSL, as in test_tls_client.py.

The same checks as ``client_tls``'s (test_tls_client.py), with the same
words; a refused peer never gets an application byte (the first write,
made at connect, waits for the verified handshake). Then what the engine
relies on: the TLS version bounds, a client certificate loaded through a
temporary file that is gone at once, a backend that closes mid-response
(with and without close_notify), large bodies both ways with back-pressure
on both sides, and ``loseConnection`` closing a connection whose producer
is registered (the engine registers one on every upstream connection).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, protocol, reactor, ssl
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.error import ConnectionDone, ConnectionLost

from support.http import sleep
from support.pki import TestCA
from test_tls_client import SECRET, _Client, _serve
from twistgw.engine.upstream.memtls import TLSClientEndpoint, TLSConnection
from twistgw.stdtls import client_context, server_names
from twistgw.tls import TLSSettingsError, describe_tls_failure


def _endpoint(port: int, server_name: str, verify_names: tuple[str, ...] = (), **settings: Any) -> TLSClientEndpoint:
    sni, names = server_names(server_name, verify_names)
    return TLSClientEndpoint(TCP4ClientEndpoint(reactor, "127.0.0.1", port, timeout=5),
                             client_context(**settings), sni, names)


class _Versioned(_Client):
    version: str | None = None

    def dataReceived(self, data: bytes) -> None:
        tls = self.transport
        assert isinstance(tls, TLSConnection) and tls._tls is not None
        self.version = tls._tls.version()
        super().dataReceived(data)


async def _talk(port: int, server_name: str, verify_names: tuple[str, ...] = (),
                **settings: Any) -> tuple[bytes, Any, str | None]:
    client = _Versioned()
    await _endpoint(port, server_name, verify_names, **settings).connect(
        protocol.Factory.forProtocol(lambda: client))
    await client.done
    return client.data, client.reason.value, client.version


async def _refused(port: int, received: list[bytes], server_name: str, verify_names: tuple[str, ...] = (),
                   **settings: Any) -> str:
    data, reason, _ = await _talk(port, server_name, verify_names, **settings)
    assert data == b""
    assert b"".join(received) == b"", "the client sent application data to a refused peer"
    text = describe_tls_failure(reason)
    assert text is not None, repr(reason)
    return text


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


@pytest_twisted.ensureDeferred
async def test_the_right_name_is_accepted_and_tls13_is_the_default(ca: TestCA, listening: Any) -> None:
    port, received = listening(ca.issue("backend.test", dns=["backend.test"]))
    data, reason, version = await _talk(port, "backend.test", ca_pem=ca.pem)
    assert data == b"ok:" + SECRET and received == [SECRET]
    assert version == "TLSv1.3"
    assert isinstance(reason, ConnectionDone)  # our close_notify, then TCP's close


@pytest_twisted.ensureDeferred
async def test_refusals_say_why_as_client_tls_does(ca: TestCA, listening: Any) -> None:
    port, received = listening(ca.issue("backend.test"))  # a CN only
    text = await _refused(port, received, "backend.test", ca_pem=ca.pem)
    assert text.startswith("TLS peer refused: the peer's certificate is refused: it has no DNS or IP"
                           " subjectAltName"), text
    port, received = listening(ca.issue("backend.test", dns=["other.test"]))
    text = await _refused(port, received, "backend.test", ca_pem=ca.pem)
    assert "it names other.test, not backend.test" in text
    port, received = listening(TestCA("another CA").issue("backend.test", dns=["backend.test"]))
    text = await _refused(port, received, "backend.test", ca_pem=ca.pem)
    assert text.startswith("TLS peer refused: the peer's certificate chain is not trusted: "), text


@pytest_twisted.ensureDeferred
async def test_verify_names_replace_the_server_name_and_ips_need_ip_names(ca: TestCA, listening: Any) -> None:
    port, received = listening(ca.issue("x", dns=["backend.internal"]))
    data, _, _ = await _talk(port, "api.example.org", ("backend.internal",), ca_pem=ca.pem)
    assert data == b"ok:" + SECRET
    text = await _refused(port, received[1:], "backend.internal", ("api.example.org",), ca_pem=ca.pem)
    assert "it names backend.internal, not api.example.org" in text
    port, received = listening(ca.issue("127.0.0.1", ips=["127.0.0.1"]))
    data, _, _ = await _talk(port, "127.0.0.1", ca_pem=ca.pem)
    assert data == b"ok:" + SECRET
    port, received = listening(ca.issue("127.0.0.1", dns=["127.0.0.1"]))  # a DNS name is not an IP SAN
    await _refused(port, received, "127.0.0.1", ca_pem=ca.pem)


@pytest_twisted.ensureDeferred
async def test_version_bounds_are_honoured(ca: TestCA, listening: Any) -> None:
    port, received = listening(ca.issue("backend.test", dns=["backend.test"]))
    data, _, version = await _talk(port, "backend.test", ca_pem=ca.pem, max_version="TLSv1_2",
                                   ciphers=("ECDHE-ECDSA-AES128-GCM-SHA256",))
    assert (data, version) == (b"ok:" + SECRET, "TLSv1.2")
    port, received = listening(ca.issue("backend.test", dns=["backend.test"]), max_version=ssl.TLSVersion.TLSv1_2)
    text = await _refused(port, received, "backend.test", ca_pem=ca.pem, min_version="TLSv1_3")
    assert text.startswith("TLS handshake failed: "), text


@pytest_twisted.ensureDeferred
async def test_a_client_certificate_is_sent_and_its_temporary_file_is_gone(
        ca: TestCA, listening: Any, tmp_path: Path, monkeypatch: Any) -> None:
    port, received = listening(ca.issue("backend.test", dns=["backend.test"]), client_ca=ca)
    me = ca.issue("gateway", client=True)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    context = client_context(ca_pem=ca.pem, client_cert_pem=me.cert_pem, client_key_pem=me.key_pem)
    assert os.listdir(tmp_path) == []  # written, loaded, removed
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    other = ca.issue("gateway", client=True)  # settings not made yet (contexts are kept)
    with pytest.raises(TLSSettingsError, match="needs a temporary file"):
        client_context(ca_pem=ca.pem, client_cert_pem=other.cert_pem, client_key_pem=other.key_pem)
    monkeypatch.undo()
    sni, names = server_names("backend.test")
    client = _Client()
    await TLSClientEndpoint(TCP4ClientEndpoint(reactor, "127.0.0.1", port, timeout=5), context, sni,
                            names).connect(protocol.Factory.forProtocol(lambda: client))
    await client.done
    assert client.data == b"ok:" + SECRET
    data, reason, _ = await _talk(port, "backend.test", ca_pem=ca.pem)  # no certificate: the server refuses
    assert data == b"" and describe_tls_failure(reason) is not None


@pytest_twisted.ensureDeferred
async def test_with_a_client_certificate_a_wrong_name_is_refused_before_it_is_sent(
        ca: TestCA, listening: Any) -> None:
    """Mutual TLS: the name is checked during the handshake too (the
    Upstream's context, ``upstream_context``), so a server whose chain is
    trusted but whose name is wrong never gets the client certificate."""
    from twistgw.api.upstreampolicy import UpstreamTls
    from twistgw.stdtls import upstream_context

    me = ca.issue("gateway", client=True)
    mtls = UpstreamTls(sni="backend.test", ca_pem=ca.pem, cert_pem=me.cert_pem, key_pem=me.key_pem)
    context = upstream_context(mtls)
    assert context.check_hostname and not context.hostname_checks_common_name
    assert not upstream_context(UpstreamTls(sni="backend.test", ca_pem=ca.pem)).check_hostname
    assert not upstream_context(UpstreamTls(sni="backend.test", ca_pem=ca.pem, cert_pem=me.cert_pem,
                                            key_pem=me.key_pem, verify_names=("x.test",))).check_hostname
    settings = {"ca_pem": ca.pem, "client_cert_pem": me.cert_pem, "client_key_pem": me.key_pem,
                "check_hostname": True}
    for issued, words in [(ca.issue("backend.test", dns=["other.test"]), "it does not name backend.test"),
                          (ca.issue("backend.test"), "it does not name backend.test")]:  # CN only
        port, received = listening(issued, client_ca=ca)
        text = await _refused(port, received, "backend.test", **settings)
        assert words in text and "before the client certificate is sent" in text, text
    port, received = listening(ca.issue("x", ips=["127.0.0.1"]), client_ca=ca)
    data, _, _ = await _talk(port, "127.0.0.1", **settings)  # an IP name, checked as one
    assert data == b"ok:" + SECRET
    port, received = listening(ca.issue("backend.test", dns=["backend.test"]), client_ca=ca)
    data, _, _ = await _talk(port, "backend.test", **settings)
    assert data == b"ok:" + SECRET
    settings["check_hostname"] = False  # verifySubjectAltName: after the handshake, as without a certificate
    data, _, _ = await _talk(port, "api.example.org", ("backend.test",), **settings)
    assert data == b"ok:" + SECRET


@pytest_twisted.ensureDeferred
async def test_without_a_ca_the_system_store_is_used_and_honours_ssl_cert_file(
        ca: TestCA, listening: Any, monkeypatch: Any, tmp_path: Path) -> None:
    port, received = listening(ca.issue("backend.test", dns=["backend.test"]))
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    client_context.cache_clear()  # contexts are kept per settings; the store is read when one is made
    text = await _refused(port, received, "backend.test")
    assert "not trusted" in text
    (tmp_path / "ca.pem").write_bytes(ca.pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    client_context.cache_clear()
    try:
        data, _, _ = await _talk(port, "backend.test")
        assert data == b"ok:" + SECRET
    finally:
        client_context.cache_clear()


def test_settings_are_refused_with_client_tls_words(ca: TestCA) -> None:
    for kwargs, message in [({"ca_pem": b"nope"}, "CA certificates"), ({"min_version": "TLSv1_4"}, "TLSv1_4"),
                            ({"ciphers": ("NO-SUCH-CIPHER",)}, "refused by OpenSSL"),
                            ({"client_cert_pem": ca.pem}, "needs its private key")]:
        with pytest.raises(TLSSettingsError, match=message):
            client_context(**kwargs)


class _Backend(protocol.Protocol):
    """Reads an 8-byte length then that many bytes, answers their SHA-256;
    ``big N``: N bytes; ``cut``: half an answer then TCP closes (no
    close_notify); ``bye``: an answer then close_notify."""

    def connectionMade(self) -> None:
        self.buf = bytearray()
        self.factory.conns.append(self)  # type: ignore[attr-defined]

    def dataReceived(self, data: bytes) -> None:
        self.buf += data
        if self.buf.startswith(b"big "):
            n = int(self.buf[4:].split(b"\n")[0])
            self.transport.write(bytes(range(256)) * (n // 256))  # type: ignore[union-attr]
            self.buf = bytearray()
        elif self.buf == b"cut\n":
            self.transport.write(b"half an ans")  # type: ignore[union-attr]
            reactor.callLater(0.05, self.transport.abortConnection)  # type: ignore[attr-defined, union-attr]
        elif self.buf == b"bye\n":
            self.transport.write(b"all of it\n")  # type: ignore[union-attr]
            self.transport.loseConnection()  # type: ignore[union-attr]
        elif len(self.buf) >= 8 and len(self.buf) - 8 >= int(self.buf[:8]):
            self.transport.write(hashlib.sha256(self.buf[8:]).hexdigest().encode())  # type: ignore[union-attr]
            self.buf = bytearray()


class _App(protocol.Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.reason: Any = None
        self.lost: defer.Deferred[None] = defer.Deferred()
        self.paused = 0
        self.resumed = 0

    def connectionMade(self) -> None:
        self.transport.registerProducer(self, True)  # type: ignore[union-attr]  # as the engine does

    def pauseProducing(self) -> None:
        self.paused += 1

    def resumeProducing(self) -> None:
        self.resumed += 1

    def stopProducing(self) -> None:
        pass

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Any = None) -> None:
        self.reason = reason
        self.lost.callback(None)


async def _backend(ca: TestCA) -> tuple[Any, Any]:
    leaf = ca.issue("backend.test", dns=["backend.test"])
    factory = protocol.Factory.forProtocol(_Backend)
    factory.conns = []  # type: ignore[attr-defined]
    cert = ssl.PrivateCertificate.loadPEM(leaf.key_pem + leaf.cert_pem)
    return reactor.listenSSL(0, factory, cert.options(), interface="127.0.0.1"), factory  # type: ignore


async def _connect(port: Any, ca: TestCA) -> _App:
    app = _App()
    await _endpoint(port.getHost().port, "backend.test", ca_pem=ca.pem).connect(
        protocol.Factory.forProtocol(lambda: app))
    return app


async def _until(test: Any, seconds: float = 10) -> None:
    for _ in range(int(seconds / 0.01)):
        if test():
            return
        await sleep(0.01)
    raise AssertionError("never happened")


@pytest_twisted.ensureDeferred
async def test_a_backend_that_closes_mid_response_with_or_without_close_notify(ca: TestCA) -> None:
    port, _factory = await _backend(ca)
    try:
        app = await _connect(port, ca)
        app.transport.write(b"cut\n")  # type: ignore[union-attr]
        await app.lost
        assert app.data == b"half an ans"
        assert isinstance(app.reason.value, ConnectionLost)  # as Twisted's TLS reports a truncation
        assert describe_tls_failure(app.reason.value) is None  # a reset, not a TLS failure
        app = await _connect(port, ca)
        app.transport.write(b"bye\n")  # type: ignore[union-attr]
        await app.lost
        assert app.data == b"all of it\n"
        assert isinstance(app.reason.value, ConnectionDone)  # close_notify, answered
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_large_bodies_both_ways_with_back_pressure(ca: TestCA) -> None:
    port, factory = await _backend(ca)
    try:
        app = await _connect(port, ca)
        backend = factory.conns[-1]
        backend.transport.pauseProducing()  # the backend stops reading: our socket buffer fills
        body = os.urandom(16 * 1024 * 1024)
        app.transport.write(b"%08d" % len(body))  # type: ignore[union-attr]
        for i in range(0, len(body), 65536):  # the engine's body chunks, written as they come
            app.transport.write(body[i:i + 65536])  # type: ignore[union-attr]
        assert app.paused >= 1  # the TCP transport under TLS paused our producer
        backend.transport.resumeProducing()
        await _until(lambda: len(app.data) == 64)
        assert app.data == hashlib.sha256(body).hexdigest().encode()
        assert app.resumed >= 1
        app.data = b""
        app.transport.pauseProducing()  # type: ignore[union-attr]  # we stop reading the backend
        app.transport.write(b"big %d\n" % (8 * 1024 * 1024))  # type: ignore[union-attr]
        await sleep(0.3)
        assert len(app.data) < 8 * 1024 * 1024  # nothing more was read meanwhile
        app.transport.resumeProducing()  # type: ignore[union-attr]
        await _until(lambda: len(app.data) == 8 * 1024 * 1024)
        assert app.data == bytes(range(256)) * (8 * 1024 * 1024 // 256)
        app.transport.loseConnection()  # type: ignore[union-attr]
        await app.lost
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_writes_before_the_handshake_wait_with_the_producer_paused(ca: TestCA) -> None:
    port, _factory = await _backend(ca)
    try:
        sent: list[bool] = []

        class First(_App):
            def connectionMade(self) -> None:
                super().connectionMade()
                self.transport.write(b"%08d" % 3)  # type: ignore[union-attr]
                self.transport.write(b"abc")  # type: ignore[union-attr]
                sent.append(self.paused == 1)

        app = First()
        await _endpoint(port.getHost().port, "backend.test", ca_pem=ca.pem).connect(
            protocol.Factory.forProtocol(lambda: app))
        await _until(lambda: len(app.data) == 64)
        assert app.data == hashlib.sha256(b"abc").hexdigest().encode()
        assert sent == [True] and app.resumed == 1
        app.transport.loseConnection()  # type: ignore[union-attr]
        await app.lost
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_lose_connection_closes_with_a_producer_registered(ca: TestCA) -> None:
    """The engine's upstream connections register themselves as producers
    for good; Twisted's TLS layer waited for ``unregisterProducer`` before its
    close_notify, so an idle pooled TLS connection was never closed by us."""
    port, factory = await _backend(ca)
    try:
        app = await _connect(port, ca)
        app.transport.write(b"%08d" % 1 + b"x")  # type: ignore[union-attr]
        await _until(lambda: len(app.data) == 64)
        backend = factory.conns[-1]
        closed: defer.Deferred[None] = defer.Deferred()
        backend.connectionLost = lambda reason=None: closed.callback(reason)
        app.transport.loseConnection()  # type: ignore[union-attr]
        await app.lost
        reason = await defer.DeferredList([closed], fireOnOneCallback=True)
        assert reason
    finally:
        await port.stopListening()


def test_the_standard_librarys_handshake_errors_are_described() -> None:
    import ssl as stdssl

    error = stdssl.SSLError(1, "[SSL: TLSV1_ALERT_PROTOCOL_VERSION] tlsv1 alert protocol version (_ssl.c:1006)")
    assert describe_tls_failure(error) == "TLS handshake failed: tlsv1 alert protocol version"
    assert describe_tls_failure(ConnectionLost()) is None  # a reset, answered as one
