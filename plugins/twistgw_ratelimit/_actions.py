"""Envoy's rate-limit actions as Gloo writes them (``rateLimits[].actions``
and ``setActions``): each turns a request into one descriptor entry
``(key, value)``, or into none, and then the whole descriptor is not sent
(Envoy's rule: a descriptor is all its actions or nothing).

Every value comes from what the gateway itself established: the TCP peer
(``remoteAddress``; the client's ``X-Forwarded-For`` never reaches a
plugin), the route's upstream (``destinationCluster``), verified JWT
claims (``metadata`` under ``envoy.filters.http.jwt_authn``), or a request
header, which a client can write unless a plugin owns it (the JWT plugin's
``claimsToHeaders``, as Gloo's guide does it).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

from twistgw.api.types import RequestContext
from twistgw.api.fields import Path, Problems, type_name
from twistgw.regex import SafeRegex, UnsafePattern

from twistgw_ratelimit._descriptors import Entries

#: ctx -> the entry's value, or None when the action produces nothing
Getter = Callable[[RequestContext], "str | None"]

#: Gloo's JWT filter keeps the verified payload in dynamic metadata under
#: this filter name, at ``payloadInMetadata`` (``principal``)
JWT_METADATA = "envoy.filters.http.jwt_authn"
JWT_PAYLOAD_KEY = "principal"

ACTIONS = ("genericKey", "remoteAddress", "requestHeaders", "headerValueMatch", "destinationCluster",
           "metadata", "sourceCluster")
MATCHER_FIELDS = ("name", "exactMatch", "regexMatch", "rangeMatch", "presentMatch", "prefixMatch",
                  "suffixMatch", "invertMatch")


@attrs.frozen
class Action:
    key: str
    get: Getter


@attrs.frozen
class RateLimitActions:
    """One ``rateLimits`` entry: an ordered descriptor and/or a set one."""

    actions: tuple[Action, ...] = ()
    set_actions: tuple[Action, ...] = ()

    def ordered(self, ctx: RequestContext) -> Entries | None:
        return _entries(self.actions, ctx) if self.actions else None

    def as_set(self, ctx: RequestContext) -> dict[str, str] | None:
        if not self.set_actions:
            return None
        entries = _entries(self.set_actions, ctx)
        return None if entries is None else dict(entries)


def _entries(actions: tuple[Action, ...], ctx: RequestContext) -> Entries | None:
    out = []
    for action in actions:
        value = action.get(ctx)
        if value is None:
            return None
        out.append((action.key, value))
    return tuple(out)


def cluster_name(upstream: str) -> str:
    """Gloo's Envoy cluster name of an upstream ``namespace/name``: ``name_namespace``."""
    namespace, _, name = upstream.partition("/")
    return f"{name}_{namespace}" if name else ""


def _header_getter(name: str) -> Getter:
    lowered = name.lower()
    pseudo: dict[str, Getter] = {
        ":method": lambda ctx: ctx.method,
        ":path": lambda ctx: ctx.path + ("?" + ctx.query.decode("latin-1") if ctx.query else ""),
        ":authority": lambda ctx: ctx.host,
        ":scheme": lambda ctx: ctx.scheme,
    }
    if lowered in pseudo:
        return pseudo[lowered]
    return lambda ctx: ctx.header(name)


def _claim_getter(path: tuple[str, ...], default: str | None) -> Getter:
    def get(ctx: RequestContext) -> str | None:
        value: Any = ctx.claims
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        return value if isinstance(value, str) else default
    return get


def _required_text(raw: Mapping[str, Any], name: str, path: Path, problems: Problems) -> str:
    """A required string field of ``raw`` (a mapping the reader read), or "" (recorded)."""
    return problems.fields(raw, path).string(name) or ""


def _mapping(raw: Any, allowed: tuple[str, ...], path: Path, problems: Problems) -> Mapping[str, Any]:
    """``raw``'s fields (null: none; not a mapping: recorded, none)."""
    return problems.fields(raw, path, allowed)


def _matcher(raw: Any, path: Path, problems: Problems) -> Callable[[RequestContext], bool] | None:
    spec = _mapping(raw, MATCHER_FIELDS, path, problems)
    name = _required_text(spec, "name", path, problems)
    kinds = [k for k in MATCHER_FIELDS[1:7] if k in spec]
    if len(kinds) > 1:
        problems.add(path + (kinds[1],), f"use one of {', '.join(kinds)}, not several")
        return None
    invert = spec.get("invertMatch", False)
    if not isinstance(invert, bool):
        problems.add(path + ("invertMatch",), f"must be true or false, got {type_name(invert)}")
    test = _value_test(spec, kinds[0] if kinds else None, path, problems)
    if test is None or not name:
        return None
    get = _header_getter(name)

    def matches(ctx: RequestContext) -> bool:
        return test(get(ctx)) != bool(invert)
    return matches


def _value_test(spec: Mapping[str, Any], kind: str | None, path: Path,
                problems: Problems) -> Callable[[str | None], bool] | None:
    if kind is None:
        return lambda v: v is not None
    arg = spec[kind]
    where = path + (kind,)
    if kind == "presentMatch":
        if not isinstance(arg, bool):
            problems.add(where, f"must be true or false, got {type_name(arg)}")
            return None
        return lambda v: (v is not None) == arg
    if kind == "rangeMatch":
        rng = _mapping(arg, ("start", "end"), where, problems)
        start, end = rng.get("start"), rng.get("end")
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, end)):
            problems.add(where, "needs whole numbers start (inclusive) and end (exclusive)")
            return None
        return lambda v: v is not None and _in_range(v, int(start), int(end))  # type: ignore[arg-type]
    if not isinstance(arg, str) or (not arg and kind != "exactMatch"):
        problems.add(where, f"must be a non-empty string, got {type_name(arg)}")
        return None
    if kind == "regexMatch":
        try:
            regex = SafeRegex(arg)
        except UnsafePattern as exc:
            problems.add(where, f"is not a safe regular expression: {exc}")
            return None
        return lambda v: v is not None and regex.fullmatch(v)
    if kind == "exactMatch":
        return lambda v: v == arg
    if kind == "prefixMatch":
        return lambda v: v is not None and v.startswith(arg)
    return lambda v: v is not None and v.endswith(arg)


def _in_range(value: str, start: int, end: int) -> bool:
    text = value[1:] if value[:1] in "+-" else value
    if not text.isascii() or not text.isdigit():
        return False
    return start <= int(value) < end


def _header_value_match(spec: Mapping[str, Any], path: Path, problems: Problems) -> Action | None:
    value = _required_text(spec, "descriptorValue", path, problems)
    expect = spec.get("expectMatch", True)
    if not isinstance(expect, bool):
        problems.add(path + ("expectMatch",), f"must be true or false, got {type_name(expect)}")
    headers = spec.get("headers")
    if not isinstance(headers, list) or not headers:
        problems.add(path + ("headers",), "must be a non-empty list of header matchers")
        return None
    matchers = [_matcher(h, path + ("headers", i), problems) for i, h in enumerate(headers)]
    if any(m is None for m in matchers) or not value:
        return None
    tests = tuple(m for m in matchers if m is not None)

    def get(ctx: RequestContext) -> str | None:
        return value if all(t(ctx) for t in tests) == bool(expect) else None
    return Action("header_match", get)


def _metadata(spec: Mapping[str, Any], path: Path, problems: Problems) -> Action | None:
    key = _required_text(spec, "descriptorKey", path, problems)
    source = spec.get("source", "DYNAMIC")
    if source != "DYNAMIC":
        problems.add(path + ("source",), "only DYNAMIC metadata (the JWT filter's) exists in twistgw")
    mkey = _mapping(spec.get("metadataKey"), ("key", "path"), path + ("metadataKey",), problems)
    segments = mkey.get("path")
    parts: list[str] = []
    if not isinstance(segments, list) or not segments:
        problems.add(path + ("metadataKey", "path"), "must be a non-empty list of {key: ...}")
    else:
        for i, seg in enumerate(segments):
            seg = _mapping(seg, ("key",), path + ("metadataKey", "path", i), problems)
            parts.append(_required_text(seg, "key", path + ("metadataKey", "path", i), problems))
    if mkey.get("key") != JWT_METADATA or (parts and parts[0] != JWT_PAYLOAD_KEY):
        problems.add(path + ("metadataKey",),
                     f"twistgw has the verified JWT claims only: key {JWT_METADATA!r} with a path"
                     f" starting at {{key: {JWT_PAYLOAD_KEY}}}, then the claim (e.g. {{key: sub}})")
        return None
    default = spec.get("defaultValue")
    if default is not None and not isinstance(default, str):
        problems.add(path + ("defaultValue",), f"must be a string, got {type_name(default)}")
        return None
    if not key or len(parts) < 2:
        if key and len(parts) < 2:
            problems.add(path + ("metadataKey", "path"), "name the claim after {key: principal}")
        return None
    return Action(key, _claim_getter(tuple(parts[1:]), default))


def _action(raw: Any, path: Path, problems: Problems) -> Action | None:
    if not isinstance(raw, Mapping) or len(raw) != 1:
        problems.add(path, f"an action is a mapping with one of: {', '.join(ACTIONS)}")
        return None
    before = len(problems.errors)
    raw = problems.mapping(raw, path, ACTIONS[:-1], refused={  # one of them
        "sourceCluster": "there is no source cluster: twistgw is not part of a service mesh"})
    if len(problems.errors) > before or len(raw) != 1:
        if len(problems.errors) == before:
            problems.add(path, f"an action is a mapping with one of: {', '.join(ACTIONS)}")
        return None
    (kind, spec), = raw.items()
    where = path + (str(kind),)
    if kind == "genericKey":
        value = _required_text(_mapping(spec, ("descriptorValue",), where, problems), "descriptorValue", where,
                               problems)
        return Action("generic_key", lambda ctx: value) if value else None
    if kind == "remoteAddress":
        _mapping(spec, (), where, problems)
        return Action("remote_address", lambda ctx: ctx.client_address or None)
    if kind == "destinationCluster":
        _mapping(spec, (), where, problems)
        return Action("destination_cluster",
                      lambda ctx: cluster_name(getattr(ctx, "upstream", "") or "") or None)
    if kind == "requestHeaders":
        spec = _mapping(spec, ("headerName", "descriptorKey"), where, problems)
        name = _required_text(spec, "headerName", where, problems)
        key = _required_text(spec, "descriptorKey", where, problems)
        return Action(key, _header_getter(name)) if name and key else None
    if kind == "headerValueMatch":
        return _header_value_match(_mapping(spec, ("descriptorValue", "expectMatch", "headers"), where, problems),
                                   where, problems)
    assert kind == "metadata", kind
    return _metadata(_mapping(spec, ("descriptorKey", "metadataKey", "defaultValue", "source"), where, problems),
                     where, problems)


def _action_list(raw: Any, path: Path, problems: Problems) -> tuple[Action, ...]:
    if not isinstance(raw, list) or not raw:
        problems.add(path, f"must be a non-empty list of actions, got {type_name(raw)}")
        return ()
    found = [_action(item, path + (i,), problems) for i, item in enumerate(raw)]
    return tuple(a for a in found if a is not None)


def parse_rate_limits(raw: Any, path: Path, problems: Problems) -> tuple[RateLimitActions, ...]:
    """``rateLimits: [{actions: [...]}, {setActions: [...]}]`` at ``path``."""
    if not isinstance(raw, list):
        problems.add(path, f"must be a list, got {type_name(raw)}")
        return ()
    out = []
    for i, item in enumerate(raw):
        where = path + (i,)
        spec = _mapping(item, ("actions", "setActions"), where, problems)
        if not spec.get("actions") and not spec.get("setActions"):
            problems.add(where, "needs actions or setActions")
            continue
        actions = _action_list(spec["actions"], where + ("actions",), problems) if "actions" in spec else ()
        sets = _action_list(spec["setActions"], where + ("setActions",), problems) if "setActions" in spec else ()
        out.append(RateLimitActions(actions, sets))
    return tuple(out)
