"""The project's own code calls no deprecated API (issue 32, item 19): the
test run fails on a DeprecationWarning raised from twistgw's modules
(pyproject.toml's filterwarnings), and the TLS contexts twistgw builds (a
listener asking for client certificates, a client presenting one) call
nothing pyOpenSSL deprecates, whoever the warning would be attributed to."""

from __future__ import annotations

import datetime
import pathlib
import warnings

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from twistgw.servertls import server_context
from twistgw.tls import client_tls, common_name

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _certificate(name: str) -> tuple[bytes, bytes, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem, cert


def test_the_test_run_fails_on_twistgws_own_deprecation_warnings():
    ini = (ROOT / "pyproject.toml").read_text().split("[tool.pytest.ini_options]", 1)[1].split("\n[", 1)[0]
    assert '"error::DeprecationWarning:twistgw",' in ini
    assert '"error::PendingDeprecationWarning:twistgw",' in ini


def test_tls_contexts_call_nothing_deprecated():
    cert_pem, key_pem, _ = _certificate("gateway.test")
    ca_pem, _, _ = _certificate("clients-ca.test")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # from any module: pyOpenSSL's too
        context = server_context(cert_pem, key_pem, ca_pem=ca_pem)  # client certificates: the CA list
        assert context is not None
        creator = client_tls("gateway.test", ca_pem=ca_pem, client_cert_pem=cert_pem, client_key_pem=key_pem)
        creator.clientConnectionForTLS(None)  # builds the client's context: its certificate and key


def test_a_common_name_is_read_with_cryptography():
    assert common_name(_certificate("peer.test")[2]) == "peer.test"
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    anonymous = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(x509.Name([]))
                 .public_key(key.public_key()).serial_number(1).not_valid_before(now)
                 .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    assert common_name(anonymous) is None
