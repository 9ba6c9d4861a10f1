"""A real gRPC ext_authz server for tests: grpcio's server on its own
threads, bound to ``127.0.0.1:0``, serving Envoy's
``envoy.service.auth.v3.Authorization/Check``. A test gives ``respond``
(CheckRequest → CheckResponse; ``HANG`` to never answer; raising a
:class:`Abort` ends the call with that gRPC status) and reads the requests
it received in ``requests``.

Helpers build the answers a real server sends: :func:`ok` (headers to
set, remove, append; response headers; state) and :func:`denied`.
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any, Callable

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.auth.v3 import external_auth_pb2, external_auth_pb2_grpc

__all__ = ["HANG", "Abort", "GrpcAuthServer", "denied", "ok", "start_grpc_authz"]

#: ``respond`` returns this: the call is never answered (until the server stops).
HANG = object()


class Abort(Exception):
    def __init__(self, code: grpc.StatusCode, details: str = "") -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class _Servicer(external_auth_pb2_grpc.AuthorizationServicer):
    def __init__(self, server: "GrpcAuthServer") -> None:
        self.server = server

    def Check(self, request: Any, context: Any) -> Any:  # noqa: N802 (the gRPC method's name)
        self.server.requests.append(request)
        answer = self.server.respond(request)
        if answer is HANG:
            self.server.released.wait(30)
            context.abort(grpc.StatusCode.UNAVAILABLE, "server stopping")
        if isinstance(answer, Abort):
            context.abort(answer.code, answer.details)
        return answer


class GrpcAuthServer:
    def __init__(self, respond: Callable[[Any], Any], credentials: Any = None) -> None:
        self.respond = respond
        self.requests: list[Any] = []
        self.released = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        external_auth_pb2_grpc.add_AuthorizationServicer_to_server(_Servicer(self), self.server)
        if credentials is None:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            self.port = self.server.add_secure_port("127.0.0.1:0", credentials)
        self.server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.released.set()
        self.server.stop(0).wait(5)


def start_grpc_authz(respond: Callable[[Any], Any], credentials: Any = None) -> GrpcAuthServer:
    return GrpcAuthServer(respond, credentials)


def _option(name: str, value: str, append: bool | None = None, action: int | None = None) -> Any:
    option = base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=name, value=value))
    if append is not None:
        option.append.value = append
    if action is not None:
        option.append_action = action
    return option


def ok(headers: tuple[tuple[str, str], ...] = (), remove: tuple[str, ...] = (),
       append: tuple[tuple[str, str], ...] = (), response_headers: tuple[tuple[str, str], ...] = (),
       state: dict[str, Any] | None = None) -> Any:
    response = external_auth_pb2.CheckResponse()
    response.status.code = 0
    okr = response.ok_response
    okr.headers.extend([_option(k, v) for k, v in headers] + [_option(k, v, append=True) for k, v in append])
    okr.headers_to_remove.extend(remove)
    okr.response_headers_to_add.extend(_option(k, v) for k, v in response_headers)
    if state is not None:
        response.dynamic_metadata["solo.auth.passthrough"] = state
    return response


def denied(code: int = 7, status: int | None = None, headers: tuple[tuple[str, str], ...] = (),
           body: str = "") -> Any:
    """A refusal: gRPC ``code`` (7: PERMISSION_DENIED, 16: UNAUTHENTICATED),
    with a ``denied_response`` when ``status`` is given."""
    response = external_auth_pb2.CheckResponse()
    response.status.code = code
    if status is not None:
        d = response.denied_response
        d.status.code = status
        d.headers.extend(_option(k, v) for k, v in headers)
        d.body = body
    return response


def header_map(request: Any) -> dict[str, str]:
    return dict(request.attributes.request.http.headers)
