"""The network edge: LDAP connections with timeouts, and a pool of them.

ldaptor's ``LDAPClient`` has no timeouts and assumes every answer finds its
request; here every operation is bounded with ``Deferred.addTimeout`` and a
connection that timed out is aborted and never reused.

A pooled connection is lent to one request at a time for the whole flow
(bind as the user, maybe bind as the service account, search), so two
requests never see each other's bind state; the next request binds again.
"""

from __future__ import annotations

import socket

from collections import deque
from typing import Any

from twistgw_ldap._ldaptor import LDAPClient, pureber, pureldap
from twisted.internet import defer, error
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
    connectProtocol,
    wrapClientTLS,
)
from twisted.logger import Logger
from twisted.python.failure import Failure

from twistgw.tls import client_tls, describe_tls_failure

from twistgw_ldap import _ber
from twistgw_ldap._model import Target

#: Result codes that mean "the directory cannot answer now", not "no".
FAULT_CODES = frozenset({
    1,   # operationsError
    3,   # timeLimitExceeded
    11,  # adminLimitExceeded
    51,  # busy
    52,  # unavailable
    80,  # other
})


class DirectoryFault(Exception):
    """The directory refused, reset, or did not answer in time (→ 503)."""

    def __init__(self, reason: str, connection_lost: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        #: the connection broke before any answer: worth one retry on a fresh one
        self.connection_lost = connection_lost


class Client(LDAPClient):
    """``LDAPClient`` that survives late answers and timed-out requests, and
    encodes and decodes the messages of a directory check with
    :mod:`twistgw_ldap._ber` (ldaptor decodes anything else)."""

    def __init__(self) -> None:
        super().__init__()
        # ldaptor's own attributes, typed here (ldaptor has no annotations)
        self.buffer: bytes = self.buffer
        self.onwire: dict[int, Any] = self.onwire
        self.reused = False
        self.lost: defer.Deferred[None] = defer.Deferred()
        self._last_id = 0

    def next_id(self) -> int:
        """A message ID not in use on this connection (1 .. 2³¹-1, wrapping)."""
        msg_id = self._last_id
        while True:
            msg_id = 1 if msg_id >= _ber.MAX_ID else msg_id + 1
            if msg_id not in self.onwire:
                break
        self._last_id = msg_id
        return msg_id

    def send_encoded(self, msg_id: int, data: bytes, handler: Any = None) -> defer.Deferred[Any]:
        """Send a message already encoded with ID ``msg_id``; like ldaptor's
        ``send`` (``handler`` None) or ``send_multiResponse``."""
        d: defer.Deferred[Any] = defer.Deferred()
        self.onwire[msg_id] = (d, False, handler, (), {})
        self.transport.write(data)
        return d

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        while self.buffer:
            try:
                size = _ber.message_length(self.buffer)
            except _ber.Unhandled:
                LDAPClient.dataReceived(self, b"")  # not framed as expected: ldaptor decides
                return
            if size is None or len(self.buffer) < size:
                return  # wait for the rest
            message, self.buffer = self.buffer[:size], self.buffer[size:]
            try:
                msg_id, value = _ber.decode(message)
            except _ber.Unhandled:
                decoded, _ = pureber.berDecodeObject(self.berdecoder, message)
                if decoded is None:
                    raise ValueError(f"undecodable LDAP message of {size} bytes") from None
                self.handle(decoded)
            else:
                self._dispatch(msg_id, value, None)
            if not self.connected:
                return

    def handle(self, msg: Any) -> None:
        self._dispatch(msg.id, msg.value, msg.controls)

    def _dispatch(self, msg_id: int, value: Any, controls: Any) -> None:
        # ldaptor's handle() deletes the request *after* firing its Deferred;
        # our callbacks may abort the connection (clearing onwire) meanwhile.
        if msg_id == 0:
            self.unsolicitedNotification(value)
            return
        entry = self.onwire.get(msg_id)
        if entry is None:
            return  # an answer to a request we gave up on
        d, return_controls, handler, args, kwargs = entry
        if handler is None:
            del self.onwire[msg_id]
            d.callback((value, controls) if return_controls else value)
            return
        done = (handler(value, controls, *args, **kwargs) if return_controls
                else handler(value, *args, **kwargs))
        if done:
            self.onwire.pop(msg_id, None)

    def connectionLost(self, reason: Failure | None = None) -> None:
        if reason is None:
            reason = Failure(error.ConnectionDone())
        self.connected = 0
        pending, self.onwire = self.onwire, {}
        for d, *_ in pending.values():
            if not d.called:
                d.errback(reason)
        if not self.lost.called:
            self.lost.callback(None)

    def abort(self) -> None:
        self.onwire = {}
        if self.transport is not None:
            try:
                self.transport.abortConnection()
            except AttributeError:
                # Twisted's TLS wrapper before its TLS connection exists
                # (a StartTLS that never began): drop the socket beneath it.
                self.transport.transport.abortConnection()


def _fault_from(failure: Failure, what: str, timeout: float) -> DirectoryFault:
    tls = describe_tls_failure(failure.value) if failure.value is not None else None
    if tls is not None:  # the directory's certificate (or handshake) is refused: never retried
        return DirectoryFault(f"{what}: {tls}")
    if failure.check(defer.TimeoutError, defer.CancelledError):
        return DirectoryFault(f"{what}: no answer within {timeout:g}s")
    if failure.check(error.ConnectionRefusedError):
        return DirectoryFault(f"{what}: connection refused")
    if failure.check(error.DNSLookupError):
        return DirectoryFault(f"{what}: host name not found")
    if failure.check(error.ConnectionLost, error.ConnectionDone, error.ConnectionClosed):
        return DirectoryFault(f"{what}: connection closed by the directory", connection_lost=True)
    kind = failure.type.__name__ if failure.type is not None else "error"
    return DirectoryFault(f"{what}: {kind}: {failure.getErrorMessage()}",
                          connection_lost=bool(failure.check(error.ConnectError)))


async def _bounded(d: defer.Deferred[Any], client: Client | None, timeout: float, reactor: Any, what: str) -> Any:
    d.addTimeout(timeout, reactor)
    try:
        return await d
    except Exception:
        failure = Failure()
        if client is not None:
            client.abort()
        raise _fault_from(failure, what, timeout) from None


def tls_options(target: Target) -> Any:
    """The connection creator for ldaps:// and StartTLS: the gateway's one
    TLS client (:func:`twistgw.tls.client_tls`), which checks the chain and
    the name by subjectAltName (a certificate with none is refused); there
    is no way to skip that. (``Any``: an ``IOpenSSLClientConnectionCreator``,
    which Twisted's endpoints and ``startTLS`` take untyped.)"""
    return client_tls(target.server_name or target.host, ca_pem=target.ca_pem)


def _is_ip(host: str, family: int) -> bool:
    try:
        socket.inet_pton(family, host)
    except (OSError, ValueError):
        return False
    return True


async def connect(reactor: Any, target: Target, timeout: float) -> Client:
    """Open (and for StartTLS, secure) a connection, all within ``timeout``."""
    endpoint: Any
    if _is_ip(target.host, socket.AF_INET):
        endpoint = TCP4ClientEndpoint(reactor, target.host, target.port, timeout=timeout)
    elif _is_ip(target.host.strip("[]"), socket.AF_INET6):
        endpoint = TCP6ClientEndpoint(reactor, target.host.strip("[]"), target.port, timeout=timeout)
    else:
        # HostnameEndpoint resolves and races addresses; only worth it for names.
        endpoint = HostnameEndpoint(reactor, target.host.encode("idna") if not target.host.isascii()
                                    else target.host, target.port, timeout=timeout)
    if target.scheme == "ldaps":
        endpoint = wrapClientTLS(tls_options(target), endpoint)
    client = Client()
    await _bounded(connectProtocol(endpoint, client), None, timeout, reactor, f"connect to {target.describe()}")
    if target.start_tls:
        response = await _bounded(client.send(pureldap.LDAPStartTLSRequest()), client, timeout, reactor,
                                  f"StartTLS with {target.describe()}")
        if response.resultCode != 0:
            client.abort()
            raise DirectoryFault(f"StartTLS refused by {target.describe()} (result {response.resultCode})")
        client.transport.startTLS(tls_options(target))
    return client


async def bind(client: Client, dn: str, password: bytes, timeout: float, reactor: Any) -> int:
    """Simple bind; returns the LDAP result code (0 is success)."""
    if not client.connected:
        raise DirectoryFault("connection closed", connection_lost=True)
    msg_id = client.next_id()
    sent = client.send_encoded(msg_id, _ber.bind_request(msg_id, dn.encode("utf-8"), password))
    response = await _bounded(sent, client, timeout, reactor, "bind")
    if not isinstance(response, pureldap.LDAPBindResponse):
        client.abort()
        raise DirectoryFault(f"bind: unexpected answer {type(response).__name__}")
    return int(response.resultCode)


async def search(client: Client, base: str, filter_ber: bytes, attributes: list[str], timeout: float,
                 reactor: Any, scope: int = _ber.SCOPE_BASE, size_limit: int = 2) -> tuple[int, list[Any]]:
    """Search under ``base`` (base scope: ``base`` itself); returns (result
    code, entries). Referrals are ignored."""
    if not client.connected:
        raise DirectoryFault("connection closed", connection_lost=True)
    entries: list[Any] = []
    done: defer.Deferred[Any] = defer.Deferred()

    def handler(msg: Any) -> bool:
        if isinstance(msg, pureldap.LDAPSearchResultEntry):
            entries.append(msg)
            return False
        if isinstance(msg, pureldap.LDAPSearchResultReference):
            return False
        if not done.called:
            done.callback(msg)
        return True

    msg_id = client.next_id()
    request = _ber.search_request(msg_id, base.encode("utf-8"), filter_ber, [a.encode("ascii") for a in attributes],
                                  size_limit=size_limit, time_limit=max(1, int(timeout)), scope=scope)
    sent = client.send_encoded(msg_id, request, handler)
    sent.addErrback(lambda f: None if done.called else done.errback(f))
    result = await _bounded(done, client, timeout, reactor, "search")
    if not isinstance(result, pureldap.LDAPSearchResultDone):
        client.abort()
        raise DirectoryFault(f"search: unexpected answer {type(result).__name__}")
    return int(result.resultCode), entries


class Pool:
    """Connections to one directory target, lent out one request at a time."""

    _log = Logger()

    def __init__(self, reactor: Any, target: Target, max_size: int) -> None:
        self.reactor = reactor
        self.target = target
        self.max_size = max_size
        self.size = 0  # open or opening
        self.idle: list[Client] = []
        self.waiters: deque[defer.Deferred[Client | None]] = deque()
        self.closed = False

    async def acquire(self, connect_timeout: float, wait_timeout: float) -> Client:
        while self.idle:
            client = self.idle.pop()
            if client.connected:
                client.reused = True
                return client
            self.size -= 1
        if self.size >= self.max_size:
            waiter: defer.Deferred[Client | None] = defer.Deferred()
            self.waiters.append(waiter)
            waiter.addTimeout(wait_timeout, self.reactor)
            try:
                got = await waiter
            except defer.TimeoutError:
                raise DirectoryFault(f"all {self.max_size} connections to {self.target.describe()}"
                                     f" busy for {wait_timeout:g}s") from None
            finally:
                if waiter in self.waiters:
                    self.waiters.remove(waiter)
            if got is not None:
                got.reused = True
                return got
            # a slot was freed for us (size already counts it)
        else:
            self.size += 1
        try:
            return await connect(self.reactor, self.target, connect_timeout)
        except BaseException:
            self._free_slot()
            raise

    def release(self, client: Client, reusable: bool) -> None:
        if reusable and client.connected and not self.closed and self.size <= self.max_size:
            while self.waiters:
                waiter = self.waiters.popleft()
                if not waiter.called:
                    waiter.callback(client)
                    return
            self.idle.append(client)
            return
        client.abort()
        self._free_slot()

    def _free_slot(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.called:
                waiter.callback(None)  # the slot passes to the waiter
                return
        self.size -= 1

    def warm(self, count: int, connect_timeout: float) -> None:
        """Open connections in the background until ``count`` are idle."""
        missing = min(count, self.max_size) - self.size
        for _ in range(max(0, missing)):
            self.size += 1
            d = defer.Deferred.fromCoroutine(connect(self.reactor, self.target, connect_timeout))

            def ok(client: Client) -> None:
                self.release(client, True)

            def failed(f: Failure) -> None:
                self._free_slot()
                self._log.warn("Could not pre-open a connection to {target}: {reason}",
                               target=self.target.describe(), reason=f.getErrorMessage())

            d.addCallbacks(ok, failed)

    def drop_idle(self) -> None:
        """Close the idle connections: one of them turned out closed by the
        directory (a restart closes them all), so a retry must not take
        another one that only looks alive until its close is read."""
        idle, self.idle = self.idle, []
        for client in idle:
            client.abort()
            self._free_slot()

    def close(self) -> None:
        self.closed = True
        idle, self.idle = self.idle, []
        for client in idle:
            client.abort()
            self.size -= 1
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.called:
                waiter.errback(DirectoryFault("the connection pool was closed"))
