"""Bodies both ways over an upstream TLS connection, end to end through
``twist twistgw``: the engine encrypts and sends each write at once
(``engine/upstream/memtls.py``, through ``engine/wire.write``) rather than on the next reactor turn, so
what must hold is that large request bodies (Content-Length and chunked,
several socket writes each), large responses and keep-alive reuse all arrive
whole and in order. The backend is Twisted's web server over TLS with a
certificate from a CA the test makes."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import reactor, ssl
from twisted.web import resource, server

from support.http import ChunkedBody, http_request
from support.pki import TestCA
from test_core_twist import start_twist, stop_process


class _Digest(resource.Resource):
    """POST: the body's length and SHA-256; GET /big: 2 MiB of a pattern."""

    isLeaf = True

    def render_POST(self, request: Any) -> bytes:
        body = request.content.read()
        return b"%d %s" % (len(body), hashlib.sha256(body).hexdigest().encode())

    def render_GET(self, request: Any) -> bytes:
        return bytes(range(256)) * 8192


@pytest_twisted.ensureDeferred
async def test_bodies_over_upstream_tls(tmp_path: Path, config_dir: Any) -> None:
    ca = TestCA()
    leaf = ca.issue("backend.test", dns=["backend.test"])
    cert = ssl.PrivateCertificate.loadPEM(leaf.key_pem + leaf.cert_pem)
    site = server.Site(_Digest())
    listening = reactor.listenSSL(0, site, cert.options(), interface="127.0.0.1")
    d = config_dir(f"""\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: tls, namespace: default}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: {listening.getHost().port}}}]}}
  sslConfig: {{sni: backend.test, sslFiles: {{rootCa: ca.crt}}}}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: app, namespace: default}}
spec:
  virtualHost:
    domains: ["*"]
    routes:
    - matchers: [{{prefix: /}}]
      routeAction: {{single: {{upstream: {{name: tls}}}}}}
""")
    (Path(d) / "ca.crt").write_bytes(ca.pem)
    proc, port, log_path, log = await start_twist(tmp_path, d)
    try:
        url = f"http://127.0.0.1:{port}"
        for size in (0, 5, 300_000, 3 * 1024 * 1024):
            body = bytes((i * 7) % 251 for i in range(size))
            got = await http_request("POST", url + "/digest", body=body, timeout=30)
            assert got.body == b"%d %s" % (size, hashlib.sha256(body).hexdigest().encode()), (size, got.body[:100])
        chunks = [bytes([65 + i % 26]) * 70_000 for i in range(20)]
        whole = b"".join(chunks)
        got = await http_request("POST", url + "/chunked", body=ChunkedBody(chunks), timeout=30)
        assert got.body == b"%d %s" % (len(whole), hashlib.sha256(whole).hexdigest().encode())
        for _ in range(3):  # the pooled TLS connection, reused
            big = await http_request("GET", url + "/big", timeout=30)
            assert (big.status, big.body) == (200, bytes(range(256)) * 8192)
    finally:
        await stop_process(proc)
        log.close()
        await listening.stopListening()  # the gateway is gone: its connections to the backend closed with it
