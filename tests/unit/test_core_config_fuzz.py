"""Hostile configuration: random and mutated YAML always gives either a
snapshot or a ConfigError (never another exception escaping)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twistgw.config.loader import ConfigError, load_text
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot

from twistgw import sdk

from support.trial import TestCase


class Strict:
    """A plugin whose compile validates a little, so fuzzed options reach it."""

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Any, scope: Any) -> Any:
        if not isinstance(options.get("key", ""), str):
            raise sdk.OptionsError("key", "must be a string")
        return dict(options)


class StagedJwt(Strict):
    """Declares Gloo's jwtStaged, as the shipped jwt plugin does."""

    @sdk.hookimpl
    def twistgw_plugin_info(self) -> sdk.PluginInfo:
        return sdk.PluginInfo(order=200, staged_options=sdk.StagedOptions(
            "extauth", "beforeExtAuth", "afterExtAuth", ("jwtStaged", "jwtProvidersStaged"),
            route_only=("jwtProvidersStaged",)))


HOST = PluginHost.create(extra=[("strict", Strict()), ("jwt", StagedJwt())], load_entry_points=False)

VALID = """\
apiVersion: v1
kind: Service
metadata: {name: petstore, namespace: default}
spec:
  ports:
  - {name: http, port: 8080, targetPort: 8000}
---
apiVersion: v1
kind: Endpoints
metadata: {name: petstore}
subsets:
- addresses: [{ip: 127.0.0.1}]
  ports: [{name: http, port: 8000}]
---
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {name: static}
spec: {static: {hosts: [{addr: 127.0.0.1, port: 9000}]}}
---
apiVersion: core.vendor.io/v1
kind: Upstream
metadata: {name: kube}
spec: {kube: {serviceName: petstore, servicePort: 8080}}
---
apiVersion: v1
kind: Secret
metadata: {name: s}
data: {a: aGVsbG8=}
stringData: {b: c}
---
apiVersion: enterprise.gateway.vendor.io/v1
kind: AuthConfig
metadata: {name: ldap}
spec: {configs: [{ldap: {address: "ldap://x"}}]}
---
apiVersion: gateway.vendor.io/v1
kind: Settings
metadata: {name: settings}
spec: {strict: {}}
---
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: v}
spec:
  displayName: d
  virtualHost:
    domains: [a.example.com, "*.b.example.com"]
    options: {strict: {key: k}, pluginOrder: [strict]}
    routes:
    - name: one
      matchers: [{prefix: /a, methods: [GET]}, {exact: /b}]
      routeAction: {single: {kube: {ref: {name: petstore, port: 8080}}}}
      options: {prefixRewrite: /x, timeout: 1s, strict: {disable: true}}
    - routeAction: {single: {upstream: {name: default-petstore-8080}}}
    - routeAction: {single: {upstream: {name: static}}}
      options: {jwtStaged: {beforeExtAuth: {}}, pluginOrder: [jwt, strict]}
    - directResponseAction: {status: 200, body: hi}
"""

DOCS = [d for d in yaml.safe_load_all(VALID)]


def compile_or_error(text: str) -> None:
    try:
        build_snapshot(load_text(text, "fuzz.yaml"), HOST)
    except ConfigError as exc:
        assert exc.issues
        for issue in exc.issues:
            assert issue.reason and str(issue)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True), st.text(max_size=12),
    st.sampled_from(["", "*", "/", "%s", "default", "v1", "1s", "-1ms", "http", "disable", ".."]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
        st.one_of(st.text(max_size=8), st.sampled_from(["disable", "name", "port", "prefix", "spec"])),
        inner, max_size=3)),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


ALL_PATHS = [(i,) + p for i, d in enumerate(DOCS) for p in _paths(d)]


@st.composite
def mutated(draw: Any) -> str:
    docs = copy.deepcopy(DOCS)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(ALL_PATHS))
        parent: Any = docs
        try:
            for p in path[:-1]:
                parent = parent[p]
            action = draw(st.sampled_from(["replace", "delete", "add"]))
            key = path[-1]
            if action == "replace":
                parent[key] = draw(values)
            elif action == "delete":
                if isinstance(parent, dict):
                    del parent[key]
                elif isinstance(parent, list):
                    parent.pop(key)
            else:
                target = parent[key]
                if isinstance(target, dict):
                    target[draw(st.text(max_size=6))] = draw(values)
                elif isinstance(target, list):
                    target.append(draw(values))
        except (KeyError, IndexError, TypeError):
            pass
    return yaml.safe_dump_all(docs)


class CoreConfigFuzzTests(TestCase):
    def test_the_seed_is_valid(self) -> None:
        build_snapshot(load_text(VALID), HOST)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(mutated())
    def test_mutated_documents(self, text: str) -> None:
        compile_or_error(text)

    @settings(max_examples=200, deadline=None)
    @given(st.data())
    def test_mutated_text(self, data: Any) -> None:
        text = VALID
        for _ in range(data.draw(st.integers(1, 4))):
            pos = data.draw(st.integers(0, len(text)))
            op = data.draw(st.sampled_from(["delete", "insert", "replace"]))
            piece = data.draw(st.sampled_from(
                [":", "-", " ", "\n", "{", "}", "[", "]", "'", '"', "&a", "*a", "!!str", "?", "#", "\t", "%",
                 "<<: *a", "\x00", "\ufeff", "---\n", "...\n", "!!binary", "0x10", "1e9", "~"]))
            if op == "delete":
                text = text[:pos] + text[pos + data.draw(st.integers(1, 5)):]
            elif op == "insert":
                text = text[:pos] + piece + text[pos:]
            else:
                text = text[:pos] + piece + text[pos + 1:]
        compile_or_error(text)

    @settings(max_examples=300, deadline=None)
    @given(st.text(max_size=200))
    def test_random_text(self, text: str) -> None:
        compile_or_error(text)

    @settings(max_examples=15, deadline=None)
    @given(st.integers(50, 600))
    def test_deep_nesting(self, depth: int) -> None:
        # (PyYAML's scanner is quadratic in flow-nesting depth: 3000 levels take
        # seconds, hence the modest range.)
        compile_or_error("a: " + "[" * depth + "]" * depth + "\n")
        compile_or_error("a: " + "{b: " * depth + "1" + "}" * depth + "\n")

    def test_alias_bomb_is_bounded(self) -> None:
        # a "billion laughs" document: aliases expand by reference, not by copy;
        # the loader must answer (error or not) quickly without building 10^9 nodes.
        lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
        for i in range(1, 9):
            refs = ",".join([f"*a{i - 1}"] * 10)
            lines.append(f"a{i}: &a{i} [{refs}]")
        with pytest.raises(ConfigError) as info:
            load_text("\n".join(lines) + "\n")
        assert "alias bomb" in info.value.issues[0].reason

    def test_modest_aliases_still_work(self) -> None:
        text = VALID.replace("- name: one\n      matchers: [{prefix: /a, methods: [GET]}, {exact: /b}]",
                             "- name: one\n      matchers: &m [{prefix: /a, methods: [GET]}, {exact: /b}]")
        text = text.replace("- directResponseAction: {status: 200, body: hi}",
                            "- directResponseAction: {status: 200, body: hi}\n      matchers: *m")
        assert "*m" in text
        (vs,) = load_text(text).virtual_services
        assert vs.routes[3].matchers == vs.routes[0].matchers

    def test_recursive_alias_is_an_error_not_a_crash(self) -> None:
        compile_or_error("a: &a [*a]\n")
