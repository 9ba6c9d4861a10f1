"""The access log (issue 13, point 4): preformatted lines, buffered per
reactor turn and bounded, text or JSON as twist logs, control characters
escaped."""

from __future__ import annotations

import io
import os
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import (LogLevel, eventsFromJSONLogFile, formatEvent, jsonFileLogObserver,
                            textFileLogObserver)

from twistgw.core.accesslog import FLUSH_SECONDS, LOG_FORMAT, RECORDS_LIMIT, WRITE_CHUNK, AccessLog, escape_text
from twistgw.runtime.logs import (access_log_for, buffered_access_log, file_writer, is_regular_file,
                                  safe_text_file_observer)

from support.trial import TestCase

ARGS = ("127.0.0.1", "GET", "/a", 200, "default/v", "r", "127.0.0.1:8081", "-", "bob", 0.0012)


class Turns:
    """A reactor whose clock the test moves by hand."""

    def __init__(self) -> None:
        self.reactor = MemoryReactorClock()
        self.writes: list[str] = []

    def log(self, fmt: str = "text", limit: int = RECORDS_LIMIT, write: Any = None) -> AccessLog:
        return AccessLog(write or self.writes.append, fmt, lambda f: self.reactor.callLater(FLUSH_SECONDS, f),
                         limit, clock=lambda: 1795426276.5)

    def end_turn(self) -> None:
        """Let the flush interval pass."""
        self.reactor.advance(FLUSH_SECONDS)

    def lines(self) -> list[str]:
        # split on "\n" only: str.splitlines would also split at the \x1e of JSON records
        return [line + "\n" for line in "".join(self.writes).split("\n")[:-1]]


class AccessLogTests(TestCase):
    def test_text_line_has_every_field_and_twists_prefix(self) -> None:
        t = Turns()
        log = t.log()
        log.request(*ARGS)
        t.end_turn()
        (line,) = t.lines()
        assert line.endswith(' [twistgw.access#info] 127.0.0.1 "GET /a" 200 vs=default/v route=r'
                             " upstream=127.0.0.1:8081 decided_by=- principal=bob 1.2ms\n")
        assert line.startswith("2026-11-2")  # twist's RFC 3339 timestamp

    def test_lines_wait_for_the_flush_interval_and_are_written_in_few_writes_in_order(self) -> None:
        t = Turns()
        log = t.log()
        for i in range(50):
            log.request("127.0.0.1", "GET", f"/{i}", 200, "v", "r", "-", "-", "-", 0.001)
        assert t.writes == [] and log.buffered > 0
        assert len(t.reactor.getDelayedCalls()) == 1  # one call for the interval, not one per request
        t.reactor.advance(FLUSH_SECONDS / 2)
        assert t.writes == []  # not before the interval is over
        t.reactor.advance(FLUSH_SECONDS / 2)
        size = sum(map(len, t.writes))
        assert len(t.writes) == -(-size // WRITE_CHUNK) or len(t.writes) == -(-size // WRITE_CHUNK) + 1
        assert [line.split('"')[1] for line in t.lines()] == [f"GET /{i}" for i in range(50)]
        assert log.buffered == 0 and t.reactor.getDelayedCalls() == []

    def test_writes_are_whole_lines_of_at_most_a_pipe_buffer(self) -> None:
        # several --workers share one stdout: a write of at most PIPE_BUF
        # bytes to a pipe is never interleaved with another process's
        t = Turns()
        log = t.log()
        for i in range(400):
            log.request("127.0.0.1", "GET", "/p" + "y" * (i * 7 % 300), 200, "v", "r", "-", "-", "-", 0.001)
        log.request("127.0.0.1", "GET", "/long" + "z" * 5000, 200, "v", "r", "-", "-", "-", 0.001)
        log.request(*ARGS)
        t.end_turn()
        assert len(t.writes) > 1
        for w in t.writes:
            assert w.endswith("\n") and (len(w) <= WRITE_CHUNK or w.count("\n") == 1), (len(w), w.count("\n"))
        lines = t.lines()
        assert len(lines) == 402 and "z" * 5000 in lines[400]

    def test_to_a_regular_file_a_flush_is_one_write(self) -> None:
        t = Turns()
        log = AccessLog(t.writes.append, "json", lambda f: t.reactor.callLater(FLUSH_SECONDS, f),
                        clock=lambda: 1795426276.5, chunk=None)
        for i in range(60):  # about 24,000 characters: under the buffer limit
            log.request("127.0.0.1", "GET", f"/{i}", 200, "v", "r", "-", "-", "-", 0.001)
        t.end_turn()
        assert len(t.writes) == 1 and len(t.writes[0]) > 4 * WRITE_CHUNK
        assert t.writes[0].count("\n") == 60

    def test_the_runtime_chunks_only_what_is_not_a_regular_file(self, tmp_path: Any) -> None:
        reactor = MemoryReactorClock()
        with open(tmp_path / "access.log", "wb") as f:
            assert buffered_access_log(f, "text", reactor).chunk is None
            assert is_regular_file(f)
        r, w = os.pipe()
        with os.fdopen(r, "rb") as rf, os.fdopen(w, "wb") as wf:
            assert buffered_access_log(wf, "text", reactor).chunk == WRITE_CHUNK
            assert not is_regular_file(wf) and not is_regular_file(rf)
        assert buffered_access_log(io.StringIO(), "text", reactor).chunk == WRITE_CHUNK

    @pytest.mark.parametrize("fmt", ["text", "json"])
    def test_bounded_under_a_flood(self, fmt: str) -> None:
        # no end of turn ever comes: the buffer is written each time it holds the limit
        t = Turns()
        log = t.log(fmt, limit=50)
        longest = 0
        for i in range(20_000):
            log.request("127.0.0.1", "GET", "/flood/" + "x" * (i % 100), 200, "v", "r", "-", "-", "-", 0.001)
            longest = max(longest, log.buffered)
        assert longest == 49  # the 50th request writes the batch
        # whole batches (each in a few pieces of at most WRITE_CHUNK), not a write per line
        assert 400 <= len(t.writes) <= 400 * 8 and len(t.writes) < 20_000 // 5
        assert all(len(w) <= WRITE_CHUNK for w in t.writes)
        t.end_turn()
        lines = t.lines()
        assert len(lines) == 20_000
        assert [line.count("x") for line in lines[:3]] == [0, 1, 2]
        assert lines[-1].count("x") == 19_999 % 100

    @pytest.mark.parametrize("fmt", ["text", "json"])
    def test_one_hostile_record_is_escaped_alone_in_its_batch(self, fmt: str) -> None:
        # the batch is checked in one pass; a record that fails it must be
        # escaped, and the ordinary records around it written as they are
        t = Turns()
        log = t.log(fmt)
        for i in range(5):
            log.request("127.0.0.1", "GET", f"/{i}", 200, "v", "r", "-", "-",
                        "eve\n\x1b\"é" if i == 2 else "bob", 0.001)
        t.end_turn()
        lines = t.lines()
        assert len(lines) == 5
        if fmt == "json":
            records = [json.loads(line[1:]) for line in lines]
            assert [r["principal"] for r in records] == ["bob", "bob", "eve\n\x1b\"é", "bob", "bob"]
            assert [r["path"] for r in records] == [f"/{i}" for i in range(5)]
            assert "".join(lines).isascii()
        else:
            assert "principal=eve\\x0a\\x1b\\x22é 1.0ms" in lines[2]
            assert all("principal=bob 1.0ms" in lines[i] for i in (0, 1, 3, 4))

    def test_lines_carry_the_time_of_their_request_not_of_the_write(self) -> None:
        now = [1795426276.25]
        t = Turns()
        log = AccessLog(t.writes.append, "json", lambda f: t.reactor.callLater(FLUSH_SECONDS, f),
                        clock=lambda: now[0])
        log.request(*ARGS)
        now[0] += 0.05
        log.request(*ARGS)
        now[0] += 5
        t.end_turn()
        assert [json.loads(line[1:])["log_time"] for line in t.lines()] == [1795426276.25, 1795426276.3]

    def test_a_record_that_cannot_be_formatted_is_dropped_and_reported(self) -> None:
        from twisted.logger import globalLogPublisher

        seen: list[dict] = []
        globalLogPublisher.addObserver(seen.append)
        try:
            t = Turns()
            log = t.log("json")
            class Unprintable:
                def __format__(self, spec: str) -> str:
                    raise ValueError("no text for this")

            log.request("127.0.0.1", "GET", "/a", 200, "v", "r", "-", "-", Unprintable(), 0.001)  # type: ignore[arg-type]
            t.end_turn()
        finally:
            globalLogPublisher.removeObserver(seen.append)
        assert log.dropped == 1 and t.writes == []
        assert any("access log cannot be written" in e.get("log_format", "") for e in seen)

    def test_close_flushes_and_later_lines_go_out_at_once(self) -> None:
        t = Turns()
        log = t.log()
        log.request(*ARGS)
        log.close()
        assert len(t.lines()) == 1
        log.request(*ARGS)  # a late request (after the drain)
        assert len(t.lines()) == 2

    def test_a_failing_writer_drops_lines_and_is_reported_once(self, capsys: Any) -> None:
        from twisted.logger import globalLogPublisher

        seen: list[dict] = []
        globalLogPublisher.addObserver(seen.append)
        try:
            def broken(text: str) -> None:
                raise OSError(28, "No space left on device")

            log = AccessLog(broken, "text")
            log.request(*ARGS)
            log.request(*ARGS)
        finally:
            globalLogPublisher.removeObserver(seen.append)
        assert log.dropped == 2
        errors = [e for e in seen if "access log cannot be written" in e.get("log_format", "")]
        assert len(errors) == 1 and errors[0]["log_level"] is LogLevel.error

    @pytest.mark.parametrize("value, shown", [
        ("bob", "bob"),
        ("b\nob", "b\\x0aob"),
        ("b\rob", "b\\x0dob"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("a\x00b\x7fc\x85d", "a\\x00b\\x7fc\\x85d"),
        ('say "hi"', "say \\x22hi\\x22"),
        ("back\\slash", "back\\x5cslash"),
        ("line\u2028sep\u2029", "line\\u2028sep\\u2029"),
        ("rtl\u202eoverride", "rtl\\u202eoverride"),
        ("lone\ud800", "lone\\ud800"),
        ("José Ωmega ✓", "José Ωmega ✓"),
    ])
    def test_escape_text(self, value: str, shown: str) -> None:
        assert escape_text(value) == shown

    @settings(deadline=None)
    @given(st.text())
    def test_escaped_text_is_one_printable_line(self, value: str) -> None:
        safe = escape_text(value)
        assert safe.isprintable() and '"' not in safe
        assert "\\" not in safe.replace("\\x", "").replace("\\u", "").replace("\\U", "")

    @pytest.mark.parametrize("field", [0, 1, 2, 4, 5, 6, 7, 8])
    @pytest.mark.parametrize("hostile", ["\n", '"', "\\", "\x1b", "\u2028", "\x85"])
    def test_each_text_field_is_escaped_alone(self, field: int, hostile: str) -> None:
        # the usual line is checked in one piece; a hostile character in any
        # one field must still get exactly that field escaped
        args = list(ARGS)
        args[field] = f"a{hostile}b"
        t = Turns()
        t.log().request(*args)
        t.end_turn()
        (line,) = t.lines()
        expected = list(ARGS)
        expected[field] = escape_text(args[field])
        assert escape_text(args[field]) != args[field]
        assert line.endswith(' [twistgw.access#info] {} "{} {}" {} vs={} route={} upstream={} decided_by={}'
                             " principal={} 1.2ms\n".format(*expected[:9]))

    def test_text_line_escapes_a_hostile_principal_and_path(self) -> None:
        t = Turns()
        log = t.log()
        log.request("127.0.0.1", "GET", '/x"\n127.0.0.1 "GET /forged', 200, "v", "r", "-", "jwt",
                    "alice\n2026-11-23T00:00:00+0000 [twistgw.access#info] forged\x1b[2K", 0.001)
        t.end_turn()
        (line,) = t.lines()
        assert "\\x0a" in line and "\\x1b" in line and "\\x22" in line
        assert line.count('"') == 2

    def test_json_records_read_back_as_twist_events(self) -> None:
        t = Turns()
        log = t.log("json")
        log.request(*ARGS)
        log.request("::1", "POST", "/é", 403, "default/v", "r", "-", "rbac", "bad\n\x00\ud800", 0.5)
        t.end_turn()
        raw = "".join(t.writes)
        assert raw.startswith("\x1e{") and raw.count("\x1e") == 2 and raw.endswith("}\n")
        assert raw.isascii()  # non-ASCII and lone surrogates escaped, as twist's JSON observer does
        events = list(eventsFromJSONLogFile(io.StringIO(raw)))
        assert len(events) == 2
        first, second = events
        assert {k: first[k] for k in ("client", "method", "path", "status", "virtual_service", "route", "upstream",
                                      "decided_by", "principal", "duration_ms")} == {
            "client": "127.0.0.1", "method": "GET", "path": "/a", "status": 200, "virtual_service": "default/v",
            "route": "r", "upstream": "127.0.0.1:8081", "decided_by": "-", "principal": "bob", "duration_ms": 1.2}
        assert first["log_namespace"] == "twistgw.access" and first["log_level"] is LogLevel.info
        assert first["log_time"] == 1795426276.5
        # a compact record: no log_format template and no log_source (docs/decisions.md),
        # but the text line is still one format away
        assert "log_format" not in first and "log_source" not in first
        assert LOG_FORMAT.format(**first) == ('127.0.0.1 "GET /a" 200 vs=default/v route=r upstream=127.0.0.1:8081'
                                              " decided_by=- principal=bob 1.2ms")
        assert max(len(line) for line in raw.split("\x1e")[1:]) < 400
        assert second["principal"] == "bad\n\x00\ud800" and second["path"] == "/é"  # JSON keeps values exact
        for line in raw.split("\x1e")[1:]:
            json.loads(line)

    @settings(deadline=None)
    @given(st.integers(0, 8).filter(lambda i: i != 3), st.text())
    @example(8, 'a"b')
    @example(2, "a\\b")
    @example(0, "a\nb")
    @example(5, "\x7f\x1b")
    @example(7, "é\ud800")
    def test_json_record_keeps_any_field_exactly(self, field: int, value: str) -> None:
        # printable ASCII skips the escaping (one check for all eight fields);
        # anything else must still come back exactly, in an ASCII record
        args = list(ARGS)
        args[field] = value
        t = Turns()
        t.log("json").request(*args)
        t.end_turn()
        raw = "".join(t.writes)
        assert raw.isascii() and raw.startswith("\x1e") and raw.endswith("}\n") and raw.count("\n") == 1
        record = json.loads(raw[1:])
        names = ("client", "method", "path", "status", "virtual_service", "route", "upstream", "decided_by",
                 "principal")
        assert [record[name] for name in names] == args[:9]
        assert (record["duration_ms"], record["log_time"]) == (1.2, 1795426276.5)

    @settings(deadline=None)
    @given(st.integers(0, 8).filter(lambda i: i != 3), st.text(), st.integers(0, 4))
    @example(8, "é", 0)
    @example(2, "\x7f", 3)
    @example(0, '"', 1)
    def test_a_batch_writes_each_text_field_exactly_as_escaped_alone(self, field: int, value: str,
                                                                   at: int) -> None:
        # the batch is checked once; whatever one record holds, every line is
        # the line of its own record with its own fields escaped
        args = list(ARGS)
        args[field] = value
        t = Turns()
        log = t.log()
        for i in range(5):
            log.request(*(args if i == at else ARGS))
        t.end_turn()
        lines = t.lines()
        assert len(lines) == 5
        for i, line in enumerate(lines):
            shown = [escape_text(a) if isinstance(a, str) else a for a in (args if i == at else ARGS)]
            assert line.endswith(' [twistgw.access#info] {} "{} {}" {} vs={} route={} upstream={} decided_by={}'
                                 " principal={} 1.2ms\n".format(*shown[:9])), (line, shown)

    def test_events_format_emits_escaped_twisted_events(self) -> None:
        from twisted.logger import globalLogPublisher

        seen: list[dict] = []
        globalLogPublisher.addObserver(seen.append)
        try:
            AccessLog(fmt="events").request("127.0.0.1", "GET", "/a", 200, "v", "r", "-", "-", "eve\r\n", 0.001)
        finally:
            globalLogPublisher.removeObserver(seen.append)
        (event,) = [e for e in seen if e.get("log_namespace") == "twistgw.access"]
        assert event["principal"] == "eve\\x0d\\x0a" and event["status"] == 200
        assert formatEvent(event).endswith("principal=eve\\x0d\\x0a 1.0ms")

    def test_a_response_the_upstream_cut_short_says_so_in_every_format(self) -> None:
        # issue 32: a truncated upstream response (a TLS close without
        # close_notify, a reset, a malformed chunk) must not look complete
        t = Turns()
        log = t.log()
        log.request(*ARGS, "upstream")
        log.request(*ARGS)
        t.end_turn()
        cut, whole = t.lines()
        assert cut.endswith(" principal=bob 1.2ms truncated=upstream\n") and "truncated" not in whole
        t = Turns()
        log = t.log("json")
        log.request(*ARGS, "upstream")
        log.request(*ARGS)
        t.end_turn()
        first, second = [json.loads(line) for line in "".join(t.writes).split("\x1e")[1:]]
        assert first["truncated"] == "upstream" and "truncated" not in second
        from twisted.logger import globalLogPublisher

        seen: list[dict] = []
        globalLogPublisher.addObserver(seen.append)
        try:
            AccessLog(fmt="events").request(*ARGS, "upstream")
        finally:
            globalLogPublisher.removeObserver(seen.append)
        (event,) = [e for e in seen if e.get("log_namespace") == "twistgw.access"]
        assert formatEvent(event).endswith("principal=bob 1.2ms truncated=upstream")

    def test_bad_arguments(self) -> None:
        with pytest.raises(ValueError, match="format"):
            AccessLog(print, "xml")
        with pytest.raises(ValueError, match="writer"):
            AccessLog(None, "json")

    # ---------------------------------------------------------------------------
    # twist's options → the access log; the text observer
    # ---------------------------------------------------------------------------

    def test_access_log_follows_twists_log_options(self) -> None:
        reactor = MemoryReactorClock()
        out = io.StringIO()
        json_log = access_log_for({"logFile": out, "logFormat": "json", "logLevel": LogLevel.info}, reactor)
        assert json_log is not None and json_log.fmt == "json"
        json_log.request(*ARGS)
        reactor.advance(0)
        assert out.getvalue() == ""  # buffered for the flush interval
        reactor.advance(FLUSH_SECONDS)
        assert out.getvalue().startswith("\x1e{")
        text_log = access_log_for({"logFile": out, "fileLogObserverFactory": textFileLogObserver}, reactor)
        assert text_log is not None and text_log.fmt == "text"
        assert access_log_for({"logFile": out, "fileLogObserverFactory": jsonFileLogObserver}, reactor).fmt == "json"
        # --log-level warn hid access events before; it still does
        assert access_log_for({"logFile": out, "logLevel": LogLevel.warn}, reactor) is None

    def test_file_writer_text_and_binary(self, tmp_path: Any) -> None:
        text = io.StringIO()
        file_writer(text)("é\n")
        binary = io.BytesIO()
        file_writer(binary)("é\n")
        assert text.getvalue() == "é\n" and binary.getvalue() == "é\n".encode()

    def test_safe_text_observer_escapes_control_characters_in_fields(self) -> None:
        out = io.StringIO()
        observer = safe_text_file_observer(out)
        observer({"log_format": "user {user} refused: {why}", "log_namespace": "twistgw.plugin",
                  "log_level": LogLevel.warn, "log_time": 1795426276.5,
                  "user": "mallory\r\x1b[2Kadmin", "why": "a\nb"})
        text = out.getvalue()
        assert "mallory\\x0d\\x1b[2Kadmin" in text and "\r" not in text and "\x1b" not in text
        assert "a\n\tb" in text  # newlines: Twisted's indented continuation line, never a new event

    def test_twist_access_log_reads_the_parent_options_twist_gave_the_plugin(self) -> None:
        from twistgw.runtime.logs import twist_access_log
        from twistgw.tap import Options

        alone = Options()
        alone.parseOptions([])
        assert twist_access_log(alone, disabled=False) is True  # not under twist: an event per request
        assert twist_access_log(alone, disabled=True) is False
        under = Options()
        under.parseOptions([])
        under.parent = {"logFile": io.StringIO(), "logFormat": "text", "logLevel": LogLevel.info,
                        "fileLogObserverFactory": textFileLogObserver}
        log = twist_access_log(under, disabled=False)
        assert isinstance(log, AccessLog) and log.fmt == "text"
        # and twist's own text log now escapes control characters
        assert under.parent["fileLogObserverFactory"] is safe_text_file_observer
        under.parent["logLevel"] = LogLevel.error
        assert twist_access_log(under, disabled=False) is False
