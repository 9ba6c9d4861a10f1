"""VirtualService and the routes it (and a RouteTable) lists: matchers,
actions (``routeAction``, ``directResponseAction``, ``delegateAction``) and
the core's own route options (``prefixRewrite``, ``timeout``,
``pluginOrder``). Every other options key names a plugin and is checked by
it when the snapshot is built.
"""

from __future__ import annotations

from typing import Any

from twistgw.api.fields import FieldReader, Path
from twistgw.config.envelope import Envelope
from twistgw.config.gloo import unsupported
from twistgw.config.matchers import Matcher, parse_matcher
from twistgw.config.model import (
    OPERATORS,
    Delegate,
    DirectResponse,
    GroupRef,
    KubeRef,
    Multi,
    Redirect,
    Route,
    Selector,
    UpstreamRef,
    VirtualService,
    WeightedDestination,
)
from twistgw.config.names import host_without_port
from twistgw.config.reader import reference
from twistgw.config.servertls import read_server_ssl_config
from twistgw.config.routeoptions import read_destination_options, read_options, route_values
from twistgw.config.traffic import read_redirect

__all__ = ["read_destination", "read_options", "read_options_refs", "read_routes", "read_virtual_service",
           "read_weighted"]


def read_virtual_service(r: FieldReader, res: Envelope) -> VirtualService:
    """A ``VirtualService``: its domains, options and routes."""
    ns, name, source = res.namespace, res.name, res.source
    spec = r.mapping(res.spec, ("spec",))
    spec = r.mapping(unsupported(r, spec, ("spec",), "spec"), ("spec",),
                     {"displayName", "virtualHost", "sslConfig"}, required=("virtualHost",))
    ssl = None
    if spec.get("sslConfig") is not None:
        with r.part():
            ssl = read_server_ssl_config(r, spec["sslConfig"], ("spec", "sslConfig"), ns)
    display = ""
    with r.part():
        display = r.string(spec.get("displayName", ""), ("spec", "displayName"), nonempty=False)
    vh_path: Path = ("spec", "virtualHost")
    vh = r.mapping(spec["virtualHost"], vh_path, {"domains", "options", "routes", "optionsConfigRefs"})
    domains: list[str] = []
    with r.part():
        for i, d in enumerate(r.sequence(vh.get("domains", ["*"]), vh_path + ("domains",), nonempty=True)):
            with r.part():
                d = host_without_port(r.string(d, vh_path + ("domains", i)).strip().lower())
                if d in domains:
                    raise r.fail(vh_path + ("domains", i), f"domain {d!r} is listed twice")
                domains.append(d)
    options: dict[str, Any] = {}
    with r.part():
        options = read_options(r, vh.get("options", {}), vh_path + ("options",), ns, on_route=False)
    refs: tuple[tuple[str, str], ...] = ()
    with r.part():
        refs = read_options_refs(r, vh.get("optionsConfigRefs"), vh_path + ("optionsConfigRefs",), ns)
    # Gloo accepts a virtual service with options and no routes (its guides
    # show such partial resources): it serves nothing; ``check`` says so.
    routes = read_routes(r, ns, vh, vh_path, "routes") if "routes" in vh else ()
    # Kept even with problems (they are recorded and reject the
    # configuration) so the plugins still check its options: every problem
    # is reported at once.
    return VirtualService(ns, name, tuple(domains), routes, options, display, source, refs, ssl=ssl,
                          labels=dict(res.labels))


def read_options_refs(r: FieldReader, value: Any, path: Path, ns: str) -> tuple[tuple[str, str], ...]:
    """``optionsConfigRefs: {delegateOptions: [{name, namespace}, ...]}``."""
    if value is None:
        return ()
    m = r.mapping(value, path, {"delegateOptions"})
    out = []
    for i, ref in enumerate(r.sequence(m.get("delegateOptions") or [], path + ("delegateOptions",))):
        with r.part():
            name_, ns_, _ = reference(r, ref, path + ("delegateOptions", i), ns)
            out.append((ns_, name_))
    return tuple(out)


def read_routes(r: FieldReader, ns: str, parent: dict[str, Any], path: Path, key: str) -> tuple[Route, ...]:
    """``routes`` of a virtual host or route table: every route checked."""
    if key not in parent:
        r.issue(path + (key,), "is required")
        return ()
    routes = []
    with r.part():
        for i, raw in enumerate(r.sequence(parent[key], path + (key,))):
            with r.part():
                routes.append(_route(r, ns, i, raw, path + (key, i)))
    return tuple(routes)


_ACTIONS = ("routeAction", "directResponseAction", "delegateAction", "redirectAction")


def _route(r: FieldReader, ns: str, index: int, raw: Any, path: Path) -> Route:
    m = r.mapping(raw, path)
    m = r.mapping(unsupported(r, m, path, "route"), path,
                  {"name", "matchers", "options", "inheritableMatchers", "inheritablePathMatchers",
                   "optionsConfigRefs"} | set(_ACTIONS))
    inherit: dict[str, bool | None] = {}
    for key in ("inheritableMatchers", "inheritablePathMatchers"):
        inherit[key] = None
        with r.part():
            if m.get(key) is not None:
                inherit[key] = r.boolean(m[key], path + (key,))
    name = f"routes[{index}]"
    with r.part():
        if "name" in m:
            name = r.string(m["name"], path + ("name",))
    matchers: list[Matcher] = []
    with r.part():
        for j, mm in enumerate(r.sequence(m.get("matchers", []), path + ("matchers",))):
            with r.part():
                matchers.append(parse_matcher(r, mm, path + ("matchers", j)))
    actions = [a for a in _ACTIONS if a in m]
    action: KubeRef | UpstreamRef | Multi | GroupRef | DirectResponse | Redirect | Delegate | None = None
    if len(actions) != 1:
        r.issue(path, f"set exactly one of {', '.join(_ACTIONS)}"
                + (f" (got {' and '.join(actions)})" if actions else ""))
    else:
        with r.part():
            action = _action(r, ns, actions[0], m[actions[0]], path + (actions[0],))
    options: dict[str, Any] = {}
    with r.part():
        options = read_options(r, m.get("options", {}), path + ("options",), ns, on_route=True)
    refs: tuple[tuple[str, str], ...] = ()
    with r.part():
        refs = read_options_refs(r, m.get("optionsConfigRefs"), path + ("optionsConfigRefs",), ns)
    if action is None:
        raise r.invalid()
    rewrite, timeout, websocket = route_values(options)
    return Route(name, index, tuple(matchers), action, options, rewrite, timeout, path=path, websocket=websocket,
                 inherit_matchers=inherit["inheritableMatchers"],
                 inherit_path_matchers=inherit["inheritablePathMatchers"], options_refs=refs)


def _action(r: FieldReader, ns: str, kind: str, value: Any,
            ap: Path) -> KubeRef | UpstreamRef | Multi | GroupRef | DirectResponse | Redirect | Delegate:
    if kind == "directResponseAction":
        d = r.mapping(value, ap, {"status", "body"}, required=("status",))
        status = r.integer(d["status"], ap + ("status",), 200, 599)
        body = r.string(d.get("body", ""), ap + ("body",), nonempty=False)
        return DirectResponse(status, body.encode("utf-8"))
    if kind == "delegateAction":
        return _delegate(r, ns, value, ap)
    if kind == "redirectAction":
        return read_redirect(r, value, ap)
    raw = r.mapping(value, ap)
    ra = r.mapping(unsupported(r, raw, ap, "routeAction"), ap, {"single", "multi", "upstreamGroup"})
    forms = [k for k in ("single", "multi", "upstreamGroup") if k in ra]
    if len(forms) != 1:
        if not forms and len(ra) < len(raw):
            raise r.invalid()  # a destination twistgw refuses (dynamicForwardProxy...): already said
        raise r.fail(ap, "set exactly one of single, multi or upstreamGroup")
    if "multi" in ra:
        mp = ap + ("multi",)
        multi = r.mapping(ra["multi"], mp, {"destinations"}, required=("destinations",))
        return Multi(read_weighted(r, ns, multi["destinations"], mp + ("destinations",)))
    if "upstreamGroup" in ra:
        name_, ns_, _ = reference(r, ra["upstreamGroup"], ap + ("upstreamGroup",), ns)
        return GroupRef(name_, ns_)
    return read_destination(r, ns, ra["single"], ap + ("single",))


def read_weighted(r: FieldReader, ns: str, value: Any, path: Path) -> tuple[WeightedDestination, ...]:
    """Weighted destinations (``multi.destinations``, an UpstreamGroup's
    ``destinations``): each ``{destination, weight, options}``."""
    out = []
    for i, raw in enumerate(r.sequence(value, path, nonempty=True)):
        p = path + (i,)
        with r.part():
            d = r.mapping(raw, p, {"destination", "weight", "options"}, required=("destination",))
            weight = r.integer(d.get("weight", 1), p + ("weight",), 0, 1 << 32)
            dest = read_destination(r, ns, d["destination"], p + ("destination",))
            options = read_destination_options(r, d.get("options"), p + ("options",), ns)
            out.append(WeightedDestination(dest, weight, options))
    if out and not any(w.weight for w in out):
        raise r.fail(path, "every weight is 0: at least one destination needs a weight above 0")
    return tuple(out)


def read_destination(r: FieldReader, ns: str, value: Any, sp: Path) -> KubeRef | UpstreamRef:
    """One destination (``single``, or a weighted destination's ``destination``)."""
    single = r.mapping(value, sp)
    single = r.mapping(unsupported(r, single, sp, "single"), sp, {"kube", "upstream", "subset"})
    if len([k for k in single if k in ("kube", "upstream")]) != 1:
        raise r.fail(sp, "set exactly one of kube or upstream")
    subset: tuple[tuple[str, str], ...] = ()
    if "subset" in single:
        sub = r.mapping(single["subset"], sp + ("subset",), {"values"}, required=("values",))
        subset = tuple(sorted(r.labels(sub["values"], sp + ("subset", "values")).items()))
    if "kube" in single:
        # Gloo writes the port beside the ref; the seed format inside it. Both are read.
        kp = sp + ("kube",)
        kube = r.mapping(single["kube"], kp, {"ref", "port"}, required=("ref",))
        name_, ns_, inner = reference(r, kube["ref"], kp + ("ref",), ns, with_port=True)
        outer = r.port(kube["port"], kp + ("port",)) if "port" in kube else 0
        if inner and outer and inner != outer:
            raise r.fail(kp + ("port",), f"differs from ref.port ({inner}); write the port once")
        if not (inner or outer):
            raise r.fail(kp + ("port",), "is required (the Service port, beside ref as Gloo writes it)")
        return KubeRef(name_, ns_, inner or outer, subset)
    name_, ns_, _ = reference(r, single["upstream"], sp + ("upstream",), ns)
    return UpstreamRef(name_, ns_, subset)


def _delegate(r: FieldReader, ns: str, value: Any, dp: Path) -> Delegate:
    d = r.mapping(value, dp, {"ref", "selector", "name", "namespace"})
    forms = [k for k in ("ref", "selector") if k in d] + (["name"] if "name" in d else [])
    if len(forms) != 1:
        raise r.fail(dp, "set exactly one of ref or selector")
    if "namespace" in d and "name" not in d:
        raise r.fail(dp + ("namespace",), "goes with name (or write ref: {name, namespace})")
    if "selector" not in d:
        # ``delegateAction: {name, namespace}`` is Gloo's older spelling of ref.
        name_, ns_, _ = reference(r, d.get("ref", {k: d[k] for k in ("name", "namespace") if k in d}),
                             dp + (("ref",) if "ref" in d else ()), ns)
        return Delegate(ref=(ns_, name_))
    sp = dp + ("selector",)
    sel = r.mapping(d["selector"], sp, {"labels", "expressions", "namespaces"})
    if "labels" in sel and "expressions" in sel:
        raise r.fail(sp, "set labels or expressions, not both (as in Gloo)")
    labels = r.labels(sel.get("labels"), sp + ("labels",))
    expressions = []
    for i, e in enumerate(r.sequence(sel.get("expressions", []) or [], sp + ("expressions",))):
        ep = sp + ("expressions", i)
        e = r.mapping(e, ep, {"key", "operator", "values"}, required=("key", "operator"))
        key = r.string(e["key"], ep + ("key",))
        op = r.string(e["operator"], ep + ("operator",))
        if op not in OPERATORS:
            raise r.fail(ep + ("operator",), f"unknown operator {op!r} (expected one of: {', '.join(OPERATORS)})")
        values = tuple(r.string(v, ep + ("values", j), nonempty=False)
                       for j, v in enumerate(r.sequence(e.get("values", []) or [], ep + ("values",))))
        if op in ("Exists", "DoesNotExist") and values:
            raise r.fail(ep + ("values",), f"must be empty for {op}")
        if op not in ("Exists", "DoesNotExist") and not values:
            raise r.fail(ep + ("values",), f"{op} needs values")
        if op in ("GreaterThan", "LessThan") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
            raise r.fail(ep + ("values",), f"{op} needs exactly one integer value")
        expressions.append((key, op, values))
    namespaces = tuple(r.string(n, sp + ("namespaces", j))
                       for j, n in enumerate(r.sequence(sel.get("namespaces", []) or [], sp + ("namespaces",))))
    return Delegate(selector=Selector(dict(labels), tuple(expressions), namespaces))
