"""Per-request counters for plugins, cheap enough to bump on every request.

A prometheus-client ``Counter`` child takes a lock on every ``inc()``
(about 0.3 µs, and two or three of them per request add up on a proxy's hot
path). :func:`counter` gives the same ``labels(...).inc()`` interface, but
an increment is a plain integer addition, and the values are handed to
prometheus-client by a collector when ``/metrics`` is scraped: the same
``# HELP``, ``# TYPE`` and ``name_total{...}`` lines, without the
``name_created`` series (``docs/decisions.md``).

With ``--workers`` (prometheus-client's multiprocess mode, where the
supervisor reads every worker's values from shared files) it is an
ordinary prometheus-client ``Counter``, so the numbers still add up across
processes. Increments come from the reactor thread, like every hook call.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Sequence

from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["counter", "multiprocess"]


def multiprocess() -> bool:
    """Whether prometheus-client keeps values in shared files (``--workers``)."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir"))


class _Child:
    """One label set's count."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.value += amount


class _Counter(Collector):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], _Child] = {}

    def labels(self, *values: Any) -> _Child:
        key = tuple(str(v) for v in values)
        if len(key) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected {len(self.labelnames)} label values, got {len(key)}")
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = _Child()
        return child

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, child in list(self._children.items()):
            family.add_metric(list(key), child.value)
        yield family


def counter(name: str, documentation: str, labelnames: Sequence[str],
            registry: CollectorRegistry | None = REGISTRY) -> Any:
    """A labelled counter, registered on ``registry`` (prometheus-client's
    default one unless given; ``None``: not registered). Use it as a
    prometheus-client ``Counter``: ``c.labels("allow").inc()``; resolve the
    children you bump per request once, at import."""
    if multiprocess():
        return Counter(name, documentation, labelnames, registry=registry)
    collector = _Counter(name, documentation, labelnames)
    if registry is not None:
        registry.register(collector)
    return collector
