"""The configuration loader: every kind, discovery, kube resolution, and
errors located by file, document, line, resource and field."""

from __future__ import annotations

import os
import textwrap

import pytest

from twistgw.api.types import Endpoint
from twistgw.config.loader import ConfigError, ConfigIssue, load_directory, load_text
from twistgw.config.model import DirectResponse, KubeRef, UpstreamRef
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot

from support.trial import TestCase


def load(text: str):
    return load_text(textwrap.dedent(text), "cfg.yaml")


def issues_of(text: str) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as info:
        load(text)
    return info.value.issues


def one_issue(text: str) -> ConfigIssue:
    issues = issues_of(text)
    assert len(issues) == 1, issues
    return issues[0]


SERVICE_AND_ENDPOINTS = """\
apiVersion: v1
kind: Service
metadata: {name: petstore, namespace: shop}
spec:
  selector: {app: petstore}
  ports:
  - {name: http, port: 8080, targetPort: web}
  - {port: 9090, targetPort: 9999}
---
apiVersion: v1
kind: Endpoints
metadata: {name: petstore, namespace: shop}
subsets:
- addresses: [{ip: 10.0.0.1}, {ip: 10.0.0.2}]
  ports: [{name: http, port: 8000}, {name: metrics, port: 9999}]
"""

EVERY_KIND = SERVICE_AND_ENDPOINTS + """\
---
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {name: static-one, namespace: shop}
spec:
  static:
    hosts: [{addr: 192.0.2.1, port: 81}, {addr: 192.0.2.2, port: 82}]
---
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {name: kube-one, namespace: default}
spec:
  kube:
    selector: {app: petstore}
    serviceName: petstore
    serviceNamespace: shop
    servicePort: 9090
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
type: extauth.vendor.io/accountcredentials
data: {username: Y249YWRtaW4=}
stringData: {password: "s3cret:x"}
---
apiVersion: enterprise.gateway.vendor.io/v1
kind: AuthConfig
metadata: {name: ldap}
spec:
  configs:
  - ldap: {address: "ldap://127.0.0.1:389", userDnTemplate: "uid=%s,dc=x"}
---
apiVersion: gateway.vendor.io/v1
kind: Settings
metadata: {name: settings}
spec:
  rbac: {requireRbac: true}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: shop, namespace: shop}
spec:
  displayName: The shop
  virtualHost:
    domains: ["Shop.Example.com:8443", "*.example.org"]
    options: {pluginOrder: []}
    routes:
    - name: pets
      matchers: [{prefix: /pets}, {exact: /exact, methods: [GET]}]
      routeAction: {single: {kube: {ref: {name: petstore, port: 8080}}}}
      options: {timeout: 500ms, prefixRewrite: /api}
    - matchers: [{prefix: /static}]
      routeAction: {single: {upstream: {name: static-one}}}
    - routeAction: {single: {upstream: {name: kube-one, namespace: default}}}
    - matchers: [{prefix: /teapot}]
      directResponseAction: {status: 418, body: "short and stout"}
"""


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------

VS_HEAD = """\
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: v}
spec:
  virtualHost:
"""

ERROR_CASES = [
    pytest.param(
        VS_HEAD + "    routes:\n    - matchers: [{prefix: /}]\n      directResponseAction: {status: 200}\n"
        "      colour: blue\n",
        "VirtualService default/v", "spec.virtualHost.routes[0].colour", "unknown field", 9,
        id="unknown-field"),
    pytest.param(
        VS_HEAD + "    domains: example.com\n    routes: []\n",
        "VirtualService default/v", "spec.virtualHost.domains", "must be a list, got a string", 6,
        id="wrong-type-list"),
    pytest.param(
        VS_HEAD + "    routes:\n    - matchers: [{prefix: /}]\n      directResponseAction: {status: '200'}\n",
        "VirtualService default/v", "spec.virtualHost.routes[0].directResponseAction.status",
        "must be an integer, got a string", 8, id="wrong-type-int"),
    pytest.param(
        VS_HEAD + "    routes:\n    - matchers: [{prefix: /}]\n      directResponseAction: {status: 99}\n",
        "VirtualService default/v", "spec.virtualHost.routes[0].directResponseAction.status",
        "must be between 200 and 599", 8, id="status-range"),
    pytest.param(
        VS_HEAD + "    routes:\n    - matchers: [{prefix: /}]\n      routeAction: {single: {upstream: {name: nope}}}\n",
        "VirtualService default/v", "spec.virtualHost.routes[0].routeAction.single.upstream",
        "dangling reference: no Upstream default/nope", 8, id="dangling-upstream"),
    pytest.param(
        VS_HEAD + "    routes:\n    - routeAction: {single: {kube: {ref: {name: nope, port: 80}}}}\n",
        "VirtualService default/v", "spec.virtualHost.routes[0].routeAction.single.kube.ref",
        "dangling reference: no Service default/nope", 7, id="dangling-kube-ref"),
    pytest.param(
        VS_HEAD + "    routes:\n    - routeAction: {single: {kube: {ref: {name: s, port: 81}}}}\n"
        "---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}]}\n",
        "VirtualService default/v", "spec.virtualHost.routes[0].routeAction.single.kube.ref",
        "Service default/s has no port 81 (ports: 80)", 7, id="kube-ref-missing-port"),
    pytest.param(
        "apiVersion: core.vendor.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
        "spec: {kube: {serviceName: gone, servicePort: 80}}\n",
        "Upstream default/u", "spec.kube", "no Service default/gone", 4, id="dangling-upstream-kube"),
    pytest.param(
        "apiVersion: core.vendor.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
        "spec: {static: {hosts: [{addr: 1.2.3.4, port: 70000}]}}\n",
        "Upstream default/u", "spec.static.hosts[0].port", "must be between 1 and 65535", 4, id="bad-port"),
    pytest.param(
        "apiVersion: core.vendor.io/v1\nkind: Upstream\nmetadata: {name: u}\n"
        "spec: {static: {hosts: [{addr: a, port: 1}]}, kube: {serviceName: s, servicePort: 1}}\n",
        "Upstream default/u", "spec", "set exactly one of kube or static", 4, id="upstream-both"),
    pytest.param(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata:\n  k: '%%%'\n",
        "Secret default/s", "data.k", "is not valid base64", 5, id="bad-base64"),
    pytest.param(
        "apiVersion: gateway.vendor.io/v2\nkind: VirtualService\nmetadata: {name: v}\nspec: {}\n",
        "VirtualService default/v", "apiVersion", "VirtualService needs apiVersion 'gateway.vendor.io/v1'",
        1, id="bad-apiversion"),
    pytest.param(
        "apiVersion: gateway.solo.io/v1\nkind: MatchableHttpGateway\nmetadata: {name: p}\nspec: {}\n",
        "", "kind", "Gloo's MatchableHttpGateway is not supported by twistgw", 2, id="unknown-kind"),
    pytest.param(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: Bad_Name}\n",
        "Secret default/Bad_Name", "metadata.name", "is not a valid Kubernetes name", 3, id="bad-name"),
    pytest.param(
        "apiVersion: v1\nkind: Secret\nmetadata: {namespace: x}\n",
        "", "metadata.name", "is required", 3, id="missing-name"),
    pytest.param(
        VS_HEAD + "    routes:\n    - matchers: [{prefix: /}]\n      directResponseAction: {status: 200}\n"
        "      options: {timeout: soon}\n",
        "VirtualService default/v", "spec.virtualHost.routes[0].options.timeout",
        "must be a duration", 9, id="bad-duration"),
    pytest.param(
        VS_HEAD + "    routes:\n    - matchers: [{prefix: api}]\n      directResponseAction: {status: 200}\n",
        "VirtualService default/v", "spec.virtualHost.routes[0].matchers[0].prefix", "must start with '/'", 7,
        id="prefix-without-slash"),
    pytest.param(
        VS_HEAD + "    routes:\n    - matchers: [{prefix: /}]\n",
        "VirtualService default/v", "spec.virtualHost.routes[0]",
        "set exactly one of routeAction, directResponseAction, delegateAction", 7, id="no-action"),
    pytest.param(
        VS_HEAD + "    options: {pluginOrder: [jwt, jwt]}\n    routes: []\n",
        "VirtualService default/v", "spec.virtualHost.options.pluginOrder", "lists a plugin twice", 6,
        id="plugin-order-twice"),
]


class CoreConfigTests(TestCase):
    def test_every_kind_loads(self) -> None:
        c = load(EVERY_KIND)
        (vs,) = c.virtual_services
        assert (vs.namespace, vs.name, vs.display_name) == ("shop", "shop", "The shop")
        # domains are lower-cased and their port dropped
        assert vs.domains == ("shop.example.com", "*.example.org")
        assert vs.options == {"pluginOrder": []}
        pets, static, kube, teapot = vs.routes
        assert pets.name == "pets" and static.name == "routes[1]"
        assert pets.action == KubeRef("petstore", "shop", 8080)  # namespace defaults to the VS's
        assert pets.timeout == 0.5 and pets.prefix_rewrite == "/api"
        assert [m.prefix for m in pets.matchers] == ["/pets", None]
        assert pets.matchers[1].exact == "/exact" and pets.matchers[1].methods == ("GET",)
        assert static.action == UpstreamRef("static-one", "shop")
        assert kube.action == UpstreamRef("kube-one", "default")
        assert kube.matchers[0].prefix == "/"  # no matchers: everything
        assert teapot.action == DirectResponse(418, b"short and stout")

        secret = c.secrets[("default", "creds")]
        assert secret.type == "extauth.vendor.io/accountcredentials"
        assert dict(secret.data) == {"username": b"cn=admin", "password": b"s3cret:x"}
        auth = c.auth_configs[("default", "ldap")]
        assert auth.configs[0]["ldap"]["userDnTemplate"] == "uid=%s,dc=x"
        assert c.settings == {"rbac": {"requireRbac": True}}

        assert c.upstreams[("shop", "static-one")].endpoints == (
            Endpoint("192.0.2.1", 81), Endpoint("192.0.2.2", 82))
        # a kube Upstream resolves like a kube ref: numbered targetPort 9999
        assert c.upstreams[("default", "kube-one")].endpoints == (
            Endpoint("10.0.0.1", 9999), Endpoint("10.0.0.2", 9999))

    def test_discovery_names_every_service_port(self) -> None:
        c = load(SERVICE_AND_ENDPOINTS)
        # in the Service's namespace and in Gloo's discovery namespace (where Gloo writes them)
        assert sorted(c.upstreams) == [("gloo-system", "shop-petstore-8080"), ("gloo-system", "shop-petstore-9090"),
                                       ("shop", "shop-petstore-8080"), ("shop", "shop-petstore-9090")]
        # the named port resolves through the Endpoints port of the same name,
        # not through the Service port number
        assert c.upstreams[("shop", "shop-petstore-8080")].endpoints == (
            Endpoint("10.0.0.1", 8000), Endpoint("10.0.0.2", 8000))
        assert c.upstreams[("shop", "shop-petstore-9090")].endpoints == (
            Endpoint("10.0.0.1", 9999), Endpoint("10.0.0.2", 9999))

    def test_discovered_upstream_usable_by_name_and_kube_ref_in_snapshot(self) -> None:
        text = SERVICE_AND_ENDPOINTS + """\
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: v, namespace: shop}
spec:
  virtualHost:
    routes:
    - matchers: [{prefix: /a}]
      routeAction: {single: {upstream: {name: shop-petstore-8080}}}
    - matchers: [{prefix: /b}]
      routeAction: {single: {kube: {ref: {name: petstore, namespace: shop, port: 9090}}}}
"""
        snap = build_snapshot(load(text), PluginHost.create(load_entry_points=False))
        a = snap.routes[("shop/v", 0)].balancer
        b = snap.routes[("shop/v", 1)].balancer
        assert [a.pick() for _ in range(3)] == [Endpoint("10.0.0.1", 8000), Endpoint("10.0.0.2", 8000),
                                                Endpoint("10.0.0.1", 8000)]
        assert {b.pick() for _ in range(2)} == {Endpoint("10.0.0.1", 9999), Endpoint("10.0.0.2", 9999)}

    def test_service_without_endpoints_yields_empty_upstream(self) -> None:
        c = load("""\
        apiVersion: v1
        kind: Service
        metadata: {name: lonely}
        spec: {ports: [{port: 80}]}
        """)
        assert c.upstreams[("default", "default-lonely-80")].endpoints == ()

    def test_single_unnamed_endpoints_port_and_target_port_default(self) -> None:
        c = load("""\
        apiVersion: v1
        kind: Service
        metadata: {name: s}
        spec: {ports: [{port: 80}]}
        ---
        apiVersion: v1
        kind: Endpoints
        metadata: {name: s}
        subsets:
        - addresses: [{ip: 10.1.1.1}]
          ports: [{port: 8080}]
        - addresses: [{ip: 10.1.1.2}]
          notReadyAddresses: [{ip: 10.1.1.3}]
          ports: [{port: 8081}]
        """)
        assert c.upstreams[("default", "default-s-80")].endpoints == (
            Endpoint("10.1.1.1", 8080), Endpoint("10.1.1.2", 8081))

    def test_secret_data_and_string_data(self) -> None:
        c = load("""\
        apiVersion: v1
        kind: Secret
        metadata: {name: s, namespace: ns1}
        data: {a: aGVsbG8=, empty: ""}
        stringData: {b: "héllo"}
        """)
        s = c.secrets[("ns1", "s")]
        assert s.type == "Opaque"
        assert dict(s.data) == {"a": b"hello", "empty": b"", "b": "héllo".encode()}

    def test_load_directory_reads_yaml_and_yml_only(self, tmp_path) -> None:
        (tmp_path / "a.yaml").write_text(SERVICE_AND_ENDPOINTS)
        (tmp_path / "b.yml").write_text(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {k: v}\n")
        (tmp_path / "c.txt").write_text("not: [valid")
        (tmp_path / ".hidden.yaml").write_text("not: [valid")
        c = load_directory(str(tmp_path))
        assert ("default", "s") in c.secrets and ("shop", "shop-petstore-8080") in c.upstreams
        assert c.directory == str(tmp_path)

    def test_empty_documents_are_skipped(self) -> None:
        c = load("---\n---\n# only a comment\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
        assert list(c.secrets) == [("default", "s")]

    @pytest.mark.parametrize("text, resource, field, reason, line", ERROR_CASES)
    def test_error_is_located(self, text: str, resource: str, field: str, reason: str, line: int) -> None:
        issue = one_issue(text)
        assert issue.file == "cfg.yaml"
        assert issue.field == field
        assert reason in issue.reason
        assert issue.line == line
        assert issue.resource == resource
        assert issue.document == 0
        # and all of it appears in the message a person reads
        text_form = str(issue)
        for part in ("cfg.yaml", "document 1", f"line {line}", field, reason) + ((resource,) if resource else ()):
            assert part in text_form

    def test_duplicate_domain_across_virtual_services(self) -> None:
        def vs(name: str, domains: str) -> str:
            return (VS_HEAD.replace("name: v", f"name: {name}") + f"    domains: [{domains}]\n"
                    "    routes: [{directResponseAction: {status: 200}}]\n")

        issues = issues_of(vs("a", "api.example.com, a.example.com") + "---\n"
                           + vs("b", "API.example.com:80, b.example.com"))
        assert len(issues) == 1
        (issue,) = issues
        assert issue.resource == "VirtualService default/b"
        assert issue.document == 1
        assert issue.field == "spec.virtualHost.domains[0]"
        assert issue.reason == "domain 'api.example.com' is already served by VirtualService default/a"

    def test_same_domain_twice_in_one_virtual_service(self) -> None:
        issue = one_issue(VS_HEAD + "    domains: [a.com, A.com]\n    routes: []\n")
        assert issue.field == "spec.virtualHost.domains[1]" and "listed twice" in issue.reason

    def test_invalid_yaml_reports_file_and_line(self) -> None:
        issue = one_issue("apiVersion: v1\nkind: Secret\nmetadata: {name: s\nstringData: {}\n")
        assert issue.file == "cfg.yaml"
        assert issue.reason.startswith("invalid YAML:")
        assert issue.line == 4

    def test_duplicate_keys_are_an_error(self) -> None:
        issue = one_issue("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nkind: Secret\n")
        assert issue.reason == "invalid YAML: duplicate key 'kind'"
        assert issue.line == 4

    def test_duplicate_nested_keys_are_an_error(self) -> None:
        issue = one_issue(VS_HEAD + "    routes: []\n    routes: []\n")
        assert "duplicate key 'routes'" in issue.reason and issue.line == 7

    def test_duplicate_resource(self) -> None:
        text = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"
        issue = one_issue(text + "---\n" + text)
        assert issue.document == 1
        assert issue.field == "metadata.name"
        assert "duplicate resource: also defined at cfg.yaml: document 1" in issue.reason

    def test_every_problem_is_reported_at_once(self) -> None:
        issues = issues_of(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nbogus: 1\n---\n"
            "apiVersion: v1\nkind: Secret\nmetadata: {name: t}\ndata: {k: 5}\n---\n"
            + VS_HEAD + "    routes: [{routeAction: {single: {upstream: {name: zz}}}}]\n")
        assert [(i.document, i.field) for i in issues] == [
            (0, "bogus"), (1, "data.k"), (2, "spec.virtualHost.routes[0].routeAction.single.upstream")]

    def test_errors_name_the_file_in_a_directory(self, tmp_path) -> None:
        (tmp_path / "good.yaml").write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
        (tmp_path / "bad.yaml").write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: t}\n---\n"
                                           "apiVersion: v1\nkind: Secret\nmetadata: {name: u}\ntype: 5\n")
        with pytest.raises(ConfigError) as info:
            load_directory(str(tmp_path))
        (issue,) = info.value.issues
        assert issue.file == os.path.join(str(tmp_path), "bad.yaml")
        assert (issue.document, issue.line, issue.field) == (1, 8, "type")
        assert "must be a string, got an integer" in issue.reason

    def test_missing_directory_is_an_error(self, tmp_path) -> None:
        with pytest.raises(ConfigError) as info:
            load_directory(str(tmp_path / "nope"))
        assert "cannot read the configuration directory" in info.value.issues[0].reason

    def test_non_utf8_file_is_an_error(self, tmp_path) -> None:
        (tmp_path / "a.yaml").write_bytes(b"apiVersion: v1\nkind: Secret\nmetadata: {name: \xff}\n")
        with pytest.raises(ConfigError) as info:
            load_directory(str(tmp_path))
        assert "cannot read file" in info.value.issues[0].reason

    def test_yaml_tags_that_build_objects_are_refused(self) -> None:
        issue = one_issue("!!python/object/apply:os.system ['true']\n")
        assert issue.reason.startswith("invalid YAML:")

    def test_top_level_list_is_refused(self) -> None:
        issue = one_issue("- a\n- b\n")
        assert issue.reason == "a resource must be a mapping, got a list"

    @pytest.mark.parametrize("options, field, reason", [
        ("{timeout: 2s}", "spec.virtualHost.options.timeout", "is a route option"),
        ("{prefixRewrite: /v2}", "spec.virtualHost.options.prefixRewrite", "is a route option"),
    ])
    def test_route_only_options_are_refused_on_a_virtual_host(self, options, field, reason):
        issue = one_issue(VS_HEAD + f"    options: {options}\n    routes: []\n")
        assert issue.field == field and reason in issue.reason

    def test_a_zero_timeout_is_refused(self):
        issue = one_issue(VS_HEAD + "    routes:\n    - directResponseAction: {status: 200}\n"
                          "      options: {timeout: 0s}\n")
        assert issue.field == "spec.virtualHost.routes[0].options.timeout"
        assert "above zero" in issue.reason
