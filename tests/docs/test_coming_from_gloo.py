"""docs/configuration.md "Coming from Gloo Edge": every Gloo field twistgw
does not implement is listed there, and each is refused with its own
message when the configuration loads (never accepted and ignored)."""

from __future__ import annotations

import pathlib
import re

import pytest

from twistgw.config.loader import GLOO_UNSUPPORTED, ConfigError, load_text
from twistgw.config.routeoptions import UNSUPPORTED_OPTIONS

ROOT = pathlib.Path(__file__).resolve().parents[2]
SECTION = (ROOT / "docs" / "configuration.md").read_text().split("## Coming from Gloo Edge", 1)[1]

VS = """\
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: v}}
spec:
  {spec}
  virtualHost:
    routes:
    - matchers: [{{prefix: /}}]
      {route}
      routeAction:
        {route_action}
        single:
          {single}
          upstream: {{name: u}}
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: u}}
spec:
  {upstream}
  static: {{hosts: [{{addr: 127.0.0.1, port: 1}}]}}
"""

WHERE = {"spec": "spec", "route": "route", "routeAction": "route_action", "single": "single",
         "upstreamSpec": "upstream"}


def _cases():
    for where, fields in GLOO_UNSUPPORTED.items():
        for field in fields:
            yield pytest.param(where, field, id=f"{where}.{field}")


@pytest.mark.parametrize("where, field", list(_cases()))
def test_each_unsupported_gloo_field_is_documented_and_refused(where, field):
    assert re.search(rf"`{field}`", SECTION), f"{field} is missing from 'Coming from Gloo Edge'"
    slots = {v: "" for v in WHERE.values()}
    slots[WHERE[where]] = f"{field}: {{}}"
    with pytest.raises(ConfigError) as info:
        load_text(VS.format(**slots), "gloo.yaml")
    mine = [i for i in info.value.issues if i.field.endswith("." + field) or i.field == field]
    assert mine, info.value.issues
    assert mine[0].reason.startswith("is not supported by twistgw: "), mine[0]
    assert len(mine[0].reason) > len("is not supported by twistgw: ") + 10


@pytest.mark.parametrize("api, kind", [
    ("gateway.solo.io/v1", "MatchableHttpGateway"), ("gateway.solo.io/v1", "MatchableTcpGateway"),
    ("gloo.solo.io/v1", "Proxy"), ("gateway.solo.io/v1", "HttpListenerOption"),
    ("gateway.solo.io/v1", "ListenerOption"),
])
def test_gloo_kinds_twistgw_does_not_read_are_refused(api, kind):
    assert f"`{kind}`" in SECTION
    with pytest.raises(ConfigError) as info:
        load_text(f"apiVersion: {api}\nkind: {kind}\nmetadata: {{name: x}}\nspec: {{}}\n")
    (issue,) = info.value.issues
    assert issue.field in ("kind", "apiVersion")
    assert issue.reason.startswith(f"Gloo's {kind} is not supported by twistgw: "), issue


OPTIONS_VS = """\
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: v}}
spec:
  virtualHost:
    routes:
    - matchers: [{{prefix: /}}]
      options: {{{key}: {{}}}}
      directResponseAction: {{status: 200}}
"""


@pytest.mark.parametrize("key", sorted(UNSUPPORTED_OPTIONS))
def test_each_unsupported_gloo_option_is_documented_and_refused(key):
    assert re.search(rf"`{key}`", SECTION), f"{key} is missing from 'Coming from Gloo Edge'"
    with pytest.raises(ConfigError) as info:
        load_text(OPTIONS_VS.format(key=key), "gloo.yaml")
    (issue,) = info.value.issues
    assert issue.field == f"spec.virtualHost.routes[0].options.{key}"
    assert issue.reason.startswith("is not supported by twistgw: "), issue


def test_a_virtual_service_without_routes_is_noted_by_check(tmp_path):
    import subprocess
    import sys

    (tmp_path / "vs.yaml").write_text("apiVersion: gateway.solo.io/v1\nkind: VirtualService\n"
                                      "metadata: {name: partial}\nspec: {virtualHost: {domains: [a.example]}}\n")
    out = subprocess.run([sys.executable, "-m", "twistgw", "check", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "note: VirtualService default/partial has no routes: it serves nothing" in out.stderr
