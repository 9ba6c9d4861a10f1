"""Every row of docs/configuration.md's "Coming from Gloo Edge" table is
true (issue 32, item 20): each Gloo field or kind the first column names
is refused, where the second column says, when the configuration is
checked as ``twistgw check`` checks it (the loader, then every installed
plugin's compile).

``test_coming_from_gloo.py`` goes the other way (every entry of the
loader's own tables, ``GLOO_UNSUPPORTED`` and ``UNSUPPORTED_OPTIONS``, is in
the section and refused), and only that way: a row naming something the
loader does not keep in those tables (a plugin's option, an AuthConfig
type, a Settings field) was never tried, so rows such as "`cors`,
`retries`, `headerManipulation`: no plugin installed" and "AuthConfig
configs other than `ldap`" stayed after those became served. Here each
backticked name of a row's first column must have a probe below (a small
configuration with that name at that place), and the probe must be
refused at that field; a row whose name is now served fails, and so does a
new row nobody wrote a probe for. Words in the first column that are not
field names are written without backticks.
"""

from __future__ import annotations

import pathlib
import re
import textwrap
from typing import Callable

import pytest

from twistgw.config.loader import ConfigError, load_text
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot

ROOT = pathlib.Path(__file__).resolve().parents[2]
SECTION = (ROOT / "docs" / "configuration.md").read_text().split("## Coming from Gloo Edge", 1)[1]
TABLE = SECTION.split("| Gloo field or kind | where | what to do instead |", 1)[1].split("\n\n", 1)[0]


def rows() -> list[tuple[str, str, str]]:
    """(first column, where, the row) of every row."""
    out = []
    for line in TABLE.strip().splitlines():
        if line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 3, line
        out.append((cells[0], cells[1], line))
    return out


def names(first: str) -> list[str]:
    """The backticked names of a first column, outside parentheses (which
    say what is served instead, or link to more)."""
    quoted = re.findall(r"`([^`]+)`", first)
    text = re.sub(r"`[^`]+`", lambda m: f"\x00{quoted.index(m.group(0)[1:-1])}\x00", first)
    while True:
        plain = re.sub(r"\([^()]*\)", "", text)
        if plain == text:
            break
        text = plain
    return [quoted[int(i)] for i in re.findall(r"\x00(\d+)\x00", text)]


# --------------------------------------------------------------------------
# Configurations with one Gloo field at one place
# --------------------------------------------------------------------------

UPSTREAM = """\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: u, namespace: default}}
spec:
{spec}
"""


def upstream(spec: str = "static: {hosts: [{addr: 127.0.0.1, port: 1}]}") -> str:
    return UPSTREAM.format(spec=textwrap.indent(spec, "  "))


def vs(route: str = "", options: str = "", action: str = "directResponseAction: {status: 200}",
       spec: str = "", matcher: str = "{prefix: /}", vh_options: str = "") -> str:
    route_lines = textwrap.indent(route, "      ") if route else ""
    text = f"""\
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: v, namespace: default}}
spec:
{textwrap.indent(spec, "  ") if spec else ""}
  virtualHost:
    domains: ["*"]
    options: {{{vh_options}}}
    routes:
    - matchers: [{matcher}]
      options: {{{options}}}
{route_lines}
{textwrap.indent(action, "      ")}
"""
    return text + "---\n" + upstream()


def route_to_u(extra: str = "") -> str:
    return f"routeAction: {{single: {{upstream: {{name: u}}{', ' + extra if extra else ''}}}}}"


TLS_FILES = "sslFiles: {tlsCert: /nonexistent/cert.pem, tlsKey: /nonexistent/key.pem}"


def tls_vs(extra: str) -> str:
    return vs(spec=f"sslConfig: {{{TLS_FILES}, {extra}}}")


def tls_upstream(extra: str, static_extra: str = "", more: str = "") -> str:
    spec = (f"static: {{hosts: [{{addr: 127.0.0.1, port: 1}}]{', ' + static_extra if static_extra else ''}}}\n"
            f"sslConfig: {{sni: backend.test{', ' + extra if extra else ''}}}\n{more}")
    return UPSTREAM.format(spec=textwrap.indent(spec, "  "))


HEALTH = "healthChecks: [{{timeout: 1s, interval: 5s, unhealthyThreshold: 2, healthyThreshold: 2," \
         " httpHealthCheck: {{path: /h}}{extra}}}]"


def health(extra: str) -> str:
    return upstream("static: {hosts: [{addr: 127.0.0.1, port: 1}]}\n" + HEALTH.format(extra=", " + extra))


def kube_upstream(kube: str) -> str:
    service = """\
apiVersion: v1
kind: Service
metadata: {name: pets, namespace: default}
spec:
  selector: {app: pets}
  ports: [{name: http, port: 80}]
"""
    return upstream(f"kube: {{serviceName: pets, serviceNamespace: default, servicePort: 80, {kube}}}") + \
        "---\n" + service


def gateway(spec: str) -> str:
    return f"""\
apiVersion: gateway.solo.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  bindAddress: 127.0.0.1
  bindPort: 18080
{textwrap.indent(spec, "  ")}
"""


def access_log(sink: str = "", fmt: str = "'%START_TIME%\\n'", filter_: str = "") -> str:
    sink = sink or f"fileSink: {{path: /tmp/twistgw-never-written.log, stringFormat: {fmt}}}"
    flt = f", filter: {filter_}" if filter_ else ""
    return gateway(f"httpGateway: {{}}\noptions: {{accessLoggingService: {{accessLog: [{{{sink}{flt}}}]}}}}")


def gloo_settings(spec: str) -> str:
    return f"""\
apiVersion: gloo.solo.io/v1
kind: Settings
metadata: {{name: default, namespace: gloo-system}}
spec:
{textwrap.indent(spec, "  ")}
"""


def auth_config(config: str, spec: str = "") -> str:
    return f"""\
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: ac, namespace: default}}
spec:
  configs:
  - {config}
{textwrap.indent(spec, "  ")}
"""


OIDC = ("oidcAuthorizationCode: {appUrl: 'https://app.test', callbackPath: /callback, clientId: c,"
        " clientSecretRef: {name: oauth, namespace: default}, issuerUrl: 'https://idp.test/', scopes: [email]")
OAUTH_SECRET = """\
---
apiVersion: v1
kind: Secret
metadata: {name: oauth, namespace: default}
type: extauth.solo.io/oauth
stringData: {client-secret: s3cret}
"""


def oauth2(inner: str, instead: str = "") -> str:
    """An ``oauth2`` config: an OIDC login with ``inner`` among its fields,
    or ``instead`` of it."""
    body = instead or OIDC + (", " + inner if inner else "") + "}"
    return auth_config("oauth2: {" + body + "}") + OAUTH_SECRET


def ratelimit_action(action: str) -> str:
    return vs(options="ratelimit: {rateLimits: [{actions: [" + action + "]}]}")


def option_refs(spec: str, kind: str = "VirtualHostOption") -> str:
    return f"""\
apiVersion: gateway.solo.io/v1
kind: {kind}
metadata: {{name: o, namespace: default}}
spec:
  options: {{}}
{textwrap.indent(spec, "  ")}
"""


#: (where, name) -> (configuration, the refused field's path ends so)
Probe = tuple[str, str]
P: dict[tuple[str, str], Callable[[], Probe]] = {}


def probe(where: str, *keys: str) -> Callable[[Callable[[str], Probe]], Callable[[str], Probe]]:
    def register(make: Callable[[str], Probe]) -> Callable[[str], Probe]:
        for key in keys:
            P[(where, key)] = lambda key=key: make(key)
        return make
    return register


VS_SPEC = "VirtualService `spec`"
probe(VS_SPEC, "sslConfig.sds")(lambda k: (tls_vs("sds: {}"), "sslConfig.sds"))
probe(VS_SPEC, "sslConfig.ocspStaplePolicy")(lambda k: (tls_vs("ocspStaplePolicy: STRICT_STAPLING"),
                                                         "sslConfig.ocspStaplePolicy"))
probe(VS_SPEC, "sslConfig.transportSocketConnectTimeout")(
    lambda k: (tls_vs("transportSocketConnectTimeout: 5s"), "sslConfig.transportSocketConnectTimeout"))
probe(VS_SPEC, "sslConfig.alpnProtocols")(lambda k: (tls_vs("alpnProtocols: [grpc-exp]"),
                                                      "sslConfig.alpnProtocols"))
probe("Upstream `spec`", "overrideStreamErrorOnInvalidHttpMessage: true")(lambda k: (
    upstream("static: {hosts: [{addr: 127.0.0.1, port: 1}]}\nuseHttp2: true\n"
             "overrideStreamErrorOnInvalidHttpMessage: true"), "overrideStreamErrorOnInvalidHttpMessage"))
SERVICE_SPEC = {"serviceSpec.grpcJsonTranscoder": ("grpcJsonTranscoder: {}", "serviceSpec.grpcJsonTranscoder"),
                "serviceSpec.rest": ("rest: {}", "serviceSpec.rest"),
                "serviceSpec.graphql": ("graphql: {}", "serviceSpec.graphql"),
                "serviceSpec.grpc.descriptors": ("grpc: {descriptors: AAAA}", "serviceSpec.grpc.descriptors"),
                "grpcServices": ("grpc: {grpcServices: [{packageName: p}]}", "grpcServices")}
for written, (yaml_, field) in SERVICE_SPEC.items():
    probe("Upstream `spec.kube`, `spec.static`", written)(lambda k, yaml_=yaml_, field=field: (
        upstream(f"static: {{hosts: [{{addr: 127.0.0.1, port: 1}}], serviceSpec: {{{yaml_}}}}}"), field))
probe("Service `metadata.annotations`", "gloo.solo.io/...")(lambda k: (
    "apiVersion: v1\nkind: Service\nmetadata:\n  name: pets\n  namespace: default\n"
    "  annotations: {gloo.solo.io/sslService: 'true'}\nspec:\n  selector: {app: pets}\n"
    "  ports: [{name: http, port: 80}]\n", "gloo.solo.io/sslService"))
probe("route", "graphqlApiRef")(lambda k: (vs(route="graphqlApiRef: {name: g}", action=""), "graphqlApiRef"))
probe("`routeAction`", "clusterHeader")(lambda k: (vs(action="routeAction: {clusterHeader: x-cluster}"),
                                                   "routeAction.clusterHeader"))
probe("`routeAction`", "dynamicForwardProxy")(lambda k: (vs(action="routeAction: {dynamicForwardProxy: {}}"),
                                                         "routeAction.dynamicForwardProxy"))
probe("`routeAction.single`", "destinationSpec", "consul")(
    lambda k: (vs(action=route_to_u(f"{k}: {{}}")), f"single.{k}"))
probe("Upstream `spec.kube.subsetSpec.selectors[]`", "singleHostPerSubset: true")(
    lambda k: (kube_upstream("subsetSpec: {selectors: [{keys: [version], singleHostPerSubset: true}]}"),
               "singleHostPerSubset"))
probe("Upstream `spec.kube`", "selector")(lambda k: (kube_upstream("selector: {app: other}"), "kube.selector"))
probe("Upstream `spec.kube`", "serviceSpec")(lambda k: (kube_upstream("serviceSpec: {rest: {}}"),
                                                        "kube.serviceSpec"))
for name in ("useHttp2", "pipe", "httpProxyHostname", "proxyProtocolVersion", "grpcJsonTranscoder", "aws", "azure",
             "gcp", "awsEc2", "consul"):
    value = "true" if name == "useHttp2" else "x" if name in ("httpProxyHostname", "proxyProtocolVersion") else "{}"
    probe("Upstream `spec`", name)(lambda k, value=value: (
        upstream(f"static: {{hosts: [{{addr: 127.0.0.1, port: 1}}]}}\n{k}: {value}"), f"spec.{k}"))
probe("Upstream `spec`", "overrideStreamErrorOnInvalidHttpMessage: true")(lambda k: (
    upstream("static: {hosts: [{addr: 127.0.0.1, port: 1}]}\nuseHttp2: true\n" + k),
    "overrideStreamErrorOnInvalidHttpMessage"))
for name, yaml_ in {"serviceSpec.grpcJsonTranscoder": "grpcJsonTranscoder: {}", "serviceSpec.rest": "rest: {}",
                    "serviceSpec.graphql": "graphql: {}", "serviceSpec.grpc.descriptors": "grpc: {descriptors: abc}",
                    "grpcServices": "grpc: {grpcServices: [{packageName: p}]}"}.items():
    probe("Upstream `spec.kube`, `spec.static`", name)(lambda k, yaml_=yaml_: (
        upstream(f"static: {{hosts: [{{addr: 127.0.0.1, port: 1}}], serviceSpec: {{{yaml_}}}}}"), k))
probe("Service `metadata.annotations`", "gloo.solo.io/...")(lambda k: (
    upstream("kube: {serviceName: pets, serviceNamespace: default, servicePort: 80}") + """---
apiVersion: v1
kind: Service
metadata: {name: pets, namespace: default, annotations: {gloo.solo.io/sslService.secret: x}}
spec:
  selector: {app: pets}
  ports: [{name: http, port: 80}]
""", "annotations"))
probe("route `matchers`, `options`", "connectMatcher")(lambda k: (vs(matcher="{connectMatcher: {}}"),
                                                                   "connectMatcher"))
probe("route `matchers`, `options`", "upgrades[].connectTerminate")(
    lambda k: (vs(options="upgrades: [{connectTerminate: true}]"), "connectTerminate"))
probe("route `options.retries`", "rateLimitedRetryBackOff")(
    lambda k: (vs(options="retries: {retryOn: 5xx, rateLimitedRetryBackOff: {}}", action=route_to_u()),
               "retries.rateLimitedRetryBackOff"))
probe("route `options.shadowing`", "disableShadowHostSuffixAppend", "hostRewriteLiteral")(
    lambda k: (vs(options=f"shadowing: {{upstream: {{name: u}}, percentage: 100, {k}: "
                          f"{'true' if k.startswith('disable') else 'other.test'}}}", action=route_to_u()),
               f"shadowing.{k}"))
OUTLIER = {"successRate*": "successRateMinimumHosts", "enforcingSuccessRate": "enforcingSuccessRate",
           "failurePercentage*": "failurePercentageThreshold",
           "enforcingFailurePercentage*": "enforcingFailurePercentage",
           "splitExternalLocalOriginErrors": "splitExternalLocalOriginErrors",
           "consecutiveLocalOriginFailure": "consecutiveLocalOriginFailure",
           "enforcing*LocalOrigin*": "enforcingConsecutiveLocalOriginFailure"}
for written, field in OUTLIER.items():
    value = "true" if field == "splitExternalLocalOriginErrors" else "5"
    probe("Upstream `spec.outlierDetection`", written)(lambda k, field=field, value=value: (
        upstream(f"static: {{hosts: [{{addr: 127.0.0.1, port: 1}}]}}\noutlierDetection: {{{field}: {value}}}"),
        f"outlierDetection.{field}"))
CONNECTION = {"perConnectionBufferLimitBytes": "perConnectionBufferLimitBytes: 1024",
              "http1ProtocolOptions": "http1ProtocolOptions: {}",
              "commonHttpProtocolOptions.maxStreamDuration": "commonHttpProtocolOptions: {maxStreamDuration: 5s}",
              "headersWithUnderscoresAction": "commonHttpProtocolOptions: {headersWithUnderscoresAction: REJECT_REQUEST}"}
for written, yaml_ in CONNECTION.items():
    probe("Upstream `spec.connectionConfig`", written)(lambda k, yaml_=yaml_: (
        upstream(f"static: {{hosts: [{{addr: 127.0.0.1, port: 1}}]}}\nconnectionConfig: {{{yaml_}}}"),
        k.rsplit(".", 1)[-1]))
UPSTREAM_TLS = {"sds": "sds: {}", "alpnProtocols": "alpnProtocols: [h2]", "allowRenegotiation": "allowRenegotiation: true",
                "oneWayTls": "oneWayTls: true", "sslFiles.ocspStaple": "sslFiles: {ocspStaple: /nonexistent}",
                "parameters.ecdhCurves": "parameters: {ecdhCurves: [X25519]}"}
for written, yaml_ in UPSTREAM_TLS.items():
    probe("Upstream `spec.sslConfig`, `spec.static`", written)(lambda k, yaml_=yaml_: (
        tls_upstream(yaml_), k.rsplit(".", 1)[-1]))
probe("Upstream `spec.sslConfig`, `spec.static`", "autoSniRewrite: false")(
    lambda k: (tls_upstream("", "autoSniRewrite: false"), "autoSniRewrite"))
probe("Upstream `spec.sslConfig`, `spec.static`", "healthChecks")(
    lambda k: (tls_upstream("", "", HEALTH.format(extra="")), "healthChecks"))
for name in ("tcpHealthCheck", "grpcHealthCheck", "customHealthCheck", "unhealthyInterval", "unhealthyEdgeInterval",
             "healthyEdgeInterval", "intervalJitter", "eventLogPath", "reuseConnection", "tlsOptions"):
    value = {"eventLogPath": "/tmp/x", "reuseConnection": "true"}.get(name, "{}" if "Check" in name or name ==
                                                                      "tlsOptions" else "1s")
    probe("Upstream `spec.healthChecks[]`", name)(lambda k, value=value: (health(f"{k}: {value}"), k))
for name in ("slowStartConfig", "updateMergeWindow", "localityWeightedLbConfig"):
    value = "1s" if name == "updateMergeWindow" else "{}"
    probe("Upstream `spec.loadBalancerConfig`", name)(lambda k, value=value: (
        upstream(f"static: {{hosts: [{{addr: 127.0.0.1, port: 1}}]}}\nloadBalancerConfig: {{{k}: {value}}}"), k))
probe("route `lbHash.hashPolicies[].cookie`", "ttl", "path")(lambda k: (
    vs(options=f"lbHash: {{hashPolicies: [{{cookie: {{name: c, {k}: {'1s' if k == 'ttl' else '/'}}}}}]}}",
       action=route_to_u()), f"cookie.{k}"))
KINDS = {"MatchableHttpGateway": "gateway.solo.io/v1", "MatchableTcpGateway": "gateway.solo.io/v1",
         "Proxy": "gloo.solo.io/v1", "HttpListenerOption": "gateway.solo.io/v1", "ListenerOption": "gateway.solo.io/v1"}
for kind, api in KINDS.items():
    probe("kinds in Gloo's groups", kind)(lambda k, api=api: (
        f"apiVersion: {api}\nkind: {k}\nmetadata: {{name: x}}\nspec: {{}}\n", "kind"))
GATEWAY = {"tcpGateway": "tcpGateway: {}", "hybridGateway": "hybridGateway: {}",
           "routeOptions": "httpGateway: {}\nrouteOptions: {}",
           "options.socketOptions": "httpGateway: {}\noptions: {socketOptions: []}",
           "httpGateway.virtualServiceExpressions": "httpGateway: {virtualServiceExpressions: {}}",
           "httpGateway.options.waf": "httpGateway: {options: {waf: {}}}",
           "httpGateway.options.httpConnectionManagerSettings.maxRequestHeadersKb":
               "httpGateway: {options: {httpConnectionManagerSettings: {maxRequestHeadersKb: 60}}}"}
for written, yaml_ in GATEWAY.items():
    probe("`Gateway` `spec`", written)(lambda k, yaml_=yaml_: (gateway(yaml_), k.rsplit(".", 1)[-1]))
probe("Gateway `httpGateway.options.httpLocalRatelimit`", "localRateLimitPerDownstreamConnection: true")(
    lambda k: (gateway("httpGateway: {options: {httpLocalRatelimit: {defaultLimit: {maxTokens: 1, tokensPerFill: 1,"
                       " fillInterval: 1s}, localRateLimitPerDownstreamConnection: true}}}"),
               "localRateLimitPerDownstreamConnection"))
TRACING = "Gateway `httpConnectionManagerSettings.tracing`"
_OTEL = "openTelemetryConfig: {collectorUpstreamRef: {name: u, namespace: default}}"
TRACING_PROBES = {"zipkinConfig": "zipkinConfig: {}", "datadogConfig": "datadogConfig: {}",
                  "openCensusConfig": "openCensusConfig: {}", "metadataForTags": "metadataForTags: [{tag: t}]",
                  "openTelemetryConfig.clusterName": "openTelemetryConfig: {clusterName: otel}",
                  "verbose: true": f"verbose: true, {_OTEL}", "spawnUpstreamSpan: false": f"spawnUpstreamSpan: false, {_OTEL}",
                  "requestHeadersForTags: [Authorization]": f"requestHeadersForTags: [Authorization], {_OTEL}"}
for written, yaml_ in TRACING_PROBES.items():
    probe(TRACING, written)(lambda k, yaml_=yaml_: (
        upstream() + "---\n" + gateway("httpGateway: {options: {httpConnectionManagerSettings: {tracing: {"
                                        + yaml_ + "}}}}"), k.split(":")[0].rsplit(".", 1)[-1]))
ALS = "Gateway `options.accessLoggingService`"
probe(ALS, "grpcService")(lambda k: (access_log(sink="grpcService: {logName: x}"), "grpcService"))
probe(ALS, "openTelemetryService")(lambda k: (access_log(sink="openTelemetryService: {}"), "openTelemetryService"))
for operator in ("%BYTES_SENT%", "%BYTES_RECEIVED%", "%RESP(...)%", "%RESPONSE_FLAGS%", "%RESPONSE_DURATION%",
                 "%DYNAMIC_METADATA(...)%", "%FILTER_STATE(...)%"):
    written = operator.replace("(...)", "(X-A)" if operator.startswith("%RESP") else "(a:b)")
    probe(ALS, operator)(lambda k, written=written: (access_log(fmt=f"'{written}\\n'"), "stringFormat"))
for name in ("runtimeFilter", "responseFlagFilter", "traceableFilter", "grpcStatusFilter"):
    probe(ALS, name)(lambda k: (access_log(filter_=f"{{{k}: {{}}}}"), k))
for name in ("knative", "linkerd"):
    probe("Gloo `Settings` `spec`", name)(lambda k: (gloo_settings(f"{k}: {{}}"), f"spec.{k}"))
probe("`v1 Service`", "ExternalName")(lambda k: (
    "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {type: ExternalName, externalName: a.test}\n",
    "spec.type"))
for name in ("ratelimitEarlyBasic", "ratelimitRegularBasic", "rateLimitEarlyConfigs", "rateLimitRegularConfigs",
             "transformations", "stagedTransformations", "dlp", "waf", "extProc", "extProcEarly", "extProcLate", "ai",
             "envoyMetadata", "maxStreamDuration", "idleTimeout", "closeConnection", "hostRewritePathRegex",
             "hostRewriteHeader", "appendXForwardedHost", "stats", "includeRequestAttemptCount",
             "includeAttemptCountInResponse", "corsPolicyMergeSettings", "extensions"):
    probe("`options`", name)(lambda k: (vs(options=f"{k}: {{}}"), f"options.{k}"))
RL = "rate-limit `actions` / `setActions`"
probe(RL, "sourceCluster")(lambda k: (ratelimit_action("{sourceCluster: {}}"), "sourceCluster"))
probe(RL, "metadata")(lambda k: (ratelimit_action(
    "{metadata: {descriptorKey: k, metadataKey: {key: other.filter, path: [{key: x}]}}}"), "metadata"))
probe("Gloo `Settings.spec.ratelimitServer`", "ratelimitServerRef", "grpcService")(lambda k: (
    gloo_settings(f"ratelimitServer: {{{k}: {{name: x}}}}") + "---\n" + vs(options="ratelimitBasic: {}"),
    f"ratelimitServer.{k}"))
probe("`redirectAction`", "regexRewrite")(lambda k: (
    vs(action="redirectAction: {hostRedirect: a.test, regexRewrite: {pattern: {regex: a}, substitution: b}}"),
    "redirectAction.regexRewrite"))
probe("weighted destination `options`", "transformations", "stagedTransformations", "extauth", "bufferPerRoute")(
    lambda k: (vs(action=f"routeAction: {{multi: {{destinations: [{{weight: 1, destination: {{upstream: {{name: u}}}},"
                         f" options: {{{k}: {{}}}}}}]}}}}"), f"options.{k}"))
probe("VirtualHostOption, RouteOption `spec`", "targetRefs", "targetRef")(lambda k: (
    option_refs(f"{k}: {'[]' if k == 'targetRefs' else '{}'}"), f"spec.{k}"))
for name in ("hmacAuth", "jwt", "opaServerAuth", "pluginAuth", "ldapInternal", "oauth", "portalAuth"):
    probe("AuthConfig `spec.configs[]`", name)(lambda k: (auth_config(f"{k}: {{}}"), f"configs[0].{k}"))
probe("AuthConfig `spec.configs[]`", "apiKeyAuth.aerospikeApikeyStorage")(lambda k: (
    auth_config("apiKeyAuth: {aerospikeApikeyStorage: {}}"), "apiKeyAuth.aerospikeApikeyStorage"))
CUSTOM = vs(options="extauth: {customAuth: {}}")
for name in ("grpcService", "userIdHeader", "clearRouteCache", "statPrefix"):
    value = {"grpcService": "{authority: authz.test}", "clearRouteCache": "true"}.get(name, "x")
    probe("Gloo `Settings.spec.extauth`", name)(lambda k, value=value: (
        gloo_settings(f"extauth: {{extauthzServerRef: {{name: u, namespace: default}}, {k}: {value}}}") + "---\n"
        + CUSTOM, f"extauth.{k}"))
probe("AuthConfig `spec`", "failOnRedirect: true")(lambda k: (
    auth_config("ldap: {address: 'ldap://127.0.0.1:1', userDnTemplate: 'uid=%s,dc=x'}", "failOnRedirect: true"),
    "failOnRedirect"))
OAUTH2 = {"oauth2.oauth2": ("", "oauth2: {}"),
          "clientAuthentication.privateKeyJwt": ("clientAuthentication: {privateKeyJwt: {}}", ""),
          "sessionIdHeaderName": ("sessionIdHeaderName: x-session", ""),
          "parseCallbackPathAsRegex": ("parseCallbackPathAsRegex: true", ""),
          "autoMapFromMetadata": ("autoMapFromMetadata: {}", ""), "azure": ("azure: {}", ""),
          "session.cookie.targetDomain": ("session: {cookie: {targetDomain: a.test}}", ""),
          "failOnFetchFailure: false": ("session: {failOnFetchFailure: false}", "")}
for written, (inner, outer) in OAUTH2.items():
    field = written.split(":")[0].rsplit(".", 1)[-1]
    probe("AuthConfig `oauth2`", written)(lambda k, inner=inner, outer=outer, field=field: (
        oauth2(inner, outer), field))


# --------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------

HOST = PluginHost.create()


def refusals(text: str) -> list[str]:
    """The problems ``twistgw check`` would list, as ``field: reason``."""
    try:
        build_snapshot(load_text(text, "gloo.yaml", keep_going=True), HOST)
    except ConfigError as exc:
        return [f"{i.field}: {i.reason}" for i in exc.issues]
    return []


def cases():
    for first, where, _ in rows():
        for name in names(first):
            yield pytest.param(where, name, id=f"{where} {name}")


def test_every_row_names_fields():
    assert len(rows()) > 30
    for first, _where, line in rows():
        assert names(first), f"a row without a backticked name: {line}"


@pytest.mark.parametrize("where, name", list(cases()))
def test_what_each_row_names_is_refused_there(where: str, name: str) -> None:
    make = P.get((where, name))
    assert make is not None, f"no probe for {name!r} at {where!r}: write one above (or fix the row)"
    text, field = make()
    problems = refusals(text)
    at = re.compile(rf"(^|\.){re.escape(field)}(\[|\.|$)")
    mine = [p for p in problems if at.search(p.split(": ", 1)[0])]
    assert mine, f"the table says {name!r} is refused at {where}, but it is not:\n{problems or 'ACCEPTED'}"
    # "each with its own message": the reason, not a bare unknown field
    assert not mine[0].split(": ", 1)[1].startswith("unknown field"), mine[0]


def test_no_stale_rows_of_the_past():
    """The rows issue 32 found contradicting the rest of the docs."""
    for first, _, line in rows():
        for served in ("cors", "retries", "headerManipulation", "oauth2", "apiKeyAuth", "basicAuth", "opa",
                       "extauthzServerRef", "httpService"):
            assert served not in names(first), line
