"""``oidcAuthorizationCode`` on each request: the checker.

* the callback, logout and front-channel logout paths are answered here
  (:mod:`._login`, :mod:`._logout`);
* a request with a valid session is admitted (synchronously with the cookie
  store: one dictionary lookup, or one AES-GCM decryption) with the ID
  token's claims for RBAC and the configured headers; the session cookies
  are taken out of the forwarded ``Cookie`` header;
* an expired session is refreshed with the refresh token when allowed; a
  failed refresh, or no session, starts a login: a 302 to the provider for
  a browser navigation, 401 for anything that cannot follow one.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import attrs
from twisted.internet.defer import Deferred

from twistgw import AuthAllow, AuthDeny, NotChecked, RequestContext
from twistgw_jwt.verify import claim_text
from twistgw_oidc import _login, _logout
from twistgw_oidc._cookies import joined_value, parse_cookie_header, split_cookies, without_cookies
from twistgw_oidc._options import OidcSpec
from twistgw_oidc._provider import Discovery
from twistgw_oidc._runtime import Runtime
from twistgw_oidc._session import CookieStore, RedisStore, Session, StoreDown


def make_allow(**fields: Any) -> AuthAllow:
    """An AuthAllow (kept as the one place the plugin builds one)."""
    return AuthAllow(**fields)


def unavailable(reason: str) -> AuthDeny:
    return AuthDeny.failure(reason, 503)


@attrs.frozen(eq=False)
class OidcChecker:
    """One compiled ``oidcAuthorizationCode`` (an ``ExtAuthChecker``)."""

    spec: OidcSpec
    runtime: Runtime = attrs.field(repr=False)
    provider: Discovery = attrs.field(repr=False)
    store: CookieStore | RedisStore = attrs.field(repr=False)
    owned_request_headers: tuple[bytes, ...]
    description: str
    credential_headers: tuple[bytes, ...] = ()
    #: the admissions of valid cookie-store sessions by their exact Cookie
    #: header (see :class:`Admissions`)
    admissions: Admissions = attrs.field(factory=lambda: Admissions(), eq=False, repr=False)

    @property
    def login_cookie(self) -> str:
        return f"{self.spec.session.cookie_name}_login_{self.spec.binding[:8]}"

    def check(self, ctx: RequestContext) -> Any:
        spec = self.spec
        path = ctx.path
        if path == spec.callback_path:
            return Deferred.fromCoroutine(_login.callback(self, ctx))
        if path == spec.logout_path:
            return Deferred.fromCoroutine(_logout.logout(self, ctx))
        if path == spec.front_channel_logout_path:
            return Deferred.fromCoroutine(_logout.front_channel(self, ctx))
        raw = ctx.headers.get_canonical(b"Cookie")
        if raw is not None and len(raw) == 1:  # Admissions.get, inline: this is every request's path
            known = self.admissions.entries.get(raw[0])
            if known is not None:
                runtime = self.runtime
                if runtime.now() < known[0] and not (runtime.revoked and self.revoked(known[1], known[2])):
                    return known[3]
                self.admissions.forget(raw[0])
        return self._session_request(ctx, raw)

    def _session_request(self, ctx: RequestContext, raw: list[bytes] | None) -> Any:
        """:meth:`check` for a request the admissions did not answer: the
        session opened and checked, admitted (and remembered), refreshed, or
        a login started."""
        spec = self.spec
        cookies = parse_cookie_header(raw or ())
        store = self.store
        if isinstance(store, RedisStore):
            return self._redis_check(ctx, cookies, store)
        value = joined_value(cookies, spec.session.cookie_name)
        session = store.open(value) if value else None
        if session is not None and self.usable(session):
            if not self.needs_refresh(session):
                answer = self.allow(ctx, session)
                if raw is not None and len(raw) == 1 and self.admissions.may_keep(spec):
                    self.admissions.keep(raw[0], self.valid_until(session), session, answer)
                return answer
            if spec.session.allow_refreshing and session.refresh_token:
                return Deferred.fromCoroutine(self._refresh(ctx, session, None, cookies))
        return Deferred.fromCoroutine(_login.start(self, ctx, cookies))

    def dry_run(self, ctx: RequestContext) -> Any:
        """``twistgw explain``: decide from the request alone, contact nothing."""
        spec = self.spec
        issuer = spec.issuer_url
        if ctx.path in (spec.callback_path, spec.logout_path, spec.front_channel_logout_path):
            return NotChecked(f"would answer the OIDC {ctx.path} endpoint (contacts {issuer})")
        raw = ctx.headers.getRawHeaders(b"cookie") or []
        cookies = parse_cookie_header(raw)
        if isinstance(self.store, RedisStore):
            if cookies.get(spec.session.cookie_name):
                # admitted, the session's cookies would not reach the backend (allow())
                kept = without_cookies(raw, frozenset((spec.session.cookie_name, self.login_cookie)))
                return NotChecked(f"would look the session up in Redis {spec.session.redis}", ((b"cookie", kept),))
        else:
            value = joined_value(cookies, spec.session.cookie_name)
            session = self.store.open(value) if value else None
            if session is not None and self.usable(session) and not self.needs_refresh(session):
                return self.allow(ctx, session)
        if not _login.can_redirect(spec, ctx):
            return _login.login_required(spec)
        return NotChecked(f"no session: would redirect the browser to {issuer}'s login")

    # -- sessions ---------------------------------------------------------

    def usable(self, session: Session) -> bool:
        """Made by this config, not logged out by the provider, not older than the cookie may be."""
        if session.binding != self.spec.binding:
            return False
        max_age = self.spec.session.cookie.max_age
        if max_age and self.runtime.now() > session.created + max_age:
            return False
        return not (self.runtime.revoked and self.revoked(session.sid, session.token_id))

    def revoked(self, sid: str | None, token_id: str) -> bool:
        """Whether the provider logged this session out (by its ``sid`` or its ID token)."""
        revoked = self.runtime.is_revoked
        return revoked(self.spec.binding, sid) or revoked(self.spec.binding, token_id)

    def needs_refresh(self, session: Session) -> bool:
        return self.runtime.now() >= session.expires_at - self.spec.session.pre_expiry_buffer

    def valid_until(self, session: Session) -> float:
        """Until when :meth:`usable` and not :meth:`needs_refresh` hold by
        the clock alone (revocation is asked on every request)."""
        until = session.expires_at - self.spec.session.pre_expiry_buffer
        max_age = self.spec.session.cookie.max_age
        return min(until, session.created + max_age) if max_age else until

    async def _redis_request(self, ctx: RequestContext, cookies: dict[str, str], store: RedisStore) -> Any:
        session_id = cookies.get(self.spec.session.cookie_name)
        try:
            session = await store.load(session_id) if session_id else None
        except StoreDown as exc:
            return unavailable(f"oidc: session store unreachable: {exc}")
        if session is not None and session_id and self.usable(session):
            if not self.needs_refresh(session):
                return self.allow(ctx, session)
            if self.spec.session.allow_refreshing and session.refresh_token:
                return await self._refresh(ctx, session, session_id, cookies)
        return await _login.start(self, ctx, cookies)

    def _redis_check(self, ctx: RequestContext, cookies: dict[str, str], store: RedisStore) -> Any:
        """A request with a Redis session: one GET (pipelined with the other
        reads of this reactor turn) and, for a valid session, the answer in
        its callback: no coroutine on this path."""
        session_id = cookies.get(self.spec.session.cookie_name)
        if not session_id:
            return Deferred.fromCoroutine(_login.start(self, ctx, cookies))
        d = store.load(session_id)
        d.addCallbacks(self._redis_loaded, self._redis_down, callbackArgs=(ctx, cookies, store))
        return d

    def _redis_loaded(self, session: Session | None, ctx: RequestContext, cookies: dict[str, str],
                      store: RedisStore) -> Any:
        if session is not None and self.usable(session) and not self.needs_refresh(session):
            return self.allow(ctx, session)
        # refresh, or a new login: the general path (it reads the session again)
        return Deferred.fromCoroutine(self._redis_request(ctx, cookies, store))

    @staticmethod
    def _redis_down(failure: Any) -> Any:
        failure.trap(StoreDown)
        return unavailable(f"oidc: session store unreachable: {failure.value}")

    async def _refresh(self, ctx: RequestContext, session: Session, session_id: str | None,
                       cookies: dict[str, str]) -> Any:
        try:
            fresh = await _login.refresh(self, session)
        except _login.ProviderDown as exc:
            return unavailable(f"oidc: refreshing the session failed: {exc}")
        if fresh is None:  # refused by the provider: log in again
            if isinstance(self.store, RedisStore) and session_id:
                try:
                    await self.store.delete(session_id)
                except StoreDown as exc:
                    return unavailable(f"oidc: session store unreachable: {exc}")
            return await _login.start(self, ctx, cookies)
        if isinstance(self.store, RedisStore):
            assert session_id is not None
            try:
                await self.store.save(session_id, fresh)
            except StoreDown as exc:
                return unavailable(f"oidc: session store unreachable: {exc}")
            return self.allow(ctx, fresh)
        # the refreshed session's cookie goes on the response of this very
        # request, whatever its method (the backend's answer, or the
        # gateway's if a later plugin refuses)
        lines = split_cookies(self.spec.session.cookie_name, self.store.seal(fresh), self.spec.session.cookie,
                              cookies)
        return self.allow(ctx, fresh, tuple((b"set-cookie", line) for line in lines))

    def allow(self, ctx: RequestContext, session: Session,
              response_headers: tuple[tuple[bytes, bytes], ...] = ()) -> AuthAllow:
        spec = self.spec
        headers: list[tuple[bytes, bytes | None]] = []
        raw = ctx.headers.getRawHeaders(b"cookie")
        if raw:
            headers.append((b"cookie", without_cookies(raw, frozenset((spec.session.cookie_name,
                                                                       self.login_cookie)))))
        if spec.id_token_header is not None:
            headers.append((spec.id_token_header, session.id_token.encode("ascii")))
        if spec.access_token_header is not None and session.access_token:
            value = session.access_token.encode("ascii")
            headers.append((spec.access_token_header, b"Bearer " + value if spec.bearer else value))
        claims = session.claims
        for ch in spec.claims_to_headers:
            data = claim_text(claims.get(ch.claim))
            if data is None:
                continue
            if ch.append:
                before = [v for k, v in headers if k == ch.header and v is not None] \
                    or ctx.headers.getRawHeaders(ch.header) or []
                data = b",".join([*before, data])
            headers.append((ch.header, data))
        sub = claims.get("sub")
        return make_allow(principal=sub if isinstance(sub, str) else None, headers=tuple(headers),
                          reason=f"oidc: session of {sub!r} from {spec.issuer_url}",
                          # Gloo's state: "jwt" is the raw ID token (its OPA guide decodes it with
                          # io.jwt.decode); "claims" its verified claims (twistgw's)
                          state=MappingProxyType({"jwt": session.id_token, "claims": dict(claims),
                                                  "issuer": spec.issuer_url}),
                          claims=dict(claims), claims_provider=spec.issuer_url, response_headers=response_headers)


class Admissions:
    """The last admissions of valid cookie-store sessions, by the exact
    ``Cookie`` header value they came with: a request carrying that same
    value again is admitted with the same answer (the same forwarded
    headers, claims and principal) without parsing the cookies, opening
    the AES-GCM seal, parsing the session or building the headers again.

    What an entry may skip is what depends on the header's bytes alone: the
    same bytes under the same key (one checker per configuration, so per
    key) open to the same session, hence the same answer. What it may not
    skip is asked on every hit: the path (the callback and logout
    endpoints come first), the clock (the entry is used only before the
    session needs refreshing and before the cookie's maxAge, whichever is
    first) and the provider's logouts (front-channel logout by ``sid`` or
    ID token). A configuration whose ``claimsToHeaders`` appends to a
    request header keeps none (that answer depends on other headers).
    Bounded: at most :data:`SIZE` entries of header values up to
    :data:`MAX_KEY` bytes, the oldest dropped first. See docs/decisions.md.
    """

    SIZE = 1024
    MAX_KEY = 8192

    def __init__(self) -> None:
        #: Cookie header value -> (valid until, sid, ID token id, answer)
        self.entries: dict[bytes, tuple[float, str | None, str, AuthAllow]] = {}

    @staticmethod
    def may_keep(spec: OidcSpec) -> bool:
        return not any(ch.append for ch in spec.claims_to_headers)

    def keep(self, header: bytes, until: float, session: Session, answer: AuthAllow) -> None:
        if len(header) > self.MAX_KEY:
            return
        entries = self.entries
        entries[header] = (until, session.sid, session.token_id, answer)
        if len(entries) > self.SIZE:
            del entries[next(iter(entries))]

    def forget(self, header: bytes) -> None:
        self.entries.pop(header, None)

