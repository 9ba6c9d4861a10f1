"""Helpers for validating a plugin's options in ``twistgw_compile_options``.

They raise :class:`twistgw.OptionsError` with the field path, so the
gateway reports file, line, resource and field like its own errors;
:class:`Problems` collects several so ``twistgw check`` lists them all::

    from twistgw.options import check_fields, require_mapping

    def twistgw_compile_options(options, scope):
        check_fields(options, ("header", "keysSecretRef"), ())
        ref = require_mapping(options.get("keysSecretRef"), ("keysSecretRef",))
        # a string there: "keysSecretRef: must be a mapping, got a string"
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from typing import Any, Iterable, Iterator, Mapping

from twistgw.api.endpoints import syntax_problem
from twistgw.api.fields import FieldReader, Invalid, Path, type_name, unknown_field
from twistgw.api.headers import is_token
from twistgw.api.types import OptionsError

__all__ = ["DURATION_UNITS", "FieldReader", "Invalid", "Path", "Problems", "check_fields", "is_kubernetes_name",
           "is_token", "loopback_problem", "parse_duration", "require_mapping", "type_name", "unknown_field"]

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


#: Seconds per unit of a duration (Gloo's and Envoy's: ``250ms``, ``15s``, ``5m``, ``1h``).
DURATION_UNITS: Mapping[str, float] = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")


def parse_duration(value: Any, units: Mapping[str, float] = DURATION_UNITS) -> float | None:
    """Seconds of ``15s``, ``1.5s``, ``250ms``, ``2m``, ``1h`` or a plain
    number of seconds; None when ``value`` is none of these or negative (the
    caller reports it with its own field path)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value >= 0 else None
    if not isinstance(value, str):
        return None
    m = _DURATION.fullmatch(value)
    if not m:
        return None
    if not m.group(2):
        return float(m.group(1))
    factor = units.get(m.group(2))
    return None if factor is None else float(m.group(1)) * factor


def require_mapping(value: Any, path: Path, what: str | None = None) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else OptionsError at ``path``:
    ``keysSecretRef: must be a mapping, got a string``, the core's wording.

    ``what`` names the value where its path does not (an item of a list:
    ``require_mapping(v, ("rules", 2), "rule")`` gives ``rules[2]: rule must
    be a mapping, got a list``); it is left out when it only repeats the
    field's own name or the path is empty (the caller's location names it).
    """
    if not isinstance(value, Mapping):
        if what is None or not path or what == str(path[-1]):
            raise OptionsError(path, f"must be a mapping, got {type_name(value)}")
        raise OptionsError(path, f"{what} must be a mapping, got {type_name(value)}")
    return value


def check_fields(value: Mapping[str, Any], allowed: Iterable[str], path: Path) -> None:
    """OptionsError naming every key of ``value`` not in ``allowed`` (in the
    order given); the reader's own check is :meth:`Problems.mapping`."""
    allowed = tuple(allowed)
    problems = Problems()
    for key in value:
        if key not in allowed:
            problems.issue(path + (str(key),), unknown_field(key, allowed))
    problems.raise_if_any()


class Problems(FieldReader):
    """Collects a plugin's option problems so all of them are reported: the
    located field reader (:class:`twistgw.api.fields.FieldReader`) with
    :class:`~twistgw.api.types.OptionsError` as its sink, so a plugin reads
    its options with the same checks and wording as the core::

        problems = Problems()
        with problems.part():           # a problem inside is kept, and checking
            m = problems.mapping(options, (), {"mode", "providers"})  # goes on
        for name, raw in m.get("providers", {}).items():
            with problems.check():      # an OptionsError raised inside is kept too
                compile_provider(raw)
        problems.add(("mode",), "must be strict or lenient")
        problems.raise_if_any()         # one OptionsError carrying them all

    ``raise problems.fail(path, reason)`` outside any ``part`` raises an
    OptionsError carrying every problem recorded so far.
    """

    def __init__(self) -> None:
        self.errors: list[OptionsError] = []
        super().__init__(self._record)

    def _record(self, path: Path, reason: str) -> None:
        self.errors.append(OptionsError(path, reason))

    def add(self, path: Path | str, reason: str, resource: tuple[str, str, str] | None = None) -> None:
        """Record a problem; ``resource`` for one inside another resource
        the options refer to (see :class:`~twistgw.api.types.OptionsError`)."""
        self._count += 1
        self.errors.append(OptionsError(path, reason, resource))

    def invalid(self) -> Exception:
        # An OptionsError carrying the problems so far: caught by part() or
        # check() (which keep each problem once), or reported by the core
        # when a plugin lets it escape.
        if not self.errors:
            return Invalid()
        return OptionsError.several(self.errors)

    @contextlib.contextmanager
    def check(self) -> Iterator[None]:
        """Keep the problems of an OptionsError raised inside, and go on."""
        try:
            yield
        except Invalid:
            pass
        except OptionsError as exc:
            kept = {id(e) for e in self.errors}
            for p in exc.problems:
                if id(p) not in kept:
                    self._count += 1
                    self.errors.append(p)

    part = check

    def __bool__(self) -> bool:
        return bool(self.errors)

    def raise_if_any(self) -> None:
        if self.errors:
            raise OptionsError.several(self.errors)
