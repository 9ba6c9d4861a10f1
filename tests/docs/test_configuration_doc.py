"""docs/configuration.md: its YAML examples, taken together, are a valid
configuration, and its error line is what the loader prints."""

from __future__ import annotations

import pathlib
import re

from twistgw.config.loader import ConfigError, load_text
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "configuration.md").read_text()


def test_examples_form_a_valid_configuration():
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", DOC, re.S) if "kind:" in b and "apiVersion: <" not in b]
    assert len(blocks) >= 5
    config = load_text("---\n".join(blocks), "configuration.md")
    snapshot = build_snapshot(config, PluginHost.create())
    kinds = {"vs": len(config.virtual_services), "secrets": len(config.secrets)}
    assert kinds == {"vs": 1, "secrets": 1}
    assert ("default", "default-petstore-8080") in config.upstreams  # discovery, as documented
    ups = config.upstreams[("default", "default-petstore-8080")]
    assert [(e.host, e.port) for e in ups.endpoints] == [("10.1.0.7", 80), ("10.1.0.8", 80)]
    assert len(snapshot.routes) == 2


def test_documented_error_line_is_real():
    documented = re.search(r"```\n(etc/gateway.yaml: document 1, line 14: .*?)\n```", DOC).group(1)
    bad = "\n" * 0 + "".join(f"# filler {i}\n" for i in range(7)) + (
        "apiVersion: gateway.vendor.io/v1\nkind: VirtualService\nmetadata: {name: demo}\n"
        "spec:\n  virtualHost:\n    routes:\n    - matchers: [{prefix: api}]\n"
        "      directResponseAction: {status: 200}\n")
    try:
        load_text(bad, "etc/gateway.yaml")
    except ConfigError as exc:
        assert str(exc.issues[0]) == documented
    else:
        raise AssertionError("the bad configuration was accepted")
