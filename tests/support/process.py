"""A real gateway process (``twist twistgw``) for the tests that must see it
from outside: its RSS, its listen backlog, its log file.

``twist_command(tmp)``   the command line that runs the installed dropin
``free_port()``          a loopback port nobody listens on right now
``TwistGateway``         ``with TwistGateway(tmp, config_dir, ...) as gw:`` starts
                         the process, waits (blocking) until it accepts, and
                         stops exactly it (SIGTERM, then SIGKILL) at the end;
                         ``gw.pid``, ``gw.port``, ``gw.rss()``, ``gw.wait_idle()``,
                         ``gw.log_text()``.

These helpers block: use them in plain (synchronous) tests, never inside a
test that runs on the reactor.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import twistgw
from support.ports import free_port

REPO = Path(twistgw.__file__).resolve().parent.parent

__all__ = ["REPO", "TwistGateway", "free_port", "twist_command"]




def twist_command(tmp: Path) -> tuple[list[str], str]:
    """The installed ``twist`` script if it sees the twistgw dropin; else (an
    editable install) ``python -m twisted`` from the repository root."""
    script = Path(sys.executable).with_name("twist")
    if script.exists():
        out = subprocess.run([str(script), "--help"], cwd=tmp, capture_output=True, text=True, timeout=30)
        if "twistgw" in out.stdout:
            return [str(script), "twistgw"], str(tmp)
    return [sys.executable, "-m", "twisted", "twistgw"], str(REPO)


class TwistGateway:
    """``twist twistgw --config DIR --listen tcp:PORT:interface=127.0.0.1``
    (``listen`` replaces the endpoint; ``args`` are added)."""

    def __init__(self, tmp: Path, config_dir: str, listen: str | None = None, args: tuple[str, ...] = (),
                 twist_args: tuple[str, ...] = ()) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.listen = listen.format(port=self.port) if listen else f"tcp:{self.port}:interface=127.0.0.1"
        self.log_path = tmp / f"twist-{self.port}.log"
        cmd, self.cwd = twist_command(tmp)
        # twist's own options (e.g. --logfile) come before the plugin name
        self.cmd = cmd[:-1] + list(twist_args) + cmd[-1:] + [
            "--config", config_dir, "--listen", self.listen, "--admin", "none", *args]
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> "TwistGateway":
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise AssertionError("twist exited:\n" + self.log_text())
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                # the port answers; but it is ours only once twist says all of
                # its listeners (its Gateways' too) are open: another process
                # on a port free_port() chose once answered first (an empty log)
                if "twistgw starting" in self.log_text():
                    return self
                if time.monotonic() > deadline:
                    raise AssertionError("a process answers on the --listen port, but twist never said it"
                                         " started:\n" + self.log_text())
                time.sleep(0.05)
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("twist never listened:\n" + self.log_text()) from None
                time.sleep(0.1)

    def __exit__(self, *exc: Any) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # in case a test stopped it
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def rss(self, field: str = "VmRSS") -> int:
        """Resident set size of the gateway process, in bytes (``VmHWM``:
        its peak so far)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise AssertionError(f"no {field}")

    def cpu_ticks(self) -> int:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until the process has used no CPU for half a second: whatever it
        was still working through is done."""
        deadline = time.monotonic() + timeout
        last = self.cpu_ticks()
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = self.cpu_ticks()
            if now == last:
                return
            last = now

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_log(self, needle: str, timeout: float = 5.0) -> str:
        deadline = time.monotonic() + timeout
        while needle not in self.log_text():
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} never logged:\n" + self.log_text()[-3000:])
            time.sleep(0.05)
        return self.log_text()
