"""``Settings``: the gateway-wide sections, one per plugin (``spec.jwt``,
``spec.extauth``...) checked by each plugin's ``twistgw_default_options``,
and the core's own (``spec.gateway``), checked here.
"""

from __future__ import annotations

from typing import Any

from twistgw.api.fields import FieldReader, Path
from twistgw.config.envelope import Envelope
from twistgw.config.names import is_loopback_endpoint

__all__ = ["read_settings"]


def read_settings(r: FieldReader, res: Envelope) -> dict[str, Any]:
    """``Settings.spec``: each section a mapping (its plugin checks the rest)."""
    spec = res.spec
    for key, value in r.mapping(spec, ("spec",)).items():
        with r.part():
            r.mapping(value, ("spec", key))
    _gateway_settings(r, spec.get("gateway"))
    return dict(spec)


def _gateway_settings(r: FieldReader, value: Any) -> None:
    """``Settings.spec.gateway``: the core's own gateway-wide settings."""
    if value is None:
        return
    path: Path = ("spec", "gateway")
    g = r.mapping(value, path, {"echoServer"})
    if "echoServer" in g:
        e = r.mapping(g["echoServer"], path + ("echoServer",), {"listen"}, required=("listen",))
        listen = r.string(e["listen"], path + ("echoServer", "listen"))
        if not is_loopback_endpoint(listen):
            raise r.fail(path + ("echoServer", "listen"),
                         "the development echo server only listens on loopback, e.g. 'tcp:8081:interface=127.0.0.1'")
