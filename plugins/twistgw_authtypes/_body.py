"""``Settings.spec.extauth.requestBody`` (Gloo's ``BufferSettings``, Envoy
ext_authz's ``with_request_body``): how much of a request body is read
before an authorization service is asked, and what happens past that.

::

    extauth:
      requestBody:
        maxRequestBytes: 8192       # default 4096 (Gloo's 4KB)
        allowPartialMessage: false  # past the bound: 413 (true: send the first maxRequestBytes)
        packAsBytes: false          # gRPC: raw_body (bytes) instead of body (text)

Only the configs that send the body read it (``passThroughAuth.http``
with ``passThroughBody``, ``passThroughAuth.grpc``, ``customAuth``): a
route whose auth needs no body streams it as always.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from twistgw import AuthDeny, RequestContext
from twistgw.api.types import BodyPrefix
from twistgw.api.fields import Path, Problems


_FIELDS = ("maxRequestBytes", "allowPartialMessage", "packAsBytes")
#: Gloo's default bound.
DEFAULT_MAX = 4096
#: The most twistgw holds in memory per request for this.
MAX_MAX = 8 * 1024 * 1024
#: Envoy's header on the authorization request: whether the body sent is cut short.
PARTIAL_HEADER = b"x-envoy-auth-partial-body"


@attrs.frozen
class BodySettings:
    max_bytes: int = DEFAULT_MAX
    allow_partial: bool = False
    pack_as_bytes: bool = False

    async def read(self, ctx: RequestContext) -> BodyPrefix | AuthDeny:
        """The body to send, or the 413 a body over the bound gets (Gloo:
        "precedence over failure_mode_allow": a decision, not an error)."""
        prefix = await ctx.read_body(self.max_bytes, self.allow_partial)
        if not prefix.complete and not self.allow_partial:
            return AuthDeny(413, b"Payload Too Large", reason=f"the request body is over extauth's requestBody"
                                                               f" maxRequestBytes ({self.max_bytes})")
        return prefix


def body_settings(raw: Any, path: Path = ("requestBody",)) -> BodySettings | None:
    """``requestBody`` read and checked (every problem at once), or None when not set."""
    if raw is None:
        return None
    problems = Problems()
    cfg = problems.fields(raw, path, _FIELDS)
    size = cfg.get("maxRequestBytes", DEFAULT_MAX)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_MAX:
        problems.add(path + ("maxRequestBytes",), f"must be a whole number of bytes from 1 to {MAX_MAX}"
                                                  f" (twistgw holds that much per request), got {size!r}")
    partial, pack = cfg.boolean("allowPartialMessage", False), cfg.boolean("packAsBytes", False)
    problems.raise_if_any()
    return BodySettings(size, partial, pack)


def from_settings(settings: Mapping[str, Any]) -> BodySettings | None:
    """``Settings.spec.extauth.requestBody``, or None."""
    return body_settings(settings.get("requestBody"))
