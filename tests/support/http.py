"""Loopback HTTP helpers for the tests: echo backends, raw TCP servers, an
HTTP client and a raw-bytes client, YAML snippets.

Everything here runs in the one reactor pytest-twisted drives, so the
gateway, the backends and the clients of a test all share it: never use a
blocking socket in a test; use :func:`raw_exchange` / :func:`http_request`.
The fixtures built on these are in :mod:`support.fixtures`.

``from support.http import http_request, raw_exchange``

``http_request(method, url, headers=None, body=None)`` → :class:`HTTPResult`
``raw_exchange(port, data, ...)`` → :class:`RawResult`
``parse_responses(data)`` → list of :class:`RawResponse` (for pipelining)
``static_upstream_yaml(name, ports)`` / ``vs_yaml(...)`` YAML snippets.
"""

from __future__ import annotations

import hashlib
import io
import json
import textwrap
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import parse_qs

import attrs
from twisted.internet import defer, error, protocol
from twisted.internet import reactor as _reactor
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.python.failure import Failure
from twisted.web import client as webclient
from twisted.web import http, resource, server
from twisted.web.http_headers import Headers
from twisted.web.iweb import UNKNOWN_LENGTH, IBodyProducer
from zope.interface import implementer

reactor: Any = _reactor

def sleep(seconds: float) -> defer.Deferred:
    """``await sleep(0.1)`` in a test."""
    from twisted.internet import task

    return task.deferLater(reactor, seconds, lambda: None)


async def wait_for(predicate: Callable[[], Any], timeout: float = 3.0, interval: float = 0.01) -> Any:
    """Poll ``predicate`` until it returns something truthy (or fail)."""
    deadline = reactor.seconds() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if reactor.seconds() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
        await sleep(interval)


# ---------------------------------------------------------------------------
# The echo backend
# ---------------------------------------------------------------------------


@attrs.define
class SeenRequest:
    """What a backend received (one per request)."""

    method: bytes
    uri: bytes
    path: bytes
    headers: list[tuple[bytes, list[bytes]]]
    body_length: int = 0
    body_sha256: str = ""
    #: set to True when the client (the gateway) went away before the answer
    aborted: bool = False
    finished: bool = False
    #: bytes of body written so far by ``/_stream``
    body_sent: int = 0

    def header(self, name: bytes) -> list[bytes] | None:
        for n, values in self.headers:
            if n.lower() == name.lower():
                return values
        return None


class _Streamer:
    """A push producer writing ``size`` bytes in ``chunk``-sized pieces,
    one piece per ``delay`` seconds, honouring pause/resume (back-pressure)."""

    def __init__(self, request: server.Request, size: int, chunk: int, delay: float, seen: SeenRequest) -> None:
        self.request = request
        self.seen = seen
        self.left = size
        self.chunk = chunk
        self.delay = delay
        self.paused = False
        self.stopped = False
        self.call: Any = None
        self.piece = b"x" * chunk
        request.registerProducer(self, True)
        request.notifyFinish().addErrback(lambda f: self.stopProducing())
        self._schedule()

    def _schedule(self) -> None:
        if self.call is None and not self.paused and not self.stopped:
            self.call = reactor.callLater(self.delay, self._tick)

    def _tick(self) -> None:
        self.call = None
        if self.stopped:
            return
        # Write several pieces per tick when there is no delay (fast, still bounded).
        for _ in range(1 if self.delay else 16):
            if self.left <= 0 or self.paused or self.stopped:
                break
            n = min(self.chunk, self.left)
            self.left -= n
            self.seen.body_sent += n
            self.request.write(self.piece if n == self.chunk else self.piece[:n])
        if self.left <= 0:
            self.stopped = True
            self.request.unregisterProducer()
            self.request.finish()
            return
        self._schedule()

    def pauseProducing(self) -> None:
        self.paused = True
        if self.call is not None and self.call.active():
            self.call.cancel()
        self.call = None

    def resumeProducing(self) -> None:
        self.paused = False
        self._schedule()

    def stopProducing(self) -> None:
        self.stopped = True
        if self.call is not None and self.call.active():
            self.call.cancel()
        self.call = None


class EchoBackend(resource.Resource):
    """An HTTP backend for tests. Every request is recorded in ``requests``.

    Special paths (the query sets parameters):

    ``/_stream?size=N&chunk=C&delay_ms=D``
        a body of ``N`` bytes of ``x`` with ``content-length`` (add
        ``&chunked=1`` for chunked framing), ``C`` bytes per write, waiting
        ``D`` ms between writes, honouring back-pressure.
    ``/_hang``
        never answers (the record's ``aborted`` turns True when the gateway
        closes the connection).
    ``/_close_mid?size=N``
        announces ``content-length: N``, sends 1000 bytes, then resets.
    ``/_sleep?ms=N``
        echoes after ``N`` ms.
    ``/_status?code=N``
        echoes with status ``N``.
    ``/_headers?name=value&...``
        echoes, adding each query pair as a response header (repeats kept).
    anything else
        ``200`` with ``application/json``: ``{"server", "method", "uri",
        "path", "headers": [[name, [values...]], ...], "body_length",
        "body_sha256"}``. HEAD gets the headers only.
    """

    isLeaf = True

    def __init__(self, name: str = "backend") -> None:
        super().__init__()
        self.name = name
        self.requests: list[SeenRequest] = []

    def _record(self, request: server.Request) -> SeenRequest:
        content = request.content
        content.seek(0)
        digest = hashlib.sha256()
        length = 0
        while True:
            block = content.read(1 << 20)
            if not block:
                break
            length += len(block)
            digest.update(block)
        seen = SeenRequest(
            request.method, request.uri, request.path,
            [(n, list(v)) for n, v in request.requestHeaders.getAllRawHeaders()],
            length, digest.hexdigest(),
        )
        self.requests.append(seen)

        def lost(f: Failure) -> None:
            seen.aborted = True

        def done(_: Any) -> None:
            seen.finished = True

        request.notifyFinish().addCallbacks(done, lost)
        return seen

    def _echo(self, request: server.Request, seen: SeenRequest) -> bytes:
        body = json.dumps({
            "server": self.name,
            "method": seen.method.decode("latin-1"),
            "uri": seen.uri.decode("latin-1"),
            "path": seen.path.decode("latin-1"),
            "headers": [[n.decode("latin-1"), [v.decode("latin-1") for v in vs]] for n, vs in seen.headers],
            "body_length": seen.body_length,
            "body_sha256": seen.body_sha256,
        }).encode()
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"x-backend", self.name.encode())
        return body

    def render(self, request: server.Request) -> Any:
        seen = self._record(request)
        args = {k.decode(): v[0].decode() for k, v in parse_qs(request.uri.partition(b"?")[2]).items()}
        path = request.path
        if path == b"/_stream":
            size = int(args.get("size", "1000000"))
            if args.get("chunked") != "1":
                request.setHeader(b"content-length", b"%d" % size)
            _Streamer(request, size, int(args.get("chunk", "65536")), int(args.get("delay_ms", "0")) / 1000, seen)
            return server.NOT_DONE_YET
        if path == b"/_hang":
            return server.NOT_DONE_YET
        if path == b"/_close_mid":
            request.setHeader(b"content-length", args.get("size", "100000").encode())
            request.write(b"y" * 1000)
            reactor.callLater(0.05, request.channel.transport.abortConnection)
            return server.NOT_DONE_YET
        if path == b"/_sleep":
            def later() -> None:
                if not seen.aborted:
                    request.write(self._echo(request, seen))
                    request.finish()
            reactor.callLater(int(args.get("ms", "100")) / 1000, later)
            return server.NOT_DONE_YET
        if path == b"/_status":
            request.setResponseCode(int(args.get("code", "200")))
        if path == b"/_headers":
            for k, vs in parse_qs(request.uri.partition(b"?")[2]).items():
                for v in vs:
                    request.responseHeaders.addRawHeader(k, v)
        return self._echo(request, seen)


class _TrackingSite(server.Site):
    """A Site that remembers its connections so teardown can close them."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.protocols: set[Any] = set()
        self.connections_made = 0

    def buildProtocol(self, addr: Any) -> Any:
        p = super().buildProtocol(addr)
        site = self
        site.connections_made += 1
        original = p.connectionLost

        def connectionLost(reason: Failure, _orig: Any = original, _p: Any = p) -> None:
            site.protocols.discard(_p)
            _orig(reason)

        p.connectionLost = connectionLost
        self.protocols.add(p)
        return p


@attrs.define
class Backend:
    """A running :class:`EchoBackend`: ``port``, ``requests``, ``url(path)``."""

    resource: EchoBackend
    site: _TrackingSite
    listening: Any
    port: int

    @property
    def requests(self) -> list[SeenRequest]:
        return self.resource.requests

    @property
    def name(self) -> str:
        return self.resource.name

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def close(self) -> None:
        await self.listening.stopListening()
        for p in list(self.site.protocols):
            transport = getattr(p, "transport", None)
            if transport is not None:
                transport.abortConnection()


def start_backend(name: str) -> Backend:
    res = EchoBackend(name)
    site = _TrackingSite(res)
    site.log = lambda request: None  # type: ignore[method-assign]
    site.displayTracebacks = False
    listening = reactor.listenTCP(0, site, interface="127.0.0.1")
    return Backend(res, site, listening, listening.getHost().port)


# ---------------------------------------------------------------------------
# A raw TCP server (malformed upstream responses, resets, silence)
# ---------------------------------------------------------------------------


class _RawServerProtocol(protocol.Protocol):
    def connectionMade(self) -> None:
        self.factory.connections.append(self)
        self.received = b""
        self.answered = False

    def dataReceived(self, data: bytes) -> None:
        self.received += data
        self.factory.received.append(data)
        if self.answered or b"\r\n\r\n" not in self.received:
            return
        self.answered = True
        if self.factory.pause_reading:
            self.transport.pauseProducing()
        reply = self.factory.reply
        if callable(reply):
            reply = reply(self.received)
        if reply is None:  # stay silent
            return
        if reply == b"RESET":
            self.transport.abortConnection()
            return
        self.transport.write(reply)
        if self.factory.close_after:
            self.transport.loseConnection()


class RawServer(protocol.ServerFactory):
    """Answers the first request head on each connection with ``reply``:

    * ``bytes``: written verbatim, then the connection is closed (unless
      ``close_after=False``);
    * ``None``: never answer;
    * ``b"RESET"``: abort the connection (RST);
    * a callable ``f(received_bytes)`` returning one of the above.

    ``received`` collects every byte received, ``connections`` every
    connection; ``port`` is the listening port. With ``pause_reading`` the
    server stops reading once a request head has arrived (a stalled
    upstream: the sender's buffers fill up).
    """

    protocol = _RawServerProtocol

    def __init__(self, reply: Any, close_after: bool = True, pause_reading: bool = False) -> None:
        self.reply = reply
        self.close_after = close_after
        self.pause_reading = pause_reading
        self.received: list[bytes] = []
        self.connections: list[_RawServerProtocol] = []
        self.listening: Any = None
        self.port = 0

    @property
    def data(self) -> bytes:
        return b"".join(self.received)


# ---------------------------------------------------------------------------
# Configuration directories and gateways
# ---------------------------------------------------------------------------


def static_upstream_yaml(name: str, ports: Iterable[int], namespace: str = "default") -> str:
    """A ``core.vendor.io/v1`` Upstream with ``static.hosts`` on 127.0.0.1."""
    hosts = "\n".join(f"      - {{addr: 127.0.0.1, port: {p}}}" for p in ports)
    return textwrap.dedent(f"""\
        apiVersion: core.vendor.io/v1
        kind: Upstream
        metadata: {{name: {name}, namespace: {namespace}}}
        spec:
          static:
            hosts:
        """) + hosts + "\n"


def vs_yaml(name: str = "vs", upstream: str = "backend", domains: Sequence[str] = ("*",),
            options: str = "", routes: str | None = None, namespace: str = "default") -> str:
    """A VirtualService; by default one ``/`` route to the Upstream ``upstream``.

    ``options`` is YAML text placed under ``virtualHost.options`` (indent-free
    flow style such as ``"{apikey: {key: s3cret}}"``); ``routes`` replaces
    the whole ``routes:`` list (YAML text, already indented by 4 spaces).
    """
    if routes is None:
        routes = (
            "    - matchers: [{prefix: /}]\n"
            f"      routeAction: {{single: {{upstream: {{name: {upstream}}}}}}}\n"
        )
    doms = ", ".join(json.dumps(d) for d in domains)
    text = (
        "apiVersion: gateway.vendor.io/v1\n"
        "kind: VirtualService\n"
        f"metadata: {{name: {name}, namespace: {namespace}}}\n"
        "spec:\n"
        "  virtualHost:\n"
        f"    domains: [{doms}]\n"
    )
    if options:
        text += f"    options: {options}\n"
    return text + "    routes:\n" + routes


# ---------------------------------------------------------------------------
# HTTP client (Agent, non-persistent, no redirects, no decoding)
# ---------------------------------------------------------------------------


@attrs.define
class HTTPResult:
    status: int
    headers: Headers
    body: bytes

    def header(self, name: str) -> str | None:
        v = self.headers.getRawHeaders(name.encode())
        return v[0].decode("latin-1") if v else None

    def json(self) -> Any:
        return json.loads(self.body)


@implementer(IBodyProducer)
class ChunkedBody:
    """A request body of unknown length (sent chunked): ``pieces`` in turn."""

    def __init__(self, pieces: Iterable[bytes], delay: float = 0.0) -> None:
        self.pieces = iter(pieces)
        self.delay = delay
        self.length = UNKNOWN_LENGTH
        self._paused = False
        self._stopped = False
        self._done: defer.Deferred | None = None
        self._consumer: Any = None
        self._call: Any = None

    def startProducing(self, consumer: Any) -> defer.Deferred:
        self._consumer = consumer
        self._done = defer.Deferred()
        self._next()
        return self._done

    def _next(self) -> None:
        self._call = None
        if self._stopped or self._paused:
            return
        for _ in range(1 if self.delay else 32):
            try:
                piece = next(self.pieces)
            except StopIteration:
                self._stopped = True
                d, self._done = self._done, None
                if d is not None:
                    d.callback(None)
                return
            self._consumer.write(piece)
            if self._paused:
                return
        self._call = reactor.callLater(self.delay, self._next)

    def pauseProducing(self) -> None:
        self._paused = True
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def resumeProducing(self) -> None:
        if self._paused:
            self._paused = False
            if self._call is None:
                self._call = reactor.callLater(0, self._next)

    def stopProducing(self) -> None:
        self._stopped = True
        if self._call is not None and self._call.active():
            self._call.cancel()


class _Collect(protocol.Protocol):
    def __init__(self, done: defer.Deferred, keep: bool, on_data: Callable[[bytes], None] | None) -> None:
        self.done = done
        self.keep = keep
        self.on_data = on_data
        self.parts: list[bytes] = []
        self.count = 0

    def dataReceived(self, data: bytes) -> None:
        self.count += len(data)
        if self.keep:
            self.parts.append(data)
        if self.on_data is not None:
            self.on_data(data)

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        if reason is not None and not reason.check(webclient.ResponseDone, http.PotentialDataLoss):
            self.done.errback(reason)
        else:
            self.done.callback(b"".join(self.parts) if self.keep else self.count)


async def http_request(method: str, url: str, headers: Any = None, body: bytes | IBodyProducer | None = None,
                       timeout: float = 10.0, keep_body: bool = True,
                       on_data: Callable[[bytes], None] | None = None) -> HTTPResult:
    """One request over a fresh connection. ``headers``: a mapping (values may
    be lists, for repeated headers) or a list of pairs. With
    ``keep_body=False`` the result's ``body`` is ``b""`` and
    ``headers`` gains ``x-test-body-length`` (bytes received)."""
    h = Headers()
    items = headers.items() if isinstance(headers, dict) else (headers or [])
    for name, value in items:
        for v in (value if isinstance(value, list) else [value]):
            h.addRawHeader(name.encode("latin-1"), v.encode("latin-1") if isinstance(v, str) else v)
    producer: Any = body
    if isinstance(body, bytes):
        producer = webclient.FileBodyProducer(io.BytesIO(body))
    pool = webclient.HTTPConnectionPool(reactor, persistent=False)
    agent = webclient.Agent(reactor, pool=pool)
    d = agent.request(method.encode(), url.encode(), h, producer)
    d.addTimeout(timeout, reactor)
    response = await d
    done: defer.Deferred = defer.Deferred()
    done.addTimeout(timeout, reactor)
    response.deliverBody(_Collect(done, keep_body, on_data))
    data = await done
    if not keep_body:
        response.headers.setRawHeaders(b"x-test-body-length", [b"%d" % data])
        data = b""
    return HTTPResult(response.code, response.headers, data)


# ---------------------------------------------------------------------------
# Raw sockets (built on Twisted protocols)
# ---------------------------------------------------------------------------


@attrs.define
class RawResult:
    """What came back on a raw connection.

    :ivar data: every byte received.
    :ivar closed: the peer closed the connection (else we gave up: timeout
        or ``until`` satisfied).
    :ivar timed_out: the timeout fired before the peer closed.
    :ivar reset: the peer's close was not a clean one (a TCP reset: the
        client knows the response broke off, even one delimited by the close).
    """

    data: bytes
    closed: bool
    timed_out: bool
    reset: bool = False

    @property
    def status(self) -> int | None:
        """Status of the first response, or None if nothing parseable came."""
        if not self.data.startswith(b"HTTP/1."):
            return None
        return int(self.data.split(b" ", 2)[1])

    def responses(self, methods: Sequence[str] = ()) -> list["RawResponse"]:
        return parse_responses(self.data, methods)


class _RawClient(protocol.Protocol):
    def __init__(self, pieces: Sequence[bytes], delay: float, timeout: float,
                 until: Callable[[bytes], bool] | None, half_close: bool, keep: int | None = None) -> None:
        self.keep = keep
        self.count = 0
        self.pieces = list(pieces)
        self.delay = delay
        self.timeout = timeout
        self.until = until
        self.half_close = half_close
        self.buf = b""
        self.done: defer.Deferred = defer.Deferred()
        self.timer: Any = None
        self.sender: Any = None
        self.finished = False
        self.timed_out = False

    def connectionMade(self) -> None:
        self.timer = reactor.callLater(self.timeout, self._timeout)
        self._send()

    def _send(self) -> None:
        self.sender = None
        if not self.pieces or self.transport is None or self.finished:
            return
        self.transport.write(self.pieces.pop(0))
        if self.pieces:
            self.sender = reactor.callLater(self.delay, self._send)
        elif self.half_close:
            self.transport.loseWriteConnection()

    def _timeout(self) -> None:
        self.timer = None
        self.timed_out = True
        self.transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        self.count += len(data)
        if self.keep is None or len(self.buf) < self.keep:
            self.buf += data
        if self.until is not None and not self.finished and self.until(self.buf):
            self.finished = True
            self.transport.abortConnection()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        for call in (self.timer, self.sender):
            if call is not None and call.active():
                call.cancel()
        closed = not self.timed_out and not self.finished
        reset = closed and reason is not None and not reason.check(error.ConnectionDone)
        self.done.callback(RawResult(self.buf, closed, self.timed_out, reset))


async def raw_exchange(port: int, data: bytes | Sequence[bytes], timeout: float = 3.0, delay: float = 0.0,
                       until: Callable[[bytes], bool] | None = None, half_close: bool = False,
                       host: str = "127.0.0.1") -> RawResult:
    """Connect, send ``data`` (or each piece of a list, ``delay`` s apart),
    and collect the reply until the peer closes, ``until(received)`` is true,
    or ``timeout`` s pass."""
    pieces = [data] if isinstance(data, bytes) else list(data)
    proto = _RawClient(pieces, delay, timeout, until, half_close)
    await connectProtocol(TCP4ClientEndpoint(reactor, host, port, timeout=timeout), proto)
    return await proto.done


async def raw_connect(port: int, host: str = "127.0.0.1", keep: int | None = None) -> Any:
    """An open connection (a Protocol with ``.transport``, ``.buf``, ``.count``
    and ``.done``, a Deferred fired with a :class:`RawResult` on close) that
    collects what it receives (only the first ``keep`` bytes, if given; all
    are counted); close it with ``.transport.abortConnection()``."""
    proto = _RawClient([], 0, 3600, None, False, keep)
    await connectProtocol(TCP4ClientEndpoint(reactor, host, port), proto)
    return proto


@attrs.define
class RawResponse:
    version: bytes
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        for n, v in self.headers:
            if n.lower() == name.lower():
                return v
        return None


def parse_responses(data: bytes, methods: Sequence[str] = ()) -> list[RawResponse]:
    """Split a byte stream into HTTP/1.x responses (content-length, chunked,
    or read-until-close framing; 1xx responses included). Stops at the
    first incomplete response. ``methods[i]`` is the method of the i-th
    request (a response to ``HEAD`` has no body)."""
    out: list[RawResponse] = []
    answered = 0
    while data:
        end = data.find(b"\r\n\r\n")
        if end == -1:
            break
        head, data = data[:end].split(b"\r\n"), data[end + 4:]
        version, status, *_ = head[0].split(b" ", 2)
        headers = []
        for line in head[1:]:
            name, _, value = line.partition(b":")
            headers.append((name.strip(), value.strip()))
        r = RawResponse(version, int(status), headers, b"")
        code = r.status
        if 100 <= code < 200:
            out.append(r)
            continue
        head_request = answered < len(methods) and methods[answered] == "HEAD"
        answered += 1
        if code in (204, 304) or head_request:
            out.append(r)
            continue
        te = (r.header(b"transfer-encoding") or b"").lower()
        cl = r.header(b"content-length")
        if b"chunked" in te:
            body = b""
            while True:
                line_end = data.find(b"\r\n")
                if line_end == -1:
                    return out
                size = int(data[:line_end].split(b";")[0], 16)
                data = data[line_end + 2:]
                if size == 0:
                    trailer_end = data.find(b"\r\n")
                    data = data[trailer_end + 2:]
                    break
                body += data[:size]
                data = data[size + 2:]
            r.body = body
        elif cl is not None:
            n = int(cl)
            if len(data) < n:
                return out
            r.body, data = data[:n], data[n:]
        else:
            r.body, data = data, b""
        out.append(r)
    return out


def rss_bytes() -> int:
    """Resident set size of this process (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0
