"""Revoking a session's tokens at logout (RFC 7009), as Gloo's extauth does.

When a session ends by ``logoutPath`` or front-channel logout, its refresh
token and access token are revoked at the provider's
``revocation_endpoint`` (from discovery, or
``discoveryOverride.revocationEndpoint``), authenticating the client as the
token endpoint does. It is best effort and never holds the logout up for
long: the logout's answer waits for the revocation at most
:data:`WAIT_SECONDS`; a revocation still running then goes on in the
background until the provider call's own timeout. A refusal, an error or a
timeout is logged (Gloo's rule: the user is logged out all the same, and the
tokens are not revoked again; the log says which to revoke by hand). A
provider without a revocation endpoint: nothing is sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from twistgw_oidc._http import CallFailed
from twistgw_oidc._login import ProviderDown, client_authentication
from twistgw_oidc._session import Session

if TYPE_CHECKING:
    from twistgw_oidc._flow import OidcChecker

#: The longest a logout's answer waits for the revocation of its tokens.
WAIT_SECONDS = 1.0

_log = Logger(namespace="twistgw_oidc")


def start(ch: "OidcChecker", sessions: Iterable[Session]) -> Deferred[None] | None:
    """Revoke the tokens of ``sessions`` (this config's only), in the
    background; None when there is nothing to revoke."""
    tokens = [(token, hint) for s in sessions if s.binding == ch.spec.binding
              for token, hint in ((s.refresh_token, "refresh_token"), (s.access_token, "access_token")) if token]
    if not tokens:
        return None
    return Deferred.fromCoroutine(_revoke_all(ch, tokens))


async def bounded(ch: "OidcChecker", pending: Deferred[None] | None) -> None:
    """Wait for ``pending`` at most :data:`WAIT_SECONDS` (never cancelling it)."""
    if pending is None or pending.called:
        return
    waiter: Deferred[None] = Deferred()

    def wake(result: Any = None) -> Any:
        if not waiter.called:
            waiter.callback(None)
        return result

    timer = ch.runtime.get_reactor().callLater(min(WAIT_SECONDS, ch.spec.timeout), wake)
    pending.addBoth(wake)
    await waiter
    if timer.active():
        timer.cancel()


async def _revoke_all(ch: "OidcChecker", tokens: list[tuple[str, str]]) -> None:
    spec = ch.spec
    doc = ch.provider.doc_now() or await ch.provider.get()
    if doc is None:
        _log.warn("OIDC logout: tokens of {issuer} not revoked: the discovery document is unavailable",
                  issuer=spec.issuer_url)
        return
    endpoint = doc.get("revocation_endpoint")
    if not endpoint:
        return
    calls = []
    for token, hint in tokens:
        form = {"token": token, "token_type_hint": hint}
        try:
            headers = client_authentication(spec, doc, form)
        except ProviderDown as exc:
            _log.warn("OIDC logout: the {hint} was not revoked at {endpoint}: {problem}", hint=hint,
                      endpoint=endpoint, problem=str(exc))
            return
        calls.append(Deferred.fromCoroutine(_revoke_one(ch, endpoint, hint, form, headers)))
    await DeferredList(calls, consumeErrors=True)


async def _revoke_one(ch: "OidcChecker", endpoint: str, hint: str, form: dict[str, str],
                      headers: dict[bytes, bytes]) -> None:
    try:
        answer = await ch.runtime.client().call("POST", endpoint, ch.spec.timeout, form=form, headers=headers)
    except CallFailed as exc:
        _log.warn("OIDC logout: the {hint} was not revoked (revoke it at the provider): {problem}", hint=hint,
                  problem=str(exc))
        return
    except Exception:  # a bug here must not reach the logout
        _log.failure("OIDC logout: revoking the {hint} at {endpoint} failed unexpectedly", hint=hint,
                     endpoint=endpoint)
        return
    if answer.status != 200:
        _log.warn("OIDC logout: the {hint} was not revoked: {endpoint} answered {status} (revoke it at the"
                  " provider)", hint=hint, endpoint=endpoint, status=answer.status)
