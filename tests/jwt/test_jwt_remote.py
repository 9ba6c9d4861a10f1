"""Remote key sets served by a real HTTP server on loopback: fetching,
caching, rotation, the refetch rate limit, and every way the server fails."""

from __future__ import annotations

from typing import Any

import itertools

import attrs
import time

import pytest
import pytest_twisted
import yaml
from jwt_helpers import (ClockedJwtPlugin, CLOCK,
    ISSUER, URL, KeySetServer, bearer, config, jwks, private_key, token,
)
from twisted.internet import defer, reactor, task

from twistgw.config.loader import load_text
from twistgw.core.snapshot import build_snapshot
from twistgw.sdk.testing import ChainTester
from twistgw_jwt import _remote

_unique = itertools.count()


def sleep(seconds: float) -> defer.Deferred:
    return task.deferLater(reactor, seconds, lambda: None)


async def wait_for(predicate, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        await sleep(0.005)


@pytest.fixture
def clock(monkeypatch):
    """The plugin's clock, moved by hand (cache ages, backoff, rate limit)."""
    state = {"now": float(int(time.time()))}
    monkeypatch.setattr(CLOCK, "now", lambda: state["now"])
    return state


@pytest.fixture
def servers():
    started = []

    def start(port: int = 0) -> KeySetServer:
        s = KeySetServer(port)
        started.append(s)
        return s

    yield start
    for s in started:
        pytest_twisted.blockon(defer.ensureDeferred(s.stop()))


def remote_tester(port: int, path: str | None = None, host: Any = None,
                  **remote: object) -> tuple[ChainTester, str]:
    """A tester whose provider fetches ``http://auth.example.com<path>`` from
    the Upstream ``jwks`` at 127.0.0.1:port. Each call gets its own path, so
    no two tests share a cached key set."""
    path = path or f"/keys-{next(_unique)}.json"
    provider = {"issuer": ISSUER, "jwks": {"remote": {
        "upstreamRef": {"name": "jwks", "namespace": "default"},
        "url": f"http://auth.example.com{path}", "timeout": "3s", **remote}}}
    text = config({"providers": {"main": provider}}, upstreams={"jwks": port})
    if host is not None:  # a reload: a new configuration for the same plugins
        return ChainTester(build_snapshot(load_text(text), host), host), path
    t = ChainTester.from_yaml(text, plugins=[("jwt", ClockedJwtPlugin)], load_entry_points=False)
    return t, path


def shorten_timeout(t: ChainTester, seconds: float) -> None:
    """After a first successful fetch (with a timeout generous enough for a
    loaded test machine), make later fetches give up quickly."""
    ks = key_set_of(t)
    ks.spec = attrs.evolve(ks.spec, timeout=seconds)


def key_set_of(t: ChainTester) -> _remote.RemoteKeySet:
    (compiled,) = t.snapshot.plugin_compiled["jwt"]
    (ks,) = compiled.remote_key_sets()
    return ks


async def req(t: ChainTester, tok: str | None = None):
    r = await t.request("GET", URL, headers=bearer(tok) if tok else {})
    return r.status, r.body


async def unused_port() -> int:
    s = KeySetServer()
    port = s.port
    await s.stop()
    return port


# --------------------------------------------------------------------------
# Fetching and caching
# --------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_fetched_from_the_upstream_with_path_and_host_from_the_url(servers):
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    t, path = remote_tester(s.port)
    # prefetched at configuration load, before any request
    await wait_for(lambda: key_set_of(t).keys is not None)
    assert s.resource.requests == [(path.encode(), b"auth.example.com")]
    for _ in range(3):
        assert await req(t, token(kid="k0")) == (200, b"")
    assert s.count == 1  # cached


@pytest_twisted.ensureDeferred
async def test_url_query_and_port_are_kept(servers):
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    provider = {"issuer": ISSUER, "jwks": {"remote": {
        "upstreamRef": {"name": "jwks"}, "url": "http://auth.example.com:8443/jwks?realm=x"}}}
    t = ChainTester.from_yaml(config({"providers": {"main": provider}}, upstreams={"jwks": s.port}),
                              plugins=[("jwt", ClockedJwtPlugin)], load_entry_points=False)
    assert await req(t, token(kid="k0")) == (200, b"")
    assert s.resource.requests[0] == (b"/jwks?realm=x", b"auth.example.com:8443")


@pytest_twisted.ensureDeferred
async def test_kubernetes_service_discovery(servers):
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    docs = list(yaml.safe_load_all(config({"providers": {"main": {"issuer": ISSUER, "jwks": {"remote": {
        "upstreamRef": {"name": "auth-jwks-80", "namespace": "auth"},
        "url": "http://auth.auth.svc.cluster.local/.well-known/jwks.json"}}}}})))
    docs += [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "jwks", "namespace": "auth"},
         "spec": {"ports": [{"name": "http", "port": 80, "targetPort": s.port}]}},
        {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "jwks", "namespace": "auth"},
         "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "http", "port": s.port}]}]},
    ]
    t = ChainTester.from_yaml(yaml.safe_dump_all(docs), plugins=[("jwt", ClockedJwtPlugin)],
                              load_entry_points=False)
    assert await req(t, token(kid="k0")) == (200, b"")
    assert s.resource.requests[-1] == (b"/.well-known/jwks.json", b"auth.auth.svc.cluster.local")


@pytest_twisted.ensureDeferred
async def test_cache_duration_then_background_refresh(servers, clock):
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    t, _ = remote_tester(s.port, cacheDuration="60s")
    await wait_for(lambda: key_set_of(t).keys is not None)
    clock["now"] += 59
    assert await req(t, token(kid="k0")) == (200, b"")
    assert s.count == 1
    # the provider rotates completely; after the cache duration the next request
    # is still served from the old keys while one refresh runs in the background
    s.resource.set_keys(jwks(("rsa", 1, "k1")))
    clock["now"] += 2
    assert await req(t, token(kid="k0")) == (200, b"")
    await wait_for(lambda: s.count == 2 and key_set_of(t)._inflight is None)
    assert await req(t, token(n=1, kid="k1")) == (200, b"")
    # k0 was removed: even its already-verified token stops being admitted
    assert await req(t, token(kid="k0")) == (401, b"Jwks doesn't have key to match kid or alg from Jwt")
    assert await req(t, token(kid="k0", sub="new")) == (
        401, b"Jwks doesn't have key to match kid or alg from Jwt")


# --------------------------------------------------------------------------
# Rotation and the refetch rate limit
# --------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_rotation_new_kid_admitted_at_once(servers, clock):
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    t, _ = remote_tester(s.port, refetchInterval="5s")
    assert await req(t, token(kid="k0")) == (200, b"")
    assert s.count == 1
    # a new key is published while running; its first token triggers a
    # refetch (once the 5 s since the last fetch have passed)
    s.resource.set_keys(jwks(("rsa", 0, "k0"), ("rsa", 1, "k1")))
    clock["now"] += 5
    assert await req(t, token(n=1, kid="k1")) == (200, b"")
    assert s.count == 2
    assert await req(t, token(kid="k0")) == (200, b"")
    assert s.count == 2


@pytest_twisted.ensureDeferred
async def test_refetch_is_rate_limited(servers, clock):
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    t, _ = remote_tester(s.port, refetchInterval="5s")
    assert await req(t, token(kid="k0")) == (200, b"")
    # no refetch within 5 s of the initial fetch
    clock["now"] += 4
    assert await req(t, token(n=1, kid="k1")) == (401, b"Jwks doesn't have key to match kid or alg from Jwt")
    assert s.count == 1
    clock["now"] += 2
    # k1 is not published yet: one refetch, then none for 5 seconds
    assert await req(t, token(n=1, kid="k1")) == (401, b"Jwks doesn't have key to match kid or alg from Jwt")
    assert s.count == 2
    s.resource.set_keys(jwks(("rsa", 0, "k0"), ("rsa", 1, "k1")))
    clock["now"] += 4
    assert await req(t, token(n=1, kid="k1")) == (401, b"Jwks doesn't have key to match kid or alg from Jwt")
    assert s.count == 2
    clock["now"] += 1.5
    assert await req(t, token(n=1, kid="k1")) == (200, b"")
    assert s.count == 3


@pytest_twisted.ensureDeferred
async def test_storm_of_unknown_kids(servers, clock):
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    t, _ = remote_tester(s.port)
    assert await req(t, token(kid="k0")) == (200, b"")
    clock["now"] += 10
    # 200 concurrent requests, each with its own bogus kid
    tokens = [token(kid=f"bogus-{i}") for i in range(200)]
    results = await defer.gatherResults([defer.ensureDeferred(req(t, tok)) for tok in tokens])
    assert set(results) == {(401, b"Jwks doesn't have key to match kid or alg from Jwt")}
    assert s.count == 2  # the one initial fetch and one shared refetch
    for i in range(200):
        assert (await req(t, token(kid=f"more-{i}")))[0] == 401
    assert s.count == 2
    assert await req(t, token(kid="k0")) == (200, b"")  # legitimate traffic unaffected


@pytest_twisted.ensureDeferred
async def test_no_kid_and_unknown_alg_also_refetch_once(servers, clock):
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    t, _ = remote_tester(s.port)
    assert await req(t, token(kid="k0")) == (200, b"")
    clock["now"] += 10
    s.resource.set_keys(jwks(("rsa", 0, "k0"), ("ec256", 0, "e0")))
    assert await req(t, token(kind="ec256", kid=None)) == (200, b"")
    assert s.count == 2


# --------------------------------------------------------------------------
# The key-set server failing
# --------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_server_down_at_start_then_up(servers, clock):
    port = await unused_port()
    t, _ = remote_tester(port)
    ks = key_set_of(t)
    await wait_for(lambda: ks.failures == 1)  # the prefetch was refused
    assert await req(t, token(kid="k0")) == (401, b"Jwks remote fetch is failed")
    assert ks.fetch_count == 1  # in backoff: answered at once, no new attempt
    assert await req(t) == (401, b"Jwt is missing")
    s = servers(port)
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    clock["now"] += 1.5  # the first backoff (1 s) is over
    assert await req(t, token(kid="k0")) == (200, b"")
    assert ks.failures == 0 and s.count == 1


@pytest_twisted.ensureDeferred
async def test_backoff_grows_and_resets(servers, clock):
    port = await unused_port()
    t, _ = remote_tester(port)
    ks = key_set_of(t)
    await wait_for(lambda: ks.failures == 1)
    delays = [ks.next_allowed - clock["now"]]
    for _ in range(3):
        clock["now"] = ks.next_allowed
        assert await req(t, token(kid="k0")) == (401, b"Jwks remote fetch is failed")
        delays.append(ks.next_allowed - clock["now"])
    assert delays == [1.0, 2.0, 4.0, 8.0]
    s = servers(port)
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    clock["now"] = ks.next_allowed
    assert await req(t, token(kid="k0")) == (200, b"")
    assert ks.failures == 0 and ks.next_allowed == 0.0


@pytest.mark.parametrize("failure", ["500", "garbage", "html", "empty", "oct_only", "weak_rsa",
                                     "no_keys_member", "redirect", "too_big", "stopped", "hang"])
@pytest_twisted.ensureDeferred
async def test_failure_mid_run_keeps_last_good_keys(servers, clock, failure):
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    t, _ = remote_tester(s.port)
    ks = key_set_of(t)
    assert await req(t, token(kid="k0")) == (200, b"")
    shorten_timeout(t, 0.2)
    r = s.resource
    if failure == "500":
        r.status, r.body = 500, b'{"keys": []}'
    elif failure == "garbage":
        r.body = b"\x00\xff{{{"
    elif failure == "html":
        r.body = b"<html>Service Unavailable</html>"
    elif failure == "empty":
        r.body = b'{"keys": []}'
    elif failure == "oct_only":
        r.body = b'{"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "k1"}]}'
    elif failure == "weak_rsa":
        from jwt.algorithms import RSAAlgorithm

        weak = RSAAlgorithm.to_jwk(private_key("rsa1024").public_key(), as_dict=True)
        r.set_keys({"keys": [{**weak, "kid": "k1", "alg": "RS256", "use": "sig"}]})
    elif failure == "no_keys_member":
        r.body = b'{"kid": "k1"}'
    elif failure == "redirect":
        r.status, r.body = 302, b""
    elif failure == "too_big":
        r.body = b'{"keys": [], "pad": "' + b"x" * (_remote.MAX_BODY_BYTES + 10) + b'"}'
    elif failure == "stopped":
        await s.stop()
    elif failure == "hang":
        r.hang = True
    clock["now"] += 10
    started = time.monotonic()
    # an unknown kid forces a refetch, which fails
    assert await req(t, token(n=1, kid="k1")) == (401, b"Jwks doesn't have key to match kid or alg from Jwt")
    assert time.monotonic() - started < 2.0  # bounded by the 200 ms timeout
    assert ks.failures == 1 and ks.last_error
    # the last good keys keep serving
    assert await req(t, token(kid="k0")) == (200, b"")
    assert [k.kid for k in ks.keys] == ["k0"]


@pytest.mark.parametrize("failure", ["500", "garbage", "hang", "refused"])
@pytest_twisted.ensureDeferred
async def test_failure_with_no_keys_at_all(servers, clock, failure):
    s = servers()
    if failure == "500":
        s.resource.status = 500
    elif failure == "garbage":
        s.resource.body = b"not json"
    elif failure == "hang":
        s.resource.hang = True
    port = s.port
    if failure == "refused":
        await s.stop()
    t, _ = remote_tester(port, timeout="200ms")
    ks = key_set_of(t)
    started = time.monotonic()
    assert await req(t, token(kid="k0")) == (401, b"Jwks remote fetch is failed")
    assert time.monotonic() - started < 2.0
    await wait_for(lambda: ks._inflight is None)
    assert ks.failures >= 1 and ks.keys is None


@pytest_twisted.ensureDeferred
async def test_hanging_refresh_never_delays_requests(servers, clock):
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    t, _ = remote_tester(s.port, cacheDuration="1s")
    assert await req(t, token(kid="k0")) == (200, b"")
    shorten_timeout(t, 1.5)
    s.resource.hang = True
    clock["now"] += 5
    tok = token(kid="k0", sub="someone-else")  # not in the verified-token cache
    started = time.monotonic()
    for _ in range(20):
        assert await req(t, tok) == (200, b"")
    assert time.monotonic() - started < 1.0  # nobody waited for the 1.5 s fetch
    ks = key_set_of(t)
    await wait_for(lambda: ks.failures == 1)
    assert s.count == 2


# --------------------------------------------------------------------------
# Reloads keep what was fetched
# --------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_reload_shares_the_key_set_unless_it_changed(servers):
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    t1, path = remote_tester(s.port)
    assert await req(t1, token(kid="k0")) == (200, b"")
    # the same remote spec in a new configuration: no new fetch
    t2, _ = remote_tester(s.port, path=path, host=t1.host)
    assert key_set_of(t2) is key_set_of(t1)
    assert await req(t2, token(kid="k0")) == (200, b"")
    assert s.count == 1
    # a changed URL is another key set, fetched afresh
    t3, _ = remote_tester(s.port, host=t1.host)
    assert await req(t3, token(kid="k0")) == (200, b"")
    assert s.count == 2


@pytest_twisted.ensureDeferred
async def test_unconfigure_cancels_fetches(servers):
    s = servers()
    s.resource.hang = True
    t, _ = remote_tester(s.port, timeout="10s")
    ks = key_set_of(t)
    assert ks._inflight is not None
    await t.host.unconfigure()  # what a stopping gateway does
    await wait_for(lambda: ks._inflight is None)
    assert ks.keys is None


# --------------------------------------------------------------------------
# Key sets as Gloo's documentation serves them: one key, no kid
# --------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_single_key_without_kid_verifies_tokens_with_and_without_kid(servers, clock):
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, None)))
    t, _ = remote_tester(s.port)
    assert await req(t, token(kid="whatever-the-issuer-wrote")) == (200, b"")
    assert await req(t, token(kid=None)) == (200, b"")
    # of the right type only: an EC token finds no key
    clock["now"] += 10
    assert await req(t, token(kind="ec256", kid="e0")) == (401, b"Jwks doesn't have key to match kid or alg from Jwt")
    assert s.count == 2  # that miss refetched once


@pytest.mark.parametrize("new_kid", [None, "k1"], ids=["rotated-without-kid", "rotated-with-kid"])
@pytest.mark.parametrize("token_kid", [None, "k1"], ids=["token-without-kid", "token-with-kid"])
@pytest_twisted.ensureDeferred
async def test_rotation_of_a_kid_less_key_refetches(servers, clock, token_kid, new_kid):
    """The cached kid-less key is of the right type but does not verify a
    token signed by the rotated key: that is "no matching key", so the
    (rate-limited) refetch runs and the new key admits the token."""
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, None)))
    t, _ = remote_tester(s.port, refetchInterval="5s")
    assert await req(t, token(kid=token_kid)) == (200, b"")
    assert s.count == 1
    s.resource.set_keys(jwks(("rsa", 1, new_kid)))
    # within refetchInterval of the last fetch: no refetch, the old key fails
    assert await req(t, token(n=1, kid=token_kid)) == (401, b"Jwt verification fails")
    assert s.count == 1
    clock["now"] += 5
    assert await req(t, token(n=1, kid=token_kid)) == (200, b"")
    assert s.count == 2
    # a forged token costs at most one refetch per interval, and still fails;
    # none at all when a key carries exactly its kid (a bad signature)
    clock["now"] += 5
    for _ in range(20):
        assert await req(t, token(n=2, kid=token_kid)) == (401, b"Jwt verification fails")
    assert s.count == (2 if token_kid and new_kid else 3)


@pytest_twisted.ensureDeferred
async def test_a_failing_key_with_the_tokens_own_kid_does_not_refetch(servers, clock):
    """A key carrying exactly the token's kid that fails is a bad signature,
    not a missing key: no refetch."""
    s = servers()
    s.resource.set_keys(jwks(("rsa", 0, "k0")))
    t, _ = remote_tester(s.port)
    assert await req(t, token(kid="k0")) == (200, b"")
    clock["now"] += 10
    assert await req(t, token(n=1, kid="k0")) == (401, b"Jwt verification fails")
    assert s.count == 1
