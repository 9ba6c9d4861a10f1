"""Makes the shared fixtures of :mod:`support.fixtures` available to every
test directory (core, jwt, rbac, ldap, reliability). Helpers are imported
from the :mod:`support` package: ``from support.http import http_request``."""

from support.fixtures import *  # noqa: F401,F403  (pytest finds fixtures by name)


def pytest_collection_modifyitems(items: list) -> None:
    """trial ``TestCase`` modules spin the reactor themselves; run them
    before the pytest-twisted tests, which keep it running in a greenlet."""
    from twistgw.sdk.testing import trial_tests_first

    trial_tests_first(items)
