"""The one located field reader (twistgw.api.fields): its checks and
wordings, the by-name view (Fields), the one duration parser, protobuf's
proto names (issue 32 item 6), and the loader's values read once (issue 34
item 3: a value read at load is compiled once, never re-read from the raw
dict)."""

from __future__ import annotations

import pytest

import twistgw.api.durations as durations
from twistgw import OptionsError
from twistgw.api.fields import REQUIRED, FieldReader, Problems, proto_name, written_field, written_path
from twistgw.config.loader import ConfigError, load_text
from twistgw.config.routeoptions import Timeout, Upgrades

from support.trial import TestCase


def reader() -> tuple[FieldReader, list[tuple[tuple, str]]]:
    found: list[tuple[tuple, str]] = []
    return FieldReader(lambda path, reason: found.append((path, reason))), found


class DurationTests(TestCase):
    """One parser: Go's time.ParseDuration forms (what Gloo's protobuf JSON
    reader parses a Duration with), and the forms twistgw always read."""

    @pytest.mark.parametrize("text, seconds", [
        ("1.5s", 1.5), ("100ms", 0.1), ("15s", 15.0), ("2m", 120.0), ("1h", 3600.0), ("1h30m", 5400.0),
        ("2m30.5s", 150.5), ("250us", 0.00025), ("250\u00b5s", 0.00025), ("10ns", 1e-8), ("+5s", 5.0),
        (".5s", 0.5), ("0", 0.0), ("0s", 0.0), ("7", 7.0), (" 5 s ", 5.0), (3, 3.0), (0.25, 0.25),
        ("5S", None), ("1d", None), ("-1s", None), ("-1", None), ("s", None), ("1m-5s", None), ("", None),
        ("1.2.3s", None), (True, None), (None, None), (float("inf"), None), ("5 minutes", None),
    ])
    def test_forms(self, text, seconds) -> None:
        found = durations.parse_duration(text)
        assert found == pytest.approx(seconds) if seconds is not None else found is None

    def test_more_units(self) -> None:
        assert durations.parse_duration("1d", {**durations.DURATION_UNITS, "d": 86400}) == 86400

    @pytest.mark.parametrize("value, lo, hi, reason", [
        ("soon", None, None, "must be a duration above zero such as '5s' or '250ms', got 'soon'"),
        (0, None, None, "must be a duration above zero such as '5s' or '250ms', got 0"),
        ("2m", 0.001, 60, "must be a duration from 1ms to 60s such as '5s' or '250ms', got '2m'"),
        ("-1s", 0, None, "must be a duration such as '5s' or '250ms', got '-1s'"),
        ("2h", None, 60, "must be a duration above zero and at most 60s such as '5s' or '250ms', got '2h'"),
    ])
    def test_one_wording(self, value, lo, hi, reason) -> None:
        r, found = reader()
        with r.part():
            r.duration(value, ("timeout",), lo, hi)
        assert found == [(("timeout",), reason)]

    def test_zero_when_allowed(self) -> None:
        r, found = reader()
        assert r.duration("0s", ("t",), lo=0) == 0 and not found


class ProtoNameTests(TestCase):
    @pytest.mark.parametrize("camel, snake", [
        ("retriableStatusCodes", "retriable_status_codes"), ("numRetries", "num_retries"),
        ("http2ProtocolOptions", "http2_protocol_options"), ("timeout", "timeout"), ("oauth2", "oauth2"),
        ("useXForwardedFor", "use_x_forwarded_for"), ("startTLS", "start_tls"), ("enableXRatelimitHeaders", "enable_x_ratelimit_headers"),
    ])
    def test_proto_name(self, camel, snake) -> None:
        assert proto_name(camel) == snake

    def test_both_spellings_read_as_the_json_name(self) -> None:
        r, found = reader()
        m = r.mapping({"retry_on": "5xx", "num_retries": 2, "perTryTimeout": "1s"}, ("retries",),
                      {"retryOn", "numRetries", "perTryTimeout"}, required=("retryOn",))
        assert m == {"retryOn": "5xx", "numRetries": 2, "perTryTimeout": "1s"} and not found

    def test_a_field_written_twice_names_both_spellings(self) -> None:
        r, found = reader()
        r.mapping({"numRetries": 1, "num_retries": 2}, ("retries",), {"numRetries"})
        assert found == [(("retries", "numRetries"), "is written twice, as 'numRetries' and 'num_retries': the"
                          " proto name and the JSON name of one field; keep one")]

    def test_unknown_fields_name_the_spelling_written(self) -> None:
        r, found = reader()
        r.mapping({"num_retires": 2}, ("retries",), {"numRetries"})
        assert found == [(("retries", "num_retires"), "unknown field 'num_retires'; expected one of: numRetries")]

    def test_free_form_and_kubernetes_mappings_keep_their_keys(self) -> None:
        r, found = reader()
        assert r.mapping({"x_user": "a"}, ("headers",)) == {"x_user": "a"}
        r.mapping({"target_port": 80}, ("spec",), {"targetPort"}, proto_names=False)
        assert found == [(("spec", "target_port"), "unknown field 'target_port'; expected one of: targetPort")]

    def test_known_names_of_an_open_mapping(self) -> None:
        r, _ = reader()
        m = r.mapping({"header_manipulation": {}, "my_plugin": {}}, ("options",), names={"headerManipulation"})
        assert m == {"headerManipulation": {}, "my_plugin": {}}

    def test_where_a_proto_name_is_written(self) -> None:
        lines = {("spec",), ("spec", "retries"), ("spec", "retries", "retriable_status_codes"),
                 ("spec", "retries", "retriable_status_codes", 0)}
        path = ("spec", "retries", "retriableStatusCodes", 0)
        assert written_path(lines, path) == ("spec", "retries", "retriable_status_codes", 0)
        assert written_field(lines, path) == "spec.retries.retriableStatusCodes[0] (written retriable_status_codes)"
        assert written_field(lines, ("spec", "retries")) == "spec.retries"


class FieldsTests(TestCase):
    """Fields: a mapping's fields by name; a problem is recorded and the
    default read, so the next field is read too."""

    def test_every_problem_of_a_mapping_at_once(self) -> None:
        p = Problems()
        f = p.fields({"timeout": "soon", "name": 3, "keep": "yes", "extra": 1}, ("cfg",),
                     ("timeout", "name", "keep", "url"))
        assert f.duration("timeout", 5.0) == 5.0
        assert f.string("name") is None
        assert f.boolean("keep", False) is False
        assert f.string("url") is None
        assert f.string("other", "d") == "d"
        with pytest.raises(OptionsError) as caught:
            p.raise_if_any()
        assert [(e.dotted_path(), e.reason) for e in caught.value.problems] == [
            ("cfg.extra", "unknown field 'extra'; expected one of: timeout, name, keep, url"),
            ("cfg.timeout", "must be a duration above zero such as '5s' or '250ms', got 'soon'"),
            ("cfg.name", "must be a string, got an integer"),
            ("cfg.keep", "must be true or false, got a string"),
            ("cfg.url", "is required"),
        ]

    def test_null_is_absent(self) -> None:
        p = Problems()
        f = p.fields({"a": None}, (), ("a",))
        assert f.string("a", "x") == "x" and f.string("a") is None and f.fields("b").path == ("b",)
        assert [e.reason for e in p.errors] == ["is required"]

    def test_a_value_that_is_not_a_mapping_is_one_problem(self) -> None:
        p = Problems()
        f = p.fields([1], ("tls",), ("caFile",))
        assert not f.ok and f.string("caFile") is None and f.fields("x").string("y", REQUIRED) is None
        assert [(e.dotted_path(), e.reason) for e in p.errors] == [("tls", "must be a mapping, got a list")]

    def test_nested_fields_and_references(self) -> None:
        p = Problems()
        f = p.fields({"ref": {"name": "s"}, "items": [{"a": "1"}, {"b": 2}]}, ("x",), ("ref", "items"))
        assert f.reference("ref", "default") == ("s", "default")
        items = f.items_of("items", ("a",))
        assert [i.string("a", None) for i in items] == ["1", None]
        assert [e.dotted_path() for e in p.errors] == ["x.items[1].b"]

    def test_a_check_that_fails_outside_a_part_carries_every_problem(self) -> None:
        p = Problems()
        p.issue(("a",), "first")
        with pytest.raises(OptionsError) as caught:
            p.string(3, ("b",))
        assert [e.reason for e in caught.value.problems] == ["first", "must be a string, got an integer"]

    def test_blank_is_empty(self) -> None:
        r, found = reader()
        with r.part():
            r.string("   ", ("realm",))
        assert found == [(("realm",), "must not be empty")]


ROUTE = """\
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  virtualHost:
    domains: ['*']
    routes:
    - matchers: [{{prefix: /a}}]
      routeAction: {{single: {{upstream: {{name: up, namespace: default}}}}}}
      options: {options}
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: up, namespace: default}}
spec: {{static: {{hosts: [{{addr: 127.0.0.1, port: 9}}]}}}}
"""


class ReadOnceTests(TestCase):
    """The core's own route options are read once, into the values the
    route carries; nothing reads the raw text again."""

    def test_timeout_and_upgrades_are_compiled_in_the_options(self) -> None:
        config = load_text(ROUTE.format(
            options="{timeout: 1m30s, prefix_rewrite: /v2/, upgrades: [{websocket: {enabled: false}}]}"))
        route = config.virtual_services[0].routes[0]
        assert route.options["timeout"] == Timeout(90.0) and route.options["upgrades"] == Upgrades(False)
        assert (route.timeout, route.prefix_rewrite, route.websocket) == (90.0, "/v2/", False)

    def test_each_duration_is_parsed_once(self) -> None:
        calls: list[object] = []
        real = durations.parse_duration

        def counting(value, units=durations.DURATION_UNITS):
            calls.append(value)
            return real(value, units)

        durations.parse_duration = counting
        try:
            import twistgw.api.fields as fields
            fields.parse_duration = counting  # the reader's own reference
            load_text(ROUTE.format(options="{timeout: 15s}"))
        finally:
            durations.parse_duration = real
            fields.parse_duration = real
        assert calls == ["15s"]

    def test_a_proto_name_problem_names_both_spellings(self) -> None:
        with pytest.raises(ConfigError) as caught:
            load_text(ROUTE.format(options="{retries: {retry_on: 5xx, num_retries: many}}"))
        [issue] = caught.value.issues
        assert issue.field == ("spec.virtualHost.routes[0].options.retries.numRetries (written num_retries)")
        assert issue.line == 10 and issue.reason == "must be an integer, got a string"
