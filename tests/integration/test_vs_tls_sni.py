"""Certificates per virtual service, picked by SNI, end to end: ``twist
twistgw`` with ``--listen tls:`` / ``ssl:`` and VirtualServices with
``sslConfig`` (Gloo's "Server TLS" guide shapes: a ``kubernetes.io/tls``
Secret, ``sslFiles``, ``sniDomains``, a root CA for client certificates),
against real TLS clients on loopback: Python's ``ssl`` with
``server_hostname``, ``openssl s_client -servername`` and ``curl --resolve``.

The virtual services answer with direct responses naming themselves, so the
body says which one served the request and the certificate which one the
handshake picked.
"""

from __future__ import annotations

import base64
import shutil
import socket
import ssl
import subprocess
import textwrap
from pathlib import Path
import pytest

from support.pki import Issued, TestCA
from support.process import TwistGateway


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def secret(name: str, issued: Issued, ca: bytes | None = None) -> str:
    data = f"  tls.crt: {_b64(issued.cert_pem)}\n  tls.key: {_b64(issued.key_pem)}\n"
    if ca is not None:
        data += f"  ca.crt: {_b64(ca)}\n"
    return (f"apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\n"
            f"metadata: {{name: {name}, namespace: gloo-system}}\ndata:\n{data}---\n")


def vs(name: str, domains: list[str], ssl_config: str | None) -> str:
    text = (f"apiVersion: gateway.solo.io/v1\nkind: VirtualService\n"
            f"metadata: {{name: {name}, namespace: gloo-system}}\nspec:\n")
    if ssl_config is not None:
        text += "  sslConfig:\n" + textwrap.indent(textwrap.dedent(ssl_config).strip(), "    ") + "\n"
    doms = ", ".join(f'"{d}"' for d in domains)
    text += (f"  virtualHost:\n    domains: [{doms}]\n    routes:\n    - matchers: [{{prefix: /}}]\n"
             f"      directResponseAction: {{status: 200, body: \"{name}\"}}\n---\n")
    return text


class Pki:
    def __init__(self) -> None:
        self.ca = TestCA()
        self.other_ca = TestCA("another CA")
        self.a = self.ca.issue("a.example.com", dns=["a.example.com"])
        self.b = self.ca.issue("b.example.com", dns=["b.example.com"])
        self.wild = self.ca.issue("*.wild.test", dns=["*.wild.test"])
        self.default = self.ca.issue("default.test", dns=["default.test"])
        self.client = self.ca.issue("client", dns=["client.example.com"], client=True)
        self.stranger = self.other_ca.issue("client", dns=["client.example.com"], client=True)
        self.wrong_san = self.ca.issue("client", dns=["intruder.example.com"], client=True)


@pytest.fixture(scope="module")
def pki() -> Pki:
    return Pki()


def _client_context(pki: Pki, cert: Issued | None = None, tmp: Path | None = None,
                    max_version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=pki.ca.pem.decode())
    if max_version is not None:
        ctx.maximum_version = max_version
    if cert is not None:
        assert tmp is not None
        c, k = cert.write(tmp, f"client-{id(cert)}")
        ctx.load_cert_chain(str(c), str(k))
    return ctx


def get(port: int, server_name: str | None, host: str | None = None, ctx: ssl.SSLContext | None = None,
        path: str = "/") -> tuple[int, bytes, str, str]:
    """One HTTPS request: (status, body, the certificate's first DNS name, TLS version)."""
    assert ctx is not None
    if server_name is None:
        ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=server_name) as s:
            cert = s.getpeercert()
            name = dict(cert["subjectAltName"])["DNS"] if cert else ""
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host or server_name}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            version = s.version() or ""
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body, name, version


def refused(port: int, server_name: str, ctx: ssl.SSLContext) -> str:
    """The handshake (or, TLS 1.3's client-certificate refusal, the first
    read) fails: the error's text."""
    try:
        status, body, _, _ = get(port, server_name, ctx=ctx)
    except (ssl.SSLError, ConnectionError, OSError) as exc:
        return str(exc)
    raise AssertionError(f"served {status} {body!r}")


def _write(d: Path, text: str, name: str = "config.yaml") -> None:
    tmp = d / f".{name}.tmp"
    tmp.write_text(text)
    tmp.replace(d / name)


@pytest.fixture
def two_certs(tmp_path: Path, pki: Pki) -> tuple[Path, str]:
    """vs a (Secret, sniDomains a), vs b (sslFiles, its domains), a wildcard
    one, and a plain one."""
    d = tmp_path / "config"
    d.mkdir()
    pki.b.write(d, "b")
    text = (secret("a-cert", pki.a) + secret("wild-cert", pki.wild)
            + vs("a", ["a.example.com"], "secretRef: {name: a-cert, namespace: gloo-system}\n"
                                          "sniDomains: [a.example.com]")
            + vs("b", ["b.example.com"], "sslFiles: {tlsCert: b.crt, tlsKey: b.key}\nsniDomains: [b.example.com]")
            + vs("wild", ["*.wild.test"], "secretRef: {name: wild-cert, namespace: gloo-system}\n"
                                          "sniDomains: ['*.wild.test']")
            + vs("plain", ["*"], None))
    _write(d, text)
    return d, text


def test_two_virtual_services_get_their_own_certificate_by_sni(tmp_path: Path, pki: Pki,
                                                               two_certs: tuple[Path, str]) -> None:
    d, _ = two_certs
    with TwistGateway(tmp_path, str(d), listen="tls:{port}:interface=127.0.0.1") as gw:
        ctx = _client_context(pki)
        assert get(gw.port, "a.example.com", ctx=ctx)[:3] == (200, b"a", "a.example.com")
        assert get(gw.port, "b.example.com", ctx=ctx)[:3] == (200, b"b", "b.example.com")
        # wildcard sniDomains: any name under it, one label or more
        assert get(gw.port, "x.wild.test", ctx=ctx)[:3] == (200, b"wild", "*.wild.test")
        # Host routes among the certificate's own virtual services only:
        # a's certificate, b's Host → no virtual service (never b's routes)
        assert get(gw.port, "a.example.com", host="b.example.com", ctx=ctx)[0] == 404
        # no certificate answers this name, and tls: has none of its own
        refused(gw.port, "nobody.example.com", ctx)


def test_plain_listener_does_not_serve_tls_virtual_services(tmp_path: Path, pki: Pki,
                                                             two_certs: tuple[Path, str]) -> None:
    d, _ = two_certs
    with TwistGateway(tmp_path, str(d)) as gw:
        with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: a.example.com\r\nConnection: close\r\n\r\n")
            data = s.makefile("rb").read()
        # a has sslConfig: on a plain listener the '*' virtual service answers
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"plain"), data
        gw.wait_log("are served on TLS listeners only, and none serves them")


def test_ssl_listener_keeps_its_own_certificate_for_other_names(tmp_path: Path, pki: Pki,
                                                                two_certs: tuple[Path, str]) -> None:
    d, _ = two_certs
    cert, key = pki.default.write(tmp_path, "default")
    with TwistGateway(tmp_path, str(d), listen=f"ssl:{{port}}:interface=127.0.0.1:privateKey={key}:certKey={cert}") as gw:
        ctx = _client_context(pki)
        assert get(gw.port, "default.test", ctx=ctx)[:3] == (200, b"plain", "default.test")
        assert get(gw.port, "a.example.com", ctx=ctx)[:3] == (200, b"a", "a.example.com")
        # no SNI at all (an IP address): the listener's certificate
        plain = _client_context(pki)
        plain.check_hostname = False
        assert get(gw.port, None, host="whatever", ctx=plain)[:3] == (200, b"plain", "default.test")


def test_client_certificates_required_and_verified(tmp_path: Path, pki: Pki) -> None:
    d = tmp_path / "config"
    d.mkdir()
    pki.b.write(d, "b")
    (d / "clients-ca.crt").write_bytes(pki.ca.pem)
    _write(d, secret("mtls", pki.a, ca=pki.ca.pem)
           + vs("a", ["a.example.com"], "secretRef: {name: mtls, namespace: gloo-system}\n"
                                         "sniDomains: [a.example.com]\n"
                                         "verifySubjectAltName: [client.example.com]")
           + vs("b", ["b.example.com"], "sslFiles: {tlsCert: b.crt, tlsKey: b.key, rootCa: clients-ca.crt}\n"
                                         "sniDomains: [b.example.com]\noneWayTls: true"))
    with TwistGateway(tmp_path, str(d), listen="tls:{port}:interface=127.0.0.1") as gw:
        assert get(gw.port, "a.example.com", ctx=_client_context(pki, pki.client, tmp_path))[:2] == (200, b"a")
        why = refused(gw.port, "a.example.com", _client_context(pki))
        assert "CERTIFICATE_REQUIRED" in why or "HANDSHAKE_FAILURE" in why or "EOF" in why, why
        refused(gw.port, "a.example.com", _client_context(pki, pki.stranger, tmp_path))
        refused(gw.port, "a.example.com", _client_context(pki, pki.wrong_san, tmp_path))
        # oneWayTls: no certificate is fine, one from another CA is not
        assert get(gw.port, "b.example.com", ctx=_client_context(pki))[:2] == (200, b"b")
        refused(gw.port, "b.example.com", _client_context(pki, pki.stranger, tmp_path))


def test_minimum_and_maximum_versions(tmp_path: Path, pki: Pki) -> None:
    d = tmp_path / "config"
    d.mkdir()
    _write(d, secret("a", pki.a) + secret("b", pki.b)
           + vs("a", ["a.example.com"], "secretRef: {name: a, namespace: gloo-system}\nsniDomains: [a.example.com]\n"
                                         "parameters: {minimumProtocolVersion: TLSv1_3}")
           + vs("b", ["b.example.com"], "secretRef: {name: b, namespace: gloo-system}\nsniDomains: [b.example.com]\n"
                                         "parameters: {maximumProtocolVersion: TLSv1_2,"
                                         " cipherSuites: [ECDHE-ECDSA-AES128-GCM-SHA256]}"))
    with TwistGateway(tmp_path, str(d), listen="tls:{port}:interface=127.0.0.1") as gw:
        assert get(gw.port, "a.example.com", ctx=_client_context(pki))[3] == "TLSv1.3"
        refused(gw.port, "a.example.com", _client_context(pki, max_version=ssl.TLSVersion.TLSv1_2))
        # a client that could do 1.3 gets 1.2 (the version is chosen with b's context)
        assert get(gw.port, "b.example.com", ctx=_client_context(pki))[3] == "TLSv1.2"
        ctx = _client_context(pki)
        ctx.set_ciphers("ECDHE-ECDSA-AES256-GCM-SHA384")
        refused(gw.port, "b.example.com", ctx)


def test_secret_rotation_and_a_broken_key_refused(tmp_path: Path, pki: Pki) -> None:
    d = tmp_path / "config"
    d.mkdir()
    vs_a = vs("a", ["a.example.com"], "secretRef: {name: a, namespace: gloo-system}\nsniDomains: [a.example.com]")
    _write(d, vs_a)
    _write(d, secret("a", pki.a), "secret.yaml")
    renewed = pki.ca.issue("a.example.com", dns=["a.example.com", "renewed.a.example.com"])
    with TwistGateway(tmp_path, str(d), listen="tls:{port}:interface=127.0.0.1", args=("--poll-interval", "0.2")) as gw:
        ctx = _client_context(pki)
        assert get(gw.port, "a.example.com", ctx=ctx)[:2] == (200, b"a")
        # a keep-alive connection opened before the rotation
        raw = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        old = ctx.wrap_socket(raw, server_hostname="a.example.com")
        first = old.getpeercert(binary_form=True)
        _write(d, secret("a", renewed), "secret.yaml")
        gw.wait_log('"generation": 2, "why": "files changed"', timeout=10)
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as r2, \
                ctx.wrap_socket(r2, server_hostname="a.example.com") as s2:
            sans = [value for _, value in s2.getpeercert()["subjectAltName"]]
            assert s2.getpeercert(binary_form=True) != first
        assert "renewed.a.example.com" in sans
        # the old connection: its certificate was replaced → 421, then closed
        old.sendall(b"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n")
        reply = old.recv(65536)
        assert reply.startswith(b"HTTP/1.1 421"), reply
        old.close()
        # a broken key: refused at load with file, line, field and reason; the last good one serves
        broken = f"apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\nmetadata: {{name: a, namespace: gloo-system}}\n" \
                 f"data:\n  tls.crt: {_b64(renewed.cert_pem)}\n  tls.key: {_b64(b'not a key')}\n"
        _write(d, broken, "secret.yaml")
        log = gw.wait_log("Configuration change rejected", timeout=10)
        problem = next(li for li in log.splitlines() if "Configuration change rejected" in li)
        assert "config.yaml: document 1, line 6: VirtualService gloo-system/a: spec.sslConfig.secretRef:" in problem
        assert "Secret gloo-system/a: tls.key: server key: not an unencrypted PEM private key" in problem
        assert get(gw.port, "a.example.com", ctx=_client_context(pki))[:2] == (200, b"a")


def test_openssl_s_client_and_curl(tmp_path: Path, pki: Pki, two_certs: tuple[Path, str]) -> None:
    d, _ = two_certs
    ca = tmp_path / "ca.crt"
    ca.write_bytes(pki.ca.pem)
    with TwistGateway(tmp_path, str(d), listen="tls:{port}:interface=127.0.0.1") as gw:
        out = subprocess.run([shutil.which("openssl") or "openssl", "s_client", "-connect", f"127.0.0.1:{gw.port}",
                              "-servername", "b.example.com", "-CAfile", str(ca), "-verify_return_error",
                              "-verify_hostname", "b.example.com", "-alpn", "http/1.1"],
                             input=b"", capture_output=True, timeout=20)
        text = out.stdout.decode(errors="replace")
        assert "subject=CN = b.example.com" in text or "subject=CN=b.example.com" in text, text
        assert "Verify return code: 0 (ok)" in text and "ALPN protocol: http/1.1" in text, text
        curl = subprocess.run(["curl", "-sS", "--cacert", str(ca), "--resolve", f"a.example.com:{gw.port}:127.0.0.1",
                               f"https://a.example.com:{gw.port}/"], capture_output=True, timeout=20)
        assert curl.returncode == 0 and curl.stdout == b"a", curl
        bad = subprocess.run(["curl", "-sS", "--cacert", str(ca), "--resolve",
                              f"nobody.example.com:{gw.port}:127.0.0.1", f"https://nobody.example.com:{gw.port}/"],
                             capture_output=True, timeout=20)
        assert bad.returncode != 0
