"""The HTTP client of ``passThroughAuth.http`` and ``customAuth``: one
Twisted ``Agent`` over a persistent ``HTTPConnectionPool`` per config type
and :class:`ClientSettings` (kept across reloads), a deadline per call, an
optional deadline for the answer's head, a bound on concurrent calls
(Gloo's ``connectionPool.maxConns``), and bodies read up to a bound.

Plain ``Agent``, not treq's ``HTTPClient``: an authorization call must not
keep cookies between users, follow redirects, or decode bodies.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, cast

import attrs
from twisted.internet import defer, error as neterror
from twisted.internet.defer import Deferred
from twisted.web.client import Agent, HTTPConnectionPool, ResponseFailed
from twisted.web.http_headers import Headers as TxHeaders
from twisted.web.iweb import IBodyProducer

import treq

from twistgw.sdk import BoundedBody
from twistgw.sdk import describe_tls_failure, verifying_https_policy

#: The most of an authorization service's answer that is read.
MAX_REPLY_BODY = 64 * 1024


@attrs.frozen
class Reply:
    status: int
    headers: TxHeaders
    body: bytes


@attrs.frozen
class ClientSettings:
    """What makes two clients different: TLS to the service (PEMs and
    versions; None: the system trust store, TLS 1.2 or later), the most
    concurrent calls (None: unbounded), and how long an idle connection is
    kept (None: until the service closes it). ``origin`` (scheme, host and
    port of the service's URL) keeps one service's bound apart from
    another's."""

    origin: str = ""
    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = attrs.field(default=None, repr=False)  # a private key: never in a log line
    min_version: str | None = None
    max_version: str | None = None
    max_conns: int | None = None
    idle_timeout: float | None = None

    def https_policy(self) -> Any:
        """The ``Agent`` contextFactory: every host verified by name.

        :raises twistgw.tls.TLSSettingsError: settings OpenSSL refuses."""
        return verifying_https_policy(ca_pem=self.ca_pem, client_cert_pem=self.cert_pem,
                                      client_key_pem=self.key_pem, min_version=self.min_version,
                                      max_version=self.max_version)


DEFAULT_SETTINGS = ClientSettings()

#: An idle connection kept "forever" (Gloo's idleTimeout 0): Twisted's pool
#: wants a number of seconds; the service's own close still removes it.
_NO_IDLE_EXPIRY = 10 * 365 * 86400.0


class CallFailed(Exception):
    """The service could not be asked: ``timeout`` or ``unreachable``."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason


class _Bytes:
    """A request body of known bytes (``Content-Length`` set): Twisted's
    ``IBodyProducer`` (Agent reads ``length`` and calls ``startProducing``
    after writing the head); ``written`` is called once the whole request
    is handed to the connection."""

    def __init__(self, data: bytes, written: Callable[[], None] | None = None) -> None:
        self.data = data
        self.length = len(data)
        self.written = written

    def startProducing(self, consumer: Any) -> Deferred[None]:
        consumer.write(self.data)
        if self.written is not None:
            self.written()
        return defer.succeed(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


class _Phase:
    """Where one call is, for the message of a deadline that fired."""

    def __init__(self) -> None:
        self.waiting_slot = False
        self.expired: str | None = None


class AuthHttpClient:
    """Made lazily with the reactor the gateway runs on; ``close`` drops the
    pooled connections (at shutdown, or when no config uses its settings)."""

    def __init__(self, reactor: Any, settings: ClientSettings = DEFAULT_SETTINGS, max_per_host: int = 32,
                 connect_timeout: float = 5.0) -> None:
        self.reactor = reactor
        self.settings = settings
        self.pool = HTTPConnectionPool(reactor, persistent=True)
        self.pool.maxPersistentPerHost = settings.max_conns or max_per_host
        if settings.idle_timeout is not None:
            # annotated int by Twisted, but only handed to callLater, which takes any seconds
            self.pool.cachedConnectionTimeout = settings.idle_timeout or _NO_IDLE_EXPIRY  # type: ignore[assignment]
        self.pool.retryAutomatically = False  # an auth call is never sent twice
        # connectionPool.maxConns: calls beyond it wait for a slot (within their deadline)
        self.slots = defer.DeferredSemaphore(settings.max_conns) if settings.max_conns else None
        # https URLs: the service's certificate checked against the URL's host
        # by subjectAltName (Twisted's default policy accepts one without)
        self.agent = Agent(reactor, contextFactory=settings.https_policy(), pool=self.pool,
                           connectTimeout=connect_timeout)

    async def call(self, method: bytes, url: bytes, headers: TxHeaders, body: bytes | None,
                   timeout: float, head_timeout: float | None = None) -> Reply:
        """One request, answered within ``timeout`` seconds (waiting for a
        connection slot, connecting, sending, and reading the whole answer),
        its head within ``head_timeout`` of the request being written (when
        given; whichever fires first wins), else :class:`CallFailed`."""
        phase = _Phase()
        d = Deferred.fromCoroutine(self._request(method, url, headers, body, head_timeout, phase))

        def expire() -> None:
            waiting = " waiting for a connection slot (connectionPool.maxConns)" if phase.waiting_slot else ""
            phase.expired = f"no answer within {timeout:g}s{waiting}"
            d.cancel()

        timer = self.reactor.callLater(timeout, expire)
        try:
            return await d
        except Exception as exc:
            if phase.expired:  # whatever the cancellation surfaced as (connecting, reading...)
                raise CallFailed("timeout", phase.expired) from None
            if isinstance(exc, BodyTooLong):
                raise CallFailed("unreachable", f"answer longer than {MAX_REPLY_BODY} bytes") from None
            if isinstance(exc, (neterror.ConnectError, neterror.ConnectionLost, ResponseFailed,
                                neterror.DNSLookupError, neterror.TimeoutError, defer.CancelledError)):
                raise CallFailed("unreachable", _describe(exc)) from None
            raise
        finally:
            if timer.active():
                timer.cancel()

    async def _request(self, method: bytes, url: bytes, headers: TxHeaders, body: bytes | None,
                       head_timeout: float | None, phase: _Phase) -> Reply:
        if self.slots is not None:
            phase.waiting_slot = True
            await self.slots.acquire()  # cancelled by the deadline: leaves the queue, holds nothing
            phase.waiting_slot = False
        try:
            return await self._exchange(method, url, headers, body, head_timeout, phase)
        finally:
            if self.slots is not None:
                self.slots.release()

    async def _exchange(self, method: bytes, url: bytes, headers: TxHeaders, body: bytes | None,
                        head_timeout: float | None, phase: _Phase) -> Reply:
        timers: list[Any] = []
        sent: list[Deferred[Any]] = []  # written() may run inside agent.request (a pooled connection)

        def written() -> None:  # responseHeaderTimeout starts once the request is written
            if head_timeout is not None:
                timers.append(self.reactor.callLater(head_timeout, expire_head))

        def expire_head() -> None:
            phase.expired = f"no response head within {head_timeout:g}s of the request (responseHeaderTimeout)"
            if sent:
                sent[0].cancel()

        if head_timeout is not None and body is None:
            body = b""  # a producer, to know when the request is written
        producer = cast(IBodyProducer, _Bytes(body, written)) if body is not None else None
        sent.append(self.agent.request(method, url, headers, producer))
        try:
            response = await sent[0]
        finally:
            for timer in timers:
                if timer.active():
                    timer.cancel()
        answer = BoundedBody(MAX_REPLY_BODY, BodyTooLong)
        await treq.collect(response, answer)
        return Reply(response.code, response.headers, answer.value())

    def close(self) -> Deferred[None]:
        closed: Deferred[None] = self.pool.closeCachedConnections()
        return closed


class BodyTooLong(Exception):
    """The service's answer is longer than :data:`MAX_REPLY_BODY`."""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ResponseFailed) and exc.reasons:
        return "; ".join(describe_tls_failure(r.value) or r.getErrorMessage() for r in exc.reasons)
    return exc.__class__.__name__ + (f": {exc}" if str(exc) else "")


class ClientHolder:
    """The clients of one config type, one per :class:`ClientSettings`,
    made on first use with the reactor of the request (or the gateway's,
    from ``configure``), kept across reloads, closed at shutdown or when
    no serving config uses their settings (:meth:`keep_only`)."""

    def __init__(self) -> None:
        self.reactor: Any = None
        self._clients: dict[ClientSettings, AuthHttpClient] = {}

    def get(self, reactor: Any = None, settings: ClientSettings = DEFAULT_SETTINGS) -> AuthHttpClient:
        client = self._clients.get(settings)
        if client is None:
            client = self._clients[settings] = AuthHttpClient(reactor or self.reactor or _default_reactor(),
                                                              settings)
        return client

    def keep_only(self, used: Iterable[ClientSettings]) -> None:
        """Close the clients of settings no serving config names."""
        keep = set(used)
        for settings in [s for s in self._clients if s not in keep]:
            self._clients.pop(settings).close()

    def close(self) -> Deferred[None] | None:
        clients, self._clients = list(self._clients.values()), {}
        if not clients:
            return None
        return defer.gatherResults([c.close() for c in clients]).addCallback(lambda _: None)


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
