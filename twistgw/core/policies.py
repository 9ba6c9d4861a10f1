"""Compiling a route's traffic options (and its virtual host's) into its
:class:`~twistgw.core.traffic.RoutePolicy`, once per snapshot.

Precedence, as Gloo and Envoy apply it: ``cors``, ``csrf`` and
``bufferPerRoute`` written on a route replace the virtual host's whole
(``cors.disableForRoute`` turns CORS off on the route);
``headerManipulation`` of every level applies (weighted destination, then
route, then virtual host: Envoy's order, so for a header set on two levels
the virtual host's value is the one sent).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import attrs

from twistgw.config.model import GroupRef, KubeRef, Multi, Route, UpstreamGroup, UpstreamRef, VirtualService
from twistgw.config.resolution import Config
from twistgw.config.traffic import CorsPolicy, HeaderManipulation, Redirect, SecretHeaders
from twistgw.config.shadowing import Shadowing
from twistgw.core.balancers import HashBalancer
from twistgw.core.shadowing import Shadow
from twistgw.core.traffic import HeaderLevel, ResponseEdit, RoutePolicy, Weighted, request_level, response_edit

__all__ = ["compile_policy", "forged_headers", "header_names"]

BalancerFor = Callable[[tuple[str, str], tuple[tuple[str, str], ...]], Any]


def _secrets(hm: HeaderManipulation, config: Config) -> None:
    for a in hm.request_add:
        if isinstance(a, SecretHeaders) and (a.namespace, a.name) not in config.secrets:
            if ("Secret", a.namespace, a.name) in config.invalid:
                raise LookupError(a.name)
            raise ValueError(f"headerManipulation: dangling reference: headerSecretRef names no Secret"
                             f" {a.namespace}/{a.name}")


def _levels(hms: list[HeaderManipulation], config: Config) -> tuple[HeaderLevel | None, ResponseEdit | None]:
    """The levels (most specific first) composed: request ops, response edit."""
    request: HeaderLevel | None = None
    response: ResponseEdit | None = None
    for hm in hms:
        _secrets(hm, config)
        if hm.request_add or hm.request_remove:
            level = request_level(hm, config.secrets)
            request = level if request is None else request.then(level)
        if hm.response_add or hm.response_remove:
            edit = response_edit(hm)
            response = edit if response is None else response.then(edit)
    return request, response


def _weighted(route: Route, config: Config, balancer: BalancerFor) -> Weighted | None:
    action = route.action
    if isinstance(action, GroupRef):
        group = config.of_kind("UpstreamGroup").get((action.namespace, action.name))
        if not isinstance(group, UpstreamGroup):
            raise LookupError(action.name)  # reported as dangling
        destinations = group.destinations
    elif isinstance(action, Multi):
        destinations = action.destinations
    else:
        return None
    choices = []
    for d in destinations:
        dest = d.destination
        assert isinstance(dest, (KubeRef, UpstreamRef))
        key = dest.upstream_key()
        if key not in config.upstreams:
            raise LookupError(key)  # reported by check_references
        hm = d.options.get("headerManipulation")
        request: HeaderLevel | None = None
        response: ResponseEdit | None = None
        if isinstance(hm, HeaderManipulation):
            request, response = _levels([hm], config)
        choices.append((d.weight, balancer(key, dest.subset), request, response))
    return Weighted(choices)


def _pick(key: str, route: Mapping[str, Any], host: Mapping[str, Any]) -> Any:
    return route[key] if key in route else host.get(key)


def compile_policy(vs: VirtualService, route: Route, config: Config, balancer: BalancerFor) -> RoutePolicy | None:
    """The route's policy, or None when it has no traffic option at all.
    Raises LookupError for a destination already reported as dangling and
    ValueError for a problem to report at the route's options."""
    ro, vo = route.options, vs.options
    weighted = _weighted(route, config, balancer)
    redirect = route.action if isinstance(route.action, Redirect) else None
    cors = _pick("cors", ro, vo)
    if isinstance(cors, CorsPolicy) and cors.disable_for_route:
        cors = None
    hms = [hm for hm in (ro.get("headerManipulation"), vo.get("headerManipulation"))
           if isinstance(hm, HeaderManipulation)]
    request, response = _levels(hms, config)
    lb_hash = ro.get("lbHash")
    if lb_hash is not None:
        _check_hashing(route, config, balancer, weighted)
    found = dict(cors=cors, csrf=_pick("csrf", ro, vo), faults=ro.get("faults"), buffer=_pick("bufferPerRoute", ro, vo),
                 redirect=redirect, regex_rewrite=ro.get("regexRewrite"), host_rewrite=ro.get("hostRewrite"),
                 auto_host=bool(ro.get("autoHostRewrite")), request=request, response=response,
                 weighted=weighted, lb_hash=lb_hash, retries=_pick("retries", ro, vo),
                 shadow=_shadow(route, ro.get("shadowing"), config, balancer))
    if not any(found.values()):
        return None
    rewrite = None
    if redirect is not None and redirect.prefix is not None:
        rewrite = attrs.evolve(route, prefix_rewrite=redirect.prefix).rewrite
    return RoutePolicy(**found, redirect_rewrite=rewrite)


def _shadow(route: Route, shadowing: Shadowing | None, config: Config, balancer: BalancerFor) -> Shadow | None:
    if shadowing is None:
        return None
    if not isinstance(route.action, (KubeRef, UpstreamRef, Multi, GroupRef)):
        raise ValueError("shadowing: this route answers itself (a direct response or a redirect): there is no"
                         " forwarded request to copy")
    key = shadowing.upstream_key()
    if key not in config.upstreams:
        if ("Upstream", key[0], key[1]) in config.invalid:
            raise LookupError(key)  # its own problems are reported
        raise ValueError(f"shadowing: dangling reference: upstream names no Upstream {key[0]}/{key[1]}")
    return Shadow(balancer(key, ()), shadowing.percentage)


def _check_hashing(route: Route, config: Config, balancer: BalancerFor, weighted: Weighted | None) -> None:
    """lbHash only means something for a ringHash or maglev upstream (Envoy
    ignores it otherwise): refuse it rather than accept and ignore it."""
    balancers = [b for b, _, _ in weighted.choices] if weighted is not None else []
    action = route.action
    if isinstance(action, (KubeRef, UpstreamRef)):
        key = action.upstream_key()
        if key not in config.upstreams:
            raise LookupError(key)
        balancers.append(balancer(key, action.subset))
    for b in balancers:
        if not (isinstance(b, HashBalancer) or getattr(b, "hashes", False)):
            up = b.upstream
            raise ValueError(f"lbHash: upstream {up.namespace}/{up.name} does not balance by hash: give it"
                             " loadBalancerConfig ringHash or maglev (Envoy ignores hash policies otherwise)")


def header_names(policy: RoutePolicy) -> set[bytes]:
    """The request header names a policy sets or removes (canonical)."""
    names: set[bytes] = set()
    levels = [policy.request] if policy.request is not None else []
    if policy.weighted is not None:
        levels += [req for _, req, _ in policy.weighted.choices if req is not None]
    for level in levels:
        names.update(level.names)
    return names


def forged_headers(runtimes: Iterable[Any], owned: set[bytes]) -> list[tuple[Any, str]]:
    """(route runtime, reason) for each route whose headerManipulation (its
    own, its virtual host's or a weighted destination's) names a request
    header a plugin owns (it sets it after authenticating): a configured
    value would forge it."""
    out = []
    for runtime in runtimes if owned else ():
        if runtime.policy is None:
            continue
        forged = sorted(header_names(runtime.policy) & owned)
        if forged:
            names = ", ".join(n.decode() for n in forged)
            out.append((runtime, f"headerManipulation (of this route, its virtual host or a weighted destination)"
                                 f" names {names}, which a plugin owns (it sets it after authenticating): a"
                                 " configured value would forge it"))
    return out
