"""Gloo ``Gateway`` resources with ``ssl: true`` through a real ``twist
twistgw`` on loopback: Gloo's default ``gateway-proxy-ssl`` Gateway serving
the VirtualServices of Gloo's "Server TLS" guide by SNI (Python's ``ssl``,
``openssl s_client -servername``, ``curl --resolve``), the plain
``gateway-proxy`` beside it not serving them, a virtual service another
Gateway selects not reachable, client certificates required by one
virtual service's Secret, a certificate rotated by a reload (an old
keep-alive connection gets 421), the Gateway moved to another port and
switched between plain and TLS on its socket, and the PROXY protocol read
before the handshake.

Every virtual service answers with a direct response naming itself, so the
body says which one served the request and the certificate which one the
handshake picked. Blocking helpers (processes): plain synchronous tests.
"""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.process import TwistGateway, free_port
from test_gateway_kind_e2e import backend as echo_backend
from test_gateway_kind_e2e import eventually, listening, request, upstream
from test_vs_tls_sni import Pki, _client_context, get, refused

NS = "gloo-system"

#: a threaded HTTP server answering with the request headers it got (JSON)
backend = echo_backend


@pytest.fixture(scope="module")
def pki() -> Pki:
    return Pki()


def tls_secret(name: str, cert_pem: bytes, key_pem: bytes, ca: bytes | None = None) -> dict[str, Any]:
    """A ``kubernetes.io/tls`` Secret (with ``ca.crt``: client certificates required)."""
    data = {"tls.crt": cert_pem, "tls.key": key_pem, **({"ca.crt": ca} if ca is not None else {})}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": NS},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def vs(name: str, domains: list[str], ssl_config: dict[str, Any] | None = None,
       labels: dict[str, str] | None = None, forward: bool = False) -> dict[str, Any]:
    """A VirtualService answering its own name (or forwarding to ``echo``)."""
    action: dict[str, Any] = ({"routeAction": {"single": {"upstream": {"name": "echo", "namespace": NS}}}}
                              if forward else {"directResponseAction": {"status": 200, "body": name}})
    spec: dict[str, Any] = {"virtualHost": {"domains": domains,
                                            "routes": [{"matchers": [{"prefix": "/"}], **action}]}}
    if ssl_config is not None:
        spec = {"sslConfig": ssl_config, **spec}
    return {"apiVersion": "gateway.solo.io/v1", "kind": "VirtualService",
            "metadata": {"name": name, "namespace": NS, "labels": labels or {}}, "spec": spec}


def gloo_gateway(name: str, port: int, ssl_on: bool, http: dict[str, Any] | None = None,
                 **spec: Any) -> dict[str, Any]:
    """Gloo's default Gateways as an install writes them (``bindAddress`` on
    loopback here, Gloo's is ``'::'``)."""
    return {"apiVersion": "gateway.solo.io/v1", "kind": "Gateway", "metadata": {"name": name, "namespace": NS},
            "spec": {"bindAddress": "127.0.0.1", "bindPort": port, "httpGateway": http or {},
                     "proxyNames": ["gateway-proxy"], "ssl": ssl_on, "useProxyProto": False, **spec}}


def guide(pki: Pki, d: Path) -> list[dict[str, Any]]:
    """Gloo's Server TLS / SNI guide shapes: one certificate from a
    ``kubernetes.io/tls`` Secret, one from ``sslFiles``, each with its
    ``sniDomains``; and a virtual service without ``sslConfig``."""
    d.mkdir(exist_ok=True)
    pki.b.write(d, "b")
    return [tls_secret("a-cert", pki.a.cert_pem, pki.a.key_pem),
            vs("a", ["a.example.com"], {"secretRef": {"name": "a-cert", "namespace": NS},
                                        "sniDomains": ["a.example.com"]}),
            vs("b", ["b.example.com"], {"sslFiles": {"tlsCert": "b.crt", "tlsKey": "b.key"},
                                        "sniDomains": ["b.example.com"]}),
            vs("plain", ["*"])]


def write(d: Path, documents: list[dict[str, Any]]) -> str:
    d.mkdir(exist_ok=True)
    tmp = d / ".gw.yaml.tmp"
    tmp.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    tmp.replace(d / "gw.yaml")
    return str(d)


def process(tmp_path: Path, directory: str) -> TwistGateway:
    """``--listen`` (plain, every virtual service without ``sslConfig``) on a
    port of its own beside the Gateways' listeners; reloads every 0.1 s."""
    return TwistGateway(tmp_path, directory, args=("--poll-interval", "0.1"))


def test_gloo_default_gateways_serve_the_guide_by_sni(tmp_path: Path, pki: Pki) -> None:
    http_port, https_port = free_port(), free_port()
    d = tmp_path / "config"
    docs = guide(pki, d) + [gloo_gateway("gateway-proxy", http_port, False),
                            gloo_gateway("gateway-proxy-ssl", https_port, True)]
    ca = tmp_path / "ca.crt"
    ca.write_bytes(pki.ca.pem)
    with process(tmp_path, write(d, docs)) as gw:
        ctx = _client_context(pki)
        assert get(https_port, "a.example.com", ctx=ctx)[:3] == (200, b"a", "a.example.com")
        assert get(https_port, "b.example.com", ctx=ctx)[:3] == (200, b"b", "b.example.com")
        # Host routes among the chosen certificate's virtual services only
        assert get(https_port, "a.example.com", host="b.example.com", ctx=ctx)[0] == 404
        # the plain virtual service is not on the ssl Gateway: no certificate
        # answers its name (nor no name at all), so no handshake
        refused(https_port, "plain.example.com", ctx)
        no_sni = _client_context(pki)
        no_sni.check_hostname = False
        try:
            get(https_port, None, host="plain.example.com", ctx=no_sni)
            raise AssertionError("a connection without SNI was served")
        except (ssl.SSLError, ConnectionError, OSError):
            pass
        # the plain Gateway and --listen do not serve the sslConfig virtual services
        for port in (http_port, gw.port):
            assert request(port, "a.example.com")[2] == b"plain"
            assert request(port, "b.example.com")[2] == b"plain"
        # TLS clients that users run
        out = subprocess.run([shutil.which("openssl") or "openssl", "s_client", "-connect", f"127.0.0.1:{https_port}",
                              "-servername", "b.example.com", "-CAfile", str(ca), "-verify_return_error",
                              "-verify_hostname", "b.example.com", "-alpn", "http/1.1"],
                             input=b"", capture_output=True, timeout=20)
        text = out.stdout.decode(errors="replace")
        assert "subject=CN = b.example.com" in text or "subject=CN=b.example.com" in text, text
        assert "Verify return code: 0 (ok)" in text and "ALPN protocol: http/1.1" in text, text
        curl = subprocess.run(["curl", "-sS", "--cacert", str(ca), "--resolve",
                               f"a.example.com:{https_port}:127.0.0.1", f"https://a.example.com:{https_port}/"],
                              capture_output=True, timeout=20)
        assert curl.returncode == 0 and curl.stdout == b"a", curl
        # plain HTTP to the TLS listener: not a ClientHello, closed unanswered
        with socket.create_connection(("127.0.0.1", https_port), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n")
            assert s.recv(65536) == b""
        # the ssl Gateway serves every sslConfig virtual service: no warning
        assert "are served on TLS listeners only" not in gw.log_text()


def test_a_virtual_service_of_another_gateway_is_not_reachable(tmp_path: Path, pki: Pki) -> None:
    public, internal = free_port(), free_port()
    d = tmp_path / "config"
    inside = pki.ca.issue("i.example.com", dns=["i.example.com"])
    docs = [tls_secret("a-cert", pki.a.cert_pem, pki.a.key_pem),
            tls_secret("i-cert", inside.cert_pem, inside.key_pem),
            vs("a", ["a.example.com"], {"secretRef": {"name": "a-cert", "namespace": NS},
                                        "sniDomains": ["a.example.com"]}, labels={"gateway": "public"}),
            vs("int", ["i.example.com"], {"secretRef": {"name": "i-cert", "namespace": NS},
                                          "sniDomains": ["i.example.com"]}),
            gloo_gateway("public", public, True, {"virtualServiceSelector": {"gateway": "public"}}),
            gloo_gateway("internal", internal, True, {"virtualServices": [{"name": "int", "namespace": NS}]})]
    with process(tmp_path, write(d, docs)):
        ctx = _client_context(pki)
        assert get(public, "a.example.com", ctx=ctx)[:3] == (200, b"a", "a.example.com")
        assert get(internal, "i.example.com", ctx=ctx)[:3] == (200, b"int", "i.example.com")
        # int's certificate is not on the public Gateway: no handshake
        refused(public, "i.example.com", ctx)
        refused(internal, "a.example.com", ctx)
        # nor is int reachable through a's connection by naming it in Host
        assert get(public, "a.example.com", host="i.example.com", ctx=ctx)[0] == 404


def test_client_certificates_on_an_ssl_gateway(tmp_path: Path, pki: Pki) -> None:
    """A virtual service whose Secret has ``ca.crt`` (Gloo's mTLS guide):
    the Gateway asks for and verifies client certificates on its name only."""
    port = free_port()
    d = tmp_path / "config"
    docs = [tls_secret("a-mtls", pki.a.cert_pem, pki.a.key_pem, ca=pki.ca.pem),
            tls_secret("b-cert", pki.b.cert_pem, pki.b.key_pem),
            vs("a", ["a.example.com"], {"secretRef": {"name": "a-mtls", "namespace": NS},
                                        "sniDomains": ["a.example.com"],
                                        "verifySubjectAltName": ["client.example.com"]}),
            vs("b", ["b.example.com"], {"secretRef": {"name": "b-cert", "namespace": NS},
                                        "sniDomains": ["b.example.com"]}),
            gloo_gateway("gateway-proxy-ssl", port, True)]
    with process(tmp_path, write(d, docs)):
        assert get(port, "a.example.com", ctx=_client_context(pki, pki.client, tmp_path))[:2] == (200, b"a")
        refused(port, "a.example.com", _client_context(pki))
        refused(port, "a.example.com", _client_context(pki, pki.stranger, tmp_path))
        refused(port, "a.example.com", _client_context(pki, pki.wrong_san, tmp_path))
        # b asks for none; and a is not reachable through b's connection
        assert get(port, "b.example.com", ctx=_client_context(pki))[:2] == (200, b"b")
        assert get(port, "b.example.com", host="a.example.com", ctx=_client_context(pki))[0] == 404


def test_a_reload_rotates_the_certificate(tmp_path: Path, pki: Pki) -> None:
    port = free_port()
    d = tmp_path / "config"
    docs = guide(pki, d) + [gloo_gateway("gateway-proxy-ssl", port, True)]
    renewed = pki.ca.issue("a.example.com", dns=["a.example.com", "renewed.a.example.com"])
    with process(tmp_path, write(d, docs)) as gw:
        ctx = _client_context(pki)
        assert get(port, "a.example.com", ctx=ctx)[:2] == (200, b"a")
        # keep-alive connections opened before the rotation: a's and b's
        old_a = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                server_hostname="a.example.com")
        old_b = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                server_hostname="b.example.com")
        first = old_a.getpeercert(binary_form=True)
        docs[0] = tls_secret("a-cert", renewed.cert_pem, renewed.key_pem)
        write(d, docs)
        gw.wait_log('"generation": 2', timeout=10)
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                             server_hostname="a.example.com") as new:
            assert new.getpeercert(binary_form=True) != first
            sans = [value for _, value in new.getpeercert()["subjectAltName"]]
        assert "renewed.a.example.com" in sans
        # a's old connection: its certificate was replaced → 421, then closed
        old_a.sendall(b"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n")
        reply = old_a.recv(65536)
        assert reply.startswith(b"HTTP/1.1 421"), reply
        old_a.close()
        # b's certificate did not change: its connection keeps serving
        old_b.sendall(b"GET / HTTP/1.1\r\nHost: b.example.com\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := old_b.recv(65536):
            data += chunk
        old_b.close()
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"\r\n\r\nb"), data
        assert get(port, "a.example.com", ctx=ctx)[:2] == (200, b"a")


def test_the_ssl_gateway_moves_and_switches_on_its_socket(tmp_path: Path, pki: Pki) -> None:
    one, two = free_port(), free_port()
    d = tmp_path / "config"
    base = guide(pki, d)
    with process(tmp_path, write(d, base + [gloo_gateway("gateway-proxy-ssl", one, True)])):
        ctx = _client_context(pki)
        assert get(one, "a.example.com", ctx=ctx)[:2] == (200, b"a")
        write(d, base + [gloo_gateway("gateway-proxy-ssl", two, True)])  # moved
        eventually(lambda: listening(two) and not listening(one))
        assert get(two, "b.example.com", ctx=ctx)[:3] == (200, b"b", "b.example.com")
        # ssl: false on the same socket: plain HTTP, the virtual services without sslConfig
        write(d, base + [gloo_gateway("gateway-proxy-ssl", two, False)])
        eventually(lambda: _plain_body(two) == b"plain")
        assert request(two, "a.example.com")[2] == b"plain"
        write(d, base + [gloo_gateway("gateway-proxy-ssl", two, True)])  # and back
        eventually(lambda: _plain_body(two) is None)
        assert get(two, "a.example.com", ctx=ctx)[:3] == (200, b"a", "a.example.com")


def _plain_body(port: int) -> bytes | None:
    try:
        return request(port, "a.example.com")[2]
    except (OSError, http.client.HTTPException):
        return None


def test_proxy_protocol_header_before_the_handshake(tmp_path: Path, pki: Pki, backend: int) -> None:
    port = free_port()
    d = tmp_path / "config"
    docs = [upstream(backend), tls_secret("a-cert", pki.a.cert_pem, pki.a.key_pem),
            vs("a", ["a.example.com"], {"secretRef": {"name": "a-cert", "namespace": NS}}, forward=True),
            gloo_gateway("behind-lb", port, True, useProxyProto=True)]
    ctx = _client_context(pki)
    with process(tmp_path, write(d, docs)) as gw:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(b"PROXY TCP4 203.0.113.7 127.0.0.1 56324 %d\r\n" % port)
            with ctx.wrap_socket(raw, server_hostname="a.example.com") as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: a.example.com\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
        assert data.startswith(b"HTTP/1.1 200"), data
        seen = json.loads(data.split(b"\r\n\r\n", 1)[1])
        assert seen["x-forwarded-for"] == "203.0.113.7" and seen["x-forwarded-proto"] == "https"
        gw.wait_log('"client": "203.0.113.7"')
        # a TLS client without the header: its ClientHello is not a PROXY header, closed
        refused(port, "a.example.com", ctx)
        # issue 32: an address that is none never gets to the handshake (nor the client address)
        for bad in (b"PROXY TCP4 999.1.1.1 127.0.0.1 56324 %d\r\n" % port,
                    b"PROXY TCP4 " + b"7" * 60 + b" 127.0.0.1 1 2\r\n"):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                raw.sendall(bad)
                with pytest.raises((ssl.SSLError, OSError)):
                    with ctx.wrap_socket(raw, server_hostname="a.example.com") as s:
                        s.sendall(b"GET / HTTP/1.1\r\nHost: a.example.com\r\nConnection: close\r\n\r\n")
                        if not s.recv(65536):
                            raise OSError("closed")
        # a header in pieces (two segments, the first under 8 bytes) is still one header
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            header = b"PROXY TCP6 2001:db8::5 ::1 56324 %d\r\n" % port
            raw.sendall(header[:4])
            time.sleep(0.05)
            raw.sendall(header[4:])
            with ctx.wrap_socket(raw, server_hostname="a.example.com") as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: a.example.com\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
        assert json.loads(data.split(b"\r\n\r\n", 1)[1])["x-forwarded-for"] == "2001:db8::5"
