"""TLS listeners (issue #13, point 7): a real ``twist twistgw`` process with
an ``ssl:`` listener (a self-signed certificate made here), reached by the
real ``curl`` binary and by Python's ``ssl`` module offering ALPN.

Covered: curl (which offers ALPN ``h2``, ``http/1.1``; also with
``--http1.1`` and ``--http2``) completes the handshake and gets HTTP/2 (HTTP/1.1
with ``--http1.1``; issue 33); a Python client offering ``http/1.1`` gets it by
ALPN, one offering ``h2`` gets ``h2``; one offering nothing we serve is
refused in the handshake (RFC 7301 §3.2: no protocol in common); clients
offering no ALPN are served HTTP/1.1; the upstream sees ``X-Forwarded-Proto: https``.
Before issue #13 every ALPN-offering client failed with ``tlsv1 alert
internal error`` (the factory advertised no protocol).
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from support.http import static_upstream_yaml, vs_yaml
from support.process import TwistGateway

CURL = shutil.which("curl")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: Any) -> tuple[Path, Path]:
    """``(key.pem, cert.pem)``: self-signed for ``localhost`` and 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    key_path, cert_path = d / "key.pem", d / "cert.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


class _Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = f"proto={self.headers.get('X-Forwarded-Proto')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def tls_gateway(tmp_path: Path, certificate: tuple[Path, Path]) -> Any:
    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=backend.serve_forever, daemon=True)
    thread.start()
    d = tmp_path / "cfg"
    d.mkdir()
    (d / "c.yaml").write_text(static_upstream_yaml("echo", [backend.server_address[1]]) + "---\n"
                              + vs_yaml(upstream="echo"))
    key, cert = certificate
    listen = f"ssl:{{port}}:privateKey={key}:certKey={cert}:interface=127.0.0.1"
    try:
        with TwistGateway(tmp_path, str(d), listen=listen) as gw:
            gw.cert = cert
            yield gw
    finally:
        backend.shutdown()
        thread.join(5)


def _curl(gw: Any, *args: str) -> subprocess.CompletedProcess:
    assert CURL, "the curl binary is required (apt-get install curl)"
    return subprocess.run([CURL, "-sS", "--max-time", "10", "--noproxy", "*", "--cacert", str(gw.cert),
                           "-w", "\\n%{http_code} %{http_version}", *args,
                           f"https://localhost:{gw.port}/via-curl", "--resolve", f"localhost:{gw.port}:127.0.0.1"],
                          capture_output=True, text=True, timeout=30)


def test_curl_without_alpn_is_served(tls_gateway: Any) -> None:
    out = _curl(tls_gateway, "--no-alpn")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["proto=https", "200 1.1"]


@pytest.mark.parametrize("flags, version", [((), "2"), (("--http1.1",), "1.1"), (("--http2",), "2")])
def test_curl_with_alpn_completes_the_handshake_and_gets_what_it_asked(tls_gateway: Any, flags: tuple[str, ...],
                                                                        version: str) -> None:
    # issue 33: the listener offers h2 then http/1.1; curl asks h2 unless --http1.1
    out = _curl(tls_gateway, *flags)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["proto=https", f"200 {version}"]


def _python_tls_get(gw: Any, alpn: list[str] | None) -> tuple[str | None, bytes]:
    ctx = ssl.create_default_context(cafile=str(gw.cert))
    if alpn is not None:
        ctx.set_alpn_protocols(alpn)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(b"GET /via-python HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            return s.selected_alpn_protocol(), data


def test_python_client_without_alpn_is_served(tls_gateway: Any) -> None:
    selected, data = _python_tls_get(tls_gateway, None)
    assert selected is None
    assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"proto=https")


@pytest.mark.parametrize("offer", [["http/1.1"], ["spdy/3", "http/1.1"]])
def test_python_client_offering_http11_gets_it(tls_gateway: Any, offer: list[str]) -> None:
    selected, data = _python_tls_get(tls_gateway, offer)
    assert selected == "http/1.1"
    assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"proto=https")


@pytest.mark.parametrize("offer", [["h2"], ["h2", "http/1.1"], ["http/1.1", "h2"]])
def test_python_client_offering_h2_gets_h2(tls_gateway: Any, offer: list[str]) -> None:
    # issue 33: h2 is served, and preferred (the server's order)
    ctx = ssl.create_default_context(cafile=str(tls_gateway.cert))
    ctx.set_alpn_protocols(offer)
    with socket.create_connection(("127.0.0.1", tls_gateway.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            assert s.selected_alpn_protocol() == "h2"


def test_python_client_offering_nothing_we_serve_is_refused_in_the_handshake(tls_gateway: Any) -> None:
    # no protocol in common (RFC 7301 §3.2); such a client could not speak
    # to us anyway
    with pytest.raises(ssl.SSLError):
        _python_tls_get(tls_gateway, ["spdy/3", "h3"])
