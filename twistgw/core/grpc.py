"""gRPC on the way to an HTTP/2 upstream (pure): what a forwarded request
becomes when its upstream speaks HTTP/2 (``useHttp2``).

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
  (a longer one never extends it).
"""

from __future__ import annotations

from typing import Any

from twistgw.core.headers import wants_trailers

__all__ = ["GRPC_WEB", "GRPC_WEB_TEXT", "grpc_timeout", "is_grpc", "prepare_http2"]

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
    return None if web is None else (web[0], text_body)
