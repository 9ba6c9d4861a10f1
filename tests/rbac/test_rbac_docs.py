"""The worked example of docs/rbac.md, end to end through the real proxy.

Runs twice: with the test stand-in for the jwt plugin (claims from a header),
and with the real ``jwt`` plugin and RS256 tokens signed by the key whose
public half is printed in the doc (skipped until that plugin exists).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import pytest
import pytest_twisted
from support.http import http_request
from rbac_helpers import claims_headers, fakejwt

import twistgw_rbac

HERE = os.path.dirname(__file__)
DOC = os.path.join(HERE, "..", "..", "docs", "rbac.md")
MARK = "<!-- example: rbac-worked-example"


def doc_example() -> str:
    text = open(DOC, encoding="utf-8").read()
    after = text.split(MARK, 1)[1]
    block = re.search(r"```yaml\n(.*?)```", after, re.S)
    assert block is not None
    return block.group(1)


def real_jwt_plugin() -> Any:
    try:
        import twistgw_jwt
    except ImportError:
        return None
    return getattr(twistgw_jwt, "JwtPlugin", None)


def sa(namespace: str, name: str) -> dict[str, Any]:
    return {
        "iss": "kubernetes/serviceaccount",
        "sub": f"system:serviceaccount:{namespace}:{name}",
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name}},
    }


def sign(claims: dict[str, Any]) -> str:
    import jwt as pyjwt

    with open(os.path.join(HERE, "docs_example_key.pem"), "rb") as f:
        key = f.read()
    now = int(time.time())
    return pyjwt.encode({**claims, "iat": now, "exp": now + 600}, key, algorithm="RS256")


# (method, path, service account or None, status, body or None) — the doc's table
TABLE = [
    ("POST", "/api/deployments", ("ci", "deployer"), 200),
    ("GET", "/api/deployments", ("ci", "deployer"), 403),
    ("GET", "/api/pets", ("shop", "web"), 200),
    ("HEAD", "/api/pets", ("shop", "web"), 200),
    ("DELETE", "/api/pets/1", ("shop", "web"), 403),
    ("GET", "/api/pets/../../admin", ("shop", "web"), 403),
    ("GET", "/admin", ("ops", "admin"), 200),
    ("GET", "/admin", ("ci", "deployer"), 403),
    ("GET", "/healthz", None, 401),
    ("GET", "/api/pets", None, 401),
]


@pytest.mark.parametrize("mode", ["stand-in", "real-jwt"])
@pytest_twisted.ensureDeferred
async def test_worked_example(mode: str, backend: Any, config_dir: Any, gateway: Any) -> None:
    if mode == "real-jwt":
        jwt_plugin = real_jwt_plugin()
        if jwt_plugin is None:
            pytest.skip("the jwt plugin is not written yet")
    else:
        jwt_plugin = fakejwt
    yaml_text = doc_example().replace("port: 8080", f"port: {backend.port}")
    assert f"port: {backend.port}" in yaml_text
    gw = gateway(config_dir(yaml_text), plugins=[("jwt", jwt_plugin), ("rbac", twistgw_rbac)])

    for method, path, account, expected in TABLE:
        headers: dict[str, str] = {}
        if account is not None:
            claims = sa(*account)
            if mode == "real-jwt":
                headers["Authorization"] = f"Bearer {sign(claims)}"
            else:
                headers = claims_headers(claims, provider="kube")
        seen = len(backend.requests)
        r = await http_request(method, gw.url(path), headers=headers)
        assert r.status == expected, (method, path, account, r.status, r.body)
        if expected == 403:
            assert r.body == b"RBAC: access denied"
            assert r.header("content-type") == "text/plain"
        if expected == 401:
            assert r.body == b"Jwt is missing"
        if expected == 200:
            assert len(backend.requests) == seen + 1
        else:
            assert len(backend.requests) == seen  # nothing reached the backend
