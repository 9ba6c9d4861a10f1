"""Logout revokes the session's tokens at the provider (issue 32 item 8),
and ``input.state`` after an OIDC login or an access token (item 9), with
the real OpenID provider (oidc-provider, its revocation and introspection
features on) and the gateway as its own process.

After ``logoutPath`` answers, the provider's introspection endpoint says
the refresh and access tokens are no longer active; a revocation endpoint
that hangs or fails never holds the logout up (it answers within a second
or so) and the failure is logged.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any, Iterator

import pytest
from oidc_support import Browser, login, seen
from stack import Stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: Any) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("oidc-revocation"))
    yield s
    s.close()


def _logged_in(stack: Stack, prefix: str, user: str = "alice") -> tuple[Browser, dict[str, list[str]]]:
    b = Browser()
    _, final = login(b, stack.url(f"/{prefix}/x"), stack.host, user)
    return b, seen(final)


def _log_lines(stack: Stack) -> list[str]:
    """The gateway's log, each event formatted (twist writes JSON lines to a file)."""
    from twisted.logger import eventFromJSON, formatEvent

    out = []
    for line in stack.gateway.log_text().splitlines():
        try:
            out.append(formatEvent(eventFromJSON(line)) or "")
        except ValueError:
            out.append(line)
    return out


def _sid(id_token: str) -> str:
    payload = id_token.split(".")[1]
    return str(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["sid"])


@pytest.mark.parametrize("prefix, cookie", [("cookie", "c_session"), ("redis", "r_session")])
def test_logout_revokes_the_refresh_and_access_tokens(stack: Stack, prefix: str, cookie: str) -> None:
    b, _ = _logged_in(stack, prefix)
    jar = b.cookies("localhost")
    access, refresh = stack.sealed_tokens(cookie, jar) if prefix == "cookie" else stack.redis_tokens(jar[cookie])
    assert stack.active(access, "access_token") and stack.active(refresh, "refresh_token")
    out = b.get(stack.url(f"/{prefix}/logout"))
    assert out.status == 302 and "/session/end" in out.location, out
    assert cookie not in b.cookies("localhost")
    # the answer came after the provider revoked them (the provider's own logout was not even asked)
    assert not stack.active(refresh, "refresh_token")
    assert not stack.active(access, "access_token")


def test_client_secret_post_as_at_the_token_endpoint(stack: Stack) -> None:
    """Issuer b allows only client_secret_post: the revocation authenticates the same way."""
    b, _ = _logged_in(stack, "b")
    access, refresh = stack.sealed_tokens("b_session", b.cookies("localhost"))
    assert stack.active(refresh, "refresh_token", issuer="b")
    assert b.get(stack.url("/b/logout")).status == 302
    assert not stack.active(refresh, "refresh_token", issuer="b")
    assert not stack.active(access, "access_token", issuer="b")


def test_revocation_endpoint_override_is_used(stack: Stack) -> None:
    stack.revoker.mode, stack.revoker.seen[:] = "forward", []
    b, _ = _logged_in(stack, "rev")
    access, refresh = stack.sealed_tokens("rv_session", b.cookies("localhost"))
    assert b.get(stack.url("/rev/logout")).status == 302
    sent = sorted((r["form"]["token_type_hint"], r["form"]["token"]) for r in stack.revoker.seen)
    assert sent == [("access_token", access), ("refresh_token", refresh)]
    # client_secret_basic, as the token endpoint is asked; the secret never in the form
    assert all(r["headers"]["Authorization"] == "Basic " + base64.b64encode(b"app:app-secret-1").decode()
               and "client_secret" not in r["form"] for r in stack.revoker.seen)
    assert not stack.active(refresh, "refresh_token") and not stack.active(access, "access_token")


@pytest.mark.parametrize("mode, logged", [("hang", "no answer within 5s"), ("fail", "answered 500")])
def test_a_broken_revocation_endpoint_never_holds_the_logout(stack: Stack, mode: str, logged: str) -> None:
    stack.revoker.mode, stack.revoker.seen[:] = mode, []
    try:
        b, _ = _logged_in(stack, "rev")
        _access, refresh = stack.sealed_tokens("rv_session", b.cookies("localhost"))
        started = time.monotonic()
        out = b.get(stack.url("/rev/logout"))
        took = time.monotonic() - started
        assert out.status == 302 and "/session/end" in out.location, out
        assert "rv_session" not in b.cookies("localhost")
        assert took < 2.0, f"the logout took {took:.2f}s"
        assert len(stack.revoker.seen) == 2
        # logged as not revoked, naming the token to revoke by hand
        deadline = time.monotonic() + 10
        lines: list[str] = []
        while time.monotonic() < deadline and not any(logged in line for line in lines):
            time.sleep(0.2)
            lines = [line for line in _log_lines(stack) if "was not revoked" in line]
        assert any(logged in line and "refresh_token" in line for line in lines), lines
        assert stack.active(refresh, "refresh_token")  # nothing revoked it (Gloo: no retry)
    finally:
        stack.revoker.mode = "forward"


def test_front_channel_logout_revokes_every_session_of_the_sid(stack: Stack) -> None:
    b, _ = _logged_in(stack, "redis")
    session_id = b.cookies("localhost")["r_session"]
    access, refresh = stack.redis_tokens(session_id)
    key = "twistgw-test:session:" + __import__("hashlib").sha256(session_id.encode()).hexdigest()
    sid = _sid(json.loads(stack.redis.command("GET", key))["i"])
    other = Browser()  # the provider calls the frame without the user's cookies
    out = other.get(stack.url(f"/redis/fcl?iss={stack.idp.issuers['a']}&sid={sid}"))
    assert out.status == 200
    assert not stack.active(refresh, "refresh_token") and not stack.active(access, "access_token")


# ---------------------------------------------------------------------------
# input.state for OPA (issue 32 item 9)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("user, path, status", [
    ("admin", "/owners/1", 200),
    ("user", "/opa/vets", 200),
    ("user", "/owners/1", 403),  # the guide: user@example.com, not under /owners
    ("alice", "/opa/vets", 403),
])
def test_gloo_opa_guide_policy_verbatim_after_a_real_login(stack: Stack, user: str, path: str, status: int) -> None:
    """The AuthConfig of Gloo's guide (oidcAuthorizationCode, then opaAuth)
    with its check-jwt.rego verbatim: ``input.state.jwt`` is the raw ID
    token, which the policy decodes with ``io.jwt.decode``."""
    b = Browser()
    _, final = login(b, stack.url(path), stack.host, user)
    assert final.status == status, (final, final.body[:300])


def test_state_after_a_jwt_access_token(stack: Stack) -> None:
    """accessTokenValidation.jwt leaves its claims at ``input.state.jwtAccessToken``
    (Gloo's key) and ``input.state.claims``; ``input.state.jwt`` is not set."""
    issuer = stack.idp.issuers["a"]
    now = int(time.time())

    def token(sub: str) -> dict[str, str]:
        signed = stack.idp.sign("a", {"iss": issuer, "aud": "api", "sub": sub, "iat": now, "exp": now + 300})
        return {"Authorization": f"Bearer {signed}"}

    b = Browser()
    assert b.get(stack.url("/jwtopa/x"), headers=token("svc-1"), cookies=False).status == 200
    assert b.get(stack.url("/jwtopa/x"), headers=token("svc-2"), cookies=False).status == 403
