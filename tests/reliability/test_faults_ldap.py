"""The directory (a real OpenLDAP slapd) down at start, killed under
concurrent load, frozen, and back, through a real gateway: never a 2xx for a
protected route while it cannot answer, 503 with an empty body, recovery
without restarting the gateway."""

from __future__ import annotations

import time
from typing import Any

import pytest_twisted
from support.http import http_request, sleep
from rel_helpers import (BAD_PW, basic, config_yaml, fd_count, rss_bytes, run_load, settle_resources,
                         summary, until, warm)
from slapd import free_port
from twisted.internet import defer, threads

REQUESTS = [
    ("alice", "/ldap/pets", basic("alice", "alice-pw")),    # a manager: 200
    ("carol", "/ldap/pets", basic("carol", "carol-pw")),    # in no allowed group: 403
    ("badpw", "/ldap/pets", basic("alice", BAD_PW)),        # wrong password: 401
    ("open", "/open/pets", None),                            # no auth: 200
]
EXPECTED_UP = {"alice": 200, "carol": 403, "badpw": 401, "open": 200}


async def status_of(gw: Any, kind: str) -> tuple[int, bytes]:
    _, path, headers = next(r for r in REQUESTS if r[0] == kind)
    r = await http_request("GET", gw.url(path), headers=headers)
    return r.status, r.body


async def assert_all_up(gw: Any) -> None:
    for kind, want in EXPECTED_UP.items():
        got = await status_of(gw, kind)
        assert got[0] == want, (kind, got)


@pytest_twisted.ensureDeferred
async def test_down_at_start_503_then_recovers_without_restart(
        backend: Any, config_dir: Any, gateway: Any, slapd_server: Any) -> None:
    ds = slapd_server(start=False, port=free_port())
    gw = gateway(config_dir(config_yaml(backend.port, ldap_address=ds.url)), load_entry_points=True)
    for kind in ("alice", "carol", "badpw"):
        r = await http_request("GET", gw.url("/ldap/pets"), headers=next(x[2] for x in REQUESTS if x[0] == kind))
        assert (r.status, r.body) == (503, b""), kind
    # Credentials that cannot be valid are refused without the directory.
    r = await http_request("GET", gw.url("/ldap/pets"), headers=basic("", "x"))
    assert r.status == 401
    assert (await status_of(gw, "open"))[0] == 200
    assert [r.path for r in backend.requests] == [b"/open/pets"]

    await threads.deferToThread(ds.start)

    async def recovered() -> bool:
        return (await status_of(gw, "alice"))[0] == 200

    assert await until(recovered, timeout=5.0) < 4.0
    await assert_all_up(gw)


@pytest_twisted.ensureDeferred
async def test_killed_under_concurrent_load_never_admits_and_recovers(
        backend: Any, config_dir: Any, gateway: Any, slapd_server: Any) -> None:
    ds = slapd_server()
    gw = gateway(config_dir(config_yaml(backend.port, ldap_address=ds.url)), load_entry_points=True)
    await assert_all_up(gw)
    await warm(gw.url, REQUESTS, workers=8)
    fds, rss = fd_count(), rss_bytes()

    done = [False]
    running = run_load(gw.url, REQUESTS, workers=8, stop=lambda: done[0], max_requests=4000)
    await sleep(0.7)
    ds.kill()  # SIGKILL: pooled connections reset, no goodbye
    killed_at = time.monotonic()
    await sleep(1.5)
    restarting_at = time.monotonic()
    await threads.deferToThread(ds.start)

    async def recovered() -> bool:
        return (await status_of(gw, "alice"))[0] == 200

    await until(recovered, timeout=5.0)
    await sleep(0.5)
    done[0] = True
    result = await running
    info = summary(result.outcomes)

    assert all(o.status is not None for o in result.outcomes), info
    allowed = {"alice": {200, 503}, "carol": {403, 503}, "badpw": {401, 503}, "open": {200}}
    for o in result.outcomes:
        assert o.status in allowed[o.kind], (o, info)
        if o.status == 503:
            assert o.body == b""
    during = [o for o in result.outcomes
              if o.kind != "open" and o.started > killed_at and o.ended < restarting_at]
    assert len(during) >= 6, info
    assert {o.status for o in during} == {503}, info
    assert any(o.status == 200 for o in result.of("alice") if o.started > restarting_at), info
    # Every kind was answered before the kill too.
    assert any(o.status == 200 for o in result.of("alice") if o.ended < killed_at), info

    await assert_all_up(gw)
    await warm(gw.url, REQUESTS, workers=8)
    await settle_resources(fds)
    assert rss_bytes() - rss < 30 * 1024 * 1024


@pytest_twisted.ensureDeferred
async def test_frozen_directory_is_503_within_request_timeout_then_recovers(
        backend: Any, config_dir: Any, gateway: Any, slapd_server: Any) -> None:
    ds = slapd_server()
    gw = gateway(config_dir(config_yaml(backend.port, ldap_address=ds.url,
                                        ldap_options={"request_timeout": "400ms"})),
                 load_entry_points=True)
    await assert_all_up(gw)
    fds = fd_count()
    ds.pause()  # SIGSTOP: connections stay open, nothing answers
    try:
        t0 = time.monotonic()
        results = await defer.gatherResults(
            [defer.ensureDeferred(status_of(gw, k)) for k in ["alice", "carol", "badpw"] * 3])
        took = time.monotonic() - t0
        assert {r for r in results} == {(503, b"")}, results
        assert took < 2.5, f"9 checks against a frozen directory took {took:.2f}s"
        t0 = time.monotonic()
        assert (await status_of(gw, "open"))[0] == 200
        assert time.monotonic() - t0 < 0.3  # routes without LDAP are not held up
    finally:
        ds.resume()

    async def recovered() -> bool:
        return (await status_of(gw, "alice"))[0] == 200

    await until(recovered, timeout=5.0)
    await assert_all_up(gw)
    await settle_resources(fds)
