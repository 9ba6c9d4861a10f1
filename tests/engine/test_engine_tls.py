"""TLS listeners (issue 13, point 7): ``ssl:`` endpoints serve ``http/1.1``
by ALPN, so clients that offer ALPN (curl, browsers, Python's ``ssl`` with
``set_alpn_protocols``) complete the handshake. Before, the factory offered
no protocol and OpenSSL failed such handshakes with ``tlsv1 alert internal
error``.
"""

from __future__ import annotations

import datetime
import shutil
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor, threads
from twisted.internet.endpoints import serverFromString
from twisted.internet.utils import getProcessOutputAndValue


def _self_signed(path: Path) -> Path:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gw.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("gw.test")]), critical=False)
            .sign(key, hashes.SHA256()))
    pem = path / "gw.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())
                    + cert.public_bytes(serialization.Encoding.PEM))
    return pem


@pytest.fixture
def tls_port(eng: Any, tmp_path: Path) -> Any:
    pem = _self_signed(tmp_path)
    endpoint = serverFromString(reactor, f"ssl:0:interface=127.0.0.1:privateKey={pem}")
    port = pytest_twisted.blockon(endpoint.listen(eng.gw.service.factory))
    yield port.getHost().port
    pytest_twisted.blockon(port.stopListening())


def _alpn_get(port: int, offer: list[str]) -> tuple[str | None, bytes]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(offer)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="gw.test") as tls:
            tls.sendall(b"GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := tls.recv(65536):
                data += chunk
            return tls.selected_alpn_protocol(), data


@pytest.mark.parametrize("offer", [["h2", "http/1.1"], ["http/1.1"]])
@pytest_twisted.ensureDeferred
async def test_alpn_client_gets_http11(tls_port: int, offer: list[str]) -> None:
    selected, data = await threads.deferToThread(_alpn_get, tls_port, offer)
    assert selected == "http/1.1"
    assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"star"), data


@pytest_twisted.ensureDeferred
async def test_alpn_client_offering_only_h2_is_refused(tls_port: int) -> None:
    # No protocol in common: the handshake fails, as RFC 7301 §3.2 asks
    # (nginx sends no_application_protocol; Twisted's callback an internal
    # error alert). Such a client could not speak to us anyway.
    with pytest.raises(ssl.SSLError):
        await threads.deferToThread(_alpn_get, tls_port, ["h2"])


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize("flags", [[], ["--http1.1"], ["--http2"]])
@pytest_twisted.ensureDeferred
async def test_curl_over_tls(tls_port: int, flags: list[str]) -> None:
    out, err, code = await getProcessOutputAndValue(
        shutil.which("curl"), ["-sSk", "-v", *flags, "-H", "Host: other.test", f"https://127.0.0.1:{tls_port}/"])
    assert code == 0, err
    assert out == b"star"
    assert b"ALPN: server accepted http/1.1" in err or b"ALPN, server accepted to use http/1.1" in err, err
