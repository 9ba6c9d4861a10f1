"""``passThroughAuth``: an HTTP authorization service decides (Gloo's
``passThroughAuth.http``).

::

    - passThroughAuth:
        http:
          url: http://auth.internal:9001/auth
          connectionTimeout: 3s                  # the whole call; default 5s
          responseHeaderTimeout: 1s              # the answer's head, after the request is written
          tlsConfig:                             # an https url: the Secret's ca.crt (else the system's)
            secretRef: {name: auth-client, namespace: gloo-system}  # tls.crt + tls.key: mutual TLS
            sslParams: {minimumProtocolVersion: TLSv1_3}
          connectionPool: {maxConns: 10, idleTimeout: 30s}   # default 100 and no idle expiry
          request:
            allowedHeaders: [authorization]      # copied from the client's request
            headersToAdd: {x-gateway: twistgw}   # override copied ones
            passThroughState: true               # JSON body {"state": ...}
            passThroughFilterMetadata: true      # JSON body {"filterMetadata": {}}
          response:
            allowedUpstreamHeaders: [x-user-id]            # from an admitting answer, to the backend
            allowedUpstreamHeadersToOverwrite: [x-tenant]
            allowedClientHeadersOnDenied: [www-authenticate]  # from a refusing answer, to the client
            allowedClientHeadersOnSuccess: [x-ratelimit-remaining]  # from an admitting answer, to the client
            readStateFromResponse: true          # {"state": {...}} of an admitting answer
        config: {tier: gold}                     # JSON body {"config": ...}
        failureModeAllow: false

The gateway POSTs to ``url`` whatever the client's method and path. The body
is empty unless one of ``passThroughState``, ``passThroughFilterMetadata``
or ``config`` asks for the JSON object. ``200`` admits; ``401`` answers
``401``; every other status ``403``, with ``allowedClientHeadersOnDenied``.
A ``5xx`` answer, no answer within ``connectionTimeout``, or a service that
cannot be reached is an *error* (``503``), unless ``failureModeAllow: true``
admits the request (Gloo's rule). So is a call that gets no connection
slot (``connectionPool.maxConns`` in use) within ``connectionTimeout``, or
no answer head within ``responseHeaderTimeout`` of the request being sent.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

import attrs
from twisted.internet.defer import Deferred
from twisted.web.http_headers import Headers as TxHeaders

from twistgw.sdk import GatewayInfo, NotChecked, OWNED_RESPONSE_HEADERS, OptionsError, Path, Problems, RequestContext
from twistgw_extauth import AuthAllow, AuthDeny, ConfigScope, ExtAuthConfigType

from twistgw_authtypes import _common as c
from twistgw_authtypes._body import BodySettings, body_settings
from twistgw_authtypes._grpc import GrpcChannels
from twistgw_authtypes._client_options import read_pool, read_tls
from twistgw_authtypes._http import CallFailed, ClientHolder, ClientSettings, Reply, copy_headers, reply_headers
from twistgw_authtypes.passthrough_grpc import GrpcPassThroughChecker, compile_grpc

_TOP = ("http", "grpc", "config", "failureModeAllow")
_HTTP = ("url", "request", "response", "connectionTimeout", "tlsConfig", "responseHeaderTimeout",
         "connectionPool")
_REQUEST = ("allowedHeaders", "headersToAdd", "passThroughState", "passThroughFilterMetadata",
            "passThroughBody")
_RESPONSE = ("allowedUpstreamHeaders", "allowedUpstreamHeadersToOverwrite", "allowedClientHeadersOnDenied",
             "readStateFromResponse", "allowedClientHeadersOnSuccess")
@attrs.frozen
class Call:
    """What is sent and read, compiled."""

    url: bytes
    timeout: float
    allowed_headers: tuple[bytes, ...]
    headers_to_add: tuple[tuple[bytes, bytes], ...]
    send_state: bool
    send_metadata: bool
    config: Any  # the ``config`` Struct as plain JSON data, or None
    upstream_headers: tuple[bytes, ...]
    denied_headers: tuple[bytes, ...]
    read_state: bool
    success_headers: tuple[bytes, ...] = ()
    #: passThroughBody: Settings.spec.extauth.requestBody's bound (None: no body sent)
    body_settings: BodySettings | None = None
    #: responseHeaderTimeout (None: only ``timeout``)
    head_timeout: float | None = None
    #: tlsConfig and connectionPool: which pooled client calls the service
    client: ClientSettings = ClientSettings()

    def headers(self, ctx: RequestContext) -> TxHeaders:
        out = TxHeaders()
        copy_headers(ctx.headers, self.allowed_headers, out)
        for name, value in self.headers_to_add:
            out.setRawHeaders(name, [value])
        return out

    def body(self, ctx: RequestContext, request_body: bytes | None = None) -> bytes | None:
        doc: dict[str, Any] = {}
        if self.send_state:
            doc["state"] = c.shared_state(ctx)
        if self.send_metadata:
            doc["filterMetadata"] = {}  # twistgw has no Envoy filter metadata
        if request_body is not None:
            doc["body"] = request_body.decode("utf-8", "replace")  # Gloo's "body": string
        if self.config is not None:
            doc["config"] = self.config
        return json.dumps(doc, separators=(",", ":"), default=str).encode() if doc else None


@attrs.frozen
class PassThroughChecker:
    call: Call
    failure_mode_allow: bool
    clients: ClientHolder = attrs.field(eq=False, repr=False)
    owned_request_headers: tuple[bytes, ...]
    description: str

    async def check(self, ctx: RequestContext) -> AuthAllow | AuthDeny:
        request_body = None
        if self.call.body_settings is not None:
            read = await self.call.body_settings.read(ctx)
            if isinstance(read, AuthDeny):
                return read
            request_body = read.data
        client = self.clients.get(ctx.reactor, self.call.client)
        headers = self.call.headers(ctx)
        body = self.call.body(ctx, request_body)
        if body is not None:
            headers.setRawHeaders(b"content-type", [b"application/json"])
        span = ctx.tracer.child("extauth.passthrough.http", **{"url.full": _origin(self.call.url)})
        try:
            reply = await client.call(b"POST", self.call.url, headers, body or b"", self.call.timeout,
                                      self.call.head_timeout)
        except CallFailed as exc:
            span.end(error=exc)
            return self._failed(f"auth service {exc}")
        span.set("http.response.status_code", reply.status)
        span.end(error=f"status {reply.status}" if reply.status >= 500 else None)
        return self.decide(reply)

    def decide(self, reply: Reply) -> AuthAllow | AuthDeny:
        if reply.status >= 500:
            return self._failed(f"auth service answered {reply.status}")
        if reply.status != 200:
            status = 401 if reply.status == 401 else 403
            return AuthDeny(status, headers=reply_headers(reply, self.call.denied_headers),
                            content_type=b"", reason=f"auth service answered {reply.status}")
        state = None
        if self.call.read_state:
            state = _read_state(reply.body)
            if state is None:
                return AuthDeny(401, content_type=b"",
                                reason="auth service admitted, but its body is not {\"state\": {...}}")
        return AuthAllow(headers=reply_headers(reply, self.call.upstream_headers),
                         response_headers=reply_headers(reply, self.call.success_headers) if self.call.success_headers
                         else (), reason="auth service answered 200", state=state)

    def _failed(self, reason: str) -> AuthAllow | AuthDeny:
        if self.failure_mode_allow:
            return AuthAllow(reason=f"{reason}; admitted by failureModeAllow")
        return AuthDeny.failure(reason, 503)

    def dry_run(self, ctx: RequestContext) -> NotChecked:
        return NotChecked(f"would POST to {self.call.url.decode()}")


def _read_state(body: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    state = doc.get("state") if isinstance(doc, dict) else None
    return state if isinstance(state, dict) else None


def _url(problems: Problems, value: Any, path: Path) -> bytes:
    url = problems.string(value, path)
    if not url.isascii() or any(ch.isspace() for ch in url):
        raise problems.fail(path, f"must be an ASCII URL without spaces (percent-encode the rest), got {url!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise problems.fail(path, f"must be an http:// or https:// URL with a host, got {url!r}")
    try:
        _ = parts.port
    except ValueError:
        raise problems.fail(path, f"has an invalid port: {url!r}") from None
    return url.encode("ascii")


def _origin(url: bytes) -> str:
    parts = urlsplit(url.decode("ascii"))
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2].lower()}"


def _json_data(problems: Problems, value: Any, path: Path) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise problems.fail(path, "must be plain JSON data (mappings, lists, strings, numbers)") from None
    return value


def compile_call(http: Mapping[str, Any], config: Any, problems: Problems, scope: ConfigScope,
                 body: BodySettings | None = None) -> Call:
    req = problems.mapping(http.get("request"), ("http", "request"), _REQUEST, optional=True)
    resp = problems.mapping(http.get("response"), ("http", "response"), _RESPONSE, optional=True)
    p_req, p_resp = ("http", "request"), ("http", "response")
    add = []
    for name, value in problems.mapping(req.get("headersToAdd"), p_req + ("headersToAdd",), optional=True).items():
        with problems.check():
            p = p_req + ("headersToAdd", name)
            add.append((c.header_name(problems, name, p), c.header_value(problems, value, p)))
    upstream = c.header_names(problems, resp.get("allowedUpstreamHeaders"), p_resp + ("allowedUpstreamHeaders",), True)
    overwrite = c.header_names(problems, resp.get("allowedUpstreamHeadersToOverwrite"),
                               p_resp + ("allowedUpstreamHeadersToOverwrite",), True)
    both = set(upstream) & set(overwrite)
    if both:
        problems.add(p_resp, f"{sorted(h.decode() for h in both)} are in both allowedUpstreamHeaders and"
                             " allowedUpstreamHeadersToOverwrite (Gloo's rule)")
    if "url" not in http:
        raise problems.fail(("http", "url"), "is required: the service's http:// or https:// URL")
    url = _url(problems, http["url"], ("http", "url"))
    client, head = _client(http, url, scope, problems)
    send_body = problems.boolean(req.get("passThroughBody", False), p_req + ("passThroughBody",))
    if send_body and body is None:
        raise problems.fail(p_req + ("passThroughBody",), "needs Settings.spec.extauth.requestBody (Gloo's rule):"
                                                         " it says how much of the body is read before asking")
    return Call(
        url=url,
        timeout=5.0 if http.get("connectionTimeout") is None else
        problems.duration(http["connectionTimeout"], ("http", "connectionTimeout"), 0.001, 300.0),
        allowed_headers=c.header_names(problems, req.get("allowedHeaders"), p_req + ("allowedHeaders",)),
        headers_to_add=tuple(add),
        send_state=problems.boolean(req.get("passThroughState", False), p_req + ("passThroughState",)),
        send_metadata=problems.boolean(req.get("passThroughFilterMetadata", False),
                                       p_req + ("passThroughFilterMetadata",)),
        config=config,
        upstream_headers=upstream + overwrite,
        denied_headers=c.header_names(problems, resp.get("allowedClientHeadersOnDenied"),
                                      p_resp + ("allowedClientHeadersOnDenied",)),
        read_state=problems.boolean(resp.get("readStateFromResponse", False), p_resp + ("readStateFromResponse",)),
        success_headers=_success_headers(problems, resp.get("allowedClientHeadersOnSuccess"),
                                         p_resp + ("allowedClientHeadersOnSuccess",)),
        body_settings=body if send_body else None,
        head_timeout=head,
        client=client,
    )


def _client(http: Mapping[str, Any], url: bytes, scope: ConfigScope,
            problems: Problems) -> tuple[ClientSettings, float | None]:
    """``tlsConfig``, ``connectionPool`` and ``responseHeaderTimeout``: the
    client's settings and the head's deadline (None: only connectionTimeout)."""
    tls: dict[str, Any] = {}
    with problems.check():
        tls = read_tls(http.get("tlsConfig"), url.startswith(b"https:"), scope, problems)
    pool: dict[str, Any] = {}
    with problems.check():
        pool = read_pool(problems, http.get("connectionPool"))
    head = None
    with problems.check():
        if http.get("responseHeaderTimeout") is not None:
            head = problems.duration(http["responseHeaderTimeout"], ("http", "responseHeaderTimeout"), 0.0,
                                     300.0) or None
    return ClientSettings(_origin(url), **tls, **pool), head


def _success_headers(problems: Problems, value: Any, path: Path) -> tuple[bytes, ...]:
    """``allowedClientHeadersOnSuccess``: added to the client's response,
    so the framing and hop-by-hop headers the engine writes are refused."""
    names = c.header_names(problems, value, path)
    for i, name in enumerate(names):
        if name in OWNED_RESPONSE_HEADERS:
            raise problems.fail(path + (i,), f"{name.decode()!r} is a framing/hop-by-hop header the gateway writes"
                                            " itself; it cannot come from the auth service")
    return names


class PassThroughAuth(ExtAuthConfigType):
    name = "passThroughAuth"
    settings_fields = ("requestBody",)  # checked by customAuth's check_settings (the same plugin), told once
    description = "an HTTP (POST, 200 admits) or gRPC (Envoy ext_authz Check) authorization service decides"

    def __init__(self) -> None:
        self.clients = ClientHolder()
        self.channels = GrpcChannels()

    def configure(self, gateway: GatewayInfo) -> None:
        self.clients.reactor = gateway.reactor

    def config_loaded(self, checkers: Sequence[Any], settings: Mapping[str, Any]) -> None:
        """Close the gRPC channels and HTTP clients no serving config names
        (a changed address, TLS Secret or pool setting gets a new one;
        unchanged ones are kept)."""
        self.channels.keep_only(k.target for k in checkers if isinstance(k, GrpcPassThroughChecker))
        self.clients.keep_only(k.call.client for k in checkers if isinstance(k, PassThroughChecker))

    def unconfigure(self) -> Deferred[None] | None:
        self.channels.close()
        return self.clients.close()

    def compile(self, raw: Any, scope: ConfigScope) -> PassThroughChecker | GrpcPassThroughChecker:
        problems = Problems()
        cfg = problems.mapping(raw, (), _TOP, optional=True)
        if ("http" in cfg) == ("grpc" in cfg):
            problems.add((), "set one of http: {url: ...} and grpc: {address: ...}")
            problems.raise_if_any()
        config = None
        with problems.check():
            if cfg.get("config") is not None:
                config = _json_data(problems, problems.mapping(cfg["config"], ("config",)), ("config",))
        fma = False
        with problems.check():
            fma = problems.boolean(cfg.get("failureModeAllow", False), ("failureModeAllow",))
        try:
            body = body_settings(scope.settings().get("requestBody"))
        except OptionsError:
            body = BodySettings()  # told once, at Settings.spec.extauth.requestBody (check_settings)
        if "grpc" in cfg:
            checker = None
            with problems.check():
                checker = compile_grpc(cfg["grpc"], config, fma, body, scope, self.channels, problems)
            problems.raise_if_any()
            assert checker is not None
            return checker
        http = problems.mapping(cfg["http"], ("http",), _HTTP, optional=True)
        call = None
        with problems.check():
            call = compile_call(http, config, problems, scope, body)
        problems.raise_if_any()
        assert call is not None
        return PassThroughChecker(call, fma, self.clients, call.upstream_headers,
                                  f"HTTP auth service {call.url.decode()}")
