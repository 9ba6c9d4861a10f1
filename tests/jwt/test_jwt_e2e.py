"""Through the real proxy: a gateway on loopback, an echo backend, and a key
set served over HTTP. Also runs the worked example of docs/jwt.md."""

from __future__ import annotations

import json
import pathlib

import pytest
import pytest_twisted
from support.http import http_request, raw_exchange
from jwt_helpers import ClockedJwtPlugin, CLOCK, ISSUER, KeySetServer, jwks, private_pem, public_pem, token

from twistgw_jwt import tools

EXAMPLE = pathlib.Path(__file__).parent / "example" / "gateway.yaml"
PLUGINS = [("jwt", ClockedJwtPlugin)]


@pytest.fixture
def keyserver():
    s = KeySetServer()
    yield s
    pytest_twisted.blockon(s.stop_deferred())


def _example(key_port: int, backend_port: int) -> str:
    text = EXAMPLE.read_text()
    assert "port: 8000" in text and "port: 9000" in text
    return text.replace("port: 8000", f"port: {key_port}").replace("port: 9000", f"port: {backend_port}")


def _seen_header(backend, name: bytes):
    return backend.requests[-1].header(name)


@pytest_twisted.ensureDeferred
async def test_worked_example(keyserver, backend, config_dir, gateway):
    # publish the key set exactly as the doc does (twistgw keys --public public.pem)
    keyserver.resource.set_keys(tools.jwks_from_public_key(public_pem().encode()))
    gw = gateway(config_dir(_example(keyserver.port, backend.port)), plugins=PLUGINS)

    # curl -i http://127.0.0.1:8080/pets
    r = await http_request("GET", gw.url("/pets"))
    assert (r.status, r.body) == (401, b"Jwt is missing")
    assert r.header("content-type") == "text/plain"
    raw = await raw_exchange(gw.port, b"GET /pets HTTP/1.1\r\nHost: api\r\nConnection: close\r\n\r\n")
    (resp,) = raw.responses()
    assert (resp.status, resp.header(b"content-length"), resp.body) == (401, b"14", b"Jwt is missing")
    assert r.header("www-authenticate") == f'Bearer realm="http://127.0.0.1:{gw.port}/pets"'
    assert backend.requests == []

    # TOKEN=$(twistgw token --key private.pem --iss https://issuer.example.com --sub alice --aud petstore)
    tok = tools.mint_token(private_pem(), "https://issuer.example.com", "alice", {"aud": "petstore"}, 3600)
    r = await http_request("GET", gw.url("/pets?limit=2"),
                           headers={"Authorization": f"Bearer {tok}", "X-User": "mallory"})
    assert r.status == 200
    seen = backend.requests[-1]
    assert seen.uri == b"/pets?limit=2"
    assert seen.header(b"authorization") is None  # the token is not forwarded
    assert seen.header(b"x-user") == [b"alice"]  # from the verified claim, not the client
    assert keyserver.resource.requests[0] == (b"/jwks.json", b"auth.example.com")

    # the wrong audience
    other = tools.mint_token(private_pem(), "https://issuer.example.com", "alice", {"aud": "shop"}, 3600)
    r = await http_request("GET", gw.url("/pets"), headers={"Authorization": f"Bearer {other}"})
    assert (r.status, r.body) == (403, b"Audiences in Jwt are not allowed")
    assert r.header("www-authenticate") == (
        f'Bearer realm="http://127.0.0.1:{gw.port}/pets", error="invalid_token"')

    # the open route
    r = await http_request("GET", gw.url("/public/info"))
    assert r.status == 200
    assert len(backend.requests) == 2


@pytest_twisted.ensureDeferred
async def test_query_token_is_not_forwarded(keyserver, backend, config_dir, gateway):
    keyserver.resource.set_keys(tools.jwks_from_public_key(public_pem().encode()))
    gw = gateway(config_dir(_example(keyserver.port, backend.port)), plugins=PLUGINS)
    tok = token(aud="petstore")
    r = await http_request("GET", gw.url(f"/pets?a=1&access_token={tok}&b=2"))
    assert r.status == 200
    assert backend.requests[-1].uri == b"/pets?a=1&b=2"


@pytest_twisted.ensureDeferred
async def test_bad_tokens_through_the_proxy(keyserver, backend, config_dir, gateway):
    keyserver.resource.set_keys(tools.jwks_from_public_key(public_pem().encode()))
    gw = gateway(config_dir(_example(keyserver.port, backend.port)), plugins=PLUGINS)
    cases = [
        ({"Authorization": "Bearer " + token(n=1, aud="petstore", kid=None)}, 401,
         b"Jwt verification fails"),
        ({"Authorization": "Bearer " + token(ttl=-3600, aud="petstore")}, 401, b"Jwt is expired"),
        ({"Authorization": "Bearer a.b"}, 401, b"Jwt is not in the form of Header.Payload.Signature"),
        ({"Authorization": ["Bearer " + token(aud="petstore"), "Bearer " + token(aud="petstore", sub="b")]},
         401, b"Found multiple Jwt tokens"),
    ]
    for headers, status, body in cases:
        r = await http_request("GET", gw.url("/pets"), headers=headers)
        assert (r.status, r.body) == (status, body)
    assert backend.requests == []


@pytest_twisted.ensureDeferred
async def test_hot_reload_of_provider_config(keyserver, backend, config_dir, gateway):
    keyserver.resource.set_keys(jwks(("rsa", 0, "k0")))
    directory = config_dir(_example(keyserver.port, backend.port))
    gw = gateway(directory, plugins=PLUGINS)
    tok = token(aud="petstore", kid="k0")
    assert (await http_request("GET", gw.url("/pets"), headers={"Authorization": f"Bearer {tok}"})).status == 200
    assert keyserver.count == 1
    # the issuer changes; the key set is the same and is not fetched again
    config_dir(_example(keyserver.port, backend.port).replace(
        "issuer: https://issuer.example.com", "issuer: https://new-issuer.example.com"),
        directory=directory)
    assert gw.reload() is True
    r = await http_request("GET", gw.url("/pets"), headers={"Authorization": f"Bearer {tok}"})
    assert (r.status, r.body) == (401, b"Jwt issuer is not configured")
    new = token(aud="petstore", kid="k0", iss="https://new-issuer.example.com")
    assert (await http_request("GET", gw.url("/pets"), headers={"Authorization": f"Bearer {new}"})).status == 200
    assert keyserver.count == 1
    # an invalid edit is refused whole; the last good configuration keeps serving
    config_dir(_example(keyserver.port, backend.port).replace("audiences: [petstore]", "audiences: []"),
               directory=directory)
    assert gw.reload() is False
    assert (await http_request("GET", gw.url("/pets"), headers={"Authorization": f"Bearer {new}"})).status == 200
    assert (await http_request("GET", gw.url("/pets"))).status == 401


@pytest_twisted.ensureDeferred
async def test_rotation_through_the_proxy(keyserver, backend, config_dir, gateway, monkeypatch):

    keyserver.resource.set_keys(jwks(("rsa", 0, "k0")))
    now = {"t": float(CLOCK.now())}
    monkeypatch.setattr(CLOCK, "now", lambda: now["t"])
    gw = gateway(config_dir(_example(keyserver.port, backend.port)), plugins=PLUGINS)
    old = token(aud="petstore", kid="k0")
    assert (await http_request("GET", gw.url("/pets"), headers={"Authorization": f"Bearer {old}"})).status == 200
    keyserver.resource.set_keys(jwks(("rsa", 0, "k0"), ("rsa", 1, "k1")))
    now["t"] += 6  # the refetch rate limit (5 s) since the load-time fetch
    new = token(n=1, aud="petstore", kid="k1")
    r = await http_request("GET", gw.url("/pets"), headers={"Authorization": f"Bearer {new}"})
    assert r.status == 200
    assert keyserver.count == 2


def test_example_is_valid_yaml_for_the_docs():
    docs = [d for d in __import__("yaml").safe_load_all(EXAMPLE.read_text())]
    assert [d["kind"] for d in docs] == ["Upstream", "Upstream", "VirtualService"]
    assert json.dumps(docs)  # plain data
    assert ISSUER == "https://issuer.example.com"
