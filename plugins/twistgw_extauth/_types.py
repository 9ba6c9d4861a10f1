"""The AuthConfig config types the installed plugins provide
(``twistgw_extauth_config_types``, this plugin's own hook), collected once
per gateway."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from twistgw_extauth._contract import ExtAuthConfigType

#: Keys of ``options.extauth`` the plugin itself reads; an inline type may
#: not take one of these names.
OPTION_KEYS = frozenset({"configRef", "disable"})
_WHERE = ("authConfig", "inline")


class TypeProblem(Exception):
    """The installed config types cannot all be used (a duplicate name, an
    object that is not a config type). Reported on every configuration
    load, so ``twistgw check`` shows it."""


class Registry:
    """Config types by name.

    :param hook: the host's hook relay (``None`` when the plugin object was
        made outside a host: then only ``builtin`` types exist).
    :param builtin: types this plugin object serves whatever is installed
        (``twistgw_ldap.ExtAuthPlugin`` adds ``ldap`` this way).
    """

    def __init__(self, hook: Any, builtin: Iterable[ExtAuthConfigType] = ()) -> None:
        self._hook = hook
        self._builtin = tuple(builtin)
        self._types: dict[str, ExtAuthConfigType] | None = None
        self._problem: TypeProblem | None = None

    def _collect(self) -> dict[str, ExtAuthConfigType]:
        found: dict[str, ExtAuthConfigType] = {}
        answers: list[Any] = [self._builtin]
        collect = getattr(self._hook, "twistgw_extauth_config_types", None)  # None: made outside a host
        if collect is not None:
            answers += collect()
        for answer in answers:
            if answer is None:
                continue
            for item in answer:
                _check_type(item)
                seen = found.get(item.name)
                if seen is not None and type(seen) is not type(item):
                    raise TypeProblem(f"two plugins provide the AuthConfig config type {item.name!r}:"
                                      f" {_qualname(seen)} and {_qualname(item)}; uninstall one")
                found.setdefault(item.name, item)
        return found

    def types(self) -> Mapping[str, ExtAuthConfigType]:
        """Every config type by name.

        :raise TypeProblem: the same each time it is asked.
        """
        if self._problem is not None:
            raise self._problem
        if self._types is None:
            try:
                self._types = self._collect()
            except TypeProblem as problem:
                self._problem = problem
                raise
        return self._types

    def usable(self) -> Mapping[str, ExtAuthConfigType]:
        """:meth:`types`, or none when they have a problem (for lifecycle calls)."""
        try:
            return self.types()
        except TypeProblem:
            return {}

    def names(self, where: str) -> list[str]:
        return sorted(n for n, t in self.usable().items() if t.where == where)


def _qualname(item: object) -> str:
    cls = type(item)
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_type(item: Any) -> None:
    name = getattr(item, "name", None)
    if not isinstance(name, str) or not name or not name.isidentifier():
        raise TypeProblem(f"{_qualname(item)} is not an AuthConfig config type: its name must be a YAML key"
                          f" such as 'myAuth', got {name!r}")
    if not callable(getattr(item, "compile", None)):
        raise TypeProblem(f"config type {name!r} ({_qualname(item)}) has no compile(raw, scope) method")
    where = getattr(item, "where", "authConfig")
    if where not in _WHERE:
        raise TypeProblem(f"config type {name!r}: where must be 'authConfig' or 'inline', got {where!r}")
    if name == "name" or (where == "inline" and name in OPTION_KEYS):
        raise TypeProblem(f"config type {name!r} ({_qualname(item)}) takes a name the extauth plugin uses")
