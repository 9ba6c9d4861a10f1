"""``sdk.HttpClient``, the one client of side calls (docs/plugins.md, "Side
calls"), against real loopback servers: the body bound, each deadline's
phase, the calls in flight, connection reuse, redirects, TLS verified by
name, and an unreachable server."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, protocol, reactor, ssl
from twisted.web import resource, server

from support.http import sleep
from support.pki import TestCA
from support.ports import free_port
from twistgw import sdk


class _Site(resource.Resource):
    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[bytes, bytes, bytes | None]] = []
        self.held: list[Any] = []

    def render(self, request: Any) -> Any:
        path = request.path
        self.seen.append((request.method, path, request.getHeader(b"authorization")))
        if path == b"/big":
            return b"x" * 5000
        if path.startswith(b"/redirect"):
            request.setResponseCode(int(path.rsplit(b"/", 1)[1]))
            request.setHeader(b"location", b"/hello")
            return b""
        if path == b"/hold":  # never answers
            self.held.append(request)
            return server.NOT_DONE_YET
        if path == b"/trickle":  # the head, then a body that never ends
            request.setHeader(b"content-length", b"100")
            request.write(b"x")
            self.held.append(request)
            return server.NOT_DONE_YET
        if path == b"/slow":  # answered after 0.2 s
            reactor.callLater(0.2, lambda: (request.write(b"slow"), request.finish()))  # type: ignore[attr-defined]
            return server.NOT_DONE_YET
        return b"hello " + request.method


@pytest.fixture
def site() -> Any:
    root = _Site()
    port = reactor.listenTCP(0, server.Site(root), interface="127.0.0.1")  # type: ignore[attr-defined]
    root.url = f"http://127.0.0.1:{port.getHost().port}"  # type: ignore[attr-defined]
    yield root
    for request in root.held:
        if not request.finished and request.channel is not None:
            request.channel.transport.loseConnection()
    pytest_twisted.blockon(port.stopListening())


async def _closed(client: sdk.HttpClient) -> None:
    await client.close()


@pytest_twisted.ensureDeferred
async def test_an_answer_is_read_whole_and_the_body_bounded(site: Any) -> None:
    client = sdk.HttpClient(reactor, max_body=4096)
    try:
        answer = await client.request("GET", site.url + "/hello")
        assert (answer.status, answer.body) == (200, b"hello GET")
        with pytest.raises(sdk.HttpBodyTooLarge) as caught:
            await client.request("GET", site.url + "/big")
        assert caught.value.limit == 4096
        assert (await client.request("GET", site.url + "/big", max_body=5000)).body == b"x" * 5000
        posted = await client.request("POST", site.url + "/hello", form={"a": "b"})
        assert posted.body == b"hello POST"
    finally:
        await _closed(client)


@pytest_twisted.ensureDeferred
async def test_the_total_deadline_names_the_phase(site: Any) -> None:
    client = sdk.HttpClient(reactor, timeout=0.3)
    try:
        with pytest.raises(sdk.HttpTimeout) as head:
            await client.request("GET", site.url + "/hold")
        assert (head.value.limit, head.value.phase) == ("total", "head")
        with pytest.raises(sdk.HttpTimeout) as body:
            await client.request("GET", site.url + "/trickle")
        assert (body.value.limit, body.value.phase) == ("total", "body")
        assert "0.3s" in str(body.value) and "/trickle" in str(body.value)
    finally:
        await _closed(client)


@pytest_twisted.ensureDeferred
async def test_the_head_deadline_runs_from_the_request_written(site: Any) -> None:
    client = sdk.HttpClient(reactor, timeout=5.0, head_timeout=0.2)
    try:
        with pytest.raises(sdk.HttpTimeout) as caught:
            await client.request("GET", site.url + "/hold")
        assert (caught.value.limit, caught.value.phase) == ("head", "head")
        # a head in time, a body that then never ends: the total deadline's
        with pytest.raises(sdk.HttpTimeout) as body:
            await client.request("GET", site.url + "/trickle", timeout=0.5)
        assert (body.value.limit, body.value.phase) == ("total", "body")
    finally:
        await _closed(client)


@pytest_twisted.ensureDeferred
async def test_the_connect_deadline() -> None:
    # a listener whose accept queue is full: the kernel drops further SYNs
    listener = socket.socket()
    listener.bind(("127.0.0.1", free_port()))
    listener.listen(0)
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
        fillers.append(filler)
    await sleep(0.1)
    client = sdk.HttpClient(reactor, connect_timeout=0.3, timeout=5.0)
    try:
        with pytest.raises(sdk.HttpTimeout) as caught:
            await client.request("GET", "http://127.0.0.1:%d/" % listener.getsockname()[1])
        assert (caught.value.limit, caught.value.phase) == ("connect", "connect")
        assert client.connections == 0
    finally:
        await _closed(client)
        for s in [*fillers, listener]:
            s.close()


@pytest_twisted.ensureDeferred
async def test_calls_beyond_the_slots_wait_and_can_time_out_waiting(site: Any) -> None:
    client = sdk.HttpClient(reactor, max_in_flight=1, timeout=2.0)
    try:
        first = defer.ensureDeferred(client.request("GET", site.url + "/slow"))
        second = defer.ensureDeferred(client.request("GET", site.url + "/hello"))
        await sleep(0.05)
        assert client.in_flight == 1 and [p for _, p, _ in site.seen] == [b"/slow"]
        assert (await first).body == b"slow" and (await second).body == b"hello GET"
        held = defer.ensureDeferred(client.request("GET", site.url + "/hold", timeout=0.3))
        with pytest.raises(sdk.HttpTimeout) as caught:
            await client.request("GET", site.url + "/hello", timeout=0.1)
        assert caught.value.phase == "slot"
        with pytest.raises(sdk.HttpTimeout):
            await held
        assert client.in_flight == 0
    finally:
        await _closed(client)


@pytest_twisted.ensureDeferred
async def test_connections_are_reused_and_counted(site: Any) -> None:
    client = sdk.HttpClient(reactor)
    try:
        for _ in range(3):
            assert (await client.request("GET", site.url + "/hello")).status == 200
        assert client.stats() == {"connections": 1, "calls": 3, "in_flight": 0}
    finally:
        await _closed(client)
    once = sdk.HttpClient(reactor, persistent=False)
    for _ in range(2):
        await once.request("GET", site.url + "/hello")
    assert once.connections == 2


@pytest_twisted.ensureDeferred
async def test_redirects_are_answers_unless_followed(site: Any) -> None:
    client = sdk.HttpClient(reactor)
    try:
        answer = await client.request("GET", site.url + "/redirect/302")
        assert answer.status == 302 and answer.header(b"location") == b"/hello"
        followed = await client.request("POST", site.url + "/redirect/303", body=b"x", follow_redirects=True,
                                        headers={b"authorization": b"Bearer t"})
        assert (followed.status, followed.body) == (200, b"hello GET")
        assert followed.url == site.url + "/hello"
        assert site.seen[-1] == (b"GET", b"/hello", b"Bearer t")  # same origin: kept
        kept = await client.request("POST", site.url + "/redirect/307", body=b"x", follow_redirects=True)
        assert kept.body == b"hello POST"
    finally:
        await _closed(client)


@pytest_twisted.ensureDeferred
async def test_an_unreachable_server() -> None:
    client = sdk.HttpClient(reactor)
    with pytest.raises(sdk.HttpUnreachable) as caught:
        await client.request("GET", f"http://127.0.0.1:{free_port()}/")
    assert not isinstance(caught.value, sdk.HttpTlsRefused) and "refused" in str(caught.value).lower()


class _Hello(resource.Resource):
    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        return b"hello"


@pytest.fixture
def tls_servers(tmp_path: Path) -> Any:
    ca = TestCA()
    found = {"ca": ca.pem}
    ports = []
    for kind, issued in (("ip", ca.issue("x", ips=["127.0.0.1"])), ("named", ca.issue("x", dns=["idp.test"])),
                         ("no-san", ca.issue("127.0.0.1"))):
        options = ssl.PrivateCertificate.loadPEM(issued.key_pem + issued.cert_pem).options()
        port = reactor.listenSSL(0, server.Site(_Hello()), options,  # type: ignore[attr-defined]
                                 interface="127.0.0.1")
        ports.append(port)
        found[kind] = f"https://127.0.0.1:{port.getHost().port}/"
    yield found
    for port in ports:
        pytest_twisted.blockon(port.stopListening())


@pytest_twisted.ensureDeferred
async def test_tls_is_verified_by_name(tls_servers: Any) -> None:
    client = sdk.HttpClient(reactor, ca_pem=tls_servers["ca"])
    try:
        assert (await client.request("GET", tls_servers["ip"])).body == b"hello"
        for kind in ("named", "no-san"):
            with pytest.raises(sdk.HttpTlsRefused) as caught:
                await client.request("GET", tls_servers[kind])
            assert "TLS" in str(caught.value)
    finally:
        await _closed(client)
    untrusted = sdk.HttpClient(reactor)  # the system store does not hold the test CA
    with pytest.raises(sdk.HttpTlsRefused):
        await untrusted.request("GET", tls_servers["ip"])
    await _closed(untrusted)


@pytest_twisted.ensureDeferred
async def test_server_name_overrides_the_urls_host(tls_servers: Any) -> None:
    client = sdk.HttpClient(reactor, ca_pem=tls_servers["ca"], server_name="idp.test")
    try:
        assert (await client.request("GET", tls_servers["named"])).body == b"hello"
        with pytest.raises(sdk.HttpTlsRefused):
            await client.request("GET", tls_servers["ip"])
    finally:
        await _closed(client)


def test_bad_tls_settings_are_refused_when_made() -> None:
    with pytest.raises(sdk.TLSSettingsError):
        sdk.HttpClient(reactor, ca_pem=b"not a certificate")



class _SecondRequestDropped(protocol.Protocol):
    """Answers a connection's first request (kept alive); closes the
    connection unanswered on its second: a stale pooled connection."""

    def connectionMade(self) -> None:
        self.seen = b""

    def dataReceived(self, data: bytes) -> None:
        self.seen += data
        if self.seen.count(b"\r\n\r\n") == 1 and data.endswith(b"\r\n\r\n"):
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")  # type: ignore[union-attr]
        elif self.seen.count(b"\r\n\r\n") >= 2:
            self.transport.loseConnection()  # type: ignore[union-attr]


@pytest.mark.parametrize("retry", [False, True])
@pytest_twisted.ensureDeferred
async def test_a_stale_connection_is_retried_only_when_asked(retry: bool) -> None:
    factory = protocol.Factory.forProtocol(_SecondRequestDropped)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{port.getHost().port}/"
    client = sdk.HttpClient(reactor, retry_idempotent=retry)
    try:
        assert (await client.request("GET", url)).body == b"ok"
        if retry:
            assert (await client.request("GET", url)).body == b"ok"
            assert client.connections == 2
        else:
            with pytest.raises(sdk.HttpUnreachable):
                await client.request("GET", url)
            assert client.connections == 1
    finally:
        await client.close()
        await port.stopListening()
