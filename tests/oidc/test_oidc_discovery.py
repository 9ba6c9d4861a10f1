"""The provider's discovery document over real HTTP on loopback (a
twisted.web server standing in for the provider's well-known endpoint, the
gateway's own treq client): read once, re-read when ``discoveryPollInterval``
has passed (never before), the last good document kept when a re-read fails
(with backoff), and ``discoveryOverride`` applied to every version.

The clock that decides when a document is stale is the test's, so nothing
here waits for a poll interval. pytest-twisted style (a real reactor).
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest
import pytest_twisted
from twisted.internet import reactor as _reactor
from twisted.web import resource, server

from twistgw_oidc._http import Client
from twistgw_oidc._options import Override
from twistgw_oidc._provider import Discovery

reactor: Any = _reactor


class WellKnown(resource.Resource):
    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.doc: dict[str, Any] = {}
        self.status = 200
        self.reads = 0

    def render_GET(self, request: Any) -> bytes:  # noqa: N802 (twisted.web's name)
        self.reads += 1
        request.setResponseCode(self.status)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(self.doc).encode()


@pytest.fixture
def provider() -> Iterator[tuple[WellKnown, str]]:
    well_known = WellKnown()
    port = reactor.listenTCP(0, server.Site(well_known), interface="127.0.0.1")
    issuer = f"http://127.0.0.1:{port.getHost().port}"
    well_known.doc = document(issuer, "v1")
    yield well_known, issuer
    port.stopListening()


def document(issuer: str, version: str) -> dict[str, Any]:
    return {"issuer": issuer, "authorization_endpoint": f"{issuer}/auth", "token_endpoint": f"{issuer}/token",
            "jwks_uri": f"{issuer}/jwks", "end_session_endpoint": f"{issuer}/logout-{version}"}


async def settle(discovery: Discovery) -> None:
    inflight = discovery._inflight
    if inflight is not None:
        await inflight


@pytest_twisted.ensureDeferred
async def test_polled_every_interval_last_good_kept_override_applied(provider: tuple[WellKnown, str]) -> None:
    well_known, issuer = provider
    now = [1000.0]
    client = Client(reactor)
    override = Override((("authorization_endpoint", "https://login.example.com/authorize"),))
    discovery = Discovery(issuer, override, poll=60.0, refetch=60.0, timeout=2.0, client=lambda: client,
                          clock=lambda: now[0])
    try:
        doc = await discovery.get()
        assert doc is not None and well_known.reads == 1
        assert doc["end_session_endpoint"] == f"{issuer}/logout-v1"
        assert doc["authorization_endpoint"] == "https://login.example.com/authorize"  # discoveryOverride
        # within the interval: the document in hand, nothing asked
        well_known.doc = document(issuer, "v2")
        now[0] += 59.0
        assert discovery.doc_now() is doc
        await settle(discovery)
        assert well_known.reads == 1
        # past it: the old document answers at once, a re-read starts behind it
        now[0] += 2.0
        assert discovery.doc_now() is doc
        await settle(discovery)
        assert well_known.reads == 2
        fresh = discovery.doc_now()
        assert fresh is not None and fresh["end_session_endpoint"] == f"{issuer}/logout-v2"
        assert fresh["authorization_endpoint"] == "https://login.example.com/authorize"
        # a failed re-read keeps the last good document, and backs off
        well_known.status = 500
        now[0] += 61.0
        assert discovery.doc_now() is fresh
        await settle(discovery)
        assert well_known.reads == 3 and discovery.doc_now() is fresh
        assert discovery.last_error == "HTTP status 500"
        await settle(discovery)
        assert well_known.reads == 3  # within the backoff: not asked again
        # once the provider answers again (and the backoff has passed), it is read again
        well_known.status = 200
        well_known.doc = document(issuer, "v3")
        now[0] += 2.0
        discovery.doc_now()
        await settle(discovery)
        assert well_known.reads == 4
        again = discovery.doc_now()
        assert again is not None and again["end_session_endpoint"] == f"{issuer}/logout-v3"
        assert discovery.last_error is None
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_a_document_for_another_issuer_is_never_taken(provider: tuple[WellKnown, str]) -> None:
    well_known, issuer = provider
    well_known.doc = document("https://evil.example.com", "v1")
    client = Client(reactor)
    discovery = Discovery(issuer, Override(), poll=60.0, refetch=60.0, timeout=2.0, client=lambda: client,
                          clock=lambda: 0.0)
    try:
        assert await discovery.get() is None
        assert discovery.last_error is not None and "is not" in discovery.last_error
    finally:
        await client.close()


class TokenEndpoint(resource.Resource):
    """Records what the gateway sends to a token endpoint."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[bytes | None, dict[bytes, list[bytes]]]] = []

    def render_POST(self, request: Any) -> bytes:  # noqa: N802 (twisted.web's name)
        self.requests.append((request.getHeader(b"authorization"), dict(request.args)))
        request.setHeader(b"content-type", b"application/json")
        return json.dumps({"error": "invalid_grant"}).encode()


@pytest_twisted.ensureDeferred
async def test_discovery_override_fields_are_what_the_login_uses(provider: tuple[WellKnown, str]) -> None:
    """discoveryOverride as compiled from its fields (authMethods, authEndpoint,
    tokenEndpoint, jwksUri, endSessionEndpoint) over the document the
    provider serves: the token request goes to the overriding endpoint with
    the overriding client authentication (client_secret_post, where the
    document says client_secret_basic)."""
    from test_oidc_units import compile_oidc_checker
    from twistgw_oidc._login import exchange

    well_known, issuer = provider
    well_known.doc["token_endpoint_auth_methods_supported"] = ["client_secret_basic"]
    token = TokenEndpoint()
    port = reactor.listenTCP(0, server.Site(token), interface="127.0.0.1")
    other = f"http://127.0.0.1:{port.getHost().port}"
    checker = compile_oidc_checker(issuerUrl=issuer, discoveryOverride={
        "authMethods": ["client_secret_post"], "tokenEndpoint": f"{other}/token", "jwksUri": f"{other}/keys",
        "endSessionEndpoint": f"{other}/end", "authEndpoint": f"{other}/login"})
    try:
        doc = await checker.provider.get()
        assert doc is not None and well_known.reads == 1
        assert (doc["token_endpoint"], doc["jwks_uri"], doc["end_session_endpoint"]) == (
            f"{other}/token", f"{other}/keys", f"{other}/end")
        assert doc["token_endpoint_auth_methods_supported"] == ["client_secret_post"]
        assert doc["authorization_endpoint"] == f"{other}/login"
        assert doc["issuer"] == issuer  # not overridden: the provider's
        answer = await exchange(checker, doc, {"grant_type": "authorization_code", "code": "c1"})
        assert answer.status == 200
        [(authorization, form)] = token.requests
        assert authorization is None
        assert form[b"client_id"] == [b"app"] and form[b"client_secret"] == [b"s3cret"]
        assert form[b"code"] == [b"c1"]
    finally:
        await port.stopListening()
        await checker.runtime.client().close()
