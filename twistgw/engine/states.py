"""The states of the engine's state machines, in one place to read:

* :class:`ConnState`: an HTTP/1.1 client connection (what its next bytes
  are); every change is in :mod:`twistgw.engine.connection`;
* :class:`Phase`: one exchange (a request and its response), over HTTP/1.1
  or as one HTTP/2 stream; every change is in
  :mod:`twistgw.engine.exchange` (HTTP/1.1) or
  :mod:`twistgw.engine.http2.stream` (HTTP/2);
* :class:`H2State`: an HTTP/2 client connection; every change is in
  :mod:`twistgw.engine.http2.connection`.

The upstream connection's :class:`~twistgw.engine.upstream.connection.State`
lives with it. IntEnums, so that "at or past" is one comparison; the hot
paths compare with module-level aliases (``state is _HEAD``).
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ConnState", "H2State", "Phase"]


class ConnState(IntEnum):
    """What the next bytes from the client are. From DRAINING on, a
    connection only moves forward (DRAINING → CLOSING → CLOSED)."""

    #: between requests: no byte of the next head yet (the idle timer runs
    #: when nothing is being answered)
    IDLE = 0
    #: inside a request head (the head timer runs)
    HEAD = 1
    #: inside a request body
    BODY = 2
    #: an upgrade request was read: bytes after it are held for the tunnel
    UPGRADING = 3
    #: spliced to the upstream
    TUNNEL = 4
    #: nothing more is read; the requests read are answered, then it closes
    DRAINING = 5
    #: closing: what was written goes out, then the transport closes
    CLOSING = 6
    #: the transport is gone
    CLOSED = 7
    #: the client speaks HTTP/2 (its preface, or ALPN ``h2``): an
    #: :class:`~twistgw.engine.http2.connection.H2ServerConnection` serves
    #: the connection from now on; this object reads nothing more
    HTTP2 = 8


class Phase(IntEnum):
    """Where an exchange is. Only forward, QUEUED → HANDLING → RESPONDING,
    then one of the three final phases."""

    #: read, waiting behind the request being answered
    QUEUED = 0
    #: the chain decides, or the upstream was asked; no response byte yet
    HANDLING = 1
    #: the response head went out (or is held for the first body bytes)
    RESPONDING = 2
    #: the response ended
    DONE = 3
    #: the ``101`` went out; the connection is a tunnel now
    UPGRADED = 4
    #: the client went away, the request broke, or the response broke off
    ABORTED = 5


class H2State(IntEnum):
    """An HTTP/2 client connection. Only forward."""

    #: streams are accepted (up to SETTINGS_MAX_CONCURRENT_STREAMS)
    OPEN = 0
    #: a GOAWAY (NO_ERROR) went out: the streams it covers are answered,
    #: later ones refused (REFUSED_STREAM); closes once none is left
    DRAINING = 1
    #: ``loseConnection`` was called (after the last stream, or after a
    #: GOAWAY with an error code): what was written goes out
    CLOSING = 2
    #: the transport is gone
    CLOSED = 3
