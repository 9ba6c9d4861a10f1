"""What outlives one configuration: the HTTP client, the providers'
discovery documents and key sets, the Redis pools, the redeemed ``state``
values and the sessions logged out by the provider (front-channel logout,
cookie store). One per gateway, held by the config type object."""

from __future__ import annotations

import time
from typing import Any, Callable

from twistgw_oidc._http import Client
from twistgw_oidc._options import OidcSpec
from twistgw_oidc._provider import Discovery, Registry
from twistgw_oidc._session import RedisPools, UsedStates


class Runtime:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.reactor: Any = None
        self.now = clock
        self._client: Client | None = None
        self.providers = Registry()
        self.redis = RedisPools()
        self.used_states = UsedStates()
        #: (binding, sid) → until when sessions with that sid are refused
        self.revoked: dict[tuple[str, str], float] = {}

    def get_reactor(self) -> Any:
        if self.reactor is None:
            from twisted.internet import reactor

            self.reactor = reactor
        return self.reactor

    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.get_reactor())
        return self._client

    def discovery(self, spec: OidcSpec) -> Discovery:
        return self.providers.get(spec.issuer_url, spec.override, spec.poll_interval, spec.refetch_interval,
                                  spec.timeout, self.client, self.now)

    def revoke(self, binding: str, sid: str, until: float) -> None:
        now = self.now()
        for key, at in list(self.revoked.items()):
            if at <= now:
                del self.revoked[key]
        self.revoked[(binding, sid)] = until

    def is_revoked(self, binding: str, sid: str | None) -> bool:
        if sid is None or not self.revoked:
            return False
        until = self.revoked.get((binding, sid))
        return until is not None and until > self.now()

    def close(self) -> list[Any]:
        out = self.redis.close()
        if self._client is not None:
            out.append(self._client.close())
            self._client = None
        for discovery in self.providers.all():
            if discovery.keys is not None:
                discovery.keys.cancel()
        return out
