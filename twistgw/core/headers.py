"""Header policy (pure): which headers are forwarded, both ways.

Responses: every end-to-end header (:func:`copy_end_to_end`). Requests
(:func:`copy_request_headers`) also lose what a client must not be able to
tell a backend, because the gateway decided it or sets it itself:

* hop-by-hop headers (RFC 9110 §7.6.1) and every header ``Connection``
  names, except ``Host``: the gateway routed by it, and the backend must see
  the same one (``Connection: host`` cannot drop it);
* ``X-HTTP-Method-Override``, ``X-Method-Override`` and ``X-HTTP-Method``:
  authorization judged the request's real method, and a backend that honours
  one of them would run another;
* the forwarding headers the gateway owns: ``Forwarded``, ``X-Real-IP`` and
  the ``X-Forwarded-*`` family (``X-Forwarded-For``, ``-Proto`` and
  ``X-Real-IP`` are then set from the connection; the rest stay absent);
* header names with an underscore (nginx's ``underscores_in_headers off``):
  CGI and WSGI turn ``-`` into ``_``, so ``X_User`` would reach a backend as
  the ``HTTP_X_USER`` a plugin-set ``X-User`` should own. Plugins do not see
  them either.

See docs/configuration.md, "Headers", for the user-facing summary.
"""

from __future__ import annotations

from typing import Any, Iterable

from twistgw.config.names import FORWARDING, METHOD_OVERRIDE

#: Hop-by-hop headers (RFC 9110 §7.6.1) plus framing headers the proxy sets itself.
HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer",
    b"transfer-encoding", b"upgrade", b"proxy-authorization", b"proxy-authenticate",
    b"content-length", b"expect",
})

# METHOD_OVERRIDE (ask a backend to run another method than the one
# authorization judged) and FORWARDING (facts only the gateway may state) are
# defined in config.names: route matchers on them are refused at load.

#: Never taken from a client's request.
REQUEST_DROPPED = HOP_BY_HOP | METHOD_OVERRIDE | FORWARDING

#: Headers ``Connection`` may not remove from a request: the gateway needs them.
CONNECTION_PROOF = frozenset({b"host"})


def _connection_tokens(named: Iterable[bytes] | None, extra: Iterable[bytes] | None = None) -> set[bytes] | None:
    """The lower-cased names every ``Connection`` value lists (None: none)."""
    if not named and not extra:
        return None
    listed = set()
    for value in list(named or ()) + list(extra or ()):
        for token in value.split(b","):
            listed.add(token.strip().lower())
    return listed


def copy_end_to_end(incoming: Any, into: dict[bytes, list[bytes]],
                    connection: Iterable[bytes] | None = None) -> None:
    """Copy the end-to-end headers of a response, hop-by-hop removed
    (including every header the ``Connection`` header names).

    :param incoming: headers with ``getRawHeaders`` and ``getAllRawHeaders``
        (names in canonical case, values already clean, as both Twisted's
        and twistgw's ``Headers`` keep them).
    :param into: the raw ``{canonical name: [values]}`` dict of the headers
        to write into (same-named entries are replaced).
    :param connection: ``Connection`` header values kept apart from
        ``incoming`` (Twisted's HTTP client files them separately).
    """
    listed = _connection_tokens(incoming.getRawHeaders(b"connection"), connection)
    for name, values in incoming.getAllRawHeaders():
        lname = name.lower()
        if lname in HOP_BY_HOP or (listed is not None and lname in listed):
            continue
        into[name] = list(values)


def copy_request_headers(incoming: Any, into: dict[bytes, list[bytes]]) -> None:
    """Copy what a client's request may tell the backend (see the module
    docstring): no hop-by-hop, ``Connection``-listed (but ``Host``),
    method-override or forwarding header, and no name with ``_``.

    :param incoming: as for :func:`copy_end_to_end`.
    :param into: likewise.
    """
    listed = _connection_tokens(incoming.getRawHeaders(b"connection"))
    if listed is not None:
        listed -= CONNECTION_PROOF
    dropped = _request_dropped
    for name, values in incoming.getAllRawHeaders():
        drop = dropped.get(name)
        if drop is None:
            drop = _request_verdict(name)
        if drop or (listed is not None and name.lower() in listed):
            continue
        into[name] = list(values)


#: name as received -> whether the fixed part of the request policy drops it
#: (the Connection-named part depends on the request and is checked apart).
_request_dropped: dict[bytes, bool] = {}


def _request_verdict(name: bytes) -> bool:
    drop = name.lower() in REQUEST_DROPPED or b"_" in name
    if len(_request_dropped) < 10_000:  # bounded: names come from clients
        _request_dropped[name] = drop
    return drop


def end_to_end_lines(pairs: Iterable[tuple[bytes, bytes]], hop: dict[bytes, bytes],
                     skip: frozenset[bytes] = HOP_BY_HOP) -> list[bytes]:
    """The same policy as :func:`copy_end_to_end`, on a response's header
    lines as received: ``b"Name: value\\r\\n"`` for every end-to-end header
    (names as sent, values without trailing whitespace), in order.

    :param hop: filled with the hop-by-hop headers (lower-case name → first
        value): the engine reads its framing from them; they are never
        passed on.
    :param skip: :data:`HOP_BY_HOP` and lower-case names dropped in the
        same pass (a route's ``responseHeadersToRemove``, see
        ``core.traffic.ResponseEdit``).
    """
    lines = []
    connection: list[bytes] = []
    for name, value in pairs:
        lname = name.lower()
        if lname in skip:
            if skip is not HOP_BY_HOP and lname not in HOP_BY_HOP:
                continue  # dropped by the route
            if lname == b"connection":
                connection.append(value)
            elif lname not in hop:
                hop[lname] = value
            continue
        lines.append(b"%s: %s\r\n" % (name, value.rstrip(b" \t")))
    if not connection or (len(connection) == 1 and connection[0].lower() in _NOT_NAMES):
        return lines  # no Connection, or the usual keep-alive / close: names nothing here
    listed = _connection_tokens(connection)
    if listed:
        # "keep-alive" and "close" (nearly every response's Connection) name
        # no header that is still here: only look again for the others.
        listed -= _NOT_NAMES
        if listed:
            lines = [line for line in lines if line.split(b":", 1)[0].lower() not in listed]
    return lines


#: Connection tokens that cannot name a header still in an end-to-end list.
_NOT_NAMES = HOP_BY_HOP | {b"close", b""}


#: fields never passed on as trailers (RFC 9110 §6.5.1: framing, routing,
#: authentication and control fields; RFC 9113 §8.2.2: connection-specific)
TRAILER_FORBIDDEN = HOP_BY_HOP | frozenset({
    b"host", b"authorization", b"proxy-authorization", b"set-cookie", b"cookie", b"content-type",
    b"content-encoding", b"content-range", b"cache-control", b"expires", b"date", b"location", b"retry-after",
    b"vary", b"www-authenticate", b"max-forwards",
})


def trailer_pairs(pairs: Iterable[tuple[bytes, bytes]]) -> tuple[tuple[bytes, bytes], ...]:
    """The trailer fields that pass the gateway, lower-case names: none of
    :data:`TRAILER_FORBIDDEN`, no pseudo-header, no name with ``_`` (as for
    request headers)."""
    out = []
    for name, value in pairs:
        lname = name.lower()
        if lname in TRAILER_FORBIDDEN or lname.startswith(b":") or b"_" in lname or not lname:
            continue
        out.append((lname, value.strip(b" \t")))
    return tuple(out)


def wants_trailers(te_values: Iterable[bytes] | None) -> bool:
    """Whether a client's ``TE`` lists ``trailers`` (RFC 9110 §10.1.4): it
    accepts trailer fields in a chunked response; the one ``te`` value the
    gateway carries to an HTTP/2 upstream (gRPC needs it)."""
    if not te_values:
        return False
    for value in te_values:
        for token in value.split(b","):
            if token.split(b";", 1)[0].strip().lower() == b"trailers":
                return True
    return False
