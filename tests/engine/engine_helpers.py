"""Helpers of the tests/engine files (the fixtures are in this directory's
conftest): the gateway configuration they share, requests in bytes, and the
strict xfail marks.

``ENGINE(why)`` / ``HEADER_POLICY(why)``: strict xfail marks for behaviour the
new engine (branch ``issue-13``) or the header policy (branch ``issue-13h``)
brings. Strict: a test that starts passing fails the suite until its mark is
removed.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from support.http import raw_exchange


def ENGINE(why: str) -> Any:
    return pytest.mark.xfail(strict=True, reason=f"needs the native engine (#13): {why}")


def HEADER_POLICY(why: str) -> Any:
    return pytest.mark.xfail(strict=True, reason=f"needs the #13 header policy: {why}")


ENGINE_CONFIG = """\
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: rec}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {port}}}]}}}}
---
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {{name: refused}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: {refused}}}]}}}}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {{name: v}}
spec:
  virtualHost:
    domains: [gw.test]
    routes:
    - matchers: [{{prefix: /protected}}]
      routeAction: {{single: {{upstream: {{name: rec}}}}}}
      options: {{denyall: {{}}}}
    - matchers: [{{prefix: /slow}}]
      routeAction: {{single: {{upstream: {{name: rec}}}}}}
      options: {{timeout: 300ms}}
    - matchers: [{{prefix: /refused}}]
      routeAction: {{single: {{upstream: {{name: refused}}}}}}
    - matchers: [{{prefix: /}}]
      routeAction: {{single: {{upstream: {{name: rec}}}}}}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {{name: star}}
spec:
  virtualHost:
    domains: ["*"]
    routes:
    - matchers: [{{prefix: /}}]
      directResponseAction: {{status: 200, body: star}}
"""


class Engine:
    """The gateway and the recorder behind it."""

    def __init__(self, gw: Any, rec: Recorder) -> None:
        self.gw, self.rec = gw, rec
        self.port: int = gw.port

    async def send(self, data: bytes | list[bytes], **kw: Any) -> Any:
        """``raw_exchange`` to the gateway."""
        kw.setdefault("timeout", 3)
        return await raw_exchange(self.port, data, **kw)


def get(path: str = "/", host: str = "gw.test", extra: str = "", method: str = "GET", version: str = "1.1",
        close: bool = False, body: bytes = b"") -> bytes:
    """A request in bytes; ``extra`` is header text (``"X-A: 1\\r\\n"``)."""
    head = f"{method} {path} HTTP/{version}\r\nHost: {host}\r\n{extra}"
    framed = any(line.lower().startswith(("content-length:", "transfer-encoding:")) for line in extra.split("\r\n"))
    if body and not framed:
        head += f"Content-Length: {len(body)}\r\n"
    if close:
        head += "Connection: close\r\n"
    return (head + "\r\n").encode("latin-1") + body


async def assert_400_and_closed(e: Engine, data: bytes, status: int = 400) -> None:
    """The gateway answers exactly one ``status`` and closes; nothing reached
    the upstream; a new connection is served."""
    res = await e.send(data)
    assert res.closed, f"connection left open after {data!r}: {res.data!r}"
    assert res.status == status, (data, res.data)
    assert len(res.responses()) == 1, res.data  # nothing smuggled behind it
    assert e.rec.data == b"", e.rec.data
    await still_served(e)


async def still_served(e: Engine) -> None:
    before = len(e.rec.requests)
    res = await e.send(get("/alive", close=True))
    assert [r.status for r in res.responses()] == [200], res.data
    assert e.rec.requests[before].target == b"/alive"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))




def jwt_route_options(pem: str) -> str:
    """Flow-style route options verifying tokens of the ``jwt_key`` fixture."""
    return ("{jwt: {providers: {p: {issuer: https://issuer.test, jwks: {local: {key: %s}}}}}}"
            % json.dumps(pem))
