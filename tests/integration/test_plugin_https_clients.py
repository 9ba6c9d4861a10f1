"""The HTTP clients of the auth plugins verify an https server by name
(issue 23, item 17): the pass-through / custom-auth client
(``twistgw_authtypes``) and the identity-provider client (``twistgw_oidc``:
discovery, key sets, token, introspection, userinfo) refuse a certificate
from a trusted CA that has no subjectAltName, and one for another name;
a certificate naming the host is accepted. The trusted CA reaches them the
way it reaches a production gateway: the system store, here
``SSL_CERT_FILE``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor, ssl
from twisted.web import resource, server
from twisted.web.http_headers import Headers as TxHeaders

from support.pki import TestCA


class _Hello(resource.Resource):
    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        return b"hello"

    def render_POST(self, request: Any) -> bytes:
        return b"hello"


@pytest.fixture
def servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Three https servers on loopback: the right SAN, no SAN, another name."""
    ca = TestCA()
    (tmp_path / "ca.pem").write_bytes(ca.pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    ports = {}
    for kind, issued in (("good", ca.issue("x", ips=["127.0.0.1"])), ("no-san", ca.issue("127.0.0.1")),
                         ("other-name", ca.issue("x", dns=["evil.example.org"]))):
        options = ssl.PrivateCertificate.loadPEM(issued.key_pem + issued.cert_pem).options()
        ports[kind] = reactor.listenSSL(0, server.Site(_Hello()), options,  # type: ignore[attr-defined]
                                        interface="127.0.0.1")
    yield {kind: f"https://127.0.0.1:{p.getHost().port}/" for kind, p in ports.items()}
    for p in ports.values():
        pytest_twisted.blockon(p.stopListening())


@pytest_twisted.ensureDeferred
async def test_pass_through_client_verifies_the_service_by_name(servers: Any) -> None:
    from twistgw_authtypes._http import AuthHttpClient, CallFailed

    client = AuthHttpClient(reactor)
    try:
        reply = await client.call(b"POST", servers["good"].encode(), TxHeaders(), b"{}", 5.0)
        assert reply.status == 200
        for kind in ("no-san", "other-name"):
            with pytest.raises(CallFailed):
                await client.call(b"POST", servers[kind].encode(), TxHeaders(), b"{}", 5.0)
    finally:
        await client.pool.closeCachedConnections()


@pytest_twisted.ensureDeferred
async def test_identity_provider_client_verifies_the_provider_by_name(servers: Any) -> None:
    from twistgw_oidc._http import CallFailed, Client

    client = Client(reactor)
    try:
        answer = await client.call("GET", servers["good"], 5.0)
        assert answer.status == 200 and answer.body == b"hello"
        for kind in ("no-san", "other-name"):
            with pytest.raises(CallFailed):
                await client.call("GET", servers[kind], 5.0)
    finally:
        await client.pool.closeCachedConnections()
