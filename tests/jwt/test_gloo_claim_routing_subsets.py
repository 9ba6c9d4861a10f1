"""Gloo Edge's JWT claim-routing guide as it is written: two Deployments
labelled ``stage: primary`` / ``stage: canary`` behind one Service, an
Upstream with ``kube.subsetSpec`` on ``stage``, and routes that pick
``subset: {values: {stage: canary}}`` after the JWT provider copied the
``org`` claim into a header. The cluster's Pods and Endpoints are in the
directory (as ``kubectl get -o yaml`` writes them), pointing at two real
loopback backends, and traffic goes through the real gateway."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest_twisted
from support.http import http_request
from jwt_helpers import ClockedJwtPlugin, claim_routing_virtual_service, token

from twistgw.config.loader import load_text

PLUGINS = [("jwt", ClockedJwtPlugin)]
ISSUER = "solo.io"


def deployment(stage: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: {stage}
          labels: {{app: echoapp, stage: {stage}}}
        spec:
          replicas: 1
          selector:
            matchLabels: {{app: echoapp, stage: {stage}}}
          template:
            metadata:
              labels: {{app: echoapp, stage: {stage}}}
            spec:
              containers:
              - name: {stage}
                image: hashicorp/http-echo
                args: [-listen=:8080, -text={stage}]
        ---
        """)


def manifests() -> str:
    """What the user applies: Deployments, the Service, the Upstream with
    its subsetSpec and the VirtualService (no Pods or Endpoints: those are
    the cluster's)."""
    return deployment("primary") + deployment("canary") + textwrap.dedent("""\
        apiVersion: v1
        kind: Service
        metadata:
          name: echoapp
          labels: {app: echoapp}
        spec:
          ports:
          - port: 8080
            protocol: TCP
            targetPort: 8080
          selector: {app: echoapp}
        ---
        apiVersion: gloo.solo.io/v1
        kind: Upstream
        metadata:
          name: echoapp
          namespace: gloo-system
        spec:
          kube:
            selector: {app: echoapp}
            serviceName: echoapp
            serviceNamespace: default
            servicePort: 8080
            subsetSpec:
              selectors:
              - keys: [stage]
        ---
        """) + claim_routing_virtual_service("echoapp") + textwrap.indent(textwrap.dedent("""\
        routes:
        - matchers:
          - headers:
            - name: x-company
              value: solo.io
            prefix: /
          routeAction:
            single:
              upstream: {name: echoapp, namespace: gloo-system}
              subset:
                values: {stage: canary}
        - matchers:
          - prefix: /
          routeAction:
            single:
              upstream: {name: echoapp, namespace: gloo-system}
              subset:
                values: {stage: primary}
        """), " " * 4)


def cluster(primary: int, canary: int) -> str:
    """The cluster's side: one Pod per Deployment and the Service's
    Endpoints, whose addresses name their Pods (targetRef); both pods are
    on loopback, each on its own port (so two Endpoints subsets)."""
    pods = "".join(textwrap.dedent(f"""\
        ---
        apiVersion: v1
        kind: Pod
        metadata:
          name: {stage}-5d4f8c7b9-x2x{n}
          labels: {{app: echoapp, stage: {stage}, pod-template-hash: 5d4f8c7b9}}
        spec:
          containers:
          - name: {stage}
            image: hashicorp/http-echo
        status:
          phase: Running
          podIP: 127.0.0.1
        """) for n, stage in enumerate(("primary", "canary")))
    subsets = "".join(textwrap.indent(textwrap.dedent(f"""\
        - addresses:
          - ip: 127.0.0.1
            targetRef: {{kind: Pod, name: {stage}-5d4f8c7b9-x2x{n}, namespace: default}}
          ports:
          - port: {port}
            protocol: TCP
        """), "") for n, (stage, port) in enumerate((("primary", primary), ("canary", canary))))
    return pods + "---\napiVersion: v1\nkind: Endpoints\nmetadata: {name: echoapp}\nsubsets:\n" + subsets


@pytest_twisted.ensureDeferred
async def test_employees_reach_the_canary_and_everyone_else_the_primary(backend_factory, config_dir, gateway):
    primary, canary = backend_factory("primary"), backend_factory("canary")
    directory = config_dir(manifests(), name="app.yaml")
    config_dir(cluster(primary.port, canary.port), name="cluster.yaml", directory=directory)
    gw = gateway(directory, plugins=PLUGINS)
    solo = token(iss=ISSUER, sub="1234567890", org="solo.io")
    other = token(iss=ISSUER, sub="0987654321", org="othercompany.com")

    for _ in range(3):  # every time, not round robin over both pods
        r = await http_request("GET", gw.url(f"/?token={solo}"))
        assert r.status == 200 and json.loads(r.body)["server"] == "canary"
    assert len(canary.requests) == 3 and primary.requests == []
    for _ in range(3):
        r = await http_request("GET", gw.url("/"), headers={"x-token": other})
        assert r.status == 200 and json.loads(r.body)["server"] == "primary"
    assert len(primary.requests) == 3 and len(canary.requests) == 3

    # the claim routes, not a header the client sends
    r = await http_request("GET", gw.url(f"/?token={other}"), headers={"x-company": "solo.io"})
    assert json.loads(r.body)["server"] == "primary"
    r = await http_request("GET", gw.url("/"), headers={"x-company": "solo.io"})
    assert (r.status, r.body) == (401, b"Jwt is missing")
    assert len(canary.requests) == 3


@pytest_twisted.ensureDeferred
async def test_no_canary_pod_falls_back_as_gloo_does_or_answers_503(backend_factory, config_dir, gateway):
    """Gloo's default fallback (ANY_ENDPOINT) sends an employee to the
    primary while no canary pod runs; with ``fallbackPolicy: NO_FALLBACK``
    the answer is Envoy's ``503 no healthy upstream``."""
    primary = backend_factory("primary")
    only_primary = cluster(primary.port, 1).split("- addresses:")
    text = only_primary[0] + "- addresses:" + only_primary[1]  # the canary's endpoint is gone
    directory = config_dir(manifests(), name="app.yaml")
    config_dir(text, name="cluster.yaml", directory=directory)
    gw = gateway(directory, plugins=PLUGINS)
    solo = token(iss=ISSUER, org="solo.io")
    r = await http_request("GET", gw.url(f"/?token={solo}"))
    assert r.status == 200 and json.loads(r.body)["server"] == "primary"

    strict = manifests().replace("- keys: [stage]", "- keys: [stage]\n      fallbackPolicy: NO_FALLBACK")
    assert strict != manifests()
    directory = config_dir(strict, name="app.yaml")
    config_dir(text, name="cluster.yaml", directory=directory)
    gw = gateway(directory, plugins=PLUGINS)
    r = await http_request("GET", gw.url(f"/?token={solo}"))
    assert (r.status, r.body) == (503, b"no healthy upstream")
    r = await http_request("GET", gw.url("/?token=" + token(iss=ISSUER, org="othercompany.com")))
    assert r.status == 200 and len(primary.requests) == 2


def test_the_guides_manifests_alone_load_with_no_endpoints():
    """Without the cluster's Pods and Endpoints (they live in the cluster),
    the guide's manifests load: the Deployments are skipped, the Upstream's
    subsets are valid, and the Service simply has no endpoints yet."""
    config = load_text(manifests())
    assert [s.split(": skipped ")[1] for s in config.skipped] == [
        "Deployment (apps/v1): not an API group twistgw serves"] * 2
    assert config.upstreams[("gloo-system", "echoapp")].endpoints == ()
    assert config.select(("gloo-system", "echoapp"), (("stage", "canary"),)).endpoints == ()


def test_check_and_explain_show_the_subset(tmp_path):
    (tmp_path / "app.yaml").write_text(manifests())
    (tmp_path / "cluster.yaml").write_text(cluster(18080, 18081))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "twistgw", *args], capture_output=True, text=True)

    assert run("check", str(tmp_path)).returncode == 0
    out = run("explain", str(tmp_path), "GET", "http://h/?token=" + token(iss=ISSUER, org="solo.io")).stdout
    assert "Result: forwarded to upstream gloo-system/echoapp, subset {stage: canary} (127.0.0.1:18081)" in out, out

    (tmp_path / "app.yaml").write_text(manifests().replace("values: {stage: canary}", "values: {version: v2}"))
    out = run("check", str(tmp_path))
    assert out.returncode != 0
    assert "app.yaml" in out.stdout and "routes[0].routeAction.single.subset.values" in out.stdout, out.stdout
    assert "keys [version] are not one of Upstream gloo-system/echoapp's selectors ([stage])" in out.stdout
