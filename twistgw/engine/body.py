"""A client's request body on its way upstream.

The client connection writes the body into a :class:`RequestBody` as the
parser delivers it; the upstream connection, once it has sent the request
head, takes it (:meth:`RequestBody.attach`) and receives the rest as it
comes. Until then up to ``BODY_BUFFER_LIMIT`` bytes are kept and the client
is paused past that. The two sides only meet through the two small
interfaces below.
"""

from __future__ import annotations

from typing import Protocol

from twistgw.engine.framing import BODY_BUFFER_LIMIT

__all__ = ["BodyConsumer", "BodyFlow", "BodyTap", "RequestBody"]


class BodyFlow(Protocol):
    """Where the body comes from: reading from the client pauses and resumes."""

    def pause_body(self) -> None: ...

    def resume_body(self) -> None: ...


class BodyConsumer(Protocol):
    """Where the body goes: the upstream connection."""

    def send_body(self, data: bytes) -> None: ...

    def end_body(self) -> None: ...


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
                 "_limit", "_attached", "tap")

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
        if self._buffered > BODY_BUFFER_LIMIT:
            self.flow.pause_body()

    def finish(self) -> None:
        self.complete = True
        tap = self.tap
        if tap is not None:
            self.tap = None
            tap.finish()
        if self.consumer is not None and not self.stopped:
            self.consumer.end_body()

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
            consumer.end_body()

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
        self._buffer = []
