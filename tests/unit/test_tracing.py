"""Tracing in memory: Gloo's tracing settings (a Gateway's
``httpConnectionManagerSettings.tracing``, a route's ``options.tracing``)
accepted or refused by name with file, line and field; W3C ``traceparent``
/ ``tracestate`` and B3 parsed strictly (a list of hostile values, each
starting a new trace); Envoy's ``tracePercentages`` measured over many
requests; the pipeline's decision per request (an incoming sampled flag
followed, the route's percentages replacing the Gateway's) and the headers
the upstream gets (``propagate: false``). End to end (a real gateway, a real
backend, a real OTLP receiver): ``tests/integration/test_tracing_e2e.py``.
"""

from __future__ import annotations

import textwrap

import pytest

from twistgw.api.headers import Headers
from twistgw.api.tracer import NO_SPAN, NO_TRACER
from twistgw.config.loader import ConfigError, load_text
from twistgw.config.tracing import ListenerTracing, RouteTracing, TracePercentages
from twistgw.core.pipeline import Pipeline, RequestHead
from twistgw.core.plan import Forward
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot
from twistgw.core.tracing import UNSAMPLED, GatewayTracing, decide
from twistgw.tracing.propagation import (
    B3_MULTI,
    B3_SINGLE,
    LOWS,
    PARENTS,
    TRACE_BLOCK,
    new_trace_id,
    new_traces,
    parse_b3_multi,
    parse_b3_single,
    parse_traceparent,
    parse_tracestate,
    read_incoming,
    sampling_value,
)
from twistgw.tracing.export import CollectorTarget
from twistgw.tracing.request import RequestTrace

from support.trial import TestCase

NS = "gloo-system"
TID = "4bf92f3577b34da6a3ce929d0e0e4736"
SID = "00f067aa0ba902b7"

COLLECTOR = """\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata:
  name: "opentelemetry-collector"
  namespace: gloo-system
spec:
  # REQUIRED FOR OPENTELEMETRY COLLECTION
  useHttp2: true
  static:
    hosts:
      - addr: "127.0.0.1"
        port: 4317
"""
BACKEND = """\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: backend, namespace: gloo-system}
spec:
  static: {hosts: [{addr: 127.0.0.1, port: 9}]}
"""


def vs(route_options: str = "{}") -> str:
    return textwrap.dedent(f"""\
        apiVersion: gateway.solo.io/v1
        kind: VirtualService
        metadata: {{name: default, namespace: gloo-system}}
        spec:
          virtualHost:
            domains: ['*']
            routes:
            - name: api
              matchers: [{{prefix: /}}]
              options: {route_options}
              routeAction: {{single: {{upstream: {{name: backend, namespace: gloo-system}}}}}}
        """)


def gateway(tracing: str) -> str:
    return textwrap.dedent("""\
        apiVersion: gateway.solo.io/v1
        kind: Gateway
        metadata: {name: gateway-proxy, namespace: gloo-system}
        spec:
          bindAddress: '::'
          bindPort: 8080
          httpGateway:
            options:
              httpConnectionManagerSettings:
                tracing:
        """) + textwrap.indent(textwrap.dedent(tracing), " " * 10)


OTEL = """\
openTelemetryConfig:
  collectorUpstreamRef: {namespace: gloo-system, name: opentelemetry-collector}
"""


def docs(*parts: str) -> str:
    return "---\n".join(parts)


def snapshot_of(text: str):
    return build_snapshot(load_text(text, "tracing.yaml"), PluginHost.create())


def issues(text: str) -> list:
    with pytest.raises(ConfigError) as info:
        snapshot_of(text)
    return list(info.value.issues)


def headers(**values: str) -> Headers:
    h = Headers()
    for name, value in values.items():
        h.setRawHeaders(name.replace("_", "-").encode(), [value.encode()])
    return h


class TracingConfigTests(TestCase):
    def test_the_gloo_guides_gateway_loads(self):
        """The OpenTelemetry guide's Upstream and Gateway (docs/observability.md)."""
        view = snapshot_of(docs(COLLECTOR, BACKEND, vs(), gateway(OTEL))).gateways[f"{NS}/gateway-proxy"]
        tracing = view.tracing
        assert tracing is not None
        assert (tracing.target.protocol, tracing.target.host, tracing.target.port, tracing.target.tls) == (
            "grpc", "127.0.0.1", 4317, False)
        assert tracing.resource == {"service.name": "gateway-proxy"}  # no serviceName: the Gateway's name
        assert tracing.max_queue == 1024

    def test_every_listener_field_read(self):
        text = OTEL + textwrap.dedent("""\
              serviceName: edge
              grpcService: {authority: otel.example:4317}
              maxCacheSize: 64
            requestHeadersForTags: [x-tenant]
            verbose: false
            spawnUpstreamSpan: true
            tracePercentages: {clientSamplePercentage: 12.5, randomSamplePercentage: 0.01, overallSamplePercentage: 99.99}
            environmentVariablesForTags: [{tag: pod, name: TWISTGW_TEST_UNSET_VARIABLE, defaultValue: unknown}]
            literalsForTags: [{tag: zone, value: eu-1}]
            """)
        tracing = snapshot_of(docs(COLLECTOR, BACKEND, vs(), gateway(text))).gateways[f"{NS}/gateway-proxy"].tracing
        assert tracing.resource == {"service.name": "edge"}
        assert tracing.target.authority == "otel.example:4317" and tracing.target.headers == ()
        assert tracing.max_queue == 64
        assert tracing.percentages == TracePercentages(client=1250, random=1, overall=9999)
        assert tracing.header_tags == (("x-tenant", b"X-Tenant"),)
        assert tracing.fixed_tags == {"pod": "unknown", "zone": "eu-1"}

    def test_the_collectors_tls_comes_from_its_upstream(self):
        import base64

        from support.pki import TestCA

        ca = TestCA()
        secret = textwrap.dedent(f"""\
            apiVersion: v1
            kind: Secret
            metadata: {{name: otel-ca, namespace: gloo-system}}
            type: kubernetes.io/tls
            data: {{ca.crt: {base64.b64encode(ca.pem).decode()}}}
            """)
        tls_collector = COLLECTOR.replace("  static:", "  sslConfig: {secretRef: {name: otel-ca}, sni: otel.test}\n"
                                          "  static:")
        tracing = snapshot_of(docs(secret, tls_collector, BACKEND, vs(), gateway(OTEL))).gateways[
            f"{NS}/gateway-proxy"].tracing
        assert tracing.target.tls and tracing.target.server_name == "otel.test"
        assert tracing.target.ca_pem == ca.pem

    def test_route_tracing_read(self):
        route = ("{tracing: {routeDescriptor: CUSTOM_ROUTE_DESCRIPTOR, propagate: false,"
                 " tracePercentages: {randomSamplePercentage: 50}}}")
        snap = snapshot_of(docs(COLLECTOR, BACKEND, vs(route), gateway(OTEL)))
        (vsr,) = snap.config.virtual_services
        found = vsr.routes[0].options["tracing"]
        assert (found.descriptor, found.propagate, found.percentages) == (
            "CUSTOM_ROUTE_DESCRIPTOR", False, TracePercentages(random=5000))

    def test_tracing_without_a_provider_traces_nothing(self):
        """``tracing: {}``: Gloo performs no tracing without a provider."""
        view = snapshot_of(docs(BACKEND, vs(), gateway("{}"))).gateways[f"{NS}/gateway-proxy"]
        assert view.tracing is None

    @pytest.mark.parametrize("tracing, field, words", [
        ("zipkinConfig: {collectorEndpoint: /api/v2/spans}", "tracing.zipkinConfig", "Zipkin provider is not supported"),
        ("datadogConfig: {}", "tracing.datadogConfig", "Datadog provider is not supported"),
        ("openCensusConfig: {}", "tracing.openCensusConfig", "OpenCensus provider is not supported"),
        ("metadataForTags: [{tag: t}]", "tracing.metadataForTags", "dynamic metadata"),
        ("openTelemetryConfig: {clusterName: otel}", "tracing.openTelemetryConfig.clusterName",
         "use collectorUpstreamRef"),
        ("openTelemetryConfig: {serviceName: x}", "tracing.openTelemetryConfig.collectorUpstreamRef",
         "is required"),
        (OTEL + "verbose: true", "tracing.verbose", "streaming events"),
        (OTEL + "spawnUpstreamSpan: false", "tracing.spawnUpstreamSpan", "always its own client span"),
        (OTEL + "tracePercentages: {randomSamplePercentage: 101}", "tracing.tracePercentages.randomSamplePercentage",
         "between 0"),
        (OTEL + "requestHeadersForTags: ['bad header']", "tracing.requestHeadersForTags[0]",
         "not a valid HTTP header name"),
        (OTEL + "requestHeadersForTags: [Authorization]", "tracing.requestHeadersForTags[0]", "carries credentials"),
        (OTEL + "literalsForTags: [{tag: t}]", "tracing.literalsForTags[0].value", "is required"),
        ("requestHeadersForTags: [x-a]", "tracing", "sets no provider"),
        ("openTelemetryConfig: {collectorUpstreamRef: {name: nowhere, namespace: gloo-system}}",
         "tracing.openTelemetryConfig.collectorUpstreamRef", "dangling reference: no Upstream gloo-system/nowhere"),
        ("openTelemetryConfig: {collectorUpstreamRef: {name: opentelemetry-collector}, grpcService: {colour: 1}}",
         "tracing.openTelemetryConfig.grpcService.colour", "unknown field"),
    ])
    def test_listener_fields_refused_by_name(self, tracing, field, words):
        found = issues(docs(COLLECTOR, BACKEND, vs(), gateway(tracing)))
        assert any(i.field.endswith(field) and words in i.reason and i.file.endswith("tracing.yaml")
                   and i.line is not None for i in found), [str(i) for i in found]

    @pytest.mark.parametrize("route, field, words", [
        ("{tracing: {propagate: maybe}}", "options.tracing.propagate", "must be true or false"),
        ("{tracing: {tracePercentages: {overallSamplePercentage: -1}}}",
         "options.tracing.tracePercentages.overallSamplePercentage", "between 0"),
        ("{tracing: {colour: 1}}", "options.tracing.colour", "unknown field 'colour'"),
    ])
    def test_route_fields_refused_by_name(self, route, field, words):
        found = issues(docs(COLLECTOR, BACKEND, vs(route), gateway(OTEL)))
        assert any(i.field.endswith(field) and words in i.reason for i in found), [str(i) for i in found]

    def test_tracing_on_a_virtual_host_is_a_route_option(self):
        text = vs().replace("    domains: ['*']", "    domains: ['*']\n    options: {tracing: {propagate: false}}")
        found = issues(docs(COLLECTOR, BACKEND, text, gateway(OTEL)))
        assert any(i.field == "spec.virtualHost.options.tracing" and "is a route option" in i.reason for i in found)

    def test_every_problem_at_once_each_located(self):
        text = OTEL + "verbose: true\nspawnUpstreamSpan: false\ntracePercentages: {clientSamplePercentage: 200}\n"
        found = issues(docs(COLLECTOR, BACKEND, vs("{tracing: {propagate: 3}}"), gateway(text)))
        fields = sorted(i.field.rsplit(".", 1)[-1] for i in found)
        assert fields == ["clientSamplePercentage", "propagate", "spawnUpstreamSpan", "verbose"], [str(i) for i in found]
        assert len({i.line for i in found}) == 4


#: hostile or malformed traceparent values: each starts a new trace
BAD_TRACEPARENTS = [
    "", "00", "garbage", f"00-{TID}-{SID}", f"00-{TID}-{SID}-0", f"00-{TID}-{SID}-011",
    f"01-{TID}-{SID}-01",  # another version: only 00 is read
    f"ff-{TID}-{SID}-01", f"00-{TID.upper()}-{SID}-01", f"00-{TID}-{SID.upper()}-01",
    f"00-{'0' * 32}-{SID}-01", f"00-{TID}-{'0' * 16}-01", f"00-{TID[:-1]}g-{SID}-01",
    f"00-{TID}-{SID}-0g", f"00_{TID}_{SID}_01", f" 00-{TID}-{SID}-01", f"00-{TID}-{SID}-01 ",
    f"00-{TID}x-{SID}-01", f"00-{TID}--{SID}01", f"00-{TID[:31]}-{SID}0-01", "00-" + "-" * 51,
    f"00-{TID}-{SID}-01-extra", "\u00e9" * 55,
]
BAD_B3 = ["", "0", "1", "d", "x", f"{TID}", f"{TID}-", f"{TID}-{SID}-2", f"{TID}-{SID}-1-xyz",
          f"{TID.upper()}-{SID}", f"{TID}-{'0' * 16}", f"{'0' * 32}-{SID}", f"{TID[:20]}-{SID}",
          f"{TID}-{SID}-1-{SID}-more", f"{TID}-{SID[:15]}", f"{TID}-{SID}-true"]


class PropagationTests(TestCase):
    def test_a_valid_traceparent(self):
        found = parse_traceparent([f"00-{TID}-{SID}-01".encode()])
        assert (found.trace_id, found.span_id, found.sampled) == (int(TID, 16), int(SID, 16), True)
        assert parse_traceparent([f"00-{TID}-{SID}-00".encode()]).sampled is False
        assert parse_traceparent([f"00-{TID}-{SID}-03".encode()]).sampled is True  # other flags: bit 0 decides

    @pytest.mark.parametrize("value", BAD_TRACEPARENTS)
    def test_a_bad_traceparent_starts_a_new_trace(self, value):
        raw = value.encode("utf-8")
        assert parse_traceparent([raw]) is None
        h = Headers()
        h.setRawHeaders(b"traceparent", [raw])
        assert read_incoming(h) is None

    def test_two_traceparent_headers_start_a_new_trace(self):
        value = f"00-{TID}-{SID}-01".encode()
        assert parse_traceparent([value, value]) is None

    def test_tracestate(self):
        assert parse_tracestate([b"rojo=00f067aa0ba902b7", b"congo=t61rcWkgMzE"]) == (
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        for bad in (b"novalue", b"=v", b"a=" + b"x" * 600, ",".join(f"k{i}=v" for i in range(33)).encode(),
                    b"k=\xff"):
            assert parse_tracestate([bad]) == "", bad

    def test_b3_single_and_multi(self):
        found = parse_b3_single([f"{TID}-{SID}-1".encode()])
        assert (found.trace_id, found.span_id, found.sampled, found.form) == (int(TID, 16), int(SID, 16), True,
                                                                              B3_SINGLE)
        assert parse_b3_single([f"{TID[16:]}-{SID}-0-{SID}".encode()]).trace_id == int(TID[16:], 16)  # 64-bit
        assert parse_b3_single([f"{TID}-{SID}".encode()]).sampled is None  # deferred: the gateway decides
        assert parse_b3_single([f"{TID}-{SID}-d".encode()]).sampled is True  # debug
        multi = parse_b3_multi([TID.encode()], [SID.encode()], [b"0"], None)
        assert (multi.sampled, multi.form) == (False, B3_MULTI)
        assert parse_b3_multi([TID.encode()], [SID.encode()], None, [b"1"]).sampled is True
        for bad in ([b"2"], [b"true"], [b"1", b"1"]):
            assert parse_b3_multi([TID.encode()], [SID.encode()], bad, None) is None
        assert parse_b3_multi([TID.encode()], None, None, None) is None

    @pytest.mark.parametrize("value", BAD_B3)
    def test_a_bad_b3_starts_a_new_trace(self, value):
        assert parse_b3_single([value.encode()]) is None

    def test_traceparent_wins_over_b3(self):
        h = headers(traceparent=f"00-{TID}-{SID}-01", b3=f"{'a' * 32}-{'b' * 16}-1")
        assert read_incoming(h).trace_id == int(TID, 16)
        h = headers(traceparent="bogus", b3=f"{'a' * 32}-{'b' * 16}-1")
        assert read_incoming(h).trace_id == int("a" * 32, 16)


class SamplingTests(TestCase):
    N = 20000

    def rate(self, p: TracePercentages, client: bool = False) -> float:
        return sum(decide(p, client, new_trace_id()) for _ in range(self.N)) / self.N

    def test_random_sampling(self):
        assert abs(self.rate(TracePercentages(random=2500)) - 0.25) < 0.02
        assert self.rate(TracePercentages(random=0)) == 0.0
        assert self.rate(TracePercentages()) == 1.0

    def test_overall_sampling_caps_what_was_sampled(self):
        assert abs(self.rate(TracePercentages(random=10000, overall=5000)) - 0.5) < 0.02
        # overall and random read one value of the trace id: 30 % of 50 % is 30 %, not 15 %
        assert abs(self.rate(TracePercentages(random=3000, overall=5000)) - 0.3) < 0.02

    def test_client_sampling_with_x_client_trace_id(self):
        assert self.rate(TracePercentages(client=10000, random=0), client=True) == 1.0
        assert abs(self.rate(TracePercentages(client=4000, random=0), client=True) - 0.4) < 0.02
        assert self.rate(TracePercentages(client=10000, random=0), client=False) == 0.0
        assert self.rate(TracePercentages(client=10000, random=10000, overall=0), client=True) == 0.0

    def test_one_trace_id_one_decision(self):
        p = TracePercentages(random=5000)
        for _ in range(200):
            tid = new_trace_id()
            assert len({decide(p, False, tid) for _ in range(5)}) == 1


class NewTraceBlockTests(TestCase):
    """``new_traces``: a block of new traces from one ``os.urandom`` read,
    each an unsampled ``traceparent`` made already and its sampling value;
    ``GatewayTracing.begin`` decides a request without trace headers from it."""

    def test_a_block_is_valid_unsampled_traceparents_and_their_values(self):
        PARENTS.clear()
        LOWS.clear()
        new_traces()
        new_traces()
        assert len(PARENTS) == len(LOWS) == 2 * TRACE_BLOCK
        seen = set()
        for line, low in zip(PARENTS, LOWS, strict=True):
            assert isinstance(line, bytes) and len(line) == 55
            found = parse_traceparent([line])
            assert found is not None and found.sampled is False  # 00-<32 hex>-<16 hex>-00, ids not zero
            assert found.trace_id & 0xFFFFFFFFFFFFFFFF == low  # the value is the trace id's low 64 bits
            seen.add(found.trace_id)
        assert len(seen) == 2 * TRACE_BLOCK  # no trace id twice
        assert len({line[36:52] for line in PARENTS}) == 2 * TRACE_BLOCK
        hexes = b"".join(line[3:35] + line[36:52] for line in PARENTS)
        # os.urandom's bytes: every hex digit about as often (48 per trace, 16 digits)
        counts = [hexes.count(d) for d in b"0123456789abcdef"]
        assert max(counts) < 1.25 * min(counts)

    def tracing(self, p: TracePercentages) -> GatewayTracing:
        return GatewayTracing(ListenerTracing(("ns", "otel"), percentages=p), "ns/gw", "gw",
                              CollectorTarget("grpc", "127.0.0.1", 4317))

    def test_begin_writes_the_blocks_traceparent_and_decides_on_its_value(self):
        g = self.tracing(TracePercentages(random=5000))
        sampled = unsampled = 0
        for _ in range(3000):
            upstream = Headers()
            started = g.begin(headers(host="a"), None, upstream)
            if started is UNSAMPLED:
                unsampled += 1
                line = upstream.raw[b"Traceparent"][0]
                found = parse_traceparent([line])
                assert found is not None and not found.sampled
                assert sampling_value(found.trace_id) >= 5000  # the decision read this trace id's value
            else:
                sampled += 1
                assert sampling_value(started.trace_id) < 5000 and started.trace is not None
                assert started.parent_id == 0 and started.span_id and not started.came
                assert b"Traceparent" not in upstream.raw  # written when the request goes upstream
        assert abs(sampled / 3000 - 0.5) < 0.05

    def test_begin_rates_and_the_client_trace_id(self):
        def rate(p: TracePercentages, **h: str) -> float:
            g = self.tracing(p)
            return sum(g.begin(headers(**h), None, Headers()) is not UNSAMPLED for _ in range(20000)) / 20000

        assert abs(rate(TracePercentages(random=2500)) - 0.25) < 0.02
        assert rate(TracePercentages(random=0)) == 0.0
        assert rate(TracePercentages()) == 1.0
        assert abs(rate(TracePercentages(random=3000, overall=5000)) - 0.3) < 0.02
        assert abs(rate(TracePercentages(client=4000, random=0), x_client_trace_id="c") - 0.4) < 0.02
        assert rate(TracePercentages(client=10000, random=0)) == 0.0  # no x-client-trace-id
        assert rate(TracePercentages(client=10000, random=10000, overall=0), x_client_trace_id="c") == 0.0

    def test_propagate_false_sends_nothing_and_a_route_replaces_the_percentages(self):
        g = self.tracing(TracePercentages(random=0))
        upstream = Headers()
        assert g.begin(headers(), RouteTracing(propagate=False), upstream) is UNSAMPLED
        assert not upstream.raw
        assert g.begin(headers(), RouteTracing(percentages=TracePercentages()), Headers()) is not UNSAMPLED

    def test_a_forked_child_forgets_the_parents_block(self):
        import os

        new_traces()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.write(write, b"%d" % len(PARENTS))
            os._exit(0)
        os.close(write)
        left = os.read(read, 32)
        os.close(read)
        os.waitpid(pid, 0)
        assert PARENTS and left == b"0"


class PipelineTracingTests(TestCase):
    def run_request(self, route: str = "{}", tracing: str = OTEL, **h: str):
        snap = snapshot_of(docs(COLLECTOR, BACKEND, vs(route), gateway(tracing)))
        head = RequestHead(b"GET", b"/pets", headers(host="api.example", **h), "10.0.0.1")
        head.gateway = snap.gateways[f"{NS}/gateway-proxy"]
        plan = Pipeline(PluginHost.create()).handle(head, snap)
        assert isinstance(plan, Forward)
        head.trace.inject(plan.headers)
        return head, plan

    def test_a_sampled_request_gets_a_trace_and_plugins_a_tracer(self):
        head, plan = self.run_request()
        assert isinstance(head.ctx.tracer, RequestTrace) and head.ctx.tracer.sampled
        sent = plan.headers.getRawHeaders(b"traceparent")[0].decode()
        assert sent == f"00-{head.trace.trace_id:032x}-{head.trace.span_id:016x}-01"

    def test_an_incoming_trace_is_continued(self):
        head, plan = self.run_request(traceparent=f"00-{TID}-{SID}-01", tracestate="rojo=1")
        assert f"{head.trace.trace_id:032x}" == TID and f"{head.trace.parent_id:016x}" == SID
        sent = plan.headers.getRawHeaders(b"traceparent")[0].decode()
        assert sent.startswith(f"00-{TID}-") and SID not in sent and sent.endswith("-01")
        assert plan.headers.getRawHeaders(b"tracestate") == [b"rojo=1"]

    def test_the_incoming_sampled_flag_is_followed(self):
        """As Envoy's OpenTelemetry tracer: 0 % does not stop a sampled
        parent, 100 % does not sample an unsampled one."""
        none = OTEL + "tracePercentages: {randomSamplePercentage: 0}\n"
        head, _ = self.run_request(tracing=none, traceparent=f"00-{TID}-{SID}-01")
        assert head.trace.sampled
        head, plan = self.run_request(traceparent=f"00-{TID}-{SID}-00")
        assert not head.trace.sampled and head.ctx.tracer is NO_TRACER
        assert plan.headers.getRawHeaders(b"traceparent")[0].endswith(b"-00")  # propagated unsampled

    def test_the_routes_percentages_replace_the_gateways(self):
        head, _ = self.run_request(route="{tracing: {tracePercentages: {randomSamplePercentage: 0}}}")
        assert not head.trace.sampled
        assert head.ctx.tracer.child("ldap.bind") is NO_SPAN

    def test_propagate_false_sends_no_trace_headers(self):
        _, plan = self.run_request(route="{tracing: {propagate: false}}", traceparent=f"00-{TID}-{SID}-01",
                                   b3=f"{TID}-{SID}-1")
        assert all(plan.headers.getRawHeaders(n) is None for n in (b"traceparent", b"tracestate", b"b3"))

    def test_b3_in_b3_out(self):
        head, plan = self.run_request(b3=f"{TID}-{SID}-1")
        assert plan.headers.getRawHeaders(b"b3") == [f"{TID}-{head.trace.span_id:016x}-1".encode()]
        head, plan = self.run_request(x_b3_traceid=TID, x_b3_spanid=SID, x_b3_sampled="1")
        assert plan.headers.getRawHeaders(b"x-b3-traceid") == [TID.encode()]
        assert plan.headers.getRawHeaders(b"x-b3-spanid") == [f"{head.trace.span_id:016x}".encode()]
        assert plan.headers.getRawHeaders(b"b3") is None

    def test_a_hostile_traceparent_is_replaced_not_forwarded(self):
        head, plan = self.run_request(traceparent=f"00-{'0' * 32}-{SID}-01")
        sent = plan.headers.getRawHeaders(b"traceparent")
        assert sent is not None and len(sent) == 1 and f"{head.trace.trace_id:032x}".encode() in sent[0]
        assert head.trace.parent_id == 0

    def test_without_a_gateway_nothing_is_traced(self):
        snap = snapshot_of(docs(COLLECTOR, BACKEND, vs(), gateway(OTEL)))
        head = RequestHead(b"GET", b"/pets", headers(host="api.example", traceparent=f"00-{TID}-{SID}-01"), "10.0.0.1")
        plan = Pipeline(PluginHost.create()).handle(head, snap)
        assert getattr(head, "trace", None) is None and head.ctx.tracer is NO_TRACER
        assert plan.headers.getRawHeaders(b"traceparent") == [f"00-{TID}-{SID}-01".encode()]  # passed through

    def test_child_spans_record_errors_without_raising(self):
        trace = RequestTrace(new_trace_id(), 1, 0)
        ok = trace.child("jwt.jwks_fetch", url="https://keys.example/jwks.json")
        ok.end()
        ok.end()  # once
        bad = trace.child("ldap.bind")
        bad.end(error=ConnectionRefusedError("refused"))
        trace.child("never.ended")
        spans = trace.spans("ingress", 2, {}, 0)
        assert [s.name for s in spans] == ["ingress", "jwt.jwks_fetch", "ldap.bind"]
        assert spans[2].status_code == 2 and spans[2].status_message == "ConnectionRefusedError: refused"
        assert all(s.parent_span_id == spans[0].span_id for s in spans[1:])


class DemoTracingTests(TestCase):
    def test_the_demo_with_the_tracing_example_loads_and_traces(self):
        """docs/observability.md, "A trace from the demo": etc/ with
        examples/tracing/tracing.yaml beside it."""
        import pathlib
        import shutil
        import tempfile

        from twistgw.config.loader import load_directory

        root = pathlib.Path(__file__).resolve().parents[2]
        with tempfile.TemporaryDirectory() as tmp:
            demo = pathlib.Path(tmp) / "demo"
            shutil.copytree(root / "etc", demo)
            shutil.copy(root / "examples" / "tracing" / "tracing.yaml", demo)
            snap = build_snapshot(load_directory(str(demo)), PluginHost.create())
        view = snap.gateways["default/gateway-proxy"]
        assert view.gateway.bind == ("127.0.0.1", 8082)
        assert (view.tracing.target.host, view.tracing.target.port) == ("127.0.0.1", 4317)
        assert view.tracing.resource == {"service.name": "twistgw-demo"}
        assert [vs.name for vs in view.virtual_services] == [vs.name for vs in snap.config.virtual_services]


class _Exporter:
    made: list["_Exporter"] = []

    def __init__(self, target, *, resource, max_queue):
        self.target, self.resource, self.max_queue = target, resource, max_queue
        self.spans: list = []
        self.stopped = False
        _Exporter.made.append(self)

    def submit(self, span):
        self.spans.append(span)

    def stop(self, timeout_s=0.0):
        self.stopped = True


class GatewaySyncTests(TestCase):
    """What the engine pays: nothing while no Gateway traces; one exporter
    per collector, kept across reloads while equal, stopped once unused."""

    def test_exporters_follow_the_snapshots_and_the_hot_path_is_the_classs_own_without(self):
        from twisted.internet.testing import MemoryReactorClock

        from twistgw.engine.gateway import Gateway
        from twistgw.engine.tracing import Exporters

        _Exporter.made = []
        gw = Gateway(MemoryReactorClock(), PluginHost.create(), exporters=Exporters(factory=_Exporter))
        plain = snapshot_of(docs(BACKEND, vs(), gateway("{}")))
        traced = snapshot_of(docs(COLLECTOR, BACKEND, vs(), gateway(OTEL)))
        gw.sync_tracing(plain)
        assert "_carry_out" not in gw.__dict__ and "record" not in gw.__dict__ and _Exporter.made == []
        gw.sync_tracing(traced)
        assert gw.__dict__["_carry_out"] == gw._carry_out_traced and len(_Exporter.made) == 1
        (exporter,) = _Exporter.made
        assert exporter.resource == {"service.name": "gateway-proxy"} and exporter.max_queue == 1024
        gw.sync_tracing(snapshot_of(docs(COLLECTOR, BACKEND, vs(), gateway(OTEL))))  # a reload, the same collector
        assert _Exporter.made == [exporter] and not exporter.stopped
        gw.sync_tracing(plain)
        assert exporter.stopped and "_carry_out" not in gw.__dict__ and "record" not in gw.__dict__
