"""The one HTTP client for side calls (key sets, an identity provider,
pass-through and custom authorization services, health checks): what the
gateway asks a server, as opposed to what it proxies (the engine's path).

Twisted's ``Agent`` over a keep-alive ``HTTPConnectionPool``, with bounds on
everything a broken or hostile server could stretch: the connection (5 s),
the whole call (10 s), optionally the response head once the request is
written, the answer's body (1 MiB, read through :class:`BoundedBody`), and
the calls in flight at once. TLS is always verified by name with
:func:`twistgw.tls.client_tls` (the URL's host, or ``server_name``);
redirects are not followed unless asked. Failures are typed
(:class:`HttpTimeout` with its phase, :class:`HttpUnreachable`,
:class:`HttpTlsRefused`, :class:`HttpBodyTooLarge`, all :class:`HttpError`)::

    client = sdk.HttpClient(reactor, timeout=3.0, max_body=256 * 1024)
    try:
        answer = await client.request("GET", "https://idp.example.org/keys")
    except sdk.HttpError as exc:
        ...                                # fail closed, with str(exc) in the log
    keys = answer.json()
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence, Union, cast
from urllib.parse import urlencode, urljoin, urlsplit

import attrs
from twisted.internet import defer
from twisted.internet import error as neterror
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator, IStreamClientEndpoint
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from twisted.web import client as webclient
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers as TxHeaders
from twisted.web.iweb import IAgentEndpointFactory, IBodyProducer
from zope.interface import implementer

from twistgw.api.bodies import BoundedBody
from twistgw.tls import client_tls, describe_tls_failure

__all__ = ["HttpBodyTooLarge", "HttpClient", "HttpError", "HttpResponse", "HttpTimeout", "HttpTlsRefused",
           "HttpUnreachable", "MAX_BODY"]

#: The default bound on an answer's body.
MAX_BODY = 1024 * 1024
_REDIRECTS = frozenset((301, 302, 303, 307, 308))
#: headers not carried to another origin when a redirect is followed
_CREDENTIALS = (b"authorization", b"cookie", b"proxy-authorization")

HeadersIn = Union[TxHeaders, Mapping[bytes, Union[bytes, Sequence[bytes]]], None]


class HttpError(Exception):
    """A side call that got no usable answer; the message says why (and
    names the method and URL)."""


class HttpTimeout(HttpError):
    """A deadline fired. ``limit`` is which one (``connect``, ``head`` or
    ``total``), ``phase`` where the call was then (``slot``: waiting for a
    call in flight to end, ``connect``, ``head``: the request sent or being
    sent, ``body``: reading the answer), ``seconds`` the deadline."""

    def __init__(self, message: str, limit: str, phase: str, seconds: float) -> None:
        super().__init__(message)
        self.limit = limit
        self.phase = phase
        self.seconds = seconds


class HttpUnreachable(HttpError):
    """No connection (refused, no route, unknown name), or the connection
    ended before a whole answer."""


class HttpTlsRefused(HttpUnreachable):
    """The TLS handshake failed or the server's certificate was refused
    (untrusted chain, or not naming the server)."""


class HttpBodyTooLarge(HttpError):
    """The answer's body is longer than the client's ``max_body``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"answer larger than {limit} bytes")
        self.limit = limit


@attrs.frozen
class HttpResponse:
    """A whole answer: its status, headers (Twisted's), body and the URL
    that gave it (after redirects, when followed)."""

    status: int
    headers: TxHeaders
    body: bytes
    url: str

    def json(self) -> Any:
        """The body decoded as JSON (raises ``ValueError`` when it is not)."""
        return json.loads(self.body)

    def header(self, name: bytes) -> bytes | None:
        """The header's last value, or None."""
        values = self.headers.getRawHeaders(name)
        return values[-1] if values else None


class _Call:
    """Where one request is, for the deadline that fires."""

    __slots__ = ("expired", "phase", "sent")

    def __init__(self) -> None:
        self.phase = "slot"
        self.expired: tuple[str, float] | None = None
        self.sent: Deferred[Any] | None = None

    def expire(self, limit: str, seconds: float, what: Deferred[Any] | None) -> None:
        if self.expired is None:
            self.expired = (limit, seconds)
            if what is not None:
                what.cancel()


class _Bytes:
    """A request body of known bytes; ``written`` is called once the request
    is handed to the connection (the head deadline starts then)."""

    def __init__(self, data: bytes, written: Any) -> None:
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


class _Collect(Protocol):
    """Reads a response body into a :class:`BoundedBody`; past its bound the
    connection is dropped (never reused) and the call fails."""

    def __init__(self, body: BoundedBody, done: Deferred[bytes]) -> None:
        self.body = body
        self.done = done

    def dataReceived(self, data: bytes) -> None:
        if self.done.called:
            return
        try:
            self.body(data)
        except Exception as exc:
            self.transport.stopProducing()  # type: ignore[union-attr]
            self.done.errback(Failure(exc))

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.done.called:
            return
        if reason.check(webclient.ResponseDone, PotentialDataLoss):
            self.done.callback(self.body.value())
        else:
            self.done.errback(reason)


def _read_body(response: Any, limit: int) -> Deferred[bytes]:
    collector: list[_Collect] = []

    def cancel(d: Deferred[bytes]) -> None:
        transport: Any = collector[0].transport if collector else None
        if transport is not None:
            transport.stopProducing()

    done: Deferred[bytes] = Deferred(cancel)
    protocol = _Collect(BoundedBody(limit, HttpBodyTooLarge), done)
    collector.append(protocol)
    response.deliverBody(protocol)
    return done


@implementer(IStreamClientEndpoint)
class _CountingEndpoint:
    """The pool's way to a new connection: bounded by the connect timeout,
    counted, and telling the call it is connecting."""

    def __init__(self, owner: HttpClient, inner: Any, call: _Call | None) -> None:
        self._owner = owner
        self._inner = inner
        self._call = call

    def connect(self, factory: Any) -> Deferred[Any]:
        owner, call = self._owner, self._call
        if call is not None:
            call.phase = "connect"
        d: Deferred[Any] = self._inner.connect(factory)
        seconds = owner.connect_timeout
        timer = owner.reactor.callLater(seconds, lambda: call.expire("connect", seconds, d) if call is not None
                                        else d.cancel())

        def connected(protocol: Any) -> Any:
            if timer.active():
                timer.cancel()
            owner.connections += 1
            if call is not None and call.phase == "connect":
                call.phase = "head"
            return protocol

        def failed(failure: Failure) -> Failure:
            if timer.active():
                timer.cancel()
            return failure

        d.addCallbacks(connected, failed)
        return d


@implementer(IAgentEndpointFactory)
class _Endpoints:
    def __init__(self, owner: HttpClient) -> None:
        self._owner = owner

    def endpointForURI(self, uri: Any) -> Any:
        owner = self._owner
        host = uri.host.decode("ascii")
        inner: Any = HostnameEndpoint(owner.reactor, host.strip("[]"), uri.port)
        if uri.scheme == b"https":
            inner = wrapClientTLS(owner.tls_for(host.strip("[]")), inner)
        elif uri.scheme != b"http":
            raise HttpError(f"scheme {uri.scheme.decode('ascii', 'replace')!r} is not http or https")
        return _CountingEndpoint(owner, inner, owner.current)


class HttpClient:
    """One pool of keep-alive connections and its bounds; make one per set
    of settings and keep it (``close`` at shutdown drops idle connections).

    :param reactor: the reactor the gateway runs on.
    :param connect_timeout: seconds to open a connection (TCP).
    :param timeout: seconds for a whole call (waiting for a slot,
        connecting, sending, reading the whole answer); per call too.
    :param head_timeout: seconds from the request written to the answer's
        head (None: only ``timeout``); per call too.
    :param max_body: the most bytes of an answer's body; per call too.
    :param max_in_flight: the most calls at once; more wait for a slot
        within their ``timeout`` (None: unbounded).
    :param max_per_host: idle connections kept per host.
    :param idle_timeout: seconds an idle connection is kept (None:
        Twisted's 240).
    :param persistent: False closes each connection after its answer.
    :param server_name: the name every https server's certificate must carry
        and SNI sends (None: the URL's host, per URL).
    :param ca_pem: the trusted CAs (None: the system store); the client
        certificate, key and TLS versions as :func:`twistgw.tls.client_tls`.
    :param max_redirects: hops followed by ``request(follow_redirects=True)``.
    :param retry_idempotent: send a body-less GET, HEAD, OPTIONS, DELETE or
        TRACE once more when a kept-alive connection turns out closed by the
        server before it answered (Twisted's pool rule); off by default.
    :raises twistgw.tls.TLSSettingsError: TLS settings that cannot be used.

    ``connections`` counts the connections opened, ``calls`` the calls
    made and ``in_flight`` those not finished (:meth:`stats`). A call is
    never sent twice unless ``retry_idempotent``.
    """

    def __init__(self, reactor: Any, *, connect_timeout: float = 5.0, timeout: float = 10.0,
                 head_timeout: float | None = None, max_body: int = MAX_BODY, max_in_flight: int | None = None,
                 max_per_host: int = 8, idle_timeout: float | None = None, persistent: bool = True,
                 server_name: str | None = None, ca_pem: bytes | None = None, client_cert_pem: bytes | None = None,
                 client_key_pem: bytes | None = None, min_version: str | None = None,
                 max_version: str | None = None, max_redirects: int = 5, retry_idempotent: bool = False) -> None:
        self.reactor = reactor
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.head_timeout = head_timeout
        self.max_body = max_body
        self.max_redirects = max_redirects
        self.server_name = server_name
        self._tls_options: dict[str, Any] = {"ca_pem": ca_pem, "client_cert_pem": client_cert_pem,
                                             "client_key_pem": client_key_pem, "min_version": min_version,
                                             "max_version": max_version}
        self._creators: dict[str, IOpenSSLClientConnectionCreator] = {}
        if server_name is not None or any(v is not None for v in self._tls_options.values()):
            self.tls_for(server_name or "settings.check")  # bad settings fail here, not on the first call
        self.connections = 0
        self.calls = 0
        self.in_flight = 0
        self.current: _Call | None = None
        pool: Any = webclient.HTTPConnectionPool(reactor, persistent=persistent)
        pool.maxPersistentPerHost = max_in_flight or max_per_host
        pool.retryAutomatically = retry_idempotent
        if idle_timeout is not None:
            pool.cachedConnectionTimeout = idle_timeout
        self.pool = pool
        self._slots = defer.DeferredSemaphore(max_in_flight) if max_in_flight else None
        agent: Any = webclient.Agent
        self._agent = agent.usingEndpointFactory(reactor, _Endpoints(self), pool=pool)

    def tls_for(self, host: str) -> IOpenSSLClientConnectionCreator:
        """The connection creator for an https server (cached per name)."""
        name = self.server_name or host
        creator = self._creators.get(name)
        if creator is None:
            creator = self._creators[name] = client_tls(name, **self._tls_options)
        return creator

    def stats(self) -> dict[str, int]:
        """``connections`` opened, ``calls`` made, ``in_flight`` now."""
        return {"connections": self.connections, "calls": self.calls, "in_flight": self.in_flight}

    async def request(self, method: str | bytes, url: str | bytes, *, headers: HeadersIn = None,
                      body: bytes | None = None, form: Mapping[str, str] | None = None,
                      timeout: float | None = None, head_timeout: float | None = None,
                      max_body: int | None = None, follow_redirects: bool = False) -> HttpResponse:
        """One call, answered whole within its bounds, else :class:`HttpError`.

        :param body: the request body (``Content-Length`` set).
        :param form: a body sent as ``application/x-www-form-urlencoded``.
        :param follow_redirects: follow up to ``max_redirects`` 301, 302,
            303, 307 and 308 (each hop with its own deadlines; 303, and 301
            and 302 of a POST, become a GET without body; credentials are
            not carried to another origin). Otherwise the redirect is the
            answer.
        """
        verb = method.encode("ascii") if isinstance(method, str) else method
        target = url.decode("ascii") if isinstance(url, bytes) else url
        hdrs = _headers(headers)
        if form is not None:
            body = urlencode(dict(form)).encode("ascii")
            hdrs.setRawHeaders(b"content-type", [b"application/x-www-form-urlencoded"])
        hops = self.max_redirects if follow_redirects else 0
        while True:
            answer = await self._one(verb, target, hdrs, body, self.timeout if timeout is None else timeout,
                                     self.head_timeout if head_timeout is None else head_timeout,
                                     self.max_body if max_body is None else max_body)
            location = answer.header(b"location")
            if hops <= 0 or answer.status not in _REDIRECTS or location is None:
                return answer
            hops -= 1
            following = urljoin(target, location.decode("latin-1"))
            if urlsplit(following).scheme not in ("http", "https"):
                return answer
            if answer.status == 303 or (answer.status in (301, 302) and verb == b"POST"):
                verb, body = b"GET", None
                hdrs.removeHeader(b"content-type")
            if _origin(following) != _origin(target):
                for name in _CREDENTIALS:
                    hdrs.removeHeader(name)
            target = following

    async def _one(self, method: bytes, url: str, headers: TxHeaders, body: bytes | None, timeout: float,
                   head_timeout: float | None, max_body: int) -> HttpResponse:
        call = _Call()
        self.calls += 1
        d = Deferred.fromCoroutine(self._run(call, method, url, headers, body, head_timeout, max_body))
        timer = self.reactor.callLater(timeout, call.expire, "total", timeout, d)
        try:
            return await d
        except HttpBodyTooLarge:
            raise
        except Exception as exc:
            if call.expired is not None:
                limit, seconds = call.expired
                raise HttpTimeout(f"{method.decode()} {url}: {_timeout_words(limit, call.phase, seconds)}",
                                  limit, call.phase, seconds) from None
            if isinstance(exc, HttpError):
                raise
            raise _classify(exc, f"{method.decode()} {url}") from None
        finally:
            if timer.active():
                timer.cancel()

    async def _run(self, call: _Call, method: bytes, url: str, headers: TxHeaders, body: bytes | None,
                   head_timeout: float | None, max_body: int) -> HttpResponse:
        if self._slots is not None:
            await self._slots.acquire()  # cancelled by the deadline: leaves the queue, holds nothing
        self.in_flight += 1
        timers: list[Any] = []
        try:
            call.phase = "head"  # "connect" while the pool opens a new connection (_CountingEndpoint)

            def written() -> None:
                if head_timeout is not None:
                    timers.append(self.reactor.callLater(head_timeout,
                                                         lambda: call.expire("head", head_timeout, call.sent)))

            if head_timeout is not None and body is None:
                body = b""  # a producer, to know when the request is written
            producer = cast(IBodyProducer, _Bytes(body, written)) if body is not None else None
            self.current = call
            try:
                call.sent = self._agent.request(method, url.encode("ascii"), headers, producer)
            finally:
                self.current = None
            response = await call.sent
            for t in timers:
                if t.active():
                    t.cancel()
            call.phase = "body"
            call.sent = _read_body(response, max_body)
            data = await call.sent
            return HttpResponse(int(response.code), response.headers, data, url)
        finally:
            for t in timers:
                if t.active():
                    t.cancel()
            self.in_flight -= 1
            if self._slots is not None:
                self._slots.release()

    def close(self) -> Deferred[None]:
        """Close the idle connections (calls in flight finish)."""
        closed: Deferred[None] = self.pool.closeCachedConnections()
        return closed


def _headers(given: HeadersIn) -> TxHeaders:
    if isinstance(given, TxHeaders):
        return given.copy()
    out = TxHeaders()
    for name, value in (given or {}).items():
        out.setRawHeaders(name, [value] if isinstance(value, bytes) else list(value))
    return out


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc.lower()


def _timeout_words(limit: str, phase: str, seconds: float) -> str:
    if limit == "connect":
        return f"no connection within {seconds:g}s"
    if limit == "head":
        return f"no response head within {seconds:g}s of the request"
    where = {"slot": " waiting for a slot (calls in flight)", "connect": " connecting",
             "head": " waiting for the response head", "body": " reading the body"}.get(phase, "")
    return f"no answer within {seconds:g}s ({where.strip()})"


def _reasons(exc: BaseException) -> list[BaseException]:
    found = [exc]
    for reason in getattr(exc, "reasons", None) or ():
        found.append(reason.value)
    return found


def _classify(exc: BaseException, what: str) -> HttpError:
    for reason in _reasons(exc):
        tls = describe_tls_failure(reason)
        if tls is not None:
            return HttpTlsRefused(f"{what}: {tls}")
    if isinstance(exc, (neterror.ConnectError, neterror.ConnectionLost, webclient.ResponseFailed,
                        webclient.ResponseNeverReceived, neterror.DNSLookupError, neterror.TimeoutError,
                        defer.CancelledError, neterror.ConnectingCancelledError)):
        reasons = [r.getErrorMessage() for r in getattr(exc, "reasons", None) or ()]
        text = "; ".join(reasons) if reasons else (f"{type(exc).__name__}: {exc}" if str(exc)
                                                    else type(exc).__name__)
        return HttpUnreachable(f"{what}: {text}")
    return HttpError(f"{what}: {type(exc).__name__}: {exc}")
