"""The ``ldap`` AuthConfig config type: compiles ``spec.configs[i].ldap``
into an :class:`LdapChecker` and owns what outlives one configuration (the
pools, caches and memos in :class:`State`, the development directory)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from twisted.internet import defer
from twistgw.sdk import GatewayInfo, OptionsError
from twistgw_extauth import ConfigScope, ExtAuthChecker, ExtAuthConfigType

from twistgw_ldap._devdir import DevDirectory, DevDirectoryError, check_settings
from twistgw_ldap._flow import LdapChecker
from twistgw_ldap._options import compile_ldap
from twistgw_ldap._state import State

_AUTHORIZATION = (b"authorization",)


class LdapConfigType(ExtAuthConfigType):
    """One per gateway (the ``twistgw_ldap`` plugin object makes it)."""

    name = "ldap"
    settings_fields = ("devDirectory",)
    description = "LDAP: Basic credentials bound against a directory, group membership authorization"

    def __init__(self) -> None:
        self.state = State()
        self.dev_directory = DevDirectory()
        #: the configuration directory (for devDirectory.ldif)
        self.config_dir = ""
        #: ``twistgw explain`` without ``--live``: no pools, bind nothing
        self.dry_run = False
        #: False under ``twistgw explain``: never start the development directory
        self.may_listen = True

    def compile(self, raw: Any, scope: ConfigScope) -> LdapChecker:
        if scope.config_dir:
            self.config_dir = scope.config_dir
        cfg = compile_ldap(raw, scope)
        owned = frozenset(h for h in (cfg.groups_header, cfg.user_header) if h)
        return LdapChecker(cfg, self.state, () if cfg.keep_credentials else _AUTHORIZATION, owned)

    def check_settings(self, settings: Mapping[str, Any], config_dir: str) -> None:
        """``Settings.spec.extauth.devDirectory``, including an LDIF file
        it could not serve."""
        if config_dir:
            self.config_dir = config_dir
        try:
            check_settings(settings, config_dir)
        except DevDirectoryError as exc:
            raise OptionsError(exc.path, str(exc)) from None

    def configure(self, gateway: GatewayInfo) -> None:
        self.state.reactor = gateway.reactor
        self.dry_run, self.may_listen = gateway.dry_run, gateway.may_listen

    def config_loaded(self, checkers: Sequence[ExtAuthChecker], settings: Mapping[str, Any]) -> Any:
        if self.dry_run:
            return None
        self.state.config_loaded(c.cfg for c in checkers if isinstance(c, LdapChecker))
        if not self.may_listen:
            return None
        return defer.Deferred.fromCoroutine(
            self.dev_directory.apply(self.state.get_reactor(), settings, self.config_dir))

    def unconfigure(self) -> Any:
        self.state.close()
        return defer.Deferred.fromCoroutine(self.dev_directory.stop())
