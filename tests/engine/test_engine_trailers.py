"""Trailers through the HTTP/1.1 engine, both ways: an upstream's chunked
trailers reach a client that sent ``TE: trailers`` (in the last chunk) and
are dropped for one that did not; a client's chunked request trailers reach
the upstream in the last chunk of the re-framed body; trailer fields that
must never be trailers (framing, routing, pseudo-headers) never pass."""

from __future__ import annotations

from typing import Any

import pytest_twisted

from support.http import raw_exchange, static_upstream_yaml, vs_yaml

CHUNKED_WITH_TRAILERS = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
                         b"Trailer: X-Checksum\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: abc\r\n"
                         b"Host: elsewhere\r\nX-Other: 1\r\n\r\n")


def last_chunk(data: bytes) -> bytes:
    at = data.rfind(b"\r\n0\r\n")
    assert at != -1, data
    return data[at + 2:]


def done(data: bytes) -> bool:
    return data.endswith(b"\r\n\r\n") and b"\r\n0\r\n" in data


@pytest_twisted.ensureDeferred
async def test_response_trailers_reach_a_client_that_accepts_them(raw_server: Any, config_dir: Any,
                                                                  gateway: Any) -> None:
    up = raw_server(CHUNKED_WITH_TRAILERS)
    gw = gateway(config_dir(static_upstream_yaml("backend", [up.port]) + "---\n" + vs_yaml()))
    got = await raw_exchange(gw.port, b"GET / HTTP/1.1\r\nHost: a\r\nTE: trailers\r\n\r\n", until=done)
    assert b"hello" in got.data
    assert last_chunk(got.data) == b"0\r\nx-checksum: abc\r\nx-other: 1\r\n\r\n"  # Host never a trailer
    got = await raw_exchange(gw.port, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", until=done)
    assert last_chunk(got.data) == b"0\r\n\r\n"  # no TE: trailers, no trailers (RFC 9110 §6.5.1)
    assert b"Trailer:" not in got.data  # hop-by-hop


@pytest_twisted.ensureDeferred
async def test_request_trailers_reach_the_upstream(raw_server: Any, config_dir: Any, gateway: Any) -> None:
    up = raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    gw = gateway(config_dir(static_upstream_yaml("backend", [up.port]) + "---\n" + vs_yaml()))
    got = await raw_exchange(gw.port, b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                                      b"3\r\nabc\r\n0\r\nX-Sum: 9\r\nHost: evil\r\nX_Under: 1\r\n\r\n",
                             until=lambda d: d.endswith(b"ok"))
    assert got.status == 200
    sent = up.data
    assert sent.endswith(b"3\r\nabc\r\n0\r\nx-sum: 9\r\n\r\n"), sent  # Host and _ names dropped


@pytest_twisted.ensureDeferred
async def test_too_many_request_trailers_are_refused(raw_server: Any, config_dir: Any, gateway: Any) -> None:
    up = raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    gw = gateway(config_dir(static_upstream_yaml("backend", [up.port]) + "---\n" + vs_yaml()))
    trailers = b"".join(b"X-T%d: v\r\n" % i for i in range(150))
    got = await raw_exchange(gw.port, b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                                      b"3\r\nabc\r\n0\r\n" + trailers + b"\r\n")
    assert b"X-T149" not in up.data
    assert got.closed
