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

from twistgw.api.fields import Path, Problems
from twistgw import OptionsScope
from twistgw_jwt._cache import VerifiedCache
from twistgw_jwt._keys import KeyProblem, VerifyKey, parse_local_key
from twistgw.tls import TLSSettingsError, client_tls
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
# Compiling
# ---------------------------------------------------------------------------

PROVIDER_FIELDS = ("issuer", "audiences", "jwks", "tokenSource", "keepToken",
                   "claimsToHeaders", "clockSkewSeconds")
TOP_FIELDS = ("providers", "validationPolicy", "disable")
SETTINGS_FIELDS = ("verifiedTokenCacheSize",)


def verified_cache_size(settings: Mapping[str, Any], r: Problems | None = None) -> int:
    """``Settings.spec.jwt.verifiedTokenCacheSize`` (problems recorded on
    ``r``; an invalid one reads as the default: it is reported at Settings)."""
    r = Problems() if r is None else r
    size = r.fields(settings, (), SETTINGS_FIELDS).get("verifiedTokenCacheSize", DEFAULT_VERIFIED_CACHE_SIZE)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        r.issue(("verifiedTokenCacheSize",), "must be a whole number >= 0 (verified tokens kept per route;"
                " 0: none)")
        return DEFAULT_VERIFIED_CACHE_SIZE
    return size


def compile_options(options: Mapping[str, Any], scope: OptionsScope,
                    remote_factory: Callable[[RemoteSpec], RemoteKeySet],
                    now: Callable[[], float] = time.time) -> CompiledJwt:
    r = Problems()  # every problem is reported, not just the first
    f = r.fields(options, (), TOP_FIELDS)
    if f.get("disable") not in (None, False):
        r.issue(("disable",), "must be true or false")
    providers_raw: Mapping[str, Any] = {}
    with r.part():
        if f.get("providers") is None:
            raise r.fail(("providers",), "required: a mapping of provider name to"
                         " {issuer, jwks: {local: {key}} | {remote: {upstreamRef, url}}}")
        providers_raw = r.mapping(f["providers"], ("providers",))
        if not providers_raw:
            raise r.fail(("providers",), "at least one provider is required")
    policy = f.get("validationPolicy", "REQUIRE_VALID")
    if policy not in VALIDATION_POLICIES:
        r.issue(("validationPolicy",), f"must be one of {', '.join(VALIDATION_POLICIES)}, got {policy!r}")

    providers = []
    for name, raw in providers_raw.items():
        with r.part():
            providers.append(attrs.evolve(
                _compile_provider(r, str(name), raw, ("providers", str(name)), scope, remote_factory), now=now))
    size = verified_cache_size(scope.resources.settings("jwt"))  # its problems: at Settings
    r.raise_if_any()

    sources: list[Source] = []
    for p in providers:
        for s in p.sources:
            if s not in sources:
                sources.append(s)
    by_source = tuple(tuple(p for p in providers if s in p.sources) for s in sources)
    claim_headers = frozenset(c.header for p in providers for c in p.claims_to_headers)
    return CompiledJwt(tuple(providers), policy, tuple(sources), by_source, claim_headers,
                       VerifiedCache(size), now)


def _compile_provider(r: Problems, name: str, raw: Any, path: Path, scope: OptionsScope,
                      remote_factory: Callable[[RemoteSpec], RemoteKeySet]) -> Provider:
    count = r.count()
    p = r.fields(r.mapping(raw, path, what=f"provider {name!r}"), path, PROVIDER_FIELDS)
    issuer = ""
    with r.part():
        if p.get("issuer") is None:
            raise r.fail(p.at("issuer"), "required: the exact `iss` value of the tokens this provider accepts")
        issuer = r.string(p["issuer"], p.at("issuer"))

    audiences = None
    with r.part():
        if p.get("audiences") is not None:
            aud = p["audiences"]
            if not isinstance(aud, list) or not aud:
                raise r.fail(p.at("audiences"), "must be a non-empty list of strings")
            audiences = frozenset(r.strings(aud, p.at("audiences")))

    local = remote = None
    with r.part():
        jwks = r.mapping(p.get("jwks"), p.at("jwks"), ("local", "remote"), what="jwks (required)")
        if ("local" in jwks) == ("remote" in jwks):
            raise r.fail(p.at("jwks"), "set exactly one of local: {key: ...} (or {keyFile: ...})"
                         " or remote: {upstreamRef: {name, namespace}, url}")
        if "local" in jwks:
            local = _compile_local(r, jwks["local"], p.at("jwks", "local"), scope.resources.config_dir)
        else:
            spec = _compile_remote(r, jwks["remote"], p.at("jwks", "remote"), scope)
            if r.count() == count:  # never start a key-set client for options that are rejected
                remote = remote_factory(spec)

    sources: tuple[Source, ...] = ()
    with r.part():
        sources = _compile_sources(r, p.get("tokenSource"), p.at("tokenSource"))
    keep = p.boolean("keepToken", False)
    claims: tuple[ClaimToHeader, ...] = ()
    with r.part():
        claims = _compile_claims(r, p.get("claimsToHeaders"), p.at("claimsToHeaders"))
    skew = p.get("clockSkewSeconds", DEFAULT_CLOCK_SKEW)
    if isinstance(skew, bool) or not isinstance(skew, int) or not 0 <= skew <= 86400:
        r.issue(p.at("clockSkewSeconds"), f"must be a whole number of seconds from 0 to 86400, got {skew!r}")
    if r.count() > count:
        raise r.invalid()
    return Provider(name, issuer, audiences, local, remote, sources, keep, claims, skew)


#: A key file larger than this is refused (a key set is a few kilobytes).
MAX_KEY_FILE = 1 << 20


def _compile_local(r: Problems, raw: Any, path: Path, config_dir: str) -> LocalKeys:
    m = r.mapping(raw, path, ("key", "keyFile"), what="local")
    if ("key" in m) == ("keyFile" in m):
        raise r.fail(path, "set exactly one of key (the PEM, JWK or JWKS text) or keyFile"
                     " (a file holding it, relative to the configuration directory)")
    if "key" in m:
        field = "key"
        text = r.string(m["key"], path + ("key",))
    else:
        field = "keyFile"
        text = _read_key_file(r, m["keyFile"], path + ("keyFile",), config_dir)
    try:
        result = parse_local_key(text, field)
    except KeyProblem as exc:
        raise r.fail(path + (field,), str(exc)) from None
    if not result.keys:
        raise r.fail(path + (field,), "no usable public key: kty oct (HMAC) keys are"
                     " never accepted, and keys with use other than sig are ignored")
    return LocalKeys(result.keys)


def _read_key_file(r: Problems, value: Any, path: Path, config_dir: str) -> str:
    """The text of ``keyFile``: a path relative to the configuration
    directory (never to the working directory), or absolute."""
    name = r.string(value, path)
    if os.path.isabs(name):
        full = name
    elif config_dir:
        full = os.path.join(config_dir, name)
    else:
        raise r.fail(path, f"{name!r} is relative, but this configuration was not read from"
                     " a directory; give an absolute path or use key")
    try:
        with open(full, "rb") as f:
            data = f.read(MAX_KEY_FILE + 1)
    except OSError as exc:
        raise r.fail(path, f"cannot read {name!r} ({full}): {exc.strerror}") from None
    if len(data) > MAX_KEY_FILE:
        raise r.fail(path, f"{name!r} is larger than {MAX_KEY_FILE} bytes; a key set is a few kilobytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise r.fail(path, f"{name!r} is not UTF-8 text (a PEM public key, a JWK or a JWKS)") from None


def _compile_remote(r: Problems, raw: Any, path: Path, scope: OptionsScope) -> RemoteSpec:
    m = r.fields(r.mapping(raw, path, what="remote"), path,
                 ("upstreamRef", "url", "cacheDuration", "timeout", "refetchInterval", "asyncFetch"))
    ref = r.mapping(m.get("upstreamRef"), m.at("upstreamRef"), ("name", "namespace"),
                    what="upstreamRef (required: {name, namespace})")
    up_name = r.string(ref.get("name"), m.at("upstreamRef", "name"))
    up_ns = r.string(ref.get("namespace", scope.namespace), m.at("upstreamRef", "namespace"))
    try:
        upstream = scope.resources.upstream(up_name, up_ns)
    except KeyError as exc:
        message = exc.args[0] if exc.args else f"no Upstream {up_ns}/{up_name}"
        raise r.fail(m.at("upstreamRef"), f"{message}; name an Upstream, or a discovered one"
                     " (<namespace>-<service>-<port>)") from None
    url = r.string(m.get("url"), m.at("url"))
    if any(c in url for c in "\r\n\t ") or any(ord(c) < 32 or ord(c) > 126 for c in url):
        raise r.fail(m.at("url"), "must be a URL without spaces or control characters")
    server_name: str | None = None
    if url.startswith("/"):
        host_header = None
        path_part = url
    else:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise r.fail(m.at("url"), "must be an absolute http(s) URL such as"
                         " http://auth.example.com/.well-known/jwks.json, or a path")
        if "@" in parts.netloc:
            raise r.fail(m.at("url"), "must not contain credentials")
        host_header = parts.netloc
        if parts.scheme == "https":
            # TLS to the upstream, the certificate checked against the URL's host
            server_name = _tls_server_name(r, parts.hostname or "", m.at("url"))
        path_part = parts.path or "/"
        if parts.query:
            path_part += "?" + parts.query
    if "asyncFetch" in m and not isinstance(m["asyncFetch"], (Mapping, bool, type(None))):
        raise r.fail(m.at("asyncFetch"), "must be a mapping (key sets are always prefetched when the"
                     " configuration loads)")
    count = r.count()
    cache = m.duration("cacheDuration", DEFAULT_CACHE_DURATION)
    timeout = m.duration("timeout", DEFAULT_FETCH_TIMEOUT)
    refetch = m.duration("refetchInterval", DEFAULT_REFETCH_INTERVAL)
    if r.count() > count:
        raise r.invalid()
    addresses = tuple((e.host, e.port) for e in upstream.endpoints)
    return RemoteSpec(addresses, path_part.encode("ascii"),
                      host_header.encode("ascii") if host_header else None,
                      f"{upstream.namespace}/{upstream.name}", url, cache, timeout, refetch,
                      server_name)


def _tls_server_name(r: Problems, host: str, path: Path) -> str:
    """The URL's host, which an ``https`` key set's certificate must name."""
    try:
        client_tls(host)  # refuses what can never be verified (an empty name)
    except TLSSettingsError as exc:
        raise r.fail(path, f"cannot fetch over TLS: {exc}") from None
    return host


def _compile_sources(r: Problems, raw: Any, path: Path) -> tuple[Source, ...]:
    if raw is None:
        return DEFAULT_SOURCES
    m = r.mapping(raw, path, ("headers", "queryParams"), what="tokenSource")
    out: list[Source] = []
    headers = m.get("headers") or []
    if not isinstance(headers, list):
        raise r.fail(path + ("headers",), "must be a list of {header, prefix}")
    for i, h in enumerate(headers):
        hp = path + ("headers", i)
        h = r.mapping(h, hp, ("header", "prefix"), what="a token header")
        name = r.header_name(h.get("header"), hp + ("header",)).lower()
        prefix = r.string(h.get("prefix", ""), hp + ("prefix",), nonempty=False)
        src = HeaderSource(name, prefix.lower())
        if src not in out:
            out.append(src)
    params = m.get("queryParams") or []
    if not isinstance(params, list):
        raise r.fail(path + ("queryParams",), "must be a list of parameter names")
    for i, q in enumerate(params):
        query = QuerySource(r.string(q, path + ("queryParams", i)))
        if query not in out:
            out.append(query)
    if not out:
        raise r.fail(path, "lists no header and no query parameter; omit tokenSource"
                     " for the defaults (Authorization: Bearer, access_token)")
    return tuple(out)


def _compile_claims(r: Problems, raw: Any, path: Path) -> tuple[ClaimToHeader, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise r.fail(path, "must be a list of {claim, header, append}")
    out = []
    for i, c in enumerate(raw):
        cp = path + (i,)
        c = r.mapping(c, cp, ("claim", "header", "append"), what="a claimsToHeaders entry")
        claim = r.string(c.get("claim"), cp + ("claim",))
        header = r.header_name(c.get("header"), cp + ("header",)).lower()
        if header in _FORBIDDEN_CLAIM_HEADERS:
            raise r.fail(cp + ("header",), f"a claim may not be copied into {header!r}")
        append = r.boolean(c.get("append", False), cp + ("append",))
        out.append(ClaimToHeader(claim, header.encode("ascii"), append))
    return tuple(out)
