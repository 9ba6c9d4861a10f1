"""Staged options, as Gloo runs its JWT stages, for any plugin that declares
them (:class:`twistgw.StagedOptions` in its ``PluginInfo``; the shipped
``jwt`` plugin declares ``jwtStaged`` and ``jwtProvidersStaged`` around
``extauth``).

A staged plugin runs up to two checks on a route, one just *before* the
plugin it is staged around and one *after* it, and a request must pass both.
The virtual host sets them with the plugin's own key (the after stage) or a
staged key; a route replaces **only the stages it names** (a route-only key,
or a staged key holding options) and turns one off with
``STAGED_KEY: {STAGE: {disable: true}}``. The plugin's own key on a route
replaces the after stage; ``{disable: true}`` there turns both off. See
``docs/jwt.md``, "Stages".
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from twistgw.api.plugin import StagedOptions
from twistgw.api.fields import FieldReader, proto_name, type_name

Where = tuple[str | int, ...]
#: (raw options, where they were written, route name or None)
Entry = tuple[Any, Where, str | None]


def is_disabled(value: Any) -> bool:
    """``{disable: true}``: the plugin (or stage) is off here."""
    return isinstance(value, Mapping) and value.get("disable") is True


def check(plugin: str, decl: StagedOptions, options: Mapping[str, Any], path: Where, on_route: bool,
          issue: Callable[[Where, str], None]) -> bool:
    """The shape of the staged keys in one ``options`` mapping (at ``path``);
    reports each problem through ``issue`` and returns whether there was none."""
    ok = True

    def fail(where: Where, reason: str) -> None:
        nonlocal ok
        ok = False
        issue(where, reason)

    reader = FieldReader(fail)

    for key in decl.route_only:
        if key in options and not on_route:
            fail(path + (key,), f"is a route option; on a virtual host write {decl.keys[0]}:"
                                f" {{{decl.before}: {{...}}}} (or {decl.after})")
    used = [k for k in (plugin, *decl.keys) if k in options]
    if len(used) > 1:
        fail(path + (used[1],), f"use either {used[0]} or {used[1]}, not both")
    stages = (decl.before, decl.after)
    for key in decl.keys:
        if key not in options or (key in decl.route_only and not on_route):
            continue
        count = reader.count()
        staged: Mapping[str, Any] = {}
        with reader.part():
            staged = reader.mapping(options[key], path + (key,), stages)
        if reader.count() > count:
            continue
        if not staged:
            fail(path + (key,), f"set {decl.before}, {decl.after} or both")
        for stage, value in staged.items():
            where = path + (key, stage)
            if not isinstance(value, Mapping):
                fail(where, f"must be a mapping, got {type_name(value)}")
                continue
            if "disable" in value and not isinstance(value["disable"], bool):
                fail(where + ("disable",), f"must be true or false, got {value['disable']!r}")
            elif value.get("disable") is True and (len(value) > 1 or not on_route):
                fail(where + ("disable",), "disable: true turns a stage off on a route; it takes no other fields"
                     if on_route else "is a route option (a virtual host simply leaves the stage out)")
    return ok


def _named(staged: Any, decl: StagedOptions) -> list[tuple[str, Any]]:
    """A staged key's stages (checked by :func:`check`), each by its name
    (``before_ext_auth``, the proto name, read as ``beforeExtAuth``)."""
    names = {proto_name(s): s for s in (decl.before, decl.after)}
    return [(names.get(k, k), v) for k, v in (staged or {}).items()]


def stages_of(decl: StagedOptions, inherited: Entry | None, vh_options: Mapping[str, Any],
              route_options: Mapping[str, Any], vh_path: Where, r_path: Where,
              route_name: str) -> dict[str, Entry]:
    """The stages a route runs (``{stage name: entry}``, before first).

    :param inherited: the entry the generic rules produced for the plugin's
        own key (Settings default, virtual host, or route), if any.
    """
    stages: dict[str, Entry] = {}
    if inherited is not None and inherited[2] is None:  # Settings default or virtual host
        stages[decl.after] = inherited
    for key in decl.keys:
        for stage, raw in _named(vh_options.get(key), decl):
            stages[stage] = (raw, vh_path + ("options", key, stage), None)
    if inherited is not None and inherited[2] is not None:  # the route's own key
        if is_disabled(inherited[0]):
            return {}
        stages[decl.after] = inherited
    for key in decl.keys:
        for stage, raw in _named(route_options.get(key), decl):
            if is_disabled(raw):
                stages.pop(stage, None)
            elif key in decl.route_only or set(raw) - {"disable"}:
                stages[stage] = (raw, r_path + ("options", key, stage), route_name)
    return {s: stages[s] for s in (decl.before, decl.after) if s in stages and not is_disabled(stages[s][0])}


def place(plugin: str, decl: StagedOptions, chain: list[tuple[str, str]], stages: Mapping[str, Entry],
          explicit_order: bool) -> list[tuple[str, str]] | str:
    """The chain as (plugin, stage) pairs with ``plugin`` expanded into its
    stages: the after stage takes the plugin's place in the order (after
    ``decl.around`` by default, or where ``pluginOrder`` lists it); the before
    stage runs right before ``decl.around`` (or right before the after stage
    when that plugin is not on the route). Returns a reason instead when
    ``pluginOrder`` contradicts the configured stages."""
    order = [name for name, _ in chain]
    around = decl.around
    if explicit_order and around in order and plugin in order:
        first = order.index(plugin) < order.index(around)
        staged_keys = set(decl.keys)
        if first and decl.after in stages and staged_keys & set(map(str, stages[decl.after][1])):
            return (f"pluginOrder lists {plugin} before {around}, but an {decl.after} {plugin} stage is"
                    f" configured ({'/'.join(decl.keys)}); list {plugin} after {around}, or use {decl.before}")
        if not first and decl.after not in stages:
            return (f"pluginOrder lists {plugin} after {around}, but the only {plugin} stage is"
                    f" {decl.before}; list {plugin} before {around}, or use {decl.after}")
    out = [entry for entry in chain if entry[0] != plugin]
    if plugin not in order:
        return out
    at = order.index(plugin)
    if decl.after in stages:
        out.insert(at, (plugin, decl.after))
    if decl.before in stages:
        if around in order:
            at = next(i for i, (name, _) in enumerate(out) if name == around)
        out.insert(at, (plugin, decl.before))
    return out
