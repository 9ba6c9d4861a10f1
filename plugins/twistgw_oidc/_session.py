"""Login sessions and where they live.

A :class:`Session` holds what the login produced: the ID token (and its
verified claims), the access and refresh tokens, when they must be
refreshed, and which config it belongs to (``binding``: a session made by
one provider's config is never taken by another's).

* :class:`CookieStore` (``session.cookie``): the session, sealed with AES-GCM
  under the ``cipherConfig`` key, is the cookie (split over up to four
  cookies when large; refused beyond that). Nothing on the server, so every
  worker and replica with the same key serves it.
* :class:`RedisStore` (``session.redis``): the cookie is a random 256-bit id;
  the session is a Redis key ``<keyPrefix>session:<sha256(id)>`` that expires
  with the cookie. Logins in progress, front-channel logout's sid index and
  used ``state`` values live there too. The client is :mod:`twistgw.redis`;
  the session reads of one reactor turn go out as pipelined GETs in one write.
  With ``clustered: true`` it is :mod:`twistgw.rediscluster`: every command
  names one key, routed to the primary of its hash slot.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections import OrderedDict
from typing import Any, Callable, Mapping

import attrs
from twisted.internet.defer import Deferred

from twistgw.sdk import RedisCluster, RedisPool, b64decode_strict
from twistgw.sdk import connect_redis as connect

from twistgw_oidc._cookies import Sealer
from twistgw_oidc._options import RedisSpec, SessionSpec

LOGIN_TTL = 600  # seconds a login may take at the provider
REDIS_TIMEOUT = 2.0


class StoreDown(Exception):
    """The session store could not be reached (Redis down or too slow)."""


def new_id() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode("ascii")


def _payload(id_token: str) -> dict[str, Any]:
    """The payload of an ID token this gateway verified before storing it."""
    return dict(json.loads(b64decode_strict(id_token.split(".")[1], urlsafe=True, padded=False)))


@attrs.define
class Session:
    binding: str
    id_token: str
    access_token: str | None
    refresh_token: str | None
    expires_at: float
    created: float
    claims: dict[str, Any] = attrs.field(factory=dict, eq=False)

    @property
    def sid(self) -> str | None:
        sid = self.claims.get("sid")
        return sid if isinstance(sid, str) else None

    @property
    def token_id(self) -> str:
        """Names this login's ID token (to refuse a copied cookie after logout)."""
        return "t:" + hashlib.sha256(self.id_token.encode("ascii", "replace")).hexdigest()[:32]

    def to_bytes(self) -> bytes:
        return json.dumps({"b": self.binding, "i": self.id_token, "a": self.access_token, "r": self.refresh_token,
                           "e": self.expires_at, "c": self.created}, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> "Session | None":
        try:
            d = json.loads(data)
            s = cls(d["b"], d["i"], d["a"], d["r"], float(d["e"]), float(d["c"]))
            s.claims = _payload(s.id_token)
        except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError):
            return None
        return s


def from_tokens(binding: str, answer: Mapping[str, Any], claims: dict[str, Any], now: float,
                previous: Session | None = None) -> Session:
    """A session from a token endpoint's answer (on refresh, what the
    provider did not send again is kept from ``previous``)."""
    expires = float(claims["exp"])
    lifetime = answer.get("expires_in")
    if isinstance(lifetime, (int, float)) and not isinstance(lifetime, bool) and lifetime > 0:
        expires = min(expires, now + float(lifetime))
    refresh = answer.get("refresh_token")
    if not isinstance(refresh, str):
        refresh = previous.refresh_token if previous is not None else None
    access = answer.get("access_token")
    return Session(binding, answer["id_token"], access if isinstance(access, str) else None, refresh, expires,
                   previous.created if previous is not None else now, claims)


# ---------------------------------------------------------------------------
# Cookie store
# ---------------------------------------------------------------------------


class CookieStore:
    """Sessions sealed into the cookie. Opening a cookie costs one AES-GCM
    decryption; the last 4096 opened are remembered by value (a cookie
    value is immutable, so it can only ever open to the same session)."""

    kind = "cookie"

    def __init__(self, spec: SessionSpec) -> None:
        assert spec.key is not None
        self.spec = spec
        self.sealer = Sealer(spec.key)
        self._opened: OrderedDict[str, Session] = OrderedDict()

    def open(self, value: str) -> Session | None:
        found = self._opened.get(value)
        if found is not None:
            return found
        data = self.sealer.open(self.spec.cookie_name, value)
        session = Session.from_bytes(data) if data is not None else None
        if session is not None:
            self._opened[value] = session
            if len(self._opened) > 4096:
                self._opened.popitem(last=False)
        return session

    def seal(self, session: Session) -> str:
        return self.sealer.seal(self.spec.cookie_name, session.to_bytes())

    def seal_login(self, name: str, login: Mapping[str, Any]) -> str:
        return self.sealer.seal(name, json.dumps(login).encode("utf-8"))

    def open_login(self, name: str, value: str) -> dict[str, Any] | None:
        data = self.sealer.open(name, value)
        try:
            login = json.loads(data) if data is not None else None
        except ValueError:
            return None
        return login if isinstance(login, dict) else None


# ---------------------------------------------------------------------------
# Redis store
# ---------------------------------------------------------------------------


def _key(prefix: str, kind: str, ident: str) -> str:
    return f"{prefix}{kind}:{hashlib.sha256(ident.encode('utf-8')).hexdigest()}"


class RedisPools:
    """One :class:`twistgw.redis.RedisPool` per (host, port, db, poolSize,
    TLS), shared by every config naming it (with ``clustered``, one
    :class:`twistgw.rediscluster.RedisCluster`: ``poolSize`` connections per
    primary); closed at shutdown."""

    def __init__(self) -> None:
        self._pools: dict[RedisSpec, RedisPool | RedisCluster] = {}

    def get(self, spec: RedisSpec, reactor: Any) -> RedisPool | RedisCluster:
        pool = self._pools.get(spec)
        if pool is None:
            pool = self._pools[spec] = connect(reactor, spec.config(), REDIS_TIMEOUT, spec.pool_size)
        return pool

    def close(self) -> list[Deferred[Any]]:
        out = [pool.close() for pool in self._pools.values()]
        self._pools.clear()
        return out


class _Loaded:
    """Receives one session GET's reply (no coroutine, no closure per read)."""

    __slots__ = ("store", "d")

    def __init__(self, store: "RedisStore", d: Deferred[Session | None]) -> None:
        self.store = store
        self.d = d

    def __call__(self, value: Any) -> None:
        if isinstance(value, Exception):
            self.d.errback(self.store.down(value))
        else:
            self.d.callback(self.store.parse(value) if value is not None else None)


class RedisStore:
    """Sessions in Redis. Every command goes through the pool's client of
    this reactor turn, so the session reads of one turn (one per request)
    leave in one write and come back in one round trip: pipelined GETs."""

    kind = "redis"

    def __init__(self, spec: SessionSpec, pools: RedisPools, reactor: Callable[[], Any]) -> None:
        assert spec.redis is not None
        self.spec = spec
        self.redis: RedisSpec = spec.redis
        self.pools = pools
        self.reactor = reactor
        self.prefix = spec.key_prefix
        self._parsed: OrderedDict[bytes, Session] = OrderedDict()
        self._pool: RedisPool | RedisCluster | None = None  # the pools' (shared), found on first use

    @property
    def ttl(self) -> int:
        return self.spec.cookie.max_age or 86400

    def down(self, exc: BaseException) -> StoreDown:
        """Redis down, too slow, or refusing a command: one StoreDown naming it."""
        redis = self.redis
        hint = ""
        if not redis.clustered and str(exc).startswith(("MOVED ", "ASK ", "CLUSTERDOWN")):
            hint = " (a Redis Cluster node: set session.redis.options.clustered: true)"
        return StoreDown(f"Redis {redis.host}:{redis.port}: {type(exc).__name__}: {exc}{hint}")

    async def _do(self, *command: Any) -> Any:
        try:
            return await self.pools.get(self.redis, self.reactor()).execute(*command)
        except Exception as exc:  # refused, reset, timeout, an error reply
            raise self.down(exc) from None

    def load(self, session_id: str) -> Deferred[Session | None]:
        """The session Redis holds now (one GET, pipelined with the other
        reads of this reactor turn); fails with StoreDown."""
        d: Deferred[Session | None] = Deferred()
        pool = self._pool
        if pool is None or pool.closed:
            pool = self._pool = self.pools.get(self.redis, self.reactor())
        pool.send(("GET", _key(self.prefix, "session", session_id)), _Loaded(self, d))
        return d

    def parse(self, raw: bytes) -> Session | None:
        """What Redis returned, parsed once: the last 4096 values are remembered by their bytes."""
        parsed = self._parsed.get(raw)
        if parsed is None:
            parsed = Session.from_bytes(raw)
            if parsed is not None:
                self._parsed[raw] = parsed
                if len(self._parsed) > 4096:
                    self._parsed.popitem(last=False)
        return parsed

    async def save(self, session_id: str, session: Session) -> None:
        key = _key(self.prefix, "session", session_id)
        await self._do("SET", key, session.to_bytes(), "EX", self.ttl)
        if session.sid:
            sid_key = _key(self.prefix, "sid", session.sid)
            await self._do("SADD", sid_key, key)
            await self._do("EXPIRE", sid_key, self.ttl)

    async def delete(self, session_id: str) -> None:
        await self._do("DEL", _key(self.prefix, "session", session_id))

    async def delete_sid(self, sid: str) -> list[Session]:
        """Delete every session of ``sid``; the sessions deleted (their tokens are then revoked)."""
        sid_key = _key(self.prefix, "sid", sid)
        keys = await self._do("SMEMBERS", sid_key)
        sessions = []
        for key in keys or ():
            raw = await self._do("GETDEL", key)
            session = self.parse(raw) if raw is not None else None
            if session is not None:
                sessions.append(session)
        await self._do("DEL", sid_key)
        return sessions

    async def put_login(self, login_id: str, login: Mapping[str, Any]) -> None:
        await self._do("SET", _key(self.prefix, "login", login_id), json.dumps(login), "EX", LOGIN_TTL)

    async def take_login(self, login_id: str) -> dict[str, Any] | None:
        """The login in progress, removed as it is read: a state is used once."""
        data = await self._do("GETDEL", _key(self.prefix, "login", login_id))
        try:
            login = json.loads(data) if data is not None else None
        except ValueError:
            return None
        return login if isinstance(login, dict) else None


class UsedStates:
    """``state`` values already redeemed (cookie store): one process's memory,
    each kept until its login would have expired anyway."""

    def __init__(self) -> None:
        self._used: OrderedDict[str, float] = OrderedDict()

    def first_use(self, state: str, expires: float, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        while self._used:
            oldest, at = next(iter(self._used.items()))
            if at > now:
                break
            del self._used[oldest]
        if state in self._used:
            return False
        self._used[state] = expires
        if len(self._used) > 100_000:
            self._used.popitem(last=False)
        return True
