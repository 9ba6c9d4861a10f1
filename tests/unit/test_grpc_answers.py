"""core/grpc.py (issue 33, item 3): which requests are gRPC's, Envoy's
HTTP → gRPC status table, gRPC's percent-encoding of grpc-message, and the
trailers-only form of a LocalResponse."""

from __future__ import annotations

import pytest

from twistgw.core.grpc import GRPC_STATUS, grpc_kind, grpc_status, local_reply, percent_encode
from twistgw.core.plan import LocalResponse


@pytest.mark.parametrize("content_type, kind", [
    (b"application/grpc", b"grpc"), (b"application/grpc+proto", b"grpc"), (b"application/grpc;charset=x", b"grpc"),
    (b"Application/GRPC", b"grpc"), (b"application/grpc-web", b"grpc-web"), (b"application/grpc-web+proto", b"grpc-web"),
    (b"application/grpc-web-text", b"grpc-web-text"), (b"application/grpc-web-text+proto", b"grpc-web-text"),
    (b"application/grpcx", None), (b"application/grpc-webx", None), (b"application/json", None), (None, None),
    (b"", None), (b"application/grp", None),
])
def test_which_requests_are_grpc(content_type: bytes | None, kind: bytes | None) -> None:
    assert grpc_kind(content_type) == kind


def test_envoys_http_to_grpc_table() -> None:
    assert {s: grpc_status(s) for s in (400, 401, 403, 404, 429, 502, 503, 504)} == {
        400: 13, 401: 16, 403: 7, 404: 12, 429: 14, 502: 14, 503: 14, 504: 14}
    assert grpc_status(500) == 2 and grpc_status(200) == 2 and grpc_status(418) == 2
    assert set(GRPC_STATUS) == {400, 401, 403, 404, 429, 502, 503, 504}


def test_grpc_message_is_percent_encoded() -> None:
    assert percent_encode(b"RBAC: access denied") == b"RBAC: access denied"
    assert percent_encode(b"100% \xc3\xa9\n") == b"100%25 %C3%A9%0A"


def test_a_refusal_becomes_trailers_only_keeping_its_headers() -> None:
    answer = LocalResponse(401, b"Jwt is missing\n", ((b"www-authenticate", b"Bearer"), (b"content-length", b"9")),
                           reason="jwt")
    reply = local_reply(answer, b"application/grpc")
    assert (reply.status, reply.body, reply.reason) == (200, b"", "jwt")
    assert reply.headers == ((b"content-type", b"application/grpc"), (b"grpc-status", b"16"),
                             (b"grpc-message", b"Jwt is missing"), (b"www-authenticate", b"Bearer"))
    web = local_reply(answer, b"application/grpc-web-text")
    assert web.headers[0] == (b"content-type", b"application/grpc-web-text+proto")
    assert local_reply(answer, b"text/plain") is answer and local_reply(answer, None) is answer


def test_an_empty_refusal_says_why_from_its_reason() -> None:
    reply = local_reply(LocalResponse(404, reason="no virtual service or route matches"), b"application/grpc")
    assert dict(reply.headers)[b"grpc-message"] == b"no virtual service or route matches"
    assert dict(reply.headers)[b"grpc-status"] == b"12"
