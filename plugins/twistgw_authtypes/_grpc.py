"""The gRPC client of ``passThroughAuth.grpc``: Envoy's ext_authz v3
``envoy.service.auth.v3.Authorization/Check`` with ``grpcio`` and the
generated messages of ``xds-protos``, without blocking the reactor.

One ``grpc.Channel`` per (address, TLS material), kept across reloads and
closed when no serving config names it any more. A call is
``stub.Check.future(request, timeout=...)``: grpcio sends it and reads the
answer on its own threads; the future's done-callback (a grpcio thread)
hands the outcome to the reactor with ``reactor.callFromThread``, where the
Deferred fires. The reactor thread only builds the request and reads the
answer. (``grpc.aio`` would need an asyncio loop on a second thread and
one more hop per call: see ``docs/decisions.md``.)
"""

from __future__ import annotations

import os
import ssl
from typing import Any, Iterable

import attrs
import grpc
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger

from envoy.service.auth.v3 import external_auth_pb2, external_auth_pb2_grpc

CheckRequest = external_auth_pb2.CheckRequest
CheckResponse = external_auth_pb2.CheckResponse

#: grpc status codes that mean "could not ask" (fail closed, or admitted
#: under failureModeAllow); any other RpcError is an error too.
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED


@attrs.frozen
class Target:
    """Where and how to connect: the key of a pooled channel."""

    address: str  # host:port
    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    tls: bool = False

    def describe(self) -> str:
        return f"{'grpcs' if self.tls else 'grpc'}://{self.address}"


class GrpcCallFailed(Exception):
    """The service could not be asked (``code``: the grpc status name)."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}" if details else code)
        self.code = code


class GrpcChannels:
    """The channels of one config type: made on first use, kept across
    reloads, the unused ones closed when a configuration is loaded."""

    _log = Logger(namespace="twistgw.authtypes.grpc")

    def __init__(self) -> None:
        self._channels: dict[Target, tuple[grpc.Channel, Any]] = {}

    def stub(self, target: Target) -> Any:
        """The ``AuthorizationStub`` of ``target`` (a generated class, untyped)."""
        found = self._channels.get(target)
        if found is None:
            channel = _channel(target)
            found = self._channels[target] = (channel, external_auth_pb2_grpc.AuthorizationStub(channel))
        return found[1]

    def keep_only(self, targets: Iterable[Target]) -> None:
        """Close the channels no serving config uses (a changed address or
        certificate makes a new channel; an unchanged one stays)."""
        wanted = set(targets)
        for target in [t for t in self._channels if t not in wanted]:
            channel, _ = self._channels.pop(target)
            channel.close()

    def close(self) -> None:
        self.keep_only(())

    def call(self, reactor: Any, target: Target, request: Any, timeout: float) -> Deferred[Any]:
        """``Check(request)`` with a deadline of ``timeout`` seconds: a
        Deferred firing (in the reactor thread) with the CheckResponse, or
        failing with :class:`GrpcCallFailed`. Cancelling it cancels the call."""
        future = self.stub(target).Check.future(request, timeout=timeout)
        d: Deferred[Any] = Deferred(lambda _: future.cancel())

        def done(f: Any) -> None:  # a grpcio thread (or this one, if already done)
            reactor.callFromThread(_deliver, d, f)

        future.add_done_callback(done)
        return d


def _deliver(d: Deferred[Any], future: Any) -> None:
    """In the reactor thread: fire ``d`` with what ``future`` holds."""
    if d.called:  # cancelled meanwhile
        return
    if future.cancelled():
        d.errback(CancelledError())
        return
    try:
        response = future.result()
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
        details = exc.details() if hasattr(exc, "details") else ""
        d.errback(GrpcCallFailed(code.name if code is not None else "UNKNOWN", details or ""))
        return
    except Exception as exc:  # grpcio raising anything else is still "could not ask"
        d.errback(GrpcCallFailed("UNKNOWN", f"{exc.__class__.__name__}: {exc}"))
        return
    d.callback(response)


def _system_roots() -> bytes | None:
    """The system's CA bundle (as ``twistgw.tls`` trusts), not the copy
    grpcio ships; None: grpcio's own."""
    path = ssl.get_default_verify_paths().cafile
    if path and os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    return None


def _channel(target: Target) -> grpc.Channel:
    options = [("grpc.enable_retries", 0)]  # an authorization call is never sent twice
    if not target.tls:
        return grpc.insecure_channel(target.address, options=options)
    # The server's certificate is verified by grpc against the CA (the
    # Secret's ca.crt, else the system roots) and the address's host name.
    credentials = grpc.ssl_channel_credentials(root_certificates=target.ca_pem or _system_roots(),
                                               private_key=target.key_pem, certificate_chain=target.cert_pem)
    return grpc.secure_channel(target.address, credentials, options=options)
