"""A private ``redis-server`` for tests: a free loopback port, no
persistence, stopped by pid.

::

    from support.redis import RedisServer
    server = RedisServer(tmp_path).start()      # blocks until PING answers
    ... server.port, server.address, server.command("DBSIZE") ...
    server.freeze(); server.thaw()              # SIGSTOP / SIGCONT: a Redis that hangs
    server.stop()                               # SIGTERM, then SIGKILL; start() again on the same port
    RedisServer(tmp_path, args=["--requirepass", "pw"])           # more redis-server options
    RedisServer(tmp_path, tls=(cert_path, key_path, ca_path))      # also a TLS port: server.tls_port

or as a context manager (``with RedisServer(tmp_path) as server:``).

A missing ``redis-server`` raises :class:`RedisMissing` (the suite fails,
it never skips): install it with ``apt-get install redis-server``.

These helpers block: use them in plain (synchronous) tests and fixtures,
never inside a test that runs on the reactor (``start``/``stop`` take well
under a second).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from support.ports import free_port

INSTALL_HINT = "apt-get install redis-server"

__all__ = ["RedisMissing", "RedisServer", "find_redis_server", "free_port"]


class RedisMissing(RuntimeError):
    pass


def find_redis_server() -> str:
    for candidate in (shutil.which("redis-server"), "/usr/bin/redis-server", "/usr/sbin/redis-server"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RedisMissing(f"redis-server not found; the rate-limit tests need it: {INSTALL_HINT}")




def _ping(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process: ``--bind 127.0.0.1 --save '' --appendonly no``."""

    def __init__(self, directory: Path, port: int | None = None, args: list[str] | tuple[str, ...] = (),
                 tls: tuple[Path, Path, Path] | None = None) -> None:
        self.binary = find_redis_server()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.directory / f"redis-{self.port}.log"
        self.args = list(args)
        self.tls_port: int | None = None
        if tls is not None:  # a TLS port beside the plain one (which PING checks); no client certificates
            self.tls_port = free_port()
            cert, key, ca = tls
            self.args += ["--tls-port", str(self.tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
                          "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no"]

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``"""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self, timeout: float = 10.0) -> "RedisServer":
        if self.process is not None and self.process.poll() is None:
            return self
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.directory), "--protected-mode", "yes", *self.args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.directory,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not _ping(self.port):
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}; log:\n"
                                   f"{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not answer PING on {self.port} within {timeout}s")
            time.sleep(0.02)
        return self

    def freeze(self) -> None:
        """SIGSTOP: the socket stays open and accepts, nothing answers."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop exactly this process (thawed first, so SIGTERM is handled)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.kill(process.pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)

    def command(self, *args: str, password: str | None = None) -> str:
        """One command through ``redis-cli`` (for assertions), its output stripped."""
        cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
        login = ["--no-auth-warning", "-a", password] if password is not None else []
        out = subprocess.run([cli, "-h", "127.0.0.1", "-p", str(self.port), *login, *args],
                             capture_output=True, text=True, timeout=10, check=True)
        return out.stdout.strip()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
