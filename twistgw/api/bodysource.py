"""The start of a request body that plugins read before the chain decides
(``RequestContext.read_body``): :class:`BodyPrefix`, where it is read from
(:class:`BodySource`) and :class:`BytesBody` for tests. Re-exported by
:mod:`twistgw.api.types`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import attrs

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

__all__ = ["NO_BODY", "BodyPrefix", "BodySource", "BytesBody"]


@attrs.frozen
class BodyPrefix:
    """The start of a request body, read before the chain decides
    (:meth:`RequestContext.read_body`); the same bytes still go upstream.

    :ivar data: the body's first bytes: all of it when ``complete``, else at
        most the ``max_bytes`` asked for (empty when ``partial=False`` was
        asked and the declared ``Content-Length`` is already over the bound).
    :ivar complete: True when ``data`` is the whole body; False when the
        body goes on past ``max_bytes``.
    """

    data: bytes
    complete: bool


class BodySource(Protocol):
    """Where :meth:`RequestContext.read_body` reads from: the engine's
    exchange for a request with a body (``twistgw.engine``), or
    :class:`BytesBody` in tests and ``twistgw explain``."""

    def read_prefix(self, max_bytes: int, partial: bool) -> Deferred[BodyPrefix]: ...


class BytesBody:
    """A :class:`BodySource` of known bytes (tests, ``ChainTester``):
    ``ctx.body_source = BytesBody(b"...")``."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read_prefix(self, max_bytes: int, partial: bool) -> Deferred[BodyPrefix]:
        from twisted.internet.defer import succeed

        if len(self.data) <= max_bytes:
            return succeed(BodyPrefix(self.data, True))
        return succeed(BodyPrefix(self.data[:max_bytes] if partial else b"", False))


#: the prefix of a request without a body
NO_BODY = BodyPrefix(b"", True)
