"""Upstream subsets as Gloo writes them: an Upstream's ``kube.subsetSpec``
(selectors by key), a route's ``single.subset.values``, and which endpoints
are in a subset — the labels of each endpoint's Pod (its ``targetRef``, or
the Pod with its IP). Gloo's rule that a route's keys are one of the
Upstream's selectors; Envoy's fallback policies when a subset is empty."""

from __future__ import annotations

import textwrap

import pytest

from twistgw.api.types import Endpoint
from twistgw.config.loader import ConfigError, load_text
from twistgw.config.model import SubsetSpec, UpstreamRef
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot

CLUSTER = """\
apiVersion: v1
kind: Service
metadata: {name: echoapp}
spec:
  selector: {app: echoapp}
  ports: [{name: http, port: 8080, targetPort: 8080}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: echoapp}
subsets:
- addresses:
  - {ip: 10.0.0.1, targetRef: {kind: Pod, name: primary-1}}
  - {ip: 10.0.0.2}
  - {ip: 10.0.0.3, targetRef: {kind: Pod, name: gone}}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: primary-1, labels: {app: echoapp, stage: primary}}
spec: {containers: [{name: echo, image: hashicorp/http-echo}]}
status: {phase: Running, podIP: 10.9.9.9}
---
apiVersion: v1
kind: Pod
metadata: {name: canary-1, labels: {app: echoapp, stage: canary}}
spec: {containers: [{name: echo, image: hashicorp/http-echo}]}
status: {podIP: 10.0.0.2}
"""


def upstream(subset_spec: str = "subsetSpec: {selectors: [{keys: [stage]}]}") -> str:
    return textwrap.dedent("""\
        ---
        apiVersion: gloo.solo.io/v1
        kind: Upstream
        metadata: {name: echo}
        spec:
          kube:
            serviceName: echoapp
            servicePort: 8080
        """) + ("    " + subset_spec + "\n" if subset_spec else "")


def vs(*singles: str) -> str:
    routes = "".join(f"    - matchers: [{{prefix: /r{i}}}]\n      routeAction: {{single: {s}}}\n"
                     for i, s in enumerate(singles))
    return ("---\napiVersion: gateway.solo.io/v1\nkind: VirtualService\nmetadata: {name: v}\nspec:\n"
            "  virtualHost:\n    domains: ['*']\n    routes:\n" + routes)


def issues(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        build_snapshot(load_text(text), PluginHost.create())
    return [(i.field, i.reason) for i in info.value.issues]


def test_route_subset_and_subset_spec_are_read():
    config = load_text(CLUSTER + upstream() + vs("{upstream: {name: echo}, subset: {values: {stage: canary}}}"))
    (route,) = config.virtual_services[0].routes
    assert route.action == UpstreamRef("echo", "default", (("stage", "canary"),))
    assert config.subset_specs[("default", "echo")] == SubsetSpec((frozenset({"stage"}),), "ANY_ENDPOINT", ())


def test_endpoints_take_their_pods_labels_by_target_ref_then_by_ip():
    config = load_text(CLUSTER + upstream())
    key = ("default", "echo")
    # 10.0.0.1 is primary-1 by targetRef (its podIP is not consulted);
    # 10.0.0.2 is canary-1 by podIP; 10.0.0.3 names a Pod that is not here
    assert config.endpoint_labels[key] == ({"app": "echoapp", "stage": "primary"},
                                          {"app": "echoapp", "stage": "canary"}, {})
    assert config.select(key, (("stage", "canary"),)).endpoints == (Endpoint("10.0.0.2", 8080),)
    assert config.select(key, (("stage", "primary"),)).endpoints == (Endpoint("10.0.0.1", 8080),)
    # a missing label is "" (as Gloo gives endpoints the selector's keys)
    assert config.select(key, (("stage", ""),)).endpoints == (Endpoint("10.0.0.3", 8080),)


@pytest.mark.parametrize("policy, canary, nothing_chosen", [
    ("", ("10.0.0.1", "10.0.0.2", "10.0.0.3"), ("10.0.0.1", "10.0.0.2", "10.0.0.3")),  # ANY_ENDPOINT
    ("fallbackPolicy: ANY_ENDPOINT", ("10.0.0.1", "10.0.0.2", "10.0.0.3"), ("10.0.0.1", "10.0.0.2", "10.0.0.3")),
    ("fallbackPolicy: NO_FALLBACK", (), ()),
    ("{fallbackPolicy: DEFAULT_SUBSET, defaultSubset: {values: {stage: primary}}}", ("10.0.0.1",), ("10.0.0.1",)),
])
def test_fallback_when_the_subset_is_empty_or_none_is_chosen(policy, canary, nothing_chosen):
    text = CLUSTER.replace("{ip: 10.0.0.2}", "{ip: 10.0.0.2, targetRef: {kind: Pod, name: gone}}")
    if policy.startswith("{"):
        spec = "subsetSpec: {selectors: [{keys: [stage]}], " + policy[1:]
    else:
        spec = "subsetSpec: {selectors: [{keys: [stage]}]" + (", " + policy if policy else "") + "}"
    config = load_text(text + upstream(spec))
    key = ("default", "echo")
    assert tuple(e.host for e in config.select(key, (("stage", "canary"),)).endpoints) == canary
    assert tuple(e.host for e in config.select(key, ()).endpoints) == nothing_chosen


@pytest.mark.parametrize("single, field, reason", [
    ("{upstream: {name: echo}, subset: {values: {version: v2}}}", "routes[0].routeAction.single.subset.values",
     "none of the subsets in the upstream match it (Gloo's rule): keys [version] are not one of"
     " Upstream default/echo's selectors ([stage])"),
    ("{upstream: {name: echo}, subset: {values: {stage: canary, version: v2}}}",
     "routes[0].routeAction.single.subset.values", "keys [stage, version] are not one of"),
    ("{upstream: {name: default-echoapp-8080}, subset: {values: {stage: canary}}}",
     "routes[0].routeAction.single.subset.values",
     "route has a subset config, but the upstream does not (Gloo's rule): Upstream default/default-echoapp-8080"
     " declares no kube.subsetSpec"),
    ("{kube: {ref: {name: echoapp}, port: 8080}, subset: {values: {stage: canary}}}",
     "routes[0].routeAction.single.subset", "route has a subset config, but the upstream does not"),
    ("{upstream: {name: echo}, subset: {}}", "routes[0].routeAction.single.subset.values", "is required"),
    ("{upstream: {name: echo}, subset: {values: {stage: 1}}}", "routes[0].routeAction.single.subset.values.stage",
     "must be a string"),
])
def test_route_subset_errors(single, field, reason):
    found = issues(CLUSTER + upstream() + vs(single))
    assert [f for f, _ in found] == ["spec.virtualHost." + field], found
    assert reason in found[0][1]


def test_subset_on_a_static_upstream_is_refused():
    text = ("apiVersion: gloo.solo.io/v1\nkind: Upstream\nmetadata: {name: s}\n"
            "spec: {static: {hosts: [{addr: 127.0.0.1, port: 1}]}}\n"
            + vs("{upstream: {name: s}, subset: {values: {stage: canary}}}"))
    assert issues(text) == [("spec.virtualHost.routes[0].routeAction.single.subset.values",
                             "route has a subset config, but the upstream does not (Gloo's rule):"
                             " Upstream default/s declares no kube.subsetSpec")]


@pytest.mark.parametrize("spec, field, reason", [
    ("subsetSpec: {}", "spec.kube.subsetSpec.selectors", "is required"),
    ("subsetSpec: {selectors: []}", "spec.kube.subsetSpec.selectors", "must not be empty"),
    ("subsetSpec: {selectors: [{}]}", "spec.kube.subsetSpec.selectors[0].keys", "is required"),
    ("subsetSpec: {selectors: [{keys: []}]}", "spec.kube.subsetSpec.selectors[0].keys", "must not be empty"),
    ("subsetSpec: {selectors: [{keys: [a, a]}]}", "spec.kube.subsetSpec.selectors[0].keys", "repeats a key"),
    ("subsetSpec: {selectors: [{keys: [a, b]}, {keys: [b, a]}]}", "spec.kube.subsetSpec.selectors[1].keys",
     "the same keys as an earlier selector"),
    ("subsetSpec: {selectors: [{keys: [a], singleHostPerSubset: true}]}",
     "spec.kube.subsetSpec.selectors[0].singleHostPerSubset", "is not supported by twistgw"),
    ("subsetSpec: {selectors: [{keys: [a], keyz: [b]}]}", "spec.kube.subsetSpec.selectors[0].keyz", "unknown field"),
    ("subsetSpec: {selectors: [{keys: [a]}], fallbackPolicy: ANY}", "spec.kube.subsetSpec.fallbackPolicy",
     "unknown fallback policy 'ANY' (expected one of: ANY_ENDPOINT, NO_FALLBACK, DEFAULT_SUBSET)"),
    ("subsetSpec: {selectors: [{keys: [a]}], fallbackPolicy: DEFAULT_SUBSET}",
     "spec.kube.subsetSpec.fallbackPolicy", "DEFAULT_SUBSET needs defaultSubset"),
    ("subsetSpec: {selectors: [{keys: [a]}], defaultSubset: {values: {a: b}}}",
     "spec.kube.subsetSpec.defaultSubset", "is used only with fallbackPolicy: DEFAULT_SUBSET"),
])
def test_subset_spec_errors(spec, field, reason):
    found = issues(CLUSTER + upstream(spec))
    assert [f for f, _ in found] == [field], found
    assert reason in found[0][1]


def test_singlehost_false_is_the_default_and_accepted():
    config = load_text(CLUSTER + upstream("subsetSpec: {selectors: [{keys: [stage], singleHostPerSubset: false}]}"))
    assert config.subset_specs[("default", "echo")].selectors == (frozenset({"stage"}),)


def test_every_subset_problem_is_reported_at_once():
    spec = "subsetSpec: {selectors: [{keys: []}, {keys: [a], singleHostPerSubset: true}], fallbackPolicy: X}"
    fields = [f for f, _ in issues(CLUSTER + upstream(spec))]
    assert fields == ["spec.kube.subsetSpec.selectors[0].keys",
                      "spec.kube.subsetSpec.selectors[1].singleHostPerSubset",
                      "spec.kube.subsetSpec.fallbackPolicy"]


def test_a_pod_is_read_for_labels_and_ip_only():
    config = load_text(CLUSTER)
    pod = config.pods[("default", "canary-1")]
    assert (pod.labels, pod.ip) == ({"app": "echoapp", "stage": "canary"}, "10.0.0.2")
    found = issues("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nstatus: {podIP: 5}\n")
    assert found == [("status.podIP", "must be a string, got an integer")]


def test_an_empty_subset_without_fallback_answers_503_no_healthy_upstream(tmp_path):
    import subprocess
    import sys
    (tmp_path / "c.yaml").write_text(
        CLUSTER + upstream("subsetSpec: {selectors: [{keys: [stage]}], fallbackPolicy: NO_FALLBACK}")
        + vs("{upstream: {name: echo}, subset: {values: {stage: blue}}}",
             "{upstream: {name: echo}, subset: {values: {stage: canary}}}"))
    out = subprocess.run([sys.executable, "-m", "twistgw", "explain", str(tmp_path), "GET", "http://x/r0"],
                         capture_output=True, text=True)
    assert "Result: 503, refused by routing (subset {stage: blue} of upstream default/echo has no endpoints)" \
        in out.stdout, out
    out = subprocess.run([sys.executable, "-m", "twistgw", "explain", str(tmp_path), "GET", "http://x/r1"],
                         capture_output=True, text=True)
    assert "Result: forwarded to upstream default/echo, subset {stage: canary} (10.0.0.2:8080)" in out.stdout, out
