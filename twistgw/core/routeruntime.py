"""What one route does at run time, compiled once per snapshot: its
chain flattened into calls, its balancer, its traffic policy, its direct
answer, and whether the pipeline's shortest path serves it. Built by
:mod:`twistgw.core.snapshot`, read by the pipeline for every request."""

from __future__ import annotations

from typing import Any

import attrs

from twistgw.config.model import DirectResponse, Route, VirtualService
from twistgw.config.tracing import RouteTracing
from twistgw.core.chain import Call, ChainStep, flatten_chain
from twistgw.core.plan import LocalResponse
from twistgw.core.traffic import RoutePolicy

__all__ = ["RouteRuntime"]


@attrs.frozen
class RouteRuntime:
    virtual_service: VirtualService
    route: Route
    chain: tuple[ChainStep, ...]
    direct: DirectResponse | None
    #: a Balancer (round robin) or one of core.balancers' (random, ring hash, maglev)
    balancer: Any
    #: route selection is repeated after the chain (its virtual service has
    #: routes matching headers or query parameters, which plugins may write:
    #: JWT claimsToHeaders; see docs/decisions.md "claim-based routing")
    reselect: bool = False
    #: the route's traffic options (cors, faults, headers, weighted
    #: destinations...), None when it has none: the plain route's cost is one test
    policy: RoutePolicy | None = None
    #: the chain flattened into (step, phase, callable), once per snapshot
    calls: tuple[Call, ...] = attrs.field(init=False, eq=False)
    #: the answer of a direct-response route, made once per snapshot
    answer: LocalResponse | None = attrs.field(init=False, eq=False)
    #: ``namespace/name`` of the route's upstream ("" for a direct response
    #: or weighted destinations): ``ctx.upstream``, made once per snapshot
    upstream_name: str = attrs.field(init=False, eq=False)
    #: neither traffic options nor routing again after the chain: the
    #: pipeline's shortest path (route, chain, forward)
    simple: bool = attrs.field(init=False, eq=False)
    #: ``policy`` when the pipeline's quick path serves the route (its
    #: traffic options are header edits, CORS, retries: ``RoutePolicy.quick``;
    #: no direct answer, no routing again), else None
    quick: RoutePolicy | None = attrs.field(init=False, eq=False)

    #: the route's ``options.tracing`` (None: none), read once per snapshot
    tracing: RouteTracing | None = attrs.field(init=False, eq=False)

    @tracing.default
    def _tracing(self) -> RouteTracing | None:
        found = self.route.options.get("tracing")
        return found if isinstance(found, RouteTracing) else None

    @calls.default
    def _flatten(self) -> tuple[Call, ...]:
        return flatten_chain(self.chain)

    @upstream_name.default
    def _upstream_name(self) -> str:
        key = getattr(self.route.action, "upstream_key", None)
        if key is None:
            return ""
        namespace, name = key()
        return f"{namespace}/{name}"

    @simple.default
    def _simple(self) -> bool:
        return self.policy is None and not self.reselect

    @quick.default
    def _quick(self) -> RoutePolicy | None:
        quick = self.policy is not None and self.policy.quick and self.direct is None and not self.reselect
        return self.policy if quick else None

    @answer.default
    def _answer(self) -> LocalResponse | None:
        if self.direct is None:
            return None
        return LocalResponse(self.direct.status, self.direct.body, reason="direct response", answer=True)
