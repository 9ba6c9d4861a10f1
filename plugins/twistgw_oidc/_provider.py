"""One identity provider as the gateway knows it: its discovery document
(fetched from ``issuerUrl``, re-read every ``discoveryPollInterval``,
``discoveryOverride`` applied) and its signing keys.

The keys are the JWT plugin's remote key set (:class:`twistgw_jwt.verify.RemoteKeySet`:
cached, refreshed in the background, last good keys kept when a fetch fails,
backoff, rate-limited refetch on an unknown ``kid``), here fetching the
``jwks_uri`` of the discovery document instead of an upstream's address.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twistgw_jwt.verify import FetchError, RemoteKeySet, RemoteSpec
from twistgw_oidc._http import CallFailed, Client
from twistgw_oidc._options import Override, url_problem

BACKOFF_MAX = 60.0
REQUIRED = ("authorization_endpoint", "token_endpoint", "jwks_uri")
URL_MEMBERS = REQUIRED + ("end_session_endpoint", "introspection_endpoint", "userinfo_endpoint",
                          "revocation_endpoint")


class UrlKeySet(RemoteKeySet):
    """The JWT plugin's key set, fetched from an absolute http(s) URL."""

    def __init__(self, url: str, client: Callable[[], Client], clock: Callable[[], float], cache: float,
                 refetch: float, timeout: float) -> None:
        spec = RemoteSpec(addresses=((url, 0),), path=b"", host_header=None, upstream=url, url=url,
                          cache_duration=cache, timeout=timeout, refetch_interval=refetch)
        super().__init__(spec, lambda: client().reactor, clock)
        self._client = client

    async def fetch_document(self, reactor: Any, host: str, port: int) -> bytes:
        try:
            answer = await self._client().call("GET", self.spec.url, self.spec.timeout)
        except CallFailed as exc:
            raise FetchError(str(exc)) from None
        if answer.status != 200:
            raise FetchError(f"HTTP status {answer.status}")
        return answer.body


class Discovery:
    """The provider's metadata, shared by every config naming the same issuer."""

    _log = Logger()

    def __init__(self, issuer: str, override: Override, poll: float, refetch: float, timeout: float,
                 client: Callable[[], Client], clock: Callable[[], float]) -> None:
        self.issuer = issuer
        self.override = override
        self.poll = poll
        self.refetch = refetch
        self.timeout = timeout
        self._client = client
        self._now = clock
        self.doc: dict[str, Any] | None = None
        self.keys: UrlKeySet | None = None
        self.fetched_at = 0.0
        self.failures = 0
        self.next_allowed = 0.0
        self.last_error: str | None = None
        self._inflight: Deferred[None] | None = None

    def doc_now(self) -> dict[str, Any] | None:
        """The document without waiting (a stale one starts a background re-read)."""
        if self.doc is not None and self._now() >= self.fetched_at + self.poll:
            self._start()
        return self.doc

    async def get(self) -> dict[str, Any] | None:
        """The document, waiting for at most one fetch when there is none."""
        if self.doc is not None:
            return self.doc_now()
        d = self._start()
        if d is not None:
            waiter: Deferred[None] = Deferred()

            def wake(result: Any) -> Any:
                if not waiter.called:
                    waiter.callback(None)
                return result

            d.addBoth(wake)
            await waiter
        return self.doc

    def prefetch(self) -> Deferred[None] | None:
        """Fetch the document now unless one is known or being fetched."""
        return None if self.doc is not None else self._start()

    def _start(self) -> Deferred[None] | None:
        if self._inflight is None and self._now() >= self.next_allowed:
            d = Deferred.fromCoroutine(self._fetch())
            self._inflight = d

            def done(result: Any) -> None:
                self._inflight = None
                if hasattr(result, "check"):
                    self._log.failure("Discovery of {issuer} failed unexpectedly", result, issuer=self.issuer)

            d.addBoth(done)
        return self._inflight

    async def _fetch(self) -> None:
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            answer = await self._client().call("GET", url, self.timeout)
            doc = answer.json() if answer.status == 200 else None
            problem = f"HTTP status {answer.status}" if answer.status != 200 else self._problem(doc)
        except CallFailed as exc:
            doc, problem = None, str(exc)
        if problem is not None or doc is None:
            self.failures += 1
            delay = min(BACKOFF_MAX, 2.0 ** (self.failures - 1))
            self.next_allowed = self._now() + delay
            self.last_error = problem
            self._log.warn("OIDC discovery of {issuer} failed: {problem}; {keeping}; next attempt in {delay:.0f}s",
                           issuer=self.issuer, problem=problem, delay=delay,
                           keeping="keeping the last good document" if self.doc else "no document yet")
            return
        doc = self.override.apply(doc)
        if self.keys is None or self.keys.spec.url != doc["jwks_uri"]:
            self.keys = UrlKeySet(doc["jwks_uri"], self._client, self._now, self.poll, self.refetch, self.timeout)
        self.doc, self.fetched_at, self.failures, self.next_allowed = doc, self._now(), 0, 0.0
        self.last_error = None
        self._log.info("OIDC discovery of {issuer}: ok", issuer=self.issuer)

    def _problem(self, doc: Any) -> str | None:
        if doc is None:
            return "the discovery document is not a JSON object"
        doc = self.override.apply(doc)
        if not isinstance(doc.get("issuer"), str) or doc["issuer"].rstrip("/") != self.issuer.rstrip("/"):
            return f"the document's issuer {doc.get('issuer')!r} is not {self.issuer!r} (OIDC Discovery 4.3)"
        for member in URL_MEMBERS:
            if member in REQUIRED and member not in doc:
                return f"the document has no {member}"
            if member in doc and (not isinstance(doc[member], str) or url_problem(doc[member])):
                return f"the document's {member} is not an http(s) URL"
        return None


class Registry:
    """Discovery objects by what identifies them, shared across configs and reloads."""

    def __init__(self) -> None:
        self._all: weakref.WeakValueDictionary[tuple[Any, ...], Discovery] = weakref.WeakValueDictionary()

    def get(self, issuer: str, override: Override, poll: float, refetch: float, timeout: float,
            client: Callable[[], Client], clock: Callable[[], float]) -> Discovery:
        key = (issuer, override, poll, refetch, timeout)
        found = self._all.get(key)
        if found is None:
            found = self._all[key] = Discovery(issuer, override, poll, refetch, timeout, client, clock)
        return found

    def all(self) -> list[Discovery]:
        return list(self._all.values())
