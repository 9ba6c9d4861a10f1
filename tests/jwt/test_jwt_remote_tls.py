"""Remote key sets over TLS (issue 23, item 17): an ``https`` URL is fetched
over TLS, the certificate checked against the URL's host with the system's
CAs (here a private CA given by ``SSL_CERT_FILE``, as an operator would).
A certificate without that name as a subjectAltName, or from a CA nobody
trusts, fails the fetch: no request reaches the key-set server, the fetch is
logged with the reason, and a token is answered 401 ``Jwks remote fetch is
failed`` (docs/jwt.md)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import pytest_twisted
import yaml
from jwt_helpers import ISSUER, ClockedJwtPlugin, KeySetServer, bearer, config, jwks, token
from twisted.internet import defer
from twisted.logger import globalLogPublisher

from support.http import http_request
from support.pki import Issued, TestCA
from twistgw.sdk.testing import ChainTester

_unique = itertools.count()
HOST = "auth.example.com"


@pytest.fixture(scope="module")
def ca() -> TestCA:
    return TestCA()


@pytest.fixture
def trusted(ca: TestCA, tmp_path: Any, monkeypatch: Any) -> TestCA:
    """The private CA is in the system trust (``SSL_CERT_FILE``)."""
    (tmp_path / "ca.pem").write_bytes(ca.pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    return ca


@pytest.fixture
def tls_server() -> Any:
    started: list[KeySetServer] = []

    def start(issued: Issued) -> KeySetServer:
        s = KeySetServer(tls=issued)
        s.resource.set_keys(jwks(("rsa", 0, "k0")))
        started.append(s)
        return s

    yield start
    for s in started:
        pytest_twisted.blockon(defer.ensureDeferred(s.stop()))


@pytest.fixture
def logged() -> Any:
    lines: list[str] = []

    def observe(event: dict[str, Any]) -> None:
        from twisted.logger import formatEvent

        lines.append(formatEvent(event))

    globalLogPublisher.addObserver(observe)
    yield lines
    globalLogPublisher.removeObserver(observe)


def _provider(port: int, scheme: str = "https") -> str:
    url = f"{scheme}://{HOST}/keys-{next(_unique)}.json"
    provider = {"issuer": ISSUER, "jwks": {"remote": {
        "upstreamRef": {"name": "jwks", "namespace": "default"}, "url": url, "timeout": "3s"}}}
    return config({"providers": {"main": provider}}, upstreams={"jwks": port})


async def _status(t: ChainTester, tok: str) -> tuple[int, bytes]:
    r = await t.request("GET", "http://api.example.com/api/pets", headers=bearer(tok))
    return r.status, r.body


def _tester(text: str) -> ChainTester:
    return ChainTester.from_yaml(text, plugins=[("jwt", ClockedJwtPlugin)], load_entry_points=False)


@pytest_twisted.ensureDeferred
async def test_an_https_key_set_is_fetched_over_tls(trusted: TestCA, tls_server: Any) -> None:
    s = tls_server(trusted.issue(HOST, dns=[HOST]))
    t = _tester(_provider(s.port))
    assert await _status(t, token(kid="k0")) == (200, b"")
    assert s.resource.requests[0][1] == HOST.encode()


@pytest_twisted.ensureDeferred
async def test_an_http_url_is_not_tls(trusted: TestCA, tls_server: Any) -> None:
    """The scheme decides: plain HTTP to a TLS server gets no keys."""
    s = tls_server(trusted.issue(HOST, dns=[HOST]))
    t = _tester(_provider(s.port, scheme="http"))
    assert await _status(t, token(kid="k0")) == (401, b"Jwks remote fetch is failed")


@pytest.mark.parametrize("issue, reason", [
    (lambda ca: ca.issue(HOST), "no DNS or IP subjectAltName"),          # CN only, the very host
    (lambda ca: ca.issue("other", dns=["other.example.com"]), "names other.example.com, not auth.example.com"),
    (lambda ca: TestCA("stranger").issue(HOST, dns=[HOST]), "not trusted"),
])
@pytest_twisted.ensureDeferred
async def test_a_refused_certificate_fails_the_fetch(trusted: TestCA, tls_server: Any, logged: list[str],
                                                     issue: Any, reason: str) -> None:
    s = tls_server(issue(trusted))
    t = _tester(_provider(s.port))
    assert await _status(t, token(kid="k0")) == (401, b"Jwks remote fetch is failed")
    assert s.resource.requests == [], "the request went to a refused server"
    failed = [line for line in logged if "Fetching key set" in line]
    assert failed and "TLS peer refused" in failed[0] and reason in failed[0], logged


@pytest_twisted.ensureDeferred
async def test_through_the_gateway(trusted: TestCA, tls_server: Any, logged: list[str], backend: Any,
                                   config_dir: Any, gateway: Any) -> None:
    """A running gateway: 200 with keys from a good server; with a SAN-less
    certificate 401, and the log says why."""
    good = tls_server(trusted.issue(HOST, dns=[HOST]))
    bad = tls_server(trusted.issue(HOST))
    for server, expected in ((good, 200), (bad, 401)):
        docs = list(yaml.safe_load_all(_provider(server.port)))
        for doc in docs:
            if doc["kind"] == "Upstream" and doc["metadata"]["name"] == "backend":
                doc["spec"]["static"]["hosts"] = [{"addr": "127.0.0.1", "port": backend.port}]
        gw = gateway(config_dir(yaml.safe_dump_all(docs)), plugins=[("jwt", ClockedJwtPlugin)])
        r = await http_request("GET", gw.url("/api/pets"),
                               headers={"Host": "api.example.com", **bearer(token(kid="k0"))})
        assert r.status == expected, r
    assert len(good.resource.requests) >= 1 and bad.resource.requests == []
    assert any("TLS peer refused" in line and "no DNS or IP subjectAltName" in line for line in logged), logged
