"""twistgw: a plugin-based HTTP gateway on Twisted.

Plugins import :mod:`twistgw.sdk` and nothing else of twistgw (see
``docs/plugins.md`` and ``docs/sdk.md``). The names this package exported
in twistgw 0.1 (``twistgw.Deny``, ``twistgw.hookimpl``...) and the modules
``twistgw.options``, ``twistgw.hookspecs`` and ``twistgw.testing`` still
work until twistgw 0.2, with a DeprecationWarning naming the new import.
"""

from typing import Any

from twistgw import _deprecated

__version__ = "0.1.0"

__all__ = ["__version__"]

_deprecated.install()


def __getattr__(name: str) -> Any:
    if name in _deprecated.NAMES:
        return _deprecated.moved_name(name)
    raise AttributeError(f"module 'twistgw' has no attribute {name!r}")
