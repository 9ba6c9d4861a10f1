"""The helpers in twistgw.options that the core and the shipped plugins
share (one duration parser, one Kubernetes-name check, one loopback check)."""

from __future__ import annotations

import pytest

from twistgw.config.names import is_loopback_endpoint
from twistgw.sdk import OptionsError
from twistgw.sdk import (
    DURATION_UNITS,
    check_fields,
    is_kubernetes_name,
    is_token,
    loopback_problem,
    parse_duration,
    require_mapping,
)

from support.trial import TestCase


class OptionsHelpersTests(TestCase):
    @pytest.mark.parametrize("text, seconds", [
        ("15s", 15.0), ("1.5s", 1.5), ("250ms", 0.25), ("2m", 120.0), ("1h", 3600.0), ("7", 7.0), (3, 3.0),
        (" 5 s ", 5.0), ("1d", None), ("5S", None), ("-1", None), (-1, None), (True, None), (None, None), ("", None),
    ])
    def test_parse_duration(self, text, seconds) -> None:
        assert parse_duration(text) == seconds

    def test_parse_duration_with_more_units(self) -> None:
        assert parse_duration("7d", {**DURATION_UNITS, "d": 86400}) == 7 * 86400

    @pytest.mark.parametrize("name, ok", [
        ("default", True), ("my-app.v2", True), ("a", True), ("Bad_Name", False), ("-x", False), ("x-", False),
        ("", False), ("a" * 253, True), ("a" * 254, False),
    ])
    def test_kubernetes_names(self, name: str, ok: bool) -> None:
        assert is_kubernetes_name(name) is ok

    def test_tokens(self) -> None:
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
    def test_loopback_check(self, listen: str, unix_ok: bool, tcp_only_ok: bool) -> None:
        assert (loopback_problem(listen) is None) is unix_ok
        assert (loopback_problem(listen, allow_unix=False) is None) is tcp_only_ok
        assert is_loopback_endpoint(listen) is tcp_only_ok  # the echo server's rule: tcp only


class RequireMappingTests(TestCase):
    """``require_mapping``'s wording: the path names the field; ``what`` only
    where the path does not (docs/plugins.md)."""

    @pytest.mark.parametrize("path, what, text", [
        (("keysSecretRef",), None, "keysSecretRef: must be a mapping, got a string"),
        (("keysSecretRef",), "keysSecretRef", "keysSecretRef: must be a mapping, got a string"),  # not doubled
        (("rules", 2), "rule", "rules[2]: rule must be a mapping, got a string"),
        ((), "headerToken", "must be a mapping, got a string"),  # the caller's location names it
    ])
    def test_wording(self, path, what, text) -> None:
        with pytest.raises(OptionsError) as caught:
            require_mapping("x", path, what)
        assert str(caught.value) == text
        assert caught.value.path == path

    def test_a_mapping_is_returned(self) -> None:
        value = {"name": "keys"}
        assert require_mapping(value, ("keysSecretRef",)) is value

    def test_check_fields_reports_each_unknown_key_under_the_path(self) -> None:
        with pytest.raises(OptionsError) as caught:
            check_fields({"name": 1, "nmae": 2, "ns": 3}, ("name", "namespace"), ("keysSecretRef",))
        assert [(p.path, p.reason) for p in caught.value.problems] == [
            (("keysSecretRef", "nmae"), "unknown field 'nmae'; expected one of: name, namespace"),
            (("keysSecretRef", "ns"), "unknown field 'ns'; expected one of: name, namespace")]
