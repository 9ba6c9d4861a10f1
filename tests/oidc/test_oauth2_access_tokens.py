"""``accessTokenValidation`` end to end: opaque access tokens from the real
provider checked by introspection (RFC 7662, client credentials from a
Secret) and its userinfo endpoint, JWT access tokens checked against the
provider's JWKS; the cache (negative results too, never past ``exp``),
required scopes, claims as upstream headers."""

from __future__ import annotations

import time
from typing import Any, Iterator

import jwt
import pytest
from oidc_support import Browser, login, new_rsa_key, seen
from stack import Stack

API = {"Accept": "application/json"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: Any) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("oauth2-tokens"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def access_token(stack: Stack) -> str:
    """An opaque access token the provider issued to alice (scopes openid email groups offline_access)."""
    _, final = login(Browser(), stack.url("/redis/x"), stack.host)
    return seen(final)["x-access-token"][0].removeprefix("Bearer ")


def call(stack: Stack, path: str, token: str | None, **headers: str) -> Any:
    h = dict(API, **headers)
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    return Browser().get(stack.url(path), headers=h, cookies=False)


def test_introspection_admits_and_sets_headers(stack: Stack, access_token: str) -> None:
    r = call(stack, "/api/orders", access_token)
    got = seen(r)
    assert got["x-token-sub"] == ["alice"]
    assert got["x-token-email"] == ["alice@example.org"]  # from the userinfo endpoint
    assert "authorization" not in got  # the credential was consumed
    request = stack.introspection.seen[-1]
    assert request["form"]["token"] == access_token
    assert request["headers"]["Authorization"].startswith("Basic ")  # client credentials from the Secret


def test_introspection_is_cached(stack: Stack, access_token: str) -> None:
    call(stack, "/api/a", access_token)
    before = len(stack.introspection.seen)
    for _ in range(5):
        assert call(stack, "/api/b", access_token).status == 200
    assert len(stack.introspection.seen) == before


def test_unknown_token_refused_and_negative_result_cached(stack: Stack) -> None:
    before = len(stack.introspection.seen)
    for _ in range(3):
        r = call(stack, "/api/c", "not-a-token-the-provider-issued")
        assert r.status == 401 and 'error="invalid_token"' in (r.header("www-authenticate") or "")
    assert len(stack.introspection.seen) == before + 1


def test_missing_or_double_token(stack: Stack, access_token: str) -> None:
    assert call(stack, "/api/d", None).status == 401
    r = Browser().request("GET", stack.url("/api/d"), cookies=False, headers={**API, "Authorization": "Basic eDp5"})
    assert r.status == 401


def test_introspection_down_is_503_and_not_cached(stack: Stack) -> None:
    stack.introspection.down = True
    try:
        assert call(stack, "/api/e", "token-seen-while-down").status == 503
    finally:
        stack.introspection.down = False
    assert call(stack, "/api/e", "token-seen-while-down").status == 401  # asked again: not active


def jwt_token(stack: Stack, **changes: Any) -> str:
    now = int(time.time())
    claims = {"iss": stack.idp.issuers["a"], "aud": "api", "sub": "svc-1", "scope": "read write",
              "iat": now, "exp": now + 60}
    claims.update(changes)
    key = claims.pop("key", None)
    return stack.idp.sign("a", {k: v for k, v in claims.items() if v is not None}, key=key)


def test_jwt_access_tokens(stack: Stack) -> None:
    got = seen(call(stack, "/jwtapi/x", jwt_token(stack)))
    assert got["x-token-sub"] == ["svc-1"]
    for bad in (jwt_token(stack, aud="other"), jwt_token(stack, iss=stack.idp.issuers["b"]),
                jwt_token(stack, key=new_rsa_key()), jwt_token(stack, exp=int(time.time()) - 120),
                jwt.encode({"iss": stack.idp.issuers["a"], "aud": "api", "sub": "x"}, None, algorithm="none"),
                "garbage"):
        assert call(stack, "/jwtapi/x", bad).status == 401, bad[:40]
    r = call(stack, "/jwtapi/x", jwt_token(stack, scope="write"))
    assert r.status == 403 and 'insufficient_scope' in (r.header("www-authenticate") or "")


def test_cache_never_outlives_exp(stack: Stack) -> None:
    """A 2-second token (client short-app): cached while active, asked again
    once its exp has passed (cacheTimeout is 30 s), and then refused."""
    _, final = login(Browser(), stack.url("/short/x"), stack.host)
    token = seen(final)["x-access-token"][0].removeprefix("Bearer ")
    assert call(stack, "/api/short", token).status == 200
    before = len(stack.introspection.seen)
    assert call(stack, "/api/short", token).status == 200
    assert len(stack.introspection.seen) == before  # cached
    time.sleep(2.5)
    assert call(stack, "/api/short", token).status == 401
    assert len(stack.introspection.seen) == before + 1
