"""TLS to upstreams end to end: ``twist twistgw`` in front of a real nginx
serving HTTPS on loopback with certificates from a CA the test makes (Gloo's
upstream TLS guide: ``sslConfig`` with a root CA, SNI, a client certificate
from a ``kubernetes.io/tls`` Secret; ``sniAddr`` on a static host)."""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest_twisted

from support.http import http_request, sleep
from support.pki import TestCA
from test_core_twist import start_twist, stop_process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nginx_conf(d: Path, ports: dict[str, int]) -> str:
    return textwrap.dedent(f"""\
        pid {d}/nginx.pid;
        error_log {d}/error.log;
        events {{ worker_connections 64; }}
        http {{
          access_log off;
          ssl_protocols TLSv1.2 TLSv1.3;
          client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
          uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
          server {{
            listen 127.0.0.1:{ports['named']} ssl;
            ssl_certificate {d}/named.crt; ssl_certificate_key {d}/named.key;
            location / {{ return 200 "tls-ok $ssl_server_name $ssl_protocol $ssl_cipher"; }}
          }}
          server {{
            listen 127.0.0.1:{ports['nosan']} ssl;
            ssl_certificate {d}/nosan.crt; ssl_certificate_key {d}/nosan.key;
            location / {{ return 200 "no-san"; }}
          }}
          server {{
            listen 127.0.0.1:{ports['mtls']} ssl;
            ssl_certificate {d}/named.crt; ssl_certificate_key {d}/named.key;
            ssl_client_certificate {d}/ca.crt; ssl_verify_client on;
            location / {{ return 200 "mtls-ok $ssl_client_s_dn"; }}
          }}
        }}
        """)


def _upstream(name: str, port: int, ssl: str, host_extra: str = "") -> str:
    return textwrap.dedent(f"""\
        apiVersion: gloo.solo.io/v1
        kind: Upstream
        metadata: {{name: {name}, namespace: default}}
        spec:
          static:
            hosts: [{{addr: 127.0.0.1, port: {port}{host_extra}}}]
          sslConfig: {ssl}
        ---
        """)


def _config(ports: dict[str, int], client: Any, ca_pem: bytes) -> str:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    routes = "".join(f"    - matchers: [{{prefix: /{n}}}]\n      routeAction: {{single: {{upstream: {{name: {n}}}}}}}\n"
                     for n in ("good", "wrongca", "nosan", "wrongname", "sniaddr", "mtls", "mtlsfiles", "nocert",
                               "caonly", "onlyca-mtls"))
    return (
        _upstream("good", ports["named"], "{sni: backend.test, sslFiles: {rootCa: ca.crt}}")
        + _upstream("wrongca", ports["named"], "{sni: backend.test, sslFiles: {rootCa: other-ca.crt}}")
        + _upstream("nosan", ports["nosan"], "{sni: backend.test, sslFiles: {rootCa: ca.crt}}")
        + _upstream("wrongname", ports["named"],
                    "{sni: backend.test, verifySubjectAltName: [other.test], sslFiles: {rootCa: ca.crt}}")
        + _upstream("sniaddr", ports["named"], "{sslFiles: {rootCa: ca.crt},"
                    " parameters: {minimumProtocolVersion: TLSv1_2, maximumProtocolVersion: TLSv1_2,"
                    " cipherSuites: [ECDHE-ECDSA-AES128-GCM-SHA256]}}",
                    ", sniAddr: backend.test")
        + _upstream("mtls", ports["mtls"], "{sni: backend.test, secretRef: {name: client-tls}}")
        + _upstream("mtlsfiles", ports["mtls"],
                    "{sni: backend.test, sslFiles: {tlsCert: client.crt, tlsKey: client.key, rootCa: ca.crt}}")
        + _upstream("nocert", ports["mtls"], "{sni: backend.test, sslFiles: {rootCa: ca.crt}}")
        + _upstream("caonly", ports["named"], "{sni: backend.test, secretRef: {name: ca-only}}")
        + _upstream("onlyca-mtls", ports["mtls"], "{sni: backend.test, secretRef: {name: ca-only}}")
        + textwrap.dedent(f"""\
            apiVersion: v1
            kind: Secret
            metadata: {{name: client-tls, namespace: default}}
            type: kubernetes.io/tls
            data:
              tls.crt: {b64(client.cert_pem)}
              tls.key: {b64(client.key_pem)}
              ca.crt: {b64(ca_pem)}
            ---
            # what `glooctl create secret tls ca-only --rootca ca.pem` writes: Kubernetes
            # requires tls.crt and tls.key in a kubernetes.io/tls Secret, so they are empty
            apiVersion: v1
            kind: Secret
            metadata: {{name: ca-only, namespace: default}}
            type: kubernetes.io/tls
            data:
              tls.crt: ""
              tls.key: ""
              ca.crt: {b64(ca_pem)}
            ---
            apiVersion: gateway.solo.io/v1
            kind: VirtualService
            metadata: {{name: app, namespace: default}}
            spec:
              virtualHost:
                domains: ["*"]
                routes:
            """) + routes)


async def _start_nginx(d: Path, ports: dict[str, int]) -> subprocess.Popen[bytes]:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    (d / "nginx.conf").write_text(_nginx_conf(d, ports))
    proc = subprocess.Popen([nginx, "-p", str(d), "-c", str(d / "nginx.conf"), "-g", "daemon off; master_process off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    for _ in range(100):
        assert proc.poll() is None, (d / "error.log").read_text() if (d / "error.log").exists() else "nginx died"
        try:
            socket.create_connection(("127.0.0.1", ports["mtls"]), timeout=1).close()
            return proc
        except OSError:
            await sleep(0.05)
    raise AssertionError("nginx never listened")


@pytest_twisted.ensureDeferred
async def test_upstream_tls_against_nginx(tmp_path: Path, config_dir: Any) -> None:
    ca, other = TestCA(), TestCA("another CA")
    nd = tmp_path / "nginx"
    nd.mkdir()
    ca.issue("backend.test", dns=["backend.test"]).write(nd, "named")
    ca.issue("backend.test").write(nd, "nosan")  # a CN, no subjectAltName: must never pass
    (nd / "ca.crt").write_bytes(ca.pem)
    client = ca.issue("gateway.test", dns=["gateway.test"], client=True)
    ports = {k: _free_port() for k in ("named", "nosan", "mtls")}
    nginx = await _start_nginx(nd, ports)
    d = config_dir(_config(ports, client, ca.pem))
    (Path(d) / "ca.crt").write_bytes(ca.pem)  # sslFiles are relative to the configuration directory
    (Path(d) / "other-ca.crt").write_bytes(other.pem)
    client.write(Path(d), "client")
    proc, port, log_path, log = await start_twist(tmp_path, d)
    try:
        async def get(path: str) -> Any:
            return await http_request("GET", f"http://127.0.0.1:{port}{path}")

        good = await get("/good")
        assert good.status == 200
        assert good.body.startswith(b"tls-ok backend.test TLSv1.3 ")  # SNI sent: backend.test
        sniaddr = await get("/sniaddr")
        assert sniaddr.status == 200
        # the host's sniAddr as SNI; the version and cipher from sslConfig.parameters
        assert sniaddr.body == b"tls-ok backend.test TLSv1.2 ECDHE-ECDSA-AES128-GCM-SHA256"
        again = await get("/good")  # a pooled TLS connection is reused
        assert again.status == 200
        for path in ("/wrongca", "/nosan", "/wrongname"):
            refused = await get(path)
            assert refused.status == 503, path
            assert refused.body.startswith(b"upstream connect error or disconnect/reset before headers."
                                           b" reset reason: connection failure, transport failure reason: TLS"), path
        mtls = await get("/mtls")
        assert mtls.status == 200
        assert mtls.body == b"mtls-ok CN=gateway.test"  # nginx verified the client certificate from the Secret
        files = await get("/mtlsfiles")  # the same client certificate from sslFiles tlsCert/tlsKey
        assert (files.status, files.body) == (200, b"mtls-ok CN=gateway.test")
        nocert = await get("/nocert")
        assert nocert.status == 400  # nginx: "No required SSL certificate was sent"
        assert b"mtls-ok" not in nocert.body
        # a CA-only Secret (empty tls.crt and tls.key): the CA verifies nginx, no client certificate
        caonly = await get("/caonly")
        assert (caonly.status, caonly.body[:21]) == (200, b"tls-ok backend.test T"), caonly.body
        caonlymtls = await get("/onlyca-mtls")
        assert caonlymtls.status == 400, caonlymtls.body  # no client certificate sent: nginx asks for one
        assert b"mtls-ok" not in caonlymtls.body
        text = log_path.read_text()
        assert "not trusted" in text  # the wrong CA, logged with its reason
        assert "it has no DNS or IP subjectAltName" in text  # the SAN-less certificate
        assert "it names backend.test, not other.test" in text  # verifySubjectAltName
    finally:
        await stop_process(proc)
        log.close()
        nginx.terminate()
        nginx.wait()


@pytest_twisted.ensureDeferred
async def test_upstream_tls_problems_are_refused_at_load(tmp_path: Path, config_dir: Any) -> None:
    """A missing rootCa file or Secret, an unknown TLS version: the
    configuration is refused with the field (never served as plain HTTP)."""
    from twistgw.config.errors import ConfigError
    from twistgw.config.loader import load_directory

    d = config_dir(
        _upstream("files", 1, "{sslFiles: {rootCa: missing.crt}}")
        + _upstream("secret", 1, "{secretRef: {name: nowhere}}")
        + _upstream("version", 1, "{parameters: {minimumProtocolVersion: TLSv9}}")
        + "apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: app}\nspec:\n"
          "  virtualHost:\n    domains: ['*']\n    routes:\n"
          "    - matchers: [{prefix: /}]\n      routeAction: {single: {upstream: {name: files}}}\n")
    try:
        load_directory(d)
    except ConfigError as exc:
        text = str(exc)
    else:
        raise AssertionError("loaded")
    assert "missing.crt" in text and "cannot read" in text
    assert "nowhere" in text
    assert "TLSv9" in text
