"""The HTTP client of ``passThroughAuth.http`` and ``customAuth``: one
Twisted ``Agent`` over a persistent ``HTTPConnectionPool`` per config type
(kept across reloads), a deadline per call, and bodies read up to a bound.

Plain ``Agent``, not treq's ``HTTPClient``: an authorization call must not
keep cookies between users, follow redirects, or decode bodies.
"""

from __future__ import annotations

from typing import Any, Callable, cast

import attrs
from twisted.internet import defer, error as neterror
from twisted.internet.defer import Deferred
from twisted.web.client import Agent, HTTPConnectionPool, ResponseFailed
from twisted.web.http_headers import Headers as TxHeaders
from twisted.web.iweb import IBodyProducer

import treq

from twistgw.tls import verifying_https_policy

#: The most of an authorization service's answer that is read.
MAX_REPLY_BODY = 64 * 1024


@attrs.frozen
class Reply:
    status: int
    headers: TxHeaders
    body: bytes


class CallFailed(Exception):
    """The service could not be asked: ``timeout`` or ``unreachable``."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason


class _Bytes:
    """A request body of known bytes (``Content-Length`` set): Twisted's
    ``IBodyProducer`` (Agent reads ``length`` and calls ``startProducing``)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.length = len(data)

    def startProducing(self, consumer: Any) -> Deferred[None]:
        consumer.write(self.data)
        return defer.succeed(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


class AuthHttpClient:
    """Made lazily with the reactor the gateway runs on; ``close`` drops the
    pooled connections (at shutdown)."""

    def __init__(self, reactor: Any, max_per_host: int = 32, connect_timeout: float = 5.0) -> None:
        self.reactor = reactor
        self.pool = HTTPConnectionPool(reactor, persistent=True)
        self.pool.maxPersistentPerHost = max_per_host
        self.pool.retryAutomatically = False  # an auth call is never sent twice
        # https URLs: the service's certificate checked against the URL's host
        # by subjectAltName (Twisted's default policy accepts one without)
        self.agent = Agent(reactor, contextFactory=verifying_https_policy(), pool=self.pool,
                           connectTimeout=connect_timeout)

    async def call(self, method: bytes, url: bytes, headers: TxHeaders, body: bytes | None,
                   timeout: float) -> Reply:
        """One request, answered within ``timeout`` seconds (connecting,
        sending, and reading the whole answer), else :class:`CallFailed`."""
        d = self._call(method, url, headers, body)
        expired: list[bool] = []

        def expire() -> None:
            expired.append(True)
            d.cancel()

        timer = self.reactor.callLater(timeout, expire)
        try:
            return await d
        except Exception as exc:
            if expired:  # whatever the cancellation surfaced as (connecting, reading...)
                raise CallFailed("timeout", f"no answer within {timeout:g}s") from None
            if isinstance(exc, BodyTooLong):
                raise CallFailed("unreachable", f"answer longer than {MAX_REPLY_BODY} bytes") from None
            if isinstance(exc, (neterror.ConnectError, neterror.ConnectionLost, ResponseFailed,
                                neterror.DNSLookupError, neterror.TimeoutError, defer.CancelledError)):
                raise CallFailed("unreachable", _describe(exc)) from None
            raise
        finally:
            if timer.active():
                timer.cancel()

    async def _request(self, method: bytes, url: bytes, headers: TxHeaders, body: bytes | None) -> Reply:
        producer = cast(IBodyProducer, _Bytes(body)) if body is not None else None
        response = await self.agent.request(method, url, headers, producer)
        chunks: list[bytes] = []
        await treq.collect(response, _collector(chunks))
        return Reply(response.code, response.headers, b"".join(chunks))

    def _call(self, method: bytes, url: bytes, headers: TxHeaders, body: bytes | None) -> Deferred[Reply]:
        return Deferred.fromCoroutine(self._request(method, url, headers, body))

    def close(self) -> Deferred[None]:
        closed: Deferred[None] = self.pool.closeCachedConnections()
        return closed


class BodyTooLong(Exception):
    pass


def _collector(chunks: list[bytes]) -> Callable[[bytes], None]:
    size = [0]

    def collect(data: bytes) -> None:
        size[0] += len(data)
        if size[0] > MAX_REPLY_BODY:
            raise BodyTooLong()
        chunks.append(data)

    return collect


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ResponseFailed) and exc.reasons:
        return "; ".join(r.getErrorMessage() for r in exc.reasons)
    return exc.__class__.__name__ + (f": {exc}" if str(exc) else "")


class ClientHolder:
    """The client of one config type, made on first use with the reactor
    of the request (or the gateway's, from ``configure``), kept across
    reloads, closed at shutdown."""

    def __init__(self) -> None:
        self.reactor: Any = None
        self._client: AuthHttpClient | None = None

    def get(self, reactor: Any = None) -> AuthHttpClient:
        if self._client is None:
            self._client = AuthHttpClient(reactor or self.reactor or _default_reactor())
        return self._client

    def close(self) -> Deferred[None] | None:
        client, self._client = self._client, None
        return client.close() if client is not None else None


def _default_reactor() -> Any:
    from twisted.internet import reactor

    return reactor


def copy_headers(source: Any, names: tuple[bytes, ...], into: TxHeaders) -> None:
    """Every value of each of ``names`` in ``source`` (request headers)."""
    for name in names:
        values = source.getRawHeaders(name)
        if values:
            into.setRawHeaders(name, list(values))


def reply_headers(reply: Reply, names: tuple[bytes, ...]) -> tuple[tuple[bytes, bytes], ...]:
    """(name, value) of each of ``names`` the reply carries, every value,
    those with CR, LF or NUL left out."""
    out = []
    for name in names:
        for value in reply.headers.getRawHeaders(name) or ():
            if not any(ch in value for ch in b"\r\n\x00"):
                out.append((name, value))
    return tuple(out)
