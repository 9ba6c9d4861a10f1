"""``Settings.spec.extauth.userIdHeader`` with the rate limits (issue 32
item 10), as Gloo's guides use it: extauth (here basicAuth) puts the
authenticated user's id in ``x-user-id``, and a ``requestHeaders`` action
on that header gives each user a budget of their own, counted in a real
``redis-server``, through a real gateway process. A client's own
``x-user-id`` never gets through: not to the rate limits (it cannot spend
or dodge someone's budget), not to the backend, on no route.
"""

from __future__ import annotations

import base64
import http.client
import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
import pytest_twisted
import yaml
from rl_helpers import PLUGINS, per

from support.process import TwistGateway
from support.redis import RedisServer

#: Gloo's basic-auth guide user (user / password), and a second one
USERS = {"user": ("TYiryv0/", "8BvzLUO9IfGPGGsPnAgSu1"), "ann": None}
LIMIT = 2


class Echo:
    """Answers 200 with the request's x-user-id header values, as JSON."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = json.dumps(self.headers.get_all("x-user-id") or []).encode()
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _apr1(password: str) -> tuple[str, str]:
    """(salt, hashedPassword) of ``openssl passwd -apr1``."""
    line = subprocess.run(["openssl", "passwd", "-apr1", password], check=True, capture_output=True,
                          text=True).stdout.strip()
    _, _, salt, hashed = line.split("$")
    return salt, hashed


def _config(redis: str, backend: int, ann: tuple[str, str], user_id_header: Any = "x-user-id",
            user: str = "user") -> str:
    users = {user: {"salt": USERS["user"][0], "hashedPassword": USERS["user"][1]},
             "ann": {"salt": ann[0], "hashedPassword": ann[1]}}
    action = {"rateLimits": [{"actions": [{"requestHeaders": {"headerName": "x-user-id", "descriptorKey": "userid"}}]}]}
    docs = [
        {"apiVersion": "gloo.solo.io/v1", "kind": "Upstream", "metadata": {"name": "echo", "namespace": "default"},
         "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": backend}]}}},
        {"apiVersion": "gateway.solo.io/v1", "kind": "VirtualService", "metadata": {"name": "vs", "namespace": "default"},
         "spec": {"virtualHost": {"domains": ["*"], "routes": [
             {"matchers": [{"prefix": "/open"}], "routeAction": {"single": {"upstream": {"name": "echo"}}}},
             {"matchers": [{"prefix": "/"}], "routeAction": {"single": {"upstream": {"name": "echo"}}},
              "options": {"extauth": {"configRef": {"name": "basic-auth", "namespace": "default"}},
                          "ratelimit": action}}]}}},
        {"apiVersion": "enterprise.gloo.solo.io/v1", "kind": "AuthConfig",
         "metadata": {"name": "basic-auth", "namespace": "default"},
         "spec": {"configs": [{"basicAuth": {"realm": "gloo", "apr": {"users": users}}}]}},
        {"apiVersion": "gloo.solo.io/v1", "kind": "Settings", "metadata": {"name": "default", "namespace": "default"},
         "spec": {"extauth": {"userIdHeader": user_id_header},
                  "ratelimit": {"descriptors": [{"key": "userid", "rateLimit": per(LIMIT, "HOUR")}]},
                  "ratelimitServer": {"redis": {"address": redis}}}},
    ]
    return yaml.safe_dump_all(docs, sort_keys=False)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: Any) -> Iterator[int]:
    tmp: Path = tmp_path_factory.mktemp("user-id")
    redis = RedisServer(tmp / "redis").start()
    echo = Echo()
    (tmp / "config").mkdir()
    (tmp / "config" / "gateway.yaml").write_text(_config(redis.address, echo.port, _apr1("ann-pw")))
    left = 3600 - time.time() % 3600
    if left < 30:
        time.sleep(left + 0.1)  # one hour's window for the whole module
    gw = TwistGateway(tmp, str(tmp / "config"))
    try:
        with gw:
            yield gw.port
    finally:
        echo.close()
        redis.stop()


def get(port: int, path: str = "/api", user: str | None = None, password: str = "",
        extra: dict[str, str] | None = None) -> tuple[int, Any]:
    headers = {"Host": "a.example", **(extra or {})}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        body = r.read()
        return r.status, json.loads(body) if r.status == 200 else body
    finally:
        conn.close()


def test_each_user_has_a_budget_of_their_own(gateway: int) -> None:
    first = [get(gateway, user="user", password="password") for _ in range(LIMIT + 1)]
    assert [s for s, _ in first] == [200] * LIMIT + [429]
    assert first[0][1] == ["user"]  # the backend sees who extauth admitted
    # ann's budget is untouched by user's, and a forged x-user-id cannot move either
    forged = {"x-user-id": "user"}
    ann = [get(gateway, user="ann", password="ann-pw", extra=forged) for _ in range(LIMIT)]
    assert ann == [(200, ["ann"])] * LIMIT
    assert get(gateway, user="ann", password="ann-pw", extra={"x-user-id": "nobody"})[0] == 429


def test_a_client_never_sets_the_header(gateway: int) -> None:
    # refused before any counting, and not sent on where extauth does not run
    assert get(gateway, extra={"x-user-id": "user"})[0] == 401
    assert get(gateway, path="/open", extra={"x-user-id": "user", "X-User-Id": "user"}) == (200, [])


def _tester(user_id_header: Any, user: str = "user") -> Any:
    from twistgw_authtypes import AuthTypesPlugin
    from twistgw_extauth import ExtAuthPlugin

    from twistgw.testing import ChainTester

    text = _config("127.0.0.1:1", 9, USERS["user"], user_id_header, user)
    return ChainTester.from_yaml(text, [("extauth", ExtAuthPlugin), ("authtypes", AuthTypesPlugin), *PLUGINS])


@pytest.mark.parametrize("value, reason", [
    ("x user", "must be an HTTP header name"), ("Authorization", "a header HTTP or the gateway owns"),
    ("host", "a header HTTP or the gateway owns"), (7, "must be an HTTP header name"),
])
def test_a_header_that_cannot_hold_the_user_id_is_refused(value: Any, reason: str) -> None:
    from twistgw import ConfigError

    with pytest.raises(ConfigError) as exc:
        _tester(value)
    found = [i for i in exc.value.issues if i.field.endswith("userIdHeader")]
    assert found and reason in found[0].reason, exc.value.issues


@pytest.mark.parametrize("name", ["a\tb", "a\x7fb"])
@pytest_twisted.ensureDeferred
async def test_a_user_id_no_header_may_carry_fails_closed(name: str) -> None:
    tester = _tester("x-user-id", name)
    auth = "Basic " + base64.b64encode(f"{name}:password".encode()).decode()
    try:
        result = await tester.request("GET", "http://a.example/api", headers={"Authorization": auth})
    finally:
        await tester.host.unconfigure()
    assert result.status == 500 and "cannot be written" in result.deny.reason
