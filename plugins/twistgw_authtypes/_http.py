"""The HTTP client of ``passThroughAuth.http`` and ``customAuth``: one
:class:`twistgw.sdk.HttpClient` (a persistent pool) per config type and
:class:`ClientSettings` (kept across reloads), a deadline per call, an
optional deadline for the answer's head, a bound on concurrent calls
(Gloo's ``connectionPool.maxConns``), and bodies read up to a bound.

The SDK's client keeps no cookies between users, follows no redirect,
decodes no body and never sends a call twice.
"""

from __future__ import annotations

from typing import Any, Iterable

import attrs
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.web.http_headers import Headers as TxHeaders

from twistgw.sdk import HttpBodyTooLarge, HttpClient, HttpError, HttpTimeout
from twistgw.sdk import client_tls

#: The most of an authorization service's answer that is read.
MAX_REPLY_BODY = 64 * 1024


@attrs.frozen
class Reply:
    status: int
    headers: TxHeaders
    body: bytes


@attrs.frozen
class ClientSettings:
    """What makes two clients different: TLS to the service (PEMs and
    versions; None: the system trust store, TLS 1.2 or later), the most
    concurrent calls (None: unbounded), and how long an idle connection is
    kept (None: until the service closes it). ``origin`` (scheme, host and
    port of the service's URL) keeps one service's bound apart from
    another's."""

    origin: str = ""
    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = attrs.field(default=None, repr=False)  # a private key: never in a log line
    min_version: str | None = None
    max_version: str | None = None
    max_conns: int | None = None
    idle_timeout: float | None = None

    def tls_options(self) -> dict[str, Any]:
        return {"ca_pem": self.ca_pem, "client_cert_pem": self.cert_pem, "client_key_pem": self.key_pem,
                "min_version": self.min_version, "max_version": self.max_version}

    def check_tls(self) -> None:
        """:raises twistgw.tls.TLSSettingsError: settings OpenSSL refuses."""
        client_tls("settings.check", **self.tls_options())


DEFAULT_SETTINGS = ClientSettings()

#: An idle connection kept "forever" (Gloo's idleTimeout 0): Twisted's pool
#: wants a number of seconds; the service's own close still removes it.
_NO_IDLE_EXPIRY = 10 * 365 * 86400.0


class CallFailed(Exception):
    """The service could not be asked: ``timeout`` or ``unreachable``."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason


class AuthHttpClient:
    """Made lazily with the reactor the gateway runs on; ``close`` drops the
    pooled connections (at shutdown, or when no config uses its settings)."""

    def __init__(self, reactor: Any, settings: ClientSettings = DEFAULT_SETTINGS, max_per_host: int = 32,
                 connect_timeout: float = 5.0) -> None:
        self.reactor = reactor
        self.settings = settings
        idle = None if settings.idle_timeout is None else settings.idle_timeout or _NO_IDLE_EXPIRY
        # https URLs: the service's certificate checked against the URL's host by subjectAltName;
        # connectionPool.maxConns: calls beyond it wait for a slot (within their deadline)
        self.http = HttpClient(reactor, connect_timeout=connect_timeout, max_body=MAX_REPLY_BODY,
                               max_in_flight=settings.max_conns, max_per_host=max_per_host, idle_timeout=idle,
                               **settings.tls_options())
        self.pool: Any = self.http.pool

    async def call(self, method: bytes, url: bytes, headers: TxHeaders, body: bytes | None,
                   timeout: float, head_timeout: float | None = None) -> Reply:
        """One request, answered within ``timeout`` seconds (waiting for a
        connection slot, connecting, sending, and reading the whole answer),
        its head within ``head_timeout`` of the request being written (when
        given; whichever fires first wins), else :class:`CallFailed`."""
        try:
            answer = await self.http.request(method, url, headers=headers, body=body, timeout=timeout,
                                             head_timeout=head_timeout)
        except HttpTimeout as exc:
            if exc.limit == "head":
                raise CallFailed("timeout", f"no response head within {exc.seconds:g}s of the request"
                                            " (responseHeaderTimeout)") from None
            if exc.limit == "connect":
                raise CallFailed("unreachable", f"no connection within {exc.seconds:g}s") from None
            waiting = " waiting for a connection slot (connectionPool.maxConns)" if exc.phase == "slot" else ""
            raise CallFailed("timeout", f"no answer within {exc.seconds:g}s{waiting}") from None
        except HttpBodyTooLarge:
            raise CallFailed("unreachable", f"answer longer than {MAX_REPLY_BODY} bytes") from None
        except HttpError as exc:  # refused, reset, DNS, TLS
            raise CallFailed("unreachable", str(exc).partition(": ")[2] or str(exc)) from None
        return Reply(answer.status, answer.headers, answer.body)

    def close(self) -> Deferred[None]:
        return self.http.close()


class ClientHolder:
    """The clients of one config type, one per :class:`ClientSettings`,
    made on first use with the reactor of the request (or the gateway's,
    from ``configure``), kept across reloads, closed at shutdown or when
    no serving config uses their settings (:meth:`keep_only`)."""

    def __init__(self) -> None:
        self.reactor: Any = None
        self._clients: dict[ClientSettings, AuthHttpClient] = {}

    def get(self, reactor: Any = None, settings: ClientSettings = DEFAULT_SETTINGS) -> AuthHttpClient:
        client = self._clients.get(settings)
        if client is None:
            client = self._clients[settings] = AuthHttpClient(reactor or self.reactor or _default_reactor(),
                                                              settings)
        return client

    def keep_only(self, used: Iterable[ClientSettings]) -> None:
        """Close the clients of settings no serving config names."""
        keep = set(used)
        for settings in [s for s in self._clients if s not in keep]:
            self._clients.pop(settings).close()

    def close(self) -> Deferred[None] | None:
        clients, self._clients = list(self._clients.values()), {}
        if not clients:
            return None
        return defer.gatherResults([c.close() for c in clients]).addCallback(lambda _: None)


def _default_reactor() -> Any:
    from twisted.internet import reactor

    return reactor


def copy_headers(source: Any, names: tuple[bytes, ...], into: TxHeaders) -> None:
    """Every value of each of ``names`` in ``source`` (request headers)."""
    for name in names:
        values = source.getRawHeaders(name)
        if values:
            into.setRawHeaders(name, list(values))


def reply_headers(reply: Reply, names: tuple[bytes, ...]) -> tuple[tuple[bytes, bytes], ...]:
    """(name, value) of each of ``names`` the reply carries, every value,
    those with CR, LF or NUL left out."""
    out = []
    for name in names:
        for value in reply.headers.getRawHeaders(name) or ():
            if not any(ch in value for ch in b"\r\n\x00"):
                out.append((name, value))
    return tuple(out)
