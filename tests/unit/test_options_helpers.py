"""The helpers in twistgw.options that the core and the shipped plugins
share (one duration parser, one Kubernetes-name check, one loopback check)."""

from __future__ import annotations

import pytest

from twistgw.config.names import is_loopback_endpoint
from twistgw.options import DURATION_UNITS, is_kubernetes_name, is_token, loopback_problem, parse_duration


@pytest.mark.parametrize("text, seconds", [
    ("15s", 15.0), ("1.5s", 1.5), ("250ms", 0.25), ("2m", 120.0), ("1h", 3600.0), ("7", 7.0), (3, 3.0),
    (" 5 s ", 5.0), ("1d", None), ("5S", None), ("-1", None), (-1, None), (True, None), (None, None), ("", None),
])
def test_parse_duration(text, seconds) -> None:
    assert parse_duration(text) == seconds


def test_parse_duration_with_more_units() -> None:
    assert parse_duration("7d", {**DURATION_UNITS, "d": 86400}) == 7 * 86400


@pytest.mark.parametrize("name, ok", [
    ("default", True), ("my-app.v2", True), ("a", True), ("Bad_Name", False), ("-x", False), ("x-", False),
    ("", False), ("a" * 253, True), ("a" * 254, False),
])
def test_kubernetes_names(name: str, ok: bool) -> None:
    assert is_kubernetes_name(name) is ok


def test_tokens() -> None:
    assert is_token("X-Api-Key") and is_token("GET")
    assert not is_token("x:y") and not is_token("a b") and not is_token("")


@pytest.mark.parametrize("listen, unix_ok, tcp_only_ok", [
    ("tcp:8081:interface=127.0.0.1", True, True),
    ("tcp:0:interface=127.0.0.5", True, True),
    ("tcp6:8081:interface=\\:\\:1", True, True),   # escaped colons, as Twisted writes IPv6
    ("tcp:1:interface=localhost", True, True),
    ("unix:/tmp/x.sock", True, False),
    ("tcp:8081", False, False),
    ("tcp:8081:interface=0.0.0.0", False, False),
    ("tcp6:8081:interface=\\:\\:", False, False),
    ("ssl:443:interface=127.0.0.1", False, False),
])
def test_loopback_check(listen: str, unix_ok: bool, tcp_only_ok: bool) -> None:
    assert (loopback_problem(listen) is None) is unix_ok
    assert (loopback_problem(listen, allow_unix=False) is None) is tcp_only_ok
    assert is_loopback_endpoint(listen) is tcp_only_ok  # the echo server's rule: tcp only
