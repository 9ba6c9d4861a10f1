"""The ldap extauth type over HTTP/2 (issue 33): curl ``--http2-prior-knowledge``
(h2c) and curl over TLS with ALPN ``h2`` against a ``twist twistgw``
process, checking Basic credentials against the real slapd of these tests:
the same 401/403/200 as over HTTP/1.1, and the upstream (HTTP/1.1) gets the
request without the credentials.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from ldap_helpers import basic, ldap_config
from support.ports import free_port
from support.process import TwistGateway

CURL = shutil.which("curl")


class _Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = json.dumps(dict(self.headers)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _certificate(d: Path) -> tuple[Path, Path]:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False).sign(key, hashes.SHA256()))
    (d / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    (d / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return d / "key.pem", d / "cert.pem"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: Any, slapd_open: Any) -> Any:
    tmp = tmp_path_factory.mktemp("ldap-h2")
    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    text = ldap_config(slapd_open.url, cacheTtl=0).replace(
        "hosts: [{addr: 127.0.0.1, port: 9}]", f"hosts: [{{addr: 127.0.0.1, port: {backend.server_address[1]}}}]")
    (tmp / "cfg").mkdir()
    (tmp / "cfg" / "config.yaml").write_text(text)
    key, cert = _certificate(tmp)
    tls = free_port()
    with TwistGateway(tmp, str(tmp / "cfg"),
                      args=("--listen", f"ssl:{tls}:privateKey={key}:certKey={cert}:interface=127.0.0.1")) as g:
        g.tls = tls
        yield g
    backend.shutdown()


@pytest.mark.parametrize("flag, scheme", [("--http2-prior-knowledge", "http"), ("--http2", "https"),
                                          ("--http1.1", "http")], ids=["h2c", "alpn-h2", "http1.1"])
@pytest.mark.parametrize("user, password, status", [("alice", "alice-pw", 200), ("alice", "wrong", 401),
                                                    ("bob", "bob-pw", 403), ("", "", 401)])
def test_ldap_over_http2(gw: Any, flag: str, scheme: str, user: str, password: str, status: int) -> None:
    assert CURL is not None, "curl is required"
    port = gw.tls if scheme == "https" else gw.port
    headers = [] if not user else ["-H", "Authorization: " + basic(user, password)["Authorization"]]
    out = subprocess.run([CURL, "-sS", "-k", flag, *headers, "-w", "\n%{http_code} %{http_version}",
                          f"{scheme}://127.0.0.1:{port}/team"], capture_output=True, text=True, timeout=20)
    body, tail = out.stdout.rsplit("\n", 1)
    assert tail == f"{status} {'1.1' if flag == '--http1.1' else '2'}", out.stderr
    if status == 200:
        assert "Authorization" not in json.loads(body)  # the credentials LDAP consumed are not forwarded
