"""The request path: find the token, verify it, record the claims.

Written to stay synchronous whenever it can (cache hit, local keys, remote
keys already cached): only a request that must wait for a key-set fetch pays
for a coroutine.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Mapping, Sequence

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twistgw.sdk import Allow, Deny, NotChecked, RequestContext, counter
from twistgw_jwt import _token as T
from twistgw_jwt._options import CompiledJwt, HeaderSource, Provider, QuerySource
from twistgw_jwt._keys import VerifyKey
from twistgw_jwt._token import Failure, ParsedToken
from twistgw_jwt.claims import CLAIMS, VerifiedClaims

_log = Logger(namespace="twistgw_jwt")

# twistgw.counter: an increment is an integer addition, not a lock (per request).
DECISIONS = counter(
    "twistgw_jwt_decisions",
    "JWT plugin outcomes: ok, ok_cached, allowed_missing, allowed_failed, or the failure code.",
    ["outcome"],
)


_outcomes: dict[str, Any] = {}


def _count(outcome: str) -> None:
    child = _outcomes.get(outcome)
    if child is None:
        child = _outcomes[outcome] = DECISIONS.labels(outcome)
    child.inc()


_NEEDS_IO = object()


# ---------------------------------------------------------------------------
# Token extraction
# ---------------------------------------------------------------------------


def extract(ctx: RequestContext, opts: CompiledJwt) -> tuple[str, tuple[int, ...]] | Failure | None:
    """The one token of the request and the indexes of the sources it was
    found in; None when there is none; MULTIPLE_TOKENS when a source holds
    several values or two sources hold different tokens."""
    found: list[tuple[str, int]] = []
    params: list[tuple[str, str]] | None = None
    for idx, src in enumerate(opts.sources):
        if type(src) is HeaderSource:
            values = ctx.headers.getRawHeaders(src.name)
            if not values:
                continue
            prefix = src.prefix
            if len(values) == 1:  # the usual case, without the lists below
                text = values[0].decode("latin-1").strip()
                if prefix:
                    if text[:len(prefix)].lower() != prefix:
                        continue
                    text = text[len(prefix):].strip()
                if text:
                    found.append((text, idx))
                continue
            matched = []
            for raw in values:
                text = raw.decode("latin-1").strip()
                if prefix:
                    if text[:len(prefix)].lower() != prefix:
                        continue
                    text = text[len(prefix):].strip()
                if text:
                    matched.append(text)
            if matched:
                return T.MULTIPLE_TOKENS  # two Authorization headers: ambiguous, refuse
        else:
            assert isinstance(src, QuerySource)
            if not ctx.query:
                continue
            if params is None:
                params = ctx.query_params()
            matched = [v for k, v in params if k == src.param and v]
            if len(matched) > 1:
                return T.MULTIPLE_TOKENS
            found.extend((t, idx) for t in matched)
    if not found:
        return None
    token, first = found[0]
    if len(found) == 1:
        return token, (first,)
    if any(t != token for t, _ in found):
        return T.MULTIPLE_TOKENS
    return token, tuple(i for _, i in found)


# ---------------------------------------------------------------------------
# Outcomes
# ---------------------------------------------------------------------------


def _realm(ctx: RequestContext) -> str:
    host = ctx.header("host") or ctx.host
    scheme = getattr(ctx, "scheme", None) or "http"
    uri = f"{scheme}://{host}{ctx.path}"  # never the query: it may hold the token
    return "".join(c if 0x20 < ord(c) < 0x7f and c not in '"\\' else "%%%02X" % (ord(c) & 0xff)
                   for c in uri)


def deny(ctx: RequestContext, opts: CompiledJwt, failure: Failure) -> Deny | Allow:
    if failure is T.MISSING:
        if opts.policy != "REQUIRE_VALID":
            _count("allowed_missing")
            return Allow(f"no JWT; validationPolicy {opts.policy}")
        value = f'Bearer realm="{_realm(ctx)}"'
    else:
        if opts.policy == "ALLOW_MISSING_OR_FAILED":
            _count("allowed_failed")
            return Allow(f"JWT not accepted ({failure.message}); validationPolicy {opts.policy}")
        value = f'Bearer realm="{_realm(ctx)}", error="invalid_token"'
    _count(failure.code)
    return Deny(failure.status, failure.message.encode("ascii"),
                headers=((b"www-authenticate", value.encode("latin-1")),),
                reason=f"jwt: {failure.message}")


def claim_text(value: Any) -> bytes | None:
    """A claim's value as a request header's bytes (``claimsToHeaders``):
    a string as is, a number or boolean as JSON, a list as its items'
    texts joined with ``,``, an object as compact JSON with sorted keys.
    None for a missing claim and for one whose text holds a control
    character (never a header line injected by a claim)."""
    if value is None:
        return None
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, (int, float)):
        text = json.dumps(value)
    elif isinstance(value, list):
        parts = [claim_text(v) for v in value]
        return b",".join(p for p in parts if p is not None)
    else:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    data = text.encode("utf-8")
    if any(b < 0x20 and b != 0x09 or b == 0x7f for b in data):
        return None  # never let a claim inject a header line
    return data


#: JSON scalars, checked by exact class first (the usual claims).
_SCALARS = frozenset((str, int, float, bool, type(None)))


def _copy_json(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, scalars), so a plugin changing
    its copy of the claims (``twistgw_jwt.claims``) never changes a cached entry."""
    if isinstance(value, dict):
        out = dict(value)  # scalars (the usual claims) are immutable: shared
        for k, v in value.items():
            if v.__class__ not in _SCALARS and isinstance(v, (dict, list)):
                out[k] = _copy_json(v)
        return out
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value


def succeed(ctx: RequestContext, opts: CompiledJwt, provider: Provider,
            claims: Mapping[str, Any], where: tuple[int, ...], cached: bool) -> Allow:
    ctx.state[CLAIMS] = VerifiedClaims(_copy_json(claims), provider.name)
    sub = claims.get("sub")
    if isinstance(sub, str):
        ctx.authenticated("jwt", sub)
    if not provider.keep_token:
        for idx in where:
            src = opts.sources[idx]
            if isinstance(src, HeaderSource):
                ctx.headers.removeHeader(src.name)
            else:
                ctx.remove_query_param(src.param)
    for c in provider.claims_to_headers:
        data = claim_text(claims.get(c.claim))
        if data is None:
            continue
        if c.append:
            ctx.headers.addRawHeader(c.header, data)
        else:
            ctx.headers.setRawHeaders(c.header, [data])
    _count("ok_cached" if cached else "ok")
    return _allowed(provider.name, cached)


@functools.lru_cache(maxsize=1024)
def _allowed(provider: str, cached: bool) -> Allow:
    """One (immutable) Allow per provider and cache state, not one per request."""
    return Allow(f"JWT verified by provider {provider}" + (" (cached)" if cached else ""))


# ---------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------


def _check(provider: Provider, token: ParsedToken, candidates: list[Any]) -> Mapping[str, Any] | Failure:
    for k in candidates:  # a loop, not any(generator): once per unseen token
        if T.verify_signature(k, token):
            break
    else:
        return T.VERIFICATION_FAILS
    problem = T.check_claims(token.payload, provider.now(), provider.clock_skew, provider.audiences)
    if problem is not None:
        return problem
    return token.payload


def verify_sync(provider: Provider, token: ParsedToken) -> Mapping[str, Any] | Failure | object:
    """Verify without waiting, or return ``_NEEDS_IO`` when a key-set fetch
    must be awaited first."""
    keys: tuple[VerifyKey, ...] | None
    if provider.local is not None:
        keys = provider.local.keys
    else:
        assert provider.remote is not None
        keys = provider.remote.keys_now()
        if keys is None:
            return _NEEDS_IO
    candidates = T.candidate_keys(keys, token)
    if not candidates:
        if provider.remote is not None and provider.remote.may_refetch_unknown():
            return _NEEDS_IO
        return T.KID_ALG_MISMATCH
    result = _check(provider, token, candidates)
    if result is T.VERIFICATION_FAILS and provider.remote is not None \
            and not _named_by_kid(token, candidates) and provider.remote.may_refetch_unknown():
        return _NEEDS_IO
    return result


def _named_by_kid(token: ParsedToken, candidates: list[Any]) -> bool:
    """Whether a candidate carries exactly the token's ``kid``. When none does
    (the token has no kid, or only kid-less keys matched it) and the
    signature fails, the key set has no key for this token yet: a rotated
    kid-less key looks just like this, so the rate-limited refetch runs."""
    return token.kid is not None and any(k.kid == token.kid for k in candidates)


async def verify_async(provider: Provider, token: ParsedToken) -> Mapping[str, Any] | Failure:
    remote = provider.remote
    if remote is None:
        result = verify_sync(provider, token)
        assert result is not _NEEDS_IO
        return result  # type: ignore[return-value]
    keys = await remote.get_keys()
    if keys is None:
        return T.JWKS_FETCH_FAILED
    candidates = T.candidate_keys(keys, token)
    if not candidates:
        keys = await remote.refetch_unknown()
        candidates = T.candidate_keys(keys or (), token)
        if not candidates:
            return T.KID_ALG_MISMATCH
        return _check(provider, token, candidates)
    result = _check(provider, token, candidates)
    if result is T.VERIFICATION_FAILS and not _named_by_kid(token, candidates):
        generation = remote.generation
        keys = await remote.refetch_unknown()
        if remote.generation != generation:  # new keys: try them (the same ones never twice)
            candidates = T.candidate_keys(keys or (), token)
            result = _check(provider, token, candidates) if candidates else T.KID_ALG_MISMATCH
    return result


def _generation(provider: Provider) -> int:
    return provider.remote.generation if provider.remote is not None else 0


def _pick_failure(failures: list[Failure]) -> Failure:
    """Envoy's rule for several providers: the last failure other than
    missing / unknown issuer wins."""
    chosen = T.UNKNOWN_ISSUER
    for f in failures:
        if f is not T.MISSING and f is not T.UNKNOWN_ISSUER:
            chosen = f
    return chosen


def authenticate(ctx: RequestContext, opts: CompiledJwt) -> Allow | Deny | NotChecked | Deferred[Allow | Deny]:
    found = extract(ctx, opts)
    if found is None:
        return deny(ctx, opts, T.MISSING)
    if isinstance(found, Failure):
        return deny(ctx, opts, found)
    raw, where = found
    providers: Sequence[Provider]
    if len(where) == 1:
        providers = opts.providers_by_source[where[0]]
    else:
        merged: list[Provider] = []
        for idx in where:
            for p in opts.providers_by_source[idx]:
                if p not in merged:
                    merged.append(p)
        providers = merged
    now = opts.now()
    for p in providers:
        cached = opts.cache.get(p.name, raw, now, _generation(p))
        if cached is not None:
            if p.remote is not None:
                p.remote.keys_now()  # refresh a stale key set in the background
            return succeed(ctx, opts, p, cached, where, cached=True)
    parsed = T.parse_token(raw)
    if isinstance(parsed, Failure):
        return deny(ctx, opts, parsed)
    matching = [p for p in providers if p.issuer == parsed.iss]
    if not matching:
        return deny(ctx, opts, T.UNKNOWN_ISSUER)
    failures: list[Failure] = []
    unchecked: list[str] = []
    keeps: set[bool] = set()
    for i, p in enumerate(matching):
        result = verify_sync(p, parsed)
        if result is _NEEDS_IO:
            if ctx.dry_run:
                unchecked.append(_would_fetch(p))
                keeps.add(p.keep_token)
                continue
            return Deferred.fromCoroutine(
                _authenticate_async(ctx, opts, parsed, where, matching[i:], failures))
        if isinstance(result, Failure):
            failures.append(result)
            continue
        opts.cache.put(p.name, raw, result, now, _generation(p))  # type: ignore[arg-type]
        return succeed(ctx, opts, p, result, where, cached=False)  # type: ignore[arg-type]
    if unchecked:
        reason = "; ".join(unchecked) + " (not fetched in a dry run; --live fetches it)"
        return NotChecked(reason, _consumed(ctx, opts, where) if keeps == {False} else ())
    return deny(ctx, opts, _pick_failure(failures))


def _consumed(ctx: RequestContext, opts: CompiledJwt, where: tuple[int, ...]) -> tuple[tuple[bytes, None], ...]:
    """A dry run's token, consumed as :func:`succeed` would consume it: the
    query parameters removed here, the headers to remove returned."""
    headers: list[tuple[bytes, None]] = []
    for idx in where:
        src = opts.sources[idx]
        if isinstance(src, HeaderSource):
            headers.append((src.name, None))
        else:
            ctx.remove_query_param(src.param)
    return tuple(headers)


def _would_fetch(provider: Provider) -> str:
    """What a dry run says instead of fetching a remote key set."""
    assert provider.remote is not None
    spec = provider.remote.spec
    where = ", ".join(f"{host}:{port}" for host, port in spec.addresses) or "no endpoints"
    return (f"provider {provider.name!r} would fetch its key set {spec.url} from upstream"
            f" {spec.upstream} ({where}) and verify the token with it")


async def _authenticate_async(ctx: RequestContext, opts: CompiledJwt, parsed: ParsedToken,
                              where: tuple[int, ...], providers: list[Provider],
                              failures: list[Failure]) -> Allow | Deny:
    for p in providers:
        remote = p.remote
        # the wait for the key set (a fetch, or joining one) as a child span of the request's
        span = ctx.tracer.child("jwt.jwks_fetch", **{"jwt.provider": p.name, "url.full": remote.spec.url}) \
            if remote is not None else None
        try:
            result = await verify_async(p, parsed)
        except BaseException as exc:
            if span is not None:
                span.end(error=exc)
            raise
        if span is not None and remote is not None:
            span.set("jwt.key_set.fetches", remote.fetch_count)
            span.end(error=remote.last_error or "the key set could not be fetched"
                     if result is T.JWKS_FETCH_FAILED else None)
        if isinstance(result, Failure):
            failures.append(result)
            continue
        opts.cache.put(p.name, parsed.raw, result, opts.now(), _generation(p))
        return succeed(ctx, opts, p, result, where, cached=False)
    return deny(ctx, opts, _pick_failure(failures))
