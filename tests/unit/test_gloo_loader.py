"""Gloo Edge manifests load unchanged: Gloo's API groups as aliases, other
API groups skipped (one note each), kube destinations with the port beside
``ref``, Gloo fields twistgw does not implement refused with the reason; and
``check`` reports every problem at once, each once, in file and line order."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from twistgw.config.loader import ConfigError, load_directory, load_text
from twistgw.config.model import KubeRef, UpstreamRef
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot

from support.trial import TestCase

GLOO_STYLE = """\
apiVersion: v1
kind: Namespace
metadata: {name: petstore}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: petstore, namespace: petstore}
spec: {replicas: 1}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: petstore, namespace: petstore}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: petstore}
data: {a: b}
---
apiVersion: ratelimit.solo.io/v1alpha1
kind: RateLimitConfig
metadata: {name: limits}
spec: {raw: {}}
---
apiVersion: v1
kind: Service
metadata: {name: petstore, namespace: petstore}
spec:
  ports: [{port: 8080, targetPort: 8080}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: petstore, namespace: petstore}
subsets: [{addresses: [{ip: 127.0.0.1}], ports: [{port: 8080}]}]
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: json-server, namespace: gloo-system}
spec:
  static:
    hosts: [{addr: 127.0.0.1, port: 9000}]
---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {name: ldap, namespace: gloo-system}
spec:
  configs:
  - ldap:
      address: ldap://127.0.0.1:389
      userDnTemplate: uid=%s,ou=people,dc=solo,dc=io
      allowedGroups: [cn=managers,ou=groups,dc=solo,dc=io]
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: petstore, namespace: gloo-system}
spec:
  virtualHost:
    domains: ['*']
    routes:
    - matchers: [{prefix: /pets}]
      routeAction:
        single:
          kube:
            ref: {name: petstore, namespace: petstore}
            port: 8080
    - matchers: [{exact: /posts}]
      routeAction:
        single:
          upstream: {name: json-server, namespace: gloo-system}
"""


KUBE_VS = """\
apiVersion: v1
kind: Service
metadata: {{name: s}}
spec: {{ports: [{{port: 80}}]}}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: v}}
spec:
  virtualHost:
    routes:
    - routeAction:
        single:
          kube: {kube}
"""


# ---------------------------------------------------------------------------
# Every problem at once
# ---------------------------------------------------------------------------


def check(text: str) -> list:
    """Issues of loading and compiling (with the installed plugins)."""
    host = PluginHost.create()
    if text.startswith(VS_V):  # the head is written flush left, the rest indented
        text = VS_V + textwrap.indent(textwrap.dedent(text[len(VS_V):]), "    ")
    with pytest.raises(ConfigError) as info:
        build_snapshot(load_text(textwrap.dedent(text), "a.yaml", keep_going=True), host)
    return info.value.issues


VS_V = """\
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: v}
spec:
  virtualHost:
"""


class GlooLoaderTests(TestCase):
    def test_gloo_groups_load_and_other_groups_are_skipped(self):
        config = load_text(GLOO_STYLE, "gloo.yaml")
        (vs,) = config.virtual_services
        assert vs.key == "gloo-system/petstore"
        assert vs.routes[0].action == KubeRef("petstore", "petstore", 8080)
        assert vs.routes[1].action == UpstreamRef("json-server", "gloo-system")
        assert ("gloo-system", "ldap") in config.auth_configs
        assert ("gloo-system", "json-server") in config.upstreams
        assert ("petstore", "petstore") in config.services  # v1 Service is ours
        assert config.of_kind("ConfigMap")[("petstore", "settings")].data == {"a": "b"}  # so is v1 ConfigMap
        assert config.skipped == (
            "gloo.yaml: document 1 (line 1): skipped Namespace (v1): not an API group twistgw serves",
            "gloo.yaml: document 2 (line 5): skipped Deployment (apps/v1): not an API group twistgw serves",
            "gloo.yaml: document 3 (line 10): skipped ServiceAccount (v1): not an API group twistgw serves",
        )
        # read for the rate-limit plugins (docs/ratelimit.md), no longer skipped
        assert ("default", "limits") in config.resources["RateLimitConfig"]

    def test_check_loads_gloo_manifests_and_notes_what_it_skipped(self, tmp_path):
        (tmp_path / "gloo.yaml").write_text(GLOO_STYLE)
        out = subprocess.run([sys.executable, "-m", "twistgw", "check", str(tmp_path)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "OK: 1 virtual service(s), 2 route(s)" in out.stdout
        assert out.stderr.count("note: ") == 3  # ConfigMap and RateLimitConfig are read now: see above
        assert "skipped Deployment (apps/v1)" in out.stderr

    @pytest.mark.parametrize("api, kind, reason", [
        ("gateway.solo.io/v1", "MatchableHttpGateway", "Gloo's MatchableHttpGateway is not supported by twistgw:"
                                                       " hybrid gateways are not supported"),
        ("gateway.solo.io/v1", "HttpListenerOption", "Gloo's HttpListenerOption is not supported by twistgw: options"
                                                     " attached to listeners by targetRefs"),
        ("gloo.solo.io/v1", "Proxy", "Gloo's Proxy is not supported by twistgw: Gloo's generated Proxy is not read"),
        ("gateway.vendor.io/v1", "VirtualServic", "unknown kind 'VirtualServic'"),
        ("gloo.solo.io/v1", "VirtualService", "VirtualService needs apiVersion 'gateway.vendor.io/v1' or"
                                              " 'gateway.solo.io/v1', got 'gloo.solo.io/v1'"),
        ("enterprise.gloo.solo.io/v1", "Settings", "Settings needs apiVersion 'gateway.vendor.io/v1' or"
                                                   " 'gloo.solo.io/v1'"),
    ])
    def test_unknown_kind_in_our_groups_is_an_error(self, api, kind, reason):
        with pytest.raises(ConfigError) as info:
            load_text(f"apiVersion: {api}\nkind: {kind}\nmetadata: {{name: x}}\nspec: {{}}\n", "k.yaml")
        (issue,) = info.value.issues
        assert reason in issue.reason

    def test_check_refuses_a_misspelt_group(self, tmp_path):
        (tmp_path / "vs.yaml").write_text(GLOO_STYLE.replace("gateway.solo.io/v1", "gateway.vendr.io/v1"))
        out = subprocess.run([sys.executable, "-m", "twistgw", "check", str(tmp_path)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1, out.stdout + out.stderr
        assert "did you mean gateway.vendor.io/v1?" in out.stdout + out.stderr
        assert "OK:" not in out.stdout

    @pytest.mark.parametrize("api, kind, reason", [
        # issue 23 item 24: a misspelt group made the gateway serve nothing (404 to everything)
        ("gateway.vendr.io/v1", "VirtualService", "did you mean gateway.vendor.io/v1?"),
        ("gateway.solo.oi/v1", "VirtualService", "did you mean gateway.solo.io/v1?"),
        ("glo.solo.io/v1", "Upstream", "did you mean gloo.solo.io/v1?"),
        ("enterprise.glo.solo.io/v1", "AuthConfig", "did you mean enterprise.gloo.solo.io/v1?"),
        ("example.com/v1", "RouteTable", "twistgw reads RouteTable as gateway.vendor.io/v1 or gateway.solo.io/v1"),
        ("apps/v1", "Secret", "twistgw reads Secret as v1"),
    ])
    def test_a_kind_we_read_under_another_group_is_an_error(self, api, kind, reason):
        with pytest.raises(ConfigError) as info:
            load_text(f"apiVersion: {api}\nkind: {kind}\nmetadata: {{name: x}}\nspec: {{}}\n", "k.yaml")
        (issue,) = info.value.issues
        assert issue.field == "apiVersion" and issue.line == 1
        assert reason in issue.reason, issue.reason

    def test_other_projects_kinds_of_the_same_name_are_skipped(self):
        config = load_text("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: x}\n"
                           "spec: {hosts: [a]}\n---\napiVersion: serving.knative.dev/v1\nkind: Service\n"
                           "metadata: {name: y}\nspec: {}\n", "k.yaml")
        assert len(config.skipped) == 2 and not config.virtual_services and not config.services

    @pytest.mark.parametrize("kube", ["{ref: {name: s, port: 80}}", "{ref: {name: s}, port: 80}",
                                      "{ref: {name: s, port: 80}, port: 80}"])
    def test_kube_port_inside_or_beside_ref(self, kube):
        (vs,) = load_text(KUBE_VS.format(kube=kube)).virtual_services
        assert vs.routes[0].action == KubeRef("s", "default", 80)

    @pytest.mark.parametrize("kube, field, reason", [
        ("{ref: {name: s}}", "kube.port", "is required"),
        ("{ref: {name: s, port: 80}, port: 81}", "kube.port", "differs from ref.port (80)"),
    ])
    def test_kube_port_errors(self, kube, field, reason):
        with pytest.raises(ConfigError) as info:
            load_text(KUBE_VS.format(kube=kube))
        (issue,) = info.value.issues
        assert issue.field == "spec.virtualHost.routes[0].routeAction.single." + field
        assert reason in issue.reason

    @pytest.mark.parametrize("snippet, field, reason", [
        ("graphqlApiRef: {name: g}", "routes[0].graphqlApiRef", "GraphQL is out of twistgw's scope"),
        ("routeAction: {dynamicForwardProxy: {}}", "routes[0].routeAction.dynamicForwardProxy",
         "the dynamic forward proxy is out of twistgw's scope"),
        ("options: {transformations: {}}\n      routeAction: {single: {upstream: {name: u}}}",
         "routes[0].options.transformations", "transformations are out of twistgw's scope"),
        ("options: {extProcEarly: {}}\n      routeAction: {single: {upstream: {name: u}}}", "routes[0].options.extProcEarly", "external processing"),
        ("options: {retries: {retryOn: 5xx, rateLimitedRetryBackOff: {}}}\n      routeAction: {single: {upstream: {name: u}}}",
         "routes[0].options.retries.rateLimitedRetryBackOff", "retries do not read the upstream's rate-limit"),
        ("options: {shadowing: {upstream: {name: u}, percentage: 1, disableShadowHostSuffixAppend: true}}\n      routeAction: {single: {upstream: {name: u}}}",
         "routes[0].options.shadowing.disableShadowHostSuffixAppend", "the shadow's Host always gets"),
        ("options: {shadowing: {upstream: {name: u}, percentage: 1, hostRewriteLiteral: x}}\n      routeAction: {single: {upstream: {name: u}}}",
         "routes[0].options.shadowing.hostRewriteLiteral", "the shadow's Host is the request's"),
        ("options: {upgrades: [{connectTerminate: {enabled: true}}]}\n      routeAction: {single: {upstream: {name: u}}}",
         "routes[0].options.upgrades[0].connectTerminate", "CONNECT is not proxied"),
    ])
    def test_unsupported_gloo_route_fields_are_named(self, snippet, field, reason):
        text = ("apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: v}\nspec:\n"
                "  virtualHost:\n    routes:\n    - matchers: [{prefix: /}]\n      " + snippet + "\n"
                "---\napiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
                "spec: {static: {hosts: [{addr: 127.0.0.1, port: 1}]}}\n")
        with pytest.raises(ConfigError) as info:
            load_text(text)
        found = [i for i in info.value.issues if i.field == "spec.virtualHost." + field]
        assert found and found[0].reason.startswith("is not supported by twistgw: " + reason), info.value.issues
        if "dynamicForwardProxy" in field:  # the one problem, not also "set exactly one of single, multi..."
            assert len(info.value.issues) == 1, info.value.issues

    def test_connect_matcher_and_kube_service_spec_are_named(self):
        text = ("apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: v}\nspec:\n"
                "  virtualHost:\n    routes:\n    - matchers: [{connectMatcher: {}}]\n"
                "      directResponseAction: {status: 200}\n"
                "---\napiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
                "spec: {kube: {serviceName: s, serviceNamespace: default, servicePort: 80, serviceSpec: {rest: {}}}}\n")
        with pytest.raises(ConfigError) as info:
            load_text(text)
        reasons = {i.field: i.reason for i in info.value.issues}
        assert reasons["spec.virtualHost.routes[0].matchers[0].connectMatcher"].startswith(
            "is not supported by twistgw: CONNECT requests are not proxied"), reasons
        assert reasons["spec.kube.serviceSpec.rest"].startswith("is not supported: REST function routing"), reasons

    def test_a_refused_upstream_type_is_one_problem(self):
        with pytest.raises(ConfigError) as info:
            load_text("apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
                      "spec: {aws: {region: us-east-1}}\n")
        (issue,) = info.value.issues
        assert issue.field == "spec.aws" and "AWS Lambda" in issue.reason


    @pytest.mark.parametrize("retries, field, reason", [
        ("{retryOn: refused-stream}", "retryOn", "'refused-stream' is not supported by twistgw: an HTTP/2 condition"),
        ("{retryOn: 5xx, retriableStatusCodes: [418]}", "retriableStatusCodes",
         "needs 'retriable-status-codes' in retryOn"),
        ("{numRetries: 2}", "retryOn", "is required"),
        ("{retryOn: sometimes}", "retryOn", "unknown retry condition 'sometimes'"),
        ("{retryOn: 5xx, perTryTimeout: soon}", "perTryTimeout", "must be a duration"),
        ("{retryOn: 5xx, retryBackOff: {baseInterval: 1s, maxInterval: 10ms}}", "retryBackOff.maxInterval",
         "must not be below baseInterval"),
    ])
    def test_retries_problems_are_located(self, retries, field, reason):
        text = ("apiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: v}\nspec:\n"
                "  virtualHost:\n    routes:\n    - matchers: [{prefix: /}]\n"
                f"      options: {{retries: {retries}}}\n      routeAction: {{single: {{upstream: {{name: u}}}}}}\n"
                "---\napiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
                "spec: {static: {hosts: [{addr: 127.0.0.1, port: 1}]}}\n")
        with pytest.raises(ConfigError) as info:
            load_text(text)
        found = [i for i in info.value.issues if i.field == "spec.virtualHost.routes[0].options.retries." + field]
        assert found and reason in found[0].reason, info.value.issues

    def test_wrong_domains_beside_missing_routes(self):
        found = check(VS_V + """\
            domains: example.com
        """)
        # Gloo accepts a virtual service without routes (it serves nothing)
        assert [(i.field, i.reason) for i in found] == [
            ("spec.virtualHost.domains", "must be a list, got a string"),
        ]

    def test_typo_beside_plugin_option_errors(self):
        found = check(VS_V + """\
            options:
              rbac:
                policies:
                  one: {principals: [{jwtPrincipal: {claims: {a: b}, matcher: FUZZY}}]}
                  two: {permissions: {pathPrefix: nope}}
            routes:
            - matchers: [{prefix: /}]
              directResponseAction: {status: 200}
              colour: blue
        """)
        assert [(i.line, i.field) for i in found] == [
            (9, "spec.virtualHost.options.rbac.policies.one.principals[0].jwtPrincipal.matcher"),
            (10, "spec.virtualHost.options.rbac.policies.two.permissions.pathPrefix"),
            (14, "spec.virtualHost.routes[0].colour"),
        ]
        assert found[2].reason == "unknown field 'colour'; expected one of: delegateAction," \
            " directResponseAction, inheritableMatchers, inheritablePathMatchers, matchers, name, options," \
            " optionsConfigRefs, redirectAction, routeAction"

    def test_jwt_reports_every_provider_problem(self):
        found = check(VS_V + """\
            options:
              jwt:
                validationPolicy: MAYBE
                providers:
                  a: {issuer: '', jwks: {local: {key: x}}}
                  b: {jwks: {local: {key: x}, remote: {}}, keepToken: 'yes', issuers: x}
            routes:
            - directResponseAction: {status: 200}
        """)
        fields = [i.field.removeprefix("spec.virtualHost.options.jwt.") for i in found]
        assert fields == ["validationPolicy", "providers.a.issuer", "providers.a.jwks.local.key",
                          "providers.b.issuers", "providers.b.issuer", "providers.b.jwks", "providers.b.keepToken"]
        assert len(set((i.field, i.reason) for i in found)) == len(found)

    def test_ldap_reports_every_problem_of_an_auth_config(self):
        found = check("""\
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {name: ldap}
        spec:
          configs:
          - ldap:
              address: http://x
              userDnTemplate: uid=x
              allowedGroups: []
              poool: {}
        ---
        apiVersion: gateway.vendor.io/v1
        kind: VirtualService
        metadata: {name: v}
        spec:
          virtualHost:
            options: {extauth: {configRef: {name: ldap}}}
            routes:
            - directResponseAction: {status: 200}
        """)
        reasons = [i.reason for i in found]
        assert len(reasons) == 4, reasons
        assert any("unknown field 'poool'" in r for r in reasons)
        # each located at its own field and line of the AuthConfig (document 1)
        assert sorted((i.resource, i.field, i.document, i.line) for i in found) == [
            ("AuthConfig default/ldap", f"spec.configs[0].ldap.{field}", 0, line)
            for field, line in (("address", 7), ("allowedGroups", 9), ("poool", 10), ("userDnTemplate", 8))]

    def test_invalid_upstream_gives_no_misleading_dangling_reference(self):
        found = check("""\
        apiVersion: gloo.solo.io/v1
        kind: Upstream
        metadata: {name: backend}
        spec:
          static: {hosts: [{addr: 127.0.0.1, port: 0}]}
        ---
        apiVersion: v1
        kind: Service
        metadata: {name: svc}
        spec: {ports: [{port: 80, protocol: 7, nmae: x}]}
        ---
        apiVersion: gateway.vendor.io/v1
        kind: VirtualService
        metadata: {name: v}
        spec:
          virtualHost:
            routes:
            - routeAction: {single: {upstream: {name: backend}}}
            - routeAction: {single: {upstream: {name: backend}}}
            - routeAction: {single: {kube: {ref: {name: svc}, port: 80}}}
        """)
        assert [(i.resource, i.field) for i in found] == [
            ("Upstream default/backend", "spec.static.hosts[0].port"),
            ("Service default/svc", "spec.ports[0].nmae"),
            ("Service default/svc", "spec.ports[0].protocol"),
        ]

    def test_problems_in_file_and_line_order_across_files(self, tmp_path):
        (tmp_path / "b.yaml").write_text(
            "apiVersion: gateway.vendor.io/v1\nkind: VirtualService\nmetadata: {name: b}\nspec:\n"
            "  virtualHost:\n    domains: [b]\n    routes:\n    - {directResponseAction: {status: 1}}\n"
            "    - {directResponseAction: {status: 2}}\n")
        (tmp_path / "a.yaml").write_text(
            "apiVersion: gateway.vendor.io/v1\nkind: VirtualService\nmetadata: {name: a}\nspec:\n"
            "  virtualHost:\n    domains: [a]\n    routes: []\n    extra: 1\n---\nkind: Upstream\n")
        with pytest.raises(ConfigError) as info:
            build_snapshot(load_directory(str(tmp_path), keep_going=True), PluginHost.create())
        where = [(os.path.basename(i.file), i.line) for i in info.value.issues]
        assert where == [("a.yaml", 8), ("a.yaml", 10), ("b.yaml", 8), ("b.yaml", 9)]

    @pytest.mark.parametrize("doc, field, reason", [
        ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 53, protocol: UDP}]}\n",
         "spec.ports[0].protocol", "must be TCP"),
        ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80, appProtocol: kubernetes.io/ws}]}\n",
         "spec.ports[0].appProtocol", "must be http, or one of Gloo's HTTP/2 protocols"),
        ("apiVersion: v1\nkind: Endpoints\nmetadata: {name: s}\nsubsets: [{addresses: [{ip: 1.2.3.4}],"
         " ports: [{port: 80, appProtocol: h3}]}]\n", "subsets[0].ports[0].appProtocol", "must be http"),
        ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {type: ExternalName, externalName: x.example}\n",
         "spec.type", "ExternalName Services are not supported"),
        ("apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
         "spec: {static: {hosts: [{addr: 1.2.3.4, port: 443}], useTls: true, autoSniRewrite: false}}\n",
         "spec.static.autoSniRewrite", "the name verified is always sent as SNI"),
        ("apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
         "spec: {static: {hosts: [{addr: 1.2.3.4, port: 443}], useTls: false}, sslConfig: {sni: a.test}}\n",
         "spec.static.useTls", "is false while sslConfig is set"),
        ("apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
         "spec: {static: {hosts: [{addr: 1.2.3.4, port: 80}]}, circuitBreakers: {maxRequests: 0}}\n",
         "spec.circuitBreakers", "must be at least 1"),
        ("apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
         "spec: {static: {hosts: [{addr: 1.2.3.4, port: 80, sniAddr: a.test}]}}\n",
         "spec.static.hosts", "sniAddr is set but the upstream is plain HTTP"),
        ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selector: {app: s}, ports: [{port: 80}]}\n---\n"
         "apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
         "spec: {kube: {serviceName: s, servicePort: 80, selector: {app: s, version: v2}}}\n",
         "spec.kube.selector", "differs from the selector of Service default/s"),
    ])
    def test_what_the_gateway_cannot_honour_is_refused(self, doc, field, reason):
        with pytest.raises(ConfigError) as info:
            load_text(doc)
        (issue,) = info.value.issues
        assert issue.field == field and reason in issue.reason

    def test_the_services_own_selector_is_accepted(self):
        config = load_text(
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selector: {app: s}, ports: [{port: 80}]}\n---\n"
            "apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
            "spec: {kube: {serviceName: s, servicePort: 80, selector: {app: s}}}\n")
        assert ("default", "u") in config.upstreams

    def test_invalid_auth_config_is_reported_once_not_as_dangling(self):
        found = check("""\
        apiVersion: enterprise.gloo.solo.io/v1
        kind: AuthConfig
        metadata: {name: ldap}
        spec:
          configs: []
        ---
        apiVersion: gateway.vendor.io/v1
        kind: VirtualService
        metadata: {name: v}
        spec:
          virtualHost:
            options: {extauth: {configRef: {name: ldap}}}
            routes:
            - directResponseAction: {status: 200}
        """)
        assert [(i.resource, i.field) for i in found] == [("AuthConfig default/ldap", "spec.configs")]

    def test_a_file_that_does_not_parse_hides_no_problem_and_adds_no_dangling_reference(self, tmp_path):
        """The upstream and the auth config live in the file with a YAML error:
    the routes that name them are not reported as dangling (they may well be
    there); the YAML error and the other file's own problems are."""
        (tmp_path / "a-backends.yaml").write_text(
            "apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
            "spec: {static: {hosts: [{addr: 127.0.0.1, port: 1}]}\n")  # unbalanced brace
        (tmp_path / "b-vs.yaml").write_text(
            "apiVersion: gateway.vendor.io/v1\nkind: VirtualService\nmetadata: {name: v}\nspec:\n"
            "  virtualHost:\n    options: {extauth: {configRef: {name: ldap}}}\n    routes:\n"
            "    - routeAction: {single: {upstream: {name: u}}}\n      colour: blue\n"
            "    - delegateAction: {ref: {name: elsewhere}}\n")
        with pytest.raises(ConfigError) as info:
            build_snapshot(load_directory(str(tmp_path), keep_going=True), PluginHost.create())
        found = [(os.path.basename(i.file), i.field or i.reason[:12]) for i in info.value.issues]
        assert found == [("a-backends.yaml", "invalid YAML"), ("b-vs.yaml", "spec.virtualHost.routes[0].colour")]


# ---------------------------------------------------------------------------
# Discovered Upstreams in Gloo's discovery namespace
# ---------------------------------------------------------------------------

PETSTORE = """\
apiVersion: v1
kind: Service
metadata: {name: petstore, namespace: default}
spec:
  selector: {app: petstore}
  ports: [{name: http, port: 8080, targetPort: 80}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: petstore, namespace: default}
subsets:
- addresses: [{ip: 10.1.0.7}]
  ports: [{name: http, port: 80}]
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: default, namespace: gloo-system}
spec:
  virtualHost:
    domains: ['*']
    routes:
    - matchers: [{prefix: /}]
      routeAction: {single: {upstream: {name: default-petstore-8080, namespace: NS}}}
"""


class DiscoveryNamespaceTests(TestCase):
    """Gloo's discovery writes the Upstream of a Service port into its
    discovery namespace (``gloo-system``), and Gloo's guides name it there:
    ``{name: default-petstore-8080, namespace: gloo-system}``."""

    def test_gloo_system_by_default_and_the_services_namespace_too(self):
        for ns in ("gloo-system", "default"):
            config = load_text(PETSTORE.replace("NS", ns))
            assert len(build_snapshot(config, PluginHost.create()).routes) == 1
            ups = config.upstreams[(ns, "default-petstore-8080")]
            assert [(e.host, e.port) for e in ups.endpoints] == [("10.1.0.7", 80)]

    def test_gloo_settings_discovery_namespace(self):
        settings = ("apiVersion: gloo.solo.io/v1\nkind: Settings\nmetadata: {name: default, namespace: gloo-system}\n"
                    "spec: {discoveryNamespace: discovered}\n---\n")
        config = load_text(settings + PETSTORE.replace("NS", "discovered"))
        assert ("discovered", "default-petstore-8080") in config.upstreams
        assert ("gloo-system", "default-petstore-8080") not in config.upstreams
        found = check(settings + PETSTORE.replace("NS", "gloo-system"))
        assert any("dangling reference: no Upstream gloo-system/default-petstore-8080" in str(i) for i in found)

    def test_twistgw_settings_discovery_namespace(self):
        settings = ("apiVersion: gateway.vendor.io/v1\nkind: Settings\nmetadata: {name: default}\n"
                    "spec: {gateway: {discoveryNamespace: edge}}\n---\n")
        config = load_text(settings + PETSTORE.replace("NS", "edge"))
        assert ("edge", "default-petstore-8080") in config.upstreams

    def test_a_declared_upstream_of_that_name_wins(self):
        declared = ("apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: default-petstore-8080,"
                    " namespace: gloo-system}\nspec: {static: {hosts: [{addr: 127.0.0.1, port: 9}]}}\n---\n")
        config = load_text(declared + PETSTORE.replace("NS", "gloo-system"))
        ups = config.upstreams[("gloo-system", "default-petstore-8080")]
        assert [(e.host, e.port) for e in ups.endpoints] == [("127.0.0.1", 9)]

    def test_secret_options_are_control_plane(self):
        """Where Gloo reads Secrets (Kubernetes, Vault...): informational,
        as the other secret sources; a Secret twistgw does not have stays a
        dangling reference."""
        settings = ("apiVersion: gloo.solo.io/v1\nkind: Settings\nmetadata: {name: default, namespace: gloo-system}\n"
                    "spec:\n  secretOptions:\n    sources:\n    - kubernetes: {}\n    - vault: {address: http://v:8200}\n"
                    "---\n")
        assert ("gloo-system", "default-petstore-8080") in load_text(settings + PETSTORE.replace("NS", "gloo-system")).upstreams
