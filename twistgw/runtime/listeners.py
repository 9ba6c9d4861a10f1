"""The endpoints a gateway process listens on (``--listen``, ``--admin``), and
what happens when one cannot listen.

A gateway that cannot listen on every endpoint it was given must not run
half-up (issue 23, item 22): ``twist twistgw`` opens every endpoint while it
builds the service, before the reactor runs, and when one fails it closes
the others and exits with :data:`EXIT_CANNOT_LISTEN` after one line naming
the endpoint and the reason. ``/readyz`` is 200 only while every endpoint
listens (:meth:`Listener.listening`).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Iterable

from twisted.internet import defer
from twisted.internet.error import CannotListenError
from twisted.logger import Logger
from twisted.python.failure import Failure

#: ``twist twistgw`` exit status when an endpoint cannot listen.
EXIT_CANNOT_LISTEN = 3


def describe_address(address: Any) -> str:
    """``127.0.0.1:8080``, ``[::1]:8080`` or a UNIX socket path."""
    host, port = getattr(address, "host", None), getattr(address, "port", None)
    if host is None or port is None:
        return str(getattr(address, "name", address))
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen_problem(exc: BaseException) -> str:
    """Why listening failed, in a few words (``address already in use``); the
    endpoint string next to it says where."""
    if isinstance(exc, CannotListenError):
        error = exc.socketError
        reason = getattr(error, "strerror", None) or str(error)
        return f"{reason[:1].lower()}{reason[1:]}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror[:1].lower()}{exc.strerror[1:]}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def endpoint_problem(description: str) -> str | None:
    """Why this server endpoint string cannot be listened on, in the
    endpoint's own words, or None. The documented types' syntax first
    (:func:`twistgw.api.endpoints.syntax_problem`: ``port must be a
    number...``), then ``ssl:``'s files, then Twisted's own parse (which,
    for ``ssl:``, reads them too); nothing listens and no reactor is used."""
    from twisted.internet.endpoints import serverFromString

    from twistgw.api.endpoints import syntax_problem
    from twistgw.engine.listening import tls_listen_problem

    problem = syntax_problem(description)
    if problem is None and description.startswith("ssl:"):
        problem = ssl_files_problem(description)
    if problem is not None:
        return problem
    if description.startswith("tls:"):
        return tls_listen_problem(description)
    try:
        serverFromString(_NO_REACTOR, description)
    except Exception as exc:
        return _twisted_problem(description, exc)
    return None


def _twisted_problem(description: str, exc: Exception) -> str:
    """What Twisted's parser raised, said for the endpoint (a type not in
    :data:`twistgw.api.endpoints.FORMS`, or ``ssl:``'s ``sslmethod``)."""
    import re

    from twistgw.api.endpoints import KNOWN, split_endpoint

    kind = split_endpoint(description)[0]
    text = str(exc) or type(exc).__name__
    if text.startswith("Unknown endpoint type"):
        return f"unknown endpoint type {kind!r}; use {KNOWN}"
    number = re.fullmatch(r"invalid literal for int\(\) with base \d+: (.*)", text)
    if number:
        return f"a number was expected, got {number.group(1)}"
    if isinstance(exc, TypeError) and "unexpected keyword argument" in text:
        return f"unknown option {text.rsplit(' ', 1)[-1]} for {kind}:"
    if isinstance(exc, TypeError) and "missing" in text:
        return f"a value {kind}: needs is missing ({text.rsplit(':', 1)[-1].strip()})"
    if isinstance(exc, AttributeError) and kind == "ssl":
        return f"sslmethod is not a method OpenSSL knows ({text})"
    return text


def ssl_files_problem(description: str) -> str | None:
    """Why ``ssl:``'s key and certificate files cannot serve, naming the
    option and the file: unreadable, or no PEM key / certificate in it.
    ``privateKey`` defaults to ``server.pem`` and ``certKey`` to the
    ``privateKey`` file, as in Twisted."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    from twistgw.api.endpoints import FORMS, split_endpoint

    _, args, options = split_endpoint(description)
    values = {**dict(zip(FORMS["ssl"], args, strict=False)), **dict(options)}
    key_path = values.get("privateKey", "server.pem")
    cert_path = values.get("certKey", key_path)
    key_said = "" if "privateKey" in values else " (Twisted's default when privateKey= is not given)"
    cert_said = "" if "certKey" in values else " (certKey= not given: the privateKey file is read for it)"
    contents: dict[str, bytes] = {}
    for option, path, said in (("privateKey", key_path, key_said), ("certKey", cert_path, cert_said),
                               ("extraCertChain", values.get("extraCertChain"), "")):
        if path is None:
            continue
        try:
            with open(path, "rb") as f:
                contents[option] = f.read()
        except OSError as exc:
            reason = exc.strerror or str(exc)
            return f"cannot read {option} {path}{said}: {reason[:1].lower()}{reason[1:]}"
    try:
        load_pem_private_key(contents["privateKey"], password=None)
    except (ValueError, TypeError):
        return f"privateKey {key_path}{key_said} holds no unencrypted PEM private key"
    try:
        x509.load_pem_x509_certificate(contents["certKey"])
    except ValueError:
        return f"certKey {cert_path}{cert_said} holds no PEM certificate: give certKey=CERT.pem"
    return None


#: stands for the reactor while endpoint strings are only parsed
_NO_REACTOR = object()


class Listener:
    """One endpoint: ``option`` (``--listen``/``--admin``) and its string,
    the Twisted endpoint, and once listening its port."""

    _log = Logger(namespace="twistgw")

    def __init__(self, option: str, description: str, endpoint: Any, factory: Any, what: str) -> None:
        self.option = option
        self.description = description
        self.endpoint = endpoint
        self.factory = factory
        self.what = what
        self.port: Any = None
        self.problem: str | None = None
        self._opening: defer.Deferred[Any] | None = None

    def __str__(self) -> str:
        return self.description

    def listening(self) -> bool:
        return self.port is not None

    def line(self) -> str:
        """The one line that says this endpoint cannot listen."""
        return f"cannot listen on {self.option} {self.description}: {self.problem}"

    def open(self) -> defer.Deferred[Any]:
        """Listen (once). Fires with the port; fails with the reason, also kept
        in :attr:`problem`. For TCP, SSL and UNIX endpoints it has fired when
        this returns."""
        if self._opening is None:
            self._opening = defer.maybeDeferred(self.endpoint.listen, self.factory)
            self._opening.addCallbacks(self._opened, self._failed)
        return self._opening

    def _opened(self, port: Any) -> Any:
        self.port = port
        self._log.info("{what} listening on {address} ({description})", what=self.what,
                       address=describe_address(port.getHost()), description=self.description)
        return port

    def _failed(self, failure: Failure) -> Failure:
        self.problem = listen_problem(failure.value)
        return failure

    def close(self) -> defer.Deferred[Any]:
        port, self.port = self.port, None
        if port is None:
            return defer.succeed(None)
        return defer.maybeDeferred(port.stopListening)


def open_all(listeners: Iterable[Listener], on_late_failure: Callable[[Listener], None]) -> list[str]:
    """Open every listener; the lines of those that failed at once (then the
    others are closed again, so nothing is left half-open). An endpoint
    that listens asynchronously and fails later calls ``on_late_failure``."""
    listeners = list(listeners)
    problems: list[str] = []
    for listener in listeners:
        d = listener.open()
        failed: list[Failure] = []
        d.addErrback(failed.append)
        if failed:
            problems.append(listener.line())
        elif not listener.listening():  # still pending: report when it ends
            d.addCallback(_report_late, listener, on_late_failure)
    if problems:
        for listener in listeners:
            listener.close()
    return problems


def _report_late(result: object, listener: Listener, report: Callable[[Listener], None]) -> object:
    if listener.problem is not None:
        report(listener)
    return result


def exit_after_stopping(reactor: Any, line: str) -> None:
    """For a failure after the reactor started: the line on stderr, then stop
    and exit with :data:`EXIT_CANNOT_LISTEN` (``twist`` itself would exit 0)."""
    sys.stderr.write(f"twistgw: {line}\n")
    sys.stderr.flush()

    def leave() -> None:
        sys.stdout.flush()
        os._exit(EXIT_CANNOT_LISTEN)

    reactor.addSystemEventTrigger("after", "shutdown", leave)
    reactor.stop()
