"""Gateway-wide extauth settings (``Settings.spec.extauth``), Gloo's way.

Gloo keeps these in its ``Settings`` resource and Envoy applies them to the
call to the external auth server. Here the "auth server" is this plugin,
in process, so they apply to one extauth check (every LDAP config of the
AuthConfig, connection waits included)::

    spec:
      extauth:
        requestTimeout: 2s       # the whole check; past it, the check is an error
        failureModeAllow: false  # true: an error admits the request (fail OPEN)
        statusOnError: 503       # the status an error answers with
        devDirectory: {...}      # checked by _devdir.py

An *error* is what SPEC.md answers with 5xx: a directory that refuses,
resets or does not answer in time (503), a service account that cannot bind
(500), and the ``requestTimeout`` running out. Decisions (401, 403) are never
errors. Without these settings the SPEC statuses apply unchanged.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twistgw import Allow, Deny, OptionsError, RequestContext
from twistgw.options import type_name, unknown_field

from twistgw_ldap._options import parse_duration

_log = Logger(namespace="twistgw_ldap")

#: What ``Settings.spec.extauth`` accepts.
FIELDS = ("devDirectory", "failureModeAllow", "requestTimeout", "statusOnError")
#: Gloo's extauth Settings fields about reaching a separate auth server; the
#: extauth plugin runs in the gateway, so they have nothing to act on.
_SERVER_FIELDS = ("extauthzServerRef", "httpService", "grpcService", "userIdHeader", "requestBody",
                  "clearRouteCache", "transportApiVersion", "statPrefix")
#: The statuses Gloo accepts for statusOnError.
_STATUSES = frozenset({100, 200, 201, 202, 203, 204, 205, 206, 207, 208, 226,
                       300, 301, 302, 303, 304, 305, 307, 308,
                       *range(400, 418), 421, 422, 423, 424, 426, 428, 429, 431,
                       500, 501, 502, 503, 504, 505, 506, 507, 508, 510, 511})
#: The statuses of SPEC.md's LDAP errors (directory fault, service-account bind).
ERROR_STATUSES = frozenset({500, 503})


@attrs.frozen
class ErrorPolicy:
    """How an extauth check that fails with an error (not a decision) ends."""

    timeout: float | None = None
    failure_mode_allow: bool = False
    status_on_error: int | None = None

    @property
    def inactive(self) -> bool:
        return self == NO_POLICY


NO_POLICY = ErrorPolicy()


def read_policy(settings: Mapping[str, Any]) -> ErrorPolicy:
    """:raise OptionsError: located below ``Settings.spec.extauth``."""
    for key in settings:
        if key in _SERVER_FIELDS:
            raise OptionsError((key,), "is Gloo's setting for reaching a separate external auth server;"
                               " twistgw runs extauth inside the gateway (the extauth plugin), so there is"
                               " nothing for it to do: remove it")
        if key not in FIELDS:
            raise OptionsError((key,), unknown_field(key, FIELDS))
    timeout = None
    if "requestTimeout" in settings:
        timeout = parse_duration(settings["requestTimeout"])
        if timeout is None or not 0.001 <= timeout <= 60:
            raise OptionsError(("requestTimeout",), "must be a duration from 1ms to 60s, such as '2s' or"
                               f" '500ms'; got {settings['requestTimeout']!r}")
    allow = settings.get("failureModeAllow", False)
    if not isinstance(allow, bool):
        raise OptionsError(("failureModeAllow",), f"must be true or false, got {allow!r}")
    status = settings.get("statusOnError")
    if status is not None and (isinstance(status, bool) or not isinstance(status, int) or status not in _STATUSES):
        raise OptionsError(("statusOnError",), f"must be an HTTP status code such as 403 or 503, got"
                           f" {status!r} ({type_name(status)})")
    return ErrorPolicy(timeout, allow, status)


def guard(result: Any, policy: ErrorPolicy | None, ctx: RequestContext, reactor: Any) -> Any:
    """Apply ``policy`` to what the LDAP flow returned (a decision, or a
    Deferred of one)."""
    if policy is None or policy.inactive:
        return result
    if isinstance(result, Deferred):
        if policy.timeout is not None:
            result.addTimeout(policy.timeout, reactor, onTimeoutCancel=lambda _r, _t: _timed_out(policy))
        return result.addCallback(_on_error, policy, ctx)
    return _on_error(result, policy, ctx)


def _timed_out(policy: ErrorPolicy) -> Deny:
    from twistgw_ldap._flow import unavailable

    return unavailable(f"extauth: no decision within Settings spec.extauth.requestTimeout {policy.timeout:g}s")


def _on_error(result: Any, policy: ErrorPolicy, ctx: RequestContext) -> Any:
    if not isinstance(result, Deny) or result.status not in ERROR_STATUSES:
        return result
    if policy.failure_mode_allow:
        _log.warn("extauth failed ({reason}); admitting {method} {path} WITHOUT authentication because"
                  " Settings spec.extauth.failureModeAllow is true", reason=result.reason,
                  method=ctx.method, path=ctx.path)
        return Allow(f"failureModeAllow: admitted despite an extauth error ({result.reason})")
    if policy.status_on_error is not None:
        return attrs.evolve(result, status=policy.status_on_error,
                            reason=f"{result.reason} (statusOnError {policy.status_on_error})")
    return result
