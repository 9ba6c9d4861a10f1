"""The ``oauth2`` AuthConfig config type: OpenID Connect login
(``oidcAuthorizationCode``) and OAuth2 access-token validation
(``accessTokenValidation``), with Gloo's field names.

It is added to the ``extauth`` plugin through ``twistgw_extauth_config_types``
(the entry point ``oidc = "twistgw_oidc:OidcPlugin"``)::

    apiVersion: enterprise.gloo.solo.io/v1
    kind: AuthConfig
    spec:
      configs:
      - oauth2:
          oidcAuthorizationCode: {issuerUrl: ..., clientId: ..., appUrl: ..., callbackPath: /callback, ...}

See ``docs/oidc.md``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from twistgw import Commands, ConfigScope, ExtAuthConfigType, GatewayInfo, hookimpl
from twistgw.api.fields import Problems
from twistgw_oidc._access import AccessTokenChecker
from twistgw_oidc._compile import ATV_FIELDS, ATV_REFUSED, OIDC_FIELDS, OIDC_REFUSED, compile_access_token, compile_oidc
from twistgw_oidc._flow import OidcChecker
from twistgw_oidc._options import check_entry
from twistgw_oidc._provider import UrlKeySet
from twistgw_oidc._runtime import Runtime
from twistgw_oidc._session import CookieStore, RedisStore

__all__ = ["AccessTokenChecker", "OAuth2Type", "OidcChecker", "OidcPlugin"]


class OAuth2Type(ExtAuthConfigType):
    name = "oauth2"
    description = "OpenID Connect login (authorization code + PKCE) and OAuth2 access-token validation"
    #: AuthConfig fields this type gives a meaning to (the extauth plugin refuses them otherwise)
    auth_config_fields = ("failOnRedirect",)

    def __init__(self) -> None:
        self.runtime = Runtime()
        self.dry_run = False

    def configure(self, gateway: GatewayInfo) -> None:
        self.runtime.reactor = gateway.reactor
        self.dry_run = gateway.dry_run

    def compile(self, raw: Any, scope: ConfigScope) -> Any:
        problems = Problems()
        kind, body = check_entry(problems, raw)
        fail_on_redirect = bool(scope.auth_config.fail_on_redirect) if scope.auth_config is not None else False
        if kind == "oidcAuthorizationCode":
            f = problems.fields(body, (kind,), OIDC_FIELDS, refused=OIDC_REFUSED)
            spec = compile_oidc(f, scope.source, scope.namespace, scope.secret, fail_on_redirect)
            problems.raise_if_any()
            assert spec is not None
            store: CookieStore | RedisStore = CookieStore(spec.session) if spec.session.kind == "cookie" \
                else RedisStore(spec.session, self.runtime.redis, self.runtime.get_reactor)
            owned = tuple(h for h in (spec.id_token_header, spec.access_token_header) if h is not None) \
                + tuple(c.header for c in spec.claims_to_headers)
            # the provider (discovery document, keys) is shared by every config naming it, across reloads,
            # while a compiled config holds it
            return OidcChecker(spec, self.runtime, self.runtime.discovery(spec), store, owned,
                               f"oauth2 OIDC login at {spec.issuer_url} (client {spec.client_id},"
                               f" {spec.session.kind} sessions)")
        f = problems.fields(body, (kind,), ATV_FIELDS, refused=ATV_REFUSED)
        at = compile_access_token(f, scope.source, scope.namespace, scope.secret)
        problems.raise_if_any()
        assert at is not None
        local = remote = None
        if at.jwt is not None:
            local = at.jwt.local_keys
            if at.jwt.remote_url is not None:
                remote = UrlKeySet(at.jwt.remote_url, self.runtime.client, self.runtime.now, at.jwt.refresh_interval,
                                   5.0, at.timeout)
        what = "introspection" if at.introspection_url else "JWT"
        return AccessTokenChecker(at, self.runtime, local, remote, tuple(c.header for c in at.claims_to_headers),
                                  f"oauth2 access token by {what}")

    def config_loaded(self, checkers: Sequence[Any], settings: Mapping[str, Any]) -> Any:
        """Fetch each provider's discovery document now, so the first login does not wait."""
        for checker in checkers:
            if isinstance(checker, OidcChecker):
                checker.provider.doc_now() or checker.provider.prefetch()
        return None

    def unconfigure(self) -> Any:
        from twisted.internet.defer import DeferredList

        return DeferredList(self.runtime.close(), consumeErrors=True)


class OidcPlugin:
    """The plugin: adds the ``oauth2`` config type to ``extauth``."""

    def __init__(self) -> None:
        self.type = OAuth2Type()

    @hookimpl
    def twistgw_extauth_config_types(self) -> list[ExtAuthConfigType]:
        return [self.type]

    @hookimpl
    def twistgw_add_commands(self, commands: Commands) -> None:
        from twistgw_oidc import _commands

        _commands.add_commands(commands)
