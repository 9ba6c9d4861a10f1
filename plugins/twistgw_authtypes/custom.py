"""``customAuth``: your own authorization server, over Envoy's HTTP
``ext_authz`` contract (Gloo's custom auth).

Written inline on a virtual host or route, not in an AuthConfig::

    options:
      extauth:
        customAuth: {}                 # or {name: second} for Settings.spec.namedExtauth.second

with the server in ``Settings.spec.extauth`` (or under
``Settings.spec.namedExtauth.<name>``)::

    extauth:
      extauthzServerRef: {name: auth-server, namespace: gloo-system}   # an Upstream
      httpService:
        pathPrefix: /check
        request:
          allowedHeaders: [x-foo]
          headersToAdd: {x-gateway: twistgw}
        response:
          allowedUpstreamHeaders: [x-user-id]
          allowedClientHeaders: [www-authenticate]
      requestTimeout: 0.5s             # default 200ms

The gateway sends the client's method and ``pathPrefix`` + path (with its
query) to the server, with ``Host``, ``Authorization`` and the allowed
headers (then ``headersToAdd``), and an empty body. A ``2xx`` answer
admits, with ``allowedUpstreamHeaders`` copied to the forwarded request.
Any other answer is sent back to the client: its status, body and headers
(``allowedClientHeaders`` when set, else all but the hop-by-hop ones). No
answer within ``requestTimeout``, or no server, is an error: 403, or
``statusOnError``, or admitted under ``failureModeAllow``.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs
from twisted.internet.defer import Deferred
from twisted.web.http_headers import Headers as TxHeaders

from twistgw.sdk import GatewayInfo, NotChecked, OptionsError, Path, Problems, RequestContext, path_text
from twistgw_extauth import AuthAllow, AuthDeny, ConfigScope, ExtAuthConfigType

from twistgw_authtypes import _common as c
from twistgw_authtypes._body import PARTIAL_HEADER, BodySettings, body_settings
from twistgw_authtypes._http import CallFailed, ClientHolder, Reply, copy_headers, reply_headers

_INLINE = ("contextExtensions", "name")
_SERVER = ("extauthzServerRef", "httpService", "grpcService", "requestTimeout", "failureModeAllow",
           "statusOnError", "requestBody", "userIdHeader", "clearRouteCache", "transportApiVersion",
           "statPrefix")
SETTINGS_FIELDS = ("extauthzServerRef", "httpService", "grpcService", "requestBody",
                   "clearRouteCache", "transportApiVersion", "statPrefix", "namedExtauth")
_HTTP_SERVICE = ("pathPrefix", "request", "response")
_REQUEST = ("allowedHeaders", "headersToAdd", "allowedHeadersRegex")
_RESPONSE = ("allowedUpstreamHeaders", "allowedClientHeaders", "allowedUpstreamHeadersToAppend")
_REFUSED = {
    "grpcService": "is not supported by twistgw: only the HTTP ext_authz contract (httpService) is",
    "userIdHeader": "is read from Settings.spec.extauth only (the extauth plugin sets it on every admission)",
    "clearRouteCache": "is not supported by twistgw: routes with header matchers are always chosen again"
                       " after the chain",
    "statPrefix": "is not supported by twistgw",
}
#: Headers of a refusing answer never copied to the client.
_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"host", b"te",
                  b"trailer", b"upgrade", b"proxy-connection", b"date", b"server"})
_DEFAULT_TIMEOUT = 0.2


@attrs.frozen
class Server:
    """One ext_authz server of the Settings, compiled."""

    base: bytes  # http://host:port
    path_prefix: str
    allowed_headers: tuple[bytes, ...]
    headers_to_add: tuple[tuple[bytes, bytes], ...]
    upstream_headers: tuple[bytes, ...]
    client_headers: tuple[bytes, ...] | None
    timeout: float
    #: requestBody: the bound of the body sent with the check (None: none sent)
    body: BodySettings | None = None


@attrs.frozen
class CustomChecker:
    server: Server
    clients: ClientHolder = attrs.field(eq=False, repr=False)
    owned_request_headers: tuple[bytes, ...]
    description: str

    def request_for(self, ctx: RequestContext) -> tuple[bytes, TxHeaders]:
        target = self.server.path_prefix + ctx.path + ("?" + ctx.query.decode("latin-1") if ctx.query else "")
        headers = TxHeaders()
        copy_headers(ctx.headers, (b"authorization",) + self.server.allowed_headers, headers)
        headers.setRawHeaders(b"host", [ctx.host.encode("latin-1") if ctx.host else b"localhost"])
        for name, value in self.server.headers_to_add:
            headers.setRawHeaders(name, [value])
        return self.server.base + target.encode("utf-8"), headers

    async def check(self, ctx: RequestContext) -> AuthAllow | AuthDeny:
        url, headers = self.request_for(ctx)
        body = None
        if self.server.body is not None:  # Envoy's with_request_body
            read = await self.server.body.read(ctx)
            if isinstance(read, AuthDeny):
                return read
            body = read.data
            headers.setRawHeaders(PARTIAL_HEADER, [b"false" if read.complete else b"true"])
        client = self.clients.get(ctx.reactor)
        span = ctx.tracer.child("extauth.http_service", **{"url.full": self.server.base.decode("latin-1")})
        try:
            reply = await client.call(ctx.method.encode("ascii"), url, headers, body, self.server.timeout)
        except CallFailed as exc:
            span.end(error=exc)
            return AuthDeny.failure(f"ext_authz server {exc}", 403)
        span.set("http.response.status_code", reply.status)
        span.end(error=f"status {reply.status}" if reply.status >= 500 else None)
        return self.decide(reply)

    def decide(self, reply: Reply) -> AuthAllow | AuthDeny:
        if 200 <= reply.status < 300:
            return AuthAllow(headers=reply_headers(reply, self.server.upstream_headers),
                             reason=f"ext_authz server answered {reply.status}")
        if self.server.client_headers is not None:
            names = self.server.client_headers
        else:
            names = tuple(n.lower() for n, _ in reply.headers.getAllRawHeaders() if n.lower() not in _HOP)
        headers = tuple((n, v) for n, v in reply_headers(reply, names) if n != b"content-type")
        ctype = reply.headers.getRawHeaders(b"content-type") or [b""]
        status = reply.status if 300 <= reply.status <= 599 else 403
        return AuthDeny(status, reply.body, headers=headers, content_type=ctype[0],
                        reason=f"ext_authz server answered {reply.status}")

    def dry_run(self, ctx: RequestContext) -> NotChecked:
        url, _ = self.request_for(ctx)
        return NotChecked(f"would ask {ctx.method} {url.decode('latin-1')}")


def _server(raw: Mapping[str, Any], path: Path, scope: ConfigScope, problems: Problems) -> Server | None:
    cfg = problems.mapping(raw, path, _SERVER)
    for key, why in _REFUSED.items():
        if cfg.get(key) not in (None, False, {}):
            problems.add(path + (key,), why)
    if "extauthzServerRef" not in cfg:
        problems.add(path + ("extauthzServerRef",), "is required for customAuth: the Upstream of the server")
        return None
    name, ns = problems.reference(cfg["extauthzServerRef"], path + ("extauthzServerRef",), "default")
    try:
        upstream = scope.resources.upstream(name, ns)
    except KeyError as exc:
        problems.add(path + ("extauthzServerRef",), f"dangling reference: {exc.args[0]}")
        return None
    if not upstream.endpoints:
        problems.add(path + ("extauthzServerRef",), f"Upstream {ns}/{name} has no static endpoint")
        return None
    ep = upstream.endpoints[0]
    host = f"[{ep.host}]" if ":" in ep.host else ep.host
    hp = path + ("httpService",)
    http = problems.mapping(cfg.get("httpService"), hp, _HTTP_SERVICE, optional=True)
    req = problems.mapping(http.get("request"), hp + ("request",), _REQUEST, optional=True)
    resp = problems.mapping(http.get("response"), hp + ("response",), _RESPONSE, optional=True)
    if req.get("allowedHeadersRegex"):
        problems.add(hp + ("request", "allowedHeadersRegex"), "is not supported by twistgw; list allowedHeaders")
    if resp.get("allowedUpstreamHeadersToAppend"):
        problems.add(hp + ("response", "allowedUpstreamHeadersToAppend"),
                     "is not supported by twistgw; use allowedUpstreamHeaders (they replace)")
    prefix = problems.string(http.get("pathPrefix", ""), hp + ("pathPrefix",), nonempty=False)
    if prefix and (not prefix.startswith("/") or prefix.endswith("/")):
        problems.add(hp + ("pathPrefix",), "must start with '/' and not end with one, e.g. /check")
    add = tuple((c.header_name(problems, k, hp + ("request", "headersToAdd", k)),
                 c.header_value(problems, v, hp + ("request", "headersToAdd", k)))
                for k, v in problems.mapping(req.get("headersToAdd"), hp + ("request", "headersToAdd"),
                                             optional=True).items())
    client = resp.get("allowedClientHeaders")
    return Server(
        base=f"http://{host}:{ep.port}".encode("ascii", "replace"),
        path_prefix=prefix,
        allowed_headers=c.header_names(problems, req.get("allowedHeaders"), hp + ("request", "allowedHeaders")),
        headers_to_add=add,
        upstream_headers=c.header_names(problems, resp.get("allowedUpstreamHeaders"),
                                        hp + ("response", "allowedUpstreamHeaders"), True),
        client_headers=None if client is None else
        c.header_names(problems, client, hp + ("response", "allowedClientHeaders")),
        timeout=_DEFAULT_TIMEOUT if cfg.get("requestTimeout") is None else
        problems.duration(cfg["requestTimeout"], path + ("requestTimeout",), 0.001, 300.0),
        body=body_settings(cfg.get("requestBody"), path + ("requestBody",)),
    )


def check_server_settings(settings: Mapping[str, Any]) -> None:
    """The customAuth fields of ``Settings.spec.extauth`` whose shape can be
    checked without the snapshot (refused ones, namedExtauth's shape)."""
    problems = Problems()
    for key, why in _REFUSED.items():
        if settings.get(key) not in (None, False, {}):
            problems.add((key,), why)
    with problems.check():
        body_settings(settings.get("requestBody"))
    for name, server in problems.mapping(settings.get("namedExtauth"), ("namedExtauth",), optional=True).items():
        with problems.check():
            named = problems.mapping(server, ("namedExtauth", name), _SERVER)
            body_settings(named.get("requestBody"), ("namedExtauth", name, "requestBody"))
    problems.raise_if_any()


class CustomAuth(ExtAuthConfigType):
    name = "customAuth"
    where = "inline"
    settings_fields = SETTINGS_FIELDS
    description = "your own server over Envoy's HTTP ext_authz contract (Settings.spec.extauth)"

    def __init__(self) -> None:
        self.clients = ClientHolder()

    def configure(self, gateway: GatewayInfo) -> None:
        self.clients.reactor = gateway.reactor

    def unconfigure(self) -> Deferred[None] | None:
        return self.clients.close()

    def check_settings(self, settings: Mapping[str, Any], config_dir: str) -> None:
        check_server_settings(settings)

    def compile(self, raw: Any, scope: ConfigScope) -> CustomChecker:
        problems = Problems()
        cfg = problems.mapping(raw, (), _INLINE, optional=True)
        if cfg.get("contextExtensions"):
            problems.add(("contextExtensions",), "is not supported by twistgw: the HTTP ext_authz contract has"
                                                 " no place for them (they are a gRPC CheckRequest field)")
        settings = scope.settings()
        name = cfg.get("name")
        where: tuple[str, ...] = ("Settings", "spec", "extauth")
        server_raw: Any = settings
        if name is not None:
            problems.string(name, ("name",))
            named = problems.mapping(settings.get("namedExtauth"), ("namedExtauth",), optional=True)
            if name not in named:
                raise problems.fail(("name",), f"no Settings.spec.extauth.namedExtauth.{name}")
            server_raw, where = named[name], where + ("namedExtauth", name)
        server = None
        with problems.part():
            server = _server(server_raw, (), scope, problems)
        if problems.errors:  # Settings problems are told at the customAuth that needs them
            raise OptionsError.several([p if p.path[:1] == ("contextExtensions",) else
                                        OptionsError((), f"{path_text(where + p.path)}: {p.reason}")
                                        for p in problems.errors])
        assert server is not None
        return CustomChecker(server, self.clients, server.upstream_headers,
                             f"ext_authz server {server.base.decode()}{server.path_prefix}")
