"""The forwarding hop: Agent + a persistent HTTPConnectionPool, streaming both ways.

Not ``twisted.web.proxy.ReverseProxyResource`` (which buffers, has no
back-pressure and no pooling): request bodies flow from the client channel
into an IBodyProducer, response bodies flow through a Protocol registered as
a streaming producer on the client request.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet import error as ierror
from twisted.internet.defer import CancelledError, Deferred, TimeoutError as DeferTimeout
from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import client as webclient
from twisted.web._newclient import (
    HTTP11ClientProtocol,
    ParseError,
    ResponseDone,
    RequestGenerationFailed,
    RequestTransmissionFailed,
    ResponseFailed,
    ResponseNeverReceived,
)
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers
from twisted.web.iweb import UNKNOWN_LENGTH, IAgentEndpointFactory, IBodyProducer
from zope.interface import implementer

from twistgw.config.defaults import CONNECT_TIMEOUT, IDLE_TIMEOUT
from twistgw.core.headers import copy_end_to_end

_log = Logger(namespace="twistgw.proxy")

#: How long a client's buffered body may grow before the client is paused.
BODY_BUFFER_LIMIT = 64 * 1024


@implementer(IAgentEndpointFactory)
class _EndpointFactory:
    """Connects straight to the endpoint address (already resolved by config)."""

    def __init__(self, reactor: Any, connect_timeout: float) -> None:
        self.reactor = reactor
        self.connect_timeout = connect_timeout

    def endpointForURI(self, uri: Any) -> Any:
        host = uri.host.decode("ascii")
        if host.startswith("["):
            return TCP6ClientEndpoint(self.reactor, host[1:-1], uri.port, timeout=self.connect_timeout)
        if host.replace(".", "").isdigit():
            return TCP4ClientEndpoint(self.reactor, host, uri.port, timeout=self.connect_timeout)
        return HostnameEndpoint(self.reactor, host, uri.port, timeout=self.connect_timeout)


class _ClientProtocol(HTTP11ClientProtocol):
    """Keeps each response's connection-control headers. Twisted's client
    parser files ``Connection`` apart from ``response.headers``; without it
    the headers a ``Connection`` header lists could not be dropped as
    hop-by-hop."""

    def request(self, request: Any) -> Deferred:
        before = getattr(self, "_parser", None)
        d = super().request(request)
        parser = getattr(self, "_parser", None)
        if parser is not None and parser is not before:
            def keep(response: Any) -> Any:
                response.connection_headers = parser.connHeaders
                return response

            d.addCallback(keep)
        return d


class _ClientFactory(webclient._HTTP11ClientFactory):  # type: ignore[misc]
    """Builds :class:`_ClientProtocol`; no "Starting factory" log line for
    every pooled upstream connection."""

    noisy = False

    def buildProtocol(self, addr: Any) -> _ClientProtocol:
        return _ClientProtocol(self._quiescentCallback)


class Forwarder:
    """Owns the connection pool and the Agent; one per gateway process."""

    def __init__(self, reactor: Any, connect_timeout: float = CONNECT_TIMEOUT, max_per_host: int = 64,
                 idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.reactor = reactor
        self.pool = webclient.HTTPConnectionPool(reactor, persistent=True)
        self.pool._factory = _ClientFactory
        self.pool.maxPersistentPerHost = max_per_host
        self.pool.cachedConnectionTimeout = idle_timeout
        self.pool.retryAutomatically = True
        self.agent = webclient.Agent.usingEndpointFactory(
            reactor, _EndpointFactory(reactor, connect_timeout), pool=self.pool
        )

    def close(self) -> Deferred:
        return self.pool.closeCachedConnections()


@implementer(IBodyProducer)
class RequestBody:
    """The client's request body, streamed to the upstream as it arrives.

    Before the upstream connection takes it (and while plugins decide), up to
    BODY_BUFFER_LIMIT bytes are buffered; past that the client is paused.
    """

    def __init__(self, length: int | None, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        self.length = UNKNOWN_LENGTH if length is None else length
        self._pause = pause
        self._resume = resume
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._consumer: Any = None
        self._done: Deferred | None = None
        self.complete = False
        self._stopped = False
        self._paused_by_us = False

    # From the client channel -------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._stopped:
            return
        if self._consumer is not None:
            self._consumer.write(data)
            return
        self._buffer.append(data)
        self._buffered += len(data)
        if self._buffered > BODY_BUFFER_LIMIT and not self._paused_by_us:
            self._paused_by_us = True
            self._pause()

    def finish(self) -> None:
        self.complete = True
        if self._done is not None and not self._stopped:
            d, self._done = self._done, None
            d.callback(None)

    # IBodyProducer -------------------------------------------------------------

    def startProducing(self, consumer: Any) -> Deferred:
        self._consumer = consumer
        buffered, self._buffer, self._buffered = self._buffer, [], 0
        for chunk in buffered:
            consumer.write(chunk)
        if self._paused_by_us:
            self._paused_by_us = False
            self._resume()
        self._done = Deferred()
        if self.complete:
            d, self._done = self._done, None
            d.callback(None)
            return d
        return self._done

    def pauseProducing(self) -> None:
        self._pause()

    def resumeProducing(self) -> None:
        self._resume()

    def stopProducing(self) -> None:
        self._stopped = True
        self._consumer = None
        self._done = None


_BODY_COMPLETE = (ResponseDone, PotentialDataLoss)


class ResponseRelay(Protocol):
    """Streams an upstream response body into the client request."""

    def __init__(self, request: Any, finished: Callable[[Failure | None], None]) -> None:
        self.request = request
        self._finished = finished

    def connectionMade(self) -> None:
        self.request.registerProducer(self.transport, True)

    def dataReceived(self, data: bytes) -> None:
        self.request.write(data)

    def connectionLost(self, reason: Failure = Failure(ierror.ConnectionDone())) -> None:
        self.request.unregisterProducer()
        # isinstance on classes imported once: Failure.check through the
        # deprecated-module proxy of twisted.web.client costs microseconds.
        if isinstance(reason.value, _BODY_COMPLETE):
            self._finished(None)
        else:
            self._finished(reason)


def _can_copy_raw() -> bool:
    """Whether Headers keeps canonical names in ``_rawHeaders``, as Twisted
    22+ does: then end-to-end headers can be copied as they are instead of
    being encoded and sanitised again value by value (they already were,
    when Twisted parsed or stored them)."""
    probe = Headers()
    probe.addRawHeader(b"x-probe-name", b"v")
    raw = getattr(probe, "_rawHeaders", None)
    return isinstance(raw, dict) and list(raw.items()) == list(probe.getAllRawHeaders())


_COPY_RAW = _can_copy_raw()


def twisted_headers(headers: Any) -> Headers:
    """twistgw's :class:`~twistgw.api.headers.Headers` as Twisted's, for the
    Agent: the same dict of canonical names when Twisted keeps one (no copy)."""
    if _COPY_RAW:
        out = Headers()
        out._rawHeaders = headers._raw
        return out
    return Headers({name: values for name, values in headers.getAllRawHeaders()})


def copy_response_headers(response: Any, request: Any) -> None:
    conn = getattr(response, "connection_headers", None)
    out = request.responseHeaders
    connection = conn.getRawHeaders(b"connection") if conn is not None else None
    if _COPY_RAW:
        copy_end_to_end(response.headers, out._rawHeaders, connection)
    else:
        kept: dict[bytes, list[bytes]] = {}
        copy_end_to_end(response.headers, kept, connection)
        for name, values in kept.items():
            out.setRawHeaders(name, values)
    code = response.code
    length = response.length
    if code == 204 or code < 200:
        # RFC 9110 §8.6: never a Content-Length on 1xx or 204.
        out.removeHeader(b"content-length")
    elif code == 304 or request.method == b"HEAD":
        # No body follows; Content-Length, if any, describes the
        # representation: pass the upstream's on, never Twisted's 0.
        cl = response.headers.getRawHeaders(b"content-length")
        if not cl and conn is not None:
            cl = conn.getRawHeaders(b"content-length")
        if cl:
            out.setRawHeaders(b"content-length", cl[:1])
        else:
            out.removeHeader(b"content-length")
    elif length is not UNKNOWN_LENGTH and length is not None:
        out.setRawHeaders(b"content-length", [b"%d" % length])


def classify_failure(failure: Failure) -> tuple[int, bytes, str]:
    """Map an upstream failure to (status, body, short reason), like Envoy."""
    if failure.check(DeferTimeout, CancelledError):
        return 504, b"upstream request timeout", "timeout"
    if failure.check(ierror.TimeoutError):
        return 503, b"upstream connect error or disconnect/reset before headers. reset reason: connection timeout", "connect timeout"
    if failure.check(ResponseNeverReceived, ResponseFailed, RequestTransmissionFailed, RequestGenerationFailed):
        reasons = getattr(failure.value, "reasons", []) or []
        # Agent reports a cancelled request (our response timeout) wrapped.
        if any(isinstance(r, Failure) and r.check(DeferTimeout, CancelledError) for r in reasons):
            return 504, b"upstream request timeout", "timeout"
        for r in reasons:
            if isinstance(r, Failure) and (r.check(ParseError, ValueError) or "Parse" in type(r.value).__name__):
                return 502, b"upstream sent a malformed response", "malformed response"
        if failure.check(ResponseFailed) and not failure.check(ResponseNeverReceived):
            return 502, b"upstream sent a malformed response", "malformed response"
        return 503, b"upstream connect error or disconnect/reset before headers. reset reason: connection termination", "reset"
    if failure.check(ierror.ConnectError, ierror.ConnectionLost, ierror.ConnectionClosed, ierror.DNSLookupError):
        return 503, b"upstream connect error or disconnect/reset before headers. reset reason: connection failure", "refused"
    return 502, b"upstream error", f"unexpected: {failure.type.__name__}"


__all__ = [
    "BODY_BUFFER_LIMIT",
    "Forwarder",
    "RequestBody",
    "ResponseRelay",
    "classify_failure",
    "copy_response_headers",
    "twisted_headers",
]
