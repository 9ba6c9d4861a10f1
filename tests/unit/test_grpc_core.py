"""core/grpc.py and the trailer policy of core/headers.py (pure): what a
request to an HTTP/2 upstream becomes (te: trailers, grpc-web translated,
grpc-timeout), and which trailer fields pass."""

from __future__ import annotations

import pytest

from twistgw.api.headers import Headers
from twistgw.api.types import Endpoint, UpstreamInfo
from twistgw.core.grpc import GRPC_WEB, GRPC_WEB_TEXT, grpc_timeout, is_grpc, prepare_http2
from twistgw.core.headers import trailer_pairs, wants_trailers
from twistgw.core.plan import Forward


def forward(*headers: tuple[bytes, bytes], timeout: float = 15.0) -> Forward:
    h = Headers()
    for name, value in headers:
        h.addRawHeader(name, value)
    return Forward(Endpoint("127.0.0.1", 1), b"POST", b"/svc/M", h, timeout, UpstreamInfo("d", "u", ()))


@pytest.mark.parametrize("value, seconds", [
    (b"1S", 1.0), (b"250m", 0.25), (b"2M", 120.0), (b"1H", 3600.0), (b"5000u", 0.005), (b"99999999n", 0.099999999),
    (b"100000000S", None), (b"S", None), (b"1s", None), (b"-1S", None), (b"1.5S", None), (b"", None),
])
def test_grpc_timeout_values(value: bytes, seconds: float | None) -> None:
    found = grpc_timeout(value)
    assert found == pytest.approx(seconds) if seconds is not None else found is None


def test_is_grpc() -> None:
    assert is_grpc(b"application/grpc") and is_grpc(b"application/grpc+proto") and is_grpc(b"Application/GRPC")
    assert not is_grpc(b"application/grpc-web") and not is_grpc(b"application/grpcx") and not is_grpc(None)


def test_grpc_requests_get_te_trailers_and_the_shorter_deadline() -> None:
    f = forward((b"Content-Type", b"application/grpc"), (b"Grpc-Timeout", b"200m"))
    assert prepare_http2(f, None, True) is None
    assert f.headers.raw[b"TE"] == [b"trailers"] and f.timeout == pytest.approx(0.2)
    f = forward((b"Content-Type", b"application/grpc"), (b"Grpc-Timeout", b"60S"), timeout=2.0)
    prepare_http2(f, None, True)
    assert f.timeout == 2.0  # never longer than the route's
    f = forward((b"Content-Type", b"application/json"), (b"Grpc-Timeout", b"1m"))
    prepare_http2(f, None, True)
    assert f.timeout == 15.0 and b"TE" not in f.headers.raw  # not gRPC: the header means nothing
    f = forward((b"Content-Type", b"text/plain"))
    prepare_http2(f, [b"gzip, trailers;q=1"], True)
    assert f.headers.raw[b"TE"] == [b"trailers"]  # the client's TE: trailers is carried, nothing else


def test_grpc_web_becomes_grpc() -> None:
    f = forward((b"Content-Type", b"application/grpc-web+proto"))
    assert prepare_http2(f, None, True) == (GRPC_WEB, False)
    assert f.headers.raw[b"Content-Type"] == [b"application/grpc+proto"] and f.headers.raw[b"TE"] == [b"trailers"]
    f = forward((b"Content-Type", b"application/grpc-web-text"), (b"Accept", b"application/grpc-web-text"))
    assert prepare_http2(f, None, True) == (GRPC_WEB_TEXT, True)
    assert f.headers.raw[b"Content-Type"] == [b"application/grpc"]
    f = forward((b"Content-Type", b"application/grpc-web-text"))
    assert prepare_http2(f, None, True) == (GRPC_WEB, True)  # binary answer unless Accept asks for text (Envoy)
    f = forward((b"Content-Type", b"application/grpc-web"))
    assert prepare_http2(f, None, False) is None  # grpcWeb.disable: passed as it is
    assert f.headers.raw[b"Content-Type"] == [b"application/grpc-web"]


def test_trailer_fields_that_pass() -> None:
    assert trailer_pairs([(b"Grpc-Status", b"0 "), (b"content-length", b"5"), (b":status", b"200"),
                          (b"x_a", b"1"), (b"transfer-encoding", b"chunked"), (b"host", b"h"),
                          (b"x-echo", b"e")]) == ((b"grpc-status", b"0"), (b"x-echo", b"e"))
    assert wants_trailers([b"trailers"]) and wants_trailers([b"deflate", b"Trailers"])
    assert not wants_trailers(None) and not wants_trailers([b"trailersx"])
