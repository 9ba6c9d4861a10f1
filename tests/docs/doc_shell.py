"""Running a page's shell lines as written, and checking their ``# expect:``.

A documented line such as::

    curl -i localhost:8080/orders        # expect: 401 Jwt is missing
    twistgw check mygw                   # expect: OK: 1 virtual service(s)

states its outcome after ``# expect:``. For ``curl -i`` lines that is the
status, then text the response must contain; for any other line, text its
output must contain. :func:`run_lines` runs the lines, unchanged, one after
another in one ``bash`` (so variables and background jobs carry over, as
in a terminal), and :func:`check_outcomes` compares.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import tempfile
from typing import Callable, Sequence

import attrs
import contextlib
import fcntl
import time

EXPECT = "# expect:"


@attrs.frozen
class Outcome:
    line: str
    expect: str
    output: str


def shell_lines(text: str, start: str | None = None, end: str | None = None) -> list[str]:
    """The non-empty lines of every ```sh block (between the ``start`` and
    ``end`` markers, when given)."""
    if start is not None:
        text = text.split(start, 1)[1]
    if end is not None:
        text = text.split(end, 1)[0]
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines += [line for line in block.splitlines() if line.strip()]
    return lines


def port_busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


# The README demo and the quickstart use the documented fixed ports (8080,
# 9000, 9901, 8081, 3389). Two test runs on one machine (two checkouts, two
# engineers) would fight over them; this lock makes them take turns.
FIXED_PORTS_LOCK = "/tmp/twistgw-doc-fixed-ports.lock"


@contextlib.contextmanager
def fixed_ports(ports: Sequence[int], wait: float = 600.0):
    """Hold the machine-wide lock for the documented fixed ports, then wait
    (up to 30 s) for ``ports`` to be free; fail naming the busy ones."""
    with open(FIXED_PORTS_LOCK, "a") as lock:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, (
                    f"another test run held {FIXED_PORTS_LOCK} for {wait:g} s")
                time.sleep(0.2)
        try:
            free_by = time.monotonic() + 30
            while (busy := [p for p in ports if port_busy(p)]) and time.monotonic() < free_by:
                time.sleep(0.2)
            assert not busy, f"these documented ports are busy on 127.0.0.1: {busy}"
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _wait_for_port(port: int, seconds: float) -> str:
    tries = int(seconds * 10)
    return (f"for _ in $(seq {tries}); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && break;"
            f" sleep 0.1; done")


def run_lines(lines: Sequence[str], cwd: str, env: dict[str, str],
              background_port: Callable[[str], int] | None = None,
              timeout: float = 180.0) -> tuple[list[Outcome], str]:
    """Run ``lines`` in one bash, in ``cwd``. After a line that ends with
    ``&``, wait until ``background_port(line)`` accepts connections (as a
    person would wait for the log line). Every background job, and
    anything it started, is ended afterwards. Returns the outcomes of the
    ``# expect:`` lines and the whole output."""
    script = ["set -u"]
    checks: list[tuple[int, str, str]] = []
    for i, line in enumerate(lines):
        code = line.split(" #", 1)[0].rstrip()
        if EXPECT in line:
            checks.append((i, line, line.split(EXPECT, 1)[1].strip()))
            script.append(f"echo '@@@{i}'")
        script.append(line)
        if code.endswith("&") and background_port is not None:
            script.append(_wait_for_port(background_port(line), 60))
    script.append("echo '@@@end'")
    script.append("kill $(jobs -p) 2>/dev/null; wait")  # as closing the terminal would
    with tempfile.TemporaryFile("w+") as output:
        proc = subprocess.Popen(["bash", "-c", "\n".join(script)], cwd=cwd, env=env, text=True,
                                stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            # The session holds the bash we started and every job it started.
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            proc.wait(20)
        output.seek(0)
        out = output.read()
    sections = dict(re.findall(r"@@@(\d+)\n(.*?)(?=@@@)", out + "@@@", re.S))
    return [Outcome(line, expect, sections.get(str(i), "")) for i, line, expect in checks], out


def check_outcomes(outcomes: Sequence[Outcome], log: str = "") -> None:
    """Every line's stated outcome happened (the first failure raises)."""
    for o in outcomes:
        code = o.line.split(EXPECT, 1)[0].strip()
        if code.startswith("curl"):
            status, _, text = o.expect.partition(" ")
            m = re.search(r"^HTTP/1\.1 (\d{3}) ", o.output, re.M)
            got = m.group(1) if m else None
            assert got == status, f"{o.line}\n  expected {status}, got {got}:\n{o.output[:800]}\n{log[-2000:]}"
            if text:
                assert text.strip() in o.output, f"{o.line}\n  expected {text!r} in:\n{o.output[:800]}"
        else:
            assert o.expect in o.output, f"{o.line}\n  expected {o.expect!r} in:\n{o.output[:800]}\n{log[-2000:]}"
