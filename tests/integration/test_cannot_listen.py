"""Never half-up (issue 23, items 22 and 23), with ``twist twistgw`` as a
real subprocess.

* An endpoint that cannot listen (the port is taken): exit status 3 and one
  line naming the endpoint and the reason; no traceback, nothing left
  listening. The same with ``--workers``.
* A malformed endpoint string (``--listen``, ``--admin``): a usage error,
  exit status 2, naming the option; no traceback.
* ``/readyz`` is 200 only while every endpoint listens and a configuration
  is loaded (in memory, with an endpoint that has not listened yet).
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
from twisted.internet import defer

from support.process import free_port, twist_command
from support.http import static_upstream_yaml, vs_yaml
from twistgw.runtime.admin import AdminRoot
from twistgw.runtime.listeners import EXIT_CANNOT_LISTEN, Listener, open_all
from twistgw.runtime.service import GatewayService

TIMEOUT = 60


@pytest.fixture
def gateway_config(tmp_path: Path) -> str:
    d = tmp_path / "config"
    d.mkdir()
    (d / "gw.yaml").write_text(static_upstream_yaml("backend", [9]) + "---\n" + vs_yaml(domains=["*"]))
    return str(d)


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port some other process listens on."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    yield s.getsockname()[1]
    s.close()


def _twist(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd, cwd = twist_command(tmp_path)
    return subprocess.run(cmd + list(args), cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)


def _one_line(out: subprocess.CompletedProcess[str]) -> str:
    text = out.stdout + out.stderr
    assert "Traceback" not in text and "Unhandled Error" not in text, text
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    return lines[0]


def _free_again(port: int) -> bool:
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
    except ConnectionRefusedError:
        return True
    finally:
        s.close()
    return False


@pytest.mark.parametrize("workers", [(), ("--workers", "2")], ids=["one process", "workers"])
def test_a_taken_listen_port_exits_with_one_line(tmp_path: Path, gateway_config: str, taken: int,
                                                 workers: tuple[str, ...]) -> None:
    admin = free_port()
    out = _twist(tmp_path, "--config", gateway_config, "--listen", f"tcp:{taken}:interface=127.0.0.1",
                 "--admin", f"tcp:{admin}:interface=127.0.0.1", *workers)
    assert out.returncode == EXIT_CANNOT_LISTEN, out
    line = _one_line(out)
    assert line == f"twistgw: cannot listen on --listen tcp:{taken}:interface=127.0.0.1: address already in use"
    assert _free_again(admin)


@pytest.mark.parametrize("workers", [(), ("--workers", "2")], ids=["one process", "workers"])
def test_a_taken_admin_port_exits_and_frees_the_listen_port(tmp_path: Path, gateway_config: str, taken: int,
                                                            workers: tuple[str, ...]) -> None:
    port = free_port()
    out = _twist(tmp_path, "--config", gateway_config, "--listen", f"tcp:{port}:interface=127.0.0.1",
                 "--admin", f"tcp:{taken}:interface=127.0.0.1", *workers)
    assert out.returncode == EXIT_CANNOT_LISTEN, out
    assert "cannot listen on --admin" in _one_line(out)


def test_the_second_of_two_listeners_taken(tmp_path: Path, gateway_config: str, taken: int) -> None:
    first = free_port()
    out = _twist(tmp_path, "--config", gateway_config, "--listen", f"tcp:{first}:interface=127.0.0.1",
                 "--listen", f"tcp:{taken}:interface=127.0.0.1", "--admin", "none")
    assert out.returncode == EXIT_CANNOT_LISTEN, out
    assert f"--listen tcp:{taken}:" in _one_line(out)


KEY_ONLY = "{tmp}/key.pem"  # a private key, no certificate: what ssl: reads for certKey when none is given

PORT_WORDS = "port must be a number from 0 to 65535"


@pytest.mark.parametrize("args, option, words", [
    (("--listen", "tcp:notaport"), "--listen 'tcp:notaport'", f"{PORT_WORDS}, got 'notaport'"),
    (("--listen", "tcp:99999"), "--listen 'tcp:99999'", f"{PORT_WORDS}, got '99999'"),
    (("--listen", "tcp:-1"), "--listen 'tcp:-1'", f"{PORT_WORDS}, got '-1'"),
    (("--listen", "tcp6:65536"), "--listen 'tcp6:65536'", f"{PORT_WORDS}, got '65536'"),
    (("--listen", "tcp:"), "--listen 'tcp:'", "the port is missing; tcp: is written tcp:PORT"),
    (("--listen", "tls:"), "--listen 'tls:'", "the port is missing; tls: is written tls:PORT"),
    (("--listen", "tls"), "--listen 'tls'", "the port is missing; tls: is written tls:PORT"),
    (("--listen", "tls:notaport"), "--listen 'tls:notaport'", f"{PORT_WORDS}, got 'notaport'"),
    (("--listen", "tls:8443:bogus=1"), "--listen 'tls:8443:bogus=1'", "unknown option 'bogus'; tls: takes"),
    (("--listen", "nosuchtype:80"), "--listen 'nosuchtype:80'", "unknown endpoint type 'nosuchtype'; use tcp:PORT"),
    (("--listen", "8080"), "--listen '8080'", "it has no type; did you mean tcp:8080?"),
    (("--listen", "tcp:8080:interface=127.0.0.1:bogus=1"), "--listen 'tcp:8080:interface=127.0.0.1:bogus=1'",
     "unknown option 'bogus'; tcp: takes interface=, backlog="),
    (("--listen", "tcp:8080:backlog=x"), "--listen 'tcp:8080:backlog=x'",
     "backlog must be a whole number from 1 to 65535, got 'x'"),
    (("--listen", "ssl:8443:privateKey=/nonexistent/key.pem"), "--listen 'ssl:8443:privateKey=/nonexistent",
     "cannot read privateKey /nonexistent/key.pem: no such file or directory"),
    (("--listen", "ssl:8443:privateKey=" + KEY_ONLY), "--listen 'ssl:8443:privateKey=",
     "certKey {tmp}/key.pem (certKey= not given: the privateKey file is read for it) holds no PEM certificate"),
    (("--listen", "ssl:8443:privateKey=/etc/hostname"), "--listen 'ssl:8443:privateKey=/etc/hostname'",
     "privateKey /etc/hostname holds no unencrypted PEM private key"),
    (("--listen", "unix:"), "--listen 'unix:'", "the socket path is missing"),
    (("--listen", ""), "--listen ''", "it is empty; give one such as tcp:8080"),
    (("--admin", "tcp:notaport"), "--admin 'tcp:notaport'", f"{PORT_WORDS}, got 'notaport'"),
    (("--workers", "2", "--listen", "tcp:notaport"), "--listen 'tcp:notaport'", f"{PORT_WORDS}, got 'notaport'"),
    (("--workers", "lots"), "--workers must be a number", ""),
])
def test_a_malformed_endpoint_is_a_usage_error(tmp_path: Path, gateway_config: str, args: tuple[str, ...],
                                               option: str, words: str) -> None:
    """Issue 32, item 17: exit status 2 and one line, naming the option and
    saying what is wrong in the endpoint's own words (no Python message such
    as ``invalid literal for int()``, no OpenSSL error list)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    args = tuple(a.format(tmp=tmp_path) for a in args)
    out = _twist(tmp_path, "--config", gateway_config, *args)
    assert out.returncode == 2, out
    text = out.stdout + out.stderr
    assert "Traceback" not in text and "invalid literal" not in text and "routines" not in text, text
    first = out.stderr.splitlines()[0]
    assert first.startswith("twist twistgw: ") and option in first, out.stderr
    assert words.format(tmp=tmp_path) in first, out.stderr


class _Pending:
    """An endpoint whose listen has not finished."""

    def __init__(self) -> None:
        self.d: defer.Deferred[Any] = defer.Deferred()

    def listen(self, factory: Any) -> defer.Deferred[Any]:
        return self.d


class _Port:
    def getHost(self) -> Any:
        from twisted.internet.address import IPv4Address

        return IPv4Address("TCP", "127.0.0.1", 8080)

    def stopListening(self) -> None:
        pass


def _service(tmp: Path) -> tuple[GatewayService, _Pending]:
    (tmp / "gw.yaml").write_text(static_upstream_yaml("backend", [9]) + "---\n" + vs_yaml(domains=["*"]))
    svc = GatewayService(str(tmp), listen=(), admin=None, poll_interval=0, access_log=False)
    pending = _Pending()
    svc.listeners.append(Listener("--listen", "tcp:8080", pending, svc.factory, "Gateway"))
    return svc, pending


def test_ready_only_when_every_endpoint_listens(tmp_path: Path) -> None:
    svc, pending = _service(tmp_path)
    admin = AdminRoot(svc)
    assert admin._ready()[0] == 503  # no configuration yet
    svc.load_initial()
    assert svc.open_listeners() == []
    assert admin._ready() == (503, b"text/plain", b"not listening: --listen tcp:8080\n")
    pending.d.callback(_Port())
    assert admin._ready()[0] == 200
    assert admin._healthy()[0] == 200


def test_an_endpoint_that_failed_later_is_neither_ready_nor_healthy(tmp_path: Path) -> None:
    svc, pending = _service(tmp_path)
    svc.load_initial()
    late: list[str] = []
    assert open_all(svc.listeners, lambda listener: late.append(listener.line())) == []
    pending.d.errback(OSError(98, "Address already in use"))
    assert late == ["cannot listen on --listen tcp:8080: address already in use"]
    admin = AdminRoot(svc)
    assert admin._ready()[0] == 503
    assert admin._healthy() == (503, b"text/plain", b"cannot listen on --listen tcp:8080: address already in use\n")
