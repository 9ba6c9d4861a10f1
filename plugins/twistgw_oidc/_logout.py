"""``logoutPath`` (RP-initiated logout) and ``frontChannelLogout``.

Logout clears the session here (the Redis key is deleted; the cookies are
expired), revokes its refresh and access tokens at the provider's
``revocation_endpoint`` (:mod:`._revoke`: best effort, the answer waits for
it at most a second) and sends the browser to the provider's ``end_session_endpoint``
with ``id_token_hint`` and ``post_logout_redirect_uri=afterLogoutUrl``, or
straight to ``afterLogoutUrl`` when the provider has none. The target is
configuration only: no request parameter can change it. A logout the
browser marks as cross-site (``Sec-Fetch-Site``, ``Origin``) is refused, so
another site cannot log a user out.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from twistgw import AuthDeny, RequestContext
from twistgw_oidc import _revoke
from twistgw_oidc._cookies import delete_cookie, delete_split, joined_value, parse_cookie_header
from twistgw_oidc._options import origin
from twistgw_oidc._session import RedisStore, Session, StoreDown

if TYPE_CHECKING:
    from twistgw_oidc._flow import OidcChecker

NO_STORE = (b"cache-control", b"no-store")


def cross_site(ctx: RequestContext, app_origin: str) -> bool:
    site = ctx.header("sec-fetch-site")
    if site is not None and site.strip().lower() not in ("same-origin", "none"):
        return True
    sent = ctx.header("origin")
    return sent is not None and (sent.strip() == "null" or origin(sent.strip()) != app_origin)


async def logout(ch: "OidcChecker", ctx: RequestContext) -> AuthDeny:
    spec = ch.spec
    if cross_site(ctx, spec.app_origin):
        return AuthDeny(403, b"Logout refused: cross-site request", headers=(NO_STORE,),
                        reason="oidc: cross-site logout refused")
    cookies = parse_cookie_header(ctx.headers.getRawHeaders(b"cookie") or ())
    name = spec.session.cookie_name
    id_token = None
    ended: Session | None = None
    if isinstance(ch.store, RedisStore):
        session_id = cookies.get(name)
        if session_id:
            try:
                session = await ch.store.load(session_id)
                await ch.store.delete(session_id)
            except StoreDown as exc:
                return AuthDeny.failure(f"oidc: session store unreachable, session not cleared: {exc}", 503)
            if session is not None and session.binding == spec.binding:
                id_token, ended = session.id_token, session
        lines = [delete_cookie(name, spec.session.cookie)]
    else:
        value = joined_value(cookies, name)
        session = ch.store.open(value) if value else None
        if session is not None and session.binding == spec.binding:
            id_token, ended = session.id_token, session
            # a copy of this cookie stays refused by this process (the cookie store keeps no server state)
            until = session.created + (spec.session.cookie.max_age or 86400)
            for name_ in (session.sid, session.token_id):
                if name_:
                    ch.runtime.revoke(spec.binding, name_, until)
        lines = delete_split(name, spec.session.cookie, cookies)
    await _revoke.bounded(ch, _revoke.start(ch, [ended] if ended is not None else []))
    headers = [NO_STORE, *((b"set-cookie", line) for line in lines)]
    doc = ch.provider.doc_now()
    end = doc.get("end_session_endpoint") if doc else None
    if not end:
        return AuthDeny(302, b"", headers=((b"location", spec.after_logout_url.encode("latin-1")), *headers),
                        content_type=b"", reason="oidc: logged out")
    params = [("client_id", spec.client_id), ("post_logout_redirect_uri", spec.after_logout_url)]
    if id_token:
        params.insert(0, ("id_token_hint", id_token))
    if spec.end_session_post:
        fields = "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in params)
        page = (f'<!DOCTYPE html><html><body onload="document.forms[0].submit()"><form method="post"'
                f' action="{html.escape(end)}">{fields}<noscript><button>Log out</button></noscript></form>'
                "</body></html>").encode("utf-8")
        return AuthDeny(200, page, headers=tuple(headers), content_type=b"text/html; charset=utf-8",
                        reason="oidc: logged out")
    url = end + ("&" if "?" in end else "?") + urlencode(params)
    return AuthDeny(302, b"", headers=((b"location", url.encode("ascii")), *headers), content_type=b"",
                    reason="oidc: logged out; ending the session at the provider")


async def front_channel(ch: "OidcChecker", ctx: RequestContext) -> AuthDeny:
    """The provider's front-channel logout (an iframe it loads, with ``iss``
    and ``sid``): every session of that ``sid`` ends, in every browser."""
    spec = ch.spec
    params = dict(ctx.query_params())
    iss, sid = params.get("iss"), params.get("sid")
    doc = ch.provider.doc_now()
    issuer = doc["issuer"] if doc else spec.issuer_url
    if iss is not None and iss != issuer:
        return AuthDeny(400, b"Logout for another provider", headers=(NO_STORE,), reason="oidc: front-channel iss")
    cookies = parse_cookie_header(ctx.headers.getRawHeaders(b"cookie") or ())
    ended: list[Session] = []
    if sid:
        if isinstance(ch.store, RedisStore):
            try:
                ended = await ch.store.delete_sid(sid)
            except StoreDown as exc:
                return AuthDeny.failure(f"oidc: session store unreachable: {exc}", 503)
        else:
            max_age = spec.session.cookie.max_age or 86400
            ch.runtime.revoke(spec.binding, sid, ch.runtime.now() + max_age)
            # the browser's own session, when the provider's frame carries its cookie
            value = joined_value(cookies, spec.session.cookie_name)
            own = ch.store.open(value) if value else None
            if own is not None and own.sid == sid:
                ended = [own]
    await _revoke.bounded(ch, _revoke.start(ch, ended))
    lines = delete_split(spec.session.cookie_name, spec.session.cookie, cookies) \
        if spec.session.cookie_name in cookies else []
    return AuthDeny(200, b"", headers=(NO_STORE, *((b"set-cookie", line) for line in lines)), content_type=b"",
                    reason=f"oidc: front-channel logout of sid {sid!r}")
