"""gRPC semantics at the gateway's own answers (issue 33, item 3): a grpcio
client (HTTP/2, prior knowledge) calling through a ``twist twistgw`` process
gets, for every answer the gateway gives itself, the ``RpcError.code()``
Envoy's mapping gives (``Grpc::Utility::httpToGrpcStatus``): no route 404 →
UNIMPLEMENTED, JWT missing 401 → UNAUTHENTICATED, RBAC 403 →
PERMISSION_DENIED, rate limit 429 → UNAVAILABLE, no upstream 503 →
UNAVAILABLE, route timeout 504 → UNAVAILABLE; ``details()`` is the
answer's text. Calls that reach a gRPC service need the HTTP/2 upstream
(the ``h2up`` branch).
"""

from __future__ import annotations

import time
from typing import Any

import grpc
import jwt as pyjwt
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from h2support import Backend
from support.ports import free_port
from support.process import TwistGateway

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PUBLIC = KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                       serialization.PublicFormat.SubjectPublicKeyInfo).decode()
ISSUER = "https://issuer.example.com"


def route(prefix: str, upstream: str = "backend", **options: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"matchers": [{"prefix": prefix}],
                         "routeAction": {"single": {"upstream": {"name": upstream, "namespace": "default"}}}}
    if options:
        r["options"] = options
    return r


@pytest.fixture(scope="module")
def gw(tmp_path_factory: Any) -> Any:
    tmp = tmp_path_factory.mktemp("grpc")
    backend = Backend()
    jwt_options = {"providers": {"p": {"issuer": ISSUER, "jwks": {"local": {"key": PUBLIC}}}}}
    rbac = {"policies": {"admins": {"principals": [{"jwtPrincipal": {"claims": {"role": "admin"}}}]}}}
    docs = [
        {"apiVersion": "gloo.solo.io/v1", "kind": "Upstream", "metadata": {"name": name, "namespace": "default"},
         "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": port}]}}}
        for name, port in (("backend", backend.port), ("nobody", free_port()))
    ] + [{"apiVersion": "gateway.solo.io/v1", "kind": "VirtualService",
          "metadata": {"name": "grpc", "namespace": "default"},
          "spec": {"virtualHost": {"domains": ["*"], "routes": [
              route("/auth.Svc/", jwt=jwt_options, rbac=rbac),
              route("/limited.Svc/", localRatelimit={"maxTokens": 1, "tokensPerFill": 1, "fillInterval": "100s"}),
              route("/down.Svc/", upstream="nobody"),
              {**route("/slow.Svc/"), "options": {"timeout": "300ms", "prefixRewrite": "/slow?s=2&"}},
          ]}}}]
    (tmp / "cfg").mkdir()
    (tmp / "cfg" / "config.yaml").write_text(yaml.safe_dump_all(docs))
    with TwistGateway(tmp, str(tmp / "cfg")) as g:
        g.channel = grpc.insecure_channel(f"127.0.0.1:{g.port}")
        yield g
        g.channel.close()
    backend.close()


def call(gw: Any, method: str, metadata: tuple[tuple[str, str], ...] = ()) -> grpc.RpcError:
    stub = gw.channel.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as info:
        stub(b"\x08\x01", timeout=10, metadata=metadata)
    return info.value


def token(**claims: Any) -> str:
    now = int(time.time())
    return pyjwt.encode({"iss": ISSUER, "sub": "alice", "iat": now, "exp": now + 600, **claims}, KEY,
                        algorithm="RS256")


def test_no_route_is_unimplemented(gw: Any) -> None:
    assert call(gw, "/nowhere.Svc/Call").code() is grpc.StatusCode.UNIMPLEMENTED


def test_jwt_missing_is_unauthenticated(gw: Any) -> None:
    error = call(gw, "/auth.Svc/Call")
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "Jwt" in error.details() or "jwt" in error.details().lower(), error.details()


def test_rbac_refusal_is_permission_denied(gw: Any) -> None:
    error = call(gw, "/auth.Svc/Call", (("authorization", f"Bearer {token(role='viewer')}"),))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED


def test_rate_limit_is_unavailable(gw: Any) -> None:
    call(gw, "/limited.Svc/Call")  # the one token (the HTTP/1.1 backend's answer is no gRPC answer)
    assert call(gw, "/limited.Svc/Call").code() is grpc.StatusCode.UNAVAILABLE


def test_no_upstream_is_unavailable_with_envoys_text(gw: Any) -> None:
    error = call(gw, "/down.Svc/Call")
    assert error.code() is grpc.StatusCode.UNAVAILABLE
    assert "upstream connect error" in error.details() or "connection" in error.details(), error.details()


def test_route_timeout_is_unavailable(gw: Any) -> None:
    assert call(gw, "/slow.Svc/Call").code() is grpc.StatusCode.UNAVAILABLE
