"""The hooks a plugin implements: the reference for plugin authors.

Each hook is a typed stub with its documentation (the functions are the
specifications the gateway adds to its plugin manager). A plugin implements
one by defining a function (or method) of the same name marked
``@sdk.hookimpl``; it may take only the arguments it needs.
``docs/sdk.md`` lists them with the rest of the SDK, and
``docs/plugins.md`` builds a plugin with them.
"""

from twistgw.api.hookspecs import *  # noqa: F401,F403  (the specifications, re-exported)
from twistgw.api.hookspecs import __all__ as __all__
from twistgw.api.hookspecs import __doc__ as _HOW

#: How the gateway calls hooks (the machinery module's own description).
HOW_HOOKS_ARE_CALLED = _HOW
