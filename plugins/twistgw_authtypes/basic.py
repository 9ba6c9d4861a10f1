"""``basicAuth``: ``Authorization: Basic`` checked against stored hashes.

Gloo's two shapes (exactly one of them)::

    - basicAuth:                          # the original: apr1 only
        realm: gloo
        apr:
          users:
            user: {salt: "TYiryv0/", hashedPassword: "8BvzLUO9IfGPGGsPnAgSu1"}

    - basicAuth:                          # the extended one (Gloo 1.16)
        encryption: {apr: {}}             # or {sha1: {}}
        userList:
          users:
            user: {salt: "TYiryv0/", hashedPassword: "8BvzLUO9IfGPGGsPnAgSu1"}

plus twistgw's ``keepCredentials`` (default ``false``: the ``Authorization``
header is not forwarded). A verified ``Authorization`` value is remembered
for :data:`CACHE_TTL` seconds in a bounded memo keyed by its keyed BLAKE2b
(never the value, which holds the password), so a warm request costs one
hash instead of apr1's 1,000 MD5 rounds.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from typing import Any, Callable, Mapping

import attrs

from twistgw import AuthAllow, AuthDeny, ConfigScope, ExtAuthConfigType, RequestContext
from twistgw.api.fields import Path, Problems

from twistgw_authtypes import _common as c
from twistgw_authtypes import _passwords

_FIELDS = ("realm", "apr", "encryption", "userList", "keepCredentials")
CACHE_TTL = 300.0
CACHE_MAX = 10_000
MAX_USER = 256
MAX_PASSWORD = 1024
_SALT = os.urandom(32)
#: BLAKE2b keyed with it, fed nothing: copied for each digest (_common.keyed_blake2b)
_KEYED = c.keyed_blake2b(_SALT)


@attrs.frozen
class StoredUser:
    algorithm: str  # "apr" or "sha1"
    salt: str
    hashed: str = attrs.field(repr=False)

    def verify(self, password: bytes) -> bool:
        if self.algorithm == "apr":
            return _passwords.verify_apr(password, _passwords.apr_hash(self.salt, self.hashed))
        return _passwords.verify_sha1(password, self.salt, self.hashed)


class VerifiedMemo:
    """Keyed BLAKE2b of an ``Authorization`` value (under a per-process
    random key: never the value, which holds the password) -> (when the
    entry expires, the verdict), for values verified recently. A hit skips
    the Basic parsing and the hash. Bounded; the oldest entries go first.
    Failures are never remembered."""

    def __init__(self, ttl: float = CACHE_TTL, size: int = CACHE_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.size, self.clock = ttl, size, clock
        self._entries: OrderedDict[bytes, tuple[float, AuthAllow]] = OrderedDict()

    @staticmethod
    def key(value: bytes) -> bytes:
        h = _KEYED.copy()
        h.update(value)
        return h.digest()

    def get(self, key: bytes) -> AuthAllow | None:
        found = self._entries.get(key)
        if found is None:
            return None
        if self.clock() >= found[0]:
            del self._entries[key]
            return None
        return found[1]

    def add(self, key: bytes, verdict: AuthAllow) -> None:
        self._entries[key] = (self.clock() + self.ttl, verdict)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


@attrs.frozen
class BasicChecker:
    """One compiled ``basicAuth`` entry."""

    users: Mapping[str, StoredUser] = attrs.field(repr=False)
    realm: str
    credential_headers: tuple[bytes, ...]
    description: str
    memo: VerifiedMemo = attrs.field(factory=VerifiedMemo, eq=False, repr=False)

    def _unauthorized(self, reason: str) -> AuthDeny:
        challenge = f'Basic realm="{self.realm}"'.encode("latin-1")
        return AuthDeny(401, headers=((b"www-authenticate", challenge),), reason=reason)

    def check(self, ctx: RequestContext) -> AuthAllow | AuthDeny:
        values = ctx.headers.get_canonical(b"Authorization")
        key = None
        if values is not None and len(values) == 1:
            h = _KEYED.copy()  # VerifiedMemo.key, inline
            h.update(values[0])
            key = h.digest()
            known = self.memo.get(key)
            if known is not None:
                return known
        creds = c.read_basic(values)
        if isinstance(creds, str):
            return self._unauthorized(creds)
        user, password = creds
        if not user or not password:
            return self._unauthorized("empty user name or password")
        if len(user) > MAX_USER or len(password) > MAX_PASSWORD:
            return self._unauthorized("user name or password too long")
        stored = self.users.get(user)
        if stored is None:
            _passwords.verify_apr(password, None)  # as long as a wrong password takes
            return self._unauthorized(f"no user {user!r}")
        if not stored.verify(password):
            return self._unauthorized(f"wrong password for {user!r}")
        verdict = AuthAllow(principal=user, reason=f"user {user!r} ({stored.algorithm} hash)")
        if key is not None:
            self.memo.add(key, verdict)
        return verdict

    def dry_run(self, ctx: RequestContext) -> AuthAllow | AuthDeny:
        return self.check(ctx)  # decided from the request and the snapshot alone


def _users(raw: Any, path: Path, algorithm: str, problems: Problems) -> dict[str, StoredUser]:
    users: dict[str, StoredUser] = {}
    for name, entry in problems.mapping(raw, path, optional=True).items():
        p = path + (name,)
        with problems.part():
            if not name or ":" in name:
                raise problems.fail(p, "a user name must be a non-empty string without ':'")
            e = problems.mapping(entry, p, ("salt", "hashedPassword"), optional=True)
            if "hashedPassword" not in e:
                raise problems.fail(p, "is required: {salt: SALT, hashedPassword: HASH}")
            salt = problems.string(e.get("salt", ""), p + ("salt",), nonempty=algorithm == "apr")
            hashed = problems.string(e["hashedPassword"], p + ("hashedPassword",))
            if algorithm == "apr" and not _passwords.valid_apr(salt, hashed):
                raise problems.fail(p, "is not an apr1 hash: salt is up to 8 characters of [./0-9A-Za-z] and"
                                    " hashedPassword 22 (as in htpasswd -m's $apr1$SALT$HASH)")
            if algorithm == "sha1" and not _passwords.valid_sha1(hashed):
                raise problems.fail(p + ("hashedPassword",), "must be 40 hexadecimal digits (SHA-1)")
            users[name] = StoredUser(algorithm, salt, hashed)
    if not users and not problems:
        problems.add(path, "lists no users")
    return users


def _shape(cfg: Mapping[str, Any], problems: Problems) -> tuple[str, Any, Path]:
    """(algorithm, users mapping, its path) of whichever shape is written."""
    if "apr" in cfg:
        if "encryption" in cfg or "userList" in cfg:
            problems.add(("apr",), "set either apr, or encryption with userList, not both (Gloo's rule)")
        apr = problems.mapping(cfg["apr"], ("apr",), ("users",), optional=True)
        return "apr", apr.get("users"), ("apr", "users")
    if "encryption" not in cfg or "userList" not in cfg:
        problems.add((), "set apr, or encryption with userList")
        return "apr", None, ()
    enc = problems.mapping(cfg["encryption"], ("encryption",), ("apr", "sha1"), optional=True)
    if len(enc) != 1:
        problems.add(("encryption",), "set exactly one of apr: {} or sha1: {}")
    algorithm = next(iter(enc), "apr")
    problems.mapping(enc.get(algorithm), ("encryption", algorithm), (), optional=True)
    users = problems.mapping(cfg["userList"], ("userList",), ("users",), optional=True)
    return algorithm, users.get("users"), ("userList", "users")


class BasicAuth(ExtAuthConfigType):
    name = "basicAuth"
    description = "Basic credentials against apr1 (htpasswd) or salted SHA-1 hashes"

    def compile(self, raw: Any, scope: ConfigScope) -> BasicChecker:
        problems = Problems()
        cfg = problems.fields(raw, (), _FIELDS)
        if not cfg.ok:
            problems.raise_if_any()
        # Gloo's default: no realm, answered as `Basic realm=""` (its basic auth guide shows it)
        realm = cfg.string("realm", "", nonempty=False)
        if '"' in realm or "\\" in realm or not realm.isprintable():
            problems.add(("realm",), "may not contain quotes, backslashes or control characters")
        keep = cfg.boolean("keepCredentials", False)
        users: dict[str, StoredUser] = {}
        with problems.part():
            algorithm, raw_users, path = _shape(cfg, problems)
            if path:
                users = _users(raw_users, path, algorithm, problems)
        problems.raise_if_any()
        return BasicChecker(users, realm, () if keep else (b"authorization",),
                            f"Basic credentials ({len(users)} users, {algorithm})")
