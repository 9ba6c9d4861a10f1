"""Public types shared by the gateway and its plugins.

Everything here is re-exported from :mod:`twistgw`; import it from there.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

import sys

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence
from urllib.parse import parse_qsl, urlencode

import attrs

from twistgw.api.headers import Headers, checked_response_header
from twistgw.api.state import StateKey
from twistgw.api.tracer import NO_TRACER, Tracer
# re-exported: the request body's types live in api/bodysource.py
from twistgw.api.bodysource import NO_BODY, BodyPrefix as BodyPrefix, BodySource as BodySource
from twistgw.api.bodysource import BytesBody as BytesBody
# re-exported: the resource infos used to live here, and plugins import them from this module
from twistgw.api.resources import (AuthConfigInfo as AuthConfigInfo, Endpoint as Endpoint,
                                   InvalidResource as InvalidResource, OptionsScope as OptionsScope,
                                   ResourceView as ResourceView, SecretInfo as SecretInfo, UpstreamInfo as UpstreamInfo)

if TYPE_CHECKING:  # config/ imports this module and loads no Twisted: Deferred is imported where it is made
    from twisted.internet.defer import Deferred

#: ``RequestContext.identities`` before any plugin authenticated (read-only, shared)
_NO_IDENTITIES: Mapping[str, str] = MappingProxyType({})


# --------------------------------------------------------------------------
# Decisions
# --------------------------------------------------------------------------


@attrs.frozen
class Allow:
    """A plugin admits the request (the chain goes on to the next plugin).

    :param reason: a short human explanation, shown by ``twistgw explain`` and
        in debug logs; never sent to the client.
    """

    reason: str = ""


@attrs.frozen
class Deny:
    """A plugin refuses the request; the chain stops and this is the response.

    :param status: the HTTP status sent to the client.
    :param body: the response body (bytes). ``content-length`` is set from it.
    :param headers: extra response headers, ``((b"name", b"value"), ...)``.
    :param content_type: the ``content-type`` sent with a non-empty body.
    :param reason: why, for logs and ``twistgw explain``; never sent.
    """

    status: int
    body: bytes = b""
    headers: tuple[tuple[bytes, bytes], ...] = ()
    content_type: bytes = b"text/plain"
    reason: str = ""


@attrs.frozen
class NotChecked:
    """A dry run's answer (``twistgw explain`` without ``--live``) from a
    plugin that would need the network to decide: nothing was contacted.

    :param reason: what the plugin would do, e.g. ``"would bind as
        uid=alice,ou=people,dc=example,dc=org at ldap://ldap:389"``.
    :param headers: what the plugin would do to the forwarded request's
        headers **when it admits**, as far as the request alone tells:
        ``((b"authorization", None),)`` for a credential it consumes
        (``None`` removes the header), ``(name, value)`` to set one.
        The dry run applies them and goes on, so ``twistgw explain``'s
        "Headers sent upstream" is what the backend would get if the
        plugin admitted: a credential the live gateway strips is not shown
        as forwarded. What else the plugin would change on admitting
        (a query parameter it consumes) it changes on ``ctx`` itself
        before returning.

    Only valid when ``ctx.dry_run`` is true; the chain then goes on to the
    next plugin. Returned from a real request it refuses the request with
    500, like any other unexpected result: a plugin confused about dry runs
    never lets a request through.
    """

    reason: str
    headers: tuple[tuple[bytes, bytes | None], ...] = ()


Decision = Allow | Deny




def _jwt_claims(attribute: str) -> Any:
    """twistgw 0.1's ``RequestContext.claims`` / ``claims_provider``, kept for
    one release: the claims are the jwt plugin's state (``ctx.state``), read
    and written through its documented module, named here only to say so."""
    import importlib
    import warnings

    warnings.warn(f"RequestContext.{attribute} is deprecated and will be removed in twistgw 0.2: the verified"
                  " claims are the jwt plugin's state; use twistgw_jwt.claims (verified_claims(ctx),"
                  " set_verified_claims(ctx, claims, provider))", DeprecationWarning,
                  # the caller of the property: compiled by mypyc (twistgw/compiled.py), this
                  # function and the property have no Python frames of their own
                  stacklevel=3 if __file__.endswith(".py") else 1)
    return importlib.import_module("twistgw_jwt.claims")


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


@mypyc_attr(allow_interpreted_subclasses=True)  # api/fields.py's errors, plugins'
class OptionsError(Exception):
    """Raised by a plugin's ``twistgw_compile_options`` for invalid options.

    :param path: the field path below the plugin's options key, as a
        sequence (``("providers", "main", "issuer")``) or a dotted string.
    :param reason: what is wrong, for a person to act on.

    :param resource: for a problem inside another resource the options
        refer to (an ``AuthConfig`` the options name), that resource as
        ``(kind, namespace, name)``; ``path`` is then the field path from the
        top of that resource (``("spec", "configs", 0, "ldap", "address")``)
        and the problem is reported at that resource's own file, line and
        field, once however many routes refer to it.

    To report several problems at once (``twistgw check`` lists them all),
    collect them with :class:`sdk.Problems`, or raise
    ``OptionsError.several([...])``; :attr:`problems` holds each one (just
    this error for a plain one).
    """

    def __init__(self, path: Sequence[str | int] | str, reason: str,
                 resource: tuple[str, str, str] | None = None) -> None:
        if isinstance(path, str):
            path = tuple(p for p in path.split(".") if p)
        self.path = tuple(path)
        self.reason = reason
        self.resource = resource
        self.problems: tuple[OptionsError, ...] = (self,)
        text = f"{self.dotted_path()}: {reason}" if self.path else reason
        if resource is not None:
            text = f"{resource[0]} {resource[1]}/{resource[2]}: {text}"
        super().__init__(text)

    @classmethod
    def several(cls, errors: Sequence["OptionsError"]) -> "OptionsError":
        """One exception carrying every error of ``errors`` (each flattened)."""
        flat = tuple(p for e in errors for p in e.problems)
        if not flat:
            raise ValueError("OptionsError.several needs at least one error")
        combined = cls(flat[0].path, flat[0].reason, flat[0].resource)
        combined.problems = flat
        combined.args = ("; ".join(str(p.args[0]) for p in flat),)
        return combined

    def dotted_path(self) -> str:
        return path_text(self.path)


class ConfigWarning(UserWarning):
    """A configuration the gateway serves, but probably not as its author
    meant. Give it with ``warnings.warn(msg, sdk.ConfigWarning)`` while
    compiling: ``twistgw check`` prints it as ``warning: ...`` and exits 0;
    the gateway logs it. (The ``extauth`` plugin warns so about a
    ``booleanExpr`` that admits requests no config authenticated.)"""


def path_text(path: Sequence[str | int]) -> str:
    """A field path as people write it: ``("providers", "main", "keys", 0)``
    → ``providers.main.keys[0]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


# --------------------------------------------------------------------------
# The request as plugins see it
# --------------------------------------------------------------------------

class RequestContext:
    """One request on its way through the plugin chain.

    Plugins read the request from it, may change what is sent upstream
    (``headers``, :meth:`set_query_params`), and leave results for the plugins
    after them.

    :ivar method: ``str``: the request method, exactly as sent (``"GET"``;
        never case-folded).
    :ivar path: ``str``: the **normalised** path: percent-escapes decoded
        (``%2F`` too: ``/a%2Fb`` is ``/a/b``), dot segments resolved,
        slashes merged. This is what routing and authorization saw and what
        is forwarded. It is not what the client signed: see ``raw_target``.
    :ivar raw_target: ``bytes``: the request target exactly as the client
        sent it, before any normalisation (``b"/a%2Fb/../c?x=1"``, or the
        absolute form ``b"http://host/..."``). For plugins that verify a
        signature over the request line; never route or authorize on it.
    :ivar query: ``bytes``: the raw query string, without ``?``; what is
        forwarded (see :meth:`set_query_params`).
    :ivar headers: the request headers that will be sent upstream
        (:class:`sdk.Headers`, mutable, names and values ``bytes``, with
        the methods of Twisted's ``Headers``: ``getRawHeaders``,
        ``setRawHeaders``, ``addRawHeader``, ``removeHeader``, ``hasHeader``,
        ``getAllRawHeaders``; hop-by-hop headers already removed). Plugins may
        remove credentials or add headers.
    :ivar host: ``str``: the Host, lower-cased, without port.
    :ivar client_address: ``str``: the peer's IP address.
    :ivar virtual_service: ``str``: ``namespace/name`` of the matched
        VirtualService.
    :ivar route: ``str``: the matched route's name (``routes[2]`` when
        unnamed).
    :ivar upstream: ``str``: ``namespace/name`` of the matched route's
        upstream (a Kubernetes service's as discovered,
        ``namespace/namespace-service-port``), ``""`` for a direct response.
    :ivar claims: deprecated (removed in twistgw 0.2): the verified claims
        are the ``jwt`` plugin's state now, read with
        ``twistgw_jwt.claims.verified_claims(ctx)``.
    :ivar claims_provider: deprecated, as ``claims``.
    :ivar principal: ``str | None``: who the request is from, once a plugin
        knows (the JWT ``sub`` or the LDAP user); shown in the access log.
        Set through :meth:`authenticated`, it is the identity of the **first**
        plugin in chain order that authenticated the request.
    :ivar identities: ``Mapping[str, str]``: every authenticated identity,
        plugin name to principal, in the order the plugins authenticated
        (``{"extauth": "alice", "jwt": "svc-42"}``); filled by
        :meth:`authenticated`. Read-only: write through that method.
    :ivar state: ``dict``: the request's per-plugin state, where plugins
        leave values for themselves and the plugins after them: keyed by a
        :class:`StateKey` the owning plugin exports (typed), or by the
        plugin's name.
    :ivar reactor: the reactor, for plugins that do I/O.
    :ivar scheme: ``str``: ``"https"`` when the client connection is TLS,
        else ``"http"``.
    :ivar protocol: ``str``: what the client speaks: ``"HTTP/1.1"``,
        ``"HTTP/1.0"`` or ``"HTTP/2"`` (one request model: nothing else
        differs for a plugin).
    :ivar dry_run: ``True`` under ``twistgw explain`` without ``--live``:
        contact nothing; return :class:`NotChecked` where the answer would
        need the network.
    :ivar received_headers: the request headers as the client sent them
        (hop-by-hop ones included), or None. Route matchers read a header
        the gateway removed before routing (``Upgrade``, ``Connection``, a
        header ``Connection`` names...) from here; plugins use ``headers``.
    :ivar owned_headers: canonical names of the headers plugins own: never
        read from ``received_headers`` (a client's copy is a forgery).
    :ivar response_headers: ``list[(name, value)] | None``: the headers
        plugins added to the client's response (:meth:`add_response_header`);
        None until one does. Read-only for plugins.
    :ivar request_id: ``str | None``: the ``x-request-id`` sent upstream, on a Gloo Gateway's listener
        that generates them (``generateRequestId``, on by default), set before any plugin runs; else None.
    :ivar tracer: the request's :class:`Tracer` (``ctx.tracer.child(name)``: a child span of the request's;
        :data:`NO_TRACER`, recording nothing, when the request is not sampled). Set by the engine.
    :ivar body_source: where :meth:`read_body` reads the request body
        (:class:`BodySource`); unset for a request without a body. The engine
        sets it; tests may set a :class:`BytesBody`.
    """

    __slots__ = (
        "method",
        "path",
        "raw_target",
        "query",
        "headers",
        "host",
        "client_address",
        "virtual_service",
        "route",
        "upstream",
        "principal",
        "identities",
        "state",
        "reactor",
        "decided_by",
        "scheme",
        "protocol",
        "dry_run",
        "received_headers",
        "owned_headers",
        "response_headers",
        "body_source", "request_id",
        "_tracer",
    )

    #: unset until the engine sets it (a request with a body): no store per request without one
    body_source: BodySource | None

    def __init__(
        self,
        method: str,
        path: str,
        query: bytes = b"",
        headers: Headers | None = None,
        host: str = "",
        client_address: str = "",
        virtual_service: str = "",
        route: str = "",
        reactor: Any = None,
        scheme: str = "http",
        raw_target: bytes | None = None,
        protocol: str = "HTTP/1.1",
    ) -> None:
        self.scheme = scheme
        self.protocol = protocol
        self.method = method
        self.path = path
        self.raw_target = raw_target if raw_target is not None else path.encode("utf-8")
        self.query = query
        self.headers = headers if headers is not None else Headers()
        self.host = host
        self.client_address = client_address
        self.virtual_service = virtual_service
        self.route = route
        #: ``namespace/name`` of the route's upstream ("" for a direct response)
        self.upstream = ""
        self.principal: str | None = None
        self.identities: Mapping[str, str] = _NO_IDENTITIES  # shared until a plugin authenticates: no dict per request
        self.state: dict[str | StateKey[Any], Any] = {}
        self.reactor = reactor
        self.decided_by: str | None = None
        self.dry_run = False
        self.received_headers: Any = None
        self.owned_headers: tuple[bytes, ...] = ()
        self.response_headers: list[tuple[bytes, bytes]] | None = None
        self.request_id: str | None = None

    # Tracing ---------------------------------------------------------------

    @property
    def tracer(self) -> Tracer:
        """The request's tracer (:data:`NO_TRACER` unless the engine set one)."""
        found: Tracer = getattr(self, "_tracer", NO_TRACER)  # unset: not traced (a slot, no store per request)
        return found

    @tracer.setter
    def tracer(self, value: Tracer) -> None:
        self._tracer = value

    # twistgw 0.1's claims, now the jwt plugin's state ----------------------

    @property
    def claims(self) -> dict[str, Any] | None:
        """Deprecated: ``twistgw_jwt.claims.verified_claims(ctx).claims``."""
        claims: dict[str, Any] | None = _jwt_claims("claims").claims_of(self)
        return claims

    @claims.setter
    def claims(self, value: dict[str, Any] | None) -> None:
        module = _jwt_claims("claims")
        found = module.verified_claims(self)
        module.set_verified_claims(self, value, found.provider if found is not None else None)

    @property
    def claims_provider(self) -> str | None:
        """Deprecated: ``twistgw_jwt.claims.verified_claims(ctx).provider``."""
        found = _jwt_claims("claims_provider").verified_claims(self)
        return found.provider if found is not None else None

    @claims_provider.setter
    def claims_provider(self, value: str | None) -> None:
        module = _jwt_claims("claims_provider")
        found = module.verified_claims(self)
        module.set_verified_claims(self, found.claims if found is not None else None, value)

    # Body ------------------------------------------------------------------

    def read_body(self, max_bytes: int, partial: bool = True) -> Deferred[BodyPrefix]:
        """The first ``max_bytes`` of the request body, once they arrived
        (or the whole body, if shorter), as a :class:`BodyPrefix`. The body
        is not consumed: the same bytes are forwarded upstream afterwards.
        Up to ``max_bytes`` are held in memory (past the engine's usual
        64 KiB) while the client keeps sending; a client with
        ``Expect: 100-continue`` is invited to send. ``partial=False``: a
        declared ``Content-Length`` over ``max_bytes`` answers at once
        (``complete`` False, no bytes read). Only plugins that need the body
        call this; a request nobody asks about is streamed as always."""
        source: BodySource | None = getattr(self, "body_source", None)  # unset: no body (a slot, no default)
        if source is None:
            from twisted.internet.defer import succeed

            return succeed(NO_BODY)
        return source.read_prefix(max_bytes, partial)

    # Identity --------------------------------------------------------------

    def authenticated(self, plugin: str, principal: str) -> None:
        """Record that ``plugin`` (its name, e.g. ``"apikey"``) authenticated
        ``principal``: ``identities[plugin] = principal``, and ``principal``
        becomes :attr:`principal` unless an earlier plugin in the chain
        already set it (the first authenticating plugin owns it)."""
        identities = self.identities
        # the first identity: a one-entry dict; later ones copy (rare, small)
        self.identities = {plugin: principal} if identities is _NO_IDENTITIES else {**identities, plugin: principal}
        if self.principal is None:
            self.principal = principal

    # Headers ---------------------------------------------------------------

    def header(self, name: str) -> str | None:
        """The **first** value of a request header as ``str`` (latin-1), or
        None; a header sent twice is two values (:meth:`header_values`)."""
        values = self.headers.getRawHeaders(name.encode("ascii"))
        return values[0].decode("latin-1") if values else None

    def header_values(self, name: str) -> list[str]:
        """Every value of a request header, in order, as ``str`` (latin-1)."""
        values = self.headers.getRawHeaders(name.encode("ascii")) or []
        return [v.decode("latin-1") for v in values]

    def add_response_header(self, name: bytes, value: bytes) -> None:
        """Add ``name: value`` to the response the client gets, whoever
        answers: the upstream (added after its own headers, which stay) or
        the gateway (a refusal, a direct response...). Call it from a hook
        of the chain; each call adds one line, in order. Raises ValueError
        for a name the engine owns (``Content-Length``, ``Transfer-Encoding``,
        ``Connection``, the other hop-by-hop ones), a name that is not a
        token, or a value with CR, LF or NUL."""
        pair = checked_response_header(name, value)
        if self.response_headers is None:
            self.response_headers = [pair]
        else:
            self.response_headers.append(pair)

    # Query -----------------------------------------------------------------

    def query_params(self) -> list[tuple[str, str]]:
        """The query parameters as ``(str, str)`` pairs, percent-decoded, in
        order, repeats kept."""
        if not self.query:
            return []
        return parse_qsl(
            self.query.decode("latin-1"), keep_blank_values=True, encoding="latin-1"
        )

    def set_query_params(self, params: Iterable[tuple[str, str]]) -> None:
        """Replace the query string sent upstream (re-encodes every pair)."""
        self.query = urlencode(list(params), encoding="latin-1").encode("ascii")

    def remove_query_param(self, name: str) -> None:
        """Remove every ``name=...`` pair; the other pairs stay byte for byte."""
        if not self.query:
            return
        kept = []
        for piece in self.query.split(b"&"):
            key = piece.split(b"=", 1)[0]
            decoded = parse_qsl(
                key.decode("latin-1") + "=", keep_blank_values=True, encoding="latin-1"
            )
            if decoded and decoded[0][0] == name:
                continue
            kept.append(piece)
        self.query = b"&".join(kept)


def recorded_error(path: Any, reason: str, resource: tuple[str, str, str] | None) -> OptionsError:
    """A recorded problem; one recorded while an :class:`InvalidResource` is
    handled (``except KeyError:`` around a lookup of a resource that is
    declared but invalid) keeps it as its cause, so the core does not report
    the reference a second time (``about_invalid_resource``)."""
    error = OptionsError(path, reason, resource)
    handled = sys.exc_info()[1]
    if isinstance(handled, InvalidResource):
        error.__cause__ = handled
    return error
