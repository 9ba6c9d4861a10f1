"""HTTP/2 upstream configuration as Gloo writes it: ``useHttp2`` and the
Upstream's HTTP/2 fields (upstream.proto), ``serviceSpec.grpc``, Gloo
discovery's rule for Service ports (the ``gloo.solo.io/h2_service``
annotation, ``appProtocol``, port names), a Gateway's ``grpcWeb``, and the
guides' YAML."""

from __future__ import annotations

import textwrap

import pytest

from twistgw.api.upstreampolicy import Http2Settings
from twistgw.config.errors import ConfigError
from twistgw.config.loader import load_text
from twistgw.config.resolution import locate, resolve_upstreams


def upstreams(text: str) -> dict:
    config = load_text(textwrap.dedent(text))
    issues: list = []
    found = resolve_upstreams(config, locate(issues), set(), False)
    assert not issues
    return {k: v.http2 for k, v in found.upstreams.items()}


def refused(text: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_text(textwrap.dedent(text))
    return str(e.value)


STATIC = """\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: g, namespace: default}
spec:
  static: {hosts: [{addr: 127.0.0.1, port: 9000}]}
"""


def test_use_http2_and_its_fields() -> None:
    assert upstreams(STATIC)[("default", "g")] is None
    assert upstreams(STATIC + "  useHttp2: true\n")[("default", "g")] == Http2Settings()
    found = upstreams(STATIC + "  useHttp2: true\n  initialStreamWindowSize: 70000\n"
                      "  initialConnectionWindowSize: '1048576'\n  maxConcurrentStreams: 7\n"
                      "  protocolSelection: USE_DOWNSTREAM_PROTOCOL\n"
                      "  overrideStreamErrorOnInvalidHttpMessage: false\n")[("default", "g")]
    assert found == Http2Settings(70000, 1048576, 7, True)


@pytest.mark.parametrize("extra, words", [
    ("  useHttp2: true\n  initialStreamWindowSize: 65534\n", "initialStreamWindowSize: must be between 65535"),
    ("  useHttp2: true\n  initialConnectionWindowSize: 2147483648\n", "initialConnectionWindowSize: must be"),
    ("  useHttp2: true\n  maxConcurrentStreams: 0\n", "maxConcurrentStreams: must be between 1"),
    ("  initialStreamWindowSize: 70000\n", "applies to HTTP/2 only: set useHttp2: true"),
    ("  useHttp2: true\n  overrideStreamErrorOnInvalidHttpMessage: true\n", "true is not supported by twistgw"),
    ("  useHttp2: true\n  protocolSelection: USE_HTTP2\n", "protocolSelection: must be one of"),
    ("  useHttp2: yes please\n", "useHttp2"),
])
def test_bad_http2_fields_are_refused_with_the_field(extra: str, words: str) -> None:
    assert words in refused(STATIC + extra)


def test_service_spec_grpc_means_http2_and_transcoding_is_refused_by_name() -> None:
    text = STATIC.replace("port: 9000}]}", "port: 9000}], serviceSpec: {grpc: {}}}")
    assert upstreams(text)[("default", "g")] == Http2Settings()
    text = STATIC.replace("port: 9000}]}", "port: 9000}], serviceSpec: {grpcJsonTranscoder: {protoDescriptorBin: Cqw=}}}")
    assert "static.serviceSpec.grpcJsonTranscoder: is not supported: gRPC-JSON transcoding" in refused(text)
    text = STATIC.replace("port: 9000}]}", "port: 9000}], serviceSpec: {grpc: {descriptors: Cqw=}}}")
    assert "serviceSpec.grpc.descriptors: is not supported by twistgw" in refused(text)


def service(annotations: str = "", port: str = "{port: 8080}") -> str:
    meta = f", annotations: {{{annotations}}}" if annotations else ""
    return f"""\
apiVersion: v1
kind: Service
metadata: {{name: petstore, namespace: default{meta}}}
spec: {{ports: [{port}], selector: {{app: petstore}}}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: petstore, namespace: default}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{port: 8080}}]}}]
"""


@pytest.mark.parametrize("annotations, port, h2", [
    ("", "{port: 8080}", False),
    ('gloo.solo.io/h2_service: "true"', "{port: 8080}", True),
    ('gloo.solo.io/h2_service: "false"', "{port: 8080, name: http2}", False),  # the annotation wins
    ("", "{port: 8080, name: http2}", True),
    ("", "{port: 8080, name: grpc-api}", True),  # a prefix, as Gloo reads it
    ("", "{port: 8080, name: h2c}", True),
    ("", "{port: 8080, name: web}", False),
    ("", "{port: 8080, appProtocol: kubernetes.io/h2c}", True),
    ("", "{port: 8080, appProtocol: grpc}", True),
    ("", "{port: 8080, appProtocol: http}", False),
])
def test_discovery_reads_the_annotation_then_app_protocol_then_the_port_name(annotations: str, port: str,
                                                                           h2: bool) -> None:
    found = upstreams(service(annotations, port))
    for key in (("default", "default-petstore-8080"), ("gloo-system", "default-petstore-8080")):
        assert (found[key] is not None) is h2


def test_bad_annotations_are_refused() -> None:
    assert 'must be "true" or "false"' in refused(service('gloo.solo.io/h2_service: "yes"'))
    assert "of Gloo's discovery annotations only gloo.solo.io/h2_service is read" in refused(
        service("gloo.solo.io/upstream_config: '{}'"))
    # the cluster's own annotations are informational
    assert upstreams(service("kubectl.kubernetes.io/last-applied-configuration: '{}'"))


def test_the_http2_guide_yaml_loads_and_speaks_http2() -> None:
    """Gloo's HTTP/2 guide: the discovered Upstream, written out with useHttp2."""
    text = service('gloo.solo.io/h2_service: "true"') + """\
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata:
  labels: {discovered_by: kubernetesplugin}
  name: default-petstore-8080
  namespace: gloo-system
spec:
  discoveryMetadata:
    labels:
      service: petstore
  kube:
    selector:
      app: petstore
    serviceName: petstore
    serviceNamespace: default
    servicePort: 8080
  useHttp2: true
"""
    assert upstreams(text)[("gloo-system", "default-petstore-8080")] == Http2Settings()


def test_grpc_web_disable_on_a_gateway() -> None:
    from twistgw.config.gateways import GlooGateway
    text = """\
    apiVersion: gateway.solo.io/v1
    kind: Gateway
    metadata: {name: gw, namespace: gloo-system}
    spec:
      bindAddress: '::'
      bindPort: 8080
      httpGateway:
        options:
          grpcWeb:
            disable: %s
      useProxyProto: false
    """
    for value, disabled in (("true", True), ("false", False)):
        config = load_text(textwrap.dedent(text % value))
        (gw,) = [g for g in config.of_kind("Gateway").values() if isinstance(g, GlooGateway)]
        assert gw.grpc_web_disabled is disabled
    assert "grpcWeb: unknown field" in refused(text % "true\n            enable: true") or \
        "grpcWeb.enable" in refused(text % "true\n            enable: true")
