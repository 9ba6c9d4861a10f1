"""Which of twistgw's modules run compiled by mypyc (issue 36).

``pip install .`` compiles the hot modules (:data:`MODULES`, the list
setup.py hands to mypyc) with the machine's C compiler; with
``TWISTGW_PURE=1``, or where the build cannot (no compiler, no mypyc), the
same modules are installed as plain Python and run unchanged. The sources
are plain Python either way. ``twistgw --version`` prints the line
:func:`summary` makes (docs/performance.md, docs/contributing.md).
"""

from __future__ import annotations

import importlib

#: the modules setup.py compiles, in the order it lists them. Left pure:
#: twistgw.engine.gateway (its Gateway swaps methods per instance, and the
#: tests subclass it: mypyc's methods of a class compiled as non-native
#: refuse an instance of an interpreted subclass), twistgw.engine.upstream.connection
#: (the same: upstream/configured.py subclasses its UpstreamConnection, and
#: compiling configured.py too makes C that does not build, its super() calls
#: into a non-native class), twistgw_jwt._token (the
#: tests spy on its verify_signature through the module, which calls
#: between compiled modules bypass), twistgw_rbac (tests/unit/test_field_walk.py
#: patches its settings functions the same way); docs/performance.md
MODULES: tuple[str, ...] = (
    "twistgw.api.headers",
    "twistgw.api.types",
    "twistgw.core.headers",
    "twistgw.core.paths",
    "twistgw.core.plan",
    "twistgw.core.routing",
    "twistgw.core.pipeline",
    "twistgw.engine.framing",
    "twistgw.engine.request",
    "twistgw.engine.exchange",
    "twistgw.engine.connection",
    "twistgw.engine.upstream.pool",
    "twistgw.engine.upstream.request",
    "twistgw_jwt._authn",
    "twistgw_jwt._cache",
)


def is_compiled(module: str) -> bool:
    """Whether the imported ``module`` is a compiled extension (mypyc's
    shared library) rather than its ``.py`` source."""
    path = getattr(importlib.import_module(module), "__file__", None) or ""
    return not path.endswith((".py", ".pyc"))


def compiled_modules() -> list[str]:
    """The modules of :data:`MODULES` that run compiled in this install."""
    return [m for m in MODULES if is_compiled(m)]


def summary() -> str:
    """One line: how many of the hot modules run compiled."""
    done = compiled_modules()
    if not done:
        return f"pure Python (none of the {len(MODULES)} hot modules compiled)"
    if len(done) == len(MODULES):
        return f"compiled with mypyc (all {len(MODULES)} hot modules)"
    rest = ", ".join(m for m in MODULES if m not in done)
    return f"compiled with mypyc ({len(done)} of {len(MODULES)} hot modules; pure: {rest})"
