"""Gloo's ``csrf`` option (Envoy's CSRF filter) read into a
:class:`CsrfPolicy`: the shares of requests enforced and shadow-evaluated,
and ``additionalOrigins``, matched against the source origin's
``host[:port]`` (:mod:`twistgw.core.origins`; docs/traffic.md)."""

from __future__ import annotations

import re
from typing import Any

import attrs

from twistgw.api.fields import FieldReader, Path
from twistgw.regex import SafeRegex, UnsafePattern

__all__ = ["CsrfPolicy", "OriginMatcher", "read_csrf"]


@attrs.frozen
class OriginMatcher:
    """One of ``csrf.additionalOrigins`` (Envoy's StringMatcher), matched
    against the source origin's ``host[:port]`` (lower-case, the port only
    when it is not the scheme's default: ``twistgw.core.origins``); an
    ``ignoreCase`` pattern is kept lower-cased."""

    exact: str | None = None
    prefix: str | None = None
    suffix: str | None = None
    regex: SafeRegex | None = None

    def matches(self, origin: str) -> bool:
        if self.regex is not None:
            return self.regex.fullmatch(origin)
        if self.exact is not None:
            return origin == self.exact
        if self.prefix is not None:
            return origin.startswith(self.prefix)
        return self.suffix is not None and origin.endswith(self.suffix)


@attrs.frozen
class CsrfPolicy:
    """Envoy's CSRF filter: percent of requests enforced and shadowed."""

    enabled: float = 0.0
    shadow: float = 0.0
    origins: tuple[OriginMatcher, ...] = ()


_DENOMINATORS = {"HUNDRED": 100.0, "TEN_THOUSAND": 10_000.0, "MILLION": 1_000_000.0}


def _fraction(r: FieldReader, value: Any, path: Path) -> float:
    """A RuntimeFractionalPercent as a percentage 0..100 (the runtime key is
    informational: twistgw has no runtime layer)."""
    m = r.mapping(value, path, {"defaultValue", "runtimeKey"}, required=("defaultValue",))
    if "runtimeKey" in m:
        r.string(m["runtimeKey"], path + ("runtimeKey",))
    d = r.mapping(m["defaultValue"], path + ("defaultValue",), {"numerator", "denominator"})
    num = r.integer(d.get("numerator", 0), path + ("defaultValue", "numerator"), 0)
    den = r.choice(d.get("denominator", "HUNDRED"), path + ("defaultValue", "denominator"), _DENOMINATORS)
    return min(100.0, num * 100.0 / _DENOMINATORS[den])


def _regex(r: FieldReader, value: Any, path: Path) -> SafeRegex:
    try:
        return SafeRegex(r.string(value, path), max_program_size=None)
    except UnsafePattern as exc:
        raise r.fail(path, str(exc)) from None


#: what a ``host[:port]`` may hold (lower-case): a pattern with anything
#: else (a scheme, a path, ``@``) can never match
_ORIGIN_CHARS = re.compile(r"[a-z0-9._:\[\]-]*")


def _origin_matcher(r: FieldReader, value: Any, path: Path) -> OriginMatcher:
    m = r.mapping(value, path, {"exact", "prefix", "suffix", "safeRegex", "ignoreCase"})
    kinds = [k for k in ("exact", "prefix", "suffix", "safeRegex") if k in m]
    if len(kinds) != 1:
        raise r.fail(path, "set exactly one of exact, prefix, suffix or safeRegex")
    ignore = r.boolean(m["ignoreCase"], path + ("ignoreCase",)) if m.get("ignoreCase") is not None else False
    kind = kinds[0]
    if kind == "safeRegex":
        if ignore:
            raise r.fail(path + ("ignoreCase",), "has no effect on safeRegex (Envoy refuses it too); the host is"
                         " matched in lower case: write the regex for lower-case hosts")
        sr = r.mapping(m["safeRegex"], path + ("safeRegex",), {"regex"}, required=("regex",))
        rx = _regex(r, sr["regex"], path + ("safeRegex", "regex"))
        if "://" in rx.pattern or "@" in rx.pattern:
            raise r.fail(path + ("safeRegex", "regex"), _ORIGIN_NOTE % rx.pattern)
        return OriginMatcher(regex=rx)
    text = r.string(m[kind], path + (kind,))
    pattern = text.lower() if ignore else text
    if not _ORIGIN_CHARS.fullmatch(pattern):
        reason = _ORIGIN_NOTE % text
        if _ORIGIN_CHARS.fullmatch(text.lower()):
            reason = (f"{text!r} can never match: the host is compared in lower case; write it in lower case"
                      " or set ignoreCase: true")
        raise r.fail(path + (kind,), reason)
    if kind == "exact":
        return OriginMatcher(exact=pattern)
    return OriginMatcher(prefix=pattern) if kind == "prefix" else OriginMatcher(suffix=pattern)


_ORIGIN_NOTE = ("additionalOrigins is matched against the origin's host and port (partner.example,"
                " partner.example:8443), never its scheme or a path: %r can never match")


def read_csrf(r: FieldReader, value: Any, path: Path, ns: str) -> CsrfPolicy:
    m = r.mapping(value, path, {"filterEnabled", "shadowEnabled", "additionalOrigins"})
    if "filterEnabled" not in m and "shadowEnabled" not in m:
        raise r.fail(path, "set filterEnabled (enforce) or shadowEnabled (only count): with neither the"
                     " filter does nothing")
    enabled = _fraction(r, m["filterEnabled"], path + ("filterEnabled",)) if "filterEnabled" in m else 0.0
    shadow = _fraction(r, m["shadowEnabled"], path + ("shadowEnabled",)) if "shadowEnabled" in m else 0.0
    origins = tuple(_origin_matcher(r, v, path + ("additionalOrigins", i)) for i, v in
                    enumerate(r.sequence(m.get("additionalOrigins") or [], path + ("additionalOrigins",))))
    return CsrfPolicy(enabled, shadow, origins)
