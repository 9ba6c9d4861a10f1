"""Gloo's ``Gateway`` kind, in memory: what loads (Gloo's own docs YAML),
what is refused by name, which virtual services each Gateway serves, and
Envoy's X-Forwarded-For rules (``useRemoteAddress``,
``xffNumTrustedHops``, ``skipXffAppend``) as the pipeline applies them.
The listeners themselves are tested end to end in
``tests/integration/test_gateway_kind_e2e.py``."""

from __future__ import annotations

import base64
import textwrap

import pytest

from twistgw.api.headers import Headers
from twistgw.cli import main
from twistgw.config.gateways import HcmSettings
from twistgw.config.loader import ConfigError, load_text
from twistgw.core.gateways import forwarded
from twistgw.core.pipeline import Pipeline, RequestHead
from twistgw.core.plan import Forward, LocalResponse
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot

from support.pki import Issued, TestCA
from support.trial import TestCase

UPSTREAM = """\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: backend, namespace: gloo-system}
spec:
  static: {hosts: [{addr: 127.0.0.1, port: 9}]}
"""


def vs(name: str, domain: str, namespace: str = "gloo-system", labels: str = "{}") -> str:
    return textwrap.dedent(f"""\
        apiVersion: gateway.solo.io/v1
        kind: VirtualService
        metadata: {{name: {name}, namespace: {namespace}, labels: {labels}}}
        spec:
          virtualHost:
            domains: ['{domain}']
            routes:
            - matchers: [{{prefix: /}}]
              routeAction: {{single: {{upstream: {{name: backend, namespace: gloo-system}}}}}}
        """)


def gateway(name: str, port: int, http: str = "{}", extra: str = "") -> str:
    return textwrap.dedent(f"""\
        apiVersion: gateway.solo.io/v1
        kind: Gateway
        metadata: {{name: {name}, namespace: gloo-system}}
        spec:
          bindAddress: 127.0.0.1
          bindPort: {port}
          httpGateway: {http}
        """) + extra


def docs(*parts: str) -> str:
    return "---\n".join(parts)


def snapshot_of(text: str):
    return build_snapshot(load_text(text), PluginHost.create())


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        snapshot_of(text)
    return [str(issue) for issue in info.value.issues]


#: Gloo's documentation, as written (the local rate-limiting guide's
#: Gateway, the default gateway-proxy of an install, the HCM guide's)
GLOO_DOCS = [
    """\
apiVersion: gateway.solo.io/v1
kind: Gateway
metadata:
  name: gateway-proxy
  namespace: gloo-system
spec:
  bindAddress: '::'
  bindPort: 8080
  httpGateway:
    options:
      httpLocalRatelimit:
        defaultLimit:
          maxTokens: 1
          tokensPerFill: 1
          fillInterval: 100s
        enableXRatelimitHeaders: true
  ssl: false
  useProxyProto: false
""",
    """\
apiVersion: gateway.solo.io/v1
kind: Gateway
metadata:
  labels:
    app: gloo
  name: gateway-proxy
  namespace: gloo-system
spec:
  bindAddress: '::'
  bindPort: 8080
  httpGateway: {}
  proxyNames:
  - gateway-proxy
  useProxyProto: false
""",
    """\
apiVersion: gateway.solo.io/v1
kind: Gateway
metadata:
  name: gateway-proxy
  namespace: gloo-system
spec:
  bindAddress: '::'
  bindPort: 8080
  httpGateway:
    options:
      httpConnectionManagerSettings:
        useRemoteAddress: true
        xffNumTrustedHops: 1
        skipXffAppend: false
        serverName: my-gateway
        idleTimeout: 300s
        requestHeadersTimeout: 10s
  useProxyProto: true
""",
]


class GatewayConfigTests(TestCase):
    @pytest.mark.parametrize("text", GLOO_DOCS, ids=["local-ratelimit-guide", "default-install", "hcm-guide"])
    def test_gloo_docs_gateways_load(self, text):
        snap = snapshot_of(docs(UPSTREAM, vs("default", "*"), text))
        (view,) = snap.gateways.values()
        assert view.gateway.bind == ("::", 8080)
        assert [v.name for v in view.virtual_services] == ["default"]

    def test_fields_read(self):
        snap = snapshot_of(docs(UPSTREAM, vs("a", "a.example"), GLOO_DOCS[2]))
        gw = snap.gateways["gloo-system/gateway-proxy"].gateway
        assert gw.proxy_protocol is True
        assert gw.hcm == HcmSettings(xff_hops=1, use_remote_address=True, skip_xff_append=False, gloo_xff=True,
                                     server_name="my-gateway", idle_timeout=300.0, head_timeout=10.0)

    @pytest.mark.parametrize("spec, field, words", [
        ("tcpGateway: {tcpHosts: []}", "spec.tcpGateway", "TCP proxying is out of twistgw's scope"),
        ("hybridGateway: {matchedGateways: []}", "spec.hybridGateway", "hybrid gateways"),
        ("options: {socketOptions: []}", "spec.options.socketOptions", "socket options are not supported"),
        ("routeOptions: {maxDirectResponseBodySizeBytes: 10}", "spec.routeOptions", "route-configuration"),
        ("colour: blue", "spec.colour", "unknown field 'colour'"),
    ])
    def test_spec_fields_refused_by_name(self, spec, field, words):
        text = docs(UPSTREAM, vs("a", "*"), gateway("gw", 8080) + f"  {spec}\n")
        found = problems(text)
        assert any(f"Gateway gloo-system/gw: {field}: " in p and words in p for p in found), found

    @pytest.mark.parametrize("http, field, words", [
        ("{options: {httpConnectionManagerSettings: {maxRequestHeadersKb: 96}}}",
         "httpConnectionManagerSettings.maxRequestHeadersKb", "fixed (16 KiB"),
        ("{options: {httpConnectionManagerSettings: {tracing: {zipkinConfig: {}}}}}",
         "httpConnectionManagerSettings.tracing.zipkinConfig", "the Zipkin provider is not supported"),
        ("{options: {httpConnectionManagerSettings: {xffNumTrustedHops: -1}}}",
         "httpConnectionManagerSettings.xffNumTrustedHops", "between 0 and 64"),
        ("{options: {httpConnectionManagerSettings: {idleTimeout: soon}}}",
         "httpConnectionManagerSettings.idleTimeout", "must be a duration above zero"),
        ("{options: {httpLocalRatelimit: {localRateLimitPerDownstreamConnection: true}}}",
         "httpLocalRatelimit.localRateLimitPerDownstreamConnection", "per gateway process"),
        ("{options: {httpLocalRatelimit: {defaultLimit: {maxTokens: 0}}}}",
         "httpLocalRatelimit.defaultLimit.maxTokens", "at least 1"),
        ("{options: {waf: {}}}", "options.waf", "not supported by twistgw on a Gateway"),
        ("{virtualServiceExpressions: {expressions: []}}", "virtualServiceExpressions", "set-based"),
        ("{virtualServices: [{name: a}], virtualServiceSelector: {x: y}}", "spec.httpGateway", "not both"),
    ])
    def test_http_gateway_fields_refused_by_name(self, http, field, words):
        found = problems(docs(UPSTREAM, vs("a", "*"), gateway("gw", 8080, http)))
        assert any(field in p and words in p for p in found), found


    def test_two_gateways_on_one_address_and_port(self):
        found = problems(docs(UPSTREAM, vs("a", "*"), gateway("one", 8080), gateway("two", 8080)))
        assert any("Gateway gloo-system/two: spec.bindPort: 127.0.0.1:8080 is also the address of Gateway"
                   " gloo-system/one" in p for p in found), found

    def test_bind_address_must_be_an_ip_address(self):
        text = docs(UPSTREAM, vs("a", "*"), gateway("gw", 8080).replace("127.0.0.1", "localhost"))
        assert any("spec.bindAddress: must be an IP address" in p for p in problems(text))

    def test_gateways_for_other_proxies_are_not_served(self, tmp_path, capsys):
        text = docs(UPSTREAM, vs("a", "*"), gateway("mine", 8080),
                    gateway("theirs", 8081, extra="  proxyNames: [internal-proxy]\n"))
        assert list(snapshot_of(text).gateways) == ["gloo-system/mine"]
        (tmp_path / "gw.yaml").write_text(text)
        assert main(["check", str(tmp_path), "-v"]) == 0
        out = capsys.readouterr()
        assert ("note: Gateway gloo-system/theirs is for internal-proxy, not gateway-proxy: this gateway does not"
                " serve it (no listener)") in out.err
        assert "Gateway gloo-system/mine listens on 127.0.0.1 port 8080; serves gloo-system/a" in out.out


CA = TestCA()
A_CERT = CA.issue("a.example.com", dns=["a.example.com"])
B_CERT = CA.issue("b.example.com", dns=["b.example.com"])


def tls_vs(name: str, domain: str, cert: Issued, labels: str = "{}") -> str:
    """A VirtualService with ``sslConfig`` (its certificate in a Secret of
    the same name, answering ``domain`` by SNI)."""
    b64 = base64.b64encode
    secret = (f"apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\n"
              f"metadata: {{name: {name}, namespace: gloo-system}}\n"
              f"data: {{tls.crt: {b64(cert.cert_pem).decode()}, tls.key: {b64(cert.key_pem).decode()}}}\n---\n")
    return secret + vs(name, domain, labels=labels).replace(
        "spec:\n", f"spec:\n  sslConfig: {{secretRef: {{name: {name}, namespace: gloo-system}},"
                   f" sniDomains: ['{domain}']}}\n")


class SslGatewayTests(TestCase):
    """``ssl: true``: the Gateway serves the virtual services with
    ``sslConfig`` (Gloo's rule), by SNI among its own certificates."""

    @staticmethod
    def text(public_ssl: str = "true") -> str:
        return docs(UPSTREAM, vs("plain", "*"), tls_vs("a", "a.example.com", A_CERT, "{team: pub}"),
                    tls_vs("b", "b.example.com", B_CERT),
                    gateway("gateway-proxy", 8080),
                    gateway("gateway-proxy-ssl", 8443, extra="  ssl: true\n"),
                    gateway("public-ssl", 8444, "{virtualServiceSelector: {team: pub}}",
                            extra=f"  ssl: {public_ssl}\n"))

    TEXT = text()

    def test_gloo_default_ssl_gateway_as_an_install_writes_it(self):
        text = docs(UPSTREAM, vs("plain", "*"), tls_vs("a", "a.example.com", A_CERT), """\
apiVersion: gateway.solo.io/v1
kind: Gateway
metadata:
  labels:
    app: gloo
  name: gateway-proxy-ssl
  namespace: gloo-system
spec:
  bindAddress: '::'
  bindPort: 8443
  httpGateway: {}
  proxyNames:
  - gateway-proxy
  ssl: true
  useProxyProto: false
""")
        (view,) = snapshot_of(text).gateways.values()
        assert view.gateway.bind == ("::", 8443) and view.gateway.ssl
        assert [v.name for v in view.virtual_services] == ["a"]
        assert view.tls is not None and view.tls.select("a.example.com") is not None

    def test_ssl_gateways_serve_the_virtual_services_with_ssl_config(self):
        gws = snapshot_of(self.TEXT).gateways
        plain, every, public = (gws[f"gloo-system/{n}"] for n in ("gateway-proxy", "gateway-proxy-ssl", "public-ssl"))
        assert [v.name for v in plain.virtual_services] == ["plain"] and plain.tls is None
        assert sorted(v.name for v in every.virtual_services) == ["a", "b"]
        assert every.tls is not None and public.tls is not None
        assert every.tls.select("b.example.com").hosts.lookup("b.example.com").name == "b"
        assert [v.name for v in public.virtual_services] == ["a"]
        assert public.tls.select("a.example.com").hosts.lookup("a.example.com").name == "a"
        assert public.tls.select("b.example.com") is None  # b's certificate is not on this Gateway

    def test_a_connection_follows_its_gateways_certificates_across_reloads(self):
        from types import SimpleNamespace

        from twistgw.engine.sni import TlsChoice
        from twistgw.runtime.gateways import GatewayTlsRoutes

        serving = SimpleNamespace(snapshot=snapshot_of(self.TEXT))  # stands for the engine's Gateway
        routes = GatewayTlsRoutes(serving, "gloo-system/public-ssl")  # type: ignore[arg-type]
        table = routes.serving()
        assert table is not None and table is serving.snapshot.gateways["gloo-system/public-ssl"].tls
        choice = TlsChoice("a.example.com", table.select("a.example.com"), table, routes.in_snapshot)
        assert choice.hosts(snapshot_of(self.TEXT)).lookup("a.example.com").name == "a"  # same certificate
        renewed = CA.issue("a.example.com", dns=["a.example.com"])
        rotated = self.TEXT
        for old, new in ((A_CERT.cert_pem, renewed.cert_pem), (A_CERT.key_pem, renewed.key_pem)):
            rotated = rotated.replace(base64.b64encode(old).decode(), base64.b64encode(new).decode())
        assert choice.hosts(snapshot_of(rotated)) is None  # → 421
        # the Gateway removed, or no longer ssl: no certificate answers (→ 421)
        assert choice.hosts(snapshot_of(self.TEXT.replace("name: public-ssl", "name: renamed"))) is None
        plain = snapshot_of(self.text(public_ssl="false"))
        assert choice.hosts(plain) is None
        serving.snapshot = plain
        assert routes.serving() is None  # the listener serves plain HTTP now

    def test_check_lists_tls_gateways_and_notes_one_that_selects_nothing(self, tmp_path, capsys):
        text = self.TEXT + "---\n" + gateway("empty-ssl", 8445, "{virtualServiceSelector: {team: none}}",
                                               extra="  ssl: true\n")
        (tmp_path / "gw.yaml").write_text(text)
        assert main(["check", str(tmp_path), "-v"]) == 0
        out = capsys.readouterr()
        assert ("Gateway gloo-system/public-ssl listens on 127.0.0.1 port 8444 (TLS); serves gloo-system/a"
                in out.out), out.out
        assert "Gateway gloo-system/gateway-proxy listens on 127.0.0.1 port 8080; serves gloo-system/plain" in out.out
        assert ("note: Gateway gloo-system/empty-ssl has ssl: true and selects no VirtualService with sslConfig"
                in out.err), out.err
        assert "note: Gateway gloo-system/public-ssl" not in out.err


class SelectionTests(TestCase):
    TEXT = docs(UPSTREAM, vs("pub-a", "a.example", labels="{team: pub}"),
                vs("pub-b", "b.example", namespace="other", labels="{team: pub}"),
                vs("int", "i.example"),
                gateway("by-label", 8080, "{virtualServiceSelector: {team: pub}}"),
                gateway("by-label-here", 8081,
                        "{virtualServiceSelector: {team: pub}, virtualServiceNamespaces: [gloo-system]}"),
                gateway("by-ref", 8082, "{virtualServices: [{name: int, namespace: gloo-system}]}"),
                gateway("other-ns", 8083, "{virtualServiceNamespaces: [other]}"),
                gateway("all", 8084, "{virtualServiceNamespaces: ['*']}"))

    @pytest.mark.parametrize("gw, served", [
        ("by-label", ["pub-a", "pub-b"]), ("by-label-here", ["pub-a"]), ("by-ref", ["int"]),
        ("other-ns", ["pub-b"]), ("all", ["pub-a", "pub-b", "int"]),
    ])
    def test_which_virtual_services_a_gateway_serves(self, gw, served):
        view = snapshot_of(self.TEXT).gateways[f"gloo-system/{gw}"]
        assert sorted(v.name for v in view.virtual_services) == sorted(served)

    def test_routing_uses_the_gateways_hosts(self):
        snap = snapshot_of(self.TEXT)
        pipeline = Pipeline(PluginHost.create())
        for host, expect in ((b"a.example", Forward), (b"i.example", LocalResponse)):
            head = RequestHead(b"GET", b"/", _headers(host=host), "10.0.0.1")
            head.gateway = snap.gateways["gloo-system/by-label"]
            plan = pipeline.handle(head, snap)
            assert type(plan) is expect, (host, plan)
        assert plan.status == 404


def _headers(**values: str | bytes) -> Headers:
    h = Headers()
    for name, value in values.items():
        h.setRawHeaders(name.replace("_", "-").encode(), [value if isinstance(value, bytes) else value.encode()])
    return h


class ForwardedForTests(TestCase):
    """Envoy's examples (docs: config_http_conn_man_headers x-forwarded-for)."""

    XFF = [b"203.0.113.128, 203.0.113.10, 203.0.113.1"]

    @pytest.mark.parametrize("hcm, client, sent", [
        # edge proxy, no trusted proxy in front: the peer, XFF appended
        (HcmSettings(gloo_xff=True), "192.0.2.5", b"203.0.113.128, 203.0.113.10, 203.0.113.1, 192.0.2.5"),
        # two trusted proxies in front: the 2nd from the right
        (HcmSettings(xff_hops=2, gloo_xff=True), "203.0.113.10",
         b"203.0.113.128, 203.0.113.10, 203.0.113.1, 192.0.2.5"),
        (HcmSettings(xff_hops=1, gloo_xff=True), "203.0.113.1",
         b"203.0.113.128, 203.0.113.10, 203.0.113.1, 192.0.2.5"),
        # more hops than entries: the peer
        (HcmSettings(xff_hops=4, gloo_xff=True), "192.0.2.5",
         b"203.0.113.128, 203.0.113.10, 203.0.113.1, 192.0.2.5"),
        (HcmSettings(xff_hops=1, skip_xff_append=True, gloo_xff=True), "203.0.113.1",
         b"203.0.113.128, 203.0.113.10, 203.0.113.1"),
        # internal proxy: the last entry is the client, XFF unchanged
        (HcmSettings(use_remote_address=False, gloo_xff=True), "203.0.113.1", XFF[0]),
        (HcmSettings(xff_hops=2, use_remote_address=False, gloo_xff=True), "203.0.113.128", XFF[0]),
    ])
    def test_envoy_examples(self, hcm, client, sent):
        assert forwarded(hcm, "192.0.2.5", self.XFF) == (client, sent)

    def test_no_header(self):
        assert forwarded(HcmSettings(xff_hops=1, gloo_xff=True), "192.0.2.5", None) == ("192.0.2.5", b"192.0.2.5")
        assert forwarded(HcmSettings(use_remote_address=False, gloo_xff=True), "192.0.2.5", None) == (
            "192.0.2.5", None)

    def test_a_trusted_entry_that_is_not_an_address_is_not_trusted(self):
        assert forwarded(HcmSettings(xff_hops=1, gloo_xff=True), "192.0.2.5", [b"1.2.3.4, evil"])[0] == "192.0.2.5"

    @pytest.mark.parametrize("hcm, client, xff", [
        ("{}", "10.0.0.1", b"10.0.0.1"),  # twistgw's own rule: replaced
        ("{options: {httpConnectionManagerSettings: {xffNumTrustedHops: 0}}}", "10.0.0.1", b"6.6.6.6, 10.0.0.1"),
        ("{options: {httpConnectionManagerSettings: {xffNumTrustedHops: 1}}}", "6.6.6.6", b"6.6.6.6, 10.0.0.1"),
    ])
    def test_what_the_pipeline_sends_upstream(self, hcm, client, xff):
        snap = snapshot_of(docs(UPSTREAM, vs("a", "*"), gateway("gw", 8080, hcm)))
        head = RequestHead(b"GET", b"/", _headers(host="a.example", x_forwarded_for="6.6.6.6"), "10.0.0.1")
        head.gateway = snap.gateways["gloo-system/gw"]
        plan = Pipeline(PluginHost.create()).handle(head, snap)
        assert isinstance(plan, Forward)
        assert plan.headers.getRawHeaders(b"x-forwarded-for") == [xff]
        assert plan.headers.getRawHeaders(b"x-real-ip") == [client.encode()]
        assert head.ctx is not None and head.ctx.client_address == client



class DefaultLimitTests(TestCase):
    """A Gateway's ``httpLocalRatelimit.defaultLimit`` covers every route
    without a ``localRatelimit`` of its own, whatever traffic options the
    route has (the pipeline takes a different path for each kind)."""

    @pytest.mark.parametrize("options", [
        "{}",  # the plain route
        "{headerManipulation: {requestHeadersToAdd: [{header: {key: x-a, value: b}}]}}",
        "{cors: {allowOrigin: [https://app.example]}, retries: {retryOn: 5xx, numRetries: 1}}",
        "{csrf: {filterEnabled: {defaultValue: {numerator: 100}}}}",  # something before the chain
    ])
    def test_a_gateways_default_bucket_covers_a_route_with_traffic_options(self, options):
        route_vs = vs("a", "*").replace("routeAction:", f"options: {options}\n      routeAction:")
        limit = "{options: {httpLocalRatelimit: {defaultLimit: {maxTokens: 2, tokensPerFill: 1, fillInterval: 100s}}}}"
        snap = snapshot_of(docs(UPSTREAM, route_vs, gateway("gw", 8080, limit)))
        pipeline = Pipeline(PluginHost.create())
        statuses = []
        for _ in range(3):
            head = RequestHead(b"GET", b"/", _headers(host="a.example", origin="https://app.example"), "10.0.0.1")
            head.gateway = snap.gateways["gloo-system/gw"]
            plan = pipeline.handle(head, snap)
            statuses.append(plan.status if isinstance(plan, LocalResponse) else 200)
        assert statuses == [200, 200, 429]


# -- healthCheck (Gloo's health-check guide) ------------------------------------

HEALTH_GATEWAY = """\
apiVersion: gateway.solo.io/v1
kind: Gateway
metadata: {name: gateway-proxy, namespace: gloo-system}
spec:
  bindAddress: '::'
  bindPort: 8080
  httpGateway:
    options:
      healthCheck:
        path: /any-path-you-want
"""


def _answer(gateway, key: str, target: bytes, host: bytes = b"a.example") -> bytes:
    from twisted.internet.address import IPv4Address
    from twisted.internet.testing import StringTransport

    from twistgw.engine.gateway import GatewayFactory

    proto = GatewayFactory(gateway, gateway_key=key).buildProtocol(IPv4Address("TCP", "127.0.0.1", 8080))
    transport = StringTransport(peerAddress=IPv4Address("TCP", "203.0.113.5", 5555))
    proto.makeConnection(transport)
    proto.dataReceived(b"GET " + target + b" HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
    out = transport.value()
    proto.connectionLost(None)
    return out


class HealthCheckTests(TestCase):
    def setUp(self) -> None:
        from twisted.internet.testing import MemoryReactorClock

        from twistgw.engine.gateway import Gateway

        host = PluginHost.create(load_entry_points=False)
        direct = vs("a", "a.example").replace(
            "routeAction: {single: {upstream: {name: backend, namespace: gloo-system}}}",
            "directResponseAction: {status: 200, body: routed}")
        self.gateway = Gateway(MemoryReactorClock(), host, access_log=False)
        self.gateway.snapshot = build_snapshot(load_text(docs(UPSTREAM, direct, HEALTH_GATEWAY)), host)
        self.key = "gloo-system/gateway-proxy"

    def test_the_guides_gateway_loads(self) -> None:
        assert self.gateway.snapshot.gateways[self.key].health_path == b"/any-path-you-want"

    def test_the_path_is_answered_before_routing_whatever_the_host(self) -> None:
        for host in (b"a.example", b"unknown.example"):
            out = _answer(self.gateway, self.key, b"/any-path-you-want", host)
            assert out.startswith(b"HTTP/1.1 200 "), out
            assert b"routed" not in out and b"\r\nContent-Length: 0\r\n" in out

    def test_other_targets_are_routed(self) -> None:
        # an exact match on the whole target, as Envoy's :path (the query included)
        for target in (b"/any-path-you-want?x=1", b"/any-path-you-want/", b"/"):
            assert _answer(self.gateway, self.key, target).endswith(b"routed"), target

    def test_503_while_draining(self) -> None:
        self.gateway.draining = True
        assert _answer(self.gateway, self.key, b"/any-path-you-want").startswith(b"HTTP/1.1 503 ")

    def test_a_listen_endpoint_has_no_health_path(self) -> None:
        out = _answer(self.gateway, None, b"/any-path-you-want")  # type: ignore[arg-type]
        assert out.endswith(b"routed"), out  # a --listen endpoint routes it like any other path

    def test_the_path_must_be_a_path(self) -> None:
        found = problems(docs(UPSTREAM, vs("a", "*"), HEALTH_GATEWAY.replace("/any-path-you-want", "any")))
        assert any("httpGateway.options.healthCheck.path: must be a request path starting with '/'" in p
                   for p in found), found
