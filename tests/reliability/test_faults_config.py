"""Configuration faults while the gateway watches its directory: broken edits
under load (never a 2xx on a protected route; the last good configuration
keeps serving), a file deleted, the directory emptied or removed."""

from __future__ import annotations

import os
from typing import Any

import pytest_twisted
import yaml
from support.http import http_request, sleep, wait_for
from rel_helpers import (bearer, config_yaml, fd_count, jwt_local, route, rss_bytes, run_load,
                         settle_resources, summary, token, warm, write_atomic)

POLL = 0.05

REQUESTS = [
    ("nojwt", "/jwt/pets", None),                  # protected, no token: 401
    ("badjwt", "/jwt/pets", bearer("a.b.c")),       # protected, bad token: 401
    ("jwt", "/jwt/pets", bearer(token())),          # protected, valid token: 200
    ("rbac-deny", "/rbac/pets", bearer(token())),   # valid token, no role claim: 403
    ("open", "/open/pets", None),                   # no auth: 200
]
ALWAYS = {"nojwt": {401}, "badjwt": {401}, "jwt": {200}, "rbac-deny": {403}, "open": {200}}


async def ready_text(gw: Any) -> tuple[int, bytes]:
    r = await http_request("GET", gw.admin_url("/readyz"))
    return r.status, r.body


async def settle_poll() -> None:
    await sleep(POLL * 4)


def broken_edits(backend_port: int) -> list[tuple[str, str]]:
    """Invalid configurations, each of which would open ``/jwt`` if any part
    of it were applied."""
    good = config_yaml(backend_port, jwt=jwt_local(), rbac=True)
    docs = list(yaml.safe_load_all(good))
    vs = docs[-1]

    def without_jwt_plus(mutate: Any) -> str:
        d = [dict(x) for x in docs]
        v = yaml.safe_load(yaml.safe_dump(vs))
        for r in v["spec"]["virtualHost"]["routes"]:
            r.pop("options", None)  # every route open...
        mutate(v)  # ...but the document is invalid elsewhere
        d[-1] = v
        return yaml.safe_dump_all(d)

    def bad_rbac(v: Any) -> None:
        v["spec"]["virtualHost"]["options"] = {"rbac": {"policies": {"p": {"permissions": 5}}}}

    def bad_jwt_key(v: Any) -> None:
        v["spec"]["virtualHost"]["options"] = {"jwt": {"providers": {"p": {
            "issuer": "x", "jwks": {"local": {"key": "-----BEGIN PUBLIC KEY-----\nnot a key\n"}}}}}}

    def bad_upstream(v: Any) -> None:
        v["spec"]["virtualHost"]["routes"][0]["routeAction"]["single"]["upstream"]["name"] = "nowhere"

    def unknown_plugin(v: Any) -> None:
        v["spec"]["virtualHost"]["routes"][0]["options"] = {"nosuchplugin": {"on": True}}

    return [
        ("yaml syntax", good.replace("routes:", "routes: [", 1)),
        ("open routes + bad rbac", without_jwt_plus(bad_rbac)),
        ("open routes + bad jwt key", without_jwt_plus(bad_jwt_key)),
        ("open routes + unknown upstream", without_jwt_plus(bad_upstream)),
        ("open routes + unknown plugin", without_jwt_plus(unknown_plugin)),
        ("not a mapping", "- just\n- a list\n"),
        ("binary", "\x00\x01\x02"),
    ]


@pytest_twisted.ensureDeferred
async def test_broken_edits_under_load_never_open_protected_routes(
        backend: Any, config_dir: Any, gateway: Any) -> None:
    d = config_dir(config_yaml(backend.port, jwt=jwt_local(), rbac=True))
    gw = gateway(d, load_entry_points=True, poll_interval=POLL)
    await warm(gw.url, REQUESTS, workers=6)
    fds, rss = fd_count(), rss_bytes()
    generation = gw.service.generation

    done = [False]
    running = run_load(gw.url, REQUESTS, workers=6, stop=lambda: done[0], max_requests=6000)
    for what, text in broken_edits(backend.port):
        write_atomic(d, "config.yaml", text)
        await settle_poll()
        assert gw.service.generation == generation, what
        status, body = await ready_text(gw)
        assert status == 200 and b"last change rejected" in body, (what, body)
    # A good edit (adds /new) is then picked up.
    write_atomic(d, "config.yaml", config_yaml(backend.port, jwt=jwt_local(), rbac=True,
                                               extra_routes=[route("/new")]))
    await wait_for(lambda: gw.service.generation == generation + 1)
    assert (await http_request("GET", gw.url("/new/x"))).status == 200
    assert (await ready_text(gw)) == (200, b"ready: configuration generation %d\n" % (generation + 1))
    await sleep(0.2)
    done[0] = True
    result = await running
    info = summary(result.outcomes)
    assert len(result.outcomes) > 100, info
    for o in result.outcomes:
        assert o.status in ALWAYS[o.kind], (o, info)
    await warm(gw.url, REQUESTS, workers=6)
    await settle_resources(fds)
    assert rss_bytes() - rss < 30 * 1024 * 1024


@pytest_twisted.ensureDeferred
async def test_deleted_files(backend: Any, config_dir: Any, gateway: Any) -> None:
    docs = list(yaml.safe_load_all(config_yaml(backend.port, jwt=jwt_local())))
    d = config_dir(yaml.safe_dump_all(docs[:-1]), name="10-upstreams.yaml")
    config_dir(yaml.safe_dump(docs[-1]), name="20-virtualservice.yaml", directory=d)
    gw = gateway(d, load_entry_points=True, poll_interval=POLL)
    generation = gw.service.generation
    assert (await http_request("GET", gw.url("/jwt/x"))).status == 401

    # The upstream file goes: the VirtualService now names a missing
    # Upstream, so the change is rejected and the last good one serves.
    os.remove(os.path.join(d, "10-upstreams.yaml"))
    await settle_poll()
    assert gw.service.generation == generation
    assert (await http_request("GET", gw.url("/open/x"))).status == 200
    assert (await http_request("GET", gw.url("/jwt/x"))).status == 401
    assert b"last change rejected" in (await ready_text(gw))[1]

    # Back, then the VirtualService file goes: a valid configuration without
    # virtual services: every request is 404 (fail closed).
    write_atomic(d, "10-upstreams.yaml", yaml.safe_dump_all(docs[:-1]))
    await wait_for(lambda: gw.service.generation == generation + 1)
    os.remove(os.path.join(d, "20-virtualservice.yaml"))
    await wait_for(lambda: gw.service.generation == generation + 2)
    for path in ("/open/x", "/jwt/x"):
        r = await http_request("GET", gw.url(path), headers=bearer(token()))
        assert (r.status, r.body) == (404, b"")


@pytest_twisted.ensureDeferred
async def test_directory_removed_keeps_last_good(backend: Any, config_dir: Any, gateway: Any) -> None:
    d = config_dir(config_yaml(backend.port, jwt=jwt_local()))
    gw = gateway(d, load_entry_points=True, poll_interval=POLL)
    generation = gw.service.generation
    os.rename(d, d + ".moved")
    await settle_poll()
    assert gw.service.generation == generation
    assert (await http_request("GET", gw.url("/open/x"))).status == 200
    assert (await http_request("GET", gw.url("/jwt/x"))).status == 401
    assert b"last change rejected" in (await ready_text(gw))[1]
    os.rename(d + ".moved", d)
    # Same files back: nothing to swap, but serving continues.
    await settle_poll()
    assert (await http_request("GET", gw.url("/jwt/x"), headers=bearer(token()))).status == 200


@pytest_twisted.ensureDeferred
async def test_emptied_directory_is_rejected_as_documented(
        backend: Any, config_dir: Any, gateway: Any) -> None:
    """A directory with no configuration file at all is rejected like an
    unreadable one; the last good configuration keeps serving."""
    d = config_dir(config_yaml(backend.port))
    gw = gateway(d, poll_interval=POLL)
    generation = gw.service.generation
    for name in os.listdir(d):
        os.remove(os.path.join(d, name))
    await settle_poll()
    assert gw.service.generation == generation
    assert (await http_request("GET", gw.url("/open/x"))).status == 200
