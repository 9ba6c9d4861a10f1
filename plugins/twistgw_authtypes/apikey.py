"""``apiKeyAuth``: API keys held in Secrets of type ``extauth.solo.io/apikey``.

::

    spec:
      configs:
      - apiKeyAuth:
          headerName: api-key                    # Gloo's default
          labelSelector: {team: infrastructure}  # and/or
          apiKeySecretRefs: [{name: infra-apikey, namespace: gloo-system}]
          headersFromMetadataEntry:
            x-user-email: {name: user-email, required: true}

Each selected Secret holds one key in ``data.api-key``; its other data
entries are the key's *metadata*. The key's owner (the principal) is the
Secret's ``user`` entry when it has one, else the Secret's name (Gloo's user
identity). Keys are looked up by a keyed BLAKE2b digest under a per-process
random key, and the digest found is compared with ``hmac.compare_digest``:
neither the time a lookup takes nor any log line tells anything about a key.

Why the lookup leaks nothing (kept by every change to :meth:`ApiKeyChecker.check`):

* the presented value is never compared with a key, nor used as a dict
  key: the only thing computed from it is its keyed digest, whose time
  depends on its length alone (BLAKE2b has no data-dependent branches);
* the table is a dict from digests to owners. Finding a digest hashes the
  digest (SipHash) and compares it with at most the entries of its slot
  chain, byte by byte: that time depends on the digest's bytes, which an
  attacker cannot compute or steer without the per-process key
  (``os.urandom(32)``, never logged, never leaves memory); so it is no
  oracle on how close a guess is to a key;
* the digest found is compared once more with ``hmac.compare_digest``
  (constant time), so a dict implementation that compared differently
  could not turn a near miss into a match;
* every refusal is a prebuilt answer whose reason names no key (the
  Secret, at most), so neither the answer nor its log line depends on the
  value presented.
"""

from __future__ import annotations

import hmac
import os
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import attrs

from twistgw import AuthAllow, AuthDeny, ConfigScope, ExtAuthConfigType, RequestContext, SecretInfo
from twistgw.api.headers import canonical_name
from twistgw.api.fields import Path, Problems

from twistgw_authtypes import _common as c

#: The Secret type Gloo's API-key Secrets have.
APIKEY_TYPE = "extauth.solo.io/apikey"
#: The data entry holding the key.
KEY_ENTRY = "api-key"
#: The data entry naming the key's owner (else the Secret's name).
USER_ENTRY = "user"
DEFAULT_HEADER = "api-key"

_FIELDS = ("headerName", "labelSelector", "apiKeySecretRefs", "headersFromMetadataEntry",
           "k8sSecretApikeyStorage", "skipMetadataValidation")
#: Gloo's fields twistgw refuses, and why
_REFUSED = {
    "headersFromMetadata": "it is Gloo's deprecated form; write headersFromMetadataEntry",
    "aerospikeApikeyStorage": "keys live in Secrets (labelSelector, apiKeySecretRefs)",
    "hmac": "keys are compared as written in the Secret",
    "digest": "keys are compared as written in the Secret",
    "match": "it needs digest, which keys compared as written have no use for",
}

#: Per-process secret key of the digests; never leaves memory, never logged.
_SALT = os.urandom(32)
#: BLAKE2b keyed with it, fed nothing: copied for each digest (_common.keyed_blake2b)
_KEYED = c.keyed_blake2b(_SALT)


def key_digest(key: bytes) -> bytes:
    """``blake2b(key, key=_SALT, digest_size=32)``: what the table holds and a request's key is looked up by."""
    h = _KEYED.copy()
    h.update(key)
    return h.digest()


@attrs.frozen
class KeyOwner:
    """Who a key belongs to, and what its metadata puts on the request."""

    principal: str
    secret: str  # namespace/name, for logs
    digest: bytes = attrs.field(repr=False)
    headers: tuple[tuple[bytes, bytes], ...] = ()
    #: required metadata entries this key's Secret lacks: requests with it are refused
    missing: tuple[str, ...] = ()
    #: the admission for this key, made once (immutable; a request costs no allocation)
    allow: AuthAllow = AuthAllow()
    #: what a request with this key gets: :attr:`allow`, or the refusal when
    #: its Secret lacks required metadata (made once too)
    answer: AuthAllow | AuthDeny = AuthAllow()

    @classmethod
    def make(cls, principal: str, secret: str, digest: bytes, headers: tuple[tuple[bytes, bytes], ...],
             missing: tuple[str, ...]) -> "KeyOwner":
        state = MappingProxyType({h.decode(): v.decode("latin-1") for h, v in headers}) if headers else None
        allow = AuthAllow(principal=principal, headers=headers, reason=f"API key of Secret {secret}", state=state)
        answer: AuthAllow | AuthDeny = allow
        if missing:
            answer = AuthDeny(401, reason=f"the key of Secret {secret} lacks required metadata {', '.join(missing)}")
        return cls(principal, secret, digest, headers, missing, allow, answer)


@attrs.frozen(eq=False)
class KeyTable:
    """Keyed digest of each key -> its owner."""

    owners: Mapping[bytes, KeyOwner]

    def lookup(self, presented: bytes) -> KeyOwner | None:
        digest = key_digest(presented)
        owner = self.owners.get(digest)
        if owner is None or not hmac.compare_digest(owner.digest, digest):
            return None
        return owner

    def __len__(self) -> int:
        return len(self.owners)


@attrs.frozen
class MetadataHeader:
    header: bytes
    entry: str
    required: bool


def build_table(secrets: Iterable[SecretInfo], metadata: Sequence[MetadataHeader],
                problems: Problems, path: Path) -> KeyTable:
    """The key table of ``secrets``: a Secret without a key, two Secrets with
    the same key, or metadata that cannot be a header value are problems
    (reported without the key)."""
    owners: dict[bytes, KeyOwner] = {}
    for secret in secrets:
        where = f"{secret.namespace}/{secret.name}"
        key = secret.data.get(KEY_ENTRY)
        if not key:
            problems.add(path, f"Secret {where} has no {KEY_ENTRY!r} entry (the API key)")
            continue
        digest = key_digest(key)
        if digest in owners:
            problems.add(path, f"Secrets {owners[digest].secret} and {where} hold the same API key")
            continue
        headers, missing = [], []
        for m in metadata:
            value = secret.data.get(m.entry)
            if value is None:
                if m.required:
                    missing.append(m.entry)
                continue
            if not c.safe_header_bytes(value):
                problems.add(path, f"Secret {where}: entry {m.entry!r} cannot be a header value (CR, LF or NUL)")
                continue
            headers.append((m.header, value))
        user = secret.data.get(USER_ENTRY)
        principal = user.decode("utf-8", "replace") if user else secret.name
        owners[digest] = KeyOwner.make(principal, where, digest, tuple(headers), tuple(missing))
    return KeyTable(owners)


@attrs.frozen
class ApiKeyChecker:
    """One compiled ``apiKeyAuth`` entry."""

    header: bytes
    table: KeyTable
    owned_request_headers: tuple[bytes, ...]
    credential_headers: tuple[bytes, ...]
    description: str
    #: ``header`` in the headers' canonical form, for the per-request lookup
    canonical: bytes = attrs.field(eq=False, repr=False,
                                   default=attrs.Factory(lambda self: canonical_name(self.header), takes_self=True))
    #: the table's ``dict.get``, looked up once
    _find: Any = attrs.field(eq=False, repr=False, init=False,
                             default=attrs.Factory(lambda self: self.table.owners.get, takes_self=True))
    #: the refusals that name no Secret, made once
    _no_header: AuthDeny = attrs.field(eq=False, repr=False, init=False, default=attrs.Factory(
        lambda self: AuthDeny(401, reason=f"no {self.header.decode()} header"), takes_self=True))
    _no_match: AuthDeny = attrs.field(eq=False, repr=False, init=False,
                                      default=AuthDeny(401, reason="the API key matches no key"))

    def check(self, ctx: RequestContext) -> AuthAllow | AuthDeny:
        values = ctx.headers.get_canonical(self.canonical)
        if values is None:
            return self._no_header
        if len(values) != 1:  # the header twice, in any case spelling: never "the first one"
            return AuthDeny(401, reason=f"{len(values)} {self.header.decode()} headers")
        presented = values[0]
        if presented:  # the keyed digest (key_digest, inline), found, and compared in constant time
            h = _KEYED.copy()
            h.update(presented)
            digest = h.digest()
            owner = self._find(digest)
            if owner is not None and hmac.compare_digest(owner.digest, digest):
                return owner.answer  # the admission, or the refusal for missing metadata
        return self._no_match

    def dry_run(self, ctx: RequestContext) -> AuthAllow | AuthDeny:
        return self.check(ctx)  # decided from the request and the snapshot alone


def _metadata(raw: Any, path: Path, problems: Problems) -> list[MetadataHeader]:
    out = []
    for header, entry in problems.mapping(raw, path, optional=True).items():
        p = path + (header,)
        with problems.part():
            name = c.header_name(problems, header, p, settable=True)
            e = problems.mapping(entry, p, ("name", "required"), optional=True)
            if "name" not in e:
                raise problems.fail(p, "is required: {name: ENTRY, required: BOOL}")
            out.append(MetadataHeader(name, problems.string(e["name"], p + ("name",)),
                                      problems.boolean(e.get("required", False), p + ("required",))))
    return out


def _select(scope: ConfigScope, selector: Mapping[str, str], refs: Sequence[tuple[str, str]],
            path: Path, problems: Problems) -> list[SecretInfo]:
    found: dict[tuple[str, str], SecretInfo] = {}
    if selector:
        for s in scope.resources.secrets():
            if s.type == APIKEY_TYPE and all(s.labels.get(k) == v for k, v in selector.items()):
                found[(s.namespace, s.name)] = s
    for i, (ns, name) in enumerate(refs):
        p = path + ("apiKeySecretRefs", i)
        try:
            s = scope.resources.secret(name, ns)
        except KeyError as exc:
            problems.add(p, f"dangling reference: {exc.args[0]}")
            continue
        if s.type != APIKEY_TYPE:
            problems.add(p, f"Secret {ns}/{name} has type {s.type!r}; API key Secrets have type {APIKEY_TYPE!r}")
            continue
        found[(ns, name)] = s
    return [found[k] for k in sorted(found)]


class ApiKeyAuth(ExtAuthConfigType):
    name = "apiKeyAuth"
    description = "API keys in a request header, held in Secrets of type extauth.solo.io/apikey"

    def compile(self, raw: Any, scope: ConfigScope) -> ApiKeyChecker:
        problems = Problems()
        cfg = problems.fields(raw, (), _FIELDS, refused=_REFUSED)
        if cfg.get("skipMetadataValidation"):
            problems.add(("skipMetadataValidation",), "is not supported by twistgw: metadata is always checked"
                                                      " when the configuration loads")
        header = DEFAULT_HEADER.encode()
        with problems.part():
            header = c.header_name(problems, cfg.get("headerName", DEFAULT_HEADER), ("headerName",), settable=True)
        storage = cfg
        base: Path = ()
        if "k8sSecretApikeyStorage" in cfg:
            if "labelSelector" in cfg or "apiKeySecretRefs" in cfg:
                problems.add(("k8sSecretApikeyStorage",), "write labelSelector and apiKeySecretRefs either here"
                                                          " or at the top of apiKeyAuth, not both")
            base = ("k8sSecretApikeyStorage",)
            storage = cfg.fields("k8sSecretApikeyStorage", ("labelSelector", "apiKeySecretRefs"))
        selector = storage.labels("labelSelector")
        refs: list[tuple[str, str]] = []
        for i, ref in enumerate(storage.sequence("apiKeySecretRefs")):
            with problems.part():
                name, namespace = problems.reference(ref, base + ("apiKeySecretRefs", i), scope.namespace)
                refs.append((namespace, name))
        if not selector and not refs and not problems:
            problems.add(base or (), "set labelSelector (non-empty) or apiKeySecretRefs: which Secrets hold the keys")
        metadata = _metadata(cfg.get("headersFromMetadataEntry"), ("headersFromMetadataEntry",), problems)
        secrets = _select(scope, selector, refs, base, problems)
        table = build_table(secrets, metadata, problems, base or ("apiKeySecretRefs",))
        problems.raise_if_any()
        return ApiKeyChecker(header, table, tuple(m.header for m in metadata), (header,),
                             f"API key in {header.decode()} ({len(table)} keys)")
