"""Remote key sets: fetched with the SDK's ``HttpClient`` from an upstream, cached, refreshed.

The rules, in short:

* Keys are cached for ``cacheDuration``; after that the last good keys keep
  serving while one background fetch refreshes them (requests never wait for
  a refresh when keys are already known).
* A token whose ``kid``/``alg`` matches no key triggers an immediate refetch,
  at most once per ``refetchInterval`` per key set; concurrent requests share
  one fetch. A storm of bogus ``kid`` values costs one fetch per interval.
* A failed fetch (refused, reset, non-200, garbage, no usable key, timeout)
  keeps the last good keys, is counted and logged, and later attempts back
  off exponentially (1 s doubling to 60 s).
* With no keys at all, a request waits for at most one fetch (bounded by the
  fetch timeout); during backoff it fails at once with
  ``Jwks remote fetch is failed``.
* The address is the upstream's; the URL gives the path and the Host
  header, and its scheme: an ``https`` URL is fetched over TLS, the server's
  certificate checked against the URL's host with the system's CAs
  (:func:`twistgw.tls.client_tls`; a certificate without that name as a
  subjectAltName is refused and the fetch fails). No URL is ever taken from a
  token.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any, Callable

import attrs
from prometheus_client import Counter
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger

from twistgw.sdk import HttpBodyTooLarge, HttpClient, HttpError
from twistgw.sdk import describe_tls_failure

from twistgw_jwt._keys import KeyProblem, VerifyKey, parse_remote_body

#: Largest key-set document accepted.
MAX_BODY_BYTES = 1024 * 1024
BACKOFF_BASE = 1.0
BACKOFF_MAX = 60.0

FETCHES = Counter(
    "twistgw_jwt_jwks_fetches",
    "Remote key-set fetches by outcome (ok, error).",
    ["outcome"],
)


class FetchError(Exception):
    pass


@attrs.frozen
class RemoteSpec:
    """What identifies a remote key set; equal specs share one cache across
    routes and configuration reloads."""

    addresses: tuple[tuple[str, int], ...]
    path: bytes
    host_header: bytes | None
    upstream: str
    url: str
    cache_duration: float
    timeout: float
    refetch_interval: float
    #: set for an ``https`` URL: fetch over TLS, verifying this name
    tls_server_name: str | None = None


async def wait_for_fetch(d: Deferred[bool]) -> None:
    """Wait until a (shared) fetch ends. Each waiter gets its own view of the
    fetch; the fetch itself never fails (errors are recorded), so this only
    returns."""
    waiter: Deferred[None] = Deferred()

    def release(result: object) -> object:
        if not waiter.called:
            waiter.callback(None)
        return result

    d.addBoth(release)
    await waiter


class RemoteKeySet:
    """The cached keys of one remote key-set document."""

    _log = Logger()

    def __init__(self, spec: RemoteSpec, reactor_getter: Callable[[], Any],
                 clock: Callable[[], float]) -> None:
        self.spec = spec
        self._reactor_getter = reactor_getter
        self._now = clock
        self.keys: tuple[VerifyKey, ...] | None = None
        self.fetched_at: float | None = None
        self.last_attempt: float | None = None
        self.failures = 0
        self.next_allowed = 0.0
        self.last_error: str | None = None
        self.fetch_count = 0
        #: bumped whenever a fetched document differs from the previous one
        self.generation = 0
        self._digest: bytes | None = None
        self._inflight: Deferred[bool] | None = None
        self._next_address = 0
        self._http: HttpClient | None = None

    # -- what requests call --------------------------------------------------

    def keys_now(self) -> tuple[VerifyKey, ...] | None:
        """The cached keys without waiting (starting a background refresh when
        they are older than ``cacheDuration``), or None when there are none."""
        if self.keys is None:
            return None
        assert self.fetched_at is not None
        now = self._now()
        if now >= self.fetched_at + self.spec.cache_duration and self._may_fetch(now):
            self._start_fetch("cache expired")  # the stale keys serve meanwhile
        return self.keys

    async def get_keys(self) -> tuple[VerifyKey, ...] | None:
        """The keys to verify with, waiting for at most one fetch when there
        are none yet; None when none could be fetched."""
        if self.keys is not None:
            return self.keys_now()
        if self._inflight is not None:
            await wait_for_fetch(self._inflight)
        elif self._may_fetch(self._now()):
            await wait_for_fetch(self._start_fetch("no keys yet"))
        return self.keys

    def may_refetch_unknown(self) -> bool:
        """Whether :meth:`refetch_unknown` would fetch (or join a fetch)."""
        if self._inflight is not None:
            return True
        now = self._now()
        return (self.last_attempt is None or now - self.last_attempt >= self.spec.refetch_interval) \
            and self._may_fetch(now)

    async def refetch_unknown(self) -> tuple[VerifyKey, ...] | None:
        """A token names a key we do not have: refetch now unless one was
        attempted less than ``refetchInterval`` ago (then the current keys)."""
        if self._inflight is not None:
            await wait_for_fetch(self._inflight)
        elif self.may_refetch_unknown():
            await wait_for_fetch(self._start_fetch("unknown kid or alg"))
        return self.keys

    def prefetch(self) -> Deferred[bool] | None:
        """Start a fetch now if there are no keys and none is running."""
        if self.keys is None and self._may_fetch(self._now()):
            return self._start_fetch("prefetch")
        return self._inflight

    def cancel(self) -> None:
        if self._inflight is not None:
            self._inflight.cancel()

    # -- fetching -------------------------------------------------------------

    def _may_fetch(self, now: float) -> bool:
        return self._inflight is None and now >= self.next_allowed

    def _start_fetch(self, why: str) -> Deferred[bool]:
        self.last_attempt = self._now()
        reactor = self._reactor_getter()
        d = Deferred.fromCoroutine(self._fetch(why, reactor))
        self._inflight = d

        def done(result: Any) -> Any:
            if self._inflight is d:
                self._inflight = None
            return result

        d.addBoth(done)

        def unexpected(failure: Any) -> bool:
            if not failure.check(CancelledError):
                self._log.failure("Fetching key set {url} failed unexpectedly",
                                  failure=failure, url=self.spec.url)
            return False

        d.addErrback(unexpected)
        return d

    async def _fetch(self, why: str, reactor: Any) -> bool:
        self.fetch_count += 1
        addresses = self.spec.addresses
        errors: list[str] = []
        if not addresses:
            errors.append(f"upstream {self.spec.upstream} has no endpoints")
        # Try each address once, starting after the last one that failed.
        for i in range(min(len(addresses), 3)):
            host, port = addresses[(self._next_address + i) % len(addresses)]
            try:
                body = await self._get_with_timeout(reactor, host, port)
                result = parse_remote_body(body)
                digest = hashlib.sha256(body).digest()
            except KeyProblem as exc:
                errors.append(f"{host}:{port}: {exc}")
                self._next_address = (self._next_address + i + 1) % len(addresses)
                continue
            except Exception as exc:
                errors.append(f"{host}:{port}: {_describe(exc, self.spec.timeout)}")
                self._next_address = (self._next_address + i + 1) % len(addresses)
                continue
            old = {k.kid for k in self.keys} if self.keys is not None else None
            self.keys = result.keys
            if digest != self._digest:
                self._digest = digest
                self.generation += 1
            self.fetched_at = self._now()
            self.failures = 0
            self.next_allowed = 0.0
            self.last_error = None
            FETCHES.labels("ok").inc()
            new = {k.kid for k in result.keys}
            self._log.info(
                "Fetched key set {url} from {host}:{port} ({why}): {count} keys, kids {kids}"
                "{changed}", url=self.spec.url, host=host, port=port, why=why,
                count=len(result.keys), kids=sorted(str(k) for k in new),
                changed="" if old is None or old == new else " (changed)")
            for skipped in result.skipped:
                self._log.warn("Key set {url}: {skipped}", url=self.spec.url, skipped=skipped)
            return True
        self.failures += 1
        delay = min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (self.failures - 1))
        self.next_allowed = self._now() + delay
        self.last_error = "; ".join(errors)
        FETCHES.labels("error").inc()
        self._log.warn(
            "Fetching key set {url} from upstream {upstream} failed ({why}): {error};"
            " {keeping}; next attempt in {delay:.0f}s at the earliest",
            url=self.spec.url, upstream=self.spec.upstream, why=why, error=self.last_error,
            keeping="keeping the last good keys" if self.keys is not None else "no keys yet",
            delay=delay)
        return False

    async def _get_with_timeout(self, reactor: Any, host: str, port: int) -> bytes:
        d = Deferred.fromCoroutine(self.fetch_document(reactor, host, port))
        d.addTimeout(self.spec.timeout, reactor)
        return await d

    async def fetch_document(self, reactor: Any, host: str, port: int) -> bytes:
        """The key-set document's bytes, from one address of the spec (with
        the SDK's :class:`HttpClient`; over TLS, verifying
        ``spec.tls_server_name``, for an https URL).

        The one method a subclass may override to fetch from elsewhere (the
        OIDC plugin fetches a provider's ``jwks_uri``). It raises
        :class:`FetchError` with a reason for a failure it recognises;
        the caller bounds it by ``spec.timeout``, then parses, caches,
        counts, logs and backs off as described above.
        """
        if self._http is None or self._http.reactor is not reactor:
            # loads the system's CAs (https): once per key set; a connection per fetch
            self._http = HttpClient(reactor, persistent=False, timeout=self.spec.timeout,
                                      max_body=MAX_BODY_BYTES, server_name=self.spec.tls_server_name)
        scheme = "http" if self.spec.tls_server_name is None else "https"
        netloc = f"[{host}]" if ":" in host else host
        url = f"{scheme}://{netloc}:{port}" + self.spec.path.decode("latin-1")
        headers = {b"Accept": b"application/json"}
        if self.spec.host_header is not None:
            headers[b"Host"] = self.spec.host_header
        try:
            answer = await self._http.request("GET", url, headers=headers)
        except HttpBodyTooLarge as exc:
            raise FetchError(f"key set larger than {exc.limit} bytes") from None
        except HttpError as exc:
            raise FetchError(_cause(str(exc))) from None
        if answer.status != 200:
            raise FetchError(f"HTTP status {answer.status}")
        return answer.body


def _cause(message: str) -> str:
    """An :class:`HttpError`'s message without its ``METHOD url:`` prefix
    (the log line names the key set and the address already)."""
    return message.partition(": ")[2] or message


def _describe(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, CancelledError) or type(exc).__name__ == "TimeoutError":
        return f"no answer within {timeout:g}s"
    if isinstance(exc, FetchError):
        return str(exc)
    # Agent wraps what ended the connection (ResponseNeverReceived and kin)
    for reason in getattr(exc, "reasons", None) or ():
        tls = describe_tls_failure(reason.value)
        if tls is not None:
            return tls
    tls = describe_tls_failure(exc)
    if tls is not None:
        return tls
    name = type(exc).__name__
    return f"{name}: {exc}" if str(exc) else name


class Registry:
    """Key sets by spec, shared while any compiled configuration uses them,
    so a configuration reload keeps the keys already fetched."""

    def __init__(self) -> None:
        self._sets: weakref.WeakValueDictionary[RemoteSpec, RemoteKeySet] = weakref.WeakValueDictionary()

    def get(self, spec: RemoteSpec, reactor_getter: Callable[[], Any],
            clock: Callable[[], float]) -> RemoteKeySet:
        found = self._sets.get(spec)
        if found is None:
            found = RemoteKeySet(spec, reactor_getter, clock)
            self._sets[spec] = found
        return found

    def all(self) -> list[RemoteKeySet]:
        return list(self._sets.values())
