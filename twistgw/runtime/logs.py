"""Where the gateway's logs go under ``twist``, and in what format.

``twist`` parses its own options (``--log-file``, ``--log-format``,
``--log-level``) before it asks the twistgw plugin for its service, and keeps
them on the parent of the plugin's options. The access log writes its lines
straight to that file, in that format (:class:`~twistgw.core.accesslog.AccessLog`);
everything else still goes through ``twisted.logger`` to ``twist``'s observer,
whose text form is made to escape control characters in event fields
(:func:`safe_text_file_observer`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import IO, Any, Callable, Iterator

from twisted.logger import (FileLogObserver, ILogObserver, LogLevel, formatEvent, globalLogPublisher,
                            jsonFileLogObserver, textFileLogObserver, timeFormatRFC3339)
from twisted.python.compat import ioType
from zope.interface import implementer

from twistgw.core.accesslog import FLUSH_SECONDS, WRITE_CHUNK, AccessLog, escape_text


def file_writer(out: IO[Any]) -> Callable[[str], None]:
    """``write(text)`` then ``flush()`` on ``out`` (text or binary, UTF-8)."""
    if ioType(out) is not str:
        def write(text: str) -> None:
            out.write(text.encode("utf-8"))
            out.flush()
    else:
        def write(text: str) -> None:
            out.write(text)
            out.flush()
    return write


#: Kept as they are in other events' fields: Twisted's text format indents
#: every line after a newline with a tab (so none can pass for a new event),
#: and some messages list problems one per line on purpose.
_KEPT = '\n\t"\\'


def _escaped_fields(event: dict) -> dict:
    """``event`` with its own string fields (not ``log_*``) escaped, or
    itself when none needs it."""
    changed = None
    for key, value in event.items():
        if isinstance(value, str) and not key.startswith("log_"):
            safe = escape_text(value, _KEPT)
            if safe is not value:
                if changed is None:
                    changed = dict(event)
                changed[key] = safe
    return changed if changed is not None else event


def safe_text_file_observer(out: IO[Any], timeFormat: str | None = timeFormatRFC3339) -> FileLogObserver:
    """``twisted.logger.textFileLogObserver``, but control characters in
    the string fields of events (a user name, a claim, a path) are escaped,
    so no value can rewrite a terminal or a line (``\\r``, escape
    sequences). Newlines are indented by Twisted as always; tracebacks keep
    their lines."""
    formatter = textFileLogObserver(out, timeFormat).formatEvent
    return FileLogObserver(out, lambda event: formatter(_escaped_fields(event)))


@implementer(ILogObserver)
class _ErrorLines:
    """The text of every error event (not critical: Twisted prints those)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, event: dict) -> None:
        if event.get("log_level") is LogLevel.error:
            text = formatEvent(_escaped_fields(event))
            if text:
                self.lines.append(text)


@contextlib.contextmanager
def startup_errors() -> Iterator[list[str]]:
    """The error events logged inside the ``with`` block, as text.

    ``twist`` begins its log only after the plugin's ``makeService``
    returned; until then Twisted prints critical events (tracebacks) to
    stderr and keeps the others for later. A gateway that refuses to start
    there (an endpoint cannot listen: exit 3) says these errors first,
    one line each (issue 32, item 12)."""
    observer = _ErrorLines()
    globalLogPublisher.addObserver(observer)
    try:
        yield observer.lines
    finally:
        globalLogPublisher.removeObserver(observer)


def access_log_for(twist_options: Any, reactor: Any) -> AccessLog | None:
    """The access log matching ``twist``'s log options (``None``:
    ``--log-level`` above info, which hid access events before too)."""
    level = twist_options.get("logLevel", LogLevel.info)
    if level > LogLevel.info:
        return None
    out = twist_options.get("logFile")
    fmt = twist_options.get("logFormat") or (
        "json" if twist_options.get("fileLogObserverFactory") is jsonFileLogObserver else "text")
    if out is None:
        return AccessLog(fmt="events")
    return buffered_access_log(out, fmt, reactor)


def is_regular_file(out: IO[Any]) -> bool:
    """Whether ``out`` is a regular file (not a pipe, a terminal, a socket)."""
    try:
        return stat.S_ISREG(os.fstat(out.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):  # no descriptor (StringIO), or closed
        return False


def buffered_access_log(out: IO[Any], fmt: str, reactor: Any) -> AccessLog:
    """An access log writing ``fmt`` lines to ``out`` at most
    :data:`~twistgw.core.accesslog.FLUSH_SECONDS` after they were made: in
    one write to a regular file, in pieces of at most
    :data:`~twistgw.core.accesslog.WRITE_CHUNK` to anything else (a pipe
    shared by ``--workers``)."""
    return AccessLog(file_writer(out), fmt, lambda f: reactor.callLater(FLUSH_SECONDS, f),
                     chunk=None if is_regular_file(out) else WRITE_CHUNK)


def use_safe_text_observer(twist_options: Any) -> None:
    """Make ``twist`` log text through :func:`safe_text_file_observer`."""
    if twist_options.get("fileLogObserverFactory") is textFileLogObserver:
        twist_options["fileLogObserverFactory"] = safe_text_file_observer


def twist_options(plugin_options: Any) -> dict:
    """``twist``'s own options (``--log-file``, ``--log-format``,
    ``--log-level``): the parent of the twistgw plugin's options, or ``{}``
    when ``twist`` did not parse them."""
    parent = getattr(plugin_options, "parent", None)
    return parent if isinstance(parent, dict) else {}


def twist_access_log(plugin_options: Any, disabled: bool) -> AccessLog | bool:
    """What ``GatewayService(access_log=...)`` gets under ``twist``: the
    access log in its log file and format (``False``: none); ``True`` (an
    event per request) when not run by ``twist``. Also makes ``twist``'s
    text log escape control characters (:func:`use_safe_text_observer`)."""
    twist = twist_options(plugin_options)
    use_safe_text_observer(twist)
    if disabled:
        return False
    if not twist:
        return True
    from twisted.internet import reactor

    return access_log_for(twist, reactor) or False


__all__ = ["access_log_for", "buffered_access_log", "file_writer", "safe_text_file_observer", "startup_errors",
           "twist_access_log",
           "twist_options", "use_safe_text_observer"]

