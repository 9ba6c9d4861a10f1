"""Gloo's resources that hold traffic pieces for others: ``UpstreamGroup``
(weighted destinations a route names with ``routeAction.upstreamGroup``),
``VirtualHostOption`` and ``RouteOption`` (options a virtual host or route
takes with ``optionsConfigRefs.delegateOptions``), and the merge of
delegated options, as Gloo merges them: the options written on the virtual
host or route win, then each delegated resource in the order listed, key by
key (a key is taken whole from the first place that sets it).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

from twistgw.api.fields import FieldReader, Path
from twistgw.config.envelope import Envelope
from twistgw.config.model import OptionsResource, Route, RouteTable, Source, UpstreamGroup, VirtualService
from twistgw.config.resolution import Locate
from twistgw.config.routeoptions import read_options, route_values
from twistgw.config.virtualservices import read_weighted

__all__ = ["merge_delegated_options", "read_route_option", "read_upstream_group", "read_virtual_host_option"]


def read_upstream_group(r: FieldReader, res: Envelope) -> UpstreamGroup:
    spec = r.mapping(res.spec, ("spec",), {"destinations"}, required=("destinations",))
    return UpstreamGroup(res.namespace, res.name, read_weighted(r, res.namespace, spec["destinations"],
                                                                ("spec", "destinations")))


def _options_kind(kind: str, on_route: bool) -> Callable[[FieldReader, Envelope], OptionsResource]:
    def read(r: FieldReader, res: Envelope) -> OptionsResource:
        spec = dict(r.mapping(res.spec, ("spec",)))
        for key in ("targetRefs", "targetRef"):
            if spec.pop(key, None) is not None:
                r.issue(("spec", key), "is not supported by twistgw: attach the options with"
                        " optionsConfigRefs.delegateOptions on the virtual service or route")
        spec = r.mapping(spec, ("spec",), {"options"})
        options = read_options(r, spec.get("options") or {}, ("spec", "options"), res.namespace, on_route=on_route)
        return OptionsResource(kind, res.namespace, res.name, options, res.source)
    read.__name__ = f"read_{kind}"
    return read


read_virtual_host_option = _options_kind("VirtualHostOption", False)
read_route_option = _options_kind("RouteOption", True)

def _merged(own: Mapping[str, Any], refs: tuple[tuple[str, str], ...], kind: str,
            found: Mapping[tuple[str, str], object], invalid: Any, where: tuple[Source | None, str, Path],
            issue: Locate, partial: bool) -> dict[str, Any] | None:
    """``own`` with the delegated resources' keys it does not set (None: no refs)."""
    if not refs:
        return None
    out = dict(own)
    source, owner, path = where
    for i, key in enumerate(refs):
        res = found.get(key)
        if not isinstance(res, OptionsResource):
            if (kind, key[0], key[1]) not in invalid and not partial:
                issue(source, owner, path + ("optionsConfigRefs", "delegateOptions", i),
                      f"dangling reference: no {kind} {key[0]}/{key[1]}")
            continue
        for k, v in res.options.items():
            out.setdefault(k, v)
    return out


def _route_with(route: Route, options: dict[str, Any] | None) -> Route:
    if options is None:
        return route
    rewrite, timeout, websocket = route_values(options)
    return attrs.evolve(route, options=options, prefix_rewrite=rewrite, timeout=timeout, websocket=websocket)


def merge_delegated_options(virtual_services: tuple[VirtualService, ...],
                            tables: Mapping[tuple[str, str], RouteTable],
                            resources: Mapping[str, Mapping[tuple[str, str], object]], invalid: Any,
                            issue: Locate, partial: bool) -> tuple[tuple[VirtualService, ...],
                                                                    dict[tuple[str, str], RouteTable]]:
    """Every virtual host's and route's ``optionsConfigRefs`` applied (before delegation)."""
    vh_found = resources.get("VirtualHostOption", {})
    r_found = resources.get("RouteOption", {})

    def routes(rs: tuple[Route, ...], source: Source | None, owner: str) -> tuple[Route, ...]:
        return tuple(_route_with(rt, _merged(rt.options, rt.options_refs, "RouteOption", r_found, invalid,
                                             (source, owner, rt.path), issue, partial)) for rt in rs)

    out_vs = []
    for vs in virtual_services:
        owner = f"VirtualService {vs.key}"
        vh = _merged(vs.options, vs.options_refs, "VirtualHostOption", vh_found, invalid,
                     (vs.source, owner, ("spec", "virtualHost")), issue, partial)
        out_vs.append(attrs.evolve(vs, options=vh if vh is not None else vs.options,
                                   routes=routes(vs.routes, vs.source, owner)))
    out_tables = {key: attrs.evolve(t, routes=routes(t.routes, t.source, f"RouteTable {t.key}"))
                  for key, t in tables.items()}
    return tuple(out_vs), out_tables
