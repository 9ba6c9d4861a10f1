"""RouteTables and ``delegateAction``: flatten a virtual service's route tree
into the one ordered list of routes that serves requests (pure).

Gloo Edge's rules, which we follow:

* a route delegates by ``ref`` (one table; the namespace defaults to the
  delegating resource's) or by ``selector`` (``labels`` *or*
  ``expressions``, in ``namespaces`` — default the delegating resource's
  own, ``*`` for all);
* tables chosen by a selector are taken in ascending ``weight`` (default
  0); where several share a weight, the routes of those tables are sorted
  most specific first (exact, then regex, then prefix; longer paths first),
  so ``/a`` never shadows ``/a/b``;
* a delegating route has at most one matcher, a ``prefix`` (none means
  ``/``); every path matcher below it (``prefix``, ``exact`` or ``regex``,
  as written) must start with that prefix, or the configuration is
  rejected; header, query parameter and method conditions of the parent must
  be repeated by each child (a superset), as Gloo requires without
  ``inheritableMatchers``;
* a child route without matchers takes its parent's matcher;
* ``inheritableMatchers: true`` on a route makes it (and, by default, the
  routes below it) add its parent's header, query parameter and method
  conditions instead of repeating them; ``inheritablePathMatchers: true``
  makes it match its parent's prefix instead of its own path conditions;
* a child's options are the parent's options with the child's own on top
  (a plugin key the child sets replaces the parent's entry wholesale);
* a reference to a missing table, a selector choosing none, and a cycle are
  configuration errors.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

from twistgw.api.fields import FieldReader
from twistgw.config.envelope import Envelope
from twistgw.config.matchers import Matcher
from twistgw.config.model import OPERATORS, Delegate, Route, RouteTable, Selector, VirtualService
from twistgw.config.routeoptions import route_values
from twistgw.config.virtualservices import read_routes

__all__ = ["OPERATORS", "Flattener", "read_route_table", "selects"]


def read_route_table(r: FieldReader, res: Envelope) -> RouteTable:
    """A ``RouteTable``: its routes (reported where they are written) and weight."""
    ns, name, source = res.namespace, res.name, res.source
    spec = r.mapping(res.spec, ("spec",), {"routes", "weight"})
    weight = 0
    with r.part():
        weight = r.integer(spec.get("weight", 0), ("spec", "weight"), -(2**31), 2**31 - 1)
    routes = read_routes(r, ns, spec, ("spec",), "routes")
    routes = tuple(attrs.evolve(rt, source=source, owner=f"RouteTable {ns}/{name}",
                                name=rt.name if not rt.name.startswith("routes[") else
                                f"RouteTable {ns}/{name} {rt.name}") for rt in routes)
    return RouteTable(ns, name, routes, dict(res.labels), weight, source)

#: Options keys that replace each other as a group when a child sets one.
_JWT_KEYS = frozenset({"jwt", "jwtStaged", "jwtProvidersStaged"})


def selects(selector: Selector, owner_ns: str, table: RouteTable) -> bool:
    namespaces = selector.namespaces or (owner_ns,)
    if "*" not in namespaces and table.namespace not in namespaces:
        return False
    for k, v in selector.labels.items():
        if table.labels.get(k) != v:
            return False
    for key, op, values in selector.expressions:
        if not _expression(table.labels, key, op, values):
            return False
    return True


def _expression(labels: Mapping[str, str], key: str, op: str, values: tuple[str, ...]) -> bool:
    have = labels.get(key)
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Equals", "DoubleEquals", "In"):
        return have is not None and have in values
    if op in ("NotEquals", "NotIn"):
        return have is None or have not in values
    if have is None:
        return False
    try:
        number, bound = int(have), int(values[0])
    except ValueError:
        return False
    return number > bound if op == "GreaterThan" else number < bound


def _specificity(route: Route) -> tuple[int, int]:
    """Sort key, most specific first (Gloo's sort_routes): exact, regex, prefix; longer first."""
    best = (3, 0)
    for m in route.matchers:
        rank = {"exact": 0, "regex": 1, "prefix": 2}[m.kind]
        best = min(best, (rank, -len(m.path_text)))
    return best


def _merge_options(parent: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    """A child route's options: the delegating route's, with the child's own
    on top (a plugin key replaces the parent's entry wholesale; the JWT keys
    merge stage by stage, see :func:`_merge_jwt_stages`)."""
    out = dict(parent)
    if _JWT_KEYS & child.keys() and _JWT_KEYS & parent.keys():
        merged = _merge_jwt_stages(parent, child)
        for k in _JWT_KEYS:
            out.pop(k, None)
        out.update({k: v for k, v in child.items() if k not in _JWT_KEYS})
        out.update(merged)
        return out
    out.update(child)
    return out


#: Gloo's JWT stages, in the order they run.
_STAGES = ("beforeExtAuth", "afterExtAuth")
_OFF: Mapping[str, Any] = {"disable": True}


def _jwt_stages(options: Mapping[str, Any]) -> dict[str, Any] | None:
    """A route's JWT keys as {stage: options}, the way docs/jwt.md's table
    reads them (``jwt`` is the afterExtAuth stage); None when ``jwt: {disable:
    true}`` turns every stage off. A shape the checks will refuse is kept as
    it is (its own key reports it)."""
    jwt = options.get("jwt")
    if isinstance(jwt, Mapping) and jwt.get("disable") is True:
        return None
    stages: dict[str, Any] = {}
    if jwt is not None:
        stages["afterExtAuth"] = jwt
    for key in ("jwtStaged", "jwtProvidersStaged"):
        staged = options.get(key)
        if isinstance(staged, Mapping):
            stages.update(staged)
    return stages


def _merge_jwt_stages(parent: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    """The JWT keys of a child route under a delegating route that sets JWT
    too, stage by stage (docs/jwt.md, "Stages"): a stage the child names
    replaces (or, with ``{disable: true}``, turns off) the parent's at that
    stage, the parent's other stage stays; ``jwt: {disable: true}`` on the
    child turns every stage off. Written back as one route-level staged key."""
    mine = _jwt_stages(child)
    if mine is None:
        return {"jwt": dict(_OFF)}
    inherited = _jwt_stages(parent)
    stages = {s: _OFF for s in _STAGES} if inherited is None else dict(inherited)
    stages.update(mine)
    key = "jwtStaged" if "jwtStaged" in child else "jwtProvidersStaged"
    return {key: {s: stages[s] for s in _STAGES if s in stages}}


class Flattener:
    """Resolves delegation for every virtual service of one configuration."""

    def __init__(self, tables: Mapping[tuple[str, str], RouteTable], invalid: set[tuple[str, str]],
                 issue: Callable[[Any, str, tuple[str | int, ...], str], None], partial: bool = False) -> None:
        """:param invalid: (namespace, name) of RouteTables declared but
            rejected (their problems are reported already; references to
            them are not reported again).
        :param issue: ``issue(source, owner, path, reason)`` records a problem.
        """
        self.tables = tables
        self.invalid = invalid
        self.issue = issue
        #: some documents could not be read: a missing table may be in them
        self.partial = partial
        self.used: set[tuple[str, str]] = set()

    def flatten(self, vs: VirtualService) -> tuple[Route, ...]:
        out: list[Route] = []
        owner = f"VirtualService {vs.key}"
        routes: list[tuple[RouteTable | None, Route]] = [(None, r) for r in vs.routes]
        self._walk(routes, vs.namespace, None, {}, owner, vs.source, [owner], out, (False, False), ())
        return tuple(attrs.evolve(r, index=i) for i, r in enumerate(out))

    def _walk(self, routes: list[tuple[RouteTable | None, Route]], namespace: str, parent: Matcher | None,
              parent_options: Mapping[str, Any], owner: str, source: Any,
              stack: list[str], out: list[Route], inherited: tuple[bool, bool],
              guard: tuple[Matcher, ...]) -> None:
        """:param stack: the delegation chain down to the delegating resource.
        :param inherited: the parent's (inheritableMatchers, inheritablePathMatchers),
            which a route keeps unless it sets its own (Gloo's defaults)."""
        for table, route in routes:
            chain = stack
            if table is not None:  # a route of a table the parent delegates to
                namespace, owner, source = table.namespace, f"RouteTable {table.key}", table.source
                chain = stack + [owner]
            flags = (inherited[0] if route.inherit_matchers is None else route.inherit_matchers,
                     inherited[1] if route.inherit_path_matchers is None else route.inherit_path_matchers)
            here = self._inherit(route, parent, parent_options, source, owner, flags, guard)
            if here is None:
                continue
            if not isinstance(here.action, Delegate):
                out.append(here)
                continue
            prefix = self._delegating_matcher(here, source, owner)
            if prefix is None:
                continue
            tables = []
            for target in self._targets(here, here.action, namespace, source, owner):
                where = f"RouteTable {target.key}"
                if where in chain:
                    cycle = " -> ".join(chain[chain.index(where):] + [where])
                    self.issue(source, owner, here.path + ("delegateAction",), f"delegation cycle: {cycle}")
                    continue
                self.used.add((target.namespace, target.name))
                tables.append(target)
            self._walk(_in_order(tables), namespace, prefix, here.options, owner, source, chain, out, flags,
                       here.guard)

    def _inherit(self, route: Route, parent: Matcher | None, parent_options: Mapping[str, Any],
                 source: Any, owner: str, flags: tuple[bool, bool] = (False, False),
                 guard: tuple[Matcher, ...] = ()) -> Route | None:
        if parent is None:  # a virtual service's own route: no matchers means prefix "/"
            return route if route.matchers else attrs.evolve(route, matchers=(Matcher(prefix="/"),))
        matchers = route.matchers or (parent,)
        inherit_conditions, inherit_path = flags
        if inherit_path:  # the child's path conditions give way to the parent's prefix
            matchers = tuple(attrs.evolve(m, prefix=parent.prefix, exact=None, regex=None, regex_source=None,
                                          case_sensitive=parent.case_sensitive) for m in matchers)
        if inherit_conditions:  # the parent's headers, query parameters and methods are added
            matchers = tuple(attrs.evolve(
                m,
                headers=parent.headers + tuple(h for h in m.headers if h not in parent.headers),
                query=parent.query + tuple(q for q in m.query if q not in parent.query),
                methods=(tuple(x for x in m.methods if x in parent.methods) if m.methods and parent.methods
                         else m.methods or parent.methods),
            ) for m in matchers)
        ok = True
        for j, m in enumerate(matchers):
            mp = route.path + ("matchers", j)
            if not m.path_text.startswith(parent.path_text):
                self.issue(source, owner, mp,
                           f"{m.kind} {m.path_text!r} does not start with {parent.path_text!r}, the prefix"
                           " delegated to this route table (Gloo requires every child route to keep"
                           " its parent's prefix)")
                ok = False
            missing = [h.name for h in parent.headers if h not in m.headers]
            missing += [f"?{q.name}" for q in parent.query if q not in m.query]
            if parent.methods and not (m.methods and set(m.methods) <= set(parent.methods)):
                missing.append("methods " + ",".join(parent.methods))
            if missing:
                self.issue(source, owner, mp,
                           "must repeat the delegating route's conditions (" + ", ".join(missing) + ")")
                ok = False
        if not ok:
            return None
        options = _merge_options(parent_options, route.options)
        # A regex (or a case-insensitive path under a case-sensitive prefix)
        # can match paths outside the delegated prefix: the parent's matcher
        # then guards the route too.
        if any(m.regex is not None or (parent.case_sensitive and not m.case_sensitive) for m in matchers):
            guard = guard + (_path_only(parent),)
        rewrite, timeout, websocket = route_values(options)
        return attrs.evolve(route, matchers=matchers, options=options,
                            prefix_rewrite=rewrite, timeout=timeout, guard=guard, websocket=websocket)

    def _delegating_matcher(self, route: Route, source: Any, owner: str) -> Matcher | None:
        if len(route.matchers) != 1:
            self.issue(source, owner, route.path + ("matchers",),
                       "a delegating route takes exactly one prefix matcher")
            return None
        m = route.matchers[0]
        if m.kind != "prefix":
            self.issue(source, owner, route.path + ("matchers", 0, m.kind),
                       f"a delegating route matches by prefix only, not {m.kind}")
            return None
        return m

    def _targets(self, route: Route, action: Delegate, namespace: str, source: Any,
                 owner: str) -> list[RouteTable]:
        dp = route.path + ("delegateAction",)
        if action.ref is not None:
            table = self.tables.get(action.ref)
            if table is None:
                if action.ref not in self.invalid and not self.partial:
                    self.issue(source, owner, dp + ("ref",),
                               f"dangling delegation: no RouteTable {action.ref[0]}/{action.ref[1]}")
                return []
            return [table]
        assert action.selector is not None
        chosen = [t for t in self.tables.values() if selects(action.selector, namespace, t)]
        if not chosen:
            if not self.partial:
                self.issue(source, owner, dp + ("selector",),
                           "dangling delegation: the selector chooses no RouteTable")
            return []
        chosen.sort(key=lambda t: (t.weight, t.namespace, t.name))
        return chosen


def _path_only(m: Matcher) -> Matcher:
    """The path condition of a delegating route's matcher (its other
    conditions are repeated or inherited by each child)."""
    return Matcher(prefix=m.prefix, case_sensitive=m.case_sensitive)


def _in_order(tables: list[RouteTable]) -> list[tuple[RouteTable | None, Route]]:
    """The routes of the tables one route delegates to, as (table, route):
    by weight; tables that share a weight have their routes sorted most
    specific first (stable), as Gloo does."""
    out: list[tuple[RouteTable | None, Route]] = []
    i = 0
    while i < len(tables):
        j = i
        while j < len(tables) and tables[j].weight == tables[i].weight:
            j += 1
        group: list[tuple[RouteTable | None, Route]] = [(t, r) for t in tables[i:j] for r in t.routes]
        if j - i > 1:
            group.sort(key=lambda pair: _specificity(pair[1]))
        out.extend(group)
        i = j
    return out


