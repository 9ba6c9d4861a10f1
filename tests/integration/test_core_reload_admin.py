"""Live reload (good and bad edits) and the admin endpoint."""

from __future__ import annotations

import os
from typing import Any

import pytest
import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families
from twisted.logger import globalLogPublisher

from twistgw import sdk
from support.http import http_request, static_upstream_yaml, wait_for

VS = """\
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {{name: v}}
spec:
  virtualHost:
    domains: ["*"]
    options: {{gate: {{mode: {mode}}}}}
    routes:
    - name: {name}
      matchers: [{{prefix: /{name}}}]
      directResponseAction: {{status: 200, body: {name}}}
    - name: proxied
      matchers: [{{prefix: /}}]
      routeAction: {{single: {{upstream: {{name: backend}}}}}}
      options: {{gate: {{disable: true}}}}
"""


class Gate:
    """``gate: {mode: open|closed}``; anything else is an OptionsError."""

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Any, scope: Any) -> Any:
        if options.get("mode") not in ("open", "closed"):
            raise sdk.OptionsError("mode", "must be open or closed")
        return options["mode"]

    @sdk.hookimpl
    def twistgw_authenticate(self, ctx: Any, options: Any) -> Any:
        return sdk.Allow() if options == "open" else sdk.Deny(401, b"closed")


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


async def admin(gw: Any, path: str) -> Any:
    return await http_request("GET", gw.admin_url(path))


class Captured:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def __call__(self, event: dict) -> None:
        self.events.append(event)

    def __enter__(self) -> "Captured":
        globalLogPublisher.addObserver(self)
        return self

    def __exit__(self, *a: Any) -> None:
        globalLogPublisher.removeObserver(self)


@pytest.fixture
def setup(backend: Any, config_dir: Any, gateway: Any) -> Any:
    d = config_dir(static_upstream_yaml("backend", [backend.port]), name="upstream.yaml")
    config_dir(VS.format(name="old", mode="closed"), name="vs.yaml", directory=d)
    gw = gateway(d, plugins=[("gate", Gate())], poll_interval=0.05)
    return gw, d


@pytest_twisted.ensureDeferred
async def test_edit_applies_live(setup: Any, config_dir: Any) -> None:
    gw, d = setup
    assert (await http_request("GET", gw.url("/old"))).status == 401
    config_dir(VS.format(name="new", mode="open"), name="vs.yaml", directory=d)

    await wait_for(lambda: gw.service.generation == 2, timeout=3)
    r = await http_request("GET", gw.url("/new"))
    assert (r.status, r.body) == (200, b"new")
    assert (await http_request("GET", gw.url("/old"))).status == 200  # now the proxied route
    assert gw.service.generation == 2


@pytest.mark.parametrize("bad, field", [
    ("not: [valid", None),
    (VS.format(name="new", mode="open").replace("routes:", "routez:"), "spec.virtualHost.routez"),
    (VS.format(name="new", mode="wide-open"), "spec.virtualHost.options.gate.mode"),
    (VS.format(name="new", mode="open").replace("name: backend", "name: gone"),
     "spec.virtualHost.routes[1].routeAction.single.upstream"),
])
@pytest_twisted.ensureDeferred
async def test_invalid_edit_rejected_and_last_good_keeps_serving(setup: Any, config_dir: Any, bad: str,
                                                                 field: str | None) -> None:
    gw, d = setup
    before = (await admin(gw, "/metrics")).body.decode()
    failures_before = metric(before, "twistgw_config_reloads_total", result="failure")
    with Captured() as log:
        config_dir(bad, name="vs.yaml", directory=d)
        await wait_for(lambda: gw.service.last_error is not None, timeout=3)
    # still the old configuration, and still protected: never fail open
    r = await http_request("GET", gw.url("/old"))
    assert (r.status, r.body) == (401, b"closed")
    assert (await http_request("GET", gw.url("/new"))).status == 200  # proxied, not "new"
    assert (await http_request("GET", gw.url("/new"))).body != b"new"
    assert gw.service.generation == 1
    # counted, logged with file and field, and still ready
    after = (await admin(gw, "/metrics")).body.decode()
    assert metric(after, "twistgw_config_reloads_total", result="failure") == failures_before + 1
    ready = await admin(gw, "/readyz")
    assert ready.status == 200
    assert ready.body.startswith(b"ready: configuration generation 1\nlast change rejected: ")
    errors = [e for e in log.events if "Configuration change rejected" in e.get("log_format", "")]
    assert len(errors) == 1
    problems = errors[0]["problems"]
    assert os.path.join(d, "vs.yaml") in problems
    if field is not None:
        assert field in problems
    # a later good edit is accepted again
    config_dir(VS.format(name="fixed", mode="open"), name="vs.yaml", directory=d)
    await wait_for(lambda: gw.service.generation == 2, timeout=3)
    assert (await http_request("GET", gw.url("/fixed"))).body == b"fixed"
    assert gw.service.last_error is None


@pytest_twisted.ensureDeferred
async def test_unchanged_directory_is_not_reloaded(setup: Any) -> None:
    gw, d = setup
    from support.http import sleep

    await sleep(0.3)
    assert gw.service.generation == 1


@pytest_twisted.ensureDeferred
async def test_reload_now(backend: Any, config_dir: Any, gateway: Any) -> None:
    d = config_dir(static_upstream_yaml("backend", [backend.port]), name="upstream.yaml")
    config_dir(VS.format(name="old", mode="open"), name="vs.yaml", directory=d)
    gw = gateway(d, plugins=[("gate", Gate())])  # no polling
    config_dir(VS.format(name="new", mode="open"), name="vs.yaml", directory=d)
    assert (await http_request("GET", gw.url("/new"))).body != b"new"
    assert gw.reload() is True
    assert (await http_request("GET", gw.url("/new"))).body == b"new"
    os.remove(os.path.join(d, "upstream.yaml"))
    assert gw.reload() is False  # the route's upstream is gone: rejected whole
    assert (await http_request("GET", gw.url("/x"))).status == 200


# ---------------------------------------------------------------------------
# Admin
# ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_admin_endpoints(setup: Any) -> None:
    gw, d = setup
    h = await admin(gw, "/healthz")
    assert (h.status, h.body) == (200, b"ok\n")
    r = await admin(gw, "/readyz")
    assert (r.status, r.body) == (200, b"ready: configuration generation 1\n")
    nope = await admin(gw, "/nope")
    assert (nope.status, nope.body) == (404, b"not found; try /healthz /readyz /metrics\n")

    before = (await admin(gw, "/metrics")).body.decode()
    await http_request("GET", gw.url("/old"))  # denied by gate
    await http_request("GET", gw.url("/x"))  # proxied
    await http_request("GET", gw.url("/x"))
    m = await admin(gw, "/metrics")
    assert m.status == 200 and m.header("content-type").startswith("text/plain; version=")
    after = m.body.decode()

    def delta(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert delta("twistgw_requests_total", virtual_service="default/v", route="old", status="401",
                 decision="denied") == 1
    assert delta("twistgw_requests_total", virtual_service="default/v", route="proxied", status="200",
                 decision="allowed") == 2
    assert delta("twistgw_upstream_duration_seconds_count", virtual_service="default/v", route="proxied") == 2
    assert delta("twistgw_request_duration_seconds_count", virtual_service="default/v", route="old") == 1
    assert metric(after, "twistgw_config_reloads_total", result="success") >= 1
    assert "twistgw_config_generation" in after
    assert "twistgw_config_last_success_timestamp_seconds" in after


@pytest_twisted.ensureDeferred
async def test_readyz_unready_while_draining(setup: Any) -> None:
    gw, d = setup
    gw.service.gateway.draining = True
    r = await admin(gw, "/readyz")
    assert (r.status, r.body) == (503, b"draining\n")
    assert (await admin(gw, "/healthz")).status == 200
