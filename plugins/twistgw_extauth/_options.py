"""Compiling ``options.extauth``: the AuthConfig it names (or an inline
config such as Gloo's ``customAuth``), each config entry by its config
type, the entries' names and the ``booleanExpr`` over them.

Pure: no network I/O, no reactor. The result is immutable.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

import attrs
from twistgw.api.extauth import relocate
from twistgw.api.headers import canonical_name
from twistgw.api.types import InvalidResource
from twistgw.api.fields import Problems, type_name
from twistgw.api.headers import is_token

from twistgw import AuthConfigInfo, ConfigScope, ConfigWarning, ExtAuthConfigType, OptionsError, OptionsScope
from twistgw_extauth._expr import NAME, ExprError, Node, admits_with_no_config_admitting, parse, references
from twistgw_extauth._settings import NO_POLICY, ErrorPolicy
from twistgw_extauth._types import Registry, TypeProblem


@attrs.frozen
class Entry:
    """One compiled config: ``spec.configs[i]``, or an inline config."""

    name: str  # spec.configs[i].name, config_<i>, or the inline type's name
    type_name: str
    source: str  # "AuthConfig ns/name: spec.configs[i].ldap"
    checker: Any = attrs.field(eq=False)  # the config type's ExtAuthChecker (its own class)
    #: the checker's ``check``, looked up once (called on every request)
    check: Callable[[Any], Any] = attrs.field(eq=False, repr=False)


@attrs.frozen
class CompiledExtAuth:
    """What ``twistgw_compile_options`` returns for ``extauth``."""

    auth_config: str  # namespace/name ("" inline)
    entries: tuple[Entry, ...]
    #: the parsed booleanExpr; None: every config must admit, in order
    expression: Node | None = None
    #: Settings spec.extauth's requestTimeout/failureModeAllow/statusOnError
    on_error: ErrorPolicy = NO_POLICY
    #: the request headers of credentials some config consumed (lower case):
    #: removed before forwarding whenever the check admits
    credential_headers: tuple[bytes, ...] = ()
    #: every config's owned headers (twistgw.OwnsRequestHeaders)
    owned_request_headers: frozenset[bytes] = frozenset()
    #: the booleanExpr as written, for explain
    expression_text: str = ""
    #: per snapshot, for the per-request path: the one config's ``check``
    #: when the AuthConfig has one config and no booleanExpr (the plugin
    #: calls it directly), else None
    single: Callable[[Any], Any] | None = attrs.field(default=None, eq=False, repr=False)
    #: :attr:`credential_headers` in the headers' canonical form (removed
    #: without re-spelling the names on every request)
    credential_canonical: tuple[bytes, ...] = ()
    #: the first entry's name (the one config's, for ``_flow.admit_one``)
    first_name: str = attrs.field(eq=False, repr=False, default=attrs.Factory(
        lambda self: self.entries[0].name if self.entries else "", takes_self=True))


def _header_names(names: Any, what: str, source: str) -> set[bytes]:
    out = set()
    for name in names or ():
        if isinstance(name, str):
            name = name.encode("ascii", "replace")
        if not isinstance(name, bytes) or not name or not is_token(name.decode("latin-1")):
            raise OptionsError((), f"{source}: the config type gave an invalid {what} name {name!r}")
        out.add(name.lower())
    return out


def _entry(kind: ExtAuthConfigType, raw: Any, scope: ConfigScope) -> Entry:
    """One entry compiled by its type, every problem located in the AuthConfig."""
    try:
        checker = kind.compile(raw, scope)
    except OptionsError as exc:
        raise relocate(exc, scope) from exc
    except InvalidResource:
        raise
    except KeyError as exc:  # a lookup the type did not turn into an OptionsError
        raise scope.error((), f"dangling reference: {exc.args[0] if exc.args else exc}") from exc
    check = getattr(checker, "check", None)
    if not callable(check):
        raise scope.error((), f"the {kind.name} config type returned {checker!r}, which has no check(ctx)")
    return Entry(scope.config_name, kind.name, scope.source, checker, check)


def _reference(r: Problems, ref: Any, scope: OptionsScope) -> AuthConfigInfo:
    name, ns = r.reference(ref, ("configRef",), scope.namespace)
    try:
        return scope.resources.auth_config(name, ns)
    except KeyError as exc:
        raise r.fail(("configRef",), f"dangling reference: {exc.args[0]}") from exc


def compile_options(options: Mapping[str, Any], scope: OptionsScope, registry: Registry,
                    policy: ErrorPolicy, settings: Mapping[str, Any] | None = None) -> CompiledExtAuth:
    """The body of ``twistgw_compile_options`` for ``extauth``; ``settings``:
    ``Settings.spec.extauth`` as :func:`~._settings.read_section` read it."""
    r = Problems()
    try:
        types = registry.types()
    except TypeProblem as exc:
        raise r.fail((), str(exc)) from None
    inline_names = registry.names("inline")
    f = r.fields(options, (), ("configRef", *inline_names))
    r.raise_if_any()
    inline = [k for k in f if k in inline_names]
    if len(inline) + ("configRef" in f) != 1:
        raise r.fail(("configRef",), "is required: {configRef: {name: NAME, namespace: NS}}"
                     if not inline else f"set one of configRef, {', '.join(inline)}")
    if inline:
        kind = types[inline[0]]
        where = ConfigScope(scope, scope.namespace, None, kind.name, 0, None, (kind.name,), settings)
        return _compiled("", (_entry(kind, f[kind.name], where),), None, "", policy)
    return _from_auth_config(_reference(r, f["configRef"], scope), scope, types, policy, settings)


def _from_auth_config(info: AuthConfigInfo, scope: OptionsScope, types: Mapping[str, ExtAuthConfigType],
                      policy: ErrorPolicy, settings: Mapping[str, Any] | None) -> CompiledExtAuth:
    resource = ("AuthConfig", info.namespace, info.name)
    problems = Problems()
    entries: list[Entry] = []
    names: dict[str, int] = {}
    for i, raw in enumerate(info.configs):
        with problems.check():
            entry = _entry_fields(problems, raw, i, types, resource)
            name = _config_name(problems, entry, i, names, resource)
            names[name] = i
            kind_name = _type_of(problems, entry, i, types, resource)
            where = ConfigScope(scope, info.namespace, info, name, i, resource, ("spec", "configs", i, kind_name),
                                settings)
            entries.append(_entry(types[kind_name], entry[kind_name], where))
    with problems.check():
        _unread_fields(problems, info, [types[e.type_name] for e in entries], resource)
    expression = None
    if info.boolean_expr is not None and len(names) == len(info.configs):
        with problems.check():
            expression = _expression(problems, info, names, resource)
    problems.raise_if_any()
    return _compiled(f"{info.namespace}/{info.name}", tuple(entries), expression, info.boolean_expr or "", policy)


def _entry_fields(r: Problems, raw: Any, index: int, types: Mapping[str, ExtAuthConfigType],
                  resource: tuple[str, str, str]) -> Any:
    """``spec.configs[i]`` with its type under the type's name, however it is
    written (``api_key_auth``: protobuf's proto name of ``apiKeyAuth``);
    problems located in the AuthConfig."""
    if not isinstance(raw, Mapping):
        return raw
    here = Problems()
    entry = here.mapping(raw, ("spec", "configs", index), names=(*types, "name"))
    for e in here.errors:
        r.add(e.path, e.reason, resource)
    if here.errors:
        raise r.invalid()
    return entry


def _compiled(auth_config: str, entries: tuple[Entry, ...], expression: Node | None, text: str,
              policy: ErrorPolicy) -> CompiledExtAuth:
    credentials: set[bytes] = set()
    owned: set[bytes] = set()
    for e in entries:
        credentials |= _header_names(getattr(e.checker, "credential_headers", ()), "credential header", e.source)
        owned |= _header_names(getattr(e.checker, "owned_request_headers", ()), "owned header", e.source)
    if policy.user_id_header is not None:
        owned.add(policy.user_id_header)  # only the admission writes it: a client's copy never gets through
    names = tuple(sorted(credentials))
    single = entries[0].check if len(entries) == 1 and expression is None else None
    return CompiledExtAuth(auth_config, entries, expression, policy, names, frozenset(owned), text, single,
                           tuple(canonical_name(n) for n in names))


def _type_of(r: Problems, raw: Any, index: int, types: Mapping[str, ExtAuthConfigType],
             resource: tuple[str, str, str]) -> str:
    here = ("spec", "configs", index)
    if not isinstance(raw, Mapping):
        raise r.fail(here, f"must be a mapping with one config type, got {type_name(raw)}", resource)
    written = [k for k in raw if k != "name"]
    installed = ", ".join(n for n, t in sorted(types.items()) if t.where == "authConfig") or "none"
    if len(written) != 1:
        raise r.fail(here, f"must hold exactly one config type (installed: {installed}),"
                           f" got {', '.join(map(str, written)) or 'none'}", resource)
    kind = written[0]
    if kind not in types or types[kind].where != "authConfig":
        inline = " (it is written in options.extauth, not in an AuthConfig)" if kind in types else ""
        raise r.fail(here + (str(kind),), f"{kind!r} is not an AuthConfig config type any installed"
                           f" plugin provides{inline} (installed: {installed})", resource)
    return str(kind)


def _config_name(r: Problems, raw: Any, index: int, seen: Mapping[str, int], resource: tuple[str, str, str]) -> str:
    """``spec.configs[i].name``, or Gloo's generated ``config_<i>``."""
    name = raw.get("name", f"config_{index}") if isinstance(raw, Mapping) else f"config_{index}"
    where = ("spec", "configs", index, "name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise r.fail(where, "must be a name of letters, digits, '_', '-' and '.', starting with a"
                           f" letter or '_'; got {name!r}", resource)
    if name in seen:
        raise r.fail(where, f"{name!r} is also the name of spec.configs[{seen[name]}]", resource)
    return name


def _unread_fields(r: Problems, info: AuthConfigInfo, kinds: list[ExtAuthConfigType],
                   resource: tuple[str, str, str]) -> None:
    if info.fail_on_redirect is None:
        return
    if not any("failOnRedirect" in getattr(k, "auth_config_fields", ()) for k in kinds):
        raise r.fail(("spec", "failOnRedirect"), "applies to OAuth2/OIDC redirects and no config of this"
                           " AuthConfig redirects, so there is nothing for it to do: remove it", resource)


def _expression(r: Problems, info: AuthConfigInfo, names: Mapping[str, int], resource: tuple[str, str, str]) -> Node:
    text = info.boolean_expr or ""
    where = ("spec", "booleanExpr")
    try:
        expression = parse(text, names)
    except ExprError as exc:
        raise r.fail(where, f"{text!r}: {exc}", resource) from None
    unused = [n for n, i in names.items() if i not in references(expression)]
    if unused:
        raise r.fail(where, f"does not use the config(s) {', '.join(unused)}; use them in it or"
                           " remove them", resource)
    if admits_with_no_config_admitting(expression):
        warnings.warn(f"AuthConfig {info.namespace}/{info.name}: spec.booleanExpr {text!r} is true when every"
                      " config refuses, so it admits requests that no config authenticated (no or wrong"
                      " credentials); such a request is forwarded with no principal", ConfigWarning,
                      stacklevel=2)
    return expression
