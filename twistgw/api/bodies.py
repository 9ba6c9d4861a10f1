"""The one size-bounded body collector: what the gateway reads from a
server it asks (:class:`twistgw.api.http.HttpClient` reads every answer
with it) must have a limit, or a broken or hostile server fills the memory."""

from __future__ import annotations

from typing import Callable

__all__ = ["BodyTooLarge", "BoundedBody"]


class BodyTooLarge(Exception):
    """The body grew past its limit (raised by :class:`BoundedBody` when the
    caller gave no error of its own)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"body larger than {limit} bytes")
        self.limit = limit


class BoundedBody:
    """Collects a body chunk by chunk, refusing it past ``limit`` bytes::

        body = sdk.BoundedBody(1024 * 1024, lambda limit: FetchError(f"larger than {limit} bytes"))
        for chunk in chunks:
            body(chunk)                         # raises FetchError past the limit
        data = body.value()

    :param limit: the most bytes accepted.
    :param too_large: makes the exception raised when a chunk passes
        ``limit`` (given the limit); :class:`BodyTooLarge` by default.
        :class:`twistgw.api.http.HttpClient` reads every answer through one
        (its own bound, ``max_body``); a plugin rarely needs another.
    """

    __slots__ = ("_parts", "_too_large", "limit", "size")

    def __init__(self, limit: int, too_large: Callable[[int], Exception] = BodyTooLarge) -> None:
        self.limit = limit
        self.size = 0
        self._parts: list[bytes] = []
        self._too_large = too_large

    def __call__(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise self._too_large(self.limit)
        self._parts.append(data)

    def value(self) -> bytes:
        """Everything collected so far, joined."""
        return b"".join(self._parts)
