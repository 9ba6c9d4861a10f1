"""What one LDAP config answers: the refusals (empty bodies, content-length
0), the verdict kept in the decision cache, and
the header values that carry names."""

from __future__ import annotations

from urllib.parse import quote

import attrs
from twistgw_extauth import AuthAllow, AuthDeny

from twistgw_ldap._metrics import DECISIONS, FORBIDDEN


def unauthorized(cfg_realm: str, reason: str) -> AuthDeny:
    DECISIONS.labels("unauthorized").inc()
    challenge = f'Basic realm="{cfg_realm}", charset="UTF-8"'.encode("ascii")
    return AuthDeny(401, b"", headers=((b"www-authenticate", challenge),), content_type=b"", reason=reason)


def forbidden(reason: str, principal: str | None = None) -> AuthDeny:
    """403: the user authenticated (``principal``) but is in no allowed group."""
    FORBIDDEN.inc()
    return AuthDeny(403, b"", content_type=b"", reason=reason, principal=principal)


def unavailable(reason: str) -> AuthDeny:
    DECISIONS.labels("fault").inc()
    return AuthDeny(503, b"", content_type=b"", reason=reason, error=True)


def internal_error(reason: str) -> AuthDeny:
    DECISIONS.labels("error").inc()
    return AuthDeny(500, b"", content_type=b"", reason=reason, error=True)


#: Printable ASCII but ``%`` and ``,``: kept as they are in a header value.
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in "%,")


def header_text(value: str) -> bytes:
    """A name for a header value: UTF-8, with ``%``, ``,``, control and
    non-ASCII characters (and leading/trailing spaces) percent-encoded, so a
    group's name can never add a list item, a header line or a space that
    disappears (decode with ``urllib.parse.unquote``)."""
    text = quote(value, safe=_HEADER_SAFE)
    if text.startswith(" ") or text.endswith(" "):
        stripped = text.strip(" ")
        lead = len(text) - len(text.lstrip(" "))
        trail = len(text) - len(text.rstrip(" ")) if stripped else 0
        text = "%20" * lead + stripped + "%20" * trail
    return text.encode("ascii")


@attrs.frozen
class Group:
    dn: str
    name: str
    level: int  # 1: the user is a member; 2: a member of a level-1 group...


@attrs.frozen
class Verdict:
    """A decision made against the directory, as the decision cache keeps it,
    with the answers it gives (made once, not per request)."""

    outcome: str  # "allowed" or "forbidden"
    reason: str  # for explain and logs; never holds the password
    user: str  # the principal: the canonical name (userSearch) or the cleaned name
    groups: tuple[str, ...] = ()  # the group names, sorted
    #: request headers to set (value) or remove (None) when admitted
    headers: tuple[tuple[bytes, bytes | None], ...] = ()
    #: the answer when just decided, and when found in the cache
    fresh: AuthAllow | AuthDeny = attrs.field(init=False, eq=False, repr=False)
    cached: AuthAllow | AuthDeny = attrs.field(init=False, eq=False, repr=False)

    @fresh.default
    def _fresh(self) -> AuthAllow | AuthDeny:
        return self._answer(False)

    @cached.default
    def _cached(self) -> AuthAllow | AuthDeny:
        return self._answer(True)

    def _answer(self, cached: bool) -> AuthAllow | AuthDeny:
        if self.outcome == "allowed":
            return AuthAllow(self.user, self.headers, f"LDAP: admitted{' (cached)' if cached else ''}: {self.reason}")
        return AuthDeny(403, b"", content_type=b"", reason=self.reason + (" (cached)" if cached else ""),
                        principal=self.user)
