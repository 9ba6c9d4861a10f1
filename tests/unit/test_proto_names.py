"""Protobuf's proto names (issue 32 item 6). Gloo reads its resources with
protobuf's JSON mapping, which takes a field's proto name
(``retriable_status_codes``) as well as its JSON name
(``retriableStatusCodes``); so does twistgw, in every Gloo resource and
option the core and the shipped plugins read, through the one field reader.

* Gloo's retry guide, verbatim, loads (its ``retriable_status_codes`` is
  read; what stays refused is refused by name, with the reason).
* The property: every field the field walk knows (tests/unit/test_field_walk.py),
  written with its proto name, loads the same model: the walk configuration
  with any set of its fields so renamed compiles to the same snapshot.
  Kubernetes' own objects (``metadata``, a Service, an Endpoints, a Pod, a
  Secret's or ConfigMap's data) and free-form mappings (labels, header names)
  keep their keys: nothing is renamed there.
"""

from __future__ import annotations

import atexit
import enum
import functools
import itertools
import pathlib
import re
import shutil
import tempfile
import textwrap
import types
from typing import Any

import attrs
import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from twistgw.api.fields import proto_name
from twistgw.config.loader import ConfigError, load_directory, load_text
from twistgw.config.model import Source
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot

from support.trial import TestCase
from test_field_walk import FIELDS, write_walk

#: Kubernetes' own kinds: their fields are Go JSON tags, one spelling only
KUBERNETES_KINDS = {"Service", "Endpoints", "Pod", "Secret", "ConfigMap"}
#: a document's Kubernetes envelope
ENVELOPE = {"apiVersion", "kind", "metadata"}
#: mappings whose keys are names the configuration chooses, never fields
FREE_FORM = {"metadata", "labels", "selector", "annotations", "data", "stringData", "headersToAdd", "providers",
             "policies", "claims", "users", "headersFromMetadataEntry", "values", "authEndpointQueryParams",
             "tokenEndpointQueryParams", "dynamicMetadataFromClaims", "namedExtauth", "config", "contextExtensions",
             "metadata_headers", "labelSelector", "headerToMetadata"}
#: the camelCase names of every field the walk knows (the options keys and
#: Settings sections holding them too), with a proto name of their own
WALK_NAMES = frozenset(k for f in FIELDS for k in re.split(r"[.:]|\[\]", f) if k and proto_name(k) != k) | {
    # the AuthConfig config types whose fields the walk's "authtypes" scope holds
    "apiKeyAuth", "basicAuth", "opaAuth", "passThroughAuth"}


#: a walk field's proto name → its JSON name
_JSON_NAMES = {proto_name(k): k for k in WALK_NAMES}


def renamings(docs: list[Any]) -> list[tuple[int, tuple[Any, ...]]]:
    """Where a walk field is written in a Gloo resource: (document, path)."""
    found: list[tuple[int, tuple[Any, ...]]] = []

    def visit(i: int, node: Any, path: tuple[Any, ...]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in FREE_FORM or (not path and key in ENVELOPE):
                    continue
                if key in WALK_NAMES:
                    found.append((i, path + (key,)))
                visit(i, value, path + (key,))
        elif isinstance(node, list):
            for j, item in enumerate(node):
                visit(i, item, path + (j,))

    for i, doc in enumerate(docs):
        if isinstance(doc, dict) and doc.get("kind") not in KUBERNETES_KINDS:
            visit(i, doc, ())
    return found


def renamed(docs: list[Any], where: list[tuple[int, tuple[Any, ...]]]) -> list[Any]:
    """``docs`` with the field at each of ``where`` written with its proto name."""
    out = [_copy(d) for d in docs]
    # deepest first, so a renamed parent does not move its children's paths
    for i, path in sorted(where, key=lambda w: len(w[1]), reverse=True):
        node = out[i]
        for part in path[:-1]:
            node = node[part]
        node[proto_name(path[-1])] = node.pop(path[-1])
    return out


def _copy(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _copy(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_copy(v) for v in node]
    return node


#: attributes that differ between two compilations of one configuration:
#: when it was loaded, an LDAP filter template's random marker
RANDOM = frozenset({"loaded_at", "marker"})


def described(obj: Any, seen: frozenset[int] = frozenset(), depth: int = 0) -> Any:
    """A snapshot as plain data, to compare two of them: models by their
    fields, raw YAML by its JSON names, where a thing is read from left out
    (:class:`Source`: the renamed documents' lines are their own)."""
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    if isinstance(obj, enum.Enum):
        return repr(obj)
    if isinstance(obj, Source) or depth > 14 or id(obj) in seen:
        return "..."
    seen = seen | {id(obj)}
    if isinstance(obj, (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)):
        return getattr(obj, "__qualname__", type(obj).__name__)
    if isinstance(obj, dict) or isinstance(obj, types.MappingProxyType):
        return sorted(((_json_name(k) if isinstance(k, str) else described(k, seen, depth + 1),
                        described(v, seen, depth + 1)) for k, v in obj.items()), key=repr)
    if isinstance(obj, (list, tuple)):
        return [described(v, seen, depth + 1) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted((described(v, seen, depth + 1) for v in obj), key=repr)
    if attrs.has(type(obj)):
        return (type(obj).__name__, [(f.name, described(getattr(obj, f.name), seen, depth + 1))
                                     for f in attrs.fields(type(obj)) if not f.name.startswith("_")
                                     and f.name not in RANDOM])
    state = getattr(obj, "__dict__", None)
    if isinstance(state, dict) and type(obj).__module__.startswith(("twistgw", "plugins")):
        return (type(obj).__name__, [(k, described(v, seen, depth + 1)) for k, v in sorted(state.items())
                                     if not k.startswith("_") and k not in RANDOM])
    return type(obj).__name__


def _plain(node: Any, directory: re.Pattern[str]) -> Any:
    """``node`` with every string's directory under the walk's base written
    ``DIR`` and its tuples as lists: what a YAML round trip of it gave
    (``safe_load(re.sub(directory, "DIR", safe_dump(node)))``), without
    dumping and parsing the whole snapshot (that took a minute)."""
    if isinstance(node, str):
        return directory.sub("DIR", node)
    if isinstance(node, (list, tuple)):
        return [_plain(v, directory) for v in node]
    if isinstance(node, dict):
        return {_plain(k, directory): _plain(v, directory) for k, v in node.items()}
    return node


def _json_name(key: Any) -> Any:
    """A raw YAML key under its JSON name (the renamed documents' raw mappings
    are the same as the others' then)."""
    if not isinstance(key, str):
        return key
    return _JSON_NAMES.get(key, key)


class _Walk:
    """The walk configuration, written once."""

    def __init__(self, base: pathlib.Path) -> None:
        self.base = base
        (base / "camel").mkdir()
        write_walk(base / "camel")
        self.docs = list(yaml.safe_load_all((base / "camel" / "walk.yaml").read_text()))
        self.where = renamings(self.docs)
        self.expected = self.load(base / "camel")

    def load(self, directory: pathlib.Path) -> Any:
        snapshot = build_snapshot(load_directory(str(directory)), PluginHost.create())
        found = described({"config": snapshot.config, "routes": snapshot.routes, "gateways": snapshot.gateways,
                           "owned": snapshot.owned_headers, "compiled": snapshot.plugin_compiled})
        # where the files are is all the directories differ in
        return _plain(found, re.compile(re.escape(str(self.base)) + r"/[\w-]+"))

    def snake(self, which: list[tuple[int, tuple[Any, ...]]], name: str) -> Any:
        target = self.base / name
        shutil.copytree(self.base / "camel", target)
        (target / "walk.yaml").write_text(yaml.safe_dump_all(renamed(self.docs, which), width=float("inf")))
        return self.load(target)


@functools.lru_cache(maxsize=1)
def the_walk() -> _Walk:
    """Written and loaded once per process (both runners)."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="walk-"))
    atexit.register(shutil.rmtree, base, True)
    return _Walk(base)


_COUNT = itertools.count()


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    if type(a) is not type(b) or (not isinstance(a, (list, tuple)) and a != b):
        return [f"{path}: {a!r:.200} != {b!r:.200}"]
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}: {a!r:.300} != {b!r:.300}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            named = isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], str)
            out += _differences(x[1], y[1], f"{path}/{x[0]}") if named and isinstance(y, (list, tuple)) and \
                len(y) == 2 and x[0] == y[0] \
                else _differences(x, y, f"{path}/{i}")
        return out[:20]
    return []


class ProtoNamePropertyTests(TestCase):
    def test_every_walk_field_is_renamed_somewhere(self) -> None:
        """The property covers the walk configuration: every field written in
        its Gloo resources that has a proto name of its own is renamed (each
        is a field the walk knows), over 150 of them."""
        walk = the_walk()
        written: set[str] = set()

        def keys(node: Any, top: bool) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    if key in FREE_FORM or (top and key in ENVELOPE):
                        continue
                    if proto_name(key) != key:
                        written.add(key)
                    keys(value, False)
            elif isinstance(node, list):
                for item in node:
                    keys(item, False)

        for doc in walk.docs:
            if doc.get("kind") not in KUBERNETES_KINDS:
                keys(doc, True)
        assert written - WALK_NAMES == set()
        assert {path[-1] for _, path in walk.where} == written
        assert len(written) > 150, len(written)

    def test_every_field_written_with_its_proto_name(self) -> None:
        walk = the_walk()
        got = walk.snake(walk.where, "all")
        assert not _differences(walk.expected, got), "\n".join(_differences(walk.expected, got))

    @settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def test_any_fields_written_with_their_proto_names(self, data) -> None:
        walk = the_walk()
        mask = data.draw(st.lists(st.booleans(), min_size=len(walk.where), max_size=len(walk.where)))
        which = [w for w, on in zip(walk.where, mask, strict=True) if on]
        got = walk.snake(which, f"some-{next(_COUNT)}")
        assert not _differences(walk.expected, got), "\n".join(_differences(walk.expected, got))


RETRY_GUIDE = """\
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata:
  name: vs-with-retries
spec:
  virtualHost:
    domains:
      - nginx.example.com
    routes:
      - matchers:
          - prefix: /retries
        routeAction:
          single:
            upstream:
              name: nginx-upstream-basicroute
        options:
          retries:
            retryOn: "retriable-status-codes"
            retriable_status_codes:
               - 502
               - 503
               - 504
               - 429
            retryBackOff:
              baseInterval: "1s"
              maxInterval: "1s"
            rateLimitedRetryBackOff:
              maxInterval: "1s"
              resetHeaders:
                - name: "X-RateLimit-Reset"
                  format: UNIX_TIMESTAMP
                - name: "Retry-After"
                  format: SECONDS
"""

UPSTREAM = """\
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: nginx-upstream-basicroute}
spec: {static: {hosts: [{addr: 127.0.0.1, port: 9}]}}
"""


class RetryGuideTests(TestCase):
    """Gloo's retry guide (docs/content/guides/traffic_management/
    request_processing/retries), its second VirtualService verbatim."""

    def test_the_guide_loads_but_for_what_twistgw_refuses_by_name(self) -> None:
        with pytest.raises(ConfigError) as caught:
            load_text(RETRY_GUIDE + UPSTREAM)
        assert [(i.field, i.line) for i in caught.value.issues] == [
            ("spec.virtualHost.routes[0].options.retries.rateLimitedRetryBackOff", 28)]
        assert "is not supported by twistgw" in caught.value.issues[0].reason

    def test_its_retriable_status_codes_are_read(self) -> None:
        guide = RETRY_GUIDE.split("            rateLimitedRetryBackOff:")[0]
        retries = load_text(guide + UPSTREAM).virtual_services[0].routes[0].options["retries"]
        assert retries.statuses == frozenset({502, 503, 504, 429})
        assert retries.on == frozenset({"retriable-status-codes"}) and retries.base == retries.max == 1.0

    def test_both_spellings_of_one_field_are_refused_naming_both(self) -> None:
        guide = RETRY_GUIDE.split("            rateLimitedRetryBackOff:")[0]
        twice = guide.replace("            retryBackOff:", "            retriableStatusCodes: [500]\n"
                              "            retryBackOff:")
        with pytest.raises(ConfigError) as caught:
            load_text(twice + UPSTREAM)
        [issue] = caught.value.issues
        assert issue.field == "spec.virtualHost.routes[0].options.retries.retriableStatusCodes"
        assert "'retriable_status_codes' and 'retriableStatusCodes'" in issue.reason

    def test_kubernetes_fields_keep_one_spelling(self) -> None:
        text = textwrap.dedent("""\
            apiVersion: v1
            kind: Service
            metadata: {name: s}
            spec: {ports: [{port: 80, target_port: 8080}]}
            """)
        with pytest.raises(ConfigError) as caught:
            load_text(text)
        assert "unknown field 'target_port'" in str(caught.value)
