"""gRPC's form of the gateway's own answers (pure).

A gRPC client reads the outcome of a call from ``grpc-status`` (and
``grpc-message``), never from the HTTP status: a plain ``403`` reaches it as
"UNKNOWN" or "UNAVAILABLE" with a confusing message. So, as Envoy's
``sendLocalReply`` does for a request whose content-type is gRPC's, every
answer the gateway gives itself (a plugin's refusal, 404 no route, 429,
503 no healthy upstream, 504, 500...) goes out *trailers-only*: HTTP 200,
``content-type: application/grpc``, ``grpc-status`` mapped from the HTTP
status by Envoy's table (``Grpc::Utility::httpToGrpcStatus``, itself gRPC's
``doc/http-grpc-status-mapping.md``), ``grpc-message`` the answer's text
(percent-encoded as gRPC's PROTOCOL-HTTP2.md says), the answer's other
headers kept (``WWW-Authenticate``, rate-limit headers), no body. Over
HTTP/2 that is one HEADERS frame with END_STREAM.

A grpc-web request (``application/grpc-web``, ``application/grpc-web-text``)
gets the same fields as headers with its own content-type
(``application/grpc-web+proto``, ``application/grpc-web-text+proto``):
what Envoy's grpc_web filter makes of a trailers-only reply, readable over
HTTP/1.1 by a browser's grpc-web client.

The engine calls :func:`local_reply` from every client-side ``respond``
(HTTP/1.1 :class:`~twistgw.engine.exchange.Exchange` and the HTTP/2
stream): the one place it is decided.
"""

from __future__ import annotations

from typing import Any

from twistgw.core.plan import LocalResponse

__all__ = ["GRPC_STATUS", "grpc_kind", "grpc_status", "local_reply", "percent_encode", "request_content_type"]

#: Envoy's ``Grpc::Utility::httpToGrpcStatus``; any other status is 2 (UNKNOWN)
GRPC_STATUS = {
    400: 13,  # INTERNAL
    401: 16,  # UNAUTHENTICATED
    403: 7,   # PERMISSION_DENIED
    404: 12,  # UNIMPLEMENTED
    429: 14,  # UNAVAILABLE
    502: 14,
    503: 14,
    504: 14,
}
_UNKNOWN = 2

#: the response content-type of each kind of gRPC request
_CONTENT_TYPES = {
    b"grpc": b"application/grpc",
    b"grpc-web": b"application/grpc-web+proto",
    b"grpc-web-text": b"application/grpc-web-text+proto",
}

#: bytes gRPC's ``grpc-message`` carries as they are: printable ASCII but ``%``
_PLAIN = frozenset(range(0x20, 0x7F)) - {0x25}

#: a grpc-message longer than this is cut (a header value, under the engine's limits)
MAX_MESSAGE = 1024


def grpc_status(http_status: int) -> int:
    """The gRPC status code for an HTTP status (Envoy's table)."""
    return GRPC_STATUS.get(http_status, _UNKNOWN)


def grpc_kind(content_type: bytes | None) -> bytes | None:
    """``b"grpc"``, ``b"grpc-web"`` or ``b"grpc-web-text"`` for a gRPC
    request's content-type (``application/grpc``, optionally followed by
    ``+codec`` or ``;parameters``, as Envoy's ``hasGrpcContentType``), else
    None."""
    if content_type is None or content_type[:16].lower() != b"application/grpc":
        return None
    rest = content_type[16:].lower()
    for kind, prefix in ((b"grpc-web-text", b"-web-text"), (b"grpc-web", b"-web"), (b"grpc", b"")):
        if rest.startswith(prefix):
            tail = rest[len(prefix):]
            if not tail or tail[:1] in (b"+", b";"):
                return kind
    return None


def percent_encode(text: bytes) -> bytes:
    """``grpc-message``'s encoding: every byte outside printable ASCII, and
    ``%``, as ``%XX`` (the text as UTF-8 bytes)."""
    if all(b in _PLAIN for b in text):
        return text
    return b"".join(bytes((b,)) if b in _PLAIN else b"%%%02X" % b for b in text)


def _message(answer: LocalResponse) -> bytes:
    text = answer.body.strip()
    if not text and answer.status >= 400:
        text = answer.reason.encode("utf-8", "replace")
    return percent_encode(text[:MAX_MESSAGE])


def local_reply(answer: LocalResponse, content_type: bytes | None) -> LocalResponse:
    """``answer`` as a gRPC client must get it when the request's
    content-type (``content_type``, its first value, or None) is gRPC's;
    ``answer`` itself otherwise."""
    kind = grpc_kind(content_type)
    if kind is None:
        return answer
    headers: list[tuple[bytes, bytes]] = [(b"content-type", _CONTENT_TYPES[kind]),
                                          (b"grpc-status", b"%d" % grpc_status(answer.status))]
    message = _message(answer)
    if message:
        headers.append((b"grpc-message", message))
    for name, value in answer.headers:
        lname = name.lower()
        if lname not in (b"content-type", b"content-length", b"grpc-status", b"grpc-message"):
            headers.append((name, value))
    return LocalResponse(200, b"", tuple(headers), reason=answer.reason, answer=answer.answer)


def request_content_type(headers: Any) -> bytes | None:
    """The first ``Content-Type`` of request ``headers`` (twistgw's or
    Twisted's ``Headers``), or None."""
    values = headers.getRawHeaders(b"content-type")
    return values[0] if values else None
