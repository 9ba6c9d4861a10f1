"""Small plugins for tests of the data path.

``DenyAll``  ``denyall: {}`` in a route's options refuses every request with
             ``401 go away`` and a ``www-authenticate`` header (a stand-in for
             any auth plugin that denies).
"""

from __future__ import annotations

from typing import Any

import twistgw

__all__ = ["DenyAll"]


class DenyAll:
    """``denyall: {}``: refuses every request with 401."""

    @twistgw.hookimpl
    def twistgw_compile_options(self, options: Any, scope: Any) -> Any:
        return True

    @twistgw.hookimpl
    def twistgw_authenticate(self, ctx: Any, options: Any) -> Any:
        return twistgw.Deny(401, b"go away", headers=((b"www-authenticate", b"Basic realm=x"),))
