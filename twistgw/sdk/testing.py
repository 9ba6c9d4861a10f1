"""Test helpers for plugins and configurations, usable from trial and pytest.

* :class:`ChainTester` compiles a configuration and runs requests through the
  plugin chain in memory (no sockets);
* :func:`start_gateway` serves a configuration on a free loopback port;
* :func:`start_recording_backend` is a real HTTP backend that records what
  it receives;
* :func:`trial_tests_first` orders a pytest session holding both styles.

A rejected configuration raises :class:`ConfigError`, whose ``issues`` are
:class:`ConfigIssue` s (file, line, resource, field, reason). See
``docs/plugins.md``, "Test it".
"""

from twistgw._recording import BackendResponse, RecordedRequest, RecordingBackend, start_recording_backend
from twistgw._testing import (
    ChainResult,
    ChainTester,
    Resources,
    RunningGateway,
    make_headers,
    resolve_plugins,
    resources_yaml,
    start_gateway,
    trial_tests_first,
)
from twistgw.config.errors import ConfigError, ConfigIssue

__all__ = ["BackendResponse", "ChainResult", "ChainTester", "ConfigError", "ConfigIssue", "RecordedRequest",
           "RecordingBackend", "Resources", "RunningGateway", "make_headers", "resolve_plugins",
           "resources_yaml", "start_gateway",
           "start_recording_backend", "trial_tests_first"]
