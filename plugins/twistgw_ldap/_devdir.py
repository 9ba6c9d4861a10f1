"""A development directory: ldaptor's in-memory LDAP server, loaded from LDIF.

Enabled by the gateway-wide Settings resource::

    apiVersion: gateway.vendor.io/v1
    kind: Settings
    metadata: {name: settings}
    spec:
      extauth:
        devDirectory:
          ldif: demo-users.ldif                 # relative to the config directory
          listen: tcp:3389:interface=127.0.0.1  # loopback only

For demos and tests only: no ACLs, no memberof overlay (write ``memberOf``
in the LDIF), plain-text or ``{SSHA}`` passwords, nothing persisted.
"""

from __future__ import annotations

import hashlib
import os
from io import BytesIO
from typing import Any, Mapping

from twistgw_ldap._ldaptor import LDAPServer, inmemory, interfaces
from twisted.internet import defer
from twistgw.api.fields import FieldReader, Path
from twistgw.options import loopback_problem
from twisted.internet.endpoints import serverFromString
from twisted.internet.error import CannotListenError
from twisted.internet.protocol import ServerFactory
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.components import registerAdapter

DEFAULT_LISTEN = "tcp:3389:interface=127.0.0.1"


class DevDirectoryError(ValueError):
    """Invalid ``devDirectory`` settings; ``path`` is the field below
    ``Settings.spec.extauth`` when known."""

    def __init__(self, message: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.path = path


class _Server(LDAPServer):
    def connectionMade(self) -> None:
        self.factory.connections.add(self)
        super().connectionMade()

    def connectionLost(self, reason: Any = None) -> None:
        self.factory.connections.discard(self)
        super().connectionLost(reason)


class _Factory(ServerFactory):
    protocol = _Server

    def __init__(self, root: Any) -> None:
        self.root = root
        self.connections: set[_Server] = set()


registerAdapter(lambda factory: factory.root, _Factory, interfaces.IConnectedLDAPEntry)


def _listen_problem(exc: BaseException) -> str:
    """``address already in use``: the socket error's own words."""
    error = exc.socketError if isinstance(exc, CannotListenError) else exc
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return f"{reason[:1].lower()}{reason[1:]}"


def check_loopback(listen: str) -> None:
    """Refuse any endpoint that would accept connections from other hosts."""
    problem = loopback_problem(listen)
    if problem is not None:
        raise DevDirectoryError(f"listen {problem}; the development directory only listens on loopback")


def _first_problem(path: Path, reason: str) -> None:
    raise DevDirectoryError(reason, tuple(str(p) for p in path))


def read_settings(settings: Mapping[str, Any], config_dir: str) -> tuple[str, str] | None:
    """(absolute LDIF path, listen endpoint) or None when not configured;
    DevDirectoryError at the first problem (the gateway's field reader)."""
    if not settings:
        return None
    r = FieldReader(_first_problem)
    dev = r.mapping(settings, (), names=("devDirectory",)).get("devDirectory")  # the other fields: extauth's
    if dev is None:
        return None
    path: Path = ("devDirectory",)
    m = r.mapping(dev, path, ("ldif", "listen"), required=("ldif",))
    ldif = r.string(m["ldif"], path + ("ldif",))
    if not os.path.isabs(ldif):
        if not config_dir:
            raise r.fail(path + ("ldif",), f"{ldif!r} is relative but the configuration directory is not known"
                         " (configuration loaded from text); give an absolute path")
        ldif = os.path.join(config_dir, ldif)
    listen = r.string(m.get("listen", DEFAULT_LISTEN), path + ("listen",))
    problem = loopback_problem(listen)
    if problem is not None:
        raise r.fail(path + ("listen",), f"listen {problem}; the development directory only listens on loopback")
    return ldif, listen


def read_ldif(ldif: str) -> bytes:
    try:
        with open(ldif, "rb") as f:
            return f.read()
    except OSError as exc:
        raise DevDirectoryError(f"cannot read {ldif}: {exc.strerror}", ("devDirectory", "ldif")) from None


def _parse_ldif(data: bytes) -> defer.Deferred[Any]:
    # ldaptor wants a blank line after the last entry; many files lack it
    parsed: defer.Deferred[Any] = inmemory.fromLDIFFile(BytesIO(data.rstrip(b"\r\n") + b"\n\n"))
    return parsed


def check_settings(settings: Mapping[str, Any], config_dir: str) -> None:
    """What ``twistgw check`` verifies of ``devDirectory``: the settings, and
    that the LDIF file exists, is readable and parses (else DevDirectoryError),
    so a typo in the path is refused at load time, never a 503 at run time."""
    wanted = read_settings(settings, config_dir)
    if wanted is None:
        return
    ldif, _ = wanted
    data = read_ldif(ldif)
    problems: list[str] = []

    def failed(failure: Failure) -> None:
        problems.append(failure.getErrorMessage() or repr(failure.value))

    try:
        d = _parse_ldif(data)
        d.addErrback(failed)  # an in-memory file is parsed synchronously
    except Exception as exc:  # ldaptor raises some parse errors directly
        problems.append(str(exc) or type(exc).__name__)
    if problems:
        raise DevDirectoryError(f"{ldif} is not valid LDIF: {problems[0]}", ("devDirectory", "ldif"))


class DevDirectory:
    """The running development directory; restarted when its settings or LDIF change."""

    _log = Logger()

    def __init__(self) -> None:
        self.key: tuple[str, str, str] | None = None
        self.port: Any = None
        self.factory: _Factory | None = None
        self._lock = defer.DeferredLock()

    async def apply(self, reactor: Any, settings: Mapping[str, Any], config_dir: str) -> None:
        await self._lock.acquire()
        try:
            await self._apply(reactor, settings, config_dir)
        finally:
            self._lock.release()

    async def _apply(self, reactor: Any, settings: Mapping[str, Any], config_dir: str) -> None:
        try:
            wanted = read_settings(settings, config_dir)
        except DevDirectoryError as exc:
            self._log.error("Development LDAP directory not started: {reason}", reason=str(exc))
            await self.stop()
            return
        if wanted is None:
            await self.stop()
            return
        ldif, listen = wanted
        try:
            data = read_ldif(ldif)
        except DevDirectoryError as exc:
            self._log.error("Development LDAP directory not started: {reason}", reason=str(exc))
            await self.stop()
            return
        key = (ldif, listen, hashlib.sha256(data).hexdigest())
        if key == self.key and self.port is not None:
            return
        await self.stop()
        try:
            root = await _parse_ldif(data)
        except Exception as exc:
            self._log.error("Development LDAP directory not started: {ldif} is not valid LDIF: {err!r}",
                            ldif=ldif, err=exc)
            return
        factory = _Factory(root)
        try:
            self.port = await serverFromString(reactor, listen).listen(factory)
        except (CannotListenError, OSError) as exc:
            # one line, as for the gateway's own endpoints: a second demo
            # running, or the port taken by anything else
            self._log.error("Development LDAP directory not started: cannot listen on {listen}"
                            " (Settings spec.extauth.devDirectory.listen): {reason}",
                            listen=listen, reason=_listen_problem(exc))
            return
        self.factory = factory
        self.key = key
        self._log.warn(
            "DEVELOPMENT LDAP DIRECTORY serving {ldif} on {listen}: in-memory, no ACLs, test"
            " users only. Never use it in production; remove Settings spec.extauth.devDirectory.",
            ldif=ldif, listen=listen)

    async def stop(self) -> None:
        port, self.port, self.key = self.port, None, None
        factory, self.factory = self.factory, None
        if port is not None:
            await port.stopListening()
        if factory is not None:  # clients must not keep talking to the old tree
            for conn in list(factory.connections):
                conn.transport.abortConnection()
