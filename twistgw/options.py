"""Helpers for a plugin's options (``twistgw_compile_options``).

The field reader itself is :class:`twistgw.api.fields.FieldReader`; plugins
use :class:`Problems`, the reader whose problems become
:class:`twistgw.OptionsError` s with the field path, so the gateway reports
file, line, resource and field like its own errors::

    from twistgw.options import Problems

    def twistgw_compile_options(options, scope):
        problems = Problems()
        f = problems.fields(options, (), ("header", "keysSecretRef"))
        header = f.string("header", "x-api-key")
        ref = f.reference("keysSecretRef", scope.namespace, "Secret")
        problems.raise_if_any()

:func:`require_mapping` and :func:`check_fields` are the older helpers,
kept for plugins written against them: they are the reader's own checks.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Iterable, Mapping

from twistgw.api.durations import DURATION_UNITS, parse_duration
from twistgw.api.endpoints import syntax_problem
from twistgw.api.fields import FieldReader, Fields, Invalid, Path, Problems, Ref, type_name, unknown_field
from twistgw.api.headers import is_token

__all__ = ["DURATION_UNITS", "FieldReader", "Fields", "Invalid", "Path", "Problems", "Ref", "check_fields",
           "is_kubernetes_name", "is_token", "loopback_problem", "parse_duration", "require_mapping", "type_name",
           "unknown_field"]

#: A Kubernetes object name (RFC 1123 subdomain): lower-case letters, digits, '-' and '.'.
_KUBERNETES_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def loopback_problem(listen: str, allow_unix: bool = True) -> str | None:
    """Why a Twisted server endpoint string (``tcp:8081:interface=127.0.0.1``)
    could accept connections from other hosts, or None when it listens on
    loopback only: ``tcp``/``tcp6`` on a loopback ``interface=`` (or
    ``localhost``), or a ``unix`` socket when ``allow_unix``. For development
    servers a plugin starts (the extauth plugin's in-memory directory).
    A malformed string is refused in its own words (``port must be a
    number...``)."""
    malformed = syntax_problem(listen)
    if malformed is not None:
        return f"{listen!r} is not a valid endpoint: {malformed}"
    parts = re.split(r"(?<!\\):", listen)
    kind = parts[0].strip().lower()
    if kind == "unix" and allow_unix:
        return None
    if kind not in ("tcp", "tcp6"):
        kinds = "a tcp: or unix:" if allow_unix else "a tcp:"
        return f"must be {kinds} endpoint, got {listen!r}"
    interface = None
    for part in parts[1:]:
        if part.startswith("interface="):
            interface = part[len("interface="):].replace("\\", "")
    if interface is None:
        return (f"{listen!r} has no interface= and would listen on every address;"
                " only loopback is allowed here (add :interface=127.0.0.1)")
    if interface == "localhost":
        return None
    try:
        loopback = ipaddress.ip_address(interface).is_loopback
    except ValueError:
        loopback = False
    return None if loopback else f"interface {interface!r} is not a loopback address; only loopback is allowed here"


def is_kubernetes_name(text: str) -> bool:
    """Whether ``text`` is a valid Kubernetes ``metadata.name`` or namespace."""
    return len(text) <= 253 and _KUBERNETES_NAME.fullmatch(text) is not None


def require_mapping(value: Any, path: Path, what: str | None = None) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else OptionsError at ``path``:
    ``keysSecretRef: must be a mapping, got a string``, the reader's wording.
    Kept for plugins written against it; new code reads with :class:`Problems`.

    ``what`` names the value where its path does not (an item of a list:
    ``require_mapping(v, ("rules", 2), "rule")`` gives ``rules[2]: rule must
    be a mapping, got a list``); it is left out when it only repeats the
    field's own name or the path is empty (the caller's location names it).
    """
    if isinstance(value, Mapping):
        return value
    reason = f"must be a mapping, got {type_name(value)}"
    if what is not None and path and what != str(path[-1]):
        reason = f"{what} {reason}"
    raise Problems().fail(path, reason)


def check_fields(value: Mapping[str, Any], allowed: Iterable[str], path: Path) -> None:
    """OptionsError naming every key of ``value`` not in ``allowed``: the
    reader's own check (:meth:`Problems.mapping`), kept for plugins written
    against it. Keys are taken as written (no proto names: the caller reads
    the mapping it checked)."""
    problems = Problems()
    with problems.part():
        problems.mapping(value, path, tuple(allowed), proto_names=False)
    problems.raise_if_any()
