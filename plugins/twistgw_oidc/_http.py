"""Side calls to the identity provider (discovery, key sets, the token,
introspection, userinfo and revocation endpoints) with the SDK's
``HttpClient``.

Every call has a timeout and a size bound, follows no redirect, and over
https verifies the provider's certificate by name (``client_tls``). URLs
come from configuration or the provider's discovery document, never from
a request.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import attrs

from twistgw.sdk import HttpClient, HttpError

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


class Client:
    """One :class:`twistgw.sdk.HttpClient` per gateway: kept-alive
    connections (8 per provider host, idle for 30 s at most), each call
    bounded by its ``timeout`` and :data:`MAX_BODY`."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        # https: the provider's certificate checked against the URL's host by subjectAltName
        # a GET on a connection the provider closed while idle is sent again (a POST never)
        self.http = HttpClient(reactor, max_per_host=8, idle_timeout=30, max_body=MAX_BODY, retry_idempotent=True)
        self.pool: Any = self.http.pool

    async def call(self, method: str, url: str, timeout: float, form: Mapping[str, str] | None = None,
                   headers: Mapping[bytes, bytes] | None = None) -> Answer:
        hdrs = {b"Accept": b"application/json", **(headers or {})}
        try:
            answer = await self.http.request(method, url, headers=hdrs, form=form, timeout=timeout)
        except HttpError as exc:  # refused, reset, DNS, TLS, timeout, too large: all one thing to the caller
            raise CallFailed(str(exc)) from None
        return Answer(answer.status, answer.body)

    def close(self) -> Any:
        return self.http.close()
