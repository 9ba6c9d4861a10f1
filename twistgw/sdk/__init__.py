"""The twistgw plugin SDK: the one package a plugin imports.

Everything a plugin needs is re-exported here; the machinery lives in the
gateway's own modules, which plugins never import (``tests/unit/test_sdk.py``
reads every shipped and example plugin's imports and fails when one does).
Write a plugin as::

    from twistgw import sdk

    @sdk.hookimpl
    def twistgw_compile_options(options, scope):
        problems = sdk.Problems()
        ...

and read the hooks in :mod:`twistgw.sdk.hookspecs`; test it with
:mod:`twistgw.sdk.testing`. The reference, generated from this package's
``__all__`` and docstrings, is ``docs/sdk.md``.
"""

from twistgw.api.b64 import b64decode_strict
from twistgw.api.basic import read_basic_credentials
from twistgw.api.bodies import BodyTooLarge, BoundedBody
from twistgw.api.commands import EXIT_INVALID, EXIT_OK, EXIT_USAGE, Commands, write_secret
from twistgw.api.counters import counter
from twistgw.api.durations import DURATION_UNITS, parse_duration
from twistgw.api.fields import REQUIRED, FieldReader, Fields, Invalid, Path, Problems, Ref, type_name, unknown_field
from twistgw.api.headers import OWNED_RESPONSE_HEADERS, Headers, InvalidHeaderName, canonical_name, is_token
from twistgw.api.http import (
    HttpBodyTooLarge,
    HttpClient,
    HttpError,
    HttpResponse,
    HttpTimeout,
    HttpTlsRefused,
    HttpUnreachable,
)
from twistgw.api.options import check_fields, is_kubernetes_name, loopback_problem, require_mapping
from twistgw.api.plugin import (
    DEFAULT_ORDER,
    GatewayInfo,
    HookRegistry,
    OwnsRequestHeaders,
    Placement,
    PluginInfo,
    StagedOptions,
    hookimpl,
    hookspec,
)
from twistgw.api.resources import (
    AuthConfigInfo,
    Endpoint,
    InvalidResource,
    OptionsScope,
    ResourceView,
    SecretInfo,
    UpstreamInfo,
)
from twistgw.api.types import (
    Allow,
    BodyPrefix,
    BodySource,
    BytesBody,
    ConfigWarning,
    Decision,
    Deny,
    NotChecked,
    OptionsError,
    RequestContext,
    path_text,
)
from twistgw.api.state import StateKey
from twistgw.api.tracer import NO_SPAN, NO_TRACER, SpanHandle, Tracer
from twistgw.api.views import RouteView, VirtualServiceView
from twistgw.config.upstreamtls import read_pems
from twistgw.redis import RedisClient, RedisConfig, RedisError, RedisPool, RedisUnavailable, ReplyError
from twistgw.rediscluster import RedisCluster, key_slot
from twistgw.rediscluster import connect as connect_redis
from twistgw.regex import DEFAULT_MAX_PROGRAM_SIZE, SafeRegex, UnsafePattern, max_program_size
from twistgw.tls import (
    TLS_VERSIONS,
    PeerRefused,
    TLSSettingsError,
    client_tls,
    describe_tls_failure,
    https_policy,
    verifying_https_policy,
)

__version__ = "0.1.0"

#: The reference's sections, in order: each name of ``__all__`` once
#: (``docs/sdk.md`` is generated from this; ``tests/docs/test_sdk_reference.py``
#: fails when it is stale).
SECTIONS: dict[str, tuple[str, ...]] = {
    "Hooks and what a plugin says about itself": (
        "hookimpl", "hookspec", "HookRegistry", "PluginInfo", "DEFAULT_ORDER", "Placement", "StagedOptions",
        "GatewayInfo",
        "Commands", "EXIT_OK", "EXIT_INVALID", "EXIT_USAGE", "write_secret",
    ),
    "Decisions": ("Allow", "Deny", "NotChecked", "Decision"),
    "The request": (
        "RequestContext", "StateKey", "Headers", "canonical_name", "is_token", "InvalidHeaderName",
        "OWNED_RESPONSE_HEADERS", "BodyPrefix", "BodySource", "BytesBody", "read_basic_credentials",
        "b64decode_strict",
    ),
    "Compiling options": (
        "OptionsScope", "ResourceView", "SecretInfo", "AuthConfigInfo", "UpstreamInfo", "Endpoint",
        "InvalidResource", "OwnsRequestHeaders", "OptionsError", "ConfigWarning", "path_text",
    ),
    "Routes as plugins see them": ("VirtualServiceView", "RouteView"),
    "Reading configuration fields": (
        "Problems", "Fields", "REQUIRED", "Ref", "FieldReader", "Invalid", "Path", "type_name", "unknown_field",
        "parse_duration", "DURATION_UNITS", "check_fields", "require_mapping", "is_kubernetes_name",
        "loopback_problem",
    ),
    "Regular expressions": ("SafeRegex", "UnsafePattern", "max_program_size", "DEFAULT_MAX_PROGRAM_SIZE"),
    "Side calls: the HTTP client, bounded bodies and client TLS": (
        "HttpClient", "HttpResponse", "HttpError", "HttpTimeout", "HttpUnreachable", "HttpTlsRefused",
        "HttpBodyTooLarge", "BoundedBody", "BodyTooLarge", "client_tls", "https_policy", "verifying_https_policy",
        "describe_tls_failure", "TLSSettingsError", "PeerRefused", "TLS_VERSIONS", "read_pems",
    ),
    "Redis": ("RedisClient", "RedisPool", "RedisConfig", "RedisError", "RedisUnavailable", "ReplyError", "RedisCluster",
              "connect_redis", "key_slot"),
    "Counters": ("counter",),
    "Tracing what a plugin waits for": ("Tracer", "SpanHandle", "NO_TRACER", "NO_SPAN"),
}

__all__ = [
    "hookimpl", "hookspec", "HookRegistry", "PluginInfo", "DEFAULT_ORDER", "Placement", "StagedOptions", "GatewayInfo",
    "Commands", "EXIT_OK", "EXIT_INVALID", "EXIT_USAGE", "write_secret", "Allow", "Deny", "NotChecked", "Decision",
    "RequestContext", "StateKey", "Headers", "canonical_name", "is_token", "InvalidHeaderName",
    "OWNED_RESPONSE_HEADERS", "BodyPrefix", "BodySource", "BytesBody", "read_basic_credentials", "b64decode_strict",
    "OptionsScope", "ResourceView", "SecretInfo", "AuthConfigInfo", "UpstreamInfo", "Endpoint", "InvalidResource",
    "OwnsRequestHeaders", "OptionsError", "ConfigWarning", "path_text", "VirtualServiceView", "RouteView", "Problems",
    "Fields", "REQUIRED", "Ref", "FieldReader", "Invalid", "Path", "check_fields", "require_mapping", "type_name",
    "unknown_field", "parse_duration", "DURATION_UNITS", "is_kubernetes_name", "loopback_problem", "SafeRegex",
    "UnsafePattern", "max_program_size", "DEFAULT_MAX_PROGRAM_SIZE", "HttpClient", "HttpResponse", "HttpError",
    "HttpTimeout", "HttpUnreachable", "HttpTlsRefused", "HttpBodyTooLarge", "BoundedBody", "BodyTooLarge", "client_tls",
    "https_policy", "verifying_https_policy", "describe_tls_failure", "TLSSettingsError", "PeerRefused", "TLS_VERSIONS",
    "read_pems", "RedisClient", "RedisPool", "RedisConfig", "RedisError", "RedisUnavailable", "ReplyError",
    "RedisCluster", "connect_redis", "key_slot", "counter", "Tracer", "SpanHandle", "NO_TRACER", "NO_SPAN",
    "__version__",
]
