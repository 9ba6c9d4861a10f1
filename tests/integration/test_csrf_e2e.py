"""``csrf`` over real sockets (issue 32, item 1): a running gateway in
front of a real backend, browser-like POSTs with hostile and honest
``Origin``/``Referer`` values. What is refused never reaches the backend;
Gloo's CSRF guide (``additionalOrigins: [{exact: partner.example}]``) admits
the partner's origin; a route with ``shadowEnabled`` admits everything and
counts what it would have refused. The rules themselves, value by value:
tests/unit/test_csrf_origins.py."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted

from support.http import raw_exchange, static_upstream_yaml, vs_yaml
from twistgw.core.traffic import CSRF_REQUESTS

TO_BACKEND = "      routeAction: {single: {upstream: {name: backend}}}\n"
ROUTES = (
    "    - matchers: [{prefix: /shadow}]\n" + TO_BACKEND
    + "      options:\n"
    "        csrf: {shadowEnabled: {defaultValue: {numerator: 100, denominator: HUNDRED}}}\n"
    "    - matchers: [{prefix: /}]\n" + TO_BACKEND
)
CSRF = ("{csrf: {filterEnabled: {defaultValue: {numerator: 100, denominator: HUNDRED}},"
        " additionalOrigins: [{exact: partner.example}, {suffix: .trusted.example}]}}")


@pytest.fixture
def gw(backend: Any, config_dir: Any, gateway: Any) -> Any:
    g = gateway(config_dir(static_upstream_yaml("backend", [backend.port]) + "---\n"
                           + vs_yaml("app", domains=["app.test"], options=CSRF, routes=ROUTES)))
    g.backend = backend
    return g


async def post(gw: Any, path: str, headers: bytes, host: bytes = b"app.test") -> int:
    res = await raw_exchange(gw.port, b"POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Length: 3\r\n"
                             b"Connection: close\r\n\r\na=1" % (path.encode(), host, headers))
    (resp,) = res.responses()
    return resp.status


HOSTILE = [
    b"Referer: https://evil.com/a.trusted.example\r\n",
    b"Referer: https://evil.com?x=.trusted.example\r\n",
    b"Referer: https://evil.com#.trusted.example\r\n",
    b"Origin: https://trusted.example@evil.com\r\n",
    b"Origin: https://partner.example.evil.com\r\n",
    b"Origin: null\r\n",
    b"Origin: partner.example\r\n",
    b"Origin: https://partner.example:8443\r\n",
    b"Origin: https://[::1]\r\n",
    b"Origin: https://app.trusted.example.\r\n",
    b"Origin: chrome-extension://partner.example\r\n",
    b"",
]
HONEST = [
    b"Origin: https://partner.example\r\n",  # Gloo's CSRF guide
    b"Origin: https://Partner.Example:443\r\n",
    b"Origin: https://app.trusted.example\r\n",
    b"Referer: https://app.trusted.example/checkout?step=2\r\n",
    b"Origin: http://app.test\r\n",  # the request's own host
]


@pytest_twisted.ensureDeferred
async def test_hostile_origins_are_refused_before_the_backend(gw: Any) -> None:
    for headers in HOSTILE:
        assert await post(gw, "/forms", headers) == 403, headers
    assert gw.backend.requests == []
    for headers in HONEST:
        assert await post(gw, "/forms", headers) == 200, headers
    assert len(gw.backend.requests) == len(HONEST)


@pytest_twisted.ensureDeferred
async def test_the_own_host_keeps_its_port(gw: Any) -> None:
    assert await post(gw, "/forms", b"Origin: http://app.test:8080\r\n", host=b"app.test:8080") == 200
    assert await post(gw, "/forms", b"Origin: http://app.test\r\n", host=b"app.test:8080") == 403


@pytest_twisted.ensureDeferred
async def test_shadow_admits_and_counts(gw: Any) -> None:
    invalid = CSRF_REQUESTS.labels("shadow", "request_invalid")
    before = invalid.value
    for headers in HOSTILE:
        assert await post(gw, "/shadow", headers) == 200, headers
    assert invalid.value - before == len(HOSTILE)
    assert len(gw.backend.requests) == len(HOSTILE)
