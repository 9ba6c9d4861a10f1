"""docs/ratelimit.md's example (examples/ratelimit) loads, and behaves as
the page says against a real redis-server."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import pytest_twisted
from rl_helpers import PLUGINS, fresh_window

from twistgw.sdk.testing import ChainTester

from support.redis import RedisServer

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ratelimit" / "gateway.yaml"
CONFIGS = ROOT / "examples" / "ratelimit" / "ratelimitconfigs.yaml"


@pytest.fixture
def redis(tmp_path: pathlib.Path) -> Any:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


def test_the_page_names_every_options_key() -> None:
    page = (ROOT / "docs" / "ratelimit.md").read_text()
    for key in ("localRatelimit", "ratelimitBasic", "ratelimit", "ratelimitRegular", "ratelimitEarly",
                "rateLimitConfigs", "rateLimitBeforeAuth", "denyOnFail", "requestTimeout", "includeVhRateLimits",
                "setDescriptors", "alwaysApply", "weight", "2N"):
        assert f"{key}" in page, key


@pytest_twisted.ensureDeferred
async def test_example_behaves_as_documented(redis: RedisServer) -> None:
    text = (EXAMPLE.read_text() + "---\n" + CONFIGS.read_text()).replace("127.0.0.1:6379", redis.address)
    tester = ChainTester.from_yaml(text, PLUGINS)
    fresh_window()
    try:
        url = "http://api.example.com"
        status = [(await tester.request("GET", url + "/status")).status for _ in range(11)]
        assert status == [200] * 10 + [429]  # the route's own bucket, no Redis needed
        both = {"x-type": "a", "x-number": "one"}
        first = await tester.request("GET", url + "/search", headers=both, client_address="10.0.0.7")
        second = await tester.request("GET", url + "/search", headers=both, client_address="10.0.0.8")
        assert (first.status, second.status) == (200, 429)  # the set descriptor: 1/minute for type a, number one
        headers = dict(second.response_headers)
        assert headers[b"x-envoy-ratelimited"] == b"true" and headers[b"x-ratelimit-limit"] == b"1, 1;w=60"
        echo = "http://echo.example.com"
        assert [(await tester.request("GET", echo + "/echo-1")).status for _ in range(4)] == [200, 200, 200, 429]
        assert (await tester.request("GET", echo + "/echo-2")).status == 429  # global-limit's 4 are spent
    finally:
        await tester.host.unconfigure()
