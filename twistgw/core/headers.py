"""Header policy (pure): which headers are hop-by-hop and never forwarded."""

from __future__ import annotations

from typing import Any, Iterable

#: Hop-by-hop headers (RFC 9110 §7.6.1) plus framing headers the proxy sets itself.
HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer",
    b"transfer-encoding", b"upgrade", b"proxy-authorization", b"proxy-authenticate",
    b"content-length", b"expect",
})


def copy_end_to_end(incoming: Any, into: dict[bytes, list[bytes]],
                    connection: Iterable[bytes] | None = None) -> None:
    """Copy the end-to-end headers of a request or response, hop-by-hop
    removed (including every header the ``Connection`` header names).

    :param incoming: headers with ``getRawHeaders`` and ``getAllRawHeaders``
        (names in canonical case, values already clean, as both Twisted's
        and twistgw's ``Headers`` keep them).
    :param into: the raw ``{canonical name: [values]}`` dict of the headers
        to write into (same-named entries are replaced).
    :param connection: ``Connection`` header values kept apart from
        ``incoming`` (Twisted's HTTP client files them separately).
    """
    listed: set[bytes] | None = None
    named = incoming.getRawHeaders(b"connection")
    if named or connection:
        listed = set()
        for value in list(named or ()) + list(connection or ()):
            for token in value.split(b","):
                listed.add(token.strip().lower())
    for name, values in incoming.getAllRawHeaders():
        lname = name.lower()
        if lname in HOP_BY_HOP or (listed is not None and lname in listed):
            continue
        into[name] = list(values)


def end_to_end_lines(pairs: Iterable[tuple[bytes, bytes]], hop: dict[bytes, bytes]) -> list[bytes]:
    """The same policy as :func:`copy_end_to_end`, on a response's header
    lines as received: ``b"Name: value\\r\\n"`` for every end-to-end header
    (names as sent, values without trailing whitespace), in order.

    :param hop: filled with the hop-by-hop headers (lower-case name → first
        value): the engine reads its framing from them; they are never
        passed on.
    """
    lines = []
    connection = None
    for name, value in pairs:
        lname = name.lower()
        if lname in HOP_BY_HOP:
            if lname == b"connection":
                connection = value if connection is None else connection + b"," + value
            elif lname not in hop:
                hop[lname] = value
            continue
        lines.append(b"%s: %s\r\n" % (name, value.rstrip(b" \t")))
    if connection is not None:
        hop[b"connection"] = connection
        listed = {token.strip().lower() for token in connection.split(b",")} - {b"close", b"keep-alive", b""}
        if listed:
            lines = [line for line in lines if line.split(b":", 1)[0].lower() not in listed]
    return lines
