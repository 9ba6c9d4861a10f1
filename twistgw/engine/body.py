"""A client's request body on its way upstream.

The client connection writes the body into a :class:`RequestBody` as the
parser delivers it; the upstream connection, once it has sent the request
head, takes it (:meth:`RequestBody.attach`) and receives the rest as it
comes. Until then up to ``BODY_BUFFER_LIMIT`` bytes are kept and the client
is paused past that. The two sides only meet through the two small
interfaces below.

A plugin that must see the body before the chain decides (ext_authz's
``requestBody``) asks for its first bytes (:meth:`RequestBody.read_prefix`):
the bound is raised to what it asked for, and the answer is what is
buffered, *not* taken out: :meth:`RequestBody.attach` still sends every
byte upstream. A request nobody asks about never takes that path.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from twisted.internet.defer import Deferred, succeed

from twistgw.api.types import BodyPrefix
from twistgw.engine.framing import BODY_BUFFER_LIMIT

__all__ = ["BodyConsumer", "BodyFlow", "BodyTap", "RequestBody"]


class BodyFlow(Protocol):
    """Where the body comes from: reading from the client pauses and resumes."""

    def pause_body(self) -> None: ...

    def resume_body(self) -> None: ...


class BodyConsumer(Protocol):
    """Where the body goes: the upstream connection."""

    def send_body(self, data: bytes) -> None: ...

    def end_body(self, trailers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """The body ended, with the client's ``trailers`` (lower-case names,
        filtered by ``core.headers.trailer_pairs``; () for none)."""


class BodyTap(Protocol):
    """A copy of the body on the side (a shadow request's)."""

    def write(self, data: bytes) -> None: ...

    def finish(self) -> None: ...

    def stop(self) -> None: ...


class RequestBody:
    """A client's request body on its way upstream.

    ``length`` is the Content-Length (None: chunked, re-framed upstream).
    """

    __slots__ = ("length", "flow", "_buffer", "_buffered", "consumer", "complete", "stopped", "kept", "_kept_bytes",
                 "_limit", "_attached", "tap", "_waiter", "_want", "trailers")

    def __init__(self, length: int | None, flow: BodyFlow) -> None:
        self.length = length
        self.flow = flow
        self._buffer: list[bytes] = []
        self._buffered = 0
        self.consumer: BodyConsumer | None = None
        self.complete = False
        self.stopped = False
        #: a copy of every chunk so far, for a retry; None: not kept (no
        #: retry policy), or the body went past the bound
        self.kept: list[bytes] | None = None
        #: a copy for a shadow request (engine.upstream.shadow), or None
        self.tap: BodyTap | None = None
        #: a read_prefix waiting for more bytes, and how many it wants
        self._waiter: Deferred[BodyPrefix] | None = None
        self._want = 0
        #: the client's trailer fields (chunked HTTP/1.1, or HTTP/2's
        #: trailing HEADERS), passed on at the end: ``trailer_pairs`` of them
        self.trailers: tuple[tuple[bytes, bytes], ...] = ()

    def keep(self, limit: int) -> None:
        """Keep a copy of the body, up to ``limit`` bytes, so that a retry
        can send it again; past the limit the copy is dropped for good (a
        body already streamed past the bound is never replayed)."""
        self.kept = list(self._buffer)
        self._kept_bytes = self._buffered
        self._limit = limit
        self._attached = False

    def mirror_to(self, tap: "BodyTap") -> None:
        """Give ``tap`` a copy of the body: what is buffered now, then every
        chunk as it comes, then the end (or the stop). The tap never
        pauses the client."""
        for chunk in self._buffer:
            tap.write(chunk)
        if self.complete:
            tap.finish()
        elif self.stopped:
            tap.stop()
        else:
            self.tap = tap

    def write(self, data: bytes) -> None:
        if self.stopped:
            return
        tap = self.tap
        if tap is not None:
            tap.write(data)
        kept = self.kept
        if kept is not None:
            self._kept_bytes += len(data)
            if self._kept_bytes > self._limit:
                self.kept = None
            else:
                kept.append(data)
        consumer = self.consumer
        if consumer is not None:
            consumer.send_body(data)
            return
        self._buffer.append(data)
        self._buffered += len(data)
        if self._waiter is not None:
            if self._buffered <= self._want:
                return  # read_prefix raised the bound: keep reading
            self._answer()
            if self.consumer is not None or self.stopped:
                return  # the reader's chain forwarded (attach took the buffer) or refused, at once
        if self._buffered > BODY_BUFFER_LIMIT:
            self.flow.pause_body()

    def finish(self) -> None:
        self.complete = True
        tap = self.tap
        if tap is not None:
            self.tap = None
            tap.finish()
        if self._waiter is not None:
            # The reader's chain may forward at once (a pooled connection):
            # attach then ends the body itself, so it is not ended here too.
            self._answer()
        elif self.consumer is not None and not self.stopped:
            self.consumer.end_body(self.trailers)

    def read_prefix(self, max_bytes: int, partial: bool) -> Deferred[BodyPrefix]:
        """The first ``max_bytes`` (or the whole shorter body) once they are
        here, without taking them: see :meth:`RequestContext.read_body
        <twistgw.RequestContext.read_body>`. Only before :meth:`attach`."""
        if self.consumer is not None or self._waiter is not None:
            raise RuntimeError("the body is read before it is forwarded, by one reader at a time")
        if not partial and self.length is not None and self.length > max_bytes:
            return succeed(BodyPrefix(b"", False))
        if self.complete or self.stopped or self._buffered > max_bytes:
            return succeed(self._prefix(max_bytes))
        waiter: Deferred[BodyPrefix] = Deferred()
        self._waiter = waiter
        self._want = max_bytes
        self.flow.resume_body()  # paused at BODY_BUFFER_LIMIT: read on up to max_bytes
        return waiter

    def _answer(self) -> None:
        waiter, self._waiter = self._waiter, None
        assert waiter is not None
        waiter.callback(self._prefix(self._want))

    def _prefix(self, max_bytes: int) -> BodyPrefix:
        data = b"".join(self._buffer)
        if len(self._buffer) > 1:
            self._buffer = [data]  # joined once: attach sends it as one chunk
        if self.complete and len(data) <= max_bytes:
            return BodyPrefix(data, True)
        return BodyPrefix(data[:max_bytes], False)

    def attach(self, consumer: BodyConsumer) -> None:
        """Send what was buffered to ``consumer``, and the rest as it comes."""
        self.consumer = consumer
        buffered, self._buffer, self._buffered = self._buffer, [], 0
        if self.kept is not None:
            if self._attached:  # a retry: everything so far again
                buffered = self.kept
            self._attached = True
        for chunk in buffered:
            consumer.send_body(chunk)
        self.flow.resume_body()
        if self.complete:
            consumer.end_body(self.trailers)

    def detach(self) -> None:
        """The consumer failed (a retry follows): hold what comes meanwhile."""
        self.consumer = None

    @property
    def replayable(self) -> bool:
        """Every byte so far is kept: a retry may send the body again."""
        return self.kept is not None

    def stop(self) -> None:
        self.stopped = True
        tap = self.tap
        if tap is not None:
            self.tap = None
            tap.stop()
        self.consumer = None
        if self._waiter is not None:  # the client went away mid-body: what came, incomplete
            self._answer()
        self._buffer = []
