"""AuthConfig config types: what a plugin implements to add one (``ldap``,
``apiKeyAuth``, ``basicAuth``, ``opaAuth``, ``passThroughAuth``, ``oauth2``,
or a team's own ``myAuth``) to the ``extauth`` plugin.

Everything here is re-exported from :mod:`twistgw`. The hook is
``twistgw_extauth_config_types`` (see :mod:`twistgw.hookspecs`); the guide with
a complete example is ``docs/plugins.md``, "AuthConfig config types".

The ``extauth`` plugin owns everything around the configs: ``options.extauth``
(``configRef``, ``disable``, ``customAuth``), finding the ``AuthConfig``,
``spec.configs[i].name``, running the configs in order (all must admit,
Gloo's rule) or Gloo's ``booleanExpr`` over them, the first denial's answer,
``Settings.spec.extauth``'s ``requestTimeout`` / ``failureModeAllow`` /
``statusOnError``, removing consumed credentials before forwarding, and what
``twistgw explain`` prints. A config type only validates its own entry and
answers for it, one request at a time.

A minimal type (a header must carry a fixed value)::

    import attrs, hmac, twistgw
    from twistgw.options import Problems

    @attrs.frozen
    class _Checker:
        header: bytes
        value: bytes
        credential_headers: tuple[bytes, ...]      # removed before forwarding

        def check(self, ctx):
            got = ctx.headers.getRawHeaders(self.header) or []
            if len(got) == 1 and hmac.compare_digest(got[0], self.value):
                return twistgw.AuthAllow(principal="robot", reason="token matches")
            return twistgw.AuthDeny(401, b"no entry", reason="token missing or wrong")

    class MyAuth(twistgw.ExtAuthConfigType):
        name = "myAuth"                        # spec.configs[i].myAuth

        def compile(self, raw, scope):
            r = Problems()                     # the gateway's field reader (docs/plugins.md)
            f = r.fields(raw, (), ("header", "secretRef"))
            header = f.header_name("header", "x-token").lower().encode("ascii")
            ref = f.reference("secretRef", scope.namespace)   # absent: "is required"
            r.raise_if_any()
            secret = scope.secret(ref.name, ref.namespace)    # KeyError: dangling
            return _Checker(header, secret.data["token"], (header,))

    class MyAuthPlugin:                        # entry point: myauth = "my_pkg:MyAuthPlugin"
        # (tests/extauth/headertoken.py is a complete, tested example)
        @twistgw.hookimpl
        def twistgw_extauth_config_types(self):
            return [MyAuth()]
"""

from __future__ import annotations

from typing import Any, Collection, Literal, Mapping, Protocol, Sequence, Union, runtime_checkable

import attrs

from twistgw.api.plugin import GatewayInfo
from twistgw.api.types import (
    AuthConfigInfo,
    OptionsError,
    OptionsScope,
    RequestContext,
    ResourceView,
    SecretInfo,
)

__all__ = [
    "CHECKER_DEFAULTS",
    "AuthAllow",
    "AuthDecision",
    "AuthDeny",
    "ConfigScope",
    "ConfigTypes",
    "ConfigWarning",
    "ExtAuthChecker",
    "ExtAuthConfigType",
    "relocate",
]


# --------------------------------------------------------------------------
# What one config answers for one request
# --------------------------------------------------------------------------


@attrs.frozen
class AuthAllow:
    """This config admits the request.

    :ivar principal: who the config authenticated (a user name, a key's
        owner, a token's subject), or None when it authenticated nobody (a
        policy that allows by path). When the whole AuthConfig admits, the
        first config (in the order they ran) that names one is the extauth
        plugin's identity (``ctx.identities["extauth"]``, and
        ``ctx.principal``, the access log's, unless a plugin earlier in the
        chain authenticated the request); every config's is kept in
        ``ctx.state["extauth"]["identities"]`` by config name.
    :ivar headers: request headers to set on the forwarded request,
        ``((b"x-user", b"alice"), ...)``, or to remove (value ``None``);
        applied only when the whole AuthConfig admits, in config order. Name
        every header you set in the checker's ``owned_request_headers`` so a
        client's copy never reaches the backend.
    :ivar reason: for logs and ``twistgw explain``; never sent.
    :ivar state: anything for the configs after this one and for later
        plugins, in ``ctx.state["extauth"]["state"][config name]`` as soon
        as this config admits (Gloo's shared state, ``readStateFromResponse``);
        None for nothing.
    :ivar claims: verified claims (an OIDC ID token's), or None. When the
        AuthConfig admits, the first admitting config with claims sets
        ``ctx.claims`` (a copy) and ``ctx.claims_provider`` (below), as the
        jwt plugin does: rbac and ``claimsToHeaders`` work on them.
    :ivar claims_provider: who verified ``claims`` (the issuer).
    :ivar response_headers: headers added to the client's response,
        ``((b"set-cookie", b"session=..."),)`` (Envoy ext_authz's
        ``response_headers_to_add``): whoever answers the admitted request
        (the upstream, or the gateway itself when a later plugin refuses)
        and only when the whole AuthConfig admits, in config order. Through
        :meth:`twistgw.RequestContext.add_response_header`: a framing or
        hop-by-hop name (``Content-Length``, ``Connection``...) fails the
        request (500), as any broken checker does.
    """

    principal: str | None = None
    headers: tuple[tuple[bytes, bytes | None], ...] = ()
    reason: str = ""
    state: Mapping[str, Any] | None = None
    claims: Mapping[str, Any] | None = None
    claims_provider: str | None = None
    response_headers: tuple[tuple[bytes, bytes], ...] = ()


@attrs.frozen
class AuthDeny:
    """This config refuses the request, or could not decide.

    A *decision* (``error=False``: no or wrong credentials, 401; not allowed,
    403) is the answer sent to the client when it ends the check, and counts
    as ``false`` in a ``booleanExpr``.

    An *error* (``error=True``: a dependency down or too slow, a service
    account that cannot log in, a policy that failed to evaluate) never
    counts as ``false``: it stops a ``booleanExpr``, and
    ``Settings.spec.extauth`` decides the answer (``failureModeAllow: true``
    admits, ``statusOnError`` replaces ``status``). Use 503 for "unavailable"
    and 500 for a configuration problem, and log what an operator must do.

    :ivar status: the HTTP status sent (a final status, 200-599).
    :ivar body: the response body, exactly these bytes.
    :ivar headers: response headers, ``((b"www-authenticate", b"Basic ..."),)``.
    :ivar content_type: sent with a non-empty body.
    :ivar reason: for logs and ``twistgw explain``; never sent.
    :ivar principal: who the config authenticated before refusing (a user
        whose password was right but who is in no allowed group: 403), or
        None. Only an authenticated identity may be named here: an
        expression such as ``!staff`` that admits a refused request names
        this principal, never a name the client merely typed.
    :ivar error: True for an error, False for a decision (above).
    """

    status: int
    body: bytes = b""
    headers: tuple[tuple[bytes, bytes], ...] = ()
    content_type: bytes = b"text/plain"
    reason: str = ""
    principal: str | None = None
    error: bool = False

    @classmethod
    def failure(cls, reason: str, status: int = 503) -> "AuthDeny":
        """An error (``error=True``) with an empty body: 503 when something
        the check needs is unavailable, 500 for a configuration problem."""
        return cls(status, b"", content_type=b"", reason=reason, error=True)


AuthDecision = Union[AuthAllow, AuthDeny]


# --------------------------------------------------------------------------
# The compiled config
# --------------------------------------------------------------------------


@runtime_checkable
class ExtAuthChecker(Protocol):
    """What :meth:`ExtAuthConfigType.compile` returns: one config entry,
    compiled. Keep it immutable (one object serves concurrent requests);
    state that changes (pools, caches) belongs to the config type object.

    Required:

    ``check(ctx) -> AuthDecision | Deferred[AuthDecision] | Awaitable[AuthDecision]``
        decide for one request. May be ``async def``. Return the decision as
        soon as it is known: a synchronous answer (from a cache) costs the
        gateway no Deferred. An exception fails the request closed (500,
        logged). Do not change ``ctx.headers`` or ``ctx.principal`` here:
        say it in :class:`AuthAllow`, the extauth plugin applies it when
        the whole AuthConfig admits.

    Optional attributes (the extauth plugin uses ``getattr`` defaults):

    ``owned_request_headers: Collection[str | bytes]`` (default ``()``)
        headers this config sets (:class:`twistgw.OwnsRequestHeaders`): the
        gateway removes a client's copies from every request.
    ``credential_headers: Collection[str | bytes]`` (default ``()``)
        the request headers holding credentials this config consumed
        (``authorization``, ``api-key``): removed from the forwarded request
        whenever the AuthConfig admits, ``failureModeAllow`` admissions
        included. Leave out what ``keepCredentials`` says to keep.
    ``dry_run(ctx) -> AuthDecision | NotChecked`` (default: ``NotChecked``
        saying the config was not run)
        ``twistgw explain`` without ``--live``: decide what can be decided
        from the request alone, say what would be asked otherwise, contact
        nothing. Synchronous. A ``NotChecked`` carries in ``headers`` what
        admitting would set on the forwarded request, as far as the request
        tells (the ``credential_headers`` are removed by the extauth plugin
        in a dry run as when the AuthConfig admits).
    ``description: str``
        one line for ``twistgw explain`` (default: the config's place).
    """

    def check(self, ctx: RequestContext) -> Any:
        """AuthDecision | Deferred[AuthDecision] | Awaitable[AuthDecision]
        (``Any``: a Protocol cannot name all three without forcing one)."""


#: The optional members of a checker, with the extauth plugin's defaults.
CHECKER_DEFAULTS: Mapping[str, Any] = {"owned_request_headers": (), "credential_headers": ()}


# --------------------------------------------------------------------------
# What a config type sees when it compiles an entry
# --------------------------------------------------------------------------


@attrs.frozen
class ConfigScope:
    """Where a config entry is written, and what it may refer to.

    Handed to :meth:`ExtAuthConfigType.compile`. Raise
    :class:`twistgw.OptionsError` with paths **relative to the entry**
    (``("headerName",)``, ``("apiKeySecretRefs", 2, "name")``): the extauth
    plugin locates them at ``spec.configs[i].<type name>.<path>`` of the
    AuthConfig, and the core adds its file and line. A problem inside a
    resource the entry refers to may carry its own ``resource=``; it is
    left as it is.

    :ivar options: the scope of the ``options.extauth`` that named the
        AuthConfig (virtual service, route, :class:`ResourceView`).
    :ivar namespace: the AuthConfig's namespace: the default namespace of
        references written in the entry.
    :ivar auth_config: the AuthConfig, or None for an entry written inline
        in ``options.extauth`` (Gloo's ``customAuth``).
    :ivar config_name: ``spec.configs[i].name``, or Gloo's ``config_<i>``
        (the name ``booleanExpr`` uses); the type name for an inline entry.
    :ivar index: ``i`` in ``spec.configs`` (0 for an inline entry).
    :ivar resource: ``("AuthConfig", namespace, name)``, or None inline.
    :ivar path: the entry's path from the top of ``resource``
        (``("spec", "configs", 0, "ldap")``), or from ``options.extauth``
        inline (``("customAuth",)``).
    """

    options: OptionsScope
    namespace: str
    auth_config: AuthConfigInfo | None
    config_name: str
    index: int
    resource: tuple[str, str, str] | None
    path: tuple[str | int, ...]
    #: ``Settings.spec.extauth`` as the extauth plugin read it (each field
    #: under its JSON name); None: as written
    extauth_settings: Mapping[str, Any] | None = None

    @property
    def resources(self) -> ResourceView:
        return self.options.resources

    @property
    def config_dir(self) -> str:
        """The configuration directory ("" when loaded from text): resolve
        relative file names against it."""
        return self.options.resources.config_dir

    @property
    def source(self) -> str:
        """``AuthConfig ns/name: spec.configs[0].ldap``, for reasons and logs."""
        from twistgw.api.types import path_text

        where = path_text(self.path)
        if self.resource is None:
            return f"{self.options.virtual_service} options.extauth.{where}"
        return f"{self.resource[0]} {self.resource[1]}/{self.resource[2]}: {where}"

    def settings(self) -> Mapping[str, Any]:
        """``Settings.spec.extauth`` ({} if absent), each field under its
        JSON name (``requestBody`` however it is written)."""
        if self.extauth_settings is not None:
            return self.extauth_settings
        return self.options.resources.settings("extauth")

    def secret(self, name: str, namespace: str | None = None) -> SecretInfo:
        """A Secret (``namespace`` defaults to the AuthConfig's).

        :raise KeyError: with a readable message (``no Secret ns/name``)."""
        return self.options.resources.secret(name, namespace or self.namespace)

    def config_map(self, name: str, namespace: str | None = None) -> Any:
        """A ``ConfigMap`` (``namespace`` defaults to the AuthConfig's), as
        the core's ResourceView gives it (``Any``: the core's own type).

        :raise KeyError: when there is none, or this gateway reads no
            ConfigMap resources."""
        namespace = namespace or self.namespace
        resources = self.options.resources
        lookup = getattr(resources, "config_map", None)
        if lookup is not None:
            return lookup(name, namespace)
        generic = getattr(resources, "resource", None)  # the core's lookup of any kind, where it has one
        if generic is not None:
            return generic("ConfigMap", name, namespace)
        raise KeyError(f"no ConfigMap {namespace}/{name}: this gateway version reads no ConfigMap resources")

    def error(self, path: Sequence[str | int] | str, reason: str) -> OptionsError:
        """An OptionsError at ``path`` below the entry, already located
        (same as raising ``OptionsError(path, reason)`` from ``compile``)."""
        return relocate(OptionsError(path, reason), self)


class ConfigWarning(UserWarning):
    """A configuration the gateway serves, but probably not as its author
    meant (a ``booleanExpr`` that admits requests no config
    authenticated). Give it with ``warnings.warn(msg, twistgw.ConfigWarning)``
    while compiling: ``twistgw check`` prints it as ``warning: ...`` and
    exits 0; the gateway logs it."""


def relocate(error: OptionsError, scope: ConfigScope) -> OptionsError:
    """``error`` (paths relative to the entry) located in the AuthConfig:
    each problem without a ``resource`` of its own gets ``scope.path``
    prefixed and ``scope.resource``. Used by the extauth plugin."""
    moved = [p if p.resource is not None else OptionsError(scope.path + p.path, p.reason, scope.resource)
             for p in error.problems]
    return moved[0] if len(moved) == 1 else OptionsError.several(moved)


# --------------------------------------------------------------------------
# The config type
# --------------------------------------------------------------------------


class ExtAuthConfigType:
    """One AuthConfig config type. Subclass it (the defaults below are
    no-ops) and return an instance from ``twistgw_extauth_config_types``.

    One instance per gateway (return a new one from each call of the hook
    on a plugin *class* instance, or keep it on ``self``): it holds the
    type's state that outlives one configuration (connection pools,
    caches), kept across reloads.

    :cvar name: the YAML key: ``spec.configs[i].<name>`` (``"ldap"``,
        ``"apiKeyAuth"``, ``"myAuth"``). Two plugins may not provide the
        same name.
    :cvar where: ``"authConfig"`` (written in an AuthConfig's
        ``spec.configs``), or ``"inline"``: written directly as
        ``options.extauth.<name>`` on a virtual host or route, as Gloo's
        ``customAuth``.
    :cvar settings_fields: keys of ``Settings.spec.extauth`` this type
        reads (``devDirectory`` for ``ldap``); others are refused as unknown.
    :cvar auth_config_fields: fields of the AuthConfig's ``spec`` beside
        ``configs`` and ``booleanExpr`` that this type reads from
        ``scope.auth_config`` (``("failOnRedirect",)`` for ``oauth2``);
        written in an AuthConfig with no config of such a type, they are
        refused (nothing accepted and ignored).
    :cvar description: one line for ``twistgw plugins`` and the docs.
    """

    name: str = ""
    where: Literal["authConfig", "inline"] = "authConfig"
    settings_fields: Collection[str] = ()
    auth_config_fields: Collection[str] = ()
    description: str = ""

    def compile(self, raw: Any, scope: ConfigScope) -> ExtAuthChecker:
        """Validate one entry (``raw`` is the YAML value under the type's
        key, usually a mapping; check its type) and compile it. Pure: no
        network I/O, no reactor. Runs at every load and under ``twistgw
        check``.

        :raise twistgw.OptionsError: paths relative to the entry; report
            every problem at once (``twistgw.options.Problems``). A
            ``KeyError`` from a ``scope`` lookup is yours to turn into an
            OptionsError (``dangling reference: ...``).
        """
        raise NotImplementedError(f"config type {self.name!r} does not implement compile")

    def check_settings(self, settings: Mapping[str, Any], config_dir: str) -> None:
        """Check this type's ``settings_fields`` of ``Settings.spec.extauth``
        at every load, whether or not a config uses the type.

        :raise twistgw.OptionsError: path below ``Settings.spec.extauth``.
        """

    def configure(self, gateway: GatewayInfo) -> None:
        """Once, at start-up (reactor, logger, ``dry_run``, ``may_listen``).
        ``twistgw check`` never calls it: ``compile`` must not need it."""

    def config_loaded(self, checkers: Sequence[ExtAuthChecker], settings: Mapping[str, Any]) -> Any:
        """A configuration is serving: ``checkers`` are every checker of this
        type in it (warm pools, drop the state of configs that are gone);
        ``settings`` is ``Settings.spec.extauth``. May return a Deferred
        (logged if it fails, not waited for). Not called in a dry run."""
        return None

    def unconfigure(self) -> Any:
        """At shutdown: close pools and timers. May return a Deferred."""
        return None


#: What a plugin's ``twistgw_extauth_config_types`` returns: config type
#: objects (instances of :class:`ExtAuthConfigType`, or anything with the
#: same attributes and ``compile``).
ConfigTypes = Sequence[ExtAuthConfigType]

