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
