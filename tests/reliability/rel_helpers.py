"""Helpers for the fault tests: a key-set server that can be stopped and
brought back on the same port, configuration builders, a bounded concurrent
load loop, and process resource probes (file descriptors, RSS)."""

from __future__ import annotations

import base64
import os
import time
from typing import Any, Awaitable, Callable, Iterable

import attrs
import yaml
from support.http import http_request, reactor, rss_bytes, sleep
from jwt_helpers import ISSUER, KeySetResource, jwks, kid_of, token
from slapd import MANAGERS, SERVICE_DN, SERVICE_PW
from twisted.internet import defer, protocol
from twisted.web import server

__all__ = [
    "ISSUER", "KeySet", "LoadResult", "Outcome", "SinkServer", "basic", "bearer", "config_yaml",
    "fd_count", "jwks", "kid_of", "load", "rss_bytes", "settle_resources", "token",
    "write_atomic",
]

BAD_PW = "not-the-password"


def fd_count() -> int:
    """Open file descriptors of this process (the gateway, its backends and clients)."""
    return len(os.listdir("/proc/self/fd"))


async def settle_resources(fd_baseline: int, fd_slack: int = 6, timeout: float = 5.0) -> int:
    """Wait until the fd count is back within ``fd_slack`` of the baseline;
    return the count (fails the test if it never gets there)."""
    deadline = time.monotonic() + timeout
    while True:
        now = fd_count()
        if now <= fd_baseline + fd_slack:
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"file descriptors did not return to baseline: {now} open,"
                                 f" baseline {fd_baseline} (+{fd_slack} allowed): "
                                 f"{_describe_fds()}")
        await sleep(0.05)


def _describe_fds() -> str:
    kinds: dict[str, int] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        kind = target.split(":")[0] if ":" in target else "file"
        kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{k}={n}" for k, n in sorted(kinds.items()))


def bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def write_atomic(directory: str, name: str, text: str) -> None:
    """Write a configuration file the safe way (temp file + rename)."""
    tmp = os.path.join(directory, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(directory, name))


# ---------------------------------------------------------------------------
# A key-set server that can go away and come back on the same port
# ---------------------------------------------------------------------------


def good_keys(*ns: int) -> dict[str, Any]:
    """A key set with the RSA keys ``ns`` (default: key 0), each under its thumbprint kid."""
    return jwks(*[("rsa", n, kid_of("rsa", n)) for n in (ns or (0,))])


class KeySet:
    """A loopback HTTP key-set server (``jwt_helpers.KeySetResource``).

    ``mode``: ``"ok"`` (serve ``doc``), ``"500"``, ``"garbage"``, ``"hang"``.
    ``stop()`` closes the port (connections refused); ``start()`` listens on
    the same port again.
    """

    def __init__(self, port: int | None = None) -> None:
        self.resource = KeySetResource()
        self.site = server.Site(self.resource)
        self.site.log = lambda request: None  # type: ignore[method-assign]
        self.listening: Any = None
        self.port = port or 0
        self.set_keys(good_keys())

    def set_keys(self, doc: Any) -> None:
        self.resource.set_keys(doc)

    def mode(self, mode: str, doc: Any = None) -> None:
        r = self.resource
        if mode == "ok":
            r.set_keys(doc if doc is not None else good_keys())
        elif mode == "500":
            r.hang, r.status, r.body = False, 500, b"internal error"
        elif mode == "garbage":
            r.hang, r.status, r.body = False, 200, b"\x00<html>not json{"
        elif mode == "hang":
            r.hang = True
        else:
            raise ValueError(mode)

    def start(self) -> "KeySet":
        self.listening = reactor.listenTCP(self.port, self.site, interface="127.0.0.1")
        self.port = self.listening.getHost().port
        return self

    @property
    def count(self) -> int:
        return len(self.resource.requests)

    async def stop(self) -> None:
        if self.listening is not None:
            listening, self.listening = self.listening, None
            await listening.stopListening()
        pending, self.resource.pending = self.resource.pending, []
        for req in pending:
            if req.channel is not None and req.channel.transport is not None:
                req.channel.transport.abortConnection()


# ---------------------------------------------------------------------------
# A TCP sink that records uploads and whether the peer went away
# ---------------------------------------------------------------------------


class _Sink(protocol.Protocol):
    def connectionMade(self) -> None:
        self.received = 0
        self.lost = False
        self.factory.connections.append(self)

    def dataReceived(self, data: bytes) -> None:
        self.received += len(data)

    def connectionLost(self, reason: Any = None) -> None:
        self.lost = True


class SinkServer(protocol.ServerFactory):
    """Reads everything, never answers; ``connections[i].received`` (bytes)
    and ``.lost`` (the gateway closed the upstream connection)."""

    protocol = _Sink

    def __init__(self) -> None:
        self.connections: list[_Sink] = []
        self.listening = reactor.listenTCP(0, self, interface="127.0.0.1")
        self.port = self.listening.getHost().port

    async def stop(self) -> None:
        await self.listening.stopListening()
        for c in self.connections:
            if c.transport is not None and not c.lost:
                c.transport.abortConnection()


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------


def _upstream(name: str, port: int) -> dict[str, Any]:
    return {"apiVersion": "core.vendor.io/v1", "kind": "Upstream",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": port}]}}}


def route(prefix: str, upstream: str = "backend", **options: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"matchers": [{"prefix": prefix}],
                         "routeAction": {"single": {"upstream": {"name": upstream, "namespace": "default"}}}}
    if options:
        r["options"] = options
    return r


def jwt_remote(port_name: str = "jwks", timeout: str = "300ms", cache: str = "60s",
               refetch: str = "200ms") -> dict[str, Any]:
    return {"providers": {"issuer": {
        "issuer": ISSUER,
        "jwks": {"remote": {"upstreamRef": {"name": port_name, "namespace": "default"},
                            "url": "http://auth.example.com/keys.json",
                            "timeout": timeout, "cacheDuration": cache, "refetchInterval": refetch}}}}}


def jwt_local() -> dict[str, Any]:
    from jwt_helpers import public_pem

    return {"providers": {"issuer": {"issuer": ISSUER, "jwks": {"local": {"key": public_pem()}}}}}


RBAC_ADMIN_GET = {"policies": {"admins": {
    "permissions": {"methods": ["GET"], "pathPrefix": "/rbac"},
    "principals": [{"jwtPrincipal": {"claims": {"role": "admin"}}}]}}}


def ldap_docs(address: str, request_timeout: str = "500ms", connect_timeout: str = "500ms",
              cache_ttl: str = "0s", **extra: Any) -> list[dict[str, Any]]:
    """An AuthConfig ``ldap`` (allowed: managers) and its service-account Secret."""
    ldap = {"address": address, "userDnTemplate": "uid=%s,ou=people,dc=example,dc=org",
            "allowedGroups": [MANAGERS], "connectTimeout": connect_timeout,
            "requestTimeout": request_timeout, "cacheTtl": cache_ttl,
            "groupLookupSettings": {"checkGroupsWithServiceAccount": True,
                                    "credentialsSecretRef": {"name": "ldap-sa", "namespace": "default"}},
            **extra}
    return [
        {"apiVersion": "enterprise.gateway.vendor.io/v1", "kind": "AuthConfig",
         "metadata": {"name": "ldap", "namespace": "default"}, "spec": {"configs": [{"ldap": ldap}]}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ldap-sa", "namespace": "default"},
         "type": "extauth.vendor.io/accountcredentials",
         "stringData": {"username": SERVICE_DN, "password": SERVICE_PW}},
    ]


def config_yaml(backend_port: int, *, jwt: dict[str, Any] | None = None, rbac: bool = False,
                ldap_address: str | None = None, jwks_port: int | None = None,
                slow_timeout: str | None = None, extra_upstreams: dict[str, int] | None = None,
                ldap_options: dict[str, Any] | None = None,
                extra_routes: list[dict[str, Any]] | None = None) -> str:
    """One VirtualService (``*``) with routes, in this order:

    ``/open`` no auth; ``/slow`` (when ``slow_timeout``) no auth with
    ``options.timeout``; ``/jwt`` the ``jwt`` options; ``/rbac`` jwt + RBAC
    (GET with claim ``role: admin``); ``/ldap`` extauth (AuthConfig ``ldap``);
    ``extra_routes`` (see :func:`route`); ``/`` protected by jwt when given,
    else open.
    """
    docs: list[dict[str, Any]] = [_upstream("backend", backend_port)]
    if jwks_port is not None:
        docs.append(_upstream("jwks", jwks_port))
    for name, port in (extra_upstreams or {}).items():
        docs.append(_upstream(name, port))
    routes = [route("/open")]
    if slow_timeout:
        routes.append(route("/slow", timeout=slow_timeout))
    if jwt is not None:
        routes.append(route("/jwt", jwt=jwt))
        if rbac:
            routes.append(route("/rbac", jwt=jwt, rbac=RBAC_ADMIN_GET))
    if ldap_address is not None:
        routes.append(route("/ldap", extauth={"configRef": {"name": "ldap", "namespace": "default"}}))
        docs.extend(ldap_docs(ldap_address, **(ldap_options or {})))
    routes.extend(extra_routes or [])
    routes.append(route("/", **({"jwt": jwt} if jwt is not None else {})))
    docs.append({"apiVersion": "gateway.vendor.io/v1", "kind": "VirtualService",
                 "metadata": {"name": "vs", "namespace": "default"},
                 "spec": {"virtualHost": {"domains": ["*"], "routes": routes}}})
    return yaml.safe_dump_all(docs, sort_keys=False)


# ---------------------------------------------------------------------------
# Bounded concurrent load
# ---------------------------------------------------------------------------


@attrs.define
class Outcome:
    kind: str
    started: float
    ended: float
    status: int | None  # None: no HTTP answer (connection error)
    body: bytes
    error: str = ""


@attrs.define
class LoadResult:
    outcomes: list[Outcome] = attrs.Factory(list)

    def of(self, kind: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.kind == kind]

    def statuses(self, kind: str | None = None) -> dict[int | None, int]:
        out: dict[int | None, int] = {}
        for o in self.outcomes:
            if kind is None or o.kind == kind:
                out[o.status] = out.get(o.status, 0) + 1
        return out


async def load(gw_url: Callable[[str], str], requests: list[tuple[str, str, dict[str, str] | None]],
               workers: int, stop: Callable[[], bool], max_requests: int = 5000,
               timeout: float = 5.0, result: LoadResult | None = None) -> LoadResult:
    """``workers`` clients, each cycling through ``requests`` (kind, path,
    headers), one request at a time, until ``stop()`` is true or
    ``max_requests`` were sent in all. The outcomes are appended to
    ``result`` as they come (pass one to watch them while the load runs)."""
    result = LoadResult() if result is None else result
    sent = [0]

    async def worker(offset: int) -> None:
        i = offset
        while not stop() and sent[0] < max_requests:
            kind, path, headers = requests[i % len(requests)]
            i += 1
            sent[0] += 1
            started = time.monotonic()
            try:
                r = await http_request("GET", gw_url(path), headers=headers, timeout=timeout)
                result.outcomes.append(Outcome(kind, started, time.monotonic(), r.status, r.body))
            except Exception as exc:  # a connection error is an outcome too
                result.outcomes.append(Outcome(kind, started, time.monotonic(), None, b"",
                                               f"{type(exc).__name__}: {exc}"))

    await defer.gatherResults([defer.ensureDeferred(worker(n)) for n in range(workers)],
                              consumeErrors=True)
    return result


def run_load(gw_url: Callable[[str], str], requests: list[tuple[str, str, dict[str, str] | None]],
             workers: int, stop: Callable[[], bool], **kw: Any) -> defer.Deferred:
    """:func:`load` started now, as a Deferred (await it later)."""
    return defer.ensureDeferred(load(gw_url, requests, workers, stop, **kw))


async def until(predicate: Callable[[], Awaitable[bool]], timeout: float, interval: float = 0.05) -> float:
    """Await ``predicate()`` until true; return the seconds it took (or fail)."""
    start = time.monotonic()
    while True:
        if await predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not true within {timeout}s")
        await sleep(interval)


async def warm(gw_url: Callable[[str], str], requests: list[tuple[str, str, dict[str, str] | None]],
               workers: int, seconds: float = 0.5) -> LoadResult:
    """A short load at the test's concurrency, so connection pools reach the
    size they keep: take resource baselines after this."""
    end = time.monotonic() + seconds
    return await load(gw_url, requests, workers, lambda: time.monotonic() > end)


def summary(outcomes: Iterable[Outcome]) -> str:
    counts: dict[tuple[str, int | None], int] = {}
    for o in outcomes:
        counts[(o.kind, o.status)] = counts.get((o.kind, o.status), 0) + 1
    return ", ".join(f"{k}:{s}x{n}" for (k, s), n in sorted(counts.items(), key=str))
