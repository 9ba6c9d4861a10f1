"""Makes the shared fixtures of :mod:`support.fixtures` available to every
test directory (core, jwt, rbac, ldap, reliability). Helpers are imported
from the :mod:`support` package: ``from support.http import http_request``."""

from support.fixtures import *  # noqa: F401,F403  (pytest finds fixtures by name)
