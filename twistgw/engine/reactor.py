"""The epoll reactor's dispatch loop without a logging context per event.

Twisted's ``EPollReactor.doPoll`` hands every ready socket to its handler
through ``twisted.python.log.callWithLogger``: it asks the socket for its
``logPrefix()``, builds a context dictionary and pushes and pops it on
the legacy logging context stack, so that an old-style ``log.msg`` inside
the handler is tagged with a "system" such as ``GatewayProtocol,12,10.0.0.7``.
A proxied request is at least two ready sockets (the client's request, the
upstream's response), and that bookkeeping is about 1.4 µs of each in
memory, 6-10 µs of CPU per request under load (``docs/performance.md``).

:func:`streamline` replaces ``doIteration`` on a running epoll reactor
with the same loop minus that context: each ready socket still goes to the
reactor's own ``_doReadOrWrite`` (so reads, writes, half-closes and
disconnects are handled exactly as before; a plain "readable" event, the
usual one, takes the same steps inline), and an exception escaping it
is still logged, as ``callWithLogger`` did, and the loop goes on with the
next socket. twistgw logs through ``twisted.logger`` (which never read
that context), so only legacy-style messages from Twisted's own internals
lose the socket prefix; ``docs/decisions.md`` records the trade.

Any other reactor (``twist --reactor=select``, a test's MemoryReactor) is
left alone.
"""

from __future__ import annotations

import errno
import select
import sys
from types import MethodType
from typing import Any, cast

from twisted.internet.posixbase import _NO_FILEDESC
from twisted.python import log

#: An epoll event that is only "readable" (no hang-up, no error, no writability).
_READABLE = getattr(select, "EPOLLIN", 1)

__all__ = ["streamline"]


def _do_poll(self: Any, timeout: float | None) -> None:
    """``EPollReactor.doPoll`` with the ready sockets dispatched directly."""
    if timeout is None:
        timeout = -1  # wait indefinitely
    try:
        ready = self._poller.poll(timeout, len(self._selectables))
    except OSError as err:
        if err.errno == errno.EINTR:
            return
        raise
    selectables = self._selectables
    dispatch = self._doReadOrWrite
    for fd, event in ready:
        selectable = selectables.get(fd)
        if selectable is None:
            continue  # closed by an earlier handler of this same batch
        try:
            if event == _READABLE:
                # The usual event, as _doReadOrWrite handles it (the
                # descriptor check, doRead, errors logged and turned into
                # a disconnect), minus its branches and its frame.
                why: BaseException | None
                try:
                    if selectable.fileno() == -1:
                        why = _NO_FILEDESC
                    else:
                        why = selectable.doRead()
                except BaseException:
                    why = sys.exc_info()[1]
                    log.err()
                if why:
                    self._disconnectSelectable(selectable, why, True)
            else:
                dispatch(selectable, fd, event)
        except KeyboardInterrupt:
            raise
        except BaseException:
            # What callWithLogger did: log it, and serve the other sockets.
            log.err(None, f"Unhandled error dispatching an event of {selectable!r}")


def streamline(reactor: Any) -> bool:
    """Give an epoll reactor the streamlined dispatch loop; True when it did
    (or already had). Safe to call more than once, and on a running reactor:
    the next iteration uses the new loop."""
    try:
        from twisted.internet.epollreactor import EPollReactor
    except ImportError:  # not Linux
        return False
    if type(reactor) is not EPollReactor:
        return False
    reactor = cast(Any, reactor)  # patched below: not EPollReactor's declared shape any more
    if getattr(reactor, "_twistgw_streamlined", False):
        return True
    reactor.doIteration = reactor.doPoll = MethodType(_do_poll, reactor)
    reactor._twistgw_streamlined = True
    return True
