"""The streamlined epoll dispatch loop (``twistgw.engine.reactor``): it
serves sockets exactly as Twisted's does, keeps logging what escapes a
handler, and leaves other reactors alone. Each test drives a private
``EPollReactor`` over loopback sockets, one ``iterate`` at a time."""

from __future__ import annotations

from typing import Any

from twisted.internet import protocol
from twisted.internet.epollreactor import EPollReactor
from twisted.internet.selectreactor import SelectReactor

from twistgw.engine.reactor import _do_poll, streamline

from support.trial import TestCase


class _Echo(protocol.Protocol):
    def dataReceived(self, data: bytes) -> None:
        self.transport.write(data)


class _Client(protocol.Protocol):
    def __init__(self) -> None:
        self.received = b""
        self.lost = False

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Any) -> None:
        self.lost = True


class _BrokenOnClose(protocol.Protocol):
    def connectionLost(self, reason: Any) -> None:
        raise RuntimeError("a handler that breaks on close")


class _BrokenOnRead(protocol.Protocol):
    def dataReceived(self, data: bytes) -> None:
        raise ZeroDivisionError("a handler that breaks on data")


def _private_reactor(case: TestCase, cls: Any = EPollReactor) -> Any:
    reactor = cls()

    def close() -> None:
        # Close every socket directly: this reactor is not iterated any more,
        # so nothing that waits for its next turn (stopListening) would end.
        for selectable in reactor.removeAll():
            try:
                selectable.connectionLost(None)  # type: ignore[arg-type]
            except Exception:
                pass  # _BrokenOnClose, on a connection the test left open
        reactor.waker.connectionLost(None)
        if hasattr(reactor, "_poller"):
            reactor._poller.close()

    case.addCleanup(close)
    return reactor


def _spin(reactor: Any, done: Any, turns: int = 200) -> None:
    for _ in range(turns):
        if done():
            return
        reactor.iterate(0.01)
    raise AssertionError("the reactor did not get there in time")


class StreamlineTests(TestCase):
    def _echo_pair(self, reactor: Any, server_protocol: type = _Echo) -> tuple[Any, _Client]:
        factory = protocol.Factory.forProtocol(server_protocol)
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        client = _Client()
        reactor.connectTCP("127.0.0.1", port.getHost().port, protocol.ClientFactory.forProtocol(lambda: client))
        _spin(reactor, lambda: client.transport is not None and client.transport.connected)
        return port, client

    def test_patches_an_epoll_reactor_once(self) -> None:
        reactor = _private_reactor(self)
        self.assertTrue(streamline(reactor))
        self.assertIs(reactor.doIteration.__func__, _do_poll)
        first = reactor.doIteration
        self.assertTrue(streamline(reactor))
        self.assertIs(reactor.doIteration, first)  # not wrapped twice

    def test_leaves_other_reactors_alone(self) -> None:
        reactor = _private_reactor(self, SelectReactor)
        before = reactor.doIteration
        self.assertFalse(streamline(reactor))
        self.assertEqual(reactor.doIteration, before)
        self.assertFalse(getattr(reactor, "_twistgw_streamlined", False))

    def test_serves_reads_writes_and_closes(self) -> None:
        reactor = _private_reactor(self)
        streamline(reactor)
        _, client = self._echo_pair(reactor)
        payload = b"x" * 300_000  # more than one send: the write path too
        client.transport.write(payload)
        _spin(reactor, lambda: len(client.received) >= len(payload), turns=2000)
        self.assertEqual(client.received, payload)
        client.transport.loseConnection()
        _spin(reactor, lambda: client.lost)

    def test_an_escaping_error_is_logged_and_the_loop_goes_on(self) -> None:
        reactor = _private_reactor(self)
        streamline(reactor)
        _, doomed = self._echo_pair(reactor, _BrokenOnClose)
        _, healthy = self._echo_pair(reactor)
        doomed.transport.loseConnection()
        _spin(reactor, lambda: doomed.lost and bool(self.flushLoggedErrors(RuntimeError)), turns=400)
        healthy.transport.write(b"still served")
        _spin(reactor, lambda: healthy.received == b"still served")

    def test_an_error_in_a_read_handler_is_logged_and_drops_that_connection(self) -> None:
        reactor = _private_reactor(self)
        streamline(reactor)
        _, broken = self._echo_pair(reactor, _BrokenOnRead)
        _, healthy = self._echo_pair(reactor)
        broken.transport.write(b"boom")
        _spin(reactor, lambda: broken.lost)
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)
        healthy.transport.write(b"still served")
        _spin(reactor, lambda: healthy.received == b"still served")
