"""The recording backend of :mod:`twistgw.sdk.testing`: a real HTTP server on
loopback that keeps every request it receives and answers what the test
says. Public names are re-exported by :mod:`twistgw.sdk.testing`."""

from __future__ import annotations

import sys
from typing import Any, Callable, Mapping, Sequence, Union

import attrs

from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.python.failure import Failure
from twisted.web import resource, server

__all__ = ["BackendResponse", "RecordedRequest", "RecordingBackend", "close_treq_idle_connections",
           "start_recording_backend"]


@attrs.frozen
class RecordedRequest:
    """One request as the backend received it from the gateway.

    :ivar method: ``"GET"``, as sent.
    :ivar target: the request target, path and query (``"/orders?page=2"``):
        what the gateway forwarded, after any ``prefixRewrite``.
    :ivar headers: every header as ``(name, value)`` text pairs, names
        lower-cased, a header sent twice as two pairs, in the order received.
    :ivar body: the request body (``b""`` for none).
    """

    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @property
    def path(self) -> str:
        """The target without its query."""
        return self.target.partition("?")[0]

    def header(self, name: str) -> str | None:
        """The first value of a header (any case), or None."""
        values = self.header_values(name)
        return values[0] if values else None

    def header_values(self, name: str) -> list[str]:
        """Every value of a header (any case), in order."""
        name = name.lower()
        return [v for n, v in self.headers if n == name]


@attrs.frozen
class BackendResponse:
    """What the backend answers: ``status``, ``body`` and ``headers``
    (``(name, value)`` text pairs; a mapping is accepted too)."""

    status: int = 200
    body: bytes = b"ok"
    headers: Sequence[tuple[str, str]] | Mapping[str, str] = (("content-type", "text/plain"),)


#: What a test gives :func:`start_recording_backend`: one answer for every
#: request, or a function of the request that returns the answer.
Responder = Union[BackendResponse, Callable[[RecordedRequest], BackendResponse]]


class _Recorder(resource.Resource):
    isLeaf = True

    def __init__(self, owner: RecordingBackend) -> None:
        super().__init__()
        self.owner = owner

    def render(self, request: server.Request) -> bytes:
        headers = tuple((name.decode("latin-1").lower(), value.decode("latin-1"))
                        for name, values in request.requestHeaders.getAllRawHeaders() for value in values)
        body = request.content.read() if request.content is not None else b""
        seen = RecordedRequest(request.method.decode("latin-1"), request.uri.decode("latin-1"), headers, body)
        self.owner.requests.append(seen)
        respond = self.owner.respond
        answer = respond if isinstance(respond, BackendResponse) else respond(seen)
        request.setResponseCode(answer.status)
        pairs = answer.headers.items() if isinstance(answer.headers, Mapping) else answer.headers
        for name, value in pairs:
            request.responseHeaders.addRawHeader(name.encode("latin-1"), value.encode("latin-1"))
        return answer.body


class _Site(server.Site):
    """A Site that remembers its open connections, so :meth:`close` ends them."""

    def __init__(self, root: resource.Resource) -> None:
        super().__init__(root)
        self.open: set[Any] = set()  # twisted.web's HTTPChannel (untyped in Twisted)
        self._gone: list[Deferred[None]] = []
        self.displayTracebacks = False

    def log(self, request: Any) -> None:  # no access log lines in test output
        pass

    def buildProtocol(self, addr: Any) -> Any:
        channel = super().buildProtocol(addr)
        if channel is None:
            return None
        lost = channel.connectionLost
        self.open.add(channel)

        def connection_lost(reason: Failure) -> None:
            self.open.discard(channel)
            try:
                lost(reason)
            finally:
                if not self.open:
                    waiting, self._gone = self._gone, []
                    for d in waiting:
                        d.callback(None)

        channel.connectionLost = connection_lost
        return channel

    def all_closed(self) -> Deferred[None]:
        """Fires once no connection is open."""
        if not self.open:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._gone.append(d)
        return d


class RecordingBackend:
    """A backend on ``127.0.0.1:port`` (see :func:`start_recording_backend`).

    :ivar port: the port it listens on.
    :ivar requests: every :class:`RecordedRequest`, in the order received.
    :ivar respond: what it answers (a :class:`BackendResponse`, or a function
        of the :class:`RecordedRequest`); assign it to change the answer.
    """

    def __init__(self, respond: Responder, reactor: Any) -> None:
        self.requests: list[RecordedRequest] = []
        self.respond: Responder = respond
        self._site = _Site(_Recorder(self))
        self._listening = reactor.listenTCP(0, self._site, interface="127.0.0.1")
        self.port: int = self._listening.getHost().port

    @property
    def last(self) -> RecordedRequest:
        """The last request received (IndexError if none was)."""
        return self.requests[-1]

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def upstream(self, name: str = "backend", namespace: str = "default") -> dict[str, Any]:
        """A static ``Upstream`` resource that sends to this backend, for
        :func:`twistgw.sdk.testing.start_gateway`'s resources."""
        return {"apiVersion": "gloo.solo.io/v1", "kind": "Upstream",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": self.port}]}}}

    async def close(self) -> None:
        """Stop listening and close every connection (the gateway's pooled
        ones included), so trial finds a clean reactor."""
        await maybeDeferred(self._listening.stopListening)
        await close_treq_idle_connections()  # a test's own requests to it
        for channel in list(self._site.open):
            transport = getattr(channel, "transport", None)  # none yet: not connected
            if transport is not None:
                transport.abortConnection()
        await self._site.all_closed()


async def close_treq_idle_connections() -> None:
    """Close the idle connections of treq's default pool, if treq is in use.

    When a server closes a keep-alive connection, Twisted's
    ``HTTPConnectionPool`` still holds it, with a timer of up to four
    minutes, until it is reused or that timer fires: a test that called
    ``treq.get(...)`` would leave that timer behind (trial's
    ``DirtyReactorAggregateError``). Idle connections only; requests in
    flight are not affected.
    """
    treq_api = sys.modules.get("treq.api")
    pool = treq_api.get_global_pool() if treq_api is not None else None
    if pool is not None:
        await pool.closeCachedConnections()


def start_recording_backend(respond: Responder | None = None, *, reactor: Any = None) -> RecordingBackend:
    """Start a :class:`RecordingBackend` on a free loopback port.

    ``respond`` is what it answers to every request (default: ``200``,
    ``text/plain``, ``ok``), or a function from the :class:`RecordedRequest`
    to a :class:`BackendResponse`. Call ``await backend.close()`` when done
    (trial: ``self.addCleanup(backend.close)``)::

        backend = start_recording_backend(BackendResponse(201, b"made"))
        gw = start_gateway([*RESOURCES, backend.upstream()], PLUGINS)
        ...
        assert backend.last.header("x-api-key") is None
    """
    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
    return RecordingBackend(respond if respond is not None else BackendResponse(), reactor)
