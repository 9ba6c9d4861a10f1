"""Endpoint strings read as Twisted reads them, and refused in their own
words (issue 32, item 17): every documented form still parses, and each
malformed one gets a sentence, never a Python exception's text."""

from __future__ import annotations

import pytest

from twistgw.api.endpoints import split_endpoint, syntax_problem
from twistgw.config.names import with_backlog
from twistgw.runtime.listeners import endpoint_problem


@pytest.mark.parametrize("description", [
    "tcp:8080", "tcp:0", "tcp:65535", "tcp:8080:interface=127.0.0.1", "tcp:8080:interface=127.0.0.1:backlog=4096",
    "tcp:8080:127.0.0.1", "tcp6:8080:interface=\\:\\:1", "tcp6:8080:interface=\\:\\:", "tls:8443",
    "tls:8443:interface=127.0.0.1:backlog=16", "unix:/tmp/twistgw.sock", "unix:/tmp/x.sock:mode=660:lockfile=0",
    "stdio:",
])
def test_documented_forms_are_accepted(description: str) -> None:
    assert syntax_problem(description) is None
    assert endpoint_problem(with_backlog(description, 1024)) is None


@pytest.mark.parametrize("description, words", [
    ("tcp:notaport", "port must be a number from 0 to 65535, got 'notaport'"),
    ("tcp:65536", "port must be a number from 0 to 65535, got '65536'"),
    ("tcp:８０", "port must be a number from 0 to 65535, got '８０'"),
    ("tcp", "the port is missing; tcp: is written tcp:PORT[:interface=ADDRESS][:backlog=N], e.g. tcp:8080"),
    ("tcp:80:127.0.0.1:10:x", "too many values between its colons; tcp: is written tcp:PORT"),
    ("tcp:8080:interface=a:interface=b", "interface is given twice"),
    ("tcp:8080:backlog=0", "backlog must be a whole number from 1 to 65535, got '0'"),
    ("unix:/tmp/x:mode=9", "mode must be an octal number such as 660, got '9'"),
    ("unix:/tmp/x:lockfile=yes", "lockfile must be 0 or 1, got 'yes'"),
    ("ssl:https", "port must be a number from 0 to 65535, got 'https'"),
    ("ssl:8443:privateKey=k.pem:bogus=1", "unknown option 'bogus'; ssl: takes privateKey=, certKey="),
    ("8443", "it has no type; did you mean tcp:8443?"),
    ("   ", "it is empty"),
])
def test_malformed_forms_are_said_in_words(description: str, words: str) -> None:
    problem = syntax_problem(description)
    assert problem is not None and problem.startswith(words), problem
    assert endpoint_problem(description) == problem


def test_the_split_is_twisteds() -> None:
    assert split_endpoint("tcp6:8080:interface=\\:\\:1:backlog=5") == ("tcp6", ["8080"], [("interface", "::1"),
                                                                                          ("backlog", "5")])
    assert split_endpoint("unix:/a\\:b:mode=a=b") == ("unix", ["/a:b"], [("mode", "a=b")])


@pytest.mark.parametrize("description, words", [
    ("nosuchtype:80", "unknown endpoint type 'nosuchtype'; use tcp:PORT, tcp6:PORT, ssl:PORT:privateKey=KEY"),
    (":8080", "unknown endpoint type ''"),
    ("systemd:domain=INET:index=x", "a number was expected, got 'x'"),
    ("ssl:8443", "cannot read privateKey server.pem (Twisted's default when privateKey= is not given)"),
])
def test_what_twisted_decides_is_said_in_words_too(description: str, words: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no server.pem here
    problem = endpoint_problem(description)
    assert problem is not None and problem.startswith(words), problem


def test_the_development_servers_listen_strings_are_checked_the_same() -> None:
    from twistgw.config.loader import ConfigError, load_text
    from twistgw.options import loopback_problem

    with pytest.raises(ConfigError) as info:
        load_text("apiVersion: gateway.vendor.io/v1\nkind: Settings\nmetadata: {name: settings}\nspec:\n"
                  "  gateway: {echoServer: {listen: 'tcp:notaport:interface=127.0.0.1'}}\n", "settings.yaml")
    (issue,) = info.value.issues
    assert issue.field == "spec.gateway.echoServer.listen"
    assert issue.reason == ("'tcp:notaport:interface=127.0.0.1' is not a valid endpoint: port must be a number"
                            " from 0 to 65535, got 'notaport'")
    assert loopback_problem("tcp:99999:interface=127.0.0.1") == (
        "'tcp:99999:interface=127.0.0.1' is not a valid endpoint: port must be a number from 0 to 65535, got '99999'")
