"""The rate-limit server's side: Gloo's ``descriptors`` (nested, ordered,
with ``weight`` and ``alwaysApply``) and ``setDescriptors`` (unordered
sets, first match plus ``alwaysApply``), compiled once and matched against
the descriptors a request's actions produced (pure, no I/O).

Matching follows envoyproxy/ratelimit, on which Gloo's server is built:

* an ordered descriptor ``((k1, v1), (k2, v2))`` walks the tree one entry
  per level; at each level a node with the same key and value wins over a
  node with the key and no value (which counts each value apart); the
  descriptor is limited by the ``rateLimit`` of the node it ends on, if any;
* of every rule a request matched, only those of the highest ``weight`` are
  counted, plus every rule with ``alwaysApply``;
* a set descriptor matches each ``setDescriptors`` rule whose
  ``simpleDescriptors`` it contains (in any order, other keys ignored); the
  first rule that matches counts, later ones only with ``alwaysApply``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import attrs

from twistgw.sdk import OptionsError, Path, Problems, REQUIRED, type_name

from twistgw_ratelimit._limits import RateLimit, parse_rate_limit

#: an ordered descriptor a request produced: ((key, value), ...)
Entries = tuple[tuple[str, str], ...]

DESCRIPTOR_FIELDS = ("key", "value", "rateLimit", "descriptors", "weight", "alwaysApply")
SET_FIELDS = ("simpleDescriptors", "rateLimit", "alwaysApply")


@attrs.frozen
class Hit:
    """One rule a request matched: what to count and against which limit.

    :ivar key: the counter's name without its window (domain, rule and the
        request's values), unique per bucket.
    :ivar label: the rule as configured, for metrics and logs (no request
        values: bounded cardinality).
    """

    key: str
    limit: RateLimit
    label: str
    weight: int = 0
    always_apply: bool = False


@attrs.frozen
class _Node:
    key: str
    value: str | None
    limit: RateLimit | None
    weight: int
    always_apply: bool
    children: Mapping[tuple[str, str | None], "_Node"]


def escape(text: str) -> str:
    """A value as part of a counter key: ``%``, ``|`` and ``=`` escaped, so
    no value can end one part and start another; ``{`` and ``}`` too, so that
    on a Redis Cluster the hash tag is the whole bucket, never a value's."""
    return text.replace("%", "%25").replace("|", "%7C").replace("=", "%3D").replace("{", "%7B").replace("}", "%7D")


def _flag(raw: Mapping[str, Any], name: str, path: Path, problems: Problems) -> bool:
    """A boolean field of ``raw`` (a mapping the reader read)."""
    return problems.fields(raw, path).boolean(name, False)


def _text(raw: Mapping[str, Any], name: str, path: Path, problems: Problems, required: bool) -> str | None:
    """A string field of ``raw`` (a mapping the reader read); None: absent or recorded."""
    return problems.fields(raw, path).string(name, REQUIRED if required else None)


def _node(raw: Any, path: Path, problems: Problems) -> _Node | None:
    if not isinstance(raw, Mapping):
        problems.add(path, f"a descriptor must be a mapping, got {type_name(raw)}")
        return None
    raw = problems.mapping(raw, path, DESCRIPTOR_FIELDS)
    key = _text(raw, "key", path, problems, required=True)
    value = _text(raw, "value", path, problems, required=False)
    limit = None
    if "rateLimit" in raw:
        with problems.check():
            limit = parse_rate_limit(raw["rateLimit"], path + ("rateLimit",))
    weight = raw.get("weight", 0)
    if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight < 2**32:
        problems.add(path + ("weight",), f"must be a whole number from 0, got {weight!r}")
        weight = 0
    always = _flag(raw, "alwaysApply", path, problems)
    children = _level(raw.get("descriptors", []), path + ("descriptors",), problems)
    if key is None:
        return None
    return _Node(key, value, limit, weight, always, children)


def _level(raw: Any, path: Path, problems: Problems) -> dict[tuple[str, str | None], _Node]:
    if not isinstance(raw, list):
        problems.add(path, f"must be a list of descriptors, got {type_name(raw)}")
        return {}
    level: dict[tuple[str, str | None], _Node] = {}
    for i, item in enumerate(raw):
        node = _node(item, path + (i,), problems)
        if node is None:
            continue
        if (node.key, node.value) in level:
            shown = node.key if node.value is None else f"{node.key}={node.value}"
            problems.add(path + (i,), f"a second descriptor {shown!r} at this level; it could never match")
            continue
        level[(node.key, node.value)] = node
    return level


@attrs.frozen
class _SetRule:
    index: int
    simple: tuple[tuple[str, str | None], ...]
    limit: RateLimit
    always_apply: bool


def _set_rule(raw: Any, index: int, path: Path, problems: Problems) -> _SetRule | None:
    if not isinstance(raw, Mapping):
        problems.add(path, f"a set descriptor must be a mapping, got {type_name(raw)}")
        return None
    raw = problems.mapping(raw, path, SET_FIELDS)
    simple: list[tuple[str, str | None]] = []
    items = raw.get("simpleDescriptors", [])
    if not isinstance(items, list):
        problems.add(path + ("simpleDescriptors",), f"must be a list, got {type_name(items)}")
        items = []
    for j, item in enumerate(items):
        where = path + ("simpleDescriptors", j)
        if not isinstance(item, Mapping):
            problems.add(where, f"must be a mapping {{key, value}}, got {type_name(item)}")
            continue
        item = problems.mapping(item, where, ("key", "value"))
        key = _text(item, "key", where, problems, required=True)
        if key is not None:
            simple.append((key, _text(item, "value", where, problems, required=False)))
    if "rateLimit" not in raw:
        problems.add(path + ("rateLimit",), "is required: a set descriptor is a rule with a limit")
        return None
    always = _flag(raw, "alwaysApply", path, problems)
    try:
        limit = parse_rate_limit(raw["rateLimit"], path + ("rateLimit",))
    except OptionsError as exc:
        problems.errors.extend(exc.problems)
        return None
    return _SetRule(index, tuple(simple), limit, always)


@attrs.frozen
class DescriptorSet:
    """The descriptors and set descriptors of one domain (Gloo's
    ``Settings.spec.ratelimit``, or one ``RateLimitConfig``): what a
    request's descriptors are matched against.

    :ivar domain: names the domain's counters (``settings``,
        ``config.<namespace>.<name>``); rules of different domains never
        share a counter.
    """

    domain: str
    tree: Mapping[tuple[str, str | None], _Node] = attrs.field(factory=dict)
    set_rules: tuple[_SetRule, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.tree and not self.set_rules

    def match(self, entries: Entries) -> Hit | None:
        """The rule an ordered descriptor ends on, or None."""
        level = self.tree
        node: _Node | None = None
        path: list[str] = []
        for key, value in entries:
            node = level.get((key, value)) or level.get((key, None))
            if node is None:
                return None
            path.append(escape(key) if node.value is None else f"{escape(key)}={escape(node.value)}")
            level = node.children
        if node is None or node.limit is None:
            return None
        bucket = "|".join(f"{escape(k)}={escape(v)}" for k, v in entries)
        return Hit(f"{self.domain}|d|{bucket}", node.limit, f"{self.domain}:{'.'.join(path)}",
                   node.weight, node.always_apply)

    def match_set(self, entries: Mapping[str, str]) -> list[Hit]:
        """The set-descriptor rules a set descriptor (key → value) counts against."""
        hits: list[Hit] = []
        for rule in self.set_rules:
            if not all(k in entries and (v is None or entries[k] == v) for k, v in rule.simple):
                continue
            if hits and not rule.always_apply:
                continue
            bucket = "|".join(f"{escape(k)}={escape(entries[k])}" for k, _ in sorted(rule.simple))
            hits.append(Hit(f"{self.domain}|s{rule.index}|{bucket}", rule.limit,
                            f"{self.domain}:set[{rule.index}]", 0, rule.always_apply))
        return hits


def parse_descriptor_set(domain: str, descriptors: Any, set_descriptors: Any,
                         path: Path, problems: Problems) -> DescriptorSet:
    """Compile ``descriptors`` and ``setDescriptors`` found at ``path``
    (problems are collected, not raised)."""
    tree = _level(descriptors if descriptors is not None else [], path + ("descriptors",), problems)
    rules: list[_SetRule] = []
    raw_sets = set_descriptors if set_descriptors is not None else []
    if not isinstance(raw_sets, list):
        problems.add(path + ("setDescriptors",), f"must be a list, got {type_name(raw_sets)}")
        raw_sets = []
    for i, raw in enumerate(raw_sets):
        rule = _set_rule(raw, i, path + ("setDescriptors", i), problems)
        if rule is not None:
            rules.append(rule)
    return DescriptorSet(domain, tree, tuple(rules))


def select(hits: Iterable[Hit]) -> list[Hit]:
    """Rule priority across ordered descriptors: the hits of the highest
    weight, and every hit with ``alwaysApply``."""
    found = list(hits)
    if not found:
        return found
    top = max(h.weight for h in found)
    return [h for h in found if h.weight == top or h.always_apply]


def resolve(domain: DescriptorSet, ordered: Sequence[Entries], sets: Sequence[Mapping[str, str]]) -> list[Hit]:
    """Every rule a request's descriptors count against in ``domain``."""
    hits = select(h for h in (domain.match(e) for e in ordered) if h is not None)
    for entries in sets:
        hits.extend(domain.match_set(entries))
    return hits
