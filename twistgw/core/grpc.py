"""gRPC at the gateway (pure), in two parts.

**The gateway's own answers.** A gRPC client reads the outcome of a call from ``grpc-status`` (and
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

**On the way to an HTTP/2 upstream**: what a forwarded request becomes
when its upstream speaks HTTP/2 (``useHttp2``).

* ``te: trailers`` goes on when the client said it (the one ``te`` value
  carried; ``core.headers.wants_trailers``), and on every gRPC request
  (gRPC's PROTOCOL-HTTP2 requires it; the client that did not say it still
  gets no trailers);
* a grpc-web request (``application/grpc-web``, ``application/grpc-web+proto``,
  ``application/grpc-web-text``, ``-text+proto``) becomes gRPC, as Envoy's
  ``grpc_web`` filter does and as Gloo turns it on by default: the content
  type ``application/grpc`` (the ``+suffix`` kept), ``te: trailers``; the
  engine decodes a ``-text`` body (base64) and answers grpc-web (trailers
  framed in the body, base64 when the client's ``Accept`` asks for text).
  A Gateway's ``httpGateway.options.grpcWeb.disable: true`` turns it off;
* ``grpc-timeout`` (``1S``, ``250m``: at most 8 digits and a unit) bounds
  the wait for the response head: min(route timeout, grpc-timeout), as a
  client deadline shorter than the route's makes the answer come in time
  (a longer one never extends it). When the client's deadline is the one
  that passes, the answer is ``grpc-status`` 4 (``DEADLINE_EXCEEDED``), as
  Envoy's for a stream past its ``grpc-timeout``.

See docs/grpc.md.
"""

from __future__ import annotations

from typing import Any

from twistgw.core.headers import wants_trailers
from twistgw.core.plan import LocalResponse

__all__ = ["GRPC_STATUS", "GRPC_WEB", "GRPC_WEB_TEXT", "grpc_kind", "grpc_status", "grpc_timeout", "is_grpc",
           "local_reply", "percent_encode", "prepare_http2", "request_content_type"]

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
    # a gRPC status the answer names itself (DEADLINE_EXCEEDED when the client's grpc-timeout passed)
    status = next((value for name, value in answer.headers if name.lower() == b"grpc-status"), None)
    headers: list[tuple[bytes, bytes]] = [(b"content-type", _CONTENT_TYPES[kind]),
                                          (b"grpc-status", status or b"%d" % grpc_status(answer.status))]
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

# -- on the way to an HTTP/2 upstream ----------------------------------------

#: what :func:`prepare_http2` returns for a grpc-web request: answer in binary, or in text (base64)
GRPC_WEB = 1
GRPC_WEB_TEXT = 2
_UNITS = {ord("H"): 3600.0, ord("M"): 60.0, ord("S"): 1.0, ord("m"): 1e-3, ord("u"): 1e-6, ord("n"): 1e-9}
_WEB = b"application/grpc-web"
_WEB_TEXT = b"application/grpc-web-text"

def _media(value: bytes) -> bytes:
    return value.split(b";", 1)[0].strip().lower()

def is_grpc(content_type: bytes | None) -> bool:
    """``application/grpc`` or ``application/grpc+proto`` (any suffix), not grpc-web."""
    if not content_type:
        return False
    media = _media(content_type)
    return media == b"application/grpc" or media.startswith(b"application/grpc+")

def grpc_timeout(value: bytes) -> float | None:
    """The seconds of a ``grpc-timeout`` value (gRPC's PROTOCOL-HTTP2:
    1 to 8 ASCII digits and one of ``HMSmun``), None if it is not one."""
    value = value.strip()
    if not 2 <= len(value) <= 9 or not value[:-1].isdigit() or value[-1] not in _UNITS:
        return None
    return int(value[:-1]) * _UNITS[value[-1]]

def _web_kind(raw: dict[bytes, list[bytes]]) -> tuple[int, bytes] | None:
    """(answer kind, the gRPC content type) of a grpc-web request, else None."""
    ct = raw.get(b"Content-Type")
    if not ct:
        return None
    media = _media(ct[0])
    if media == _WEB_TEXT or media.startswith(_WEB_TEXT + b"+"):
        suffix = media[len(_WEB_TEXT):]
    elif media == _WEB or media.startswith(_WEB + b"+"):
        suffix = media[len(_WEB):]
    else:
        return None
    accept = raw.get(b"Accept")
    text = accept is not None and any(_media(a).startswith(_WEB_TEXT) for a in b",".join(accept).split(b","))
    return (GRPC_WEB_TEXT if text else GRPC_WEB), b"application/grpc" + suffix

def prepare_http2(forward: Any, received_te: list[bytes] | None, grpc_web: bool) -> tuple[int, bool] | None:
    """Adjust ``forward`` (a ``core.plan.Forward`` to an HTTP/2 upstream)
    as the module says. ``received_te``: the client's ``TE`` values;
    ``grpc_web``: the listener translates grpc-web. Returns None for a
    request that is not grpc-web, else (the answer's kind, whether the
    request body is base64 text)."""
    raw = forward.headers.raw
    if wants_trailers(received_te):
        raw[b"TE"] = [b"trailers"]
    web = _web_kind(raw) if grpc_web else None
    text_body = False
    if web is not None:
        text_body = _media(raw[b"Content-Type"][0]).startswith(_WEB_TEXT)
        raw[b"Content-Type"] = [web[1]]
        raw[b"TE"] = [b"trailers"]
    ct = raw.get(b"Content-Type")
    if ct is None or not is_grpc(ct[0]):
        return None if web is None else (web[0], text_body)
    raw[b"TE"] = [b"trailers"]  # gRPC requires it over HTTP/2 (a client that did not say so gets no trailers)
    timeout = raw.get(b"Grpc-Timeout")
    if timeout:
        seconds = grpc_timeout(timeout[0])
        if seconds is not None and seconds < forward.timeout:
            forward.timeout = seconds
            forward.grpc_deadline = True
    return None if web is None else (web[0], text_body)
