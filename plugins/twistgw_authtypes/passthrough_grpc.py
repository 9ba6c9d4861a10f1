"""``passThroughAuth.grpc``: a gRPC authorization service decides, over
Envoy's ext_authz v3 contract (``envoy.service.auth.v3.Authorization/Check``),
as Gloo's ``PassThroughGrpc``.

::

    - passThroughAuth:
        grpc:
          address: auth.internal:9001     # host:port
          connectionTimeout: 3s           # the deadline of each call; default 5s
          tlsConfig:                      # optional; without it, plaintext (Gloo's default)
            secretRef: {name: auth-tls, namespace: gloo-system}   # ca.crt, tls.crt + tls.key
          retryPolicy:                    # optional: retry a call the service was UNAVAILABLE for
            numRetries: 3                 # default 1
            retryBackOff: {baseInterval: 1s, maxInterval: 2s}   # defaults 1s and 10 x baseInterval
        config: {tier: gold}              # to the service in filter_metadata["solo.auth.passthrough.config"]
        failureModeAllow: false

The ``CheckRequest`` carries what Envoy sends: the client's address, the
method, path (with its query), host, scheme, protocol, headers (with the
``:method``, ``:path``, ``:authority`` and ``:scheme`` pseudo-headers) and,
when ``Settings.spec.extauth.requestBody`` is set, the first
``maxRequestBytes`` of the body; the shared state of the configs before
it in ``metadata_context.filter_metadata["solo.auth.passthrough"]``.

The answer: status ``OK`` admits, with ``ok_response.headers`` set on the
forwarded request (replacing the client's copy unless the server asks to
append), ``headers_to_remove`` removed, ``response_headers_to_add`` sent
to the client, and ``dynamic_metadata["solo.auth.passthrough"]`` kept as
state for the configs after it. Any other status refuses: with
``denied_response``'s status, headers and body, else 403. A call that
fails (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, any other gRPC error) is an
error: 503, unless ``failureModeAllow``. With ``retryPolicy``, a call
answered ``UNAVAILABLE`` (the service could not be reached, or said it
cannot answer) is made again after ``baseInterval``, then twice that...
up to ``maxInterval``, at most ``numRetries`` times; any other failure is
not retried. The whole check stays bounded by the extauth ``requestTimeout``.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import attrs
from google.protobuf import json_format
from twisted.internet.defer import CancelledError
from twisted.internet.task import deferLater

from twistgw.sdk import NotChecked, OWNED_RESPONSE_HEADERS, Path, Problems, RequestContext
from twistgw_extauth import AuthAllow, AuthDeny, ConfigScope

from twistgw_authtypes import _common as c
from twistgw_authtypes._body import PARTIAL_HEADER, BodySettings
from twistgw_authtypes._client_options import secret_pems
from twistgw_authtypes._grpc import CheckRequest, GrpcCallFailed, GrpcChannels, Target

_GRPC = ("address", "connectionTimeout", "tlsConfig", "retryPolicy")
_TLS = ("secretRef", "sslParams")
_RETRY = ("numRetries", "retryBackOff")
_BACKOFF = ("baseInterval", "maxInterval")


@attrs.frozen
class RetryPolicy:
    """Gloo's ``RetryPolicy``: ``retries`` more calls after an ``UNAVAILABLE``
    one, waiting ``base``, ``2 * base``... at most ``most`` seconds between them."""

    retries: int
    base: float
    most: float

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        return min(self.most, self.base * 2 ** min(attempt, 30))
#: Gloo's filter-metadata keys
STATE_KEY = "solo.auth.passthrough"
CONFIG_KEY = "solo.auth.passthrough.config"
#: Request headers an authorization service may not set or remove.
_UNTOUCHABLE = frozenset(h.encode() for h in c.RESERVED_HEADERS)
_APPEND, _ADD_IF_ABSENT, _OVERWRITE, _OVERWRITE_IF_EXISTS = range(4)


@attrs.frozen
class GrpcPassThroughChecker:
    target: Target
    timeout: float
    config: Any  # the ``config`` Struct as plain JSON data, or None
    failure_mode_allow: bool
    body: BodySettings | None
    channels: GrpcChannels = attrs.field(eq=False, repr=False)
    description: str
    retry: RetryPolicy | None = None

    async def check(self, ctx: RequestContext) -> AuthAllow | AuthDeny:
        body = None
        if self.body is not None:
            body = await self.body.read(ctx)
            if isinstance(body, AuthDeny):
                return body
        request = check_request(ctx, self.config, body, self.body)
        reactor = ctx.reactor or _global_reactor()
        attempt = 0
        span = ctx.tracer.child("extauth.passthrough.grpc", **{"server.address": self.target.describe()})
        while True:
            try:
                response = await self.channels.call(reactor, self.target, request, self.timeout)
            except GrpcCallFailed as exc:
                retry = self.retry
                if exc.code != "UNAVAILABLE" or retry is None or attempt >= retry.retries:
                    tries = f" (after {attempt + 1} attempts)" if attempt else ""
                    span.set("twistgw.retries", attempt)
                    span.end(error=exc)
                    return self._failed(f"auth service {self.target.describe()} {exc}{tries}")
                await deferLater(reactor, retry.delay(attempt), lambda: None)
                attempt += 1
                continue
            except CancelledError:
                span.end(error="call cancelled")
                return self._failed(f"auth service {self.target.describe()}: call cancelled")
            span.set("twistgw.retries", attempt)
            span.end()
            return decide(response, ctx)

    def _failed(self, reason: str) -> AuthAllow | AuthDeny:
        if self.failure_mode_allow:
            return AuthAllow(reason=f"{reason}; admitted by failureModeAllow")
        return AuthDeny.failure(reason, 503)

    def dry_run(self, ctx: RequestContext) -> NotChecked:
        return NotChecked(f"would call Authorization/Check at {self.target.describe()}")


def _global_reactor() -> Any:
    """The running reactor, for a context made without one (``twistgw explain --live``)."""
    from twisted.internet import reactor

    return reactor


# --------------------------------------------------------------------------
# The request
# --------------------------------------------------------------------------


def check_request(ctx: RequestContext, config: Any, body: Any, settings: BodySettings | None) -> Any:
    """The ``CheckRequest`` for ``ctx`` (``body``: a BodyPrefix or None)."""
    req = CheckRequest()
    attributes = req.attributes
    attributes.source.address.socket_address.address = ctx.client_address
    http = attributes.request.http
    target = ctx.path + ("?" + ctx.query.decode("latin-1") if ctx.query else "")
    host_values = ctx.headers.getRawHeaders(b"host")
    authority = host_values[0].decode("latin-1") if host_values else ctx.host
    http.method, http.path, http.host, http.scheme = ctx.method, target, authority, ctx.scheme
    http.query = ctx.query.decode("latin-1")
    http.protocol = ctx.protocol
    headers = http.headers
    headers[":method"], headers[":path"], headers[":authority"], headers[":scheme"] = (
        ctx.method, target, authority, ctx.scheme)
    for name, values in ctx.headers.getAllRawHeaders():
        headers[name.decode("latin-1").lower()] = ",".join(v.decode("latin-1") for v in values)
    received = ctx.received_headers
    length = received.getRawHeaders(b"content-length") if received is not None else None
    http.size = int(length[0]) if length and length[0].isdigit() else -1
    if body is not None and settings is not None:
        headers[PARTIAL_HEADER.decode()] = "false" if body.complete else "true"
        if settings.pack_as_bytes:
            http.raw_body = body.data
        else:
            http.body = body.data.decode("utf-8", "replace")
    seconds = time.time()
    attributes.request.time.seconds = int(seconds)
    attributes.request.time.nanos = int((seconds % 1) * 1e9)
    request_id = ctx.headers.getRawHeaders(b"x-request-id")
    if request_id:
        http.id = request_id[0].decode("latin-1")
    state = c.shared_state(ctx)
    metadata = attributes.metadata_context.filter_metadata
    if state:
        metadata[STATE_KEY].update(_plain(state))
    if config is not None:
        metadata[CONFIG_KEY].update(config)
    return req


def _plain(value: Any) -> Any:
    """State as JSON data a Struct takes (non-JSON leaves become strings)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return str(value)


# --------------------------------------------------------------------------
# The answer
# --------------------------------------------------------------------------


def decide(response: Any, ctx: RequestContext) -> AuthAllow | AuthDeny:
    code = response.status.code
    if code != 0:
        return _denied(response, code)
    ok = response.ok_response
    edits: dict[bytes, list[bytes] | None] = {}
    for option in ok.headers:
        _apply(option, ctx, edits)
    for name in ok.headers_to_remove:
        lowered = name.lower().encode("latin-1", "replace")
        if lowered not in _UNTOUCHABLE and not lowered.startswith(b":"):
            edits[lowered] = None
    headers = tuple((n, None if v is None else b",".join(v)) for n, v in edits.items())
    client = tuple(p for p in (_pair(o.header) for o in ok.response_headers_to_add)
                   if p is not None and p[0] not in OWNED_RESPONSE_HEADERS)
    state = None
    if response.HasField("dynamic_metadata") and STATE_KEY in response.dynamic_metadata.fields:
        found = json_format.MessageToDict(response.dynamic_metadata)[STATE_KEY]
        state = found if isinstance(found, dict) else None
    return AuthAllow(headers=headers, response_headers=client, state=state, reason="auth service answered OK")


def _apply(option: Any, ctx: RequestContext, edits: dict[bytes, list[bytes] | None]) -> None:
    """One ``HeaderValueOption`` of an OK answer into ``edits`` (Envoy's
    rules; ``append`` defaults to false here, so a client's copy is replaced)."""
    pair = _pair(option.header)
    if pair is None or pair[0] in _UNTOUCHABLE:
        return
    name, value = pair
    current = edits.get(name)
    if current is None:
        current = list(ctx.headers.getRawHeaders(name) or ())
    if option.HasField("append"):
        action = _APPEND if option.append.value else _OVERWRITE
    else:
        action = option.append_action if option.append_action != _APPEND else _OVERWRITE
        if option.append_action == _APPEND and name in edits:
            action = _APPEND  # a second value of a header this answer sets
    if action == _ADD_IF_ABSENT and current:
        return
    if action == _OVERWRITE_IF_EXISTS and not current:
        return
    edits[name] = current + [value] if action == _APPEND else [value]


def _pair(header: Any) -> tuple[bytes, bytes] | None:
    """(lower-case name, value) of a ``HeaderValue``, or None when the name is
    not a token or the value has CR, LF or NUL."""
    name = header.key.lower()
    value = header.raw_value or header.value.encode("latin-1", "replace")
    if not name or not c.is_token(name) or not c.safe_header_bytes(value):
        return None
    return name.encode("ascii"), value


def _denied(response: Any, code: int) -> AuthDeny:
    reason = f"auth service answered status {code}"
    if not response.HasField("denied_response"):
        return AuthDeny(403, content_type=b"", reason=reason)
    denied = response.denied_response
    status = denied.status.code if 200 <= denied.status.code <= 599 else 403
    headers, ctype = [], b""
    for option in denied.headers:
        pair = _pair(option.header)
        if pair is None or pair[0] in OWNED_RESPONSE_HEADERS:
            continue
        if pair[0] == b"content-type":
            ctype = pair[1]
        else:
            headers.append(pair)
    return AuthDeny(status, denied.body.encode("utf-8"), headers=tuple(headers), content_type=ctype, reason=reason)


# --------------------------------------------------------------------------
# Compiling
# --------------------------------------------------------------------------


def compile_grpc(raw: Any, config: Any, failure_mode_allow: bool, body: BodySettings | None, scope: ConfigScope,
                 channels: GrpcChannels, problems: Problems) -> GrpcPassThroughChecker:
    cfg = problems.mapping(raw, ("grpc",), _GRPC, optional=True)
    retry = None
    if cfg.get("retryPolicy") is not None:
        with problems.check():
            retry = _retry_policy(problems, cfg["retryPolicy"], ("grpc", "retryPolicy"))
    if "address" not in cfg:
        raise problems.fail(("grpc", "address"), "is required: the service's host:port")
    address = _address(problems, cfg["address"], ("grpc", "address"))
    timeout = 5.0 if cfg.get("connectionTimeout") is None else \
        problems.duration(cfg["connectionTimeout"], ("grpc", "connectionTimeout"), 0.001, 300.0)
    target = Target(address)
    if cfg.get("tlsConfig") is not None:
        target = _tls_target(address, cfg["tlsConfig"], scope, problems)
    problems.raise_if_any()
    return GrpcPassThroughChecker(target, timeout, config, failure_mode_allow, body, channels,
                                  f"gRPC auth service {target.describe()}", retry)


def _retry_policy(problems: Problems, raw: Any, path: Path) -> RetryPolicy:
    """Gloo's ``RetryPolicy`` (``numRetries`` default 1; ``retryBackOff``:
    ``baseInterval`` default 1s, ``maxInterval`` default 10 x base)."""
    cfg = problems.mapping(raw, path, _RETRY)
    retries = cfg.get("numRetries", 1)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
        raise problems.fail(path + ("numRetries",), f"must be a whole number from 0 to 100, got {retries!r}")
    backoff = problems.fields(cfg.get("retryBackOff"), path + ("retryBackOff",), _BACKOFF)
    base = backoff.duration("baseInterval", 1.0, 0.001, 60.0)
    most = backoff.duration("maxInterval", 10 * base, 0.001, 600.0)
    if most < base:
        raise problems.fail(path + ("retryBackOff", "maxInterval"), "must not be below baseInterval")
    return RetryPolicy(retries, base, most)


def _address(problems: Problems, value: Any, path: Path) -> str:
    address = problems.string(value, path)
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or any(ch.isspace() for ch in address):
        raise problems.fail(path, f"must be HOST:PORT (e.g. auth.internal:9001), got {address!r}")
    if "/" in address:
        raise problems.fail(path, f"must be HOST:PORT, not a URL, got {address!r}")
    return address


def _tls_target(address: str, raw: Any, scope: ConfigScope, problems: Problems) -> Target:
    path: Path = ("grpc", "tlsConfig")
    tls = problems.mapping(raw, path, _TLS)
    if tls.get("sslParams") is not None:
        problems.add(path + ("sslParams",), "is not supported by twistgw: grpcio's TLS has no such settings"
                                            " (TLS 1.2 or later, its own cipher list)")
    if tls.get("secretRef") is None:
        return Target(address, tls=True)  # system roots, no client certificate
    cert, key, ca = secret_pems(problems, tls["secretRef"], path + ("secretRef",), scope)
    return Target(address, ca_pem=ca or None, cert_pem=cert, key_pem=key, tls=True)
