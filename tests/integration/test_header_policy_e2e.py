"""The header policy over raw sockets, against a real backend (issue 13,
point 8): hostile Host values, Connection: Host, method overrides,
underscore names, forwarding headers, HTTP/1.0 without Host."""

from __future__ import annotations

import json
from typing import Any

import pytest
import pytest_twisted

from support.http import raw_exchange, static_upstream_yaml, vs_yaml

FALLBACK = "    - matchers: [{prefix: /}]\n      directResponseAction: {status: 200, body: fallback}\n"


@pytest.fixture
def gw(backend: Any, config_dir: Any, gateway: Any) -> Any:
    g = gateway(config_dir(static_upstream_yaml("backend", [backend.port]) + "---\n"
                           + vs_yaml("api", domains=["api.test"]) + "---\n"
                           + vs_yaml("fallback", domains=["*"], routes=FALLBACK)))
    g.backend = backend
    return g


async def one(gw: Any, head: bytes) -> Any:
    res = await raw_exchange(gw.port, head + b"\r\n")
    (resp,) = res.responses()
    return resp


@pytest.mark.parametrize("host", [
    b"user@api.test", b"api.test,evil.test", b"api.test/admin", b'"api.test"', b"api.test\\evil",
    b"api.test:99999", b"api..test", b"[::1", b"api.test:80:80",
])
@pytest_twisted.ensureDeferred
async def test_invalid_host_is_400_and_never_forwarded(gw: Any, host: bytes) -> None:
    resp = await one(gw, b"GET /x HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n")
    assert resp.status == 400 and b"not a valid host[:port]" in resp.body
    assert gw.backend.requests == []


@pytest.mark.parametrize("host", [b"api.test.", b"api.test.:8080", b"API.TEST:80"])
@pytest_twisted.ensureDeferred
async def test_trailing_dot_routes_like_the_host(gw: Any, host: bytes) -> None:
    resp = await one(gw, b"GET /x HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n")
    assert resp.status == 200 and json.loads(resp.body)["path"] == "/x"  # the backend, not "fallback"
    assert gw.backend.requests[-1].header(b"host") == [host]


@pytest.mark.parametrize("connection", [b"close, Host", b"Host", b"host,close"])
@pytest_twisted.ensureDeferred
async def test_connection_host_cannot_drop_the_routed_host(gw: Any, connection: bytes) -> None:
    resp = await one(gw, b"GET /x HTTP/1.1\r\nHost: api.test\r\nConnection: " + connection
                     + b"\r\nConnection: close\r\n")
    assert resp.status == 200
    assert gw.backend.requests[-1].header(b"host") == [b"api.test"]


@pytest_twisted.ensureDeferred
async def test_method_overrides_underscores_and_forwarding_headers_never_reach_the_backend(gw: Any) -> None:
    resp = await one(gw, b"POST /x HTTP/1.1\r\nHost: api.test\r\nContent-Length: 0\r\nConnection: close\r\n"
                     b"X-HTTP-Method-Override: DELETE\r\nX-Method-Override: DELETE\r\nX-HTTP-Method: DELETE\r\n"
                     b"X_User: admin\r\nx_auth_groups: admins\r\nX-User: alice\r\n"
                     b"Forwarded: for=10.6.6.6;proto=https\r\nX-Real-IP: 10.6.6.6\r\n"
                     b"X-Forwarded-For: 10.6.6.6\r\nX-Forwarded-Host: evil.test\r\nX-Forwarded-Proto: https\r\n")
    assert resp.status == 200
    seen = gw.backend.requests[-1]
    assert seen.method == b"POST"
    names = {n.lower() for n, _ in seen.headers}
    assert not names & {b"x-http-method-override", b"x-method-override", b"x-http-method", b"forwarded",
                        b"x-forwarded-host"}
    assert not any(b"_" in n for n in names)
    assert seen.header(b"x-user") == [b"alice"]
    assert seen.header(b"x-real-ip") == [b"127.0.0.1"]
    assert seen.header(b"x-forwarded-for") == [b"127.0.0.1"]
    assert seen.header(b"x-forwarded-proto") == [b"http"]


@pytest_twisted.ensureDeferred
async def test_http10_without_host_is_served_by_the_star_virtual_service(gw: Any) -> None:
    res = await raw_exchange(gw.port, b"GET /x HTTP/1.0\r\n\r\n")
    (resp,) = res.responses()
    assert (resp.status, resp.body) == (200, b"fallback") and res.closed
    res = await raw_exchange(gw.port, b"GET /x HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert res.responses()[0].status == 400
