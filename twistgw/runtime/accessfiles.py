"""The files of Gateways' access logs (``options.accessLoggingService``),
opened and closed as the configuration changes.

Like a Gateway's listener, a file is opened before the configuration that
names it serves: at start, a file that cannot be opened is one line and
exit 3 (with the listeners, ``GatewayService.open_listeners``); on a reload
the change is rejected and the last good configuration keeps serving.
Files no Gateway names any more are flushed and closed once the new
configuration serves. One file named by several sinks (or Gateways) is
opened once, in append mode, and their lines are interleaved whole.

Lines are kept and written :data:`~twistgw.core.accesslog.FLUSH_SECONDS`
after the first (or at :data:`~twistgw.core.accesslog.RECORDS_LIMIT`
lines), as twistgw's own access log is: one write of whole lines.
"""

from __future__ import annotations

from typing import IO, Any

from twisted.logger import Logger

from twistgw.core.accesslog import FLUSH_SECONDS, RECORDS_LIMIT
from twistgw.core.snapshot import Snapshot
from twistgw.engine.accessfacts import ExchangeFacts

__all__ = ["AccessFile", "AccessFiles", "paths_of"]


def paths_of(snapshot: Snapshot) -> set[str]:
    """The access-log files the Gateways of ``snapshot`` write."""
    return {sink.path for view in snapshot.gateways.values() for sink in view.access_logs}


class AccessFile:
    """One open file and the lines waiting for it."""

    _log = Logger(namespace="twistgw")

    def __init__(self, path: str, reactor: Any) -> None:
        self.path = path
        self.reactor = reactor
        self._file: IO[str] | None = open(path, "a", encoding="utf-8", errors="backslashreplace")
        self._lines: list[str] = []
        self._scheduled: Any = None
        #: lines lost because the file could not be written
        self.dropped = 0

    def add(self, line: str) -> None:
        lines = self._lines
        lines.append(line)
        if len(lines) >= RECORDS_LIMIT or self._file is None:
            self.flush()
        elif self._scheduled is None:
            self._scheduled = self.reactor.callLater(FLUSH_SECONDS, self.flush)

    def flush(self) -> None:
        scheduled, self._scheduled = self._scheduled, None
        if scheduled is not None and scheduled.active():
            scheduled.cancel()
        lines, self._lines = self._lines, []
        if not lines or self._file is None:
            self.dropped += len(lines)
            return
        try:
            self._file.write("".join(lines))
            self._file.flush()
        except OSError as exc:
            if not self.dropped:
                self._log.error("The access log {path} cannot be written ({error}); dropping its lines until it"
                                " can", path=self.path, error=repr(exc))
            self.dropped += len(lines)

    def close(self) -> None:
        self.flush()
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except OSError:
                pass


class AccessFiles:
    """The open access-log files by path, and the lines of each request
    (:meth:`log`, which the engine calls only for a Gateway that logs)."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.current: dict[str, AccessFile] = {}
        self._pending: dict[str, AccessFile] = {}

    def prepare(self, snapshot: Snapshot) -> list[str]:
        """Open the files ``snapshot`` adds; a line for each that cannot be
        opened (then none of them stays open)."""
        problems = []
        opened = {}
        for path in sorted(paths_of(snapshot) - set(self.current)):
            try:
                opened[path] = AccessFile(path, self.reactor)
            except OSError as exc:
                problems.append(f"cannot open the access log {path}: {exc.strerror or exc}")
        if problems:
            for f in opened.values():
                f.close()
            opened = {}
        self._pending = opened
        return problems

    def discard(self) -> None:
        """The change is rejected: close what :meth:`prepare` opened."""
        for f in self._pending.values():
            f.close()
        self._pending = {}

    def commit(self, snapshot: Snapshot) -> bool:
        """``snapshot`` serves now: files it does not name are closed.
        Whether any Gateway of it logs."""
        self.current.update(self._pending)
        self._pending = {}
        wanted = paths_of(snapshot)
        for path in [p for p in self.current if p not in wanted]:
            self.current.pop(path).close()
        return bool(wanted)

    def log(self, ex: Any, head: Any, duration: float) -> None:
        """The lines of one finished request on a Gateway that logs."""
        facts = ExchangeFacts(ex, head, duration, self.reactor.seconds())
        files = self.current
        for sink in head.gateway.access_logs:
            if sink.admits is None or sink.admits(facts):
                f = files.get(sink.path)
                if f is not None:  # None: a reload closed it while the request ran
                    f.add(sink.format.render(facts))

    def close(self) -> None:
        for f in self.current.values():
            f.close()
        self.current = {}
