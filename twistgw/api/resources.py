"""What plugins may look up at configuration time: upstreams, Secrets,
AuthConfigs and any other resource, through :class:`ResourceView`, and the
:class:`OptionsScope` a plugin's options are compiled in.

Everything here is re-exported from :mod:`twistgw.api.types` and
:mod:`twistgw`; import it from there.
"""

from __future__ import annotations

from typing import Any, Mapping, NoReturn

import attrs

from twistgw.api.upstreampolicy import CircuitBreakers, ConnectionConfig, Http2Settings, UpstreamTls

__all__ = ["AuthConfigInfo", "Endpoint", "InvalidResource", "OptionsScope", "ResourceView", "SecretInfo",
           "UpstreamInfo"]


@attrs.frozen
class Endpoint:
    """One network address of an upstream."""

    host: str
    port: int


@attrs.frozen
class UpstreamInfo:
    """A resolved upstream: its name and the addresses traffic goes to."""

    namespace: str
    name: str
    endpoints: tuple[Endpoint, ...]
    #: the subset a route chose (``single.subset.values``, as sorted (key,
    #: value) pairs): ``endpoints`` are then that subset's (or the fallback's)
    subset: tuple[tuple[str, str], ...] = ()
    #: TLS to the endpoints (``sslConfig``); None: plain HTTP
    tls: UpstreamTls | None = None
    #: ``circuitBreakers``; None: no limits (nothing counted)
    breakers: CircuitBreakers | None = None
    #: ``connectionConfig``; None: the gateway's connection defaults
    connection: ConnectionConfig | None = None
    #: HTTP/2 to the endpoints (``useHttp2``, or a discovered Service port
    #: that speaks it); None: HTTP/1.1
    http2: Http2Settings | None = None


@attrs.frozen
class SecretInfo:
    """A Secret's decoded data: ``data`` maps each key (``str``) to ``bytes``
    (``data`` values base64-decoded, ``stringData`` values UTF-8 encoded);
    compare keys with ``hmac.compare_digest`` on bytes."""

    namespace: str
    name: str
    type: str
    data: Mapping[str, bytes]
    #: ``metadata.labels`` (Gloo's apiKeyAuth picks Secrets by label)
    labels: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class AuthConfigInfo:
    """An ``AuthConfig``: its ``spec.configs`` list as plain data, and Gloo's
    ``booleanExpr`` / ``failOnRedirect`` when written (the plugin decides
    what they mean, or rejects them)."""

    namespace: str
    name: str
    configs: tuple[Mapping[str, Any], ...]
    boolean_expr: str | None = None
    fail_on_redirect: bool | None = None


@attrs.frozen
class OptionsScope:
    """Where a plugin's options were written, and what they may refer to.

    Passed to ``twistgw_compile_options``.

    :ivar namespace: the namespace of the VirtualService (the default for
        references that omit ``namespace``).
    :ivar virtual_service: ``namespace/name`` of the VirtualService.
    :ivar route: the route's name (``routes[2]`` when unnamed), or ``None``
        for the virtual-host level.
    :ivar resources: lookups into the same configuration snapshot.
    :ivar host_options: the virtual host's ``options`` mapping as written
        (every key), for a plugin whose route options may add to the
        host's rather than replace them (Gloo's ``includeVhRateLimits``).
    """

    namespace: str
    virtual_service: str
    route: str | None
    resources: "ResourceView"
    host_options: Mapping[str, Any] = attrs.field(factory=dict)


class InvalidResource(KeyError):
    """Raised by :class:`ResourceView` for a resource that is declared but
    invalid. Its problems are reported where it is written; a plugin that
    turns this into an OptionsError (as it would a missing resource) is not
    reported a second time."""


class ResourceView:
    """Read-only lookups a plugin may do while compiling its options.

    Each lookup raises :class:`OptionsError`-friendly ``KeyError`` with a
    readable message when the resource does not exist.
    """

    def __init__(
        self,
        upstreams: Mapping[tuple[str, str], UpstreamInfo],
        secrets: Mapping[tuple[str, str], SecretInfo],
        auth_configs: Mapping[tuple[str, str], AuthConfigInfo],
        kube_resolver: Any,
        settings: Mapping[str, Any] | None = None,
        config_dir: str = "",
        invalid: Any = frozenset(),
        resources: Mapping[str, Mapping[tuple[str, str], object]] | None = None,
    ) -> None:
        #: every resource read, by kind, then (namespace, name)
        self._resources = resources or {}
        #: (kind, namespace, name) of resources declared but invalid
        self._invalid = invalid
        self._settings = settings or {}
        #: absolute path of the configuration directory ("" when loaded from text);
        #: resolve relative file names in options against it.
        self.config_dir = config_dir
        self._upstreams = upstreams
        self._secrets = secrets
        self._auth_configs = auth_configs
        self._kube_resolver = kube_resolver

    def upstream(self, name: str, namespace: str = "default") -> UpstreamInfo:
        try:
            return self._upstreams[(namespace, name)]
        except KeyError:
            self._missing("Upstream", namespace, name)

    def kube_service(self, name: str, namespace: str, port: int) -> UpstreamInfo:
        """Resolve a Kubernetes ``Service`` port to its endpoint addresses."""
        info: UpstreamInfo = self._kube_resolver(name, namespace, port)
        return info

    def secret(self, name: str, namespace: str = "default") -> SecretInfo:
        try:
            return self._secrets[(namespace, name)]
        except KeyError:
            self._missing("Secret", namespace, name)

    def secrets(self, namespace: str | None = None) -> tuple[SecretInfo, ...]:
        """Every Secret (of ``namespace`` when given), in (namespace, name) order."""
        return tuple(s for key, s in sorted(self._secrets.items()) if namespace is None or key[0] == namespace)

    def resource(self, kind: str, name: str, namespace: str = "default") -> object:
        """Any resource read, by kind (a kind added to the configuration's
        table of kinds, such as ``RateLimitConfig``, is found here): the
        object its reader returned. One with problems of its own raises
        :class:`InvalidResource` (its problems are reported where it is
        written)."""
        if (kind, namespace, name) in self._invalid:
            self._missing(kind, namespace, name)
        try:
            return self._resources[kind][(namespace, name)]
        except KeyError:
            self._missing(kind, namespace, name)

    def resources(self, kind: str) -> Mapping[tuple[str, str], object]:
        """Every resource of ``kind`` read, keyed by (namespace, name)."""
        return self._resources.get(kind, {})

    def _missing(self, kind: str, namespace: str, name: str) -> NoReturn:
        if (kind, namespace, name) in self._invalid:
            raise InvalidResource(f"{kind} {namespace}/{name} is invalid (see its own errors)") from None
        raise KeyError(f"no {kind} {namespace}/{name}") from None

    def settings(self, plugin: str) -> Mapping[str, Any]:
        """The gateway-wide ``Settings.spec.<plugin>`` section ({} if absent)."""
        return self._settings.get(plugin) or {}

    def auth_config(self, name: str, namespace: str = "default") -> AuthConfigInfo:
        try:
            return self._auth_configs[(namespace, name)]
        except KeyError:
            self._missing("AuthConfig", namespace, name)


