"""Side calls to the identity provider (discovery, key sets, the token,
introspection, userinfo and revocation endpoints) with treq.

Every call has a timeout and a size bound, follows no redirect, and over
https verifies the provider's certificate by name (Twisted's default
browser-like policy). URLs come from configuration or the provider's
discovery document, never from a request.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import attrs
from twisted.internet.defer import Deferred

from twistgw import BoundedBody
from twistgw.tls import verifying_https_policy

MAX_BODY = 1024 * 1024


class CallFailed(Exception):
    """The provider could not be reached or did not answer in time."""


@attrs.frozen
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        """The body as a JSON object, or None when it is not one."""
        try:
            doc = json.loads(self.body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        return doc if isinstance(doc, dict) else None


def _too_large(limit: int) -> CallFailed:
    return CallFailed(f"answer larger than {limit} bytes")


class Client:
    """One treq client per gateway, with a persistent connection pool."""

    def __init__(self, reactor: Any) -> None:
        from treq.client import HTTPClient
        from twisted.web import client as web

        # Any: twisted.web.client's Agent and pool are untyped
        webclient: Any = web
        self.reactor = reactor
        self.pool: Any = webclient.HTTPConnectionPool(reactor, persistent=True)
        self.pool.maxPersistentPerHost = 8
        self.pool.cachedConnectionTimeout = 30
        # https: the provider's certificate checked against the URL's host by
        # subjectAltName (Twisted's default policy accepts one without)
        self._client = HTTPClient(webclient.Agent(reactor, contextFactory=verifying_https_policy(), pool=self.pool))

    async def call(self, method: str, url: str, timeout: float, form: Mapping[str, str] | None = None,
                   headers: Mapping[bytes, bytes] | None = None) -> Answer:
        d = Deferred.fromCoroutine(self._call(method, url, form, headers))
        fired: list[bool] = []

        def timed_out(result: Any, _timeout: float) -> Any:
            fired.append(True)  # cancelled by the timeout (treq then fails with ResponseNeverReceived)
            return result

        d.addTimeout(timeout, self.reactor, onTimeoutCancel=timed_out)
        try:
            return await d
        except CallFailed:
            raise
        except Exception as exc:  # refused, reset, DNS, TLS, timeout: all one thing to the caller
            name = "no answer within %gs" % timeout if fired or type(exc).__name__ in ("TimeoutError",
                                                                                       "CancelledError") \
                else f"{type(exc).__name__}: {exc}"
            raise CallFailed(f"{method} {url}: {name}") from None

    async def _call(self, method: str, url: str, form: Mapping[str, str] | None,
                    headers: Mapping[bytes, bytes] | None) -> Answer:
        import treq

        hdrs = {b"Accept": [b"application/json"]}
        for k, v in (headers or {}).items():
            hdrs[k] = [v]
        kwargs: dict[str, Any] = {"headers": hdrs, "allow_redirects": False}
        if form is not None:
            kwargs["data"] = dict(form)
        response = await self._client.request(method, url, **kwargs)
        body = BoundedBody(MAX_BODY, _too_large)
        await treq.collect(response, body)
        return Answer(response.code, body.value())

    def close(self) -> Any:
        return self.pool.closeCachedConnections()
