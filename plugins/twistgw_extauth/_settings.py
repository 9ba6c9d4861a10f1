"""Gateway-wide extauth settings (``Settings.spec.extauth``), Gloo's way.

Gloo keeps these in its ``Settings`` resource and Envoy applies them to the
call to the external auth server. Here the "auth server" is this plugin,
in process, so they apply to one extauth check (every config of the
AuthConfig, connection waits included)::

    spec:
      extauth:
        requestTimeout: 2s       # the whole check; past it, the check is an error
        failureModeAllow: false  # true: an error admits the request (fail OPEN)
        statusOnError: 503       # the status an error answers with
        userIdHeader: x-user-id  # the authenticated user's id, set on the admitted request
        devDirectory: {...}      # a config type's own field (ldap's)

An *error* is an :class:`twistgw.AuthDeny` with ``error=True`` (a directory
that refuses, resets or does not answer in time, a service account that
cannot bind, a policy that failed) and the ``requestTimeout`` running out.
Decisions (401, 403) are never errors. Without these settings a config's
own error status applies unchanged.

``userIdHeader`` is Gloo's too: the header in which the auth server puts the
id of the user it authenticated (``UserInfo.UserID``; here the admission's
principal), which the client's copy never gets through (removed from every
request, on every route, before routing) and which the filters after auth
(the rate limits' ``requestHeaders`` actions) and the upstream read.
"""

from __future__ import annotations

from typing import Any, Collection, Mapping

import attrs
from twistgw.api.fields import Problems, type_name, unknown_field
from twistgw.api.headers import is_token

#: What ``Settings.spec.extauth`` accepts, besides the config types' own fields.
FIELDS = ("failureModeAllow", "requestTimeout", "statusOnError", "userIdHeader")
#: Gloo's extauth Settings fields about reaching a separate auth server;
#: refused unless an installed config type reads them (``customAuth``).
SERVER_FIELDS = ("extauthzServerRef", "httpService", "grpcService", "requestBody",
                 "clearRouteCache", "transportApiVersion", "statPrefix", "namedExtauth")
#: The statuses Gloo accepts for statusOnError, less those that cannot end
#: an exchange with an answer of their own: 1xx are not final (the client
#: would pair the next answer with this request) and 204, 205 and 304 carry
#: no body by definition.
STATUSES = frozenset({200, 201, 202, 203, 206, 207, 208, 226,
                      300, 301, 302, 303, 305, 307, 308,
                      *range(400, 418), 421, 422, 423, 424, 426, 428, 429, 431,
                      500, 501, 502, 503, 504, 505, 506, 507, 508, 510, 511})
_NO_BODY = {204: "204 No Content", 205: "205 Reset Content", 304: "304 Not Modified"}


@attrs.frozen
class ErrorPolicy:
    """How an extauth check that fails with an error (not a decision) ends."""

    timeout: float | None = None
    failure_mode_allow: bool = False
    status_on_error: int | None = None
    #: ``userIdHeader`` (lower case), read with the policy from the same
    #: Settings section: where an admission's principal is written
    user_id_header: bytes | None = None

    @property
    def inactive(self) -> bool:
        return attrs.evolve(self, user_id_header=None) == NO_POLICY


NO_POLICY = ErrorPolicy()


def read_section(settings: Mapping[str, Any], type_fields: Collection[str], r: Problems) -> dict[str, Any]:
    """``Settings.spec.extauth`` with each field under its JSON name (either
    spelling is read), every problem of its keys recorded on ``r``;
    ``type_fields`` are the keys config types read (checked by them)."""
    known = sorted({*FIELDS, *type_fields})
    section = r.mapping(settings, (), names=(*known, *SERVER_FIELDS), optional=True)
    for key in section:
        if key in type_fields or key in FIELDS:
            continue
        if key in SERVER_FIELDS:
            r.issue((key,), "is Gloo's setting for reaching a separate external auth server; twistgw runs extauth"
                    " inside the gateway (the extauth plugin) and no installed config type reads it: remove it")
        else:
            r.issue((key,), unknown_field(key, known))
    return section


def read_policy(settings: Mapping[str, Any], type_fields: Collection[str] = ()) -> ErrorPolicy:
    """The policy of ``Settings.spec.extauth``; ``type_fields`` are the keys
    config types read (checked by them).

    :raise OptionsError: every problem, located below ``Settings.spec.extauth``.
    """
    r = Problems()
    f = r.fields(read_section(settings, type_fields, r), ())
    timeout = f.duration("requestTimeout", None, 0.001, 60)
    allow = f.boolean("failureModeAllow", False)
    status = f.get("statusOnError")
    if status is not None:
        reason = _status_problem(status)
        if reason:
            r.issue(("statusOnError",), reason)
    header = _user_id_header(f.get("userIdHeader"), r)
    r.raise_if_any()
    return ErrorPolicy(timeout, allow, status, header)


#: Headers the user id may not be written into: HTTP's own, the gateway's, credentials.
_RESERVED = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer",
                       "upgrade", "proxy-connection", "proxy-authorization", "authorization", "cookie", "expect",
                       "x-forwarded-for", "x-forwarded-proto", "forwarded", "x-real-ip"})


def _user_id_header(value: Any, r: Problems) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str) or not is_token(value):
        r.issue(("userIdHeader",), f"must be an HTTP header name such as x-user-id, got {value!r}")
        return None
    if value.lower() in _RESERVED:
        r.issue(("userIdHeader",), f"{value!r} is a header HTTP or the gateway owns; pick another, such as x-user-id")
        return None
    return value.lower().encode("ascii")


def _status_problem(status: Any) -> str:
    if isinstance(status, bool) or not isinstance(status, int):
        return f"must be an HTTP status code such as 403 or 503, got {status!r} ({type_name(status)})"
    if 100 <= status < 200:
        return (f"{status} is not a final status: the client would take the next answer on the connection"
                " for this request's; use a status such as 403 or 503")
    if status in _NO_BODY:
        return f"{_NO_BODY[status]} is a status without a body that admits nothing; use 403 or 503"
    if status not in STATUSES:
        return f"must be an HTTP status code such as 403 or 503, got {status}"
    return ""
