"""``Settings``: the gateway-wide sections, one per plugin (``spec.jwt``,
``spec.extauth``...) checked by each plugin's ``twistgw_default_options``,
and the core's own (``spec.gateway``), checked here.
"""

from __future__ import annotations

from typing import Any, Mapping

from twistgw.api.endpoints import syntax_problem
from twistgw.api.fields import FieldReader, Path
from twistgw.config.envelope import Envelope
from twistgw.config.names import is_loopback_endpoint
from twistgw.regex import max_program_size

__all__ = ["DISCOVERY_NAMESPACE", "MAX_PROGRAM_SIZE_LIMIT", "SECTION_NAMES", "discovery_namespace", "read_settings",
           "regex_max_program_size"]

#: The largest ``regexMaxProgramSize`` accepted (Contour's choice for
#: "unlimited"; RE2's memory budget refuses larger programs anyway).
MAX_PROGRAM_SIZE_LIMIT = 1 << 20

#: The sections of Gloo's Settings the shipped plugins (and the core) read:
#: written with their proto names (``ratelimit_server``), they are read under
#: these; any other section is a plugin's name as written.
SECTION_NAMES = frozenset({"gateway", "extauth", "rbac", "ratelimit", "ratelimitServer", "jwt"})


def regex_max_program_size(settings: Mapping[str, Any]) -> int:
    """The program-size limit of regular expressions in the configuration:
    ``Settings.spec.gateway.regexMaxProgramSize``, else Envoy's default."""
    return max_program_size(settings.get("gateway"))


#: Where Gloo's discovery writes the Upstreams it makes of Services (Gloo's
#: default: the namespace it is installed in)
DISCOVERY_NAMESPACE = "gloo-system"


def discovery_namespace(settings: Mapping[str, Any]) -> str:
    """``spec.gateway.discoveryNamespace`` (Gloo's ``spec.discoveryNamespace``),
    or Gloo's default, ``gloo-system``."""
    gateway = settings.get("gateway")
    found = gateway.get("discoveryNamespace") if isinstance(gateway, Mapping) else None
    return found if isinstance(found, str) and found else DISCOVERY_NAMESPACE


def read_settings(r: FieldReader, res: Envelope) -> dict[str, Any]:
    """``Settings.spec``: each section a mapping (its plugin checks the rest)."""
    # each section's name as a plugin is named (the proto names of Gloo's: ratelimit_server)
    spec = r.mapping(res.spec, ("spec",), names=SECTION_NAMES)
    for key, value in spec.items():
        with r.part():
            r.mapping(value, ("spec", key))
    _gateway_settings(r, spec.get("gateway"))
    return dict(spec)


def _gateway_settings(r: FieldReader, value: Any) -> None:
    """``Settings.spec.gateway``: the core's own gateway-wide settings."""
    if value is None:
        return
    path: Path = ("spec", "gateway")
    g = r.mapping(value, path, {"discoveryNamespace", "echoServer", "regexMaxProgramSize"})
    with r.part():
        if "discoveryNamespace" in g:
            r.string(g["discoveryNamespace"], path + ("discoveryNamespace",))
    with r.part():
        if "regexMaxProgramSize" in g:
            r.integer(g["regexMaxProgramSize"], path + ("regexMaxProgramSize",), 1, MAX_PROGRAM_SIZE_LIMIT)
    if "echoServer" in g:
        e = r.mapping(g["echoServer"], path + ("echoServer",), {"listen"}, required=("listen",))
        listen = r.string(e["listen"], path + ("echoServer", "listen"))
        malformed = syntax_problem(listen)
        if malformed is not None:
            raise r.fail(path + ("echoServer", "listen"), f"{listen!r} is not a valid endpoint: {malformed}")
        if not is_loopback_endpoint(listen):
            raise r.fail(path + ("echoServer", "listen"),
                         "the development echo server only listens on loopback, e.g. 'tcp:8081:interface=127.0.0.1'")
