"""Small plugins for tests of the data path.

``DenyAll``  ``denyall: {}`` in a route's options refuses every request with
             ``401 go away`` and a ``www-authenticate`` header (a stand-in for
             any auth plugin that denies).
``adder``    ``adder: {}``: a plugin module that adds two response headers
             (``X-Seen-By: adder``, ``Set-Cookie: a=1``), then admits or
             refuses, at once or through a Deferred.
"""

from __future__ import annotations

import types
from typing import Any

from twisted.internet.defer import succeed

from twistgw import sdk

__all__ = ["DenyAll", "adder"]


class DenyAll:
    """``denyall: {}``: refuses every request with 401."""

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Any, scope: Any) -> Any:
        return True

    @sdk.hookimpl
    def twistgw_authenticate(self, ctx: Any, options: Any) -> Any:
        return sdk.Deny(401, b"go away", headers=((b"www-authenticate", b"Basic realm=x"),))


def adder(deny: bool = False, later: bool = False) -> tuple[str, object]:
    """A plugin that adds two response headers (``later``: from a
    Deferred), then admits or (``deny``) refuses; ``(name, module)`` for
    ``ChainTester``'s plugins."""
    module = types.ModuleType("plugin_adder")

    @sdk.hookimpl
    def twistgw_compile_options(options: Any, scope: Any) -> Any:
        return dict(options)

    @sdk.hookimpl
    def twistgw_authenticate(ctx: Any, options: Any) -> Any:
        ctx.add_response_header(b"X-Seen-By", b"adder")
        ctx.add_response_header(b"Set-Cookie", b"a=1")
        answer = sdk.Deny(401, b"no", ((b"www-authenticate", b"Basic"),)) if deny else None
        return succeed(answer) if later else answer

    module.twistgw_compile_options = twistgw_compile_options  # type: ignore[attr-defined]
    module.twistgw_authenticate = twistgw_authenticate  # type: ignore[attr-defined]
    return "adder", module
