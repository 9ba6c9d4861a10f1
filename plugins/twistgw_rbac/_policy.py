"""RBAC options: validation, compilation and evaluation (pure, no I/O).

Semantics (docs/rbac.md):

* a policy set admits when **any** policy matches;
* a policy matches when the method is one of ``permissions.methods`` (exact,
  case-sensitive; absent = any), the normalised path starts with
  ``permissions.pathPrefix`` (absent = any), and **any** principal matches;
* a principal matches when the claims were verified by its ``provider`` (if
  set) and **every** listed claim matches under its ``matcher``. A principal
  with no claims matches nothing.
"""

from __future__ import annotations

import enum
from typing import Any, Mapping

import attrs

from twistgw.api.fields import Path, Problems, type_name
from twistgw.api.headers import is_token
from twistgw.regex import DEFAULT_MAX_PROGRAM_SIZE, SafeRegex, UnsafePattern

# Method names are RFC 9110 tokens.


class Matcher(enum.Enum):
    EXACT_STRING = "EXACT_STRING"
    BOOLEAN = "BOOLEAN"
    LIST_CONTAINS = "LIST_CONTAINS"
    REGEX_MATCH = "REGEX_MATCH"


_MISSING = object()


@attrs.frozen
class ClaimRule:
    name: str  # as written in the configuration
    path: tuple[str, ...]  # the name split by the policy's nestedClaimDelimiter
    matcher: Matcher
    value: Any  # str, bool (BOOLEAN) or SafeRegex (REGEX_MATCH)

    def lookup(self, claims: Mapping[str, Any]) -> Any:
        path = self.path
        if len(path) == 1:  # a top-level claim, the usual case
            return claims.get(path[0], _MISSING) if isinstance(claims, dict) else _MISSING
        node: Any = claims
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return _MISSING
            node = node[part]
        return node

    def matches(self, claims: Mapping[str, Any]) -> bool:
        found = self.lookup(claims)
        m = self.matcher
        if m is Matcher.EXACT_STRING:
            # type() rather than isinstance: only a JSON string, never a
            # number, boolean, null, list or object, equals a string.
            return type(found) is str and found == self.value
        if m is Matcher.BOOLEAN:
            return type(found) is bool and found is self.value
        if m is Matcher.LIST_CONTAINS:
            if type(found) is list:
                return any(type(item) is str and item == self.value for item in found)
            if type(found) is str:  # space-separated, like OAuth's "scope"
                return self.value in found.split(" ")  # never matches a value with a space
            return False
        # REGEX_MATCH
        return type(found) is str and self.value.fullmatch(found)


@attrs.frozen
class Principal:
    index: int
    provider: str | None
    rules: tuple[ClaimRule, ...]

    def matches(self, claims: Mapping[str, Any], provider: str | None) -> bool:
        if not self.rules:
            return False
        if self.provider is not None and provider != self.provider:
            return False
        for rule in self.rules:  # a loop, not all(generator): per request
            if not rule.matches(claims):
                return False
        return True

    def why_not(self, claims: Mapping[str, Any], provider: str | None) -> str:
        """Why this principal does not match (names only, never claim values)."""
        if not self.rules:
            return f"principals[{self.index}] lists no claims (matches nothing)"
        if self.provider is not None and provider != self.provider:
            return (f"principals[{self.index}] requires provider {self.provider!r},"
                    f" token verified by {provider!r}")
        for rule in self.rules:
            if not rule.matches(claims):
                state = "missing" if rule.lookup(claims) is _MISSING else "does not match"
                return (f"principals[{self.index}] claim {rule.name!r} {state}"
                        f" ({rule.matcher.value})")
        return f"principals[{self.index}] matches"  # pragma: no cover


@attrs.frozen
class Verdict:
    allowed: bool
    reason: str


@attrs.frozen
class Policy:
    name: str
    methods: frozenset[str] | None
    path_prefix: str | None
    principals: tuple[Principal, ...]
    #: the verdict for each principal matching, built once rather than per request
    grants: tuple[Verdict, ...] = attrs.field(init=False, eq=False, repr=False)

    @grants.default
    def _grants(self) -> tuple[Verdict, ...]:
        return tuple(Verdict(True, f"policy {self.name!r} principals[{p.index}] matched")
                     for p in self.principals)

    def permits(self, method: str, path: str) -> bool:
        if self.methods is not None and method not in self.methods:
            return False
        return self.path_prefix is None or path.startswith(self.path_prefix)

    def grant(self, claims: Mapping[str, Any], provider: str | None) -> Verdict | None:
        """The verdict of the first principal that matches, if any."""
        for i, principal in enumerate(self.principals):
            if principal.matches(claims, provider):
                return self.grants[i]
        return None

    def why_not(self, method: str, path: str, claims: Mapping[str, Any], provider: str | None) -> str:
        if self.methods is not None and method not in self.methods:
            return f"method {method!r} not in {sorted(self.methods)}"
        if self.path_prefix is not None and not path.startswith(self.path_prefix):
            return f"path does not start with {self.path_prefix!r}"
        if not self.principals:
            return "no principals (matches nothing)"
        return "; ".join(p.why_not(claims, provider) for p in self.principals)


@attrs.frozen
class PolicySet:
    """The compiled ``rbac`` options of one virtual host or route."""

    policies: tuple[Policy, ...]
    shadow: bool = False
    #: set when these options come from ``Settings.spec.rbac.requireRbac``.
    required_by_settings: bool = False

    def evaluate(self, method: str, path: str, claims: Any, provider: str | None) -> Verdict:
        if not isinstance(claims, dict):
            return Verdict(False, "no verified JWT claims on the request (is the jwt plugin"
                                  " configured on this route, before rbac?)")
        for policy in self.policies:
            if policy.permits(method, path):
                granted = policy.grant(claims, provider)
                if granted is not None:
                    return granted
        if self.required_by_settings:
            return Verdict(False, "requireRbac is set gateway-wide and this route has no"
                                  " RBAC policy")
        if not self.policies:
            return Verdict(False, "no policies configured (an empty policy set denies all)")
        details = "; ".join(
            f"{p.name!r}: {p.why_not(method, path, claims, provider)}" for p in self.policies)
        return Verdict(False, f"no policy matched: {details}")


# ---------------------------------------------------------------------------
# Compilation
# ---------------------------------------------------------------------------

class _RequiredBySettings:
    """Marks the options ``twistgw_default_options`` makes for ``requireRbac``;
    not a YAML value, so a configuration cannot write it."""

    def __repr__(self) -> str:
        return "REQUIRED_BY_SETTINGS"


REQUIRED_BY_SETTINGS = _RequiredBySettings()


def compile_options(options: Mapping[str, Any], regex_limit: int = DEFAULT_MAX_PROGRAM_SIZE) -> PolicySet:
    """Validate and compile the ``rbac`` options mapping. Raises OptionsError
    carrying every problem found (see :class:`twistgw.api.fields.Problems`).

    :param regex_limit: the largest RE2 program size of a REGEX_MATCH pattern
        (``Settings.spec.gateway.regexMaxProgramSize``)."""
    r = Problems()
    required = options.get("_requiredBySettings") is REQUIRED_BY_SETTINGS
    f = r.fields(options, (), ("policies", "shadow", "disable") + (("_requiredBySettings",) if required else ()))
    shadow = f.boolean("shadow", False)
    if f.get("disable", False) is not False:
        # ``disable: true`` is handled by the gateway and never reaches us.
        r.issue(("disable",), f"must be true or false, got {type_name(f['disable'])}")
    compiled = []
    for name, value in f.fields("policies").items():
        with r.part():
            compiled.append(_policy(r, str(name), value, ("policies", str(name)), regex_limit))
    r.raise_if_any()
    return PolicySet(tuple(compiled), shadow, required)


def _policy(r: Problems, name: str, raw: Any, path: Path, regex_limit: int) -> Policy:
    policy = r.fields(raw, path, ("permissions", "principals", "nestedClaimDelimiter"), what="a policy")
    delimiter = policy.get("nestedClaimDelimiter")
    if delimiter is not None and not isinstance(delimiter, str):
        r.issue(path + ("nestedClaimDelimiter",), f"must be a string such as '.', got {type_name(delimiter)}")
        delimiter = None
    delimiter = delimiter or None
    methods: frozenset[str] | None = None
    prefix: str | None = None
    perms = policy.fields("permissions", ("methods", "pathPrefix"))
    with r.part():
        if perms.get("methods") is not None:
            methods = _methods(r, perms["methods"], perms.at("methods"))
    with r.part():
        if perms.get("pathPrefix") is not None:
            prefix = _path_prefix(r, perms["pathPrefix"], perms.at("pathPrefix"))
    principals = []
    for i, p in enumerate(policy.sequence("principals")):
        with r.part():
            principals.append(_principal(r, i, p, path + ("principals", i), delimiter, regex_limit))
    return Policy(name, methods, prefix, tuple(principals))


def _methods(r: Problems, raw: Any, path: Path) -> frozenset[str]:
    if not isinstance(raw, list):
        raise r.fail(path, f"must be a list of method names, got {type_name(raw)}")
    if not raw:
        raise r.fail(path, "an empty list would match no method; omit 'methods' to allow every method")
    for i, m in enumerate(raw):
        if not isinstance(m, str) or not is_token(m):
            raise r.fail(path + (i,), f"must be an HTTP method name such as GET, got {m!r}")
    return frozenset(raw)


def _path_prefix(r: Problems, raw: Any, path: Path) -> str:
    if not isinstance(raw, str):
        raise r.fail(path, f"must be a string starting with '/', got {type_name(raw)}")
    if not raw.startswith("/"):
        raise r.fail(path, f"must start with '/', got {raw!r}")
    # Requests are matched on their normalised path, so a prefix that is not
    # itself normal could never match what its author meant.
    if "//" in raw or "\\" in raw or "%" in raw or "#" in raw or "?" in raw:
        raise r.fail(path, f"{raw!r} is not a normalised path: it may not contain '//', '\\', '%'-escapes, '?'"
                     " or '#'")
    if any(seg in (".", "..") for seg in raw.split("/")):
        raise r.fail(path, f"{raw!r} is not a normalised path: it contains a '.' or '..' segment")
    return raw


def _principal(r: Problems, index: int, raw: Any, path: Path, delimiter: str | None, regex_limit: int) -> Principal:
    count = r.count()
    principal = r.mapping(raw, path, ("jwtPrincipal",), what="a principal")
    if "jwtPrincipal" not in principal:
        if r.count() > count:  # written, under another name (reported)
            raise r.invalid()
        raise r.fail(path + ("jwtPrincipal",), "a principal needs a jwtPrincipal")
    jpath = path + ("jwtPrincipal",)
    jwt = r.mapping(principal["jwtPrincipal"], jpath, ("claims", "provider", "matcher"))
    matcher_raw = jwt.get("matcher", "EXACT_STRING")
    try:
        matcher = Matcher(matcher_raw)
    except ValueError:
        raise r.fail(jpath + ("matcher",), f"unknown matcher {matcher_raw!r}; expected one"
                     f" of: {', '.join(m.value for m in Matcher)}") from None
    provider = jwt.get("provider")
    if provider is not None and (not isinstance(provider, str) or not provider):
        raise r.fail(jpath + ("provider",), f"must be the name of a jwt provider, got {provider!r}")
    claims = r.mapping(jwt.get("claims"), jpath + ("claims",), optional=True)
    rules = []
    for name, value in claims.items():
        cpath = jpath + ("claims", str(name))
        if not name:
            raise r.fail(cpath, "a claim name must be a non-empty string")
        parts = tuple(name.split(delimiter)) if delimiter else (name,)
        if not all(parts):
            raise r.fail(cpath, f"claim path {name!r} has an empty part between delimiters {delimiter!r}")
        rules.append(ClaimRule(name, parts, matcher, _claim_value(r, matcher, value, cpath, regex_limit)))
    return Principal(index, provider or None, tuple(rules))


def _claim_value(r: Problems, matcher: Matcher, value: Any, path: Path, regex_limit: int) -> Any:
    if matcher is Matcher.BOOLEAN:
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        raise r.fail(path, f"the BOOLEAN matcher needs true or false, got {value!r}")
    if not isinstance(value, str):
        raise r.fail(path, f"must be a string, got {type_name(value)} {value!r}; claims are compared as text"
                     f" under {matcher.value}, so quote the value in YAML (or use matcher BOOLEAN for true/false)")
    if matcher is Matcher.LIST_CONTAINS and not value:
        raise r.fail(path, "the LIST_CONTAINS value must be a non-empty list item")
    if matcher is Matcher.REGEX_MATCH:
        try:
            return SafeRegex(value, regex_limit)
        except UnsafePattern as exc:
            raise r.fail(path, f"REGEX_MATCH pattern {value!r} refused: {exc}") from None
    return value


# ---------------------------------------------------------------------------
# Gateway-wide settings (Settings.spec.rbac)
# ---------------------------------------------------------------------------


def settings_problem(settings: Mapping[str, Any]) -> tuple[Path, str] | None:
    """(field path, reason) of the first problem of ``Settings.spec.rbac``, or None."""
    r = Problems()
    f = r.fields(settings, (), ("requireRbac",))
    value = f.get("requireRbac", False)
    if not r.errors and not isinstance(value, bool):
        r.issue(("requireRbac",), f"must be true or false, got {type_name(value)} {value!r}")
    return (r.errors[0].path, r.errors[0].reason) if r.errors else None


def require_rbac(settings: Mapping[str, Any]) -> bool:
    """``Settings.spec.rbac.requireRbac`` (either spelling; checked by :func:`settings_problem`)."""
    return Problems().fields(settings, (), ("requireRbac",)).get("requireRbac") is True
