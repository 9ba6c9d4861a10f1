"""``v1 ConfigMap``: text entries other resources refer to (the Rego
modules of an ``opaAuth`` AuthConfig config)."""

from __future__ import annotations

from typing import Mapping

import attrs

from twistgw.api.fields import FieldReader
from twistgw.config.envelope import Envelope

__all__ = ["ConfigMapInfo", "read_config_map"]


@attrs.frozen
class ConfigMapInfo:
    """A ConfigMap's ``data``: each key (``str``) to its text.

    Plugins find it with ``scope.resources.resource("ConfigMap", name,
    namespace)`` (``ConfigScope.config_map`` for AuthConfig config types)."""

    namespace: str
    name: str
    data: Mapping[str, str]
    labels: Mapping[str, str] = attrs.field(factory=dict)


def read_config_map(r: FieldReader, res: Envelope) -> ConfigMapInfo:
    """``data`` (text values); ``binaryData`` is refused: nothing reads bytes."""
    if res.data.get("binaryData"):
        r.issue(("binaryData",), "is not supported by twistgw: put text in data")
    data = res.data.get("data") or {}
    r.mapping(data, ("data",))
    values: dict[str, str] = {}
    for key, value in data.items():
        with r.part():
            values[str(key)] = r.string(value, ("data", key), nonempty=False)
    return ConfigMapInfo(res.namespace, res.name, values, dict(res.labels))
