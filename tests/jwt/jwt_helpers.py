"""Keys, tokens, YAML and a changeable key-set server for the jwt tests."""

from __future__ import annotations

import textwrap

import base64
import functools
import json
import time
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from twisted.internet import reactor
from twisted.web import resource, server

import twistgw_jwt
from twistgw.sdk.testing import ChainTester
from twistgw_jwt import tools

ISSUER = "https://issuer.example.com"
URL = "http://api.example.com/api/pets"


# ---------------------------------------------------------------------------
# Keys (generated once per test session)
# ---------------------------------------------------------------------------


def private_key(kind: str = "rsa", n: int = 0) -> Any:
    """``kind``: rsa, rsa1024, ec256, ec384, ec521, ed25519. ``n`` picks another key."""
    return _private_key(kind, n)


@functools.lru_cache(maxsize=None)
def _private_key(kind: str, n: int) -> Any:
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind == "rsa1024":
        return rsa.generate_private_key(public_exponent=65537, key_size=1024)
    if kind.startswith("ec"):
        curve = {"ec256": ec.SECP256R1(), "ec384": ec.SECP384R1(), "ec521": ec.SECP521R1()}[kind]
        return ec.generate_private_key(curve)
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    raise ValueError(kind)


def private_pem(kind: str = "rsa", n: int = 0) -> bytes:
    return private_key(kind, n).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())


def public_pem(kind: str = "rsa", n: int = 0, fmt: str = "spki") -> str:
    pub = private_key(kind, n).public_key()
    f = (serialization.PublicFormat.PKCS1 if fmt == "pkcs1"
         else serialization.PublicFormat.SubjectPublicKeyInfo)
    return pub.public_bytes(serialization.Encoding.PEM, f).decode()


def public_der(kind: str = "rsa", n: int = 0) -> bytes:
    return private_key(kind, n).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def jwks(*specs: tuple[str, int, str | None]) -> dict[str, Any]:
    """A key set of ``(kind, n, kid)`` keys."""
    keys = []
    for kind, n, kid in specs:
        doc = tools.jwks_from_public_key(public_pem(kind, n).encode(), kid=kid or None)
        key = doc["keys"][0]
        if kid is None:
            del key["kid"]
        keys.append(key)
    return {"keys": keys}


def kid_of(kind: str = "rsa", n: int = 0) -> str:
    return tools.thumbprint(private_key(kind, n).public_key())


# ---------------------------------------------------------------------------
# Tokens
# ---------------------------------------------------------------------------


def b64(data: bytes | str | Any) -> str:
    if not isinstance(data, (bytes, str)):
        data = json.dumps(data, separators=(",", ":"))
    if isinstance(data, str):
        data = data.encode()
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(kind: str = "rsa", n: int = 0, iss: str = ISSUER, sub: str = "alice",
          ttl: int = 3600, kid: str | None = "", alg: str | None = None, **claims: Any) -> str:
    """A token signed by key ``(kind, n)`` with iat = now and exp = now + ttl.
    ``kid=""`` (default) uses the key's thumbprint (as ``twistgw token``
    does); None sends no kid; anything else is sent as is. (Signs with the
    key object: loading a PEM private key each time costs ~70 ms.)"""
    t = now()
    payload = {k: v for k, v in claims.items()}
    payload.update({"iss": iss, "sub": sub, "iat": t, "exp": t + ttl})
    return signed(payload, kind=kind, n=n, alg=alg, kid=kid)


def raw_token(header: Any, payload: Any, signature: bytes | str = b"sig") -> str:
    sig = signature if isinstance(signature, str) else b64(signature)
    h = header if isinstance(header, str) else b64(header)
    p = payload if isinstance(payload, str) else b64(payload)
    return f"{h}.{p}.{sig}"


def resign(tok: str, header: Any = None, payload: Any = None, kind: str = "rsa", n: int = 0,
           alg: str = "RS256") -> str:
    """Change the header/payload of a token and sign it again properly."""
    import jwt as pyjwt

    h_seg, p_seg, _ = tok.split(".")
    h = json.loads(base64.urlsafe_b64decode(h_seg + "==")) if header is None else header
    p = json.loads(base64.urlsafe_b64decode(p_seg + "==")) if payload is None else payload
    signing_input = f"{b64(h)}.{b64(p)}".encode()
    algo = pyjwt.algorithms.get_default_algorithms()[alg]
    sig = algo.sign(signing_input, private_key(kind, n))
    return f"{signing_input.decode()}.{b64(sig)}"


def now() -> int:
    return int(time.time())


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------


def upstream_doc(name: str, port: int, addr: str = "127.0.0.1") -> dict[str, Any]:
    return {
        "apiVersion": "core.vendor.io/v1", "kind": "Upstream",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"static": {"hosts": [{"addr": addr, "port": port}]}},
    }


def config(jwt_options: dict[str, Any], route_options: dict[str, Any] | None = None,
           extra_routes: list[dict[str, Any]] | None = None,
           upstreams: dict[str, int] | None = None) -> str:
    """YAML: one VirtualService for api.example.com with ``options.jwt``."""
    routes = list(extra_routes or [])
    r: dict[str, Any] = {"matchers": [{"prefix": "/"}],
                         "routeAction": {"single": {"upstream": {"name": "backend", "namespace": "default"}}}}
    if route_options is not None:
        r["options"] = route_options
    routes.append(r)
    docs = [upstream_doc("backend", 9)]
    for name, port in (upstreams or {}).items():
        docs.append(upstream_doc(name, port))
    docs.append({
        "apiVersion": "gateway.vendor.io/v1", "kind": "VirtualService",
        "metadata": {"name": "api", "namespace": "default"},
        "spec": {"virtualHost": {"domains": ["api.example.com"],
                                 "options": {"jwt": jwt_options}, "routes": routes}},
    })
    return yaml.safe_dump_all(docs, sort_keys=False)


def local_provider(key: str | None = None, issuer: str = ISSUER, **extra: Any) -> dict[str, Any]:
    return {"issuer": issuer, "jwks": {"local": {"key": key if key is not None else public_pem()}},
            **extra}


class _Clock:
    """The tests' wall clock; fixtures move it with
    ``monkeypatch.setattr(CLOCK, "now", ...)``."""

    now = staticmethod(time.time)


CLOCK = _Clock()


class ClockedJwtPlugin(twistgw_jwt.JwtPlugin):
    """The jwt plugin on the tests' clock (a class: every gateway or tester
    gets an instance of its own, as from the entry point)."""

    def __init__(self) -> None:
        super().__init__(now=lambda: CLOCK.now())


def make_tester(jwt_options: dict[str, Any], **kw: Any) -> ChainTester:
    return ChainTester.from_yaml(config(jwt_options, **kw), plugins=[("jwt", ClockedJwtPlugin)],
                                 load_entry_points=False)


def bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


def header(result: Any, name: bytes) -> bytes | None:
    for n, v in result.response_headers:
        if n.lower() == name:
            return v
    return None


# ---------------------------------------------------------------------------
# A key-set server whose answer can change at runtime
# ---------------------------------------------------------------------------


class KeySetResource(resource.Resource):
    """Serves ``body`` with ``status``; ``hang`` never answers. Records each
    request's path and Host."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.body = b'{"keys": []}'
        self.status = 200
        self.hang = False
        self.requests: list[tuple[bytes, bytes | None]] = []
        self.pending: list[server.Request] = []

    def set_keys(self, doc: Any) -> None:
        self.body = json.dumps(doc).encode() if not isinstance(doc, bytes) else doc
        self.status = 200
        self.hang = False

    def render_GET(self, request: server.Request) -> Any:
        host = request.requestHeaders.getRawHeaders(b"host")
        self.requests.append((request.uri, host[0] if host else None))
        if self.hang:
            self.pending.append(request)
            return server.NOT_DONE_YET
        request.setResponseCode(self.status)
        request.setHeader(b"content-type", b"application/json")
        return self.body


class KeySetServer:
    """A real HTTP server on loopback serving :class:`KeySetResource`
    (``port=0`` picks a free port; pass a port to come back on it)."""

    def __init__(self, port: int = 0, tls: Any = None) -> None:
        """``tls``: a :class:`support.pki.Issued` certificate to serve HTTPS with."""
        self.resource = KeySetResource()
        self.site = server.Site(self.resource)
        self.site.log = lambda request: None  # type: ignore[method-assign]
        if tls is None:
            self.listening = reactor.listenTCP(port, self.site, interface="127.0.0.1")
        else:
            from twisted.internet import ssl

            options = ssl.PrivateCertificate.loadPEM(tls.key_pem + tls.cert_pem).options()
            self.listening = reactor.listenSSL(port, self.site, options, interface="127.0.0.1")
        self.port = self.listening.getHost().port

    @property
    def count(self) -> int:
        return len(self.resource.requests)

    async def stop(self) -> None:
        if self.listening is not None:
            await self.listening.stopListening()
            self.listening = None
        for req in self.resource.pending:
            if req.channel is not None and req.channel.transport is not None:
                req.channel.transport.abortConnection()


def remote_provider(port_name: str = "jwks", url: str = "http://auth.example.com/keys.json",
                    issuer: str = ISSUER, **remote_extra: Any) -> dict[str, Any]:
    remote = {"upstreamRef": {"name": port_name, "namespace": "default"}, "url": url, **remote_extra}
    return {"issuer": issuer, "jwks": {"remote": remote}}


_DEFAULT_ALG = {"rsa": "RS256", "ec256": "ES256", "ec384": "ES384", "ec521": "ES512", "ed25519": "EdDSA"}


def signed(payload: Any, header: Any = None, kind: str = "rsa", n: int = 0,
           alg: str | None = None, kid: str | None = "") -> str:
    """Sign exactly this payload (and header, default ``{alg, typ, kid}``)."""
    import jwt as pyjwt

    alg = alg or _DEFAULT_ALG[kind]
    if header is None:
        header = {"alg": alg, "typ": "JWT"}
        if kid == "":
            header["kid"] = kid_of(kind, n)
        elif kid is not None:
            header["kid"] = kid
    signing_input = f"{b64(header)}.{b64(payload)}".encode()
    algo = pyjwt.algorithms.get_default_algorithms()[alg]
    sig = algo.sign(signing_input, private_key(kind, n))
    return f"{signing_input.decode()}.{b64(sig)}"


def claims(**extra: Any) -> dict[str, Any]:
    """A valid payload for ISSUER at the real current time."""
    t = now()
    return {"iss": ISSUER, "sub": "alice", "iat": t, "exp": t + 3600, **extra}


def _stop_deferred(self: KeySetServer) -> Any:
    from twisted.internet import defer

    return defer.ensureDeferred(self.stop())


KeySetServer.stop_deferred = _stop_deferred  # type: ignore[attr-defined]


def claim_routing_virtual_service(name: str) -> str:
    """The head of Gloo's JWT claim-routing guide's VirtualService, in
    namespace ``gloo-system``: provider ``solo`` (issuer ``solo.io``, key 0),
    the token in ``x-token`` or ``?token=``, the ``org`` claim copied to
    ``x-company``. The caller appends ``    routes:`` (at column 4)."""
    key = textwrap.indent(public_pem(), " " * 18)
    return textwrap.dedent(f"""\
        apiVersion: gateway.solo.io/v1
        kind: VirtualService
        metadata: {{name: {name}, namespace: gloo-system}}
        spec:
          virtualHost:
            domains: ['*']
            options:
              jwt:
                providers:
                  solo:
                    issuer: solo.io
                    tokenSource:
                      headers: [{{header: x-token}}]
                      queryParams: [token]
                    claimsToHeaders:
                    - claim: org
                      header: x-company
                    jwks:
                      local:
                        key: |
        """) + key
