"""Gloo's extauth settings (``Settings.spec.extauth``): ``requestTimeout``,
``failureModeAllow`` and ``statusOnError`` take effect, against a real slapd
that is frozen (SIGSTOP), stopped, or has a bad service-account password."""

from __future__ import annotations

import time
from typing import Any

import pytest
import pytest_twisted
from ldap_helpers import SA_SETTINGS, basic, ldap_config, make_tester
from slapd import free_port
from twisted.internet import defer, reactor, task

from twistgw.sdk.testing import ConfigError

URL = "http://api.example.com/pets"
OPEN = "http://api.example.com/open/x"


def with_settings(text: str, **extauth: Any) -> str:
    import json

    return text + ("---\napiVersion: gateway.vendor.io/v1\nkind: Settings\nmetadata: {name: settings}\n"
                   f"spec: {{extauth: {json.dumps(extauth)}}}\n")


def frozen_config(url: str, **extauth: Any) -> str:
    # per-operation timeouts far longer than the overall requestTimeout under test
    return with_settings(ldap_config(url, cacheTtl=0, requestTimeout="5s", connectTimeout="5s"), **extauth)


async def freeze(server: Any) -> None:
    """SIGSTOP, and a moment for a loaded machine to deliver it."""
    server.pause()
    await task.deferLater(reactor, 0.05, lambda: None)


async def timed(tester: Any, user: str = "alice", password: str = "alice-pw") -> tuple[Any, float]:
    started = time.monotonic()
    result = await tester.request("GET", URL, headers=basic(user, password))
    return result, time.monotonic() - started


@pytest_twisted.ensureDeferred
async def test_request_timeout_bounds_the_whole_check_against_a_frozen_directory(slapd_factory: Any) -> None:
    server = slapd_factory()
    tester = make_tester(frozen_config(server.url, requestTimeout="300ms"))
    assert (await timed(tester))[0].status == 200  # a pooled connection is open
    await freeze(server)
    try:
        results = await defer.gatherResults([defer.ensureDeferred(timed(tester)) for _ in range(5)])
        for result, elapsed in results:
            # SPEC's fault answer (503, empty), but after 300 ms, not the 5 s per operation
            assert (result.status, result.body) == (503, b"")
            assert "requestTimeout 0.3s" in result.deny.reason
            assert 0.25 < elapsed < 3, elapsed  # the per-operation timeouts are 5 s
        assert (await tester.request("GET", OPEN)).status == 200  # other routes are not held up
    finally:
        server.resume()
    # the abandoned checks left the pool usable
    assert (await timed(tester))[0].status == 200
    assert (await timed(tester, "bob", "bob-pw"))[0].status == 403


@pytest_twisted.ensureDeferred
async def test_without_request_timeout_the_per_operation_timeout_applies(slapd_factory: Any) -> None:
    """The control for the test above: the same frozen directory, no
    Settings: the check takes the LDAP config's own requestTimeout (1 s)."""
    server = slapd_factory()
    tester = make_tester(ldap_config(server.url, cacheTtl=0, requestTimeout="1s", connectTimeout="1s"))
    assert (await timed(tester))[0].status == 200
    await freeze(server)
    try:
        result, elapsed = await timed(tester)
        assert (result.status, result.body) == (503, b"")
        assert elapsed >= 0.9
    finally:
        server.resume()


@pytest.mark.parametrize("status", [403, 504])
@pytest_twisted.ensureDeferred
async def test_status_on_error_for_a_frozen_and_for_an_unreachable_directory(slapd_factory: Any, status: int) -> None:
    server = slapd_factory()
    tester = make_tester(frozen_config(server.url, requestTimeout="300ms", statusOnError=status))
    assert (await timed(tester))[0].status == 200
    # decisions keep their own statuses
    assert (await timed(tester, "bob", "bob-pw"))[0].status == 403
    assert (await timed(tester, "alice", "wrong"))[0].status == 401
    await freeze(server)
    try:
        result, _ = await timed(tester)
        assert (result.status, result.body) == (status, b"")
        assert f"statusOnError {status}" in result.deny.reason
    finally:
        server.resume()
    # nothing listens: connection refused is an error too
    unreachable = make_tester(with_settings(ldap_config(f"ldap://127.0.0.1:{free_port()}", cacheTtl=0),
                                            statusOnError=status))
    result, _ = await timed(unreachable)
    assert (result.status, result.body) == (status, b"")
    assert "unavailable" in result.deny.reason


@pytest_twisted.ensureDeferred
async def test_status_on_error_covers_the_service_account_bind_failure(slapd_strict: Any) -> None:
    text = ldap_config(slapd_strict.url, cacheTtl=0, secret_password="not-the-password",
                       groupLookupSettings=SA_SETTINGS)
    assert (await timed(make_tester(text)))[0].status == 500  # SPEC, without settings
    result, _ = await timed(make_tester(with_settings(text, statusOnError=503)))
    assert (result.status, result.body) == (503, b"")
    # a wrong user password is a decision, not an error
    result, _ = await timed(make_tester(with_settings(text, statusOnError=503)), "alice", "wrong")
    assert result.status == 401


@pytest_twisted.ensureDeferred
async def test_failure_mode_allow_admits_on_errors_only(slapd_factory: Any) -> None:
    server = slapd_factory()
    tester = make_tester(frozen_config(server.url, requestTimeout="300ms", failureModeAllow=True))
    # while the directory answers, its decisions stand
    assert (await timed(tester, "bob", "bob-pw"))[0].status == 403
    assert (await timed(tester, "alice", "wrong"))[0].status == 401
    assert (await tester.request("GET", URL)).status == 401  # no credentials: a decision
    ok, _ = await timed(tester)
    assert ok.status == 200 and ok.ctx.principal == "alice"
    await freeze(server)
    try:
        # frozen: the check errs after 300 ms and the request goes on, with no identity
        result, elapsed = await timed(tester, "bob", "bob-pw")
        assert result.status == 200 and elapsed < 3
        assert result.ctx.principal is None and "extauth" not in result.ctx.state
        assert any("failureModeAllow" in str(d) for _, _, d in result.trace)
    finally:
        server.resume()
    assert (await timed(tester, "bob", "bob-pw"))[0].status == 403


@pytest.mark.parametrize("extauth, field, reason", [
    ({"requestTimeout": "soon"}, "spec.extauth.requestTimeout", "must be a duration"),
    ({"requestTimeout": "2m"}, "spec.extauth.requestTimeout", "from 1ms to 60s"),
    ({"failureModeAllow": "yes please"}, "spec.extauth.failureModeAllow", "must be true or false"),
    ({"statusOnError": 299}, "spec.extauth.statusOnError", "must be an HTTP status code"),
    ({"statusOnError": "503"}, "spec.extauth.statusOnError", "must be an HTTP status code"),
    ({"extauthzServerRef": {"name": "extauth", "namespace": "gloo-system"}}, "spec.extauth.extauthzServerRef",
     "twistgw runs extauth inside the gateway"),
    ({"requestTimeOut": "1s"}, "spec.extauth.requestTimeOut", "unknown field"),
])
def test_invalid_settings_are_configuration_errors(extauth: dict, field: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_tester(with_settings(ldap_config("ldap://127.0.0.1:1"), **extauth))
    (issue,) = info.value.issues
    assert (issue.resource, issue.field) == ("Settings", field)
    assert reason in issue.reason


def test_settings_are_checked_even_when_no_route_uses_extauth() -> None:
    text = with_settings("apiVersion: gateway.vendor.io/v1\nkind: VirtualService\nmetadata: {name: v}\n"
                         "spec: {virtualHost: {routes: [{directResponseAction: {status: 200}}]}}\n",
                         statusOnError=700)
    with pytest.raises(ConfigError) as info:
        make_tester(text)
    assert [i.field for i in info.value.issues] == ["spec.extauth.statusOnError"]
