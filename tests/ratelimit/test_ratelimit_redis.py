"""The counted rate limits against a real ``redis-server`` (Debian's,
started per test on loopback): exact counts under concurrency, separate
budgets, Gloo's guide examples, Redis hanging and dying, shadow mode, the
draft headers, and authentication before or after counting.

Requests run through :class:`twistgw.sdk.testing.ChainTester` in this process
(the same pipeline the server runs); test_ratelimit_processes.py runs real
gateway processes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from rl_helpers import DENY, USER, WITH_AUTH, config, fresh_window, per
from twisted.internet import defer, reactor, task

from twistgw.sdk.testing import ChainTester

from support.redis import RedisServer


@pytest.fixture
def redis(tmp_path: Path) -> Any:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


async def make(text: str) -> ChainTester:
    return ChainTester.from_yaml(text, WITH_AUTH)


async def close(tester: ChainTester) -> None:
    await tester.host.unconfigure()


async def statuses(tester: ChainTester, n: int, url: str = "http://a.example/", **kw: Any) -> list[int]:
    """``n`` requests at once (one reactor turn), their statuses in order."""
    found = await defer.gatherResults([defer.Deferred.fromCoroutine(tester.request("GET", url, **kw))
                                       for _ in range(n)])
    return [r.status for r in found]


async def sleep(seconds: float) -> None:
    await task.deferLater(reactor, seconds, lambda: None)


BASIC = {"ratelimitBasic": {"anonymousLimits": per(3, "HOUR"), "authorizedLimits": per(2, "HOUR")}, "jwt": {}}


@pytest_twisted.ensureDeferred
async def test_exactly_n_of_3n_concurrent(redis: RedisServer) -> None:
    fresh_window(3600, 30)
    tester = await make(config(BASIC, redis=redis.address))
    try:
        found = await statuses(tester, 9)
        assert sorted(found) == [200] * 3 + [429] * 6
        assert found == [200] * 3 + [429] * 6  # in arrival order: the first three
    finally:
        await close(tester)


@pytest_twisted.ensureDeferred
async def test_counters_live_in_the_redis_database_named_by_db(redis: RedisServer) -> None:
    """Settings spec.ratelimitServer.redis.db: the counters are written in that database, not in 0."""
    fresh_window(3600, 30)
    tester = await make(config(BASIC, settings={"ratelimitServer": {"redis": {"address": redis.address, "db": 5}}}))
    try:
        assert await statuses(tester, 4) == [200] * 3 + [429]
        assert int(redis.command("-n", "5", "DBSIZE")) > 0
        assert int(redis.command("-n", "0", "DBSIZE")) == 0
    finally:
        await close(tester)


@pytest_twisted.ensureDeferred
async def test_users_have_separate_budgets_and_anonymous_goes_by_address(redis: RedisServer) -> None:
    fresh_window(3600, 30)
    tester = await make(config(BASIC, redis=redis.address))
    try:
        assert await statuses(tester, 3, headers={USER: "alice"}) == [200, 200, 429]
        assert await statuses(tester, 3, headers={USER: "bob"}) == [200, 200, 429]
        assert await statuses(tester, 4, client_address="10.0.0.1") == [200, 200, 200, 429]
        assert await statuses(tester, 1, client_address="10.0.0.2") == [200]
        # alice from another address is still alice
        assert await statuses(tester, 1, headers={USER: "alice"}, client_address="10.9.9.9") == [429]
    finally:
        await close(tester)


@pytest_twisted.ensureDeferred
async def test_a_forged_user_header_is_not_an_identity(redis: RedisServer) -> None:
    """authorizedLimits count the principal an auth plugin established;
    headers a client writes (X-User, X-Forwarded-User, Authorization junk)
    change nothing: an anonymous caller is counted by its address."""
    fresh_window(3600, 30)
    tester = await make(config(BASIC, redis=redis.address))
    try:
        forged = [{"x-user": f"u{i}", "x-forwarded-user": f"u{i}", "x-forwarded-for": f"10.1.1.{i}",
                   "x-real-ip": f"10.1.1.{i}", "forwarded": f"for=10.1.1.{i}"} for i in range(4)]
        found = [(await tester.request("GET", "http://a.example/", headers=h)).status for h in forged]
        assert found == [200, 200, 200, 429]
    finally:
        await close(tester)


@pytest_twisted.ensureDeferred
async def test_counted_after_auth_by_default(redis: RedisServer) -> None:
    fresh_window(3600, 30)
    options = {"ratelimitBasic": {"anonymousLimits": per(1, "HOUR")}, "jwt": {}}
    tester = await make(config(options, redis=redis.address))
    try:
        # refused by authentication: never counted
        assert await statuses(tester, 3, headers={DENY: "1"}) == [401, 401, 401]
        assert await statuses(tester, 2) == [200, 429]
    finally:
        await close(tester)


@pytest_twisted.ensureDeferred
async def test_rate_limit_before_auth_counts_refused_requests(redis: RedisServer) -> None:
    fresh_window(3600, 30)
    options = {"ratelimitBasic": {"anonymousLimits": per(1, "HOUR")}, "jwt": {}}
    tester = await make(config(options, settings={"ratelimitServer": {"rateLimitBeforeAuth": True}},
                               redis=redis.address))
    try:
        assert [s.plugin for s in next(iter(tester.snapshot.routes.values())).chain] == ["ratelimitBasic", "jwt"]
        assert await statuses(tester, 3, headers={DENY: "1"}) == [401, 429, 429]
        assert await statuses(tester, 1) == [429]
    finally:
        await close(tester)


SETTINGS_TYPE = {"ratelimit": {"descriptors": [
    {"key": "type", "rateLimit": per(1, "MINUTE"),
     "descriptors": [{"key": "number", "weight": 1, "rateLimit": per(10, "MINUTE")}]}]}}
TYPE_NUMBER_ACTIONS = {"ratelimit": {"rateLimits": [
    {"actions": [{"requestHeaders": {"descriptorKey": "type", "headerName": "x-type"}}]},
    {"actions": [{"requestHeaders": {"descriptorKey": "type", "headerName": "x-type"}},
                 {"requestHeaders": {"descriptorKey": "number", "headerName": "x-number"}}]}]}}


@pytest_twisted.ensureDeferred
async def test_guide_rule_priority_and_weights(redis: RedisServer) -> None:
    """Envoy API guide, "Rule Priority and Weights": with both headers the
    weighted nested rule (10/minute) is the only one counted; with the type
    alone, 1/minute."""
    fresh_window()
    tester = await make(config(TYPE_NUMBER_ACTIONS, settings=SETTINGS_TYPE, redis=redis.address))
    try:
        both = {"x-type": "t", "x-number": "1"}
        assert await statuses(tester, 11, headers=both) == [200] * 10 + [429]
        assert await statuses(tester, 2, headers={"x-type": "t"}) == [200, 429]
        assert await statuses(tester, 1, headers={"x-type": "t", "x-number": "2"}) == [200]
        assert await statuses(tester, 3) == [200, 200, 200]  # no x-type: no descriptor, no limit
    finally:
        await close(tester)


@pytest_twisted.ensureDeferred
async def test_guide_always_apply(redis: RedisServer) -> None:
    fresh_window()
    settings = {"ratelimit": {"descriptors": [dict(SETTINGS_TYPE["ratelimit"]["descriptors"][0], alwaysApply=True)]}}
    tester = await make(config(TYPE_NUMBER_ACTIONS, settings=settings, redis=redis.address))
    try:
        assert await statuses(tester, 2, headers={"x-type": "t", "x-number": "1"}) == [200, 429]
    finally:
        await close(tester)


def set_actions(*keys: str) -> dict[str, Any]:
    return {"ratelimit": {"rateLimits": [{"setActions": [
        {"requestHeaders": {"descriptorKey": k, "headerName": f"x-{k}"}} for k in keys]}]}}


@pytest_twisted.ensureDeferred
async def test_guide_set_style(redis: RedisServer) -> None:
    """Set-style API guide: type a + number one limited to 1/minute whatever
    the order of the setActions; still limited with a color added; no longer
    limited once the type action is removed."""
    fresh_window()
    settings = {"ratelimit": {"setDescriptors": [{"simpleDescriptors": [{"key": "type", "value": "a"},
                                                                        {"key": "number", "value": "one"}],
                                                  "rateLimit": per(1, "MINUTE")}]}}
    both = {"x-type": "a", "x-number": "one"}
    testers = [await make(config(set_actions(*keys), settings=settings, redis=redis.address))
               for keys in (("number", "type"), ("number", "type", "color"), ("number", "color"))]
    try:
        assert await statuses(testers[0], 2, headers=both) == [200, 429]
        second = await testers[0].request("GET", "http://a.example/", headers=both)
        assert (second.body, dict(second.response_headers)[b"x-envoy-ratelimited"]) == (b"", b"true")
        assert await statuses(testers[1], 1, headers=dict(both, **{"x-color": "blue"})) == [429]
        assert await statuses(testers[2], 2, headers=dict(both, **{"x-color": "blue"})) == [200, 200]
    finally:
        for tester in testers:
            await close(tester)


@pytest_twisted.ensureDeferred
async def test_guide_per_second_and_per_minute_by_address(redis: RedisServer) -> None:
    """Envoy API guide: 2/second and 20/minute per client address. Every
    matched counter counts a request, refused or not (Envoy's rate-limit
    server does so): the one refused by the per-second rule in the first
    second uses one of the minute's 20."""
    fresh_window(60, 35)
    settings = {"ratelimit": {"descriptors": [
        {"key": "generic_key", "value": "per-minute",
         "descriptors": [{"key": "remote_address", "rateLimit": per(20, "MINUTE")}]},
        {"key": "generic_key", "value": "per-second",
         "descriptors": [{"key": "remote_address", "rateLimit": per(2, "SECOND")}]}]}}
    actions = {"ratelimit": {"rateLimits": [
        {"actions": [{"genericKey": {"descriptorValue": v}}, {"remoteAddress": {}}]}
        for v in ("per-minute", "per-second")]}}
    tester = await make(config(actions, settings=settings, redis=redis.address))
    try:
        fresh_window(1, 0.5)
        assert await statuses(tester, 3) == [200, 200, 429]
        assert await statuses(tester, 1, client_address="10.0.0.9") == [200]
        admitted, seconds = 2, []
        while len(seconds) < 12:
            await sleep(max(0.0, 1.0 - time.time() % 1.0) + 0.02)
            seconds.append(await statuses(tester, 2))
            if seconds[-1] == [429, 429]:
                break
        admitted += sum(found.count(200) for found in seconds)
        assert admitted == 19 and seconds[-1] == [429, 429], seconds  # the minute's 20 are spent
    finally:
        await close(tester)


@pytest_twisted.ensureDeferred
async def test_draft_headers_and_shadow_mode(redis: RedisServer) -> None:
    fresh_window(3600, 30)
    options = {"ratelimitBasic": {"anonymousLimits": per(1, "HOUR")}}
    server = {"ratelimitServer": {"enableXRatelimitHeaders": True}}
    tester = await make(config(options, settings=server, redis=redis.address))
    try:
        await statuses(tester, 1)
        refused = await tester.request("GET", "http://a.example/")
        headers = dict(refused.response_headers)
        assert refused.status == 429
        assert headers[b"x-ratelimit-limit"] == b"1, 1;w=3600"
        assert headers[b"x-ratelimit-remaining"] == b"0"
        assert 0 < int(headers[b"x-ratelimit-reset"]) <= 3600
    finally:
        await close(tester)
    shadow = await make(config(options, settings={"ratelimitServer": {"shadowMode": True}}, redis=redis.address))
    try:
        assert await statuses(shadow, 3, client_address="10.0.0.3") == [200, 200, 200]
        keys = redis.command("KEYS", "twistgw:rl:*10.0.0.3*").split()
        assert len(keys) == 1 and redis.command("GET", keys[0]) == "3"  # counted all the same
    finally:
        await close(shadow)


def sample(name: str, **labels: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest_twisted.ensureDeferred
async def test_metrics_per_rule_and_outcome(redis: RedisServer) -> None:
    """The /metrics counters of docs/ratelimit.md: each rule check by rule
    (as configured, never a request's value) and outcome, the script calls
    to Redis (one per reactor turn's batch) and the counters they bumped."""
    fresh_window(3600, 30)
    rule = {"plugin": "ratelimitBasic", "rule": "basic:default/vs:anonymous"}

    def decisions(outcome: str) -> float:
        return sample("twistgw_ratelimit_decisions_total", outcome=outcome, **rule)

    def commands(outcome: str) -> float:
        return sample("twistgw_ratelimit_redis_commands_total", server=redis.address, outcome=outcome)

    options = {"ratelimitBasic": {"anonymousLimits": per(1, "HOUR")}}
    before = {o: decisions(o) for o in ("ok", "over_limit", "shadow_over_limit")}
    failed_open = {"plugin": "ratelimitBasic", "rule": "redis", "outcome": "redis_failed_open"}
    before["redis_failed_open"] = sample("twistgw_ratelimit_decisions_total", **failed_open)
    sent, bumped = commands("ok"), sample("twistgw_ratelimit_redis_increments_total", server=redis.address)
    tester = await make(config(options, redis=redis.address))
    try:
        assert await statuses(tester, 3, client_address="10.7.0.1") == [200, 429, 429]
    finally:
        await close(tester)
    assert (decisions("ok") - before["ok"], decisions("over_limit") - before["over_limit"]) == (1, 2)
    # three requests in one turn: one script call, one counter (summed)
    assert commands("ok") - sent == 1
    assert sample("twistgw_ratelimit_redis_increments_total", server=redis.address) - bumped == 1
    shadow = await make(config(options, settings={"ratelimitServer": {"shadowMode": True}}, redis=redis.address))
    try:
        assert await statuses(shadow, 3, client_address="10.7.0.2") == [200, 200, 200]
    finally:
        await close(shadow)
    assert decisions("shadow_over_limit") - before["shadow_over_limit"] == 2
    failed = commands("failed")
    down = await make(redis_down_config(redis.address, False))
    try:
        redis.stop()
        assert (await timed(down, "10.7.0.3"))[0] == 200
    finally:
        await close(down)
    # a Redis failure is one per request, under rule="redis" (no rule was checked)
    assert sample("twistgw_ratelimit_decisions_total", **failed_open) - before["redis_failed_open"] == 1
    assert commands("failed") - failed == 1


def redis_down_config(address: str, deny: bool) -> str:
    options = {"ratelimitBasic": {"anonymousLimits": per(2, "HOUR")}}
    return config(options, settings={"ratelimitServer": {"denyOnFail": deny, "requestTimeout": "300ms"}},
                  redis=address)


async def timed(tester: ChainTester, client_address: str = "127.0.0.1") -> tuple[int, float]:
    start = time.monotonic()
    result = await tester.request("GET", "http://a.example/", client_address=client_address)
    return result.status, time.monotonic() - start


@pytest_twisted.ensureDeferred
async def test_redis_frozen_then_back(redis: RedisServer) -> None:
    fresh_window(3600, 60)
    open_, closed = await make(redis_down_config(redis.address, False)), await make(
        redis_down_config(redis.address, True))
    try:
        assert (await timed(open_))[0] == 200 and (await timed(closed))[0] == 200  # connected
        redis.freeze()
        try:
            status, took = await timed(open_)
            assert status == 200 and 0.25 < took < 1.0, (status, took)  # admitted within requestTimeout
            status, took = await timed(closed)
            assert status == 500 and 0.25 < took < 1.0, (status, took)
        finally:
            redis.thaw()
        await sleep(1.5)  # the hung connections were dropped; twistgw.redis connects again
        for i, tester in enumerate((open_, closed)):
            # a fresh bucket (the frozen batches may or may not have been counted after SIGCONT)
            found = [(await timed(tester, f"10.0.0.{i}"))[0] for _ in range(3)]
            assert found == [200, 200, 429], found  # counting again, limit enforced
    finally:
        await close(open_)
        await close(closed)


@pytest_twisted.ensureDeferred
async def test_redis_killed_then_back(redis: RedisServer) -> None:
    fresh_window(3600, 60)
    open_, closed = await make(redis_down_config(redis.address, False)), await make(
        redis_down_config(redis.address, True))
    try:
        assert (await timed(open_))[0] == 200 and (await timed(closed))[0] == 200
        redis.stop()
        for _ in range(3):
            status, took = await timed(open_)
            assert status == 200 and took < 1.0, (status, took)
            status, took = await timed(closed)
            assert status == 500 and took < 1.0, (status, took)
        redis.start()  # same port, empty
        await sleep(2.0)
        for i, tester in enumerate((open_, closed)):
            assert [(await timed(tester, f"10.0.0.{i}"))[0] for _ in range(3)] == [200, 200, 429]
        assert sorted(redis.command("KEYS", "twistgw:rl:*").split())[0].endswith(
            str(int(time.time()) // 3600 * 3600))  # hour windows, aligned
    finally:
        await close(open_)
        await close(closed)


@pytest_twisted.ensureDeferred
async def test_guide_rule_priority_messenger_whatsapp(redis: RedisServer) -> None:
    """The Rule Priority guide, request by request: Messenger 311 is refused
    on the third request, Whatsapp 311 on the second, Whatsapp 411 (the
    weighted rule, 100/minute) not for a while."""
    fresh_window(60, 10)
    settings = {"ratelimit": {"descriptors": [
        {"key": "type", "value": "Messenger", "rateLimit": per(2, "MINUTE")},
        {"key": "type", "value": "Whatsapp", "rateLimit": per(1, "MINUTE"),
         "descriptors": [{"key": "number", "value": "411", "weight": 1, "rateLimit": per(100, "MINUTE")}]}]}}
    tester = await make(config(TYPE_NUMBER_ACTIONS, settings=settings, redis=redis.address))
    try:
        assert await statuses(tester, 3, headers={"x-type": "Messenger", "x-number": "311"}) == [200, 200, 429]
        assert await statuses(tester, 2, headers={"x-type": "Whatsapp", "x-number": "311"}) == [200, 429]
        assert await statuses(tester, 20, headers={"x-type": "Whatsapp", "x-number": "411"}) == [200] * 20
    finally:
        await close(tester)


@pytest_twisted.ensureDeferred
async def test_claims_of_a_verified_token_with_the_real_jwt_plugin(redis: RedisServer) -> None:
    """Limits by the JWT ``sub`` (Gloo's metadata action) and by a claim the
    jwt plugin copies to a header (claimsToHeaders, as Gloo's guide secures
    its actions): a client's own copy of that header is removed, so it
    cannot move itself into another tenant's budget."""
    import jwt as pyjwt
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from twistgw_jwt import JwtPlugin
    from rl_helpers import PLUGINS

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()

    def bearer(sub: str, tenant: str) -> dict[str, str]:
        now = int(time.time())
        token = pyjwt.encode({"iss": "https://issuer.test", "sub": sub, "tenant": tenant, "iat": now,
                              "exp": now + 600}, key, algorithm="RS256")
        return {"Authorization": f"Bearer {token}"}

    fresh_window(3600, 30)
    options = {
        "jwt": {"providers": {"p": {"issuer": "https://issuer.test", "jwks": {"local": {"key": public}},
                                    "claimsToHeaders": [{"claim": "tenant", "header": "x-tenant"}]}}},
        "ratelimit": {"rateLimits": [
            {"actions": [{"metadata": {"descriptorKey": "userid", "metadataKey": {
                "key": "envoy.filters.http.jwt_authn", "path": [{"key": "principal"}, {"key": "sub"}]}}}]},
            {"actions": [{"requestHeaders": {"descriptorKey": "tenant", "headerName": "x-tenant"}}]}]}}
    settings = {"ratelimit": {"descriptors": [{"key": "userid", "rateLimit": per(2, "HOUR")},
                                              {"key": "tenant", "rateLimit": per(3, "HOUR")}]}}
    tester = ChainTester.from_yaml(config(options, settings=settings, redis=redis.address),
                                   PLUGINS + [("jwt", JwtPlugin)])
    try:
        assert await statuses(tester, 1) == [401]  # no token: refused by jwt, never counted
        assert await statuses(tester, 3, headers=bearer("alice", "acme")) == [200, 200, 429]  # 2 per user
        assert await statuses(tester, 2, headers=bearer("bob", "acme")) == [429, 429]  # acme's 3 are spent
        forged = dict(bearer("carol", "globex"), **{"x-tenant": "acme"})
        assert await statuses(tester, 2, headers=forged) == [200, 200]  # counted as globex, not acme
    finally:
        await close(tester)


#: The Envoy API guide's simple examples: (Settings descriptors, the route's rateLimits,
#: [(request headers, the statuses of that many requests)]).
SIMPLE_EXAMPLES = {
    "generic key": (
        [{"key": "generic_key", "value": "per-second", "rateLimit": per(2, "SECOND")}],
        [{"actions": [{"genericKey": {"descriptorValue": "per-second"}}]}],
        [({}, [200, 200, 429])]),
    "header values, any value": (
        [{"key": "type", "rateLimit": per(2, "MINUTE")}],
        [{"actions": [{"requestHeaders": {"descriptorKey": "type", "headerName": "x-type"}}]}],
        [({"x-type": "a"}, [200, 200, 429]), ({"x-type": "b"}, [200, 200, 429]), ({}, [200, 200, 200])]),
    "header values, one value": (
        [{"key": "type", "value": "example", "rateLimit": per(2, "MINUTE")}],
        [{"actions": [{"requestHeaders": {"descriptorKey": "type", "headerName": "x-type"}}]}],
        [({"x-type": "other"}, [200, 200, 200]), ({"x-type": "example"}, [200, 200, 429])]),
    "remote address": (
        [{"key": "remote_address", "rateLimit": per(2, "MINUTE")}],
        [{"actions": [{"remoteAddress": {}}]}],
        [({}, [200, 200, 429])]),
    "tuple of two headers": (
        [{"key": "type", "descriptors": [{"key": "number", "rateLimit": per(1, "MINUTE")}]}],
        [{"actions": [{"requestHeaders": {"descriptorKey": "type", "headerName": "x-type"}},
                      {"requestHeaders": {"descriptorKey": "number", "headerName": "x-number"}}]}],
        [({"x-type": "a", "x-number": "1"}, [200, 429]), ({"x-type": "a", "x-number": "2"}, [200, 429]),
         ({"x-type": "a"}, [200, 200])]),
    "nested limits": (
        [{"key": "type", "rateLimit": per(1, "MINUTE"),
          "descriptors": [{"key": "number", "rateLimit": per(1, "MINUTE")}]}],
        TYPE_NUMBER_ACTIONS["ratelimit"]["rateLimits"],
        [({"x-type": "a"}, [200, 429]), ({"x-type": "b", "x-number": "1"}, [200, 429])]),
    "method and address": (
        [{"key": "remote_address", "rateLimit": per(5, "MINUTE")},
         {"key": "method", "value": "GET", "descriptors": [{"key": "remote_address", "rateLimit": per(2, "MINUTE")}]}],
        [{"actions": [{"remoteAddress": {}}]},
         {"actions": [{"requestHeaders": {"descriptorKey": "method", "headerName": ":method"}},
                      {"remoteAddress": {}}]}],
        [({}, [200, 200, 429])]),
}


@pytest.mark.parametrize("name", list(SIMPLE_EXAMPLES))
@pytest_twisted.ensureDeferred
async def test_envoy_api_guide_examples(redis: RedisServer, name: str) -> None:
    descriptors, rate_limits, steps = SIMPLE_EXAMPLES[name]
    fresh_window(60, 10)
    if name == "generic key":
        fresh_window(1, 0.5)
    tester = await make(config({"ratelimit": {"rateLimits": rate_limits}},
                               settings={"ratelimit": {"descriptors": descriptors}}, redis=redis.address))
    try:
        for headers, expected in steps:
            found = [(await tester.request("GET", "http://a.example/", headers=headers)).status for _ in expected]
            assert found == expected, (headers, found)
    finally:
        await close(tester)


@pytest_twisted.ensureDeferred
async def test_guide_rate_limit_configs(redis: RedisServer) -> None:
    """The RateLimitConfigs guide: global-limit (4/minute over everything)
    and per-upstream-counter (3/minute per upstream) on the virtual host;
    echo-1 is refused on the fourth request; after the window, two to
    echo-1 and then echo-2 is refused on its third (the global 4 are spent)."""
    from rl_helpers import rate_limit_config, route, upstream

    fresh_window(60, 10)
    configs = [
        rate_limit_config("global-limit", {
            "descriptors": [{"key": "generic_key", "value": "count", "rateLimit": per(4, "MINUTE")}],
            "rateLimits": [{"actions": [{"genericKey": {"descriptorValue": "count"}}]}]}),
        rate_limit_config("per-upstream-counter", {
            "descriptors": [{"key": "destination_cluster", "rateLimit": per(3, "MINUTE")}],
            "rateLimits": [{"actions": [{"destinationCluster": {}}]}]}),
    ]
    options = {"rateLimitConfigs": {"refs": [{"name": "global-limit", "namespace": "gloo-system"},
                                             {"name": "per-upstream-counter", "namespace": "gloo-system"}]}}
    routes = [route("/echo-1", upstream="gloo-system/echo-1"), route("/echo-2", upstream="gloo-system/echo-2")]
    text = config(options, routes, redis=redis.address, name="echo", namespace="gloo-system",
                  extra=[*configs, upstream("echo-1"), upstream("echo-2")])
    tester = await make(text)
    try:
        assert await statuses(tester, 4, "http://a.example/echo-1") == [200, 200, 200, 429]
        redis.command("FLUSHALL")  # "wait for a minute for the counter to reset"
        assert await statuses(tester, 2, "http://a.example/echo-1") == [200, 200]
        assert await statuses(tester, 3, "http://a.example/echo-2") == [200, 200, 429]
    finally:
        await close(tester)
