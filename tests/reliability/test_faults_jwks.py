"""A remote key-set server that is down, failing, talking garbage or hanging,
through a real gateway: an unverifiable token is never admitted, the last
good keys keep serving, and the gateway recovers without restart."""

from __future__ import annotations

import time
from typing import Any

import pytest
import pytest_twisted
from support.http import http_request, sleep
from rel_helpers import (bearer, config_yaml, fd_count, good_keys, jwt_remote, kid_of, rss_bytes,
                         settle_resources, token, until)
from twisted.internet import defer

FETCH_FAILED = b"Jwks remote fetch is failed"
NO_KEY = b"Jwks doesn't have key to match kid or alg from Jwt"
VERIFY_FAILS = b"Jwt verification fails"


async def get(gw: Any, tok: str | None, path: str = "/jwt/pets") -> Any:
    return await http_request("GET", gw.url(path), headers=bearer(tok) if tok else None)


def forged() -> str:
    """Signed by key 1 but naming key 0's kid: must fail verification."""
    return token(n=1, kid=kid_of("rsa", 0))


@pytest_twisted.ensureDeferred
async def test_down_at_start_every_request_401_then_recovers(
        backend: Any, config_dir: Any, gateway: Any, keyset_server: Any, unused_port: int) -> None:
    ks = keyset_server(unused_port)  # not listening yet: connections refused
    gw = gateway(config_dir(config_yaml(backend.port, jwt=jwt_remote(), jwks_port=unused_port)),
                 load_entry_points=True)
    good = token()
    results = await defer.gatherResults([defer.ensureDeferred(get(gw, good)) for _ in range(12)])
    assert {(r.status, r.body) for r in results} == {(401, FETCH_FAILED)}
    assert (await get(gw, forged())).status == 401
    assert (await http_request("GET", gw.url("/open"))).status == 200  # the rest keeps working
    assert [r.path for r in backend.requests] == [b"/open"]

    ks.start()

    async def admitted() -> bool:
        return (await get(gw, good)).status == 200

    took = await until(admitted, timeout=5.0)
    assert took < 3.0, f"recovery took {took:.1f}s (first retry is due after 1s of backoff)"
    r = await get(gw, forged())
    assert (r.status, r.body) == (401, VERIFY_FAILS)
    assert (await get(gw, None)).body == b"Jwt is missing"


@pytest.mark.parametrize("fault", ["500", "garbage", "hang", "down"])
@pytest_twisted.ensureDeferred
async def test_fault_keeps_last_good_keys_and_recovers(
        fault: str, backend: Any, config_dir: Any, gateway: Any, keyset_server: Any) -> None:
    ks = keyset_server().start()
    gw = gateway(config_dir(config_yaml(
        backend.port, jwks_port=ks.port,
        jwt=jwt_remote(timeout="300ms", cache="200ms", refetch="100ms"))), load_entry_points=True)
    good, rotated = token(), token(n=1)

    async def admitted(tok: str = good) -> bool:
        return (await get(gw, tok)).status == 200

    await until(admitted, timeout=3.0)
    for _ in range(5):
        assert await admitted()
    fds, rss = fd_count(), rss_bytes()
    fetches = ks.count

    if fault == "down":
        await ks.stop()
    else:
        ks.mode(fault)
    await sleep(0.3)  # the cached keys are now older than cacheDuration

    # The last good keys keep serving, without waiting for the failing fetch.
    for _ in range(5):
        t0 = time.monotonic()
        assert await admitted()
        assert time.monotonic() - t0 < 0.25
    # Nothing unverifiable gets through while the key set is unavailable.
    outcomes = await defer.gatherResults(
        [defer.ensureDeferred(get(gw, tok)) for tok in [forged(), rotated, "a.b.c"] * 4])
    for r in outcomes:
        assert r.status == 401, (r.status, r.body)
        assert r.body in (VERIFY_FAILS, NO_KEY, b"Jwt header is an invalid Base64url encoded")
    assert (await get(gw, rotated)).body == NO_KEY
    assert (await get(gw, forged())).body == VERIFY_FAILS
    if fault != "down":
        assert ks.count > fetches, "the expired cache should have triggered a refresh"

    # The key-set server comes back with a rotated key set (0 and 1).
    if fault == "down":
        ks.mode("ok", good_keys(0, 1))
        ks.start()
    else:
        ks.mode("ok", good_keys(0, 1))
    took = await until(lambda: admitted(rotated), timeout=6.0)
    assert took < 4.0
    assert await admitted()
    assert (await get(gw, forged())).body == VERIFY_FAILS

    if fault == "hang":
        await ks.stop()  # drop any request the gateway gave up on
        ks.start()
        await settle_resources(fds)
        assert rss_bytes() - rss < 30 * 1024 * 1024
