"""A Gateway's ``options.accessLoggingService`` in memory: Gloo's own docs
YAML loads, each Envoy command operator gives what docs/gateways.md says,
unsupported operators, sinks and filters are refused by name at load, and
the filters admit what Envoy's would. The files themselves, through a real
``twist twistgw``, are in ``tests/integration/test_gateway_accesslog_e2e.py``."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from twistgw.config.loader import ConfigError, load_text
from twistgw.config.envoyformat import FormatError, parse_json, parse_text
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot

UPSTREAM = """\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: backend, namespace: gloo-system}
spec:
  static: {hosts: [{addr: 127.0.0.1, port: 9}]}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: default, namespace: gloo-system}
spec:
  virtualHost:
    domains: ['*']
    routes:
    - matchers: [{prefix: /}]
      routeAction: {single: {upstream: {name: backend, namespace: gloo-system}}}
"""


def gateway(options: str) -> str:
    return UPSTREAM + "---\n" + textwrap.dedent("""\
        apiVersion: gateway.solo.io/v1
        kind: Gateway
        metadata: {name: gateway-proxy, namespace: gloo-system}
        spec:
          bindAddress: '::'
          bindPort: 8080
          httpGateway: {}
          options:
        """) + textwrap.indent(textwrap.dedent(options), "    ")


def sinks(options: str) -> Any:
    snap = build_snapshot(load_text(gateway(options)), PluginHost.create())
    return snap.gateways["gloo-system/gateway-proxy"].access_logs


def problems(options: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        build_snapshot(load_text(gateway(options)), PluginHost.create())
    return [str(issue) for issue in info.value.issues]


class Facts:
    """An exchange as the operators read it (what engine/accessfacts.py gives)."""

    def __init__(self, **kw: Any) -> None:
        self.method = "GET"
        self.target = "/pets?id=1"
        self.protocol = "HTTP/1.1"
        self.status = 200
        self.duration = 0.0123
        self.start = 1795676400.25  # 2026-11-26T07:00:00.250Z
        self.client = "203.0.113.7"
        self.upstream_host = "127.0.0.1:9"
        self.upstream = "gloo-system/backend"
        self.route = "routes[0]"
        self.server_name = None
        self.health_check = False
        self.headers = {b"Host": "api.example.com", b"User-Agent": "curl/8", b"X-Request-Id": "abc"}
        self.__dict__.update(kw)

    def header(self, canonical: bytes) -> str | None:
        if canonical == b":scheme":
            return "http"
        return self.headers.get(canonical)

    def peer(self) -> tuple[str, int]:
        return ("10.0.0.1", 40000)

    def local(self) -> tuple[str, int]:
        return ("127.0.0.1", 8080)


# -- Gloo's docs ----------------------------------------------------------------

#: the access-logging guide's Gateways (docs/content/guides/security/access_logging), as written
GLOO_JSON = """\
accessLoggingService:
  accessLog:
    - fileSink:
        path: /dev/stdout
        jsonFormat:
          protocol: "%PROTOCOL%"
          duration: "%DURATION%"
          upstreamCluster: "%UPSTREAM_CLUSTER%"
          upstreamHost: "%UPSTREAM_HOST%"
"""
GLOO_STATUS_FILTER = """\
accessLoggingService:
  accessLog:
  - fileSink:
      jsonFormat:
        duration: '%DURATION%'
        origpath: '%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%'
        protocol: '%PROTOCOL%'
      path: /dev/stdout
    filter:
      statusCodeFilter:
        comparison:
          op: GE
          value:
            defaultValue: 400
            runtimeKey: "400"
"""
GLOO_HEADER_FILTER = """\
accessLoggingService:
  accessLog:
  - fileSink:
      jsonFormat:
        duration: '%DURATION%'
        origpath: '%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%'
        protocol: '%PROTOCOL%'
      path: /dev/stdout
    filter:
      headerFilter:
        header:
          invertMatch: true
          name: X-ENVOY-ORIGINAL-PATH
          prefixMatch: /httpbin/get
"""
#: the rate-limiting guide's header logging
GLOO_STRING = """\
accessLoggingService:
  accessLog:
  - fileSink:
      stringFormat: "test-header: %REQ(test-header)%\\n"
      path: /dev/stdout
"""


@pytest.mark.parametrize("options", [GLOO_JSON, GLOO_STATUS_FILTER, GLOO_HEADER_FILTER, GLOO_STRING],
                         ids=["json", "status-filter", "header-filter", "string"])
def test_gloo_docs_access_logs_load(options: str) -> None:
    (sink,) = sinks(options)
    assert sink.path == "/dev/stdout"


def test_the_guides_json_line() -> None:
    (sink,) = sinks(GLOO_JSON)
    line = sink.format.render(Facts())
    assert line.endswith("\n")
    assert json.loads(line) == {"protocol": "HTTP/1.1", "duration": 12, "upstreamCluster": "backend_gloo-system",
                                "upstreamHost": "127.0.0.1:9"}
    assert list(json.loads(line)) == ["protocol", "duration", "upstreamCluster", "upstreamHost"]  # config order


def test_status_code_filter_ge_400() -> None:
    (sink,) = sinks(GLOO_STATUS_FILTER)
    assert sink.admits(Facts(status=404)) and sink.admits(Facts(status=503))
    assert not sink.admits(Facts(status=200)) and not sink.admits(Facts(status=399))


def test_header_filter_invert_prefix() -> None:
    (sink,) = sinks(GLOO_HEADER_FILTER)
    # X-ENVOY-ORIGINAL-PATH is the path the client sent
    assert not sink.admits(Facts(target="/httpbin/get?x=1"))
    assert sink.admits(Facts(target="/httpbin/post"))
    # a client's own x-envoy-original-path is never taken for it
    assert sink.admits(Facts(target="/other", headers={b"X-Envoy-Original-Path": "/httpbin/get"}))


# -- operators ------------------------------------------------------------------

@pytest.mark.parametrize("fmt, line", [
    ("%REQ(:METHOD)% %REQ(:PATH)% %PROTOCOL%", "GET /pets?id=1 HTTP/1.1"),
    ("%REQ(:AUTHORITY)% %REQ(:SCHEME)% %REQ(user-agent)% %REQ(X-REQUEST-ID)%", "api.example.com http curl/8 abc"),
    ("%REQ(X-MISSING)% %REQ(X-MISSING?USER-AGENT)% %REQ(USER-AGENT):4%", "- curl/8 curl"),
    ("%RESPONSE_CODE% %DURATION%", "200 12"),
    ("%START_TIME%", "2026-11-26T07:00:00.250Z"),
    ("%START_TIME(%Y/%m/%d %H:%M:%S.%3f)% %START_TIME(%s)%", "2026/11/26 07:00:00.250 1795676400"),
    ("%UPSTREAM_HOST% %UPSTREAM_CLUSTER% %REQUESTED_SERVER_NAME%", "127.0.0.1:9 backend_gloo-system -"),
    ("%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT% %DOWNSTREAM_DIRECT_REMOTE_ADDRESS%", "203.0.113.7 10.0.0.1:40000"),
    ("%DOWNSTREAM_REMOTE_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_PORT%",
     "203.0.113.7:0 127.0.0.1:8080 8080"),
    ("100%% done", "100% done"),
])
def test_operators(fmt: str, line: str) -> None:
    assert parse_text(fmt).render(Facts()) == line


def test_no_newline_is_added_and_values_cannot_break_lines() -> None:
    """As in Envoy the format says where lines end; a value's control
    characters are escaped."""
    fmt = parse_text('"%REQ(USER-AGENT)%"\n')
    assert fmt.render(Facts(headers={b"User-Agent": "a\nb\x1b"})) == '"a\\x0ab\\x1b"\n'


def test_a_local_answer_has_no_upstream() -> None:
    fmt = parse_text("%UPSTREAM_HOST% %UPSTREAM_CLUSTER%")
    assert fmt.render(Facts(upstream_host=None, upstream=None)) == "- -"


def test_json_values_are_typed_when_one_operator() -> None:
    fmt = parse_json({"status": "%RESPONSE_CODE%", "host": "%UPSTREAM_HOST%", "text": "code %RESPONSE_CODE%",
                      "missing": "%REQ(X-NONE)%", "nested": {"ua": "%REQ(USER-AGENT)%"}})
    assert json.loads(fmt.render(Facts(upstream_host=None))) == {
        "status": 200, "host": None, "text": "code 200", "missing": None, "nested": {"ua": "curl/8"}}


@pytest.mark.parametrize("fmt, words", [
    ("%BYTES_SENT%", "%BYTES_SENT% is not supported by twistgw: twistgw does not count the bytes"),
    ("%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%", "%RESP% is not supported by twistgw: response headers"),
    ("%RESPONSE_FLAGS%", "%RESPONSE_FLAGS% is not supported by twistgw"),
    ("%RESPONSE_DURATION%", "%RESPONSE_DURATION% is not supported by twistgw: twistgw times each request whole"),
    ("%DYNAMIC_METADATA(io.solo.transformation:pod_name)%", "%DYNAMIC_METADATA% is not supported"),
    ("%FILTER_STATE(io.solo.cipher_detection_info)%", "%FILTER_STATE% is not supported"),
    ("%NO_SUCH_THING%", "%NO_SUCH_THING% is not a command operator twistgw knows"),
    ("%REQ()%", "needs a header name"),
    ("%REQ(:STATUS)%", ":STATUS is not a request pseudo-header"),
    ("%PROTOCOL(x)%", "takes no argument"),
    ("50% off", "starts no command operator"),
])
def test_unsupported_operators_are_refused_by_name(fmt: str, words: str) -> None:
    with pytest.raises(FormatError) as info:
        parse_text(fmt)
    assert words in str(info.value)


# -- the configuration ------------------------------------------------------------

@pytest.mark.parametrize("options, field, words", [
    ("accessLoggingService: {accessLog: [{grpcService: {logName: example, staticClusterName: c}}]}",
     "accessLog[0].grpcService", "an Envoy gRPC access-log service is not supported"),
    ("accessLoggingService: {accessLog: [{openTelemetryService: {logName: x}}]}",
     "accessLog[0].openTelemetryService", "OpenTelemetry export is not supported"),
    ("accessLoggingService: {accessLog: [{fileSink: {path: /dev/stdout, stringFormat: ''}}]}",
     "accessLog[0].fileSink.stringFormat", "Envoy's default format"),
    ("accessLoggingService: {accessLog: [{fileSink: {path: /dev/stdout}}]}",
     "accessLog[0].fileSink", "Envoy's default format"),
    ("accessLoggingService: {accessLog: [{fileSink: {path: /dev/stdout, stringFormat: '%BYTES_SENT%'}}]}",
     "accessLog[0].fileSink.stringFormat", "%BYTES_SENT% is not supported by twistgw"),
    ("accessLoggingService: {accessLog: [{fileSink: {path: /dev/stdout, jsonFormat: {a: {b: '%CEL(x)%'}}}}]}",
     "accessLog[0].fileSink.jsonFormat.a.b", "%CEL% is not supported by twistgw"),
    ("accessLoggingService: {accessLog: [{fileSink: {path: /dev/stdout, jsonFormat: {n: 3}}}]}",
     "accessLog[0].fileSink.jsonFormat.n", "must be a string"),
    ("accessLoggingService: {accessLog: [{fileSink: {path: logs/a.log, stringFormat: x}}]}",
     "accessLog[0].fileSink.path", "must be an absolute path"),
    ("accessLoggingService: {accessLog: [{fileSink: {path: /a, stringFormat: x, jsonFormat: {a: b}}}]}",
     "accessLog[0].fileSink", "not both"),
    ("accessLoggingService: {accessLog: [{fileSink: {path: /a, stringFormat: x}, filter: {runtimeFilter: {}}}]}",
     "accessLog[0].filter.runtimeFilter", "no runtime layer"),
    ("accessLoggingService: {accessLog: [{fileSink: {path: /a, stringFormat: x},"
     " filter: {responseFlagFilter: {}}}]}", "accessLog[0].filter.responseFlagFilter", "response flags"),
    ("accessLoggingService: {accessLog: [{fileSink: {path: /a, stringFormat: x},"
     " filter: {statusCodeFilter: {comparison: {op: GT, value: {defaultValue: 1}}}}}]}",
     "statusCodeFilter.comparison.op", "EQ"),
    ("accessLoggingService: {accessLog: [{fileSink: {path: /a, stringFormat: x},"
     " filter: {headerFilter: {header: {name: ':status', exactMatch: '1'}}}}]}",
     "headerFilter.header.name", "not a request pseudo-header"),
    ("socketOptions: []", "spec.options.socketOptions", "socket options are not supported"),
    ("perConnectionBufferLimitBytes: 1024", "spec.options.perConnectionBufferLimitBytes", "own limits"),
    ("colour: blue", "spec.options.colour", "not a listener option twistgw knows"),
])
def test_refused_with_field_and_reason(options: str, field: str, words: str) -> None:
    found = problems(options)
    assert any(field in p and words in p for p in found), found
    assert all("Gateway gloo-system/gateway-proxy: spec.options" in p for p in found), found


def test_a_refused_grpc_sink_is_one_problem_not_two() -> None:
    found = problems("accessLoggingService: {accessLog: [{grpcService: {logName: x}}]}")
    assert len(found) == 1, found


@pytest.mark.parametrize("filt, admitted, refused", [
    ("{durationFilter: {comparison: {op: GE, value: {defaultValue: 10}}}}", {"duration": 0.0123},
     {"duration": 0.009}),
    ("{statusCodeFilter: {comparison: {value: {defaultValue: 404}}}}", {"status": 404}, {"status": 403}),
    ("{statusCodeFilter: {comparison: {op: LE, value: {runtimeKey: k, defaultValue: 299}}}}", {"status": 200},
     {"status": 300}),
    ("{notHealthCheckFilter: {}}", {}, {"health_check": True}),
    ("{headerFilter: {header: {name: ':method', exactMatch: POST}}}", {"method": "POST"}, {"method": "GET"}),
    ("{headerFilter: {header: {name: x-debug}}}", {"headers": {b"X-Debug": "1"}}, {"headers": {}}),
    ("{headerFilter: {header: {name: x-debug, presentMatch: false}}}", {"headers": {}},
     {"headers": {b"X-Debug": "1"}}),
    ("{headerFilter: {header: {name: user-agent, safeRegexMatch: {regex: 'curl/[0-9]+'}}}}", {},
     {"headers": {b"User-Agent": "wget"}}),
    ("{headerFilter: {header: {name: user-agent, suffixMatch: /8}}}", {}, {"headers": {b"User-Agent": "curl/7"}}),
    ("{headerFilter: {header: {name: user-agent, containsMatch: rl/}}}", {}, {"headers": {b"User-Agent": "wget"}}),
    ("{andFilter: {filters: [{statusCodeFilter: {comparison: {op: GE, value: {defaultValue: 500}}}},"
     " {headerFilter: {header: {name: ':path', prefixMatch: /pets}}}]}}", {"status": 502},
     {"status": 502, "target": "/other"}),
    ("{orFilter: {filters: [{statusCodeFilter: {comparison: {op: GE, value: {defaultValue: 500}}}},"
     " {durationFilter: {comparison: {op: GE, value: {defaultValue: 1000}}}}]}}", {"duration": 2.0},
     {"status": 404}),
])
def test_filters(filt: str, admitted: dict[str, Any], refused: dict[str, Any] | None) -> None:
    (sink,) = sinks(f"accessLoggingService: {{accessLog: [{{fileSink: {{path: /a, stringFormat: x}},"
                    f" filter: {filt}}}]}}")
    assert sink.admits(Facts(**admitted))
    if refused is not None:
        assert not sink.admits(Facts(**refused))


def test_several_sinks_in_order() -> None:
    found = sinks("""\
        accessLoggingService:
          accessLog:
          - fileSink: {path: /var/log/a.log, stringFormat: "%RESPONSE_CODE%\\n"}
          - fileSink: {path: /var/log/b.json, jsonFormat: {code: '%RESPONSE_CODE%'}}
        """)
    assert [s.path for s in found] == ["/var/log/a.log", "/var/log/b.json"]
    assert [s.format.render(Facts()) for s in found] == ["200\n", '{"code": 200}\n']
