"""The real parts of the OIDC tests: the OpenID provider (panva/oidc-provider
under Node.js, ``tests/oidc/idp/idp.mjs``), an HTTP client that logs in
through it as a browser would (cookies, redirects followed by hand), and an
attacker that sits between the gateway and the provider's token endpoint.

These helpers block: use them in plain (synchronous) tests and fixtures.
The gateway runs as its own process (:class:`support.process.TwistGateway`).

A missing ``node`` or a missing ``tests/oidc/idp/node_modules`` raises
:class:`IdpMissing`: the suite fails, it never skips (``.ci/run`` runs
``npm ci`` in ``tests/oidc/idp``).
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

IDP_DIR = Path(__file__).resolve().parent / "idp"

__all__ = ["Browser", "Idp", "IdpMissing", "TokenTamperer", "login", "new_ec_key", "new_rsa_key", "private_jwk",
           "public_jwks", "seen"]


class IdpMissing(RuntimeError):
    pass


# ---------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------


def new_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def new_ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def private_jwk(key: Any, kid: str) -> dict[str, Any]:
    alg = RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else ECAlgorithm
    jwk = json.loads(alg.to_jwk(key))
    jwk.pop("key_ops", None)  # PyJWT writes ["sign"]: a published key must not say so
    jwk.update(kid=kid, use="sig", alg="RS256" if alg is RSAAlgorithm else "ES256")
    return jwk


def public_jwks(*pairs: tuple[Any, str]) -> dict[str, Any]:
    keys = []
    for key, kid in pairs:
        jwk = private_jwk(key.public_key() if hasattr(key, "public_key") else key, kid)
        for private in ("d", "p", "q", "dp", "dq", "qi"):
            jwk.pop(private, None)
        keys.append(jwk)
    return {"keys": keys}


# ---------------------------------------------------------------------------
# The provider
# ---------------------------------------------------------------------------

USERS = {
    "alice": {"password": "wonderland", "claims": {
        "email": "alice@example.org", "email_verified": True, "name": "Alice", "groups": ["admins", "staff"]}},
    "bob": {"password": "builder", "claims": {
        "email": "bob@example.org", "email_verified": True, "name": "Bob", "groups": ["staff"]}},
    # the two users of Gloo's OPA-over-OIDC guide policy
    "admin": {"password": "admin-pw", "claims": {"email": "admin@example.com", "email_verified": True}},
    "user": {"password": "user-pw", "claims": {"email": "user@example.com", "email_verified": True}},
}


def client(client_id: str, secret: str, redirect_uris: list[str], post_logout: list[str] = (),  # type: ignore[assignment]
           auth_method: str = "client_secret_basic") -> dict[str, Any]:
    return {
        "client_id": client_id, "client_secret": secret, "redirect_uris": list(redirect_uris),
        "post_logout_redirect_uris": list(post_logout), "token_endpoint_auth_method": auth_method,
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "scope": "openid offline_access email profile groups",
        # never called by the provider in these tests; with session_required, ID tokens carry "sid"
        "backchannel_logout_uri": redirect_uris[0].rsplit("/", 1)[0] + "/backchannel",
        "backchannel_logout_session_required": True,
    }


class Idp:
    """``node idp.mjs`` with two issuers (``a`` and ``b``), stopped by pid.

    ``issuers`` lists ``(name, clients)``; each issuer signs with its own
    RSA key (:attr:`keys` by name, so tests can sign tokens as the issuer).
    ``auth_methods`` (by issuer name) restricts the token endpoint's client
    authentication methods its discovery document lists.
    """

    def __init__(self, directory: Path, issuers: list[tuple[str, list[dict[str, Any]]]],
                 auth_methods: dict[str, list[str]] | None = None) -> None:
        node = shutil.which("node")
        if node is None:
            raise IdpMissing("node not found: the OIDC tests run oidc-provider under Node.js"
                             " (apt-get install nodejs npm)")
        if not (IDP_DIR / "node_modules" / "oidc-provider").is_dir():
            raise IdpMissing(f"oidc-provider is not installed: run `npm ci` in {IDP_DIR}")
        self.node = node
        self.directory = Path(directory)
        self.keys = {name: new_rsa_key() for name, _ in issuers}
        config = {
            "issuers": [{"name": name, "clients": clients,
                         "keys": {"keys": [private_jwk(self.keys[name], f"{name}-1")]},
                         **({"clientAuthMethods": (auth_methods or {})[name]} if name in (auth_methods or {})
                            else {})}
                        for name, clients in issuers],
            "users": USERS,
        }
        self.config_path = self.directory / "idp.json"
        self.config_path.write_text(json.dumps(config))
        self.process: subprocess.Popen[bytes] | None = None
        self.issuers: dict[str, str] = {}
        self.log_path = self.directory / "idp.log"

    def start(self) -> "Idp":
        """Start; after a :meth:`stop`, again on the same ports (a fresh
        provider: its sessions and codes are gone, its keys are the same)."""
        if self.issuers:
            config = json.loads(self.config_path.read_text())
            for issuer in config["issuers"]:
                issuer["port"] = urlsplit(self.issuers[issuer["name"]]).port
            self.config_path.write_text(json.dumps(config))
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen([self.node, str(IDP_DIR / "idp.mjs"), str(self.config_path)],
                                        cwd=IDP_DIR, stdout=subprocess.PIPE, stderr=log)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(5)
            raise AssertionError("the OpenID provider did not start:\n" + self.log_path.read_text())
        ready = json.loads(line)
        self.issuers = ready["issuers"]
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def sign(self, issuer: str, claims: dict[str, Any], key: Any = None, alg: str = "RS256",
             kid: str | None = None) -> str:
        """A token signed as issuer ``issuer`` would (or with ``key``)."""
        return jwt.encode(claims, key if key is not None else self.keys[issuer], algorithm=alg,
                          headers={"kid": kid if kid is not None else f"{issuer}-1"})


# ---------------------------------------------------------------------------
# A scripted browser: cookies and redirects by hand, over http.client
# ---------------------------------------------------------------------------


class Response:
    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes, url: str) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.url = url

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def header_values(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    @property
    def location(self) -> str:
        value = self.header("location")
        assert value is not None, f"no Location in a {self.status} answer: {self.body[:300]!r}"
        return urljoin(self.url, value)

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Response {self.status} {self.url}>"


class Browser:
    """What a browser does that the flow needs: a cookie jar per host (the
    gateway at ``localhost``, the provider at ``127.0.0.1``, so their cookies
    never mix), and redirects followed by hand. Honours ``Path`` and
    ``Max-Age=0`` (deletion); ignores ``Secure`` (tests run over http)."""

    def __init__(self) -> None:
        self.jar: dict[str, dict[str, str]] = {}
        self.set_cookie_lines: list[str] = []

    def cookies(self, host: str) -> dict[str, str]:
        return self.jar.setdefault(host, {})

    def _store(self, host: str, lines: list[str]) -> None:
        jar = self.cookies(host)
        for line in lines:
            self.set_cookie_lines.append(line)
            name, _, rest = line.partition("=")
            value = rest.split(";", 1)[0]
            attrs = [a.strip().lower() for a in rest.split(";")[1:]]
            if "max-age=0" in attrs or any(a.startswith("expires=thu, 01 jan 1970") for a in attrs):
                jar.pop(name.strip(), None)
            else:
                jar[name.strip()] = value

    def request(self, method: str, url: str, headers: dict[str, str] | None = None,
                body: bytes | None = None, cookies: bool = True) -> Response:
        parts = urlsplit(url)
        host = parts.hostname or ""
        conn = http.client.HTTPConnection("127.0.0.1", parts.port or 80, timeout=15)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        hdrs = {"Host": parts.netloc, "Accept": "text/html,application/xhtml+xml",
                "User-Agent": "twistgw-tests"}
        hdrs.update(headers or {})
        jar = self.cookies(host)
        if cookies and jar and "Cookie" not in hdrs:
            hdrs["Cookie"] = "; ".join(f"{k}={v}" for k, v in jar.items())
        try:
            conn.request(method, target, body=body, headers=hdrs)
            r = conn.getresponse()
            data = r.read()
            response = Response(r.status, r.getheaders(), data, url)
        finally:
            conn.close()
        if cookies:
            self._store(host, response.header_values("set-cookie"))
        return response

    def get(self, url: str, **kw: Any) -> Response:
        return self.request("GET", url, **kw)

    def post_form(self, url: str, form: dict[str, str], **kw: Any) -> Response:
        headers = {"Content-Type": "application/x-www-form-urlencoded", **kw.pop("headers", {})}
        return self.request("POST", url, headers=headers, body=urlencode(form).encode(), **kw)

    def follow(self, response: Response, stop: Callable[[Response], bool] = lambda r: False,
               limit: int = 10) -> Response:
        """Follow redirects (GET) until a non-redirect, or ``stop``."""
        for _ in range(limit):
            if response.status not in (301, 302, 303, 307, 308) or stop(response):
                return response
            response = self.get(response.location)
        raise AssertionError(f"too many redirects, last {response}")

    def login_at_idp(self, login_page: Response, user: str = "alice", password: str | None = None) -> Response:
        """Fill in the provider's login form; returns its redirect back."""
        assert login_page.status == 200, login_page
        m = re.search(rb'action="([^"]+)"', login_page.body)
        assert m is not None, login_page.body[:500]
        action = urljoin(login_page.url, m.group(1).decode())
        password = password if password is not None else USERS[user]["password"]  # type: ignore[index]
        return self.post_form(action, {"login": user, "password": password})

    def until_gateway(self, response: Response, gateway_host: str) -> Response:
        """Follow redirects while they stay at the provider; return the
        first redirect to ``gateway_host`` (not followed)."""
        return self.follow(response, stop=lambda r: urlsplit(r.location).netloc == gateway_host)


def login(browser: Browser, url: str, gateway_host: str, user: str = "alice") -> tuple[Response, Response]:
    """Open ``url`` through the gateway, log in at the provider, come back:
    returns (the callback redirect the provider sent, the gateway's final answer)."""
    first = browser.get(url)
    assert first.status == 302, (first, first.body)
    page = browser.follow(first)
    back = browser.until_gateway(browser.login_at_idp(page, user), gateway_host)
    final = browser.follow(browser.get(back.location))
    return back, final


def seen(response: Response) -> dict[str, list[str]]:
    """What the echo backend received, header by header (the answer must be its 200)."""
    assert response.status == 200, (response, response.body[:300])
    out: dict[str, list[str]] = {}
    for k, v in response.json()["headers"]:
        out.setdefault(k, []).append(v)
    return out


# ---------------------------------------------------------------------------
# An attacker between the gateway and the provider's token endpoint
# ---------------------------------------------------------------------------


class TokenTamperer:
    """A loopback HTTP server that forwards token requests to the real
    provider and, when :attr:`rewrite` is set, replaces the ID token of the
    answer with ``rewrite(claims, header) -> token`` (the test signs it).
    :attr:`down` makes it answer nothing useful (connection closed).
    """

    def __init__(self, token_endpoint: str) -> None:
        self.token_endpoint = token_endpoint
        self.rewrite: Callable[[dict[str, Any], dict[str, Any]], str] | None = None
        self.seen: list[dict[str, Any]] = []
        #: answer 502 instead of forwarding (the provider behind is broken)
        self.down = False
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                owner.seen.append({"headers": dict(self.headers), "form": dict(parse_qsl(body.decode()))})
                status, data = (502, b"{}") if owner.down else owner._forward(body, dict(self.headers))
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _forward(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        parts = urlsplit(self.token_endpoint)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        keep = {k: v for k, v in headers.items() if k.lower() in ("authorization", "content-type")}
        conn.request("POST", parts.path, body=body, headers=keep)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        if r.status == 200 and self.rewrite is not None:
            doc = json.loads(data)
            claims = jwt.decode(doc["id_token"], options={"verify_signature": False})
            header = jwt.get_unverified_header(doc["id_token"])
            doc["id_token"] = self.rewrite(claims, header)
            data = json.dumps(doc).encode()
        return r.status, data

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

