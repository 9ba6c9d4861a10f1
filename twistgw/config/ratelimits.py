"""Gloo's ``RateLimitConfig`` (``ratelimit.solo.io/v1alpha1``): a
self-contained rate-limit policy that virtual hosts and routes refer to
with ``options.rateLimitConfigs.refs``.

Only its shape is read here (``spec.raw`` with its three lists); the
descriptors and actions inside are checked by the ``rateLimitConfigs``
plugin, which owns their meaning, when an option refers to the config
(``docs/ratelimit.md``).
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from twistgw.api.fields import FieldReader
from twistgw.config.envelope import Envelope

__all__ = ["RAW_FIELDS", "RateLimitConfig", "read_rate_limit_config"]

#: the lists of ``spec.raw``: the server's rules and the client's actions
RAW_FIELDS = ("descriptors", "setDescriptors", "rateLimits")


@attrs.frozen
class RateLimitConfig:
    """One ``RateLimitConfig``.

    :ivar raw: ``spec.raw`` as written (``descriptors``, ``setDescriptors``,
        ``rateLimits``: lists of YAML values, checked by the plugin).
    """

    namespace: str
    name: str
    raw: Mapping[str, Any]


def read_rate_limit_config(r: FieldReader, res: Envelope) -> RateLimitConfig:
    """``spec: {raw: {descriptors: [...], setDescriptors: [...], rateLimits: [...]}}``
    (``raw`` is the only configuration type, as in Gloo)."""
    spec = r.mapping(res.spec, ("spec",), {"raw"}, required=("raw",))
    raw = r.mapping(spec["raw"], ("spec", "raw"), set(RAW_FIELDS))
    for field in RAW_FIELDS:
        if field in raw:
            with r.part():
                r.sequence(raw[field], ("spec", "raw", field))
    return RateLimitConfig(res.namespace, res.name, {k: v for k, v in raw.items() if k in RAW_FIELDS})
