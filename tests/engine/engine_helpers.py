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
from typing import TYPE_CHECKING, Any

import pytest

from support.http import raw_exchange, static_upstream_yaml, vs_yaml

if TYPE_CHECKING:
    from support.recorder import Recorder


def ENGINE(why: str) -> Any:
    return pytest.mark.xfail(strict=True, reason=f"needs the native engine (#13): {why}")


def HEADER_POLICY(why: str) -> Any:
    return pytest.mark.xfail(strict=True, reason=f"needs the #13 header policy: {why}")


def route(prefix: str, upstream: str, options: str = "") -> str:
    """One entry of a ``routes:`` list (for :func:`support.http.vs_yaml`)."""
    text = (f"    - matchers: [{{prefix: {prefix}}}]\n"
            f"      routeAction: {{single: {{upstream: {{name: {upstream}}}}}}}\n")
    return text + (f"      options: {options}\n" if options else "")


def direct(prefix: str, body: str, options: str = "") -> str:
    """A route answering ``200 body`` itself."""
    text = f"    - matchers: [{{prefix: {prefix}}}]\n      directResponseAction: {{status: 200, body: {body}}}\n"
    return text + (f"      options: {options}\n" if options else "")


def engine_config(port: int, refused: int) -> str:
    """The ``eng`` fixture's configuration (see conftest.py)."""
    routes = (route("/protected", "rec", "{denyall: {}}") + route("/slow", "rec", "{timeout: 300ms}")
              + route("/refused", "refused") + route("/", "rec"))
    return "---\n".join([
        static_upstream_yaml("rec", [port]), static_upstream_yaml("refused", [refused]),
        vs_yaml("v", domains=["gw.test"], routes=routes), vs_yaml("star", routes=direct("/", "star"))])


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
