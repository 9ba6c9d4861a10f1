"""The request's per-plugin state: :class:`StateKey`, a typed key of
``RequestContext.state`` (re-exported by :mod:`twistgw.sdk`)."""

from __future__ import annotations

from typing import Any, Generic, MutableMapping, Protocol, TypeVar

__all__ = ["HasState", "StateKey"]


class HasState(Protocol):
    """What holds per-plugin state: a ``RequestContext``."""

    @property
    def state(self) -> MutableMapping[Any, Any]: ...


_T = TypeVar("_T")


class StateKey(Generic[_T]):
    """A typed key of :attr:`RequestContext.state`, the request's per-plugin
    state: what one plugin leaves on the request for itself or for the
    plugins after it (pytest's ``StashKey``). The plugin that owns the value
    makes the key once, at import, and exports it (or functions reading it)
    as its documented API; a reader imports the key from that plugin::

        CLAIMS: sdk.StateKey[VerifiedClaims] = sdk.StateKey("jwt", "claims")

        CLAIMS.set(ctx, VerifiedClaims(claims, provider))   # the jwt plugin
        found = CLAIMS.get(ctx)                             # rbac: None when unset

    Keys compare by identity, so two plugins never collide whatever they
    name them. ``ctx.state`` takes plain string keys too (a plugin's own
    name, for untyped values).

    :ivar plugin: the name of the plugin that owns the value.
    :ivar name: what the value is, for ``repr`` and debugging.
    """

    __slots__ = ("plugin", "name")

    def __init__(self, plugin: str, name: str) -> None:
        self.plugin = plugin
        self.name = name

    def get(self, ctx: HasState) -> _T | None:
        """The value on ``ctx``, or None when its plugin left none."""
        value: _T | None = ctx.state.get(self)
        return value

    def set(self, ctx: HasState, value: _T) -> None:
        """Leave ``value`` on ``ctx`` (replacing what was there)."""
        ctx.state[self] = value

    def __repr__(self) -> str:
        return f"StateKey({self.plugin!r}, {self.name!r})"
