"""The LDAP flow against a real OpenLDAP slapd: statuses, bad inputs, the
service account, faults and recovery, the decision cache, concurrency."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
import pytest_twisted
from ldap_helpers import SA_SETTINGS, basic, ldap_config, ldap_state, make_tester, reloaded
from prometheus_client import REGISTRY
from slapd import SERVICE_DN, USERS
from twisted.internet import defer, reactor, task


URL = "http://api.example.com/pets"
ALICE_DN = "uid=alice,ou=people,dc=example,dc=org"


def sleep(seconds: float) -> defer.Deferred:
    return task.deferLater(reactor, seconds, lambda: None)


def assert_empty(result: Any, status: int) -> None:
    assert result.status == status, (result.status, result.deny)
    assert result.body == b""
    assert result.deny is not None
    names = {n.lower() for n, _ in result.response_headers}
    assert b"content-type" not in names


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# ---------------------------------------------------------------------------
# Every status of the flow
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_member_of_allowed_group_is_admitted(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0))
    result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
    assert result.status == 200 and result.forwarded
    assert result.ctx.principal == "alice"
    assert result.ctx.state["extauth"] == {"user": "alice", "authConfig": "default/ldap",
                                           "identities": {"config_0": "alice"}, "state": {}}
    assert result.decided_by is None


@pytest_twisted.ensureDeferred
async def test_bare_host_port_address(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.address, cacheTtl=0))
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200


@pytest_twisted.ensureDeferred
async def test_missing_and_malformed_authorization_is_401_empty(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0))
    before = slapd_open.bind_count()
    cases: list[Any] = [
        None,
        {"Authorization": "Bearer abc"},
        {"Authorization": "Basic"},
        {"Authorization": "Basic "},
        {"Authorization": "Basic !!!notbase64"},
        {"Authorization": "Basic " + base64.b64encode(b"alice-no-colon").decode()},
        {"Authorization": "Basic " + base64.b64encode(b"al\xffice:alice-pw").decode()},
        {"Authorization": "Basic " + base64.b64encode(b"alice:pw\xff").decode()},
        {"Authorization": "Basic " + base64.b64encode(b"alice:alice-pw").decode()[:-1]},
        [("Authorization", "Basic " + base64.b64encode(b"alice:alice-pw").decode())] * 2,
    ]
    for headers in cases:
        result = await tester.request("GET", URL, headers=headers)
        assert_empty(result, 401)
        assert (b"www-authenticate", b'Basic realm="twistgw", charset="UTF-8"') in result.response_headers
        assert result.decided_by == "extauth"
    assert slapd_open.bind_count() == before


@pytest_twisted.ensureDeferred
async def test_scheme_is_case_insensitive(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0))
    token = base64.b64encode(b"alice:alice-pw").decode()
    for scheme in ("basic", "BASIC", "bAsIc"):
        assert (await tester.request("GET", URL, headers={"Authorization": f"{scheme} {token}"})).status == 200


@pytest_twisted.ensureDeferred
async def test_wrong_password_and_unknown_user_are_401(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0))
    assert_empty(await tester.request("GET", URL, headers=basic("alice", "wrong")), 401)
    assert_empty(await tester.request("GET", URL, headers=basic("mallory", "x")), 401)


@pytest_twisted.ensureDeferred
async def test_not_in_allowed_group_is_403(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0))
    assert_empty(await tester.request("GET", URL, headers=basic("bob", "bob-pw")), 403)
    assert_empty(await tester.request("GET", URL, headers=basic("carol", "carol-pw")), 403)


@pytest_twisted.ensureDeferred
async def test_entry_not_matching_search_filter_is_401(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, searchFilter="(uid=bob)"))
    assert_empty(await tester.request("GET", URL, headers=basic("alice", "alice-pw")), 401)


@pytest_twisted.ensureDeferred
async def test_disabled_route_needs_no_credentials(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0))
    result = await tester.request("GET", "http://api.example.com/open/x")
    assert result.status == 200


@pytest_twisted.ensureDeferred
async def test_disable_group_checking_admits_any_valid_bind(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, allowedGroups=[],
                                     disableGroupChecking=True))
    assert (await tester.request("GET", URL, headers=basic("carol", "carol-pw"))).status == 200
    assert_empty(await tester.request("GET", URL, headers=basic("carol", "nope")), 401)


@pytest_twisted.ensureDeferred
async def test_every_config_must_pass_in_order(slapd_open: Any) -> None:
    developers = "cn=developers,ou=groups,dc=example,dc=org"
    tester = make_tester(ldap_config(slapd_open.url, {"allowedGroups": [developers]}, cacheTtl=0))
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    # eve is a manager but not a developer: the second config refuses
    result = await tester.request("GET", URL, headers=basic("eve", "pa:ss:wd"))
    assert_empty(result, 403)
    assert "configs[1]" in result.deny.reason


@pytest_twisted.ensureDeferred
async def test_membership_attribute_name_any_case(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, membershipAttributeName="MEMBEROF"))
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200


@pytest_twisted.ensureDeferred
async def test_group_dns_compared_as_dns(slapd_open: Any) -> None:
    for spelled in ("CN=Managers,OU=Groups,DC=Example,DC=ORG",
                    "cn = managers , ou=groups,  dc=example,dc=org",
                    "cn=man\\61gers,ou=groups,dc=example,dc=org",
                    "2.5.4.3=managers,ou=groups,dc=example,dc=org"):
        tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0, allowedGroups=[spelled]))
        result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
        assert result.status == 200, spelled
    # a string prefix of the group is not the group
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0,
                                     allowedGroups=["cn=managers,ou=groups,dc=example"]))
    assert_empty(await tester.request("GET", URL, headers=basic("alice", "alice-pw")), 403)


# ---------------------------------------------------------------------------
# SECURITY-CASES.md: LDAP
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_empty_password_is_refused_without_binding(slapd_open: Any) -> None:
    # slapd_open has `allow bind_anon_dn`: binding alice with an empty
    # password would succeed anonymously, and anonymous may read memberOf,
    # so anything but a refusal before binding would admit her.
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0))
    before = slapd_open.binds()
    for headers in (basic("alice", ""), basic("", "alice-pw"), basic("", ""), basic(" , ", "x"),
                    basic(",+=", "alice-pw")):
        assert_empty(await tester.request("GET", URL, headers=headers), 401)
    await sleep(0.05)
    assert slapd_open.binds() == before


@pytest_twisted.ensureDeferred
async def test_the_permissive_directory_would_admit_an_empty_password(slapd_open: Any) -> None:
    """Proves the previous test can fail: an unauthenticated bind succeeds."""
    from twistgw_ldap._client import bind, connect

    client = await connect(reactor, _target(slapd_open), 2)
    try:
        assert await bind(client, ALICE_DN, b"", 2, reactor) == 0
    finally:
        client.abort()


def _target(server: Any) -> Any:
    from twistgw_ldap._model import Target

    return Target("127.0.0.1", server.port, "ldap")


@pytest.mark.parametrize("user", [
    "alice*", "al*ice", "alice)(uid=*", "*)(|(uid=*", "al\\ice", "al\x00ice", "al,ice", "al+ice",
    "al=ice", 'a"l<i>c;e#', " alice ", "#alice", "alice,ou=admins", "alice\\2c", "(alice)",
])
@pytest_twisted.ensureDeferred
async def test_injection_cannot_change_the_dn(slapd_open: Any, user: str) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0))
    before = len(slapd_open.binds())
    result = await tester.request("GET", URL, headers=basic(user, "alice-pw"))
    await sleep(0.05)
    bound = slapd_open.binds()[before:]
    cleaned = "".join(c for c in user if c not in ',+"\\<>;=#*()\x00').strip()
    expected_dn = f"uid={cleaned},ou=people,dc=example,dc=org"
    assert bound == [expected_dn], bound
    # the only way in is to be exactly alice after cleaning
    assert result.status == (200 if cleaned == "alice" else 401)
    if result.status == 200:
        assert result.ctx.principal == "alice"


@pytest_twisted.ensureDeferred
async def test_colon_in_password_splits_at_first_colon(slapd_open: Any) -> None:
    assert USERS["eve"][0] == "pa:ss:wd"
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0))
    assert (await tester.request("GET", URL, headers=basic("eve", "pa:ss:wd"))).status == 200
    # "eve:pa:ss:wd" is user "eve", password "pa:ss:wd" -- never user "eve:pa"
    token = base64.b64encode(b"eve:pa:ss:wd").decode()
    assert (await tester.request("GET", URL, headers={"Authorization": "Basic " + token})).status == 200
    assert_empty(await tester.request("GET", URL, headers=basic("eve", "pa")), 401)
    assert_empty(await tester.request("GET", URL, headers=basic("eve", "pa:ss")), 401)


@pytest_twisted.ensureDeferred
async def test_10kb_inputs_are_a_fast_401_without_binding(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0))
    before = slapd_open.bind_count()
    started = time.monotonic()
    for user, pw in (("a" * 10240, "alice-pw"), ("alice", "p" * 10240), ("a" * 10240, "p" * 10240),
                     ("a" * 300, "alice-pw"), ("alice", "p" * 1100)):
        assert_empty(await tester.request("GET", URL, headers=basic(user, pw)), 401)
    assert time.monotonic() - started < 0.5
    await sleep(0.05)
    assert slapd_open.bind_count() == before


# ---------------------------------------------------------------------------
# The service account (ACL hides memberOf from users)
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_without_service_account_hidden_membership_is_403(slapd_strict: Any) -> None:
    tester = make_tester(ldap_config(slapd_strict.url, cacheTtl=0))
    assert_empty(await tester.request("GET", URL, headers=basic("alice", "alice-pw")), 403)


@pytest_twisted.ensureDeferred
async def test_service_account_reads_membership(slapd_strict: Any) -> None:
    tester = make_tester(ldap_config(slapd_strict.url, cacheTtl=0, groupLookupSettings=SA_SETTINGS))
    before = len(slapd_strict.binds())
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    assert_empty(await tester.request("GET", URL, headers=basic("bob", "bob-pw")), 403)
    # the user's password is still checked first: no service-account bind for a wrong one
    assert_empty(await tester.request("GET", URL, headers=basic("alice", "bad")), 401)
    await sleep(0.05)
    bound = slapd_strict.binds()[before:]
    assert bound == [ALICE_DN, SERVICE_DN, "uid=bob,ou=people,dc=example,dc=org", SERVICE_DN, ALICE_DN]


@pytest_twisted.ensureDeferred
async def test_bad_service_account_secret_is_500(slapd_strict: Any) -> None:
    tester = make_tester(ldap_config(slapd_strict.url, cacheTtl=0, groupLookupSettings=SA_SETTINGS,
                                     secret_password="wrong"))
    result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
    assert_empty(result, 500)
    assert "service account" in result.deny.reason and "wrong" not in result.deny.reason
    assert "alice-pw" not in result.deny.reason
    # bad user credentials are still a 401, decided before the service account
    assert_empty(await tester.request("GET", URL, headers=basic("alice", "bad")), 401)


# ---------------------------------------------------------------------------
# Directory faults
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_directory_down_at_start_then_up(slapd_factory: Any) -> None:
    server = slapd_factory()
    server.stop()
    tester = make_tester(ldap_config(server.url, cacheTtl=60))
    for _ in range(2):
        result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
        assert_empty(result, 503)
        assert "connection refused" in result.deny.reason
    # other routes are unaffected
    assert (await tester.request("GET", "http://api.example.com/open/x")).status == 200
    server.start()
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200


@pytest_twisted.ensureDeferred
async def test_directory_killed_mid_run_then_recovers(slapd_factory: Any) -> None:
    server = slapd_factory()
    tester = make_tester(ldap_config(server.url, cacheTtl=0))
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    server.kill()
    await sleep(0.05)
    result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
    assert_empty(result, 503)
    server.start()
    # pooled connections to the dead process are dropped, new ones are made
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    assert_empty(await tester.request("GET", URL, headers=basic("bob", "bob-pw")), 403)


@pytest_twisted.ensureDeferred
async def test_hung_directory_is_503_within_the_timeout(slapd_factory: Any) -> None:
    server = slapd_factory()
    tester = make_tester(ldap_config(server.url, cacheTtl=0, requestTimeout="300ms",
                                     connectTimeout="300ms"))
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    server.pause()
    try:
        started = time.monotonic()
        result = await tester.request("GET", URL, headers=basic("alice", "alice-pw"))
        elapsed = time.monotonic() - started
        assert_empty(result, 503)
        assert "no answer within" in result.deny.reason
        assert elapsed < 1.5
        assert (await tester.request("GET", "http://api.example.com/open/x")).status == 200
    finally:
        server.resume()
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200


@pytest_twisted.ensureDeferred
async def test_faults_are_never_cached(slapd_factory: Any) -> None:
    server = slapd_factory()
    tester = make_tester(ldap_config(server.url, cacheTtl=60))
    server.stop()
    assert_empty(await tester.request("GET", URL, headers=basic("alice", "alice-pw")), 503)
    assert all(len(c) == 0 for c in ldap_state(tester).caches.values())
    server.start()
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200


# ---------------------------------------------------------------------------
# The decision cache
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_cache_hit_miss_and_expiry(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl="300ms"))
    hits = metric("twistgw_ldap_cache_total", result="hit")
    binds = slapd_open.bind_count()
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    await sleep(0.05)
    assert slapd_open.bind_count() == binds + 1
    for _ in range(3):
        assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
        assert_empty(await tester.request("GET", URL, headers=basic("bob", "bob-pw")), 403)
    await sleep(0.05)
    assert slapd_open.bind_count() == binds + 2  # alice once, bob once
    assert metric("twistgw_ldap_cache_total", result="hit") == hits + 5
    await sleep(0.35)  # expired
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    await sleep(0.05)
    assert slapd_open.bind_count() == binds + 3


@pytest_twisted.ensureDeferred
async def test_a_cached_config_before_an_uncached_one_counts_one_hit_a_request(slapd_open: Any) -> None:
    # configs[0] caches, configs[1] does not: a repeated request is answered
    # from the cache for the first and by the directory for the second, and
    # the first's hit is looked up (and counted) once, not again on the way
    # to the directory
    tester = make_tester(ldap_config(slapd_open.url, {"cacheTtl": 0}, cacheTtl=60))
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    hits = metric("twistgw_ldap_cache_total", result="hit")
    binds = slapd_open.bind_count()
    for _ in range(3):
        assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    await sleep(0.05)
    assert metric("twistgw_ldap_cache_total", result="hit") == hits + 3
    assert slapd_open.bind_count() == binds + 3  # configs[1], every time
    assert_empty(await tester.request("GET", URL, headers=basic("alice", "wrong")), 401)


@pytest_twisted.ensureDeferred
async def test_cached_success_never_admits_a_wrong_password(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=60))
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    for wrong in ("wrong", "alice-pw ", "ALICE-PW", "alice-p"):
        assert_empty(await tester.request("GET", URL, headers=basic("alice", wrong)), 401)
    # failures are not cached either: the right password still works
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200


@pytest_twisted.ensureDeferred
async def test_cache_holds_no_plaintext_password(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=60))
    assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    (cache,) = [c for c in ldap_state(tester).caches.values() if len(c)]
    text = repr(cache._entries).encode()
    assert b"alice-pw" not in text
    for (user, digest), _ in cache._entries.items():
        assert user == "alice" and b"alice-pw" not in digest and len(digest) == 32
    # nor does the memo of parsed Authorization values (keyed by a keyed hash of the value)
    header = basic("alice", "alice-pw")["Authorization"].encode()
    entries = ldap_state(tester).memos[True]._entries
    memo = repr(entries).encode()
    assert entries and b"alice-pw" not in memo and header not in memo and header.split()[1] not in memo


@pytest_twisted.ensureDeferred
async def test_cache_ttl_zero_disables(slapd_open: Any) -> None:
    tester = make_tester(ldap_config(slapd_open.url, cacheTtl=0))
    binds = slapd_open.bind_count()
    for _ in range(3):
        assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200
    await sleep(0.05)
    assert slapd_open.bind_count() == binds + 3


# ---------------------------------------------------------------------------
# Concurrency
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_150_concurrent_mixed_requests_all_correct(slapd_strict: Any) -> None:
    # No cache, a small pool, the service account: bind states would leak
    # between requests if connections were shared mid-operation.
    tester = make_tester(ldap_config(slapd_strict.url, cacheTtl=0, groupLookupSettings=SA_SETTINGS,
                                     pool={"maxSize": 4, "initialSize": 2}, requestTimeout="5s"))
    cases = [(("alice", "alice-pw"), 200), (("eve", "pa:ss:wd"), 200), (("bob", "bob-pw"), 403),
             (("carol", "carol-pw"), 403), (("alice", "bad"), 401), (("nobody", "x"), 401),
             (("alice", ""), 401)]
    plan = [cases[i % len(cases)] for i in range(150)]
    results = await defer.gatherResults([
        defer.Deferred.fromCoroutine(tester.request("GET", URL, headers=basic(*creds)))
        for creds, _ in plan
    ])
    got = [r.status for r in results]
    assert got == [want for _, want in plan]
    pool = ldap_state(tester).pools[tester.snapshot.plugin_compiled["extauth"][0].entries[0].checker.cfg.target]
    assert pool.size <= 4


# ---------------------------------------------------------------------------
# TLS: ldaps:// and StartTLS
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_ldaps_and_starttls_with_a_private_ca(slapd_factory: Any) -> None:
    server = slapd_factory(tls=True)
    ca = str(server.directory / "ca.pem")
    ldaps = f"ldaps://127.0.0.1:{server.tls_port}"
    for address, extra in ((ldaps, {}), (server.url, {"startTLS": True})):
        tester = make_tester(ldap_config(address, cacheTtl=0, tls={"caFile": ca, "serverName": "localhost"},
                                         **extra))
        assert (await tester.request("GET", URL, headers=basic("alice", "alice-pw"))).status == 200, address
        assert_empty(await tester.request("GET", URL, headers=basic("bob", "bob-pw")), 403)
        assert_empty(await tester.request("GET", URL, headers=basic("alice", "bad")), 401)
    # a certificate the CA does not vouch for, or another name: the
    # directory cannot be trusted, so no decision can be made → 503
    tester = make_tester(ldap_config(ldaps, cacheTtl=0))  # system trust store
    assert_empty(await tester.request("GET", URL, headers=basic("alice", "alice-pw")), 503)
    tester = make_tester(ldap_config(server.url, cacheTtl=0, startTLS=True,
                                     tls={"caFile": ca, "serverName": "ldap.other.org"}))
    assert_empty(await tester.request("GET", URL, headers=basic("alice", "alice-pw")), 503)


@pytest_twisted.ensureDeferred
async def test_reload_shrinking_the_pool_mid_flight(slapd_open: Any) -> None:
    """A reload that lowers pool.maxSize while requests hold connections: the
    surplus connections are closed on release, requests are unaffected, and
    nothing is logged as an unhandled error."""
    from twisted.logger import globalLogPublisher

    failures: list[Any] = []

    def observer(event: dict[str, Any]) -> None:
        if event.get("log_failure") is not None or event.get("isError"):
            failures.append(event)

    globalLogPublisher.addObserver(observer)
    try:
        big = make_tester(ldap_config(slapd_open.url, cacheTtl=0, pool={"maxSize": 16, "initialSize": 0}))
        pending = [defer.Deferred.fromCoroutine(big.request("GET", URL, headers=basic("alice", "alice-pw")))
                   for _ in range(48)]
        await sleep(0.005)
        small = reloaded(big, ldap_config(slapd_open.url, cacheTtl=0, pool={"maxSize": 2, "initialSize": 0}))
        results = await defer.gatherResults(pending)
        assert [r.status for r in results] == [200] * 48
        assert (await small.request("GET", URL, headers=basic("bob", "bob-pw"))).status == 403
        pool = ldap_state(small).pools[small.snapshot.plugin_compiled["extauth"][0].entries[0].checker.cfg.target]
        assert pool.max_size == 2 and pool.size <= 2
    finally:
        globalLogPublisher.removeObserver(observer)
    assert failures == []
