"""Validating and compiling ``options.jwt`` (pure apart from key-set lookup).

Every mistake is an :class:`twistgw.OptionsError` naming the field below
``jwt`` and what to write instead; the gateway then rejects the whole
configuration and keeps serving the last good one.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

import attrs

from twistgw.sdk import Path, Problems, check_fields, is_token, require_mapping, type_name
from twistgw.sdk import parse_duration as _duration
from twistgw.sdk import OptionsError, OptionsScope
from twistgw_jwt._cache import VerifiedCache
from twistgw_jwt._keys import KeyProblem, VerifyKey, parse_local_key
from twistgw.sdk import TLSSettingsError, client_tls
from twistgw_jwt._remote import RemoteKeySet, RemoteSpec

VALIDATION_POLICIES = ("REQUIRE_VALID", "ALLOW_MISSING", "ALLOW_MISSING_OR_FAILED")
DEFAULT_CACHE_DURATION = 300.0
DEFAULT_FETCH_TIMEOUT = 5.0
DEFAULT_REFETCH_INTERVAL = 5.0
DEFAULT_CLOCK_SKEW = 60
DEFAULT_VERIFIED_CACHE_SIZE = 4096

#: headers a claim may never be copied into: framing, routing and the token itself
_FORBIDDEN_CLAIM_HEADERS = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te",
    "trailer", "upgrade", "proxy-authorization", "proxy-connection", "expect",
})


# ---------------------------------------------------------------------------
# Compiled forms
# ---------------------------------------------------------------------------


@attrs.frozen
class HeaderSource:
    header: str          # lower-case name
    prefix: str          # lower-case prefix ("bearer ") or ""
    name: bytes = attrs.field(init=False, eq=False, repr=False)  # header, encoded once

    @name.default
    def _encode_name(self) -> bytes:
        return self.header.encode("ascii")


@attrs.frozen
class QuerySource:
    param: str


Source = HeaderSource | QuerySource

DEFAULT_SOURCES: tuple[Source, ...] = (HeaderSource("authorization", "bearer "), QuerySource("access_token"))


@attrs.frozen
class ClaimToHeader:
    claim: str
    header: bytes
    append: bool


@attrs.frozen
class LocalKeys:
    keys: tuple[VerifyKey, ...]


@attrs.frozen(eq=False)
class Provider:
    name: str
    issuer: str
    audiences: frozenset[str] | None
    local: LocalKeys | None
    remote: RemoteKeySet | None
    sources: tuple[Source, ...]
    keep_token: bool
    claims_to_headers: tuple[ClaimToHeader, ...]
    clock_skew: int
    #: the plugin's clock (seconds)
    now: Callable[[], float] = attrs.field(default=time.time, repr=False)


@attrs.frozen(eq=False)
class CompiledJwt:
    """What ``twistgw_compile_options`` returns; shared by concurrent requests."""

    providers: tuple[Provider, ...]
    policy: str
    #: every distinct token location, in a stable order
    sources: tuple[Source, ...]
    #: source index → providers reading it
    providers_by_source: tuple[tuple[Provider, ...], ...]
    #: every header name any provider's claimsToHeaders writes (lower-case
    #: bytes): the gateway removes a client's copies from every request
    #: (twistgw.OwnsRequestHeaders), on routes where JWT is off too
    owned_request_headers: frozenset[bytes]
    cache: VerifiedCache = attrs.field(repr=False)
    #: the plugin's clock (seconds)
    now: Callable[[], float] = attrs.field(default=time.time, repr=False)

    def remote_key_sets(self) -> list[RemoteKeySet]:
        return [p.remote for p in self.providers if p.remote is not None]


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

_mapping = require_mapping
_kind = type_name
_only = check_fields


def _string(value: Any, path: Path, what: str, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise OptionsError(path, f"{what} must be a string, got {_kind(value)}")
    if not allow_empty and not value.strip():
        raise OptionsError(path, f"{what} must not be empty")
    return value


def _bool(value: Any, path: Path, what: str) -> bool:
    if not isinstance(value, bool):
        raise OptionsError(path, f"{what} must be true or false, got {_kind(value)}")
    return value


def parse_duration(value: Any, path: Path, what: str) -> float:
    """``300s``, ``5m``, ``1.5s``, ``250ms``, ``1h`` or a number of seconds."""
    if isinstance(value, bool):
        raise OptionsError(path, f"{what} must be a duration such as 300s or 5m, got a boolean")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif (parsed := _duration(value)) is not None:
        seconds = parsed
    else:
        raise OptionsError(path, f"{what} must be a duration such as 300s, 5m or 250ms,"
                                 f" got {value!r}")
    if seconds <= 0:
        raise OptionsError(path, f"{what} must be more than zero")
    return seconds


def _header_name(value: Any, path: Path, what: str) -> str:
    name = _string(value, path, what)
    if not is_token(name):
        raise OptionsError(path, f"{what} {name!r} is not a valid HTTP header name")
    return name.lower()


# ---------------------------------------------------------------------------
# Compiling
# ---------------------------------------------------------------------------

PROVIDER_FIELDS = ("issuer", "audiences", "jwks", "tokenSource", "keepToken",
                   "claimsToHeaders", "clockSkewSeconds")
TOP_FIELDS = ("providers", "validationPolicy", "disable")


def compile_options(options: Mapping[str, Any], scope: OptionsScope,
                    remote_factory: Callable[[RemoteSpec], RemoteKeySet],
                    now: Callable[[], float] = time.time) -> CompiledJwt:
    problems = Problems()  # every problem is reported, not just the first
    with problems.check():
        _only(options, TOP_FIELDS, ())
    if options.get("disable") not in (None, False):
        problems.add(("disable",), "must be true or false")
    providers_raw: Mapping[str, Any] = {}
    with problems.check():
        if options.get("providers") is None:
            raise OptionsError(("providers",), "required: a mapping of provider name to"
                               " {issuer, jwks: {local: {key}} | {remote: {upstreamRef, url}}}")
        providers_raw = _mapping(options["providers"], ("providers",), "providers")
        if not providers_raw:
            raise OptionsError(("providers",), "at least one provider is required")
    policy = options.get("validationPolicy", "REQUIRE_VALID")
    if policy not in VALIDATION_POLICIES:
        problems.add(("validationPolicy",),
                     f"must be one of {', '.join(VALIDATION_POLICIES)}, got {policy!r}")

    providers = []
    for name, raw in providers_raw.items():
        with problems.check():
            providers.append(attrs.evolve(
                _compile_provider(str(name), raw, ("providers", str(name)), scope, remote_factory), now=now))

    settings = scope.resources.settings("jwt")
    size = settings.get("verifiedTokenCacheSize", DEFAULT_VERIFIED_CACHE_SIZE)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        problems.add(("verifiedTokenCacheSize",),
                     "Settings.spec.jwt.verifiedTokenCacheSize must be a whole number >= 0")
    problems.raise_if_any()

    sources: list[Source] = []
    for p in providers:
        for s in p.sources:
            if s not in sources:
                sources.append(s)
    by_source = tuple(tuple(p for p in providers if s in p.sources) for s in sources)
    claim_headers = frozenset(c.header for p in providers for c in p.claims_to_headers)
    return CompiledJwt(tuple(providers), policy, tuple(sources), by_source, claim_headers,
                       VerifiedCache(size), now)


def _compile_provider(name: str, raw: Any, path: Path, scope: OptionsScope,
                      remote_factory: Callable[[RemoteSpec], RemoteKeySet]) -> Provider:
    raw = _mapping(raw, path, f"provider {name!r}")
    problems = Problems()
    with problems.check():
        _only(raw, PROVIDER_FIELDS, path)
    issuer = ""
    with problems.check():
        if "issuer" not in raw:
            raise OptionsError(path + ("issuer",), "required: the exact `iss` value of the tokens"
                               " this provider accepts")
        issuer = _string(raw["issuer"], path + ("issuer",), "issuer")

    audiences = None
    with problems.check():
        if raw.get("audiences") is not None:
            aud = raw["audiences"]
            if not isinstance(aud, list) or not aud:
                raise OptionsError(path + ("audiences",), "must be a non-empty list of strings")
            audiences = frozenset(_string(a, path + ("audiences", i), "an audience")
                                  for i, a in enumerate(aud))

    local = remote = None
    with problems.check():
        jwks = _mapping(raw.get("jwks"), path + ("jwks",), "jwks (required)")
        _only(jwks, ("local", "remote"), path + ("jwks",))
        if ("local" in jwks) == ("remote" in jwks):
            raise OptionsError(path + ("jwks",), "set exactly one of local: {key: ...} (or {keyFile: ...})"
                               " or remote: {upstreamRef: {name, namespace}, url}")
        if "local" in jwks:
            local = _compile_local(jwks["local"], path + ("jwks", "local"), scope.resources.config_dir)
        else:
            spec = _compile_remote(jwks["remote"], path + ("jwks", "remote"), scope)
            if not problems:  # never start a key-set client for options that are rejected
                remote = remote_factory(spec)

    sources: tuple[Source, ...] = ()
    with problems.check():
        sources = _compile_sources(raw.get("tokenSource"), path + ("tokenSource",))
    keep = False
    with problems.check():
        keep = _bool(raw.get("keepToken", False), path + ("keepToken",), "keepToken")
    claims: tuple[ClaimToHeader, ...] = ()
    with problems.check():
        claims = _compile_claims(raw.get("claimsToHeaders"), path + ("claimsToHeaders",))
    skew = raw.get("clockSkewSeconds", DEFAULT_CLOCK_SKEW)
    if isinstance(skew, bool) or not isinstance(skew, int) or not 0 <= skew <= 86400:
        problems.add(path + ("clockSkewSeconds",),
                     f"must be a whole number of seconds from 0 to 86400, got {skew!r}")
    problems.raise_if_any()
    return Provider(name, issuer, audiences, local, remote, sources, keep, claims, skew)


#: A key file larger than this is refused (a key set is a few kilobytes).
MAX_KEY_FILE = 1 << 20


def _compile_local(raw: Any, path: Path, config_dir: str) -> LocalKeys:
    raw = _mapping(raw, path, "local")
    _only(raw, ("key", "keyFile"), path)
    if ("key" in raw) == ("keyFile" in raw):
        raise OptionsError(path, "set exactly one of key (the PEM, JWK or JWKS text) or keyFile"
                           " (a file holding it, relative to the configuration directory)")
    if "key" in raw:
        field = "key"
        text = _string(raw["key"], path + ("key",), "key (a PEM public key, a JWK or a JWKS)")
    else:
        field = "keyFile"
        text = _read_key_file(raw["keyFile"], path + ("keyFile",), config_dir)
    try:
        result = parse_local_key(text, field)
    except KeyProblem as exc:
        raise OptionsError(path + (field,), str(exc)) from None
    if not result.keys:
        raise OptionsError(path + (field,), "no usable public key: kty oct (HMAC) keys are"
                           " never accepted, and keys with use other than sig are ignored")
    return LocalKeys(result.keys)


def _read_key_file(value: Any, path: Path, config_dir: str) -> str:
    """The text of ``keyFile``: a path relative to the configuration
    directory (never to the working directory), or absolute."""
    name = _string(value, path, "keyFile (a file name relative to the configuration directory)")
    if os.path.isabs(name):
        full = name
    elif config_dir:
        full = os.path.join(config_dir, name)
    else:
        raise OptionsError(path, f"{name!r} is relative, but this configuration was not read from"
                           " a directory; give an absolute path or use key")
    try:
        with open(full, "rb") as f:
            data = f.read(MAX_KEY_FILE + 1)
    except OSError as exc:
        raise OptionsError(path, f"cannot read {name!r} ({full}): {exc.strerror}") from None
    if len(data) > MAX_KEY_FILE:
        raise OptionsError(path, f"{name!r} is larger than {MAX_KEY_FILE} bytes; a key set is a few kilobytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise OptionsError(path, f"{name!r} is not UTF-8 text (a PEM public key, a JWK or a JWKS)") from None


def _compile_remote(raw: Any, path: Path, scope: OptionsScope) -> RemoteSpec:
    raw = _mapping(raw, path, "remote")
    _only(raw, ("upstreamRef", "url", "cacheDuration", "timeout", "refetchInterval", "asyncFetch"),
          path)
    ref = _mapping(raw.get("upstreamRef"), path + ("upstreamRef",),
                   "upstreamRef (required: {name, namespace})")
    _only(ref, ("name", "namespace"), path + ("upstreamRef",))
    up_name = _string(ref.get("name"), path + ("upstreamRef", "name"), "upstreamRef.name")
    up_ns = _string(ref.get("namespace", scope.namespace), path + ("upstreamRef", "namespace"),
                    "upstreamRef.namespace")
    try:
        upstream = scope.resources.upstream(up_name, up_ns)
    except KeyError as exc:
        message = exc.args[0] if exc.args else f"no Upstream {up_ns}/{up_name}"
        raise OptionsError(path + ("upstreamRef",),
                           f"{message}; name an Upstream, or a discovered one"
                           " (<namespace>-<service>-<port>)") from None
    url = _string(raw.get("url"), path + ("url",), "url (the key set's URL)")
    if any(c in url for c in "\r\n\t ") or any(ord(c) < 32 or ord(c) > 126 for c in url):
        raise OptionsError(path + ("url",), "must be a URL without spaces or control characters")
    server_name: str | None = None
    if url.startswith("/"):
        host_header = None
        path_part = url
    else:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise OptionsError(path + ("url",), "must be an absolute http(s) URL such as"
                               " http://auth.example.com/.well-known/jwks.json, or a path")
        if "@" in parts.netloc:
            raise OptionsError(path + ("url",), "must not contain credentials")
        host_header = parts.netloc
        if parts.scheme == "https":
            # TLS to the upstream, the certificate checked against the URL's host
            server_name = _tls_server_name(parts.hostname or "", path + ("url",))
        path_part = parts.path or "/"
        if parts.query:
            path_part += "?" + parts.query
    if "asyncFetch" in raw and not isinstance(raw["asyncFetch"], (Mapping, bool, type(None))):
        raise OptionsError(path + ("asyncFetch",), "must be a mapping (key sets are always"
                           " prefetched when the configuration loads)")
    cache = parse_duration(raw.get("cacheDuration", DEFAULT_CACHE_DURATION),
                           path + ("cacheDuration",), "cacheDuration")
    timeout = parse_duration(raw.get("timeout", DEFAULT_FETCH_TIMEOUT), path + ("timeout",),
                             "timeout")
    refetch = parse_duration(raw.get("refetchInterval", DEFAULT_REFETCH_INTERVAL),
                             path + ("refetchInterval",), "refetchInterval")
    addresses = tuple((e.host, e.port) for e in upstream.endpoints)
    return RemoteSpec(addresses, path_part.encode("ascii"),
                      host_header.encode("ascii") if host_header else None,
                      f"{upstream.namespace}/{upstream.name}", url, cache, timeout, refetch,
                      server_name)


def _tls_server_name(host: str, path: Path) -> str:
    """The URL's host, which an ``https`` key set's certificate must name."""
    try:
        client_tls(host)  # refuses what can never be verified (an empty name)
    except TLSSettingsError as exc:
        raise OptionsError(path, f"cannot fetch over TLS: {exc}") from None
    return host


def _compile_sources(raw: Any, path: Path) -> tuple[Source, ...]:
    if raw is None:
        return DEFAULT_SOURCES
    raw = _mapping(raw, path, "tokenSource")
    _only(raw, ("headers", "queryParams"), path)
    out: list[Source] = []
    headers = raw.get("headers") or []
    if not isinstance(headers, list):
        raise OptionsError(path + ("headers",), "must be a list of {header, prefix}")
    for i, h in enumerate(headers):
        hp = path + ("headers", i)
        h = _mapping(h, hp, "a token header")
        _only(h, ("header", "prefix"), hp)
        name = _header_name(h.get("header"), hp + ("header",), "header")
        prefix = _string(h.get("prefix", ""), hp + ("prefix",), "prefix", allow_empty=True)
        src = HeaderSource(name, prefix.lower())
        if src not in out:
            out.append(src)
    params = raw.get("queryParams") or []
    if not isinstance(params, list):
        raise OptionsError(path + ("queryParams",), "must be a list of parameter names")
    for i, q in enumerate(params):
        query = QuerySource(_string(q, path + ("queryParams", i), "a query parameter name"))
        if query not in out:
            out.append(query)
    if not out:
        raise OptionsError(path, "lists no header and no query parameter; omit tokenSource"
                           " for the defaults (Authorization: Bearer, access_token)")
    return tuple(out)


def _compile_claims(raw: Any, path: Path) -> tuple[ClaimToHeader, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise OptionsError(path, "must be a list of {claim, header, append}")
    out = []
    for i, c in enumerate(raw):
        cp = path + (i,)
        c = _mapping(c, cp, "a claimsToHeaders entry")
        _only(c, ("claim", "header", "append"), cp)
        claim = _string(c.get("claim"), cp + ("claim",), "claim")
        header = _header_name(c.get("header"), cp + ("header",), "header")
        if header in _FORBIDDEN_CLAIM_HEADERS:
            raise OptionsError(cp + ("header",), f"a claim may not be copied into {header!r}")
        append = _bool(c.get("append", False), cp + ("append",), "append")
        out.append(ClaimToHeader(claim, header.encode("ascii"), append))
    return tuple(out)
