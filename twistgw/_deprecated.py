"""The plugin API of twistgw 0.1, kept for one release: ``from twistgw import
Deny``, ``twistgw.options``, ``twistgw.hookspecs`` and ``twistgw.testing``
still work and say, in a :class:`TwistgwDeprecationWarning`, what to import
instead (``twistgw.sdk``). Removed in twistgw 0.2.

The old modules are gone from the package (their code moved, so history
follows it); a finder on ``sys.meta_path`` answers for their names with a
module that re-exports the new one's names, and warns where the import is
written.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import types
import warnings
from typing import Any, Sequence

__all__ = ["MODULES", "NAMES", "REMOVED_IN", "TwistgwDeprecationWarning", "install", "moved_name", "warn_at_caller"]

REMOVED_IN = "twistgw 0.2"


class TwistgwDeprecationWarning(DeprecationWarning):
    """A name of twistgw 0.1's plugin API that moved (to ``twistgw.sdk``)."""


#: Old module → (the module that replaces it, what to write instead).
MODULES: dict[str, tuple[str, str]] = {
    "twistgw.options": ("twistgw.sdk", "from twistgw.sdk import Problems, parse_duration, ..."
                                       " (or: from twistgw import sdk; sdk.Problems)"),
    "twistgw.hookspecs": ("twistgw.sdk.hookspecs", "import twistgw.sdk.hookspecs"),
    "twistgw.testing": ("twistgw.sdk.testing", "from twistgw.sdk.testing import ChainTester, ..."),
}

#: Names once exported by ``twistgw`` → (module, attribute, what to write instead).
NAMES: dict[str, tuple[str, str, str]] = {
    name: ("twistgw.sdk", name, f"from twistgw.sdk import {name} (or: from twistgw import sdk; sdk.{name})")
    for name in ("Allow", "AuthConfigInfo", "BodyTooLarge", "BoundedBody", "Commands", "ConfigWarning", "Decision",
                 "Deny", "Endpoint", "GatewayInfo", "Headers", "NotChecked", "OptionsError", "OptionsScope",
                 "OwnsRequestHeaders", "Placement", "PluginInfo", "RequestContext", "ResourceView", "SecretInfo",
                 "StagedOptions", "UpstreamInfo", "counter", "hookimpl", "read_basic_credentials")
}
NAMES.update({
    name: ("twistgw.sdk.testing", name, f"from twistgw.sdk.testing import {name} (what ChainTester raises)")
    for name in ("ConfigError", "ConfigIssue")
})

NAMES.update({
    "Route": ("twistgw.config.model", "Route", "it is the configuration loader's class, not plugin API:"
              " twistgw_route_match gets read-only views, sdk.VirtualServiceView and sdk.RouteView"
              " (from twistgw.sdk import RouteView)"),
    "VirtualService": ("twistgw.config.model", "VirtualService", "it is the configuration loader's class, not"
                       " plugin API: twistgw_route_match gets a read-only sdk.VirtualServiceView"
                       " (from twistgw.sdk import VirtualServiceView)"),
})

NAMES.update({
    name: ("twistgw_extauth", name, f"the AuthConfig config-type contract is the extauth plugin's:"
                                    f" from twistgw_extauth import {name}")
    for name in ("AuthAllow", "AuthDecision", "AuthDeny", "ConfigScope", "ExtAuthChecker", "ExtAuthConfigType")
})

#: Frames of these files are the import machinery, not the importer.
_MACHINERY = ("<frozen importlib", __file__, os.path.join(os.path.dirname(__file__), "__init__.py"))


def warn_at_caller(message: str) -> None:
    """Warn, attributed to the first frame outside the import machinery and
    this module: the line of the plugin that wrote the old import."""
    frame = inspect.currentframe()
    while frame is not None and frame.f_code.co_filename.startswith(_MACHINERY):
        frame = frame.f_back
    if frame is None:
        warnings.warn(message, TwistgwDeprecationWarning, stacklevel=2)
        return
    registry = frame.f_globals.setdefault("__warningregistry__", {})
    warnings.warn_explicit(message, TwistgwDeprecationWarning, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__", "<unknown>"), registry=registry)


def moved_name(name: str) -> Any:
    """``twistgw.<name>`` of twistgw 0.1 (the package's ``__getattr__``)."""
    module, attribute, instead = NAMES[name]
    warn_at_caller(f"twistgw.{name} is deprecated and will be removed in {REMOVED_IN}: {instead}")
    return getattr(importlib.import_module(module), attribute)


class _OldModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``twistgw.options``, ``twistgw.hookspecs``, ``twistgw.testing``."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        new, instead = MODULES[module.__name__]
        target = importlib.import_module(new)
        names = list(getattr(target, "__all__", ()))
        module.__dict__.update({name: getattr(target, name) for name in names})
        module.__all__ = names  # type: ignore[attr-defined]
        module.__doc__ = f"Deprecated: {new} (removed in {REMOVED_IN})."
        warn_at_caller(f"{module.__name__} is deprecated and will be removed in {REMOVED_IN}: {instead}")


_FINDER = _OldModules()


def install() -> None:
    """Put the finder of the old modules on ``sys.meta_path`` (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
